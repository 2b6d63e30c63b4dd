"""The add log of a served filter file: how keys added in one worker process reach every
other worker, and survive the warm-up that replaces the file.

Beside ``FILE`` (a saved filter that worker processes serve, through ``FileFilter``):

``FILE.adds``  the add log: a header line, then one record per added key, ``\\n<hex>\\n``.
               Every ``FileFilter.add`` appends its key here (``O_APPEND``: one write per
               batch, never interleaved with another process's) before it returns.  A
               worker whose filter says "absent" first reads any records appended since it
               last looked (one ``fstat``), so a key added anywhere is present everywhere
               from the moment its ``add`` returned.  A record torn by a crash is harmless:
               each record starts and ends with a newline, so the next one still parses,
               and a torn one is at worst a key nobody added (a false positive).
``FILE.lock``  ``flock``: adds hold it shared, ``publish`` exclusive, a reload shared (so a
               worker never pairs a new file with the old log).
``FILE.warmup.lock``  held by a warm-up from its start to its publish, so two warm-ups of
               one file never overlap (the second waits).

``publish(filter, FILE)`` (what the warm-up commands call instead of ``save``): with the
lock exclusive, every key of the log is added to ``filter``, ``filter`` is saved over
``FILE`` (temp file + rename), a new empty log replaces the old one and the old one is
sealed (a last ``sealed`` record, so every worker still reading it reloads at its next
"absent").  The new file thus holds every key added before the publish, whenever its
warm-up's snapshot of the database was taken: a key is always in the file, the log, or
both.
"""
from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import tempfile
import uuid
from typing import Any, Iterable, Iterator, List, Optional, Tuple

from ._io import _umask  # the process's umask, read without changing it
from ._keys import key_bytes  # noqa: F401  (re-exported: ling_bloom._addlog.key_bytes)

__all__ = ["AddLog", "WarmupConflictError", "key_bytes", "publish", "begin"]

HEADER = b"ling_bloom add log v1 "
SEALED = b"sealed"


class WarmupConflictError(RuntimeError):
    """Another warm-up replaced the file while this one ran: publishing now could drop
    keys added in between, so nothing was written.  Run the warm-up again."""


def _encode(keys: Iterable[bytes]) -> bytes:
    return b"".join(b"\n" + k.hex().encode("ascii") + b"\n" for k in keys)


def parse(data: bytes) -> Tuple[List[bytes], int, bool]:
    """The keys of the complete records in ``data`` (log bytes after the header), how many
    bytes they span, and whether a ``sealed`` record was met (nothing after it counts)."""
    end = data.rfind(b"\n") + 1  # a record still being written is read next time
    keys: List[bytes] = []
    for line in data[:end].split(b"\n"):
        if not line:
            continue
        if line == SEALED:
            return keys, end, True
        try:
            keys.append(bytes.fromhex(line.decode("ascii")))
        except ValueError:
            continue  # torn by a crash mid-write: the next record parses regardless
    return keys, end, False


class LogReader:
    """One process's open add log: where it has read up to, and the keys it holds."""

    def __init__(self, fd: int, ino: int, gen: bytes, offset: int):
        self.fd, self.ino, self.gen, self.offset = fd, ino, gen, offset

    def grew(self, since: Optional[int] = None) -> bool:
        """Whether the log holds bytes past ``since`` (default: what was read).  The size
        comes from lseek (cheaper than fstat): reads use pread and writes O_APPEND, so the
        descriptor's own offset is never used."""
        return os.lseek(self.fd, 0, os.SEEK_END) > (self.offset if since is None else since)

    def peek(self) -> Tuple[List[bytes], int, bool]:
        """Records appended since the last read: (keys, the offset after them, sealed).
        The caller applies the keys, then moves ``offset``: until then another thread's
        ``grew()`` still says there is something to wait for."""
        size = os.fstat(self.fd).st_size
        if size <= self.offset:
            return [], self.offset, False
        data = os.pread(self.fd, size - self.offset, self.offset)
        keys, used, sealed = parse(data)
        return keys, self.offset + used, sealed

    def read(self) -> Tuple[List[bytes], bool]:
        """``peek`` and move past what it read (a reader no other thread uses yet)."""
        keys, self.offset, sealed = self.peek()
        return keys, sealed

    def append(self, keys: List[bytes]) -> None:
        data = _encode(keys)
        n = os.write(self.fd, data)
        if n != len(data):
            # A short write (a full disk): what was written is a torn record, harmless;
            # write the records whole once more, or fail the add.
            if os.write(self.fd, b"\n" + data) != len(data) + 1:
                raise OSError(errno.ENOSPC, "the add log could not be written whole")

    def close(self, _close: Any = os.close) -> None:
        # os.close bound at definition: at interpreter exit __del__ may run after this
        # module's globals (os) are cleared
        fd, self.fd = getattr(self, "fd", -1), -1
        if fd >= 0:
            try:
                _close(fd)
            except OSError:
                pass

    # A reader replaced by a reload is not closed while a lookup in another thread may
    # still hold it (its descriptor number could be reused by another file meanwhile):
    # it closes when the last reference goes.
    __del__ = close


class AddLog:
    """The add log and locks of one filter file (see the module's text)."""

    def __init__(self, path: str):
        self.path = os.fspath(path)
        self.log_path = self.path + ".adds"
        self.lock_path = self.path + ".lock"
        self.warmup_lock_path = self.path + ".warmup.lock"
        self._lock_fd: Optional[int] = None
        self._lock_pid = 0

    # -- locks (flock is per open file: a forked child opens its own)
    def _fd(self) -> int:
        if self._lock_fd is None or self._lock_pid != os.getpid():
            self._lock_fd = os.open(self.lock_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o666)
            self._lock_pid = os.getpid()
        return self._lock_fd

    @contextlib.contextmanager
    def locked(self, exclusive: bool = False) -> Iterator[None]:
        fd = self._fd()
        fcntl.flock(fd, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
        try:
            yield
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)

    @contextlib.contextmanager
    def warmup_lock(self) -> Iterator[None]:
        """Held by a warm-up from before its snapshot to after its publish."""
        fd = os.open(self.warmup_lock_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o666)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    def close(self) -> None:
        if self._lock_fd is not None and self._lock_pid == os.getpid():
            os.close(self._lock_fd)
        self._lock_fd = None

    # -- the log (call with the lock held)
    def _new_log_file(self) -> str:
        d = os.path.dirname(os.path.abspath(self.log_path))
        fd, tmp = tempfile.mkstemp(prefix=".bloom-adds-", dir=d)
        try:
            os.fchmod(fd, 0o666 & ~_umask())
            os.write(fd, HEADER + uuid.uuid4().hex.encode("ascii") + b"\n")
        finally:
            os.close(fd)
        return tmp

    def open_log(self, create: bool = True) -> Optional[LogReader]:
        """The current log, opened for reading and appending, positioned after its header
        (created when missing and ``create``).  None when it does not exist."""
        while True:
            try:
                fd = os.open(self.log_path, os.O_RDWR | os.O_APPEND | os.O_CLOEXEC)
            except FileNotFoundError:
                if not create:
                    return None
                tmp = self._new_log_file()
                try:
                    os.link(tmp, self.log_path)  # never over a log another process made
                except FileExistsError:
                    pass
                finally:
                    os.unlink(tmp)
                continue
            head = os.pread(fd, 128, 0)
            nl = head.find(b"\n")
            if not head.startswith(HEADER) or nl < 0:
                os.close(fd)
                raise OSError(errno.EINVAL, f"{self.log_path} is not a ling_bloom add log")
            return LogReader(fd, os.fstat(fd).st_ino, head[len(HEADER):nl], nl + 1)

    def current_ino(self) -> Optional[int]:
        try:
            return os.stat(self.log_path).st_ino
        except FileNotFoundError:
            return None


def begin(path: Any) -> Optional[bytes]:
    """The add log's generation now: give it to ``publish`` as ``since`` to have it refuse
    (WarmupConflictError) when another publish came in between."""
    log = AddLog(os.fspath(path))
    try:
        with log.locked():
            reader = log.open_log(create=True)
            assert reader is not None
            reader.close()
            return reader.gen
    finally:
        log.close()


def publish(filter: Any, path: Any, since: Optional[bytes] = None) -> int:
    """Save ``filter`` over ``path`` for the workers that serve it, with every key of the
    add log added first; start a new log and seal the old one.  Returns the number of
    logged keys carried into the file.  ``since``: the generation ``begin()`` gave when the
    warm-up started."""
    path = os.fspath(path)
    log = AddLog(path)
    try:
        with log.locked(exclusive=True):
            old = log.open_log(create=False)
            try:
                if since is not None and old is not None and old.gen != since:
                    raise WarmupConflictError(
                        f"another warm-up replaced {path} while this one ran; nothing was "
                        f"written: run it again")
                carried = 0
                if old is not None:
                    keys, _ = old.read()
                    if keys:
                        filter.update(keys)
                        carried = len(keys)
                tmp = log._new_log_file()
                try:
                    filter.save(path)
                    os.replace(tmp, log.log_path)
                except BaseException:
                    with contextlib.suppress(OSError):
                        os.unlink(tmp)
                    raise
                if old is not None:
                    os.write(old.fd, b"\n" + SEALED + b"\n")
                return carried
            finally:
                if old is not None:
                    old.close()
    finally:
        log.close()
