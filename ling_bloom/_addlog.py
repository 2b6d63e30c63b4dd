"""The add log of a served filter file: how keys added in one worker process reach every
other worker, and survive the warm-up that replaces the file.

Beside ``FILE`` (a saved filter that worker processes serve, through ``FileFilter``):

``FILE.adds``  the add log: a header line, then one record per added key, ``\\n<hex>\\n``.
               Every ``FileFilter.add`` appends its key here (``O_APPEND``: one write per
               batch, never interleaved with another process's) before it returns.  A
               worker whose filter says "absent" first reads any records appended since it
               last looked (one ``lseek``), so a key added anywhere is present everywhere
               from the moment its ``add`` returned.  A record torn by a crash is harmless:
               each record starts and ends with a newline, so the next one still parses,
               and a torn one is at worst a key nobody added (a false positive).  A torn
               record at the end is read once: the log is read again when it grows.  A
               log truncated under the workers (logrotate's copytruncate) is told by its
               header or its size when it is next read, and replaced by a whole log with
               the records it still holds (``AddLog.repair``, logged); never rotate it.
``FILE.lock``  ``flock``: adds hold it shared, ``publish`` exclusive, a reload shared (so a
               worker never pairs a new file with the old log).  ``flock`` needs no write
               access: a worker that may only read the lock and the log (another user's
               files, mode 0644) still locks and reads them; only its own adds are refused.
``FILE.warmup.lock``  held by a warm-up from its start to its publish, so two warm-ups of
               one file never overlap (the second waits).

These three are opened without following a symbolic link and without blocking (a FIFO),
and only when they are regular files; anything else at their names raises a
``PermissionError`` naming the path, before anything is read or written.  One that is
missing is created with ``O_EXCL``, never through a link planted at its name.

``publish(filter, FILE)`` (what the warm-up commands call instead of ``save``): with the
lock exclusive, every key of the log is added to ``filter``, ``filter`` is written to a
temporary file and a new empty log made; the old log is sealed (a ``sealed`` record, so
every worker still reading it reloads at its next "absent"); then the temporary file is
renamed over ``FILE``, the one step that publishes.  Whatever can fail comes before it and
leaves ``FILE`` and the log as they were; after it, the new log replaces the old one, best
effort: when that fails the old log stays in use (``FILE`` holds its keys anyway).  A seal
counts only when the log was replaced: a worker that reads one and finds the same log after
its reload reads on past it.  The temporary files are named for ``FILE``; a publish first
removes those a killed one left (each the size of the filter).  The new file thus holds every key added before the publish,
whenever its warm-up's snapshot of the database was taken: a key is always in the file,
the log, or both.
"""
from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import os
import tempfile
import uuid
from typing import Any, Callable, Iterable, Iterator, List, Optional, Tuple

from ._io import NotARegularFileError, _umask, open_regular
from ._keys import key_bytes  # noqa: F401  (re-exported: ling_bloom._addlog.key_bytes)

__all__ = ["AddLog", "BrokenLogError", "NotARegularFileError", "WarmupConflictError", "key_bytes", "log_key",
           "open_regular", "publish", "begin"]

HEADER = b"ling_bloom add log v1 "
SEALED = b"sealed"
# A log is read this much at a time (a whole line more when one is longer).
CHUNK = 1 << 22


class BrokenLogError(OSError):
    """The add log at its name is not a whole log any more (truncated or emptied under the
    workers, by logrotate's copytruncate or ``: > FILE.adds``): ``AddLog.repair`` replaces
    it, carrying the records it still holds."""

    def __init__(self, path: str, ino: int, read: int = 0):
        super().__init__(errno.EINVAL, "not a ling_bloom add log (truncated?)", path)
        self.ino = ino
        self.read = read  # how far a reader had read it: a log shorter is truncated


class WarmupConflictError(RuntimeError):
    """Another warm-up replaced the file while this one ran: publishing now could drop
    keys added in between, so nothing was written.  Run the warm-up again."""


def _open_shared(path: str, create: bool, append: int = 0) -> Tuple[int, bool]:
    """``open_regular`` read-write (``append``: ``O_APPEND``), or read-only where this
    process may not write the file (another user's, mode 0644): (descriptor, writable)."""
    try:
        return open_regular(path, os.O_RDWR | append, create=create), True
    except NotARegularFileError:
        raise
    except PermissionError:
        return open_regular(path, os.O_RDONLY), False


def log_key(key: Any) -> bytes:
    """The bytes the filters hash for ``key``, which are the bytes the log records: the C
    core's own conversion (csrc/py/keys.c, ``ling_bloom._core.key_bytes``), so a key is
    logged exactly as every filter keys it (an int subclass or an int-like by its int, a
    str subclass by its UTF-8, a buffer by its bytes).  Anything else is a TypeError, an
    empty key an EmptyKeyError, as from the filters."""
    from ._core import key_bytes as _c_key_bytes

    return _c_key_bytes(key)


def _encode(keys: Iterable[bytes]) -> bytes:
    # each key one record, "\n" + its hex + "\n" (joined in C: no Python step per key)
    text = "\n\n".join(map(bytes.hex, keys))
    return ("\n" + text + "\n").encode("ascii") if text else b""


def parse(data: bytes) -> Tuple[List[bytes], int, bool]:
    """The keys of the complete records in ``data`` (log bytes after the header), how many
    bytes they span, and whether a ``sealed`` record was met.  Records after a seal count
    as well: a seal whose publish did not replace the log is read past."""
    end = data.rfind(b"\n") + 1  # a record still being written is read next time
    keys: List[bytes] = []
    sealed = False
    for line in data[:end].split(b"\n"):
        if not line:
            continue
        if line == SEALED:
            sealed = True
            continue
        try:
            keys.append(bytes.fromhex(line.decode("ascii")))
        except ValueError:
            continue  # torn by a crash mid-write: the next record parses regardless
    return keys, end, sealed


class LogReader:
    """One process's open add log: where it has read up to.

    ``pos`` is (offset, seen), replaced whole (a lookup in another thread reads it without
    the lock): every record before ``offset`` was applied, and the bytes from ``offset`` to
    ``seen`` (the log's size when it was last read) hold no complete record, only the start
    of one (torn by a crash, or still being written).  The log is only ever appended to, so
    it needs reading again only when it grows past ``seen``."""

    def __init__(self, fd: int, ino: int, gen: bytes, offset: int, writable: bool = True,
                 path: Optional[str] = None, head: bytes = b""):
        self.fd, self.ino, self.gen, self.writable, self.path = fd, ino, gen, writable, path
        self.pos = (offset, offset)
        # the header line (empty: not checked): a log truncated under this reader is told
        # by it, or by a size below what was read
        self.head = head

    @property
    def offset(self) -> int:
        return self.pos[0]

    def grew(self, since: Optional[int] = None) -> bool:
        """Whether the log is longer than ``since`` (default: what was last read,
        ``pos[1]``).  The size comes from lseek (cheaper than fstat): reads use pread and
        writes O_APPEND, so the descriptor's own offset is never used."""
        # != rather than >: a log that shrank (truncated) is looked at too (peek says so)
        return os.lseek(self.fd, 0, os.SEEK_END) != (self.pos[1] if since is None else since)

    def peek(self, limit: Optional[int] = CHUNK) -> Tuple[List[bytes], Tuple[int, int], bool]:
        """Records appended since the last read, at most about ``limit`` bytes of them:
        (keys, the ``pos`` after them, sealed).  The caller applies the keys, then sets
        ``pos``: until then another thread's ``grew()`` still says there is something to
        wait for.  ``pos[1]`` below the log's size: there is more to read."""
        size = os.fstat(self.fd).st_size
        offset, seen = self.pos
        if size < offset or (self.head and os.pread(self.fd, len(self.head), 0) != self.head):
            raise BrokenLogError(self.path or "", self.ino, offset)  # truncated since read
        if size <= seen:
            return [], self.pos, False
        want = size - offset if limit is None else min(size - offset, limit)
        data = os.pread(self.fd, want, offset)
        if want < size - offset and b"\n" not in data:
            data = os.pread(self.fd, size - offset, offset)  # one line longer than limit
        keys, used, sealed = parse(data)
        return keys, (offset + used, offset + len(data)), sealed

    def read_each(self, apply: Callable[[List[bytes]], Any]) -> Tuple[int, bool]:
        """Every record to the end, ``apply``'d a chunk at a time, and move past them (a
        reader no other thread uses yet): (how many keys, whether a seal was met)."""
        count, sealed = 0, False
        while True:
            before = self.pos
            keys, pos, s = self.peek()
            if keys:
                apply(keys)
                count += len(keys)
            self.pos, sealed = pos, sealed or s
            if pos == before:
                return count, sealed

    def read(self) -> Tuple[List[bytes], bool]:
        """``read_each`` into one list."""
        keys: List[bytes] = []
        _, sealed = self.read_each(keys.extend)
        return keys, sealed

    def append(self, keys: List[bytes]) -> None:
        if not self.writable:
            raise PermissionError(errno.EACCES, "this process may read the add log but not "
                                  "write it (another user's file?): the key was not added",
                                  self.path)
        data = _encode(keys)
        n = os.write(self.fd, data)
        if n != len(data):
            # A short write (a full disk): what was written is a torn record, harmless;
            # write the records whole once more, or fail the add.
            if os.write(self.fd, b"\n" + data) != len(data) + 1:
                raise OSError(errno.ENOSPC, "the add log could not be written whole")

    def seal(self) -> None:
        """Append the seal record, whole, or raise (the publish fails before it replaced
        anything; a part written is a torn record, or a seal read past)."""
        if not self.writable:
            raise PermissionError(errno.EACCES, "the add log is not writable by this "
                                  "process: it cannot be sealed, nothing was published",
                                  self.path)
        record = b"\n" + SEALED + b"\n"
        if os.write(self.fd, record) != len(record):
            raise OSError(errno.ENOSPC, "the add log's seal could not be written whole: "
                          "nothing was published")

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
        # Temporary files of this FILE (a new log, a file being published) are named
        # with a tag of its name: a publish removes those a killed one left behind.
        tag = hashlib.sha1(os.path.basename(self.path).encode("utf-8", "surrogateescape"))
        self.tmp_prefixes = (f".bloom-publish-{tag.hexdigest()[:12]}-",
                             f".bloom-adds-{tag.hexdigest()[:12]}-")
        self._lock_fd: Optional[int] = None
        self._lock_pid = 0

    # -- locks (flock is per open file: a forked child opens its own; read-only will do)
    def _fd(self) -> int:
        if self._lock_fd is None or self._lock_pid != os.getpid():
            self._lock_fd, _ = _open_shared(self.lock_path, create=True)
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
        fd, _ = _open_shared(self.warmup_lock_path, create=True)
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
        fd, tmp = tempfile.mkstemp(prefix=self.tmp_prefixes[1], dir=d)
        try:
            os.fchmod(fd, 0o666 & ~_umask())
            record = HEADER + uuid.uuid4().hex.encode("ascii") + b"\n"
            if os.write(fd, record) != len(record):
                raise OSError(errno.ENOSPC, "a new add log could not be written", tmp)
        except BaseException:
            os.close(fd)
            os.unlink(tmp)
            raise
        os.close(fd)
        return tmp

    def open_log(self, create: bool = True) -> Optional[LogReader]:
        """The current log, opened for reading and appending (for reading only where this
        process may not write it), positioned after its header (created when missing and
        ``create``).  None when it does not exist."""
        while True:
            try:
                fd, writable = _open_shared(self.log_path, create=False, append=os.O_APPEND)
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
                ino = os.fstat(fd).st_ino
                os.close(fd)
                raise BrokenLogError(self.log_path, ino)
            return LogReader(fd, os.fstat(fd).st_ino, head[len(HEADER):nl], nl + 1,
                             writable, self.log_path, head[:nl + 1])

    def repair(self, ino: int, read: int = 0) -> bool:
        """Replace the log of inode ``ino`` found broken (truncated: no header, or shorter
        than ``read``, where a reader had read it to) by a new log holding every record it
        still has; with the lock held exclusive.  False when it was replaced meanwhile, or
        is whole after all."""
        try:
            fd, writable = _open_shared(self.log_path, create=False, append=os.O_APPEND)
        except FileNotFoundError:
            return False
        broken = LogReader(fd, ino, b"", 0, writable, self.log_path)  # owns fd
        try:
            if os.fstat(fd).st_ino != ino:
                return False
            head = os.pread(fd, 128, 0)
            if head.startswith(HEADER) and b"\n" in head and os.fstat(fd).st_size >= read:
                return False
            tmp = self._new_log_file()
            try:
                out = os.open(tmp, os.O_WRONLY | os.O_APPEND | os.O_CLOEXEC)
                try:
                    def carry(keys: List[bytes]) -> None:
                        data = _encode(keys)
                        if os.write(out, data) != len(data):
                            raise OSError(errno.ENOSPC, "the add log could not be written "
                                          "whole", tmp)

                    broken.read_each(carry)
                finally:
                    os.close(out)
                if writable:
                    # every process still reading it reloads at its next "absent" (as
                    # after a publish) and finds the new log
                    with contextlib.suppress(OSError):
                        broken.seal()
                os.replace(tmp, self.log_path)
            except BaseException:
                with contextlib.suppress(OSError):
                    os.unlink(tmp)
                raise
            return True
        finally:
            broken.close()

    def remove_stale(self) -> None:
        """Remove the temporary files of this FILE that a process killed midway left (a
        warm-up killed while it published: a file of the filter's size each time); with
        the lock held exclusive, so none of them is in use."""
        d = os.path.dirname(os.path.abspath(self.path))
        try:
            names = os.listdir(d)
        except OSError:
            return
        for name in names:
            if name.startswith(self.tmp_prefixes):
                with contextlib.suppress(OSError):
                    os.unlink(os.path.join(d, name))

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


def _fsync_dir(directory: str) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def publish(filter: Any, path: Any, since: Optional[bytes] = None) -> int:
    """Save ``filter`` over ``path`` for the workers that serve it, with every key of the
    add log added first; start a new log and seal the old one.  Returns the number of
    logged keys carried into the file.  ``since``: the generation ``begin()`` gave when the
    warm-up started.

    An exception means nothing was published: ``path`` and its log are as they were.
    Once ``path`` is replaced, nothing can fail the call (see the module's text)."""
    path = os.fspath(path)
    log = AddLog(path)
    try:
        with log.locked(exclusive=True):
            log.remove_stale()
            try:
                old = log.open_log(create=False)
            except BrokenLogError as e:  # truncated: replaced by a whole one, then used
                log.repair(e.ino)
                old = log.open_log(create=False)
            try:
                if since is not None and old is not None and old.gen != since:
                    raise WarmupConflictError(
                        f"another warm-up replaced {path} while this one ran; nothing was "
                        f"written: run it again")
                carried = 0
                if old is not None:  # a chunk at a time: never the whole log in memory
                    carried, _ = old.read_each(filter.update)
                _replace(filter, path, log, old)
                return carried
            finally:
                if old is not None:
                    old.close()
    finally:
        log.close()


def _replace(filter: Any, path: str, log: AddLog, old: Optional[LogReader]) -> None:
    directory = os.path.dirname(os.path.abspath(path))
    file_tmp: Optional[str] = None
    log_tmp: Optional[str] = None
    try:
        # Everything that can fail, before anything the workers see is replaced.
        fd, file_tmp = tempfile.mkstemp(prefix=log.tmp_prefixes[0], dir=directory)
        try:
            os.fchmod(fd, 0o666 & ~_umask())  # as save() gives it, whatever save() does
        except BaseException:
            os.close(fd)
            raise
        # Written into this temporary file itself (no temporary file of save()'s own,
        # which a killed warm-up would leave behind under a name no publish knows).
        with os.fdopen(fd, "wb") as f:
            try:
                filter.save(f)
                by_path = False
            except TypeError:  # a save() of paths only
                by_path = True
            else:
                f.flush()
                os.fsync(f.fileno())
        if by_path:
            filter.save(file_tmp)  # written whole and flushed (temporary file, fsync, rename)
        log_tmp = log._new_log_file()
        if old is not None:
            old.seal()  # a worker that reads it reloads, which waits for this lock
        os.replace(file_tmp, path)  # published
        file_tmp = None
    except BaseException:
        for tmp in (file_tmp, log_tmp):
            if tmp is not None:
                with contextlib.suppress(OSError):
                    os.unlink(tmp)
        raise
    # Best effort from here: FILE holds every logged key, the old log can stay in use.
    assert log_tmp is not None
    try:
        os.replace(log_tmp, log.log_path)
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(log_tmp)
    _fsync_dir(directory)
