"""The guard's decisions, written once for Guard and AsyncGuard (``_GuardBase``): a
lookup's test of the filter and its failure policy, the lost filter and its rebuild, an
add's steps, the counts behind ``stats()`` and the drift warning.  Guard calls the filter
(guard.py), AsyncGuard awaits it: each drives the same steps."""
from __future__ import annotations

import contextvars
import logging
import math
import os
import threading
import time
import weakref
from collections import OrderedDict
from typing import Any, Callable, Dict, Generator, Optional, Tuple, Type, TypeVar

from . import _breaker
from ._breaker import (
    POLICIES,
    _being_rebuilt,
    _Breaker,
    _claim_rebuild,
    _default_filter_errors,
    _end_rebuild,
    _left_unfinished,
    _queue_add,
    _rebuilding,
    _unfinished,
    _take_pending,
)
from ._cache import _NoCache, is_null
from ._core import FilterLostError, GeometryMismatchError
from ._keys import as_key
from ._keys import key_text as _text
from ._metrics import (
    _COUNTERS,
    GuardStats,
    _filter_rate,
    _prometheus_installed,
    _register_metrics,
    _rename,
)
from ._rebuild import _blocks, _geometry_message, _resolve


_R = TypeVar("_R")
# An add's steps (_GuardBase._add_steps, _add_found_steps): each yields the filter call to
# make, (method, key), is sent its result, and returns when done.
_Steps = Generator[Tuple[Callable[[Any], Any], Any], Any, _R]

log = logging.getLogger("ling_bloom.guard")


# Set by check() for the lookup it starts: True when the failure policy, not the filter,
# let it through.  Its outcome is then not an observed false positive.  A context variable,
# so each thread and each asyncio task has its own.
_bypassed: "contextvars.ContextVar[bool]" = contextvars.ContextVar("ling_bloom_bypassed",
                                                                   default=False)


# -------------------------------------------------------------------- the guard


# Every guard, for the child of a fork (_forked).
_GUARDS: "weakref.WeakSet[_GuardBase]" = weakref.WeakSet()


def _guards_forked() -> None:
    for g in list(_GUARDS):
        g._forked()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_guards_forked)


class _GuardBase:
    """Configuration, counters, metrics and the drift warning, shared by Guard and
    AsyncGuard."""

    def __init__(
        self,
        filter: Any,
        cache: Any = None,
        loader: Optional[Callable[..., Any]] = None,
        *,
        null_ttl: Optional[float] = 60,
        value_ttl: Optional[float] = None,
        key_prefix: str = "",
        name: Optional[str] = None,
        metrics: Any = None,
        logger: Optional[logging.Logger] = None,
        drift_factor: float = 1.5,
        drift_min_samples: int = 1000,
        add_found: bool = True,
        on_filter_error: str = "open",
        breaker_seconds: float = 5.0,
        filter_errors: Optional[Tuple[Type[BaseException], ...]] = None,
        deleted_ttl: float = 3600.0,
        deleted_max: int = 100_000,
        rebuild: Optional[Callable[[Any], Any]] = None,
        normalize: Optional[Callable[[Any], Any]] = None,
    ):
        if filter is None:
            raise TypeError("a guard needs a filter")
        if on_filter_error not in POLICIES:
            raise ValueError(f"on_filter_error must be one of {', '.join(map(repr, POLICIES))}, "
                             f"not {on_filter_error!r}")
        self.on_filter_error = on_filter_error
        self._breaker = _Breaker(breaker_seconds)
        self.filter_errors = _default_filter_errors() if filter_errors is None else tuple(filter_errors)
        self.filter = filter
        self.cache = _NoCache() if cache is None else cache
        self.loader = loader
        self.null_ttl = null_ttl
        self.value_ttl = value_ttl
        self.key_prefix = key_prefix
        if normalize is not None and not callable(normalize):
            raise TypeError(f"normalize must be a function of a key, not {normalize!r}")
        self.normalize = normalize
        self.name = name or (getattr(loader, "__qualname__", None) if loader else None) or "default"
        self._explicit_name = bool(name)
        self.logger = logger if logger is not None else log
        if drift_factor < 1:
            raise ValueError("drift_factor must be >= 1")
        self.drift_factor = drift_factor
        self.drift_min_samples = max(1, int(drift_min_samples))
        self.add_found = add_found
        self._stat_lock = threading.Lock()
        # keys reported deleted: cache key -> expiry (bounded, oldest dropped first)
        self.deleted_ttl = float(deleted_ttl)
        self.deleted_max = max(0, int(deleted_max))
        self._deleted: "OrderedDict[str, float]" = OrderedDict()
        self._c = dict.fromkeys(_COUNTERS, 0)
        self._drifting = False
        # the filter is gone from its server (FilterLostError): lookups pass until it is
        # rebuilt (``rebuild(filter)``, started once per loss) or answers again
        if rebuild is not None and not callable(rebuild):
            raise TypeError("rebuild must be a function rebuild(filter) (or None)")
        self.rebuild = rebuild
        self._loss_lock = threading.Lock()
        _GUARDS.add(self)
        self._lost = False
        self._rebuild_retry_at = -math.inf
        self._rebuild_tasks: set = set()
        # the stored filter's geometry is not the code's (GeometryMismatchError): the
        # error's text, logged once, until the filter answers again
        self._geometry_error: Optional[str] = None
        self._promise_of: Optional[Tuple[Any, Optional[float]]] = None
        self._mp: Any = None  # set by _register_metrics in prometheus' multiprocess mode
        # metrics: None = Prometheus' default registry when prometheus_client is installed,
        # False = none, a CollectorRegistry = that one.
        if metrics is False:
            self.metrics_registry = None
        elif metrics is None or metrics is True:
            if _prometheus_installed():
                _register_metrics(self, None)
                from prometheus_client import REGISTRY

                self.metrics_registry = REGISTRY
            elif metrics is True:
                raise ImportError("metrics=True needs prometheus_client (pip install "
                                  "'ling_bloom[prometheus]')")
            else:
                self.metrics_registry = None
        else:
            _register_metrics(self, metrics)
            self.metrics_registry = metrics

    # -- keys
    def filter_key(self, key: Any) -> Any:
        """The filter's key for a lookup key: ``as_key``, then ``normalize`` when given
        (``str.lower`` for a case-insensitive column: every lookup, add and delete of the
        guard goes through it; give the warm-up the same function)."""
        k = as_key(key)
        return k if self.normalize is None else as_key(self.normalize(k))

    def cache_key(self, key: Any) -> str:
        """The cache's key for a lookup key (``key_prefix`` + the key as text)."""
        return self.key_prefix + _text(self.filter_key(key))

    def _forked(self) -> None:
        """In the child of a fork: locks that a thread of the parent may have held at the
        fork are new (the child has only the forking thread, and a lock held by another
        would stay held: the first lookup would hang), and so is the breaker's."""
        self._stat_lock = threading.Lock()
        self._loss_lock = threading.Lock()
        self._breaker._lock = threading.Lock()

    # -- counters
    def _count(self, **deltas: int) -> None:
        if _bypassed.get() and ("not_found" in deltas or "found" in deltas or "deleted" in deltas):
            # decided by the failure policy: not evidence about the filter
            deltas.pop("not_found", None)
            deltas.pop("found", None)
            deltas.pop("deleted", None)
            if not deltas:
                return
        if self._mp is not None:  # prometheus_client's multiprocess mode
            self._mp.add(self, deltas)
        with self._stat_lock:
            for name, d in deltas.items():
                self._c[name] += d
            if "not_found" in deltas:
                fp = self._c["not_found"]
                n = fp + self._c["rejected"]
            else:
                return
        self._check_drift(fp, n)

    def _counts(self) -> Dict[str, int]:
        with self._stat_lock:
            return dict(self._c)

    def stats(self) -> GuardStats:
        """The counters now, with the observed false-positive rate and the filter's
        promise."""
        c = self._counts()
        negatives = c["not_found"] + c["rejected"]
        return GuardStats(
            lookups=c["lookups"],
            rejected=c["rejected"],
            passed=c["lookups"] - c["rejected"],
            found=c["found"],
            not_found=c["not_found"],
            errors=c["errors"],
            cache_hits=c["cache_hits"],
            null_hits=c["null_hits"],
            loads=c["loads"],
            coalesced=c["coalesced"],
            false_positive_rate=(c["not_found"] / negatives) if negatives else None,
            error_rate=_filter_rate(self.filter, "error_rate"),
            estimated_error_rate=_filter_rate(self.filter, "current_error_rate"),
            filter_errors=c["filter_errors"],
            bypassed=c["bypassed"],
            circuit_open=self._breaker.is_open(),
            circuit_open_seconds=self._breaker.open_seconds(),
            deleted=c["deleted"],
            filter_lost=self.filter_lost,
            rebuilding=_being_rebuilt(self.filter),
            filter_losses=c["filter_losses"],
            lost_lookups=c["lost_lookups"],
            lost_adds=c["lost_adds"],
            rebuilds=c["rebuilds"],
            rebuild_failures=c["rebuild_failures"],
            geometry_mismatch=self._geometry_error is not None,
        )

    @property
    def filter_lost(self) -> bool:
        """True while the filter is lost (its server answered FilterLostError) and not yet
        rebuilt: lookups pass unfiltered."""
        return self._lost or bool(_rebuilding) and _being_rebuilt(self.filter) or \
            bool(_unfinished) and _left_unfinished(self.filter) is not None

    def reset_stats(self) -> None:
        with self._stat_lock:
            self._c = dict.fromkeys(_COUNTERS, 0)
            self._drifting = False

    def _promise(self) -> Optional[float]:
        # The filter's error_rate, read once per filter object (a remote filter may have to
        # ask its server); a guard whose filter is replaced reads the new one's.
        flt = self.filter
        cached = self._promise_of
        if cached is not None and cached[0] is flt:
            return cached[1]
        p = _filter_rate(flt, "error_rate")
        self._promise_of = (flt, p)
        return p

    # -- monitoring: warn when the observed rate drifts above the promise
    def _check_drift(self, fp: int, n: int) -> None:
        # The rate only rises at a false positive, so this runs only then.
        if n < self.drift_min_samples:
            return
        promise = self._promise()
        if promise is None or not 0 < promise < 1:
            return
        rate = fp / n
        # Above promise * factor, and not noise: at least 3 standard deviations above what
        # the promise lets a sample of n negatives show.
        sigma = math.sqrt(n * promise * (1 - promise))
        drifting = rate > promise * self.drift_factor and (fp - n * promise) > 3 * sigma
        if drifting and not self._drifting:
            self._drifting = True
            self.logger.warning(
                "ling_bloom guard %r: observed false-positive rate %.4g (%d of %d lookups of "
                "absent keys passed the filter) is above the filter's promise %.4g; the "
                "filter may be fuller than its capacity, or keys were deleted from the "
                "database: rebuild or resize it",
                self.name, rate, fp, n, promise)
        elif not drifting and self._drifting and rate <= promise * self.drift_factor:
            self._drifting = False
            self.logger.info("ling_bloom guard %r: observed false-positive rate %.4g is back "
                             "within the promise %.4g", self.name, rate, promise)

    # -- a lookup and an add, decided once for both guards
    #
    # Guard calls the filter in the calling thread, AsyncGuard awaits it (in a thread for
    # a blocking filter); everything else (counts, policy, circuit, a lost filter) is the
    # same code.  A lookup: _before_test, the call, then _answered or _test_failed (the
    # hot path: plain calls).  An add, whose retry spans two calls: a generator of steps
    # that yields each call to make, (method, key), and is sent what it returned or
    # thrown what it raised; Guard._run and AsyncGuard._arun drive it.

    def _before_test(self) -> Optional[bool]:
        """A lookup's answer before the filter is asked (it is being rebuilt, or the
        circuit is open), or None: ask it."""
        _bypassed.set(False)
        if (_rebuilding or _unfinished) and self._not_to_ask():
            return self._lost_lookup()
        if not self._breaker.allow():
            return self._policy(None)
        return None

    def _test_failed(self, error: BaseException, epoch: int) -> bool:
        """The filter's test raised error (epoch: _breaker.comebacks before it was
        asked): the lookup's answer, or error raised again."""
        if isinstance(error, UnicodeEncodeError):
            # a str with a lone surrogate (a hostile URL): no key of it can have been added
            self._breaker.release()
            self._count(lookups=1, rejected=1)
            return False
        if isinstance(error, FilterLostError):
            return self._filter_lost(error, epoch)
        if isinstance(error, GeometryMismatchError):
            return self._misconfigured(error)
        if isinstance(error, self.filter_errors):
            return self._policy(error)
        self._breaker.release()
        raise error

    def _run(self, steps: "_Steps[_R]") -> "_R":
        """Drive steps, making each filter call here (the blocking guard)."""
        try:
            call = next(steps)
            while True:
                try:
                    out = call[0](call[1])
                except BaseException as e:  # handed to the steps, which decide
                    call = steps.throw(e)
                else:
                    call = steps.send(out)
        except StopIteration as stop:
            return stop.value  # type: ignore[no-any-return]

    def _retried_add(self, method: Callable[[Any], Any], fk: Any) -> "_Steps[None]":
        """One add (method: the filter's add or ensure), made again once when the filter
        came back (was rebuilt) while it ran: the row saved meanwhile may be missing from
        what the rebuild read.  A FilterLostError of the loss still on is raised."""
        epoch = _breaker.comebacks
        try:
            yield method, fk
        except FilterLostError:
            if epoch == _breaker.comebacks:
                raise
            yield method, fk

    def _add_steps(self, fk: Any) -> "_Steps[None]":
        """add(key)'s filter part: a lost filter or another geometry does not fail it."""
        try:
            yield from self._retried_add(self.filter.add, fk)
        except FilterLostError as e:
            self._add_lost(e, fk)
        except GeometryMismatchError as e:
            self._add_misconfigured(e)

    def _add_found_steps(self, key: Any) -> "_Steps[None]":
        """After a load found a value: add its key to the filter.  A failing backend does
        not fail the lookup (the value is served; the key is missing from the filter until
        a warm-up or the next lookup that finds it), unless the policy is "raise"."""
        if _bypassed.get() or self._breaker.is_open():
            return  # the backend is failing: do not wait on it again for this lookup
        fk = self.filter_key(key)
        if _queue_add(self.filter, fk):
            return
        # a FileFilter's ensure(): no add-log record for a key it already answers
        add = getattr(self.filter, "ensure", self.filter.add)
        try:
            yield from self._retried_add(add, fk)
        except FilterLostError as e:
            self._add_lost(e, fk)
        except GeometryMismatchError as e:
            self._add_misconfigured(e)
        except self.filter_errors as e:
            self._add_failed(e)

    # -- the filter step, shared with the framework middleware
    def check(self, key: Any) -> bool:
        """The filter step alone, counted: False (rejected) when the filter has never seen
        the key.  Frameworks call it, then report the outcome with ``record()``.  When the
        filter's backend fails, or the circuit is open, the ``on_filter_error`` policy
        answers: True for "open", False for "closed", the error for "raise"."""
        fk = self.filter_key(key)
        early = self._before_test()
        if early is not None:
            return early
        epoch = _breaker.comebacks
        try:
            hit = self.filter.test(fk)
        except BaseException as e:
            return self._test_failed(e, epoch)
        return self._answered(hit)

    def _answered(self, hit: bool) -> bool:
        """The filter answered a lookup: close the circuit, count, pass or reject."""
        if self._breaker.success():
            self.logger.info("ling_bloom guard %r: the filter answers again; the circuit is "
                             "closed", self.name)
        if self._lost or self._geometry_error is not None:
            self._answers_again()
        if hit:
            self._count(lookups=1)
            return True
        self._count(lookups=1, rejected=1)
        return False

    def _policy(self, error: Optional[BaseException]) -> bool:
        """A lookup the filter could not answer (error), or was not asked (None: the
        circuit is open)."""
        if error is not None:
            self._count(filter_errors=1)
            if self._breaker.failure():
                self.logger.warning(
                    "ling_bloom guard %r: the filter failed (%s: %s); failing %s%s",
                    self.name, type(error).__name__, error, self.on_filter_error,
                    f" and not asking it for {self._breaker.seconds:g} s"
                    if self._breaker.seconds > 0 else "")
            if self.on_filter_error == "raise":
                self._count(lookups=1)
                raise error
        self._count(lookups=1, bypassed=1)
        _bypassed.set(True)
        return self.on_filter_error == "open"

    # -- a lost filter: "cannot say", whatever the policy
    #
    # FilterLostError is not an outage: the server answers, but the filter is gone (the
    # server restarted empty, was flushed, or evicted it), so every answer would be
    # "absent" and every existing row a 404.  The lookup passes (fails open) under every
    # policy, "closed" and "raise" included: "closed" is for keeping unfiltered traffic off
    # the database while a backend is down for a while, and "raise" for code that retries
    # or handles an outage itself; neither can do anything with a lost filter but turn
    # real users away until someone rebuilds it.  It is logged once per loss, counted
    # (filter_losses, lost_lookups, lost_adds) and flagged (stats().filter_lost).

    def _not_to_ask(self) -> bool:
        """The filter is being rebuilt (half filled), or its last rebuild failed (maybe
        reset and half filled: it would answer "absent" for the rows it never reached):
        not asked until a rebuild of it is done; the one after a failure starts here."""
        flt = self.filter
        if _being_rebuilt(flt):
            return True
        if _left_unfinished(flt) is None:
            return False
        self._maybe_rebuild()
        return True

    def _lost_lookup(self) -> bool:
        self._count(lookups=1, lost_lookups=1)
        _bypassed.set(True)  # not evidence about the filter
        return True

    def _filter_lost(self, error: BaseException, epoch: int) -> bool:
        # the server answered: not a backend failure (the circuit closes)
        if self._breaker.success():
            self.logger.info("ling_bloom guard %r: the filter's server answers again; the "
                             "circuit is closed", self.name)
        if epoch == _breaker.comebacks:
            self._note_lost(error)
        # else: asked before the filter came back (a lookup of a storm that outlived the
        # rebuild): the loss that is over, not a new one to log and rebuild again
        return self._lost_lookup()

    def _note_lost(self, error: BaseException) -> None:
        with self._loss_lock:
            first = not self._lost
            self._lost = True
        if first:
            self._count(filter_losses=1)
            self.logger.warning(
                "ling_bloom guard %r: the filter is gone from its server (%s: %s); lookups "
                "pass unfiltered (the database answers them) until %s",
                self.name, type(error).__name__, error,
                "the rebuild from its warm-up source, started now, is done"
                if self.rebuild is not None else
                "it is rebuilt (a warm-up, reset() or restore(); no warm-up source is "
                "configured for this guard)")
        self._maybe_rebuild()

    def _answers_again(self) -> None:
        """The filter answered a lookup: it is not lost (any more), nor misconfigured."""
        self._geometry_error = None
        with self._loss_lock:
            was, self._lost = self._lost, False
        if was:
            _breaker.comebacks += 1
            self.logger.info("ling_bloom guard %r: the filter answers again (rebuilt); "
                             "lookups use it again", self.name)

    def _maybe_rebuild(self) -> None:
        if self.rebuild is None or time.monotonic() < self._rebuild_retry_at:
            return
        flt = self.filter
        u = _left_unfinished(flt)
        if u is not None and time.monotonic() < u.retry_at:
            return  # another guard's rebuild of it failed a moment ago
        if not _claim_rebuild(flt):
            return  # a rebuild of this filter runs already (this guard's, or another's)
        try:
            self._start_rebuild(flt)
        except BaseException as e:
            self._rebuild_failed(flt, e)

    def _start_rebuild(self, flt: Any) -> None:
        """Run the rebuild off the request path: in a thread (a coroutine function's in its
        own event loop there)."""
        fn = self.rebuild
        assert fn is not None

        def run() -> None:
            try:
                out = _resolve(fn(flt))
            except BaseException as e:  # noqa: BLE001 - reported, retried later
                self._rebuild_failed(flt, e)
                return
            self._rebuild_done(flt, out)

        threading.Thread(target=run, name=f"ling_bloom rebuild {self.name}",
                         daemon=True).start()

    def _rebuild_done(self, flt: Any, out: Any) -> None:
        """The rebuild returned: add the keys added meanwhile, then use the filter again
        (or the one it returned)."""
        target = out if out is not None and hasattr(out, "test") else flt
        dropped = 0
        while True:
            keys, more = _take_pending(flt)  # none left: the rebuild ends here, atomically
            dropped += more
            if not keys:
                break
            try:
                _resolve(target.update(keys))
            except BaseException as e:  # noqa: BLE001
                self._rebuild_failed(flt, e, len(keys) + dropped)
                return
        self._finish_rebuild(flt, target, dropped)

    def _finish_rebuild(self, flt: Any, target: Any, dropped: int = 0) -> None:
        if target is not flt:
            self.filter = target
            if hasattr(self, "_offload"):  # an AsyncGuard: how to call the new one
                self._offload = _blocks(target)
        with self._loss_lock:
            self._lost = False
        self.logger.info("ling_bloom guard %r: the filter was rebuilt from its warm-up "
                         "source; lookups use it again", self.name)
        if dropped:
            # rows saved while it ran that its source may not have read: not in the filter
            self.logger.warning(
                "ling_bloom guard %r: %d keys added while the filter was rebuilt were past "
                "the %d kept for it and are not in it: the filter rejects those rows until "
                "the next warm-up adds them", self.name, dropped, _breaker.PENDING_ADDS_MAX)
        self._count(rebuilds=1)

    def _rebuild_failed(self, flt: Any, error: BaseException, held: int = 0) -> None:
        self._rebuild_retry_at = time.monotonic() + _breaker.REBUILD_RETRY_SECONDS
        dropped = _end_rebuild(flt, self._rebuild_retry_at) + held
        self.logger.error(
            "ling_bloom guard %r: rebuilding the lost filter failed (%s: %s); lookups keep "
            "passing unfiltered (the filter, maybe half filled, is not asked), and the next "
            "one after %g s starts another rebuild%s", self.name, type(error).__name__, error,
            _breaker.REBUILD_RETRY_SECONDS,
            f" ({dropped} keys added meanwhile are left to the next warm-up)" if dropped else "")
        self._count(rebuild_failures=1)

    def _add_lost(self, error: BaseException, fk: Any) -> None:
        """An add the lost filter refused: counted, never raised (the row is saved; the
        rebuild reads it, or is handed it when it runs)."""
        self._count(lost_adds=1)
        self._note_lost(error)
        _queue_add(self.filter, fk)

    # -- a filter whose stored geometry is not the code's: a configuration error
    def _misconfigured(self, error: BaseException) -> bool:
        self._breaker.release()
        self._count(filter_errors=1)
        self._note_geometry(error)
        if self.on_filter_error == "raise":
            self._count(lookups=1)
            raise error
        self._count(lookups=1, bypassed=1)
        _bypassed.set(True)
        return self.on_filter_error == "open"

    def _note_geometry(self, error: BaseException) -> None:
        first = self._geometry_error is None
        self._geometry_error = str(error)
        if first:
            self.logger.error("ling_bloom guard %r: %s; until then lookups %s", self.name,
                              _geometry_message(self.filter, error),
                              {"open": "pass unfiltered", "closed": "are rejected",
                               "raise": "raise it"}[self.on_filter_error])

    def _add_found(self, key: Any) -> None:
        self._run(self._add_found_steps(key))

    def _add_misconfigured(self, e: BaseException) -> None:
        self._count(filter_errors=1)
        self._note_geometry(e)
        if self.on_filter_error == "raise":
            raise e

    def _add_failed(self, e: BaseException) -> None:
        if self.on_filter_error == "raise":
            raise e
        self._count(filter_errors=1)
        if self._breaker.failure():
            self.logger.warning("ling_bloom guard %r: adding a found key to the filter "
                                "failed (%s: %s)", self.name, type(e).__name__, e)

    def record(self, found: Optional[bool], key: Any = None) -> None:
        """The outcome of a lookup that passed ``check()``: True found, False not found (an
        observed false positive -- unless ``key`` was reported ``deleted()`` lately), None
        an error."""
        if found is None:
            self._count(errors=1)
        elif found:
            self._count(found=1)
        else:
            self._count_missing(key)

    # -- deletes: not false positives
    def deleted(self, key: Any) -> None:
        """Report that the row of ``key`` was deleted.  A CountingFilter forgets the key
        (``remove``); any other filter cannot, so the key is remembered for ``deleted_ttl``
        seconds (at most ``deleted_max`` keys, the oldest dropped first) and lookups of it
        that find nothing count as ``deleted``, not as observed false positives, so that
        the drift warning measures real false positives.  Cached values are not touched:
        call ``invalidate(key)`` too (the framework hooks do)."""
        k = self.filter_key(key)
        remove = getattr(self.filter, "remove", None)
        if remove is not None:
            try:
                remove(k)
            except Exception as e:  # not added, or a backend error: remember it instead
                self.logger.debug("guard %s: remove(%r) failed: %s", self.name, k, e)
            else:
                return
        if self.deleted_max == 0:
            return
        now = time.monotonic()
        with self._stat_lock:
            self._deleted.pop(_text(k), None)
            self._deleted[_text(k)] = now + self.deleted_ttl
            while len(self._deleted) > self.deleted_max:
                self._deleted.popitem(last=False)

    def _count_missing(self, key: Any) -> None:
        if key is not None and self._deleted:
            t = _text(self.filter_key(key))
            now = time.monotonic()
            with self._stat_lock:
                expiry = self._deleted.get(t)
                if expiry is not None and expiry < now:
                    del self._deleted[t]
                    expiry = None
            if expiry is not None:
                self._count(deleted=1)
                return
        self._count(not_found=1)

    def _from_cache(self, cached: Any, default: Any, key: Any = None) -> Any:
        if is_null(cached):
            self._count(cache_hits=1, null_hits=1)
            self._count_missing(key)
            return default
        self._count(cache_hits=1, found=1)
        return cached

    def _call_loader(self, loader: Optional[Callable[..., Any]], key: Any) -> Any:
        fn = loader or self.loader
        if fn is None:
            raise TypeError("this guard has no loader: pass loader=..., or decorate one")
        return fn(key)

    def _set_loader(self, func: Callable[..., Any]) -> None:
        if self.loader is not None:
            raise TypeError("this guard already has a loader")
        self.loader = func
        if self.name == "default":
            _rename(self, getattr(func, "__qualname__", "default"))
