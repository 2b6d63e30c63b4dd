"""The guard's numbers: ``GuardStats`` (its counters at one moment, ``guard.stats()``) and
the Prometheus export (one collector per registry, reading every live guard's counters at
scrape time; a guard's name unique among the live guards of a registry).

In prometheus_client's multiprocess mode (``PROMETHEUS_MULTIPROC_DIR`` set: gunicorn and
uvicorn workers, each its own process) a collector would show one process's counts, and
the multiprocess collector does not read it at all: there each guard counts into
prometheus_client Counters and Gauges instead, which every process writes to the
directory and ``MultiProcessCollector`` sums.

``GuardStats`` is imported from ``ling_bloom.guard``.
"""
from __future__ import annotations

import inspect
import os
import threading
import time
import weakref
from typing import TYPE_CHECKING, Any, Dict, Iterable, NamedTuple, Optional

if TYPE_CHECKING:
    from ._guard_base import _GuardBase

__all__ = ["GuardStats"]


# ------------------------------------------------------------------------ stats


class GuardStats(NamedTuple):
    """A guard's counters at one moment.

    lookups          every lookup (get, or check in the framework middleware)
    rejected         the filter said "never seen": nothing else was touched
    passed           the filter said "maybe": lookups - rejected
    found            passed lookups that resolved to a value
    not_found        passed lookups that resolved to "not found": observed false positives
    errors           lookups that passed the filter and then failed after it: the loader
                     raised (each lookup that shared the failed call counts too), or a
                     framework reported the outcome as an error (``record(None)``).  Not
                     the filter's failures: those are ``filter_errors``
    cache_hits       values or null markers served by the cache
    null_hits        of those, null markers
    loads            loader calls (at most one per key at a time)
    coalesced        lookups that waited for another lookup's loader call
    false_positive_rate   measured here: not_found / (not_found + rejected), the share of
                     the keys with no row (as far as lookups show: deleted ones aside) that
                     the filter let through; None before any such key.  Compare it with
                     error_rate
    error_rate       the rate the filter was built for, read from it (its ``error_rate``:
                     the capacity's promise); None when the filter does not say.  Not a
                     count of errors
    estimated_error_rate  the rate the filter expects now from how full it is (its
                     ``current_error_rate()``; a fixed filter's is below error_rate until
                     it holds its capacity, above it past); None if unknown, and for an
                     async filter,
                     whose estimate must be awaited
    filter_errors    calls to the filter that failed: its backend down, timed out or
                     refusing (a lookup's test, or the add of a found key), or a stored
                     geometry that is not the code's; the failure policy answered them.
                     Not the loader's failures: those are ``errors``
    bypassed         lookups the failure policy decided (after an error, or while the
                     circuit was open), not the filter; their outcomes are not counted as
                     found/not_found
    circuit_open     whether the circuit is open now (the filter is not being asked)
    circuit_open_seconds  the time the circuit has been open, in all
    deleted          passed lookups that resolved to "not found" for a key reported deleted
                     (``guard.deleted(key)``) within ``deleted_ttl``: not false positives
    filter_lost      whether the filter is lost now (its server answered FilterLostError:
                     restarted empty, flushed, evicted) and not yet rebuilt: lookups pass
    rebuilding       whether a rebuild of the lost filter runs now (in this process)
    filter_losses    times the filter was found lost (each logged once)
    lost_lookups     lookups that passed unfiltered because the filter was lost (under every
                     policy); their outcomes are not counted as found/not_found
    lost_adds        adds the lost filter refused (handed to the rebuild when one runs)
    rebuilds         rebuilds of the lost filter that completed
    rebuild_failures rebuilds that failed (logged; retried after 30 s)
    geometry_mismatch  whether the stored filter's geometry is not the code's (a
                     configuration error, logged once; the lookups follow the policy)
    """

    lookups: int
    rejected: int
    passed: int
    found: int
    not_found: int
    errors: int
    cache_hits: int
    null_hits: int
    loads: int
    coalesced: int
    false_positive_rate: Optional[float]
    error_rate: Optional[float]
    estimated_error_rate: Optional[float]
    filter_errors: int = 0
    bypassed: int = 0
    circuit_open: bool = False
    circuit_open_seconds: float = 0.0
    deleted: int = 0
    filter_lost: bool = False
    rebuilding: bool = False
    filter_losses: int = 0
    lost_lookups: int = 0
    lost_adds: int = 0
    rebuilds: int = 0
    rebuild_failures: int = 0
    geometry_mismatch: bool = False

    def as_dict(self) -> Dict[str, Any]:
        return dict(self._asdict())


_COUNTERS = (
    "lookups", "rejected", "found", "not_found", "errors",
    "cache_hits", "null_hits", "loads", "coalesced", "filter_errors", "bypassed", "deleted",
    "filter_losses", "lost_lookups", "lost_adds", "rebuilds", "rebuild_failures",
)

def _filter_rate(flt: Any, name: str) -> Optional[float]:
    try:
        value = getattr(flt, name)
    except Exception:  # closed filter, Redis down: no number
        return None
    if callable(value):
        if inspect.iscoroutinefunction(value):
            return None  # an async filter's: not asked from synchronous code
        try:
            value = value()
        except Exception:
            return None
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


# -------------------------------------------------------------- prometheus

_collectors: "weakref.WeakKeyDictionary[Any, _GuardCollector]" = weakref.WeakKeyDictionary()
_collectors_lock = threading.Lock()


def _collectors_forked() -> None:
    # held at the fork by another thread of the parent (a guard being made), it would stay
    # held in the child, and the child's first guard with metrics would hang
    global _collectors_lock
    _collectors_lock = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_collectors_forked)


class _GuardCollector:
    """One per Prometheus registry: reads the counters of every live guard at scrape time
    (no cost per lookup).  Names are unique among the live guards of one registry
    (_check_unique_name)."""

    def __init__(self) -> None:
        self.guards: "weakref.WeakSet[_GuardBase]" = weakref.WeakSet()

    def describe(self) -> list:
        return list(self._families({}))

    def collect(self) -> Iterable[Any]:
        by_name: Dict[str, list] = {}
        for g in list(self.guards):
            by_name.setdefault(g.name, []).append(g)
        return self._families(by_name)

    @staticmethod
    def _families(by_name: Dict[str, list]) -> Iterable[Any]:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        lookups = CounterMetricFamily(
            "ling_bloom_guard_lookups",
            "Lookups by the guard, by result: rejected by the filter, or after passing it "
            "found, not_found (an observed false positive), deleted (not found, but reported "
            "deleted: not a false positive) or error",
            labels=["guard", "result"])
        cache = CounterMetricFamily(
            "ling_bloom_guard_cache_hits",
            "Lookups served by the cache: kind=value, or kind=null (a cached not-found)",
            labels=["guard", "kind"])
        loads = CounterMetricFamily(
            "ling_bloom_guard_loads", "Loader (database) calls", labels=["guard"])
        coalesced = CounterMetricFamily(
            "ling_bloom_guard_coalesced",
            "Lookups that waited for a concurrent loader call of the same key",
            labels=["guard"])
        observed = GaugeMetricFamily(
            "ling_bloom_guard_false_positive_rate",
            "Observed false-positive rate: not_found / (not_found + rejected)",
            labels=["guard"])
        promised = GaugeMetricFamily(
            "ling_bloom_guard_filter_error_rate",
            "The false-positive rate the filter promises (its error_rate)",
            labels=["guard"])
        backend = CounterMetricFamily(
            "ling_bloom_guard_filter_errors",
            "Calls to the filter that failed (its backend was down, timed out or refused)",
            labels=["guard"])
        bypassed = CounterMetricFamily(
            "ling_bloom_guard_bypassed",
            "Lookups the failure policy decided instead of the filter, by policy",
            labels=["guard", "policy"])
        open_time = CounterMetricFamily(
            "ling_bloom_guard_circuit_open_seconds",
            "Time the circuit breaker kept the filter out of lookups", labels=["guard"])
        open_now = GaugeMetricFamily(
            "ling_bloom_guard_circuit_open",
            "1 while the circuit breaker keeps the filter out of lookups", labels=["guard"])
        losses = CounterMetricFamily(
            "ling_bloom_guard_filter_losses",
            "Times the filter was found gone from its server (FilterLostError)",
            labels=["guard"])
        lost_lookups = CounterMetricFamily(
            "ling_bloom_guard_lost_lookups",
            "Lookups that passed unfiltered because the filter was lost", labels=["guard"])
        lost_adds = CounterMetricFamily(
            "ling_bloom_guard_lost_adds",
            "Adds the lost filter refused (handed to its rebuild)", labels=["guard"])
        rebuilds = CounterMetricFamily(
            "ling_bloom_guard_rebuilds",
            "Rebuilds of the lost filter, by result: done or failed",
            labels=["guard", "result"])
        lost_now = GaugeMetricFamily(
            "ling_bloom_guard_filter_lost",
            "1 while the filter is lost and not yet rebuilt (lookups pass unfiltered)",
            labels=["guard"])
        mismatch_now = GaugeMetricFamily(
            "ling_bloom_guard_geometry_mismatch",
            "1 while the stored filter's geometry is not the code's (a configuration error)",
            labels=["guard"])
        for name, guards in sorted(by_name.items()):
            totals = dict.fromkeys(_COUNTERS, 0)
            promise: Optional[float] = None
            for g in guards:
                for c, v in g._counts().items():
                    totals[c] += v
                p = _filter_rate(g.filter, "error_rate")
                if p is not None:
                    promise = p if promise is None else max(promise, p)
            for result in ("rejected", "found", "not_found", "deleted", "errors"):
                lookups.add_metric([name, "error" if result == "errors" else result],
                                   totals[result])
            cache.add_metric([name, "value"], totals["cache_hits"] - totals["null_hits"])
            cache.add_metric([name, "null"], totals["null_hits"])
            loads.add_metric([name], totals["loads"])
            coalesced.add_metric([name], totals["coalesced"])
            negatives = totals["not_found"] + totals["rejected"]
            if negatives:
                observed.add_metric([name], totals["not_found"] / negatives)
            if promise is not None:
                promised.add_metric([name], promise)
            backend.add_metric([name], totals["filter_errors"])
            by_policy: Dict[str, int] = {}
            for g in guards:
                by_policy[g.on_filter_error] = by_policy.get(g.on_filter_error, 0) + g._counts()["bypassed"]
            for policy, n in sorted(by_policy.items()):
                bypassed.add_metric([name, policy], n)
            open_time.add_metric([name], sum(g._breaker.open_seconds() for g in guards))
            open_now.add_metric([name], float(any(g._breaker.is_open() for g in guards)))
            losses.add_metric([name], totals["filter_losses"])
            lost_lookups.add_metric([name], totals["lost_lookups"])
            lost_adds.add_metric([name], totals["lost_adds"])
            rebuilds.add_metric([name, "done"], totals["rebuilds"])
            rebuilds.add_metric([name, "failed"], totals["rebuild_failures"])
            lost_now.add_metric([name], float(any(g.filter_lost for g in guards)))
            mismatch_now.add_metric([name], float(any(g._geometry_error is not None
                                                      for g in guards)))
        return [lookups, cache, loads, coalesced, observed, promised, backend, bypassed,
                open_time, open_now, losses, lost_lookups, lost_adds, rebuilds, lost_now,
                mismatch_now]


def _multiprocess() -> bool:
    """prometheus_client's multiprocess mode (read as prometheus_client does)."""
    return bool(os.environ.get("PROMETHEUS_MULTIPROC_DIR")
                or os.environ.get("prometheus_multiproc_dir"))


class _MultiprocessMetrics:
    """The guard's series as prometheus_client Counters and Gauges (one set per registry),
    for the multiprocess mode: every process writes its values to the directory, and a
    scrape (``MultiProcessCollector``) sums the counters of all, dead workers included.
    Gauges: the promise (``filter_error_rate``) and ``circuit_open`` are the highest of
    the live processes ("livemax"), ``circuit_open_seconds`` the sum of all ("sum").  The
    observed false-positive rate is not a gauge here (a ratio does not sum): compute it
    from the counters, ``not_found / (not_found + rejected)``."""

    def __init__(self, registry: Any):
        from prometheus_client import Counter, Gauge

        kw = {"registry": registry}
        self.lookups = Counter(
            "ling_bloom_guard_lookups",
            "Lookups by the guard, by result: rejected by the filter, or after passing it "
            "found, not_found (an observed false positive), deleted (not found, but reported "
            "deleted: not a false positive) or error", ["guard", "result"], **kw)
        self.cache = Counter(
            "ling_bloom_guard_cache_hits",
            "Lookups served by the cache: kind=value, or kind=null (a cached not-found)",
            ["guard", "kind"], **kw)
        self.loads = Counter("ling_bloom_guard_loads", "Loader (database) calls", ["guard"], **kw)
        self.coalesced = Counter(
            "ling_bloom_guard_coalesced",
            "Lookups that waited for a concurrent loader call of the same key", ["guard"], **kw)
        self.backend = Counter(
            "ling_bloom_guard_filter_errors",
            "Calls to the filter that failed (its backend was down, timed out or refused)",
            ["guard"], **kw)
        self.bypassed = Counter(
            "ling_bloom_guard_bypassed",
            "Lookups the failure policy decided instead of the filter, by policy",
            ["guard", "policy"], **kw)
        self.promised = Gauge(
            "ling_bloom_guard_filter_error_rate",
            "The false-positive rate the filter promises (its error_rate)", ["guard"],
            multiprocess_mode="livemax", **kw)
        self.open_now = Gauge(
            "ling_bloom_guard_circuit_open",
            "1 while the circuit breaker keeps the filter out of lookups", ["guard"],
            multiprocess_mode="livemax", **kw)
        self.open_time = Gauge(
            "ling_bloom_guard_circuit_open_seconds",
            "Time the circuit breaker kept the filter out of lookups", ["guard"],
            multiprocess_mode="sum", **kw)

    _RESULTS = {"rejected": "rejected", "found": "found", "not_found": "not_found",
                "deleted": "deleted", "errors": "error"}

    def add(self, guard: "_GuardBase", deltas: Dict[str, int]) -> None:
        """Count a guard's deltas (``_GuardBase._count``)."""
        name = guard.name
        for counter, result in self._RESULTS.items():
            d = deltas.get(counter)
            if d:
                self.lookups.labels(name, result).inc(d)
        hits = deltas.get("cache_hits", 0)
        if hits:
            nulls = deltas.get("null_hits", 0)
            if hits - nulls:
                self.cache.labels(name, "value").inc(hits - nulls)
            if nulls:
                self.cache.labels(name, "null").inc(nulls)
        for counter, metric in (("loads", self.loads), ("coalesced", self.coalesced),
                                ("filter_errors", self.backend)):
            d = deltas.get(counter)
            if d:
                metric.labels(name).inc(d)
        if deltas.get("bypassed"):
            self.bypassed.labels(name, guard.on_filter_error).inc(deltas["bypassed"])
        # the gauges: at most once a second per guard (the promise is read once per filter)
        now = time.monotonic()
        if now >= getattr(guard, "_mp_next", 0.0) or deltas.get("filter_errors"):
            guard._mp_next = now + 1.0  # type: ignore[attr-defined]
            promise = guard._promise()
            if promise is not None:
                self.promised.labels(name).set(promise)
            self.open_now.labels(name).set(float(guard._breaker.is_open()))
            self.open_time.labels(name).set(guard._breaker.open_seconds())


_multiprocess_metrics: Dict[int, _MultiprocessMetrics] = {}


def _check_unique_name(collector: "_GuardCollector", guard: "_GuardBase", name: str) -> None:
    # Live guards of one name in one registry are one Prometheus series (their counters
    # summed).  That is allowed only when every one of them was given that name explicitly
    # (e.g. Django's middleware and guard_for() guards of one filter); a name derived from
    # a loader (two lambdas are both "<lambda>") that collides is refused, not merged.
    # Raising rather than deriving "name-2" keeps series names stable across restarts.
    for other in list(collector.guards):
        if other is not guard and other.name == name and not (
                guard._explicit_name and other._explicit_name):
            raise ValueError(
                f"a live guard named {name!r} already exports to this metrics registry: "
                f"pass a unique name=... (or the same name= to both, to sum them on purpose; "
                f"or metrics=False)")


def _register_metrics(guard: "_GuardBase", registry: Any) -> None:
    if registry is None:
        from prometheus_client import REGISTRY as registry  # type: ignore[no-redef]
    with _collectors_lock:
        collector = _collectors.get(registry)
        if collector is None:
            collector = _GuardCollector()  # (in multiprocess mode: only the names)
            if not _multiprocess():
                registry.register(collector)
            _collectors[registry] = collector
        if _multiprocess():
            mp = _multiprocess_metrics.get(id(registry))
            if mp is None:
                mp = _multiprocess_metrics[id(registry)] = _MultiprocessMetrics(registry)
            guard._mp = mp  # type: ignore[attr-defined]
        if guard.loader is not None or guard.name != "default":
            # (an unnamed guard without a loader yet is checked when a decorated loader
            # names it: see _set_loader)
            _check_unique_name(collector, guard, guard.name)
        collector.guards.add(guard)


def _rename(guard: "_GuardBase", name: str) -> None:
    with _collectors_lock:
        collector = _collectors.get(guard.metrics_registry) if guard.metrics_registry is not None else None
        if collector is not None:
            _check_unique_name(collector, guard, name)
        guard.name = name


def _prometheus_installed() -> bool:
    try:
        import prometheus_client  # noqa: F401
    except ImportError:
        return False
    return True
