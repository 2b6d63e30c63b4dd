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
from typing import Any, Callable, Dict, Iterable, List, Optional, Union

from ._addlog import AddLog, BrokenLogError, LogReader, log_key
from ._core import key_bytes_many
from ._core import ClosedError

__all__ = ["FileFilter", "UnsharedFilterWarning", "shares_adds"]

# How many keys a process remembers having logged (so as not to log them again), and
# the longest one it remembers: a bound on its memory, whatever the log holds.
_RECENT, _RECENT_KEY = 4096, 256


class FileFilter:
    """A saved filter file that a running process keeps current and adds to, shared with
    every other process that serves the same file.

    ``FileFilter(path, check_every=2.0, unwarmed="serve", *, mapped=False)``

    Lookups: the file's filter (loaded, or mapped with ``mapped=True``), plus every key any
    process added through a FileFilter of the same path since the file was published:
    ``add``/``update`` write the key to the add log ``path + ".adds"`` before they
    return, and a lookup the filter answers "absent" first reads the log's new records
    (one ``lseek`` when there are none).  So a key added in one worker is present in
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
    keys instead (``Guard.deleted``).  The log and ``path + ".lock"`` live beside
    ``path``: every process that adds must be able to write them (the first one creates
    them); one that may only read them sees every add, and its own ``add`` raises
    PermissionError.  Anything but a regular file at ``path`` or at those names (a link,
    a FIFO) is refused, never followed or waited on (``ling_bloom._addlog``).

    The keys of the log are held in the filter (mapped: in the shared pages; with no file
    or a read-only mapping, in a filter of their own), never as a set of keys.
    ``close()`` is final: every call afterwards raises ClosedError.
    """

    def __init__(self, path: Union[str, "os.PathLike[str]"], check_every: float = 2.0,
                 unwarmed: str = "serve", *, clock: Callable[[], float] = time.monotonic,
                 logger: Any = None, mapped: bool = False):
        if unwarmed not in ("serve", "reject"):
            raise ValueError(f"unwarmed must be 'serve' or 'reject', not {unwarmed!r}")
        if check_every < 0:
            raise ValueError("check_every must be >= 0")
        self._closed = False
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
        # Keys this process logged lately (not logged again while the log lasts): a few,
        # not all -- a key logged twice is a record more, never a key lost.
        self._recent: Dict[bytes, None] = {}
        # Logged keys no filter of ours can hold (no file yet, or a read-only mapping):
        # a filter of their own, grown as they come, never a set of the keys.
        self._aside: Any = None
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
        self._check_open()
        now = self._clock()
        if not force and now < self._next_check:
            return False
        self._after_fork()
        with self._lock:
            self._check_open()
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
            try:
                with self._addlog.locked():
                    return self._reload_locked()
            except BrokenLogError as e:  # truncated under us: replaced, then read
                self._repair_log(e)
                with self._addlog.locked():
                    return self._reload_locked()
        except OSError as e:
            if not self._warned_log:
                self._warned_log = True
                self._log.error("ling_bloom: cannot use the add log of %s (%s): keys added "
                                "by other processes are seen only after a reload",
                                self.path, e)
            return self._reload_locked(with_log=False)

    def _repair_log(self, error: BrokenLogError) -> None:
        """The add log was truncated or emptied under the workers (logrotate's
        copytruncate, ``: > FILE.adds``): replace it by a whole log with the records it
        still holds (the lock exclusive, on a descriptor of its own; call it holding no
        lock of the file)."""
        log = AddLog(self.path)
        try:
            with log.locked(exclusive=True):
                replaced = log.repair(error.ino, error.read)
        except OSError as e:
            self._log.error("ling_bloom: the add log of %s is truncated and could not be "
                            "replaced (%s)", self.path, e)
            return
        finally:
            log.close()
        if replaced:
            self._log.error(
                "ling_bloom: the add log of %s was truncated or emptied under the workers "
                "(logrotate's copytruncate?): replaced by a new log with the records it "
                "still held; keys logged before it was cut may be missing from workers "
                "started since, until the next warm-up publishes the file (never rotate "
                "or truncate %s.adds)", self.path, self.path)

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
        # The keys a kept filter could not hold stay aside (its file's, its log's).
        aside = [self._aside if new is None else None]
        if reader is not None:
            def apply(keys: List[bytes]) -> None:
                aside[0] = self._apply(flt, keys, aside[0])

            reader.read_each(apply)  # a chunk at a time: never the whole log in memory
        # The filter first, the reader last: a lookup that reads the new reader finds the
        # new filter; one that read the old reader notices the change (_catch_up).
        if reader is None or self._reader is None or reader.ino != self._reader.ino:
            self._recent = {}
        self._aside = aside[0]
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
        # A regular file only, opened without blocking: a FIFO or a device at the path is
        # refused at once (logged, the current filter kept), never waited on.
        from . import from_bytes
        from ._io import HEADER_BYTES, open_regular, read_regular_file, saved_kind

        if self.mapped:
            from ._core import MemoryFilter

            fd = open_regular(self.path, os.O_RDONLY, follow=True)
            try:
                head = os.pread(fd, HEADER_BYTES, 0)
            finally:
                os.close(fd)
            if saved_kind(head) == "MemoryFilter":
                try:
                    return MemoryFilter.open(self.path, "r+")
                except PermissionError:
                    return MemoryFilter.open(self.path, "r")
        return from_bytes(read_regular_file(self.path))

    @staticmethod
    def _apply(flt: Any, keys: List[bytes], aside: Any) -> Any:
        """Add logged keys to ``flt``, or to ``aside`` (a filter of their own, made here
        when None) when ``flt`` cannot hold them (no filter yet, or a read-only mapping).
        Returns ``aside``."""
        if flt is None or getattr(flt, "mode", None) == "r":
            if aside is None:
                from ._core import ScalableFilter

                aside = ScalableFilter(4096, 0.001)
            aside.update(keys)
        else:
            flt.update(keys)
        return aside

    def _catch_up(self, seen: Optional[LogReader], since: int = 0) -> bool:
        """Read the log's records appended since the last look; reload when it was sealed
        (a warm-up published a new file).  True when something new arrived, or when another
        thread applied records or reloaded since the caller read ``seen`` at ``since`` (its
        ``pos[1]``: then ask the filter again)."""
        self._after_fork()
        with self._lock:
            self._check_open()
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
            moved = reader is not seen or reader.pos[1] > since
            fresh = False
            while True:
                try:
                    if not reader.grew():
                        return moved or fresh
                    keys, pos, sealed = reader.peek()
                except BrokenLogError as e:
                    # truncated under us: records appended since lie before where we
                    # had read; the log is replaced by one holding them, and read anew
                    self._repair_log(e)
                    self._reload()
                    return True
                except OSError:
                    return moved or fresh
                if keys:
                    # (before a seal too: those are in the published file, added here as
                    # well in case that file is not the one this process loads next)
                    self._aside = self._apply(self._filter, keys, self._aside)
                    fresh = True
                if sealed:
                    # The position stays before the seal until the reload has swapped in
                    # the new filter and log: a lookup in another thread meanwhile still
                    # sees "grew" and waits for this one.  The reload waits for the
                    # publish to end; a seal whose publish did not replace the log (it
                    # failed, or its new log could not be put in place) leaves this
                    # reader in use: read on past it.
                    if self.reload_in_thread:
                        # an event loop's worker: the reload runs in a thread, lookups
                        # answer from the old filter meanwhile
                        self._in_thread(lambda: self._reload_past(reader, pos), loading=True)
                        return True
                    if self._reload_past(reader, pos):
                        return True
                # Only now: a lookup in another thread saw "grew" till here.
                reader.pos = pos

    def _reload_past(self, reader: LogReader, pos: Any) -> bool:
        """The reload a seal asks for; True when it put a new log in place.  Otherwise the
        publish that sealed this log did not replace it (it failed): the reader reads on
        past the seal, so that the seal asks for no other reload (in a worker that
        reloads in a thread, each absent lookup would start one and pass meanwhile)."""
        self._reload()
        with self._lock:
            if self._reader is not reader:
                return True
            reader.pos = pos
            return False

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

    @property
    def closed(self) -> bool:
        return self._closed

    def _check_open(self) -> None:
        if self._closed:
            raise ClosedError(f"FileFilter of {self.path} is closed")

    def swap(self, flt: Any = None) -> None:
        """Reload now (the warm-up command's own process, after publishing)."""
        self._check_open()
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
            except ClosedError:  # a reload unmapped it since (or close()): ask the new one
                self._check_open()
                f = self._filter
                if f is not None and f.test(key):
                    return True
        elif self.unwarmed == "serve":
            self._check_open()
            return True
        aside = self._aside
        return aside is not None and aside.test(key)

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
        # ``pos[1]``: how far it was read (a torn record at its end was read, and is read
        # again only when the log grows).
        if self._closed:
            self._check_open()
        reader = self._reader
        seen = reader.pos[1] if reader is not None else 0
        if self._answer(key):
            return True
        if reader is not None and reader is self._reader and not reader.grew(seen):
            return False  # the common "absent": nothing new in the log (one lseek)
        return self._catch_up(reader, seen) and self._answer(key)

    __contains__ = test

    def _add(self, raw: List[bytes], single: bool) -> Any:
        # raw: the bytes the filters hash for each key (read before anything is written,
        # so a bad key raises TypeError or EmptyKeyError first).
        self._after_fork()
        with self._lock:
            self.refresh()  # (ClosedError once closed)
            try:
                return self._add_logged(raw, single)
            except BrokenLogError as e:  # truncated under us: replaced, then added to
                self._repair_log(e)
            return self._add_logged(raw, single)

    def _add_logged(self, raw: List[bytes], single: bool) -> Any:
        with self._lock:
            with self._addlog.locked():
                if self._reader is None or self._addlog.current_ino() != self._reader.ino:
                    self._reload_locked()  # a publish since: add to the new file and log
                reader = self._reader
                if reader is None:
                    raise OSError(f"ling_bloom: no add log for {self.path}")
                recent = self._recent
                new = [k for k in dict.fromkeys(raw) if k not in recent]
                if new:
                    reader.append(new)
                    for k in new[-_RECENT:]:
                        if len(k) <= _RECENT_KEY:
                            recent[k] = None
                    while len(recent) > _RECENT:
                        del recent[next(iter(recent))]  # the oldest
                f = self._filter
                if f is None or getattr(f, "mode", None) == "r":
                    self._aside = self._apply(None, raw, self._aside)
                    return None
                return f.add(raw[0]) if single else f.update(raw)

    def add(self, key: Any) -> Any:
        """Add ``key`` for every process that serves this file (written to the add log
        before returning).  Returns the filter's answer (True when the key was new), or
        None when it is held aside (no file yet, or a read-only mapping)."""
        return self._add([log_key(key)], True)

    def update(self, keys: Iterable[Any], *, skip_nulls: bool = False) -> Any:
        """Add every key of ``keys`` (one log write for all of them): an iterable, or a
        column read in place as the filters' ``update`` reads it (a numpy array of
        integers, an Arrow array, a pandas or polars Series); a column's null raises
        ValueError naming its position unless ``skip_nulls``."""
        raw = key_bytes_many(keys, skip_nulls=skip_nulls)
        if not raw:
            self._check_open()  # no keys: nothing to log, but a closed filter still says so
            return None
        return self._add(raw, False)

    def ensure(self, key: Any) -> None:
        """Add ``key`` unless this process already answers it present (a guard's "the
        loader found it": no log record for a key the file holds)."""
        if not self.test(key):
            self.add(key)

    def close(self) -> None:
        """Let go of the filter, the log and the lock; every call afterwards raises
        ClosedError (``close`` itself does nothing more)."""
        with self._lock:
            self._closed = True
            self._aside = None
            self._recent = {}
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
        f = self.filter  # ClosedError once closed
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
