"""The guard's failure policies (what a lookup does when the filter's backend fails) and the
circuit breaker that keeps a dead backend from costing a timeout per lookup; the module
docstring of ``ling_bloom.guard`` describes both."""
from __future__ import annotations

import math
import os
import threading
import time
from typing import Callable, Optional, Tuple, Type

POLICIES = ("open", "closed", "raise")


def _default_filter_errors() -> Tuple[Type[BaseException], ...]:
    from ._core import RedisError

    # RedisError: every failure of a ling_bloom Redis filter; OSError: ConnectionError and
    # TimeoutError of any other backend (a filter over redis-py, say).
    return (RedisError, OSError)


class _Breaker:
    """A circuit breaker for the filter's backend: closed (ask the filter), open for
    ``seconds`` after a failure (do not), then half-open (one caller asks; its success
    closes the circuit, its failure opens it again)."""

    def __init__(self, seconds: float, clock: Callable[[], float] = time.monotonic):
        if not seconds >= 0 or math.isinf(seconds):
            raise ValueError("breaker_seconds must be a finite number >= 0")
        self.seconds = float(seconds)
        self.clock = clock
        self._lock = threading.Lock()
        self._opened_at: Optional[float] = None
        self._retry_at = 0.0
        self._probing = False
        self._closed_total = 0.0  # open time of the circuits that closed again
        self._last_log = -math.inf

    def allow(self) -> bool:
        """True: ask the filter.  False: the circuit is open, decide without it."""
        if self._opened_at is None:  # the common case, without the lock
            return True
        with self._lock:
            if self._opened_at is None:
                return True
            if self.clock() < self._retry_at or self._probing:
                return False
            self._probing = True  # this caller tries the backend; the others wait it out
            return True

    def success(self) -> bool:
        """The filter answered.  True when this closed an open circuit."""
        if self._opened_at is None:
            return False
        with self._lock:
            if self._opened_at is None:
                return False
            self._closed_total += self.clock() - self._opened_at
            self._opened_at = None
            self._probing = False
            return True

    def failure(self) -> bool:
        """The filter's backend failed.  True when the caller should log it (once per
        interval)."""
        with self._lock:
            now = self.clock()
            if self.seconds > 0 and self._opened_at is None:
                self._opened_at = now
            self._retry_at = now + self.seconds
            self._probing = False
            if now - self._last_log >= max(self.seconds, 1.0):
                self._last_log = now
                return True
            return False

    def release(self) -> None:
        """The caller that was let through left without an answer either way (cancelled,
        or an error that says nothing of the backend): let the next caller try."""
        if self._probing:
            with self._lock:
                self._probing = False

    def is_open(self) -> bool:
        return self._opened_at is not None

    def open_seconds(self) -> float:
        with self._lock:
            total = self._closed_total
            if self._opened_at is not None:
                total += self.clock() - self._opened_at
            return total


# ------------------------------------------------------------------ a lost filter

# The filters a guard of this process is rebuilding now: id(filter) -> _Rebuild (held only
# while the rebuild runs).  Every guard of such a filter lets lookups through without asking
# it (a half-filled filter would reject rows not yet added again), starts no rebuild of its
# own, and hands its adds to the rebuild (added when it is done).
_rebuilding: dict = {}
_rebuilding_lock = threading.Lock()

# How many times a lost filter came back (a rebuild of it was done, or a guard found it
# answering again): a FilterLostError from a call that began before the count changed is the
# answer of the loss that is over, not a new loss.
comebacks = 0

# After a rebuild failed, the next one starts no sooner than this (seconds).
REBUILD_RETRY_SECONDS = 30.0

# Keys added while a rebuild runs, kept to be added after it (a row saved meanwhile may not
# be in what the rebuild read): at most this many; past it they are dropped (the next
# warm-up adds them) and counted.
PENDING_ADDS_MAX = 100_000


# The filters whose last rebuild failed (id(filter) -> _Unfinished): it may have reset the
# filter and added part of the rows, so the filter answers again but "absent" for the rows it
# never reached; every guard of it lets lookups through without asking it until a rebuild of
# it is done, and the next rebuild starts no sooner than retry_at.
_unfinished: dict = {}


class _Unfinished:
    __slots__ = ("filter", "retry_at")

    def __init__(self, flt: object, retry_at: float):
        self.filter = flt
        self.retry_at = retry_at


def _left_unfinished(flt: object) -> Optional[_Unfinished]:
    u = _unfinished.get(id(flt))
    return u if u is not None and u.filter is flt else None


def _forget_rebuilds_in_child() -> None:
    """In a forked child: no rebuild thread of the parent runs here, so none of its
    rebuilds would ever end (the child's guards would never ask their filter again, and
    keep its adds for nobody); the child's guards go on as any other process's do.  The
    lock may have been held by a thread of the parent at the fork: a new one."""
    global _rebuilding_lock
    _rebuilding_lock = threading.Lock()
    _rebuilding.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_rebuilds_in_child)


class _Rebuild:
    __slots__ = ("filter", "pending", "dropped")

    def __init__(self, flt: object):
        self.filter = flt
        self.pending: dict = {}  # an ordered set of keys
        self.dropped = 0


def _being_rebuilt(flt: object) -> bool:
    r = _rebuilding.get(id(flt))
    return r is not None and r.filter is flt


def _claim_rebuild(flt: object) -> bool:
    """True when the caller is to rebuild flt (no rebuild of it runs in this process)."""
    with _rebuilding_lock:
        if id(flt) in _rebuilding:
            return False
        _rebuilding[id(flt)] = _Rebuild(flt)
        return True


def _queue_add(flt: object, key: object) -> bool:
    """A key added while flt is being rebuilt: kept for after the rebuild (True), or False
    when no rebuild of flt runs (add it to the filter)."""
    if not _rebuilding:  # the common case, without the lock
        return False
    if isinstance(key, (bytearray, memoryview)):
        key = bytes(key)
    with _rebuilding_lock:
        r = _rebuilding.get(id(flt))
        if r is None or r.filter is not flt:
            return False
        if len(r.pending) < PENDING_ADDS_MAX:
            r.pending[key] = None
        else:
            r.dropped += 1
        return True


def _take_pending(flt: object) -> Tuple[list, int]:
    """The keys added while flt was rebuilt, taken, and how many more were dropped (past
    PENDING_ADDS_MAX) since the last call; when there are none left the rebuild ends
    (atomically: an add after this goes to the filter)."""
    with _rebuilding_lock:
        r = _rebuilding.get(id(flt))
        if r is None or r.filter is not flt:
            return [], 0
        dropped, r.dropped = r.dropped, 0
        if not r.pending:
            global comebacks
            comebacks += 1
            del _rebuilding[id(flt)]
            u = _unfinished.get(id(flt))
            if u is not None and u.filter is flt:
                del _unfinished[id(flt)]  # this rebuild is done: the filter answers again
            return [], dropped
        keys = list(r.pending)
        r.pending.clear()
        return keys, dropped


def _end_rebuild(flt: object, retry_at: float) -> int:
    """Drop the rebuild of flt (it failed): the number of added keys it held.  flt is left
    unfinished (not asked by any guard) until a rebuild of it, no sooner than retry_at, is
    done."""
    with _rebuilding_lock:
        r = _rebuilding.get(id(flt))
        if r is None or r.filter is not flt:
            return 0
        del _rebuilding[id(flt)]
        _unfinished[id(flt)] = _Unfinished(flt, retry_at)
        return len(r.pending) + r.dropped
