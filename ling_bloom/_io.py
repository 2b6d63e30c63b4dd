"""File helpers behind save() and load(): an atomic write and a bounded read."""
from __future__ import annotations

import errno
import os
import stat
import tempfile
from typing import IO, Any, Dict, Optional, Union, cast

try:
    import fcntl
except ImportError:  # not POSIX: no file is mapped (MemoryFilter.open), none marked live
    fcntl = None  # type: ignore[assignment]

PathLike = Union[str, "os.PathLike[str]", "IO[bytes]"]


def _umask() -> int:
    """The process's umask, read without changing it where the system allows.

    Linux (4.7+) reports it in /proc/self/status; elsewhere it is read by setting it and
    setting it back (os.umask), which a thread creating a file at that instant could see.
    """
    try:
        with open("/proc/self/status", "rb") as f:
            for line in f:
                if line.startswith(b"Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


class NotARegularFileError(PermissionError):
    """Something other than a regular file (a symbolic link, a FIFO, a device, a
    directory) where ling_bloom keeps a served file's lock or add log, or the served file
    itself: refused before anything is read or written through it."""


def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISLNK, "a symbolic link"), (stat.S_ISFIFO, "a FIFO"),
                       (stat.S_ISDIR, "a directory"), (stat.S_ISSOCK, "a socket"),
                       (stat.S_ISCHR, "a device"), (stat.S_ISBLK, "a device")):
        if test(mode):
            return name
    return "not a file"


def _refuse(path: str, what: str) -> NotARegularFileError:
    return NotARegularFileError(
        errno.EPERM, f"not a regular file ({what}): refused, nothing is read or written "
        f"through it; remove it", path)


def open_regular(path: str, flags: int, *, create: bool = False, follow: bool = False) -> int:
    """A descriptor of the regular file at ``path``, opened with ``flags`` and never
    blocking (``O_NONBLOCK``: a FIFO's open returns at once).  A symbolic link at ``path``
    is not followed (unless ``follow``); ``create``: a missing file is made with
    ``O_CREAT | O_EXCL`` (mode 0o666 minus the umask), so never through a link.  Anything
    but a regular file raises NotARegularFileError (a PermissionError) naming ``path``,
    with nothing read or written."""
    base = (flags | os.O_CLOEXEC | getattr(os, "O_NONBLOCK", 0)
            | (0 if follow else getattr(os, "O_NOFOLLOW", 0)))
    while True:
        try:
            fd = os.open(path, base)
            break
        except FileNotFoundError:
            if not create:
                raise
            try:
                fd = os.open(path, base | os.O_CREAT | os.O_EXCL, 0o666)
                break
            except FileExistsError:
                continue  # made meanwhile, or a link planted: open (and check) what is there
        except OSError as e:
            if e.errno == errno.ELOOP and not follow:
                raise _refuse(path, "a symbolic link") from None
            if e.errno in (errno.EISDIR, errno.ENXIO):  # a directory; a FIFO with no reader
                raise _refuse(path, "a directory" if e.errno == errno.EISDIR
                              else "a FIFO or socket") from None
            raise
    try:
        mode = os.fstat(fd).st_mode
    except BaseException:
        os.close(fd)
        raise
    if not stat.S_ISREG(mode):
        os.close(fd)
        raise _refuse(path, _kind(mode))
    return fd


def atomic_write(path: PathLike, data: bytes) -> None:
    """Write data to path so that readers see the old file or the new one, never half of one.

    The bytes go to a temporary file in the same directory, are flushed to disk, and the
    temporary file is renamed over path.  The file gets the mode open() would give a new
    one (0o666 minus the umask), not mkstemp's 0o600: a filter saved by a warm-up job is
    readable by the web server's user when the umask allows it.  An error names path
    (not the temporary file).
    """
    if hasattr(path, "write"):
        # A binary file object (io.BytesIO, open(..., "wb"), a socket's makefile): written
        # at its position, not flushed or closed; atomicity is the caller's.
        path.write(data)
        return
    path = os.fspath(path)
    directory = os.path.dirname(os.path.abspath(path))
    tmp = None
    try:
        fd, tmp = tempfile.mkstemp(prefix=".ling_bloom-", suffix=".tmp", dir=directory)
        try:
            os.fchmod(fd, 0o666 & ~_umask())
        except BaseException:
            os.close(fd)
            raise
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as exc:
        if tmp is not None:
            try:
                os.unlink(tmp)
            except FileNotFoundError:
                pass
        if isinstance(exc, OSError) and exc.errno is not None:
            # mkstemp and os.replace name the temporary file (or the directory): say
            # which file could not be saved.
            raise type(exc)(exc.errno, f"{exc.strerror} (saving the filter)", path) from exc
        raise
    try:
        dfd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(dfd)
    except OSError:
        pass
    finally:
        os.close(dfd)


# Enough of a saved filter for its header to give the whole length (format.h).
HEADER_BYTES = 48
# A file is read in steps of at most this many bytes: a header that claims more than the
# file holds never gets that much memory allocated for it.
STEP = 1 << 24
# A saved filter's trailer: the checksum after the payload (format.h).
TRAILER = 8


def peek(head: bytes) -> "Optional[Dict[str, Any]]":
    """The header at the start of head as ``_core.peek_header`` reads it (format.c, the one
    reader of the layout), or None when head does not start a saved filter."""
    from ._core import CorruptFileError, peek_header

    try:
        return peek_header(head)
    except CorruptFileError:
        return None


def saved_kind(head: bytes) -> Optional[str]:
    """The name of the type whose saved filter head starts (its first 48 bytes), or None."""
    h = peek(head)
    return None if h is None else h["kind"]


def _read_exactly(f: "IO[bytes]", n: int) -> bytes:
    parts = []
    while n > 0:
        chunk = f.read(min(n, STEP))
        if not chunk:
            break
        if not isinstance(chunk, (bytes, bytearray)):
            raise TypeError(f"load() needs a binary file object; read() gave "
                            f"{type(chunk).__name__}")
        parts.append(bytes(chunk))
        n -= len(chunk)
    return b"".join(parts)


def _read_stream(f: "IO[bytes]") -> bytes:
    """One saved filter from a binary file object, from its position: the header, then as
    many bytes as it gives, no more (the stream may go on: filters saved one after the
    other load one after the other).

    The length is asked of the header with the bytes read so far: a chain's header gives
    first the least its stages need, and sizes them only once that much has been read,
    so a short stream is refused (by from_bytes) for its length.  A short one is returned
    as it is, for from_bytes to say what is missing."""
    from ._core import _saved_length

    data = _read_exactly(f, HEADER_BYTES)
    if len(data) < HEADER_BYTES:
        return data
    head = data
    while True:
        total, whole = _saved_length(head, len(data))
        if total > len(data):
            data += _read_exactly(f, total - len(data))
            if len(data) < total:
                return data
        if whole:
            return data


def _lock(fd: int, how: int) -> None:
    try:
        fcntl.flock(fd, how)
    except OSError:  # a file system without locks: go on without
        pass


def _as_it_is_now(f: "IO[bytes]", data: bytes) -> bytes:
    """A MemoryFilter's file read whole, confirmed against the file as it is now.

    A process that opens a sealed file with MemoryFilter.open(path, "r+") marks it live in
    place: a new header and trailer (the trailer of a live file checksums its header only,
    its bits change under it).  A read that overlapped the marking holds the old header
    and the new trailer, or the other way round.  The marking happens under the file's
    lock (flock, exclusive), so the header and trailer read again under the lock (shared)
    are a pair: when they are a live file's, they replace the ones read before (any bits
    go with a live header; from_bytes checks the header against its checksum).  When they
    are not, the file was sealed all along, and nothing of it changed.
    """
    header = peek(data) if fcntl is not None else None
    if header is None or header["kind"] != "MemoryFilter":
        return data
    size = header["header_bytes"]
    if len(data) < size + TRAILER:
        return data
    fd = f.fileno()
    _lock(fd, fcntl.LOCK_SH)
    try:
        head = os.pread(fd, size, 0)
        trailer = os.pread(fd, TRAILER, len(data) - TRAILER)
    finally:
        _lock(fd, fcntl.LOCK_UN)
    now = peek(head)
    if (len(head) == size and len(trailer) == TRAILER and now is not None
            and now["kind"] == "MemoryFilter" and now["live"]
            and (head != data[:size] or trailer != data[-TRAILER:])):
        return head + data[size:-TRAILER] + trailer
    return data


def read_file(path: PathLike) -> bytes:
    """The saved filter at path (or from a binary file object), read no further than its
    header says it goes.

    A file that is not a saved filter (``/dev/zero``, a huge log) raises CorruptFileError
    (a BloomError and a ValueError) after its first 48 bytes.  So does a file whose header
    claims more bytes than the file has, or fewer, before any more of it is read: the
    length the header gives is compared with the file's first (for a chain, the least its
    stages need, before they are sized).  A file shorter than 48 bytes is returned as it
    is, for from_bytes to say what is missing; so is a stream's (a pipe's) short filter.
    """
    if hasattr(path, "read"):
        return _read_stream(cast("IO[bytes]", path))
    with open(os.fspath(path), "rb") as f:
        return _read_open_file(f)


def read_regular_file(path: Union[str, "os.PathLike[str]"]) -> bytes:
    """``read_file`` of the regular file at path (a link to one is followed); anything
    else (a FIFO, a device, a directory) raises NotARegularFileError at once, never
    blocking on its open or its reads (a served file: a worker must not hang on it)."""
    fd = open_regular(os.fspath(path), os.O_RDONLY, follow=True)
    with os.fdopen(fd, "rb") as f:
        return _read_open_file(f)


def _read_open_file(f: "IO[bytes]") -> bytes:
    """read_file's work on an open file (a regular one is read no further than its header
    says, and checked against its size)."""
    from ._core import CorruptFileError, _saved_length

    st = os.fstat(f.fileno())
    size = st.st_size if stat.S_ISREG(st.st_mode) else 0
    if not size:
        # Not a regular file (a pipe, /dev/zero), or one that gives no length (an
        # empty file, one of /proc): read as a stream.
        data = _read_stream(f)
    else:
        head = _read_exactly(f, HEADER_BYTES)
        if len(head) < HEADER_BYTES:
            return head
        total, whole = _saved_length(head, size)
        if not whole or total > size:
            raise CorruptFileError(
                f"not a valid saved filter: the file holds {size} bytes, its header "
                f"claims {'' if whole else 'at least '}{total} (truncated)")
        if total < size:
            raise CorruptFileError(f"not a valid saved filter: the file goes on past the "
                                   f"{total} bytes its header describes")
        data = head + _read_exactly(f, total - len(head))
        if len(data) < total:  # it shrank while it was read
            return data
        data = _as_it_is_now(f, data)
    if f.read(1):
        raise CorruptFileError(f"not a valid saved filter: the file goes on past the "
                               f"{len(data)} bytes its header describes")
    return data
