"""``FileFilter``: a saved filter file that every worker process of a server serves, with
keys added in any worker seen by all of them.

The web integrations hold their FILE through it (Django ``FILE``, Flask
``LING_BLOOM_FILES``, or one passed to the ASGI middleware); the warm-up commands replace
the file with ``ling_bloom.warmup.publish``.  How adds are shared is in
``ling_bloom._addlog``: each add goes to the file's add log before it returns, and a worker
whose filter says "absent" reads the log's new records first.
"""
from __future__ import annotations

import logging
import os
import threading
import time
from typing import Any, Callable, Iterable, List, Optional, Set, Union

from ._addlog import AddLog, LogReader
from ._core import ClosedError
from ._keys import key_bytes

__all__ = ["FileFilter", "UnsharedFilterWarning", "shares_adds"]


class FileFilter:
    """A saved filter file that a running process keeps current and adds to, shared with
    every other process that serves the same file.

    ``FileFilter(path, check_every=2.0, unwarmed="serve", *, mapped=False)``

    Lookups: the file's filter (loaded, or mapped with ``mapped=True``), plus every key any
    process added through a FileFilter of the same path since the file was published:
    ``add``/``update`` write the key to the add log ``path + ".adds"`` before they
    return, and a lookup the filter answers "absent" first reads the log's new records
    (one ``fstat`` when there are none).  So a key added in one worker is present in
    every worker from the moment ``add`` returned: no false negative across processes,
    warm-ups, reloads or restarts.

    Replacing the file: ``ling_bloom.warmup.publish(filter, path)`` (the warm-up commands
    call it) folds the log into the new file, starts a new log and seals the old one; a
    process still on the old file reloads at its next "absent" answer.  A file replaced
    another way (``save(path)``) is picked up at the next check (at most every
    ``check_every`` seconds), and the log is replayed over it.  A file that fails to
    load is logged and the current filter kept.

    Before the file exists ("unwarmed", logged once): ``unwarmed="serve"`` (the default)
    answers True to every test -- requests are served unguarded until the first warm-up
    -- and ``"reject"`` answers False, except for keys added since.  ``warmed`` says which;
    ``filter`` is the current filter or None.

    ``mapped=True``: a MemoryFilter file is mapped (``MemoryFilter.open(path, "r+")``)
    instead of read into each process, so all workers share one copy of its bits and an
    add sets them for everyone; where the file cannot be opened for writing it is mapped
    read-only and the log's keys are kept beside it.  Other kinds are loaded as usual.

    Removes are not shared, so a FileFilter has no ``remove``: a guard remembers deleted
    keys instead (``Guard.deleted``).  The directory of ``path`` must be writable by every
    process that adds (the log and ``path + ".lock"`` live there).
    """

    def __init__(self, path: Union[str, "os.PathLike[str]"], check_every: float = 2.0,
                 unwarmed: str = "serve", *, clock: Callable[[], float] = time.monotonic,
                 logger: Any = None, mapped: bool = False):
        if unwarmed not in ("serve", "reject"):
            raise ValueError(f"unwarmed must be 'serve' or 'reject', not {unwarmed!r}")
        if check_every < 0:
            raise ValueError("check_every must be >= 0")
        self.path = os.fspath(path)
        self.check_every = float(check_every)
        self.unwarmed = unwarmed
        self.mapped = bool(mapped)
        self._clock = clock
        self._log = logger if logger is not None else logging.getLogger("ling_bloom.warmup")
        self._lock = threading.RLock()
        self._addlog = AddLog(self.path)
        self._reader: Optional[LogReader] = None
        self._filter: Any = None
        self._identity: Any = None
        self._next_check = float("-inf")
        self._logged: Set[bytes] = set()   # keys of the current log (all applied)
        self._aside: Set[bytes] = set()    # logged keys no filter of ours holds
        self._warned_unwarmed = False
        self._warned_log = False
        self._failed: Any = None  # the identity of a file that failed to load
        self.reloads = 0
        self._pid = os.getpid()
        # Set by the ASGI middleware (an event loop must not wait for a load): a reload
        # runs in a thread, and lookups meanwhile do not wait for it (see test()).
        self.reload_in_thread = False
        self._reloader: Optional[threading.Thread] = None
        self._loading = False
        self._spawn_lock = threading.Lock()
        self.refresh(force=True)

    def _after_fork(self) -> None:
        # A forked child (a server's workers from a preloaded app) shares the log's file
        # offset-free reads and appends with its parent; it needs only its own thread lock.
        if self._pid != os.getpid():
            self._pid = os.getpid()
            self._lock = threading.RLock()
            # a reload thread of the parent is not the child's
            self._spawn_lock = threading.Lock()
            self._reloader = None
            self._loading = False

    # -- the file and its log
    def _stat(self) -> Any:
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            return None
        return (st.st_ino, st.st_mtime_ns, st.st_size)

    def refresh(self, force: bool = False) -> bool:
        """Check the file now (``force``) or when the interval has passed; reload it when
        it was replaced.  True when a new filter was swapped in."""
        now = self._clock()
        if not force and now < self._next_check:
            return False
        self._after_fork()
        with self._lock:
            if not force and now < self._next_check:
                return False
            self._next_check = now + self.check_every
            try:
                identity = self._stat()
            except OSError as e:
                self._log.error("ling_bloom: cannot stat %s (%s): keeping the current filter",
                                self.path, e)
                return False
            if identity is None and self._filter is None and self._reader is not None:
                return False  # still unwarmed, log open
            if (identity is not None and identity == self._identity and self._reader is not None
                    and self._addlog.current_ino() == self._reader.ino):
                return False
            return self._reload()

    def _in_thread(self, fn: Callable[[], Any], loading: bool = False) -> None:
        """Run ``fn`` (a refresh or reload) in a thread, one at a time.  ``loading``: a
        reload is certain (a publish sealed the log): lookups pass until it is done."""
        with self._spawn_lock:
            t = self._reloader
            if t is not None and t.is_alive():
                return
            if loading:
                self._loading = True

            def run() -> None:
                try:
                    fn()
                except Exception as e:  # pragma: no cover - _reload logs its own failures
                    self._log.error("ling_bloom: reloading %s failed (%s: %s)", self.path,
                                    type(e).__name__, e)
                finally:
                    self._loading = False

            t = self._reloader = threading.Thread(target=run, daemon=True,
                                                  name="ling_bloom-reload")
            t.start()

    def _refresh_nowait(self) -> None:
        """refresh() for an event loop: the check (two stat calls) here, a reload in a
        thread; lookups pass while it loads."""
        now = self._clock()
        if now < self._next_check:
            return
        self._next_check = now + self.check_every
        try:
            identity = self._stat()
            ino = self._addlog.current_ino()
        except OSError:
            identity, ino = self._identity, None  # the thread's refresh() logs it
        reader = self._reader
        if identity is None and self._filter is None and reader is not None:
            return  # still unwarmed, log open
        if (identity is not None and identity == self._identity and reader is not None
                and ino == reader.ino):
            return
        self._in_thread(lambda: self.refresh(force=True), loading=True)

    def _reload(self) -> bool:
        """Load the file and its log as one pair (the lock shared: no publish between)."""
        if self.reload_in_thread and threading.current_thread() is self._reloader:
            self._loading = True  # lookups in the loop pass until the new filter is in
        try:
            with self._addlog.locked():
                return self._reload_locked()
        except OSError as e:
            if not self._warned_log:
                self._warned_log = True
                self._log.error("ling_bloom: cannot use the add log of %s (%s): keys added "
                                "by other processes are seen only after a reload",
                                self.path, e)
            return self._reload_locked(with_log=False)

    def _reload_locked(self, with_log: bool = True) -> bool:
        identity = self._stat()
        if (identity is not None and self._identity is not None
                and identity[0] == self._identity[0] and identity[2] != self._identity[2]
                and getattr(self._filter, "path", None) is not None):
            # The mapped file was rewritten in place, not replaced by a rename: its old
            # pages may be gone (reading them would fault), so drop the mapping.
            self._log.error("ling_bloom: %s was rewritten in place (replace it by renaming a "
                            "new file over it): dropping its mapping", self.path)
            self._filter.close()
            self._filter = None
        old_filter = self._filter
        reader = self._addlog.open_log(create=True) if with_log else None
        # A new log generation means a publish: load the file even when its stat looks the
        # same (a freed inode number comes back, with the same size, within one mtime tick).
        published = (reader is not None and self._reader is not None
                     and reader.gen != self._reader.gen)
        new: Any = None
        if identity is not None and (identity != self._identity or published):
            try:
                new = self._open_file()
            except Exception as e:  # a bad file must not take the server down
                self._log.error("ling_bloom: reloading %s failed (%s: %s): keeping the %s",
                                self.path, type(e).__name__, e,
                                "current filter" if old_filter is not None else "unwarmed state")
                # Tried once more at the next check (a passing fault), then not until the
                # file changes again.
                retry = self._failed != identity
                self._failed = identity
                self._identity = None if retry else identity
                # The new log is still followed, over the filter kept: that filter holds
                # the old file and the old log, so with the new log's keys nothing is lost.
        elif identity is None and old_filter is None and not self._warned_unwarmed:
            self._warned_unwarmed = True
            self._log.warning(
                "ling_bloom: %s does not exist yet (no warm-up has run): %s until it does",
                self.path, "serving every key unguarded" if self.unwarmed == "serve"
                else "rejecting every key (but those added since)")
        if (new is None and reader is not None and self._reader is not None
                and reader.ino == self._reader.ino):
            return False  # same file, same log: the new descriptor closes by itself
        flt = new if new is not None else old_filter
        keys: List[bytes] = []
        if reader is not None:
            keys, _ = reader.read()
        aside = self._apply(flt, keys) if keys else set()
        # The filter first, the reader last: a lookup that reads the new reader finds the
        # new filter; one that read the old reader notices the change (_catch_up).
        self._logged = set(keys)
        self._aside = aside
        if new is not None:
            self._identity = identity
            self._filter = new
        self._reader = reader  # the one it replaces closes when no lookup holds it
        if new is not None:
            self.reloads += 1
            if old_filter is not None and getattr(old_filter, "path", None) is not None:
                old_filter.close()  # unmap: requests that hold it finish on the one they have
            self._log.info("ling_bloom: loaded %s", self.path)
        return new is not None

    def _open_file(self) -> Any:
        from . import load

        if self.mapped:
            from ._core import MemoryFilter

            with open(self.path, "rb") as fh:
                head = fh.read(8)
            if head[:4] == b"LBLM" and head[6:7] == b"\x01":
                try:
                    return MemoryFilter.open(self.path, "r+")
                except PermissionError:
                    return MemoryFilter.open(self.path, "r")
        return load(self.path)

    def _apply(self, flt: Any, keys: List[bytes]) -> Set[bytes]:
        """Add logged keys to ``flt``; the keys it cannot hold (no filter yet, or a
        read-only mapping) are returned, to be kept aside."""
        if flt is None or getattr(flt, "mode", None) == "r":
            return set(keys)
        flt.update(keys)
        return set()

    def _catch_up(self, seen: Optional[LogReader], offset: int = 0) -> bool:
        """Read the log's records appended since the last look; reload when it was sealed
        (a warm-up published a new file).  True when something new arrived, or when another
        thread applied records or reloaded since the caller read ``seen`` at ``offset``
        (then ask the filter again)."""
        self._after_fork()
        with self._lock:
            reader = self._reader
            if reader is None:
                if self._addlog.current_ino() is None:
                    return False
                if self.reload_in_thread:
                    self._in_thread(self._reload, loading=True)
                    return True
                return self._reload()
            # Reloaded meanwhile (the caller asks the new filter, after the new log's
            # records are read below), or another thread applied records.
            moved = reader is not seen or reader.offset > offset
            try:
                if not reader.grew():
                    return moved
                keys, end, sealed = reader.peek()
            except OSError:
                return moved
            fresh = [k for k in keys if k not in self._logged]
            if fresh:
                # (before a seal too: those are in the published file, added here as well
                # in case that file is not the one this process loads next)
                self._aside |= self._apply(self._filter, fresh)
                self._logged.update(fresh)
            if sealed:
                # The position stays before the seal until the reload has swapped in the
                # new filter and log: a lookup in another thread meanwhile still sees
                # "grew" and waits for this one.
                if self.reload_in_thread:
                    self._in_thread(self._reload, loading=True)
                else:
                    self._reload()
                return True
            reader.offset = end  # only now: a lookup in another thread saw "grew" till here
            return moved or bool(fresh)

    @property
    def filter(self) -> Any:
        if self.reload_in_thread:
            self._refresh_nowait()
        else:
            self.refresh()
        return self._filter

    @property
    def warmed(self) -> bool:
        return self.filter is not None

    def swap(self, flt: Any = None) -> None:
        """Reload now (the warm-up command's own process, after publishing)."""
        with self._lock:
            self._identity = None
            self.refresh(force=True)

    # -- the filter's interface (what a guard and a post_save hook use)
    def _answer(self, key: Any, refresh: bool = True) -> bool:
        if refresh and self._clock() >= self._next_check:
            self.refresh()
        f = self._filter
        if f is not None:
            try:
                if f.test(key):
                    return True
            except ClosedError:  # a reload unmapped it since: ask the new one
                f = self._filter
                if f is not None and f.test(key):
                    return True
        elif self.unwarmed == "serve":
            return True
        return bool(self._aside) and key_bytes(key) in self._aside

    def _test_nowait(self, key: Any) -> bool:
        """test() for an event loop (``reload_in_thread``): a due check or a reload runs in
        a thread and the lookup answers from the current filter; while a new file is
        being loaded, a key the current filter lacks passes (served unguarded for that
        moment, never a false "absent" for a key added since the publish)."""
        self._after_fork()
        self._refresh_nowait()
        reader = self._reader
        seen = reader.offset if reader is not None else 0
        if self._answer(key, refresh=False):
            return True
        if self._loading:
            return True
        if reader is not None and reader is self._reader and not reader.grew(seen):
            return False  # the common "absent": nothing new in the log (one lseek)
        if not self._lock.acquire(blocking=False):
            return True  # another thread holds the filter (a reload): do not wait for it
        try:
            moved = self._catch_up(reader, seen)
        finally:
            self._lock.release()
        return self._loading or (moved and self._answer(key, refresh=False))

    def test(self, key: Any) -> bool:
        """Whether ``key`` was added, here or in any other process of this file."""
        if self.reload_in_thread:
            return self._test_nowait(key)
        # The log position is read before the filter: a record past it was not yet in
        # the filter when it answered (records are applied before the position moves).
        reader = self._reader
        seen = reader.offset if reader is not None else 0
        if self._answer(key):
            return True
        if reader is not None and reader is self._reader and not reader.grew(seen):
            return False  # the common "absent": nothing new in the log (one lseek)
        return self._catch_up(reader, seen) and self._answer(key)

    __contains__ = test

    def _add(self, keys: List[Any], single: bool) -> Any:
        raw = [key_bytes(k) for k in keys]  # TypeError before anything is written
        self._after_fork()
        with self._lock:
            self.refresh()
            with self._addlog.locked():
                if self._reader is None or self._addlog.current_ino() != self._reader.ino:
                    self._reload_locked()  # a publish since: add to the new file and log
                reader = self._reader
                if reader is None:
                    raise OSError(f"ling_bloom: no add log for {self.path}")
                new = [k for k in dict.fromkeys(raw) if k not in self._logged]
                if new:
                    reader.append(new)
                    self._logged.update(new)
                f = self._filter
                if f is None or getattr(f, "mode", None) == "r":
                    self._aside.update(raw)
                    return None
                return f.add(raw[0]) if single else f.update(raw)

    def add(self, key: Any) -> Any:
        """Add ``key`` for every process that serves this file (written to the add log
        before returning).  Returns the filter's answer (True when the key was new), or
        None when it is held aside (no file yet, or a read-only mapping)."""
        return self._add([key], True)

    def update(self, keys: Iterable[Any]) -> Any:
        """Add every key of ``keys`` (one log write for all of them)."""
        keys = list(keys)
        return self._add(keys, False) if keys else None

    def ensure(self, key: Any) -> None:
        """Add ``key`` unless this process already answers it present (a guard's "the
        loader found it": no log record for a key the file holds)."""
        if not self.test(key):
            self.add(key)

    def close(self) -> None:
        with self._lock:
            if self._reader is not None:
                self._reader.close()
                self._reader = None
            if self._filter is not None and getattr(self._filter, "path", None) is not None:
                self._filter.close()
            self._filter = None
            self._addlog.close()

    def __getattr__(self, name: str) -> Any:  # error_rate, capacity, save ...
        if name.startswith("_") or name == "remove":
            # removes are not shared between processes: a guard remembers deletes instead
            raise AttributeError(name)
        f = self.filter
        if f is None:
            raise AttributeError(f"{name}: {self.path} is not loaded yet (no warm-up has run)")
        return getattr(f, name)

    def __repr__(self) -> str:
        return (f"FileFilter({self.path!r}, check_every={self.check_every}, "
                f"{'mapped, ' if self.mapped else ''}"
                f"{'warmed' if self._filter is not None else 'unwarmed: ' + self.unwarmed})")


class UnsharedFilterWarning(UserWarning):
    """A web integration holds a filter that lives in one process's memory: keys added
    in one worker process are not seen by the others (they answer those keys 404 until
    they add them too).  Serve a file (``FileFilter``) or use a Redis filter instead."""


def shares_adds(flt: Any) -> bool:
    """Whether keys added to ``flt`` in one process are seen by every other process that
    uses the same filter: a FileFilter, a mapped file opened for adds, a Redis filter, or
    an object of your own (assumed to know).  The in-memory types are not."""
    from . import _core

    if isinstance(flt, FileFilter):
        return True
    if isinstance(flt, (_core.MemoryFilter, _core.BlockedFilter, _core.CountingFilter,
                        _core.ScalableFilter)):
        return getattr(flt, "path", None) is not None and getattr(flt, "mode", None) == "r+"
    return True


def unshared_message(name: str, kind: str, setting: str) -> str:
    return (f"ling_bloom filter {name!r} is an in-memory {kind} of each "
            f"process: a key added in one worker process (guard.add, a save hook) is not "
            f"seen by the other workers, which answer it as unknown (a false 404). Under a "
            f"server with several worker processes serve it from a file ({setting}) or use "
            f"a RedisFilter.")


def warn_unshared(name: str, flt: Any, setting: str, stacklevel: int = 3) -> None:
    if not shares_adds(flt):
        import warnings

        warnings.warn(unshared_message(name, type(flt).__name__, setting), UnsharedFilterWarning,
                      stacklevel=stacklevel)
