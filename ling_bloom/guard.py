"""A cache-penetration guard: the lookup flow of a RedisBloom cache-penetration article, framework-neutral.

    filter --(unseen: rejected, nothing else touched)--> cache --(miss)--> loader (the DB)

- The filter rejects keys it has never seen: no cache, no database is touched.
- A key that passes is looked up in the cache (a value, or a null marker).
- On a miss one loader call per key runs at a time: concurrent lookups of the same key wait
  for it and share its result (single flight; the per-key entries exist only while a load
  runs, so they never pile up).
- "Not found" (the loader returned None) is cached as a null marker for ``null_ttl``
  seconds; a found value is cached for ``value_ttl`` seconds (None: no expiry) and its key
  added to the filter.
- A load puts a loading marker in the cache first, and its answer is cached only while the
  marker is still there: a write whose hook invalidates the key meanwhile (``add``,
  ``invalidate``, in any process sharing the cache) keeps an answer read before the write
  committed ("not found" for a row being created) out of the cache.  A cache whose values
  cannot hold the marker caches answers as they come.

Every lookup that passed the filter but resolved to "not found" (from the loader, a cached
null marker, or a load it waited for) is an observed false positive of the filter; the guard
counts them next to the rejections, so ``stats()`` can compare the observed rate with the
filter's promise (its ``error_rate``), Prometheus can export it, and a log warning fires when
the observed rate drifts above the promise.

    guard = Guard(products_filter, MemoryCache(), load_product, null_ttl=60)
    guard.get("42")            # value, or None (rejected or not found)

    @bloom_guard(products_filter, MemoryCache())
    def load_product(key): ...
    load_product("42")         # the same flow

Keys that are not ``str``/``bytes`` (an ``int`` primary key) are turned into ``str`` for
the filter and the cache, exactly as ``ling_bloom.warmup`` does when it fills a filter.

When the filter's backend fails (a RedisFilter whose server is down, hung or refusing), the
guard follows its ``on_filter_error`` policy instead of failing the request:

- ``"open"`` (the default): the lookup goes on to the cache and the loader, as if there were
  no filter.  The app keeps answering correctly, at the cost the filter was there to save;
  a web team would rather pay database load for a few seconds than turn every guarded URL
  into an error or a wrong 404 because a cache-side helper is down.
- ``"closed"``: the lookup is rejected (``default``, a 404 in the middleware), for services
  where the database must never see unfiltered traffic.
- ``"raise"``: the error propagates.

A circuit breaker keeps a dead backend from costing a timeout per request: after a failure
the filter is not asked for ``breaker_seconds`` (5 by default; 0 turns the breaker off); then
one lookup tries it again, and a success closes the circuit.  The failure is logged once per
interval, not once per request; ``stats()`` and Prometheus count the errors, the lookups the
policy decided, and the time the circuit was open.  Lookups the policy decided are not
counted as observed false positives.

A lost filter (``FilterLostError``: a Redis filter made without a ttl is gone from its
server, which restarted empty, was flushed or evicted it) is not an outage: the server
answers, but every answer would be "absent", every existing row a 404.  So the guard "cannot
say": the lookup passes (fails open) under every policy, "closed" and "raise" included (a
lost filter must never turn a real user away, and neither rejecting nor raising can do
anything about it but wait for a rebuild).  It is logged once per loss (a new loss after the
filter came back is logged again), counted (``filter_losses``, ``lost_lookups``,
``lost_adds``) and flagged (``stats().filter_lost``).  With ``rebuild=`` (a function
``rebuild(filter)``, or a coroutine function for an AsyncGuard; the frameworks pass their
warm-up source) one rebuild starts per loss, in a thread (a coroutine function: a task of
the running event loop); while it runs the filter is not asked (half filled, it would reject
rows not yet added again), and keys added meanwhile are handed to it.  The guard uses the
filter again when its rebuild is done, or, without one, at the first lookup the filter
answers (someone else rebuilt it).  A rebuild that fails may have reset the filter and
added part of the rows: no guard of this process asks it until a later rebuild (started by
a lookup, no sooner than 30 s later) is done.  Adds the lost filter refuses never fail the caller.

A stored filter whose geometry is not the code's (``GeometryMismatchError``: the capacity
changed in the settings) is a configuration error: logged once with how to migrate, counted
as a filter error, flagged (``stats().geometry_mismatch``), and the lookup follows the
policy ("open": it passes, never a 500).
"""
from __future__ import annotations

import asyncio
import contextvars
import functools
import inspect
import logging
import math
import threading
import uuid
import time
from collections import OrderedDict
from typing import (
    Any,
    Awaitable,
    Callable,
    Dict,
    Generator,
    Iterator,
    Optional,
    Tuple,
    Type,
    TypeVar,
)

# The guard's parts, a module each; their public names are imported from here.
from . import _breaker
from ._breaker import (
    POLICIES,
    REBUILD_RETRY_SECONDS,
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
from ._cache import (LOADING_TTL, NULL, Cache, MemoryCache, RedisCache, _Flight, _Loading,
                     _NoCache, is_loading, is_null)
from ._cache import _Null  # noqa: F401  (the marker's class, where its pickles name it)
from ._core import FilterLostError, GeometryMismatchError
from ._keys import Key, as_key  # noqa: F401  (Key: the type of a converted key)
from ._keys import key_text as _text
from ._metrics import (
    _COUNTERS,
    GuardStats,
    _filter_rate,
    _prometheus_installed,
    _register_metrics,
    _rename,
)

__all__ = [
    "AsyncGuard",
    "Cache",
    "Guard",
    "GuardStats",
    "MemoryCache",
    "NULL",
    "RedisCache",
    "as_key",
    "arefill",
    "bloom_guard",
    "is_null",
    "refill",
]

V = TypeVar("V")
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
        self._rebuild_retry_at = time.monotonic() + REBUILD_RETRY_SECONDS
        dropped = _end_rebuild(flt, self._rebuild_retry_at) + held
        self.logger.error(
            "ling_bloom guard %r: rebuilding the lost filter failed (%s: %s); lookups keep "
            "passing unfiltered (the filter, maybe half filled, is not asked), and the next "
            "one after %g s starts another rebuild%s", self.name, type(error).__name__, error,
            REBUILD_RETRY_SECONDS,
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


class Guard(_GuardBase):
    """The lookup flow for threads (WSGI apps, scripts).

    ``Guard(filter, cache=None, loader=None, *, null_ttl=60, value_ttl=None,
    key_prefix="", name=None, metrics=None, logger=None, drift_factor=1.5,
    drift_min_samples=1000, add_found=True)``

    filter     any ling_bloom filter (or anything with test/add)
    cache      MemoryCache(), RedisCache(redis_client), DjangoCache(), or any object with
               get/set(ttl)/delete; None caches nothing
    loader     ``loader(key) -> value or None`` (None: not found); or decorate it
    null_ttl   seconds a "not found" stays cached (None: no expiry, 0: not cached)
    value_ttl  seconds a found value stays cached (None: no expiry, 0: not cached)
    name       the guard's label in metrics and logs (default: the loader's __qualname__,
               else "default"); live guards exporting to one registry share a name (and
               one summed series) only when each was given it with name=; a derived name
               that collides is a ValueError (two lambdas are both "<lambda>")
    metrics    None: export to Prometheus' default registry if prometheus_client is
               installed; False: no export; a CollectorRegistry: that one
    logger     where the drift warning goes (default: logging "ling_bloom.guard")
    on_filter_error  what a lookup does when the filter's backend fails: "open" (default:
               go on to the cache and loader), "closed" (reject), "raise"
    breaker_seconds  after a failure, how long the filter is not asked (0: ask every time)
    filter_errors    the exceptions that count as a backend failure (default: ling_bloom's
               RedisError, and OSError: ConnectionError, TimeoutError)
    deleted_ttl, deleted_max  how long (3600 s) and how many (100,000) keys reported with
               ``deleted(key)`` are remembered, so that their lookups count as ``deleted``,
               not as observed false positives (a CountingFilter forgets them instead)
    rebuild    ``rebuild(filter)``: builds a lost filter again (e.g. ``refill(filter,
               keys)``: a RedisFilter built aside and OR'd in whole, any other reset() then the
               keys); run once per loss off the request path.
               It may return another filter object for the guard to use. None: the guard
               waits for the filter to answer again
    normalize  a function of a key giving the key the filter and cache see (``str.lower``
               for a case-insensitive key column); the warm-up must add keys through the
               same function
    """

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self._flights: Dict[str, _Flight] = {}
        self._flights_lock = threading.Lock()

    def get(self, key: Any, default: Any = None, *, loader: Optional[Callable[..., Any]] = None) -> Any:
        """The value for key, or ``default`` when the filter rejects it or it is not
        found.  The loader is called with the key as given."""
        if not self.check(key):
            return default
        ck = self.cache_key(key)
        cached = self.cache.get(ck)
        if cached is not None and not is_loading(cached):
            return self._from_cache(cached, default, key)
        return self._load(key, ck, default, loader)

    def _load(self, key: Any, ck: str, default: Any, loader: Optional[Callable[..., Any]]) -> Any:
        with self._flights_lock:
            running = self._flights.get(ck)
            leader = running is None
            if running is None:
                flight = self._flights[ck] = _Flight()
            else:
                flight = running
                flight.waiters += 1
        if not leader:
            flight.event.wait()
            if flight.error is not None:
                self._count(coalesced=1, errors=1)
                raise flight.error
            self._count(coalesced=1, **({"not_found": 1} if flight.value is None else {"found": 1}))
            return default if flight.value is None else flight.value
        try:
            # Another lookup may have filled the cache between our miss and our flight.
            cached = self.cache.get(ck)
            if cached is not None and not is_loading(cached):
                flight.value = None if is_null(cached) else cached
                return self._from_cache(cached, default, key)
            self._count(loads=1)
            token = self._loading(ck)
            try:
                value = self._call_loader(loader, key)
            except BaseException as e:
                flight.error = e
                self._count(errors=1)
                raise
            flight.value = value
            self._store(key, ck, value, token)
            return default if value is None else value
        finally:
            with self._flights_lock:
                del self._flights[ck]
            flight.event.set()

    def _loading(self, ck: str) -> Optional[_Loading]:
        """Put a loading marker for the loader about to run (None: nothing is cached, or
        the cache cannot hold the marker: the answer is cached as it comes)."""
        if self.null_ttl == 0 and self.value_ttl == 0:
            return None
        token = _Loading(uuid.uuid4().hex)
        try:
            self.cache.set(ck, token, LOADING_TTL)
        except Exception:  # noqa: BLE001 - a cache of values only (its own encoding)
            return None
        return token

    def _store(self, key: Any, ck: str, value: Any, token: Optional[_Loading] = None) -> None:
        # read before a write that invalidated the key meanwhile: not cached past it
        keep = token is None or _still_loading(self.cache.get(ck), token)
        if value is None:
            self._count_missing(key)
            if self.null_ttl != 0 and keep:
                self.cache.set(ck, NULL, self.null_ttl)
        else:
            self._count(found=1)
            if self.value_ttl != 0 and keep:
                self.cache.set(ck, value, self.value_ttl)
            if self.add_found:
                self._add_found(key)

    def add(self, key: Any, value: Any = None) -> None:
        """A key that now exists (a new row): add it to the filter, and cache value (when
        given) or drop any null marker cached for it.  A lost filter (FilterLostError) does
        not fail it: the add is counted (``lost_adds``) and handed to the rebuild; nor, under
        "open" and "closed", a stored geometry that is not the code's (logged once)."""
        fk = self.filter_key(key)
        if not _queue_add(self.filter, fk):
            self._run(self._add_steps(fk))
        ck = self.cache_key(key)
        if value is None:
            self.cache.delete(ck)
        elif self.value_ttl != 0:
            self.cache.set(ck, value, self.value_ttl)

    def invalidate(self, key: Any) -> None:
        """Drop what the cache holds for key (a value or a null marker)."""
        self.cache.delete(self.cache_key(key))

    def in_flight(self) -> int:
        """Loader calls running now (the number of per-key entries held)."""
        with self._flights_lock:
            return len(self._flights)

    def waiting(self, key: Any) -> int:
        """Lookups waiting now for the running loader call of key (0 when none runs)."""
        with self._flights_lock:
            flight = self._flights.get(self.cache_key(key))
            return flight.waiters if flight is not None else 0

    def __call__(self, func: Callable[[Any], V]) -> "Callable[[Any], Optional[V]]":
        """``@guard`` on a loader: the decorated function runs the whole flow."""
        if not callable(func):
            raise TypeError("a Guard is used as a decorator on a loader; for a lookup call "
                            "guard.get(key)")
        self._set_loader(func)
        guard = self

        @functools.wraps(func)
        def guarded(key: Any) -> Optional[V]:
            return guard.get(key)

        guarded.guard = guard  # type: ignore[attr-defined]
        guarded.stats = guard.stats  # type: ignore[attr-defined]
        guarded.invalidate = guard.invalidate  # type: ignore[attr-defined]
        guarded.add = guard.add  # type: ignore[attr-defined]
        guarded.uncached = func  # type: ignore[attr-defined]
        return guarded


def _still_loading(cached: Any, token: _Loading) -> bool:
    """Whether the answer of the loader of ``token`` may be cached: its loading marker is
    still there (no invalidation, no write, no other answer came meanwhile)."""
    return is_loading(cached) and cached.token == token.token


def _is_async_method(method: Any) -> bool:
    return inspect.iscoroutinefunction(method) or inspect.iscoroutinefunction(
        getattr(method, "__func__", None))


def _blocks(filter: Any) -> bool:
    """True for a filter whose calls wait on a network round trip in the calling thread
    (the blocking Redis filters): an AsyncGuard runs them in a thread."""
    from ._core import RedisBloomFilter, RedisFilter

    return isinstance(filter, (RedisFilter, RedisBloomFilter))


def _timeout_of(filter: Any) -> Optional[float]:
    """A Redis filter's longest timeout (socket_timeout, socket_connect_timeout), or None."""
    cfg = getattr(filter, "_cfg", None)  # the async filters
    if not isinstance(cfg, dict):
        read = getattr(type(filter), "_wire_config", None)  # the blocking ones
        try:
            cfg = read(filter) if read is not None else None
        except Exception:
            cfg = None
    if not isinstance(cfg, dict):
        return None
    times = [t for t in (cfg.get("socket_timeout"), cfg.get("socket_connect_timeout"))
             if isinstance(t, (int, float)) and t > 0]
    return float(max(times)) if times else None


def _maybe_await(value: Any) -> Awaitable[Any]:
    if inspect.isawaitable(value):
        return value

    async def done() -> Any:
        return value

    return done()


class AsyncGuard(_GuardBase):
    """The same flow for asyncio: ``await guard.get(key)``.  The loader may be a coroutine
    function or a plain one; the cache's get/set/delete may be coroutine functions (Django's
    cache through DjangoCache, RedisCache(asynchronous=True)) or plain ones (MemoryCache).
    Concurrent lookups of one key share one loader call (per-key futures, dropped when
    the call ends).

    The filter never blocks the event loop: an async filter (``AsyncRedisFilter``,
    ``AsyncRedisBloomFilter``, or anything whose ``test``/``add`` return awaitables) is
    awaited; a blocking Redis filter (``RedisFilter``, ``RedisBloomFilter``) is called in the
    loop's default executor (a thread), so a hung Redis holds a thread, not the loop; an
    in-memory filter answers in well under a microsecond and is called directly.  A lookup
    cancelled while it waits for the filter (the client went away) is neither a failure
    nor a success of the backend: the circuit breaker lets the next lookup try."""

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self._flights: Dict[str, "asyncio.Future[Any]"] = {}
        self._waiters: Dict[str, int] = {}
        self._offload = _blocks(self.filter)
        self._bound = _timeout_of(self.filter)

    async def _within_timeout(self, call: Awaitable[Any]) -> Any:
        """A lookup of a Redis filter ends within one timeout of the filter (the longer of
        socket_timeout and socket_connect_timeout), its wait for a connection included:
        a hung server with more lookups than connections made the lookups that waited
        for a connection wait a second timeout on it (and a blocking filter in threads, one
        per lookup before it).  Past it the lookup is a RedisTimeoutError (the policy
        decides); the call it waited on ends by its own timeout."""
        bound = self._bound
        if bound is None:
            return await call
        try:
            return await asyncio.wait_for(call, bound)
        except (TimeoutError, asyncio.TimeoutError) as e:  # one class since 3.11
            if type(e) is not TimeoutError and type(e) is not asyncio.TimeoutError:
                raise  # the filter's own (RedisTimeoutError)
            from ._core import RedisTimeoutError

            raise RedisTimeoutError(f"the filter did not answer within {bound:g} s "
                                    f"(its timeout, the wait for a connection included)") from None

    async def _ask(self, method: Callable[[Any], Any], key: Any) -> Any:
        """One call of the filter, awaited or run in a thread as the filter needs."""
        if self._offload:
            return await asyncio.get_running_loop().run_in_executor(None, method, key)
        out = method(key)
        if inspect.isawaitable(out):
            out = await out
        return out

    async def _arun(self, steps: "_Steps[_R]") -> "_R":
        """Drive steps, awaiting each filter call (``_ask``): the asyncio twin of
        ``_run``."""
        try:
            call = next(steps)
            while True:
                try:
                    out = await self._ask(call[0], call[1])
                except BaseException as e:  # handed to the steps, which decide
                    call = steps.throw(e)
                else:
                    call = steps.send(out)
        except StopIteration as stop:
            return stop.value  # type: ignore[no-any-return]

    async def acheck(self, key: Any) -> bool:
        """``check()`` for the event loop (the ASGI middleware calls it): the same
        counting and failure policy, without blocking the loop."""
        fk = self.filter_key(key)
        early = self._before_test()
        if early is not None:
            return early
        epoch = _breaker.comebacks
        try:
            hit = await self._within_timeout(self._ask(self.filter.test, fk))
        except BaseException as e:
            return self._test_failed(e, epoch)
        return self._answered(hit)

    def _start_rebuild(self, flt: Any) -> None:
        """A coroutine function's rebuild runs as a task of the running event loop (it
        never blocks it); a plain function's in a thread."""
        fn = self.rebuild
        if not inspect.iscoroutinefunction(fn):
            return super()._start_rebuild(flt)
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return super()._start_rebuild(flt)
        task = loop.create_task(self._arun_rebuild(flt))
        self._rebuild_tasks.add(task)  # held until it ends
        task.add_done_callback(self._rebuild_tasks.discard)

    async def _arun_rebuild(self, flt: Any) -> None:
        try:
            out = await self.rebuild(flt)  # type: ignore[misc]
        except BaseException as e:  # noqa: BLE001 - reported, retried later
            self._rebuild_failed(flt, e)
            if isinstance(e, asyncio.CancelledError):
                raise
            return
        target = out if out is not None and hasattr(out, "test") else flt
        offload = _blocks(target)
        dropped = 0
        while True:
            keys, more = _take_pending(flt)
            dropped += more
            if not keys:
                break
            try:
                if offload:
                    await asyncio.get_running_loop().run_in_executor(None, target.update, keys)
                else:
                    await _maybe_await(target.update(keys))
            except BaseException as e:  # noqa: BLE001
                self._rebuild_failed(flt, e, len(keys) + dropped)
                return
        self._finish_rebuild(flt, target, dropped)

    def check(self, key: Any) -> bool:
        if not self._offload and _is_async_method(self.filter.test):
            raise TypeError("this guard's filter is asynchronous: await guard.acheck(key)")
        return super().check(key)

    async def _aadd_found(self, key: Any) -> None:
        await self._arun(self._add_found_steps(key))

    async def get(self, key: Any, default: Any = None, *, loader: Optional[Callable[..., Any]] = None) -> Any:
        if not await self.acheck(key):
            return default
        ck = self.cache_key(key)
        cached = await _maybe_await(self.cache.get(ck))
        if cached is not None and not is_loading(cached):
            return self._from_cache(cached, default, key)
        return await self._load(key, ck, default, loader)

    async def _load(self, key: Any, ck: str, default: Any, loader: Optional[Callable[..., Any]]) -> Any:
        flight = self._flights.get(ck)
        if flight is not None:
            self._waiters[ck] = self._waiters.get(ck, 0) + 1
            try:
                value = await asyncio.shield(flight)
            except asyncio.CancelledError:
                if flight.cancelled():  # the loading task was cancelled: load again
                    return await self._load(key, ck, default, loader)
                raise
            except BaseException:
                self._count(coalesced=1, errors=1)
                raise
            self._count(coalesced=1, **({"not_found": 1} if value is None else {"found": 1}))
            return default if value is None else value
        flight = asyncio.get_running_loop().create_future()
        self._flights[ck] = flight
        try:
            cached = await _maybe_await(self.cache.get(ck))
            if cached is not None and not is_loading(cached):
                flight.set_result(None if is_null(cached) else cached)
                return self._from_cache(cached, default, key)
            self._count(loads=1)
            token = await self._aloading(ck)
            try:
                value = await _maybe_await(self._call_loader(loader, key))
            except asyncio.CancelledError:
                raise  # finally cancels the flight: its waiters load again
            except BaseException as e:
                self._count(errors=1)
                flight.set_exception(e)
                # Mark the exception as retrieved if nobody waited for it.
                flight.add_done_callback(lambda f: f.exception())
                raise
            flight.set_result(value)
            await self._store(key, ck, value, token)
            return default if value is None else value
        finally:
            if not flight.done():  # cancelled while loading: its waiters load again
                flight.cancel()
            del self._flights[ck]
            self._waiters.pop(ck, None)

    async def _aloading(self, ck: str) -> Optional[_Loading]:
        """Guard._loading for a cache of coroutine methods too."""
        if self.null_ttl == 0 and self.value_ttl == 0:
            return None
        token = _Loading(uuid.uuid4().hex)
        try:
            await _maybe_await(self.cache.set(ck, token, LOADING_TTL))
        except Exception:  # noqa: BLE001 - a cache of values only (its own encoding)
            return None
        return token

    async def _store(self, key: Any, ck: str, value: Any,
                     token: Optional[_Loading] = None) -> None:
        keep = token is None or _still_loading(await _maybe_await(self.cache.get(ck)), token)
        if value is None:
            self._count_missing(key)
            if self.null_ttl != 0 and keep:
                await _maybe_await(self.cache.set(ck, NULL, self.null_ttl))
        else:
            self._count(found=1)
            if self.value_ttl != 0 and keep:
                await _maybe_await(self.cache.set(ck, value, self.value_ttl))
            if self.add_found:
                await self._aadd_found(key)

    async def add(self, key: Any, value: Any = None) -> None:
        fk = self.filter_key(key)
        if not _queue_add(self.filter, fk):
            await self._arun(self._add_steps(fk))
        ck = self.cache_key(key)
        if value is None:
            await _maybe_await(self.cache.delete(ck))
        elif self.value_ttl != 0:
            await _maybe_await(self.cache.set(ck, value, self.value_ttl))

    async def invalidate(self, key: Any) -> None:
        await _maybe_await(self.cache.delete(self.cache_key(key)))

    def in_flight(self) -> int:
        """Loader calls running now (the number of per-key entries held)."""
        return len(self._flights)

    def waiting(self, key: Any) -> int:
        """Lookups waiting now for the running loader call of key (0 when none runs)."""
        return self._waiters.get(self.cache_key(key), 0)

    def __call__(self, func: Callable[..., Any]) -> Callable[[Any], Awaitable[Any]]:
        if not callable(func):
            raise TypeError("an AsyncGuard is used as a decorator on a loader; for a lookup "
                            "await guard.get(key)")
        self._set_loader(func)
        guard = self

        @functools.wraps(func)
        async def guarded(key: Any) -> Any:
            return await guard.get(key)

        guarded.guard = guard  # type: ignore[attr-defined]
        guarded.stats = guard.stats  # type: ignore[attr-defined]
        guarded.invalidate = guard.invalidate  # type: ignore[attr-defined]
        guarded.add = guard.add  # type: ignore[attr-defined]
        guarded.uncached = func  # type: ignore[attr-defined]
        return guarded


# ---------------------------------------------------------------- set-up and rebuilds


def _geometry_message(flt: Any, error: BaseException) -> str:
    """What a GeometryMismatchError of a guarded filter means, and how to migrate."""
    key = getattr(flt, "key", None)
    where = f"at {key!r} " if key is not None else ""
    return (f"the filter stored {where}was made with another geometry than this code's "
            f"({error}): the capacity, error rate or hash in the settings changed, the "
            f"stored filter keeps the old ones. A configuration error: migrate by giving "
            f"the filter a new key (e.g. {str(key) + ':v2' if key is not None else 'bf:name:v2'!r}) "
            f"and running the warm-up, or by deleting the stored keys "
            f"(filter.key_names() lists them) and running the warm-up; or restore the old "
            f"settings")


_PROBE_KEY = "ling_bloom:set-up probe"


def _setup_problem(flt: Any) -> Optional[BaseException]:
    """Ask a blocking filter one test at set-up: the GeometryMismatchError it raises, or
    None (it answered, or failed otherwise: an outage is not a set-up mistake)."""
    try:
        out = flt.test(_PROBE_KEY)
    except GeometryMismatchError as e:
        return e
    except Exception:  # noqa: BLE001 - down, lost...: not what set-up checks
        return None
    if inspect.isawaitable(out):  # an async filter: not asked from here
        getattr(out, "close", lambda: None)()
    return None


async def _asetup_problem(flt: Any) -> Optional[BaseException]:
    """_setup_problem() for the event loop: a blocking Redis filter is asked in a thread."""
    try:
        if _blocks(flt):
            await asyncio.get_running_loop().run_in_executor(None, flt.test, _PROBE_KEY)
        else:
            await _maybe_await(flt.test(_PROBE_KEY))
    except GeometryMismatchError as e:
        return e
    except Exception:  # noqa: BLE001
        return None
    return None


def _resolve(value: Any) -> Any:
    """In a rebuild's thread: an awaitable (an async filter's call) run to its end in an
    event loop of the thread's own."""
    if inspect.isawaitable(value):
        async def wait() -> Any:
            return await value

        return asyncio.run(wait())
    return value


_REBUILD_BATCH = 10_000


def _aside(flt: Any) -> Any:
    """For a Redis bitmap filter (RedisFilter or AsyncRedisFilter, one bitmap, not
    shards): an empty in-memory filter of its geometry, to build the keys in aside and
    OR into the bitmap with one ``load()``, which also marks the filter whole again, so
    that no process ever finds it half filled.  None for any other filter."""
    from ._core import BlockedFilter, MemoryFilter, RedisFilter
    from .aio import AsyncRedisFilter

    # isinstance, not the class's name: an application's subclass is rebuilt aside too
    if not isinstance(flt, (RedisFilter, AsyncRedisFilter)) or \
            getattr(flt, "shards", 1) != 1 or not hasattr(flt, "load"):
        return None

    if getattr(flt, "layout", "standard") == "blocked":
        return BlockedFilter(m=flt.m, k=flt.k)
    return MemoryFilter(m=flt.m, k=flt.k, hash=flt.hash)


def _batches(keys: Any, batch_size: int) -> Iterator[list]:
    batch: list = []
    for k in keys:
        batch.append(as_key(k))
        if len(batch) >= batch_size:
            yield batch
            batch = []
    if batch:
        yield batch


def refill(flt: Any, keys: Any, batch_size: int = _REBUILD_BATCH) -> None:
    """A lost filter built again, blocking (a rebuild's thread), from every key of
    ``keys`` (converted as the warm-up converts them).  A RedisFilter's keys are built
    in memory first and OR'd into Redis with one ``load()``: every process finds the
    filter lost until it is whole again, never half filled.  Any other filter:
    ``reset()`` (which makes it again, empty, with its geometry), then the keys in
    batches; another process may ask it meanwhile (see docs/integrations.md)."""
    local = _aside(flt)
    if local is not None:
        for batch in _batches(keys, batch_size):
            local.update(batch)
        _resolve(flt.load(local))
        return
    reset = getattr(flt, "reset", None)
    if reset is not None:
        _resolve(reset())
    for batch in _batches(keys, batch_size):
        _resolve(flt.update(batch))


async def arefill(flt: Any, keys: Any, batch_size: int = _REBUILD_BATCH) -> None:
    """refill() on the event loop: ``keys`` an iterable, an async iterable, or an awaitable
    of either; a blocking Redis filter's calls run in a thread."""
    loop = asyncio.get_running_loop()
    offload = _blocks(flt)

    async def call(method: Callable[..., Any], *args: Any) -> Any:
        if offload:
            return await loop.run_in_executor(None, method, *args)
        return await _maybe_await(method(*args))

    if inspect.isawaitable(keys):
        keys = await keys
    local = _aside(flt)
    if local is None:
        reset = getattr(flt, "reset", None)
        if reset is not None:
            await call(reset)
    sink = local.update if local is not None else flt.update

    async def put(batch: list) -> None:
        if local is not None:
            sink(batch)  # in memory: no round trip
        else:
            await call(sink, batch)

    batch: list = []
    if hasattr(keys, "__aiter__"):
        async for k in keys:
            batch.append(as_key(k))
            if len(batch) >= batch_size:
                await put(batch)
                batch = []
    else:
        for batch_ in _batches(keys, batch_size):
            await put(batch_)
    if batch:
        await put(batch)
    if local is not None:
        await call(flt.load, local)


def bloom_guard(filter: Any, cache: Any = None, **options: Any) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Decorate a loader with a new guard: ``@bloom_guard(filter, cache, null_ttl=30)``.
    A coroutine function gets an AsyncGuard, a plain one a Guard.  The decorated function
    has ``.guard``, ``.stats()``, ``.invalidate(key)``, ``.add(key)`` and ``.uncached``."""

    def decorate(func: Callable[..., Any]) -> Callable[..., Any]:
        cls = AsyncGuard if inspect.iscoroutinefunction(func) else Guard
        return cls(filter, cache, **options)(func)

    return decorate
