"""ling_bloom.guard: the flow of a RedisBloom cache-penetration article (filter -> cache ->
loader), single flight, null caching, counters, the drift warning, Prometheus export, the
cache adapters."""
from __future__ import annotations

import array
import asyncio
import datetime
import decimal
import enum
import fractions
import json
import logging
import pickle
import sqlite3
import os
import threading
import time
import uuid

import pytest

import ling_bloom as lb
from ling_bloom._cache import is_loading
from ling_bloom.guard import (
    NULL,
    AsyncGuard,
    Cache,
    Guard,
    MemoryCache,
    RedisCache,
    as_key,
    bloom_guard,
    is_null,
)

from hang_guard import until


# ----------------------------------------------------------------- test doubles


class SpyCache(MemoryCache):
    """A MemoryCache that records every call, with a clock the test moves."""

    def __init__(self, **kw):
        self.now = 1000.0
        super().__init__(clock=lambda: self.now, **kw)
        self.calls = []

    def get(self, key):
        self.calls.append(("get", key))
        return super().get(key)

    def set(self, key, value, ttl=None):
        # a loader's loading marker is not an answer cached: recorded apart
        self.calls.append(("loading" if is_loading(value) else "set", key, value, ttl))
        super().set(key, value, ttl)

    def delete(self, key):
        self.calls.append(("delete", key))
        super().delete(key)


class Loader:
    """A loader over a dict 'database', counting calls per key."""

    def __init__(self, rows):
        self.rows = dict(rows)
        self.calls = []

    def __call__(self, key):
        self.calls.append(key)
        return self.rows.get(key)


class PassEvery:
    """A fake filter: keys in `present` pass; of the other keys every `every`-th passes (a
    false positive at rate 1/every).  error_rate is its promise."""

    def __init__(self, present=(), every=0, error_rate=0.01):
        self.present = set(present)
        self.every = every
        self.error_rate = error_rate
        self.absent_tests = 0
        self.added = []

    def test(self, key):
        if key in self.present:
            return True
        self.absent_tests += 1
        return bool(self.every) and self.absent_tests % self.every == 0

    def add(self, key):
        self.added.append(key)
        self.present.add(key)
        return True


def wait_until(cond, what, limit=30.0):
    """Wait for a condition (not a timing assertion: only a bound against a hung test)."""
    deadline = time.monotonic() + limit
    while not cond():
        if time.monotonic() > deadline:
            pytest.fail(f"gave up waiting for {what}")
        time.sleep(0.001)


@pytest.fixture
def flt():
    f = lb.MemoryFilter(10_000, 0.01)
    f.update(["1", "2", "3"])
    yield f
    f.close()


# ------------------------------------------------------------------------ flow


def test_rejected_key_touches_neither_cache_nor_loader(flt):
    cache, load = SpyCache(), Loader({"1": "one"})
    g = Guard(flt, cache, load, metrics=False)
    for key in ["nope", "404", 99]:
        assert g.get(key) is None
        assert g.get(key, default="dflt") == "dflt"
    assert cache.calls == []
    assert load.calls == []
    s = g.stats()
    assert (s.lookups, s.rejected, s.passed, s.loads) == (6, 6, 0, 0)


def test_found_value_is_loaded_once_then_served_by_the_cache(flt):
    cache, load = SpyCache(), Loader({"1": {"id": 1}})
    g = Guard(flt, cache, load, metrics=False, value_ttl=300)
    assert g.get("1") == {"id": 1}
    assert g.get("1") == {"id": 1}
    assert g.get(1) == {"id": 1}  # int keys are the same key as their str
    assert load.calls == ["1"]
    assert ("set", "1", {"id": 1}, 300) in cache.calls
    s = g.stats()
    assert (s.lookups, s.found, s.cache_hits, s.loads, s.not_found) == (3, 3, 2, 1, 0)


def test_found_key_is_added_to_the_filter():
    f = PassEvery(every=1)  # every absent key passes
    g = Guard(f, MemoryCache(), Loader({"new": "v"}), metrics=False)
    assert g.get("new") == "v"
    assert f.added == ["new"]
    g2 = Guard(PassEvery(every=1), MemoryCache(), Loader({"new": "v"}), metrics=False,
               add_found=False)
    g2.get("new")
    assert g2.filter.added == []


def test_not_found_is_cached_as_null_for_null_ttl(flt):
    cache, load = SpyCache(), Loader({})
    g = Guard(flt, cache, load, null_ttl=30, metrics=False)
    assert g.get("2") is None  # passes the filter, the loader finds nothing
    assert ("set", "2", NULL, 30) in cache.calls
    cache.now += 29.9
    assert g.get("2") is None
    assert load.calls == ["2"]  # served by the null marker
    cache.now += 0.2  # the marker expired
    assert g.get("2") is None
    assert load.calls == ["2", "2"]
    s = g.stats()
    assert (s.not_found, s.null_hits, s.cache_hits, s.loads) == (3, 1, 1, 2)


def test_null_ttl_zero_caches_nothing(flt):
    cache, load = SpyCache(), Loader({})
    g = Guard(flt, cache, load, null_ttl=0, metrics=False)
    g.get("2"); g.get("2")
    assert load.calls == ["2", "2"]
    assert not [c for c in cache.calls if c[0] == "set"]


def test_no_cache_still_filters_and_loads(flt):
    load = Loader({"1": "one"})
    g = Guard(flt, None, load, metrics=False)
    assert g.get("1") == "one" and g.get("1") == "one" and g.get("x") is None
    assert load.calls == ["1", "1"]


def test_add_drops_a_cached_null_marker_and_invalidate_drops_values(flt):
    cache, load = SpyCache(), Loader({})
    g = Guard(flt, cache, load, metrics=False)
    assert g.get("new") is None and load.calls == []  # not in the filter: rejected
    load.rows["new"] = "row"
    g.add("new")  # a row was created: the filter learns it, any null marker goes
    assert "new" in flt
    assert g.get("new") == "row"
    load.rows["2"] = None
    g.get("2")  # caches NULL
    load.rows["2"] = "two"
    g.add("2")
    assert g.get("2") == "two"
    g.add("3", value="three")
    assert g.get("3") == "three" and "3" not in load.calls
    g.invalidate("3")
    load.rows["3"] = "THREE"
    assert g.get("3") == "THREE"


def test_key_prefix_and_bytes_keys(flt):
    cache, load = SpyCache(), Loader({b"1": "b"})
    g = Guard(flt, cache, load, key_prefix="product:", metrics=False)
    assert g.get(b"1") == "b"
    assert ("set", "product:1", "b", None) in cache.calls


def test_loader_errors_propagate_and_are_counted(flt):
    def boom(key):
        raise RuntimeError("db down")

    cache = SpyCache()
    g = Guard(flt, cache, boom, metrics=False)
    with pytest.raises(RuntimeError):
        g.get("1")
    assert not [c for c in cache.calls if c[0] == "set"]  # nothing cached on error
    assert g.stats().errors == 1
    assert g.in_flight() == 0


def test_as_key():
    assert as_key(42) == "42"
    assert as_key("a") == "a" and as_key(b"a") == b"a"
    assert as_key((7,)) == "7" and as_key(["k"]) == "k"
    with pytest.raises(TypeError):
        as_key(None)
    with pytest.raises(TypeError):
        as_key(True)


class Status(int, enum.Enum):
    OK = 200


class Color(enum.IntEnum):
    RED = 7


class Idx:
    def __init__(self, v):
        self.v = v

    def __index__(self):
        return self.v


def test_as_key_is_the_filters_conversion():
    # An int, an int subclass whose str() is not its number, an IntEnum, an __index__ object:
    # their int's decimal text, as the filters key them (never str(): "Status.OK").
    for k, text in [(42, "42"), (Status.OK, "200"), (Color.RED, "7"), (Idx(-5), "-5"),
                    (2**70, str(2**70))]:
        assert as_key(k) == text and type(as_key(k)) is str
        assert lb._core.key_bytes(k) == text.encode()
    # A buffer is its bytes, as the filters hash it.
    assert as_key(array.array("B", b"ab")) == b"ab"
    # Numbers that are not integers are no key, as in the filters (not "3.0").
    for bad in (3.0, 3j, decimal.Decimal(3), fractions.Fraction(3, 1), None, True):
        with pytest.raises(TypeError):
            as_key(bad)
    # Other objects (a UUID primary key, a date) are still their str.
    u = uuid.UUID(int=5)
    assert as_key(u) == str(u) and as_key(datetime.date(2024, 1, 2)) == "2024-01-02"


class BadIndex:
    def __index__(self):
        return "5"


def test_as_key_refuses_objects_whose_str_is_no_stable_key():
    # their str() was the key: an address ("<object object at 0x...>", a generator's) or a
    # set's hash order, another key in every process; an int-like whose __index__ fails is
    # the error it raises, not its repr
    for bad in (object(), (k for k in "ab"), iter([1]), {1, 2}, frozenset({"a"}),
                BadIndex()):
        with pytest.raises(TypeError):
            as_key(bad)
    f = lb.MemoryFilter(1000, 0.01)
    g = Guard(f, None, lambda k: "row", metrics=False)
    with pytest.raises(TypeError):
        g.get(object())
    assert f.approximate_count() == 0


def test_as_key_takes_one_column_rows_and_refuses_wider_ones():
    db = sqlite3.connect(":memory:")
    db.row_factory = sqlite3.Row
    row = db.execute("SELECT 7 AS id").fetchone()
    assert as_key(row) == "7" and as_key((Status.OK,)) == "200" and as_key({"id": 9}) == "9"
    wide = db.execute("SELECT 7 AS id, 'product 7' AS name").fetchone()
    for bad in [wide, (7, "product 7"), [1, 2], (), {"id": 1, "name": "x"}]:
        with pytest.raises(TypeError, match="row of"):
            as_key(bad)
    db.close()


def test_numpy_keys_in_the_guard_are_the_filters_keys():
    np = pytest.importorskip("numpy")
    f = lb.MemoryFilter(1000, 0.01)
    f.update([np.int64(42), Status.OK])  # what a warm-up from a pandas column adds
    assert as_key(np.int64(42)) == "42" and as_key(np.uint8(7)) == "7"
    with pytest.raises(TypeError):
        as_key(np.float64(42.0))
    cache, load = SpyCache(), Loader({42: "answer", Status.OK: "ok"})
    g = Guard(f, cache, load, metrics=False, key_prefix="p:")
    assert g.get(42) == "answer"
    assert g.get(np.int64(42)) == "answer" and load.calls == [42]  # one cache key: "p:42"
    assert g.get(Status.OK) == "ok" and g.cache_key(Status.OK) == "p:200"
    assert g.get(np.int64(43)) is None and g.stats().rejected == 1


def test_two_keys_never_share_a_cache_entry_through_their_text():
    # A filter key that is not UTF-8 (one byte 0xff) and the four characters "\\xff" are
    # two keys; the cache held them as one text, so a lookup of one was answered with the
    # other's cached row.  The same bytes given as str or bytes stay one key.
    f = lb.MemoryFilter(1000, 0.01)
    keys = [b"\xff", "\\xff", "a\\b", b"a\\\\b", b"\xffa\\"]
    f.update(keys)
    rows = {k: f"row of {k!r}" for k in keys}
    cache, load = SpyCache(), Loader(rows)
    g = Guard(f, cache, load, metrics=False)
    for k in keys + keys:
        assert g.get(k) == rows[k], k
    assert len({g.cache_key(k) for k in keys}) == len(keys)
    assert load.calls == keys  # each loaded once, then served from its own cache entry
    assert g.cache_key(b"abc") == g.cache_key("abc") and g.cache_key("\u00e9") == \
        g.cache_key("\u00e9".encode())


def test_a_guard_passes_the_int_subclass_keys_its_filter_holds():
    # The filter keys Status.OK as 200: the guard must test the same key, not "Status.OK".
    f = lb.MemoryFilter(1000, 0.01)
    f.add(Status.OK)
    g = Guard(f, MemoryCache(), lambda key: "row", metrics=False)
    assert g.check(Status.OK) and g.check(200) and g.check("200")
    assert g.get(Status.OK) == "row"
    assert g.stats().rejected == 0
    h = Guard(lb.MemoryFilter(1000, 0.01), MemoryCache(), lambda key: "row", metrics=False)
    h.add(Status.OK)
    assert 200 in h.filter


# ----------------------------------------------------------------- decorators


def test_guard_as_decorator(flt):
    g = Guard(flt, MemoryCache(), metrics=False)
    calls = []

    @g
    def load_product(key):
        calls.append(key)
        return f"product {key}"

    assert load_product("1") == "product 1"
    assert load_product("1") == "product 1"
    assert load_product("zzz") is None
    assert calls == ["1"]
    assert load_product.guard is g and g.name.endswith("load_product")
    assert load_product.stats().rejected == 1
    assert load_product.uncached("zzz") == "product zzz"
    with pytest.raises(TypeError):
        g(lambda k: k)  # a second loader


def test_bloom_guard_decorator(flt):
    calls = []

    @bloom_guard(flt, MemoryCache(), null_ttl=5, metrics=False)
    def load(key):
        calls.append(key)
        return None if key == "3" else key.upper()

    assert load("1") == "1" and load("3") is None and load("3") is None
    assert load("nope") is None
    assert calls == ["1", "3"]
    assert isinstance(load.guard, Guard)


def test_get_without_a_loader_is_a_clear_error(flt):
    g = Guard(flt, MemoryCache(), metrics=False)
    with pytest.raises(TypeError, match="no loader"):
        g.get("1")
    assert g.get("1", loader=lambda k: "x") == "x"
    assert g.get("nope") is None  # rejected before any loader is needed


# ---------------------------------------------------------------- single flight


@pytest.mark.parametrize("outcome", ["found", "not_found", "error"])
def test_single_flight_threads(flt, outcome):
    n = 16
    release = threading.Event()
    calls = []

    def slow_loader(key):
        calls.append(key)
        release.wait(30)
        if outcome == "error":
            raise LookupError("db error")
        return "value" if outcome == "found" else None

    g = Guard(flt, MemoryCache(), slow_loader, metrics=False)
    results, errors = [], []

    def worker():
        try:
            results.append(g.get("1"))
        except LookupError as e:
            errors.append(e)

    threads = [threading.Thread(target=worker) for _ in range(n)]
    for t in threads:
        t.start()
    wait_until(lambda: len(calls) == 1 and g.waiting("1") == n - 1, "15 waiters")
    release.set()
    for t in threads:
        t.join(30)
    assert calls == ["1"]  # one database call for 16 concurrent lookups
    assert g.in_flight() == 0  # the per-key entry is gone
    s = g.stats()
    assert s.loads == 1 and s.coalesced == n - 1
    if outcome == "error":
        assert len(errors) == n and results == [] and s.errors == n
    else:
        assert errors == [] and len(results) == n
        assert set(results) == {"value" if outcome == "found" else None}
        assert (s.found if outcome == "found" else s.not_found) == n


def test_single_flight_is_per_key(flt):
    gate = threading.Barrier(3, timeout=30)
    calls = []

    def loader(key):
        calls.append(key)
        gate.wait()  # all three keys load at the same time: no key waits for another
        return key

    g = Guard(flt, None, loader, metrics=False)
    threads = [threading.Thread(target=g.get, args=(k,)) for k in ["1", "2", "3"]]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert sorted(calls) == ["1", "2", "3"]
    assert g.in_flight() == 0


def test_flights_do_not_accumulate(flt):
    many = [str(i) for i in range(5000)]
    flt.update(many)
    g = Guard(flt, MemoryCache(maxsize=100), lambda k: None if int(k) % 2 else k,
              metrics=False)
    for k in many:
        g.get(k)
    assert g.in_flight() == 0
    assert len(g._flights) == 0
    assert len(g.cache) == 100  # the in-process cache stays bounded


# ------------------------------------------------------------------ async


def test_async_guard_single_flight_and_null_caching(flt):
    async def main():
        release = asyncio.Event()
        calls = []

        async def loader(key):
            calls.append(key)
            await release.wait()
            return None if key == "2" else {"id": key}

        g = AsyncGuard(flt, MemoryCache(), loader, metrics=False)
        tasks = [asyncio.ensure_future(g.get("1")) for _ in range(10)]
        await until(lambda: g.waiting("1") >= 9, "9 calls waiting for the first")
        release.set()
        results = await asyncio.gather(*tasks)
        assert results == [{"id": "1"}] * 10
        assert calls == ["1"]
        assert await g.get("1") == {"id": "1"}
        assert await g.get("2") is None and await g.get("2") is None
        assert await g.get("absent") is None
        assert calls == ["1", "2"]
        s = g.stats()
        assert (s.loads, s.coalesced, s.rejected, s.null_hits) == (2, 9, 1, 1)
        assert g.in_flight() == 0

    asyncio.run(main())


def test_async_guard_with_async_cache_and_sync_loader(flt):
    class AsyncDictCache:
        def __init__(self):
            self.data, self.calls = {}, []

        async def get(self, key):
            self.calls.append("get")
            return self.data.get(key)

        async def set(self, key, value, ttl=None):
            self.calls.append("set")
            self.data[key] = value

        async def delete(self, key):
            self.data.pop(key, None)

    async def main():
        cache = AsyncDictCache()
        calls = []

        @bloom_guard(flt, cache, metrics=False)
        async def load(key):
            calls.append(key)
            return "v" if key == "1" else None

        assert await load("1") == "v" and await load("1") == "v"
        assert await load("3") is None and await load("3") is None
        assert await load("never") is None
        assert calls == ["1", "3"]
        assert cache.data["3"] is NULL
        await load.add("3", value="three")
        assert await load("3") == "three"

        g = AsyncGuard(flt, cache, lambda k: "sync " + k, metrics=False)  # plain loader
        assert await g.get("2") == "sync 2"

    asyncio.run(main())


def test_async_guard_leader_cancelled_waiters_load_again(flt):
    async def main():
        calls = []
        first = asyncio.Event()

        async def loader(key):
            calls.append(key)
            if len(calls) == 1:
                await first.wait()  # the first call hangs until cancelled
            return "value"

        g = AsyncGuard(flt, None, loader, metrics=False)
        leader = asyncio.ensure_future(g.get("1"))
        await until(lambda: calls, "the leader's load to start")
        waiter = asyncio.ensure_future(g.get("1"))
        await until(lambda: g.waiting("1") >= 1, "a call waiting for the leader")
        leader.cancel()
        assert await waiter == "value"
        with pytest.raises(asyncio.CancelledError):
            await leader
        assert calls == ["1", "1"]
        assert g.in_flight() == 0

    asyncio.run(main())


def test_async_loader_errors_reach_every_waiter(flt):
    async def main():
        release = asyncio.Event()
        calls = []

        async def loader(key):
            calls.append(key)
            await release.wait()
            raise KeyError("db")

        g = AsyncGuard(flt, None, loader, metrics=False)
        tasks = [asyncio.ensure_future(g.get("1")) for _ in range(5)]
        await until(lambda: g.waiting("1") >= 4, "4 calls waiting for the first")
        release.set()
        out = await asyncio.gather(*tasks, return_exceptions=True)
        assert all(isinstance(e, KeyError) for e in out)
        assert calls == ["1"] and g.stats().errors == 5

    asyncio.run(main())


# ------------------------------------------------------------ stats and drift


def test_stats_observed_rate_against_the_promise():
    f = PassEvery(present={"a"}, every=4, error_rate=0.01)
    g = Guard(f, MemoryCache(), Loader({"a": 1}), metrics=False, null_ttl=0)
    assert g.stats().false_positive_rate is None
    for i in range(400):
        g.get(f"absent{i}")
    s = g.stats()
    assert (s.rejected, s.not_found) == (300, 100)
    assert s.false_positive_rate == pytest.approx(0.25)
    assert s.error_rate == 0.01
    assert s.as_dict()["passed"] == 100
    g.reset_stats()
    assert g.stats().lookups == 0


def test_stats_with_a_real_filter_reports_its_promise_and_estimate(flt):
    g = Guard(flt, MemoryCache(), Loader({}), metrics=False)
    s = g.stats()
    assert s.error_rate == 0.01
    assert s.estimated_error_rate is not None and 0 <= s.estimated_error_rate < 0.01


def _drive(g, n):
    for i in range(n):
        g.get(f"absent{i}")


def test_drift_warning_when_the_observed_rate_exceeds_the_promise(caplog):
    f = PassEvery(every=20, error_rate=0.01)  # observes 5% where 1% is promised
    g = Guard(f, None, Loader({}), metrics=False, name="products", drift_min_samples=1000)
    with caplog.at_level(logging.WARNING, logger="ling_bloom.guard"):
        _drive(g, 999)
        assert caplog.records == []  # below the minimum sample: no judgement
        _drive(g, 3000)
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1  # once, not on every false positive
    msg = warnings[0].getMessage()
    assert "'products'" in msg and "0.05" in msg and "0.01" in msg


def test_no_drift_warning_at_the_promised_rate(caplog):
    f = PassEvery(every=100, error_rate=0.01)  # exactly the promise
    g = Guard(f, None, Loader({}), metrics=False, drift_min_samples=100)
    with caplog.at_level(logging.WARNING, logger="ling_bloom.guard"):
        _drive(g, 20_000)
    assert [r for r in caplog.records if r.levelno >= logging.WARNING] == []
    assert g.stats().false_positive_rate == pytest.approx(0.01)


def test_no_drift_warning_on_noise_of_a_small_sample(caplog):
    # 3 false positives in 100 negatives: 3x the promise, but within noise of 1%.
    f = PassEvery(every=33, error_rate=0.01)
    g = Guard(f, None, Loader({}), metrics=False, drift_min_samples=50)
    with caplog.at_level(logging.WARNING, logger="ling_bloom.guard"):
        _drive(g, 100)
    assert caplog.records == []


def test_drift_warning_goes_to_the_given_logger(caplog):
    mine = logging.getLogger("myapp.bloom")
    g = Guard(PassEvery(every=2, error_rate=0.001), None, Loader({}), metrics=False,
              logger=mine, drift_min_samples=10)
    with caplog.at_level(logging.WARNING, logger="myapp.bloom"):
        _drive(g, 100)
    assert [r.name for r in caplog.records] == ["myapp.bloom"]


def test_overfilled_real_filter_drifts(caplog):
    f = lb.MemoryFilter(100, 0.01)
    f.update([f"row{i}" for i in range(2000)])  # 20x its capacity
    g = Guard(f, None, Loader({}), metrics=False, drift_min_samples=500)
    with caplog.at_level(logging.WARNING, logger="ling_bloom.guard"):
        _drive(g, 2000)
    assert g.stats().false_positive_rate > 0.5
    assert len([r for r in caplog.records if r.levelno == logging.WARNING]) == 1


# ------------------------------------------------------------------ prometheus


def test_prometheus_metrics(flt):
    prometheus_client = pytest.importorskip("prometheus_client")
    reg = prometheus_client.CollectorRegistry()
    g = Guard(flt, MemoryCache(), Loader({"1": "one"}), metrics=reg, name="products")
    g.get("1"); g.get("1"); g.get("2"); g.get("2"); g.get("nope")
    v = reg.get_sample_value
    assert v("ling_bloom_guard_lookups_total", {"guard": "products", "result": "rejected"}) == 1
    assert v("ling_bloom_guard_lookups_total", {"guard": "products", "result": "found"}) == 2
    assert v("ling_bloom_guard_lookups_total", {"guard": "products", "result": "not_found"}) == 2
    assert v("ling_bloom_guard_lookups_total", {"guard": "products", "result": "error"}) == 0
    assert v("ling_bloom_guard_cache_hits_total", {"guard": "products", "kind": "value"}) == 1
    assert v("ling_bloom_guard_cache_hits_total", {"guard": "products", "kind": "null"}) == 1
    assert v("ling_bloom_guard_loads_total", {"guard": "products"}) == 2
    assert v("ling_bloom_guard_false_positive_rate", {"guard": "products"}) == pytest.approx(2 / 3)
    assert v("ling_bloom_guard_filter_error_rate", {"guard": "products"}) == 0.01
    text = prometheus_client.generate_latest(reg).decode()
    assert 'ling_bloom_guard_lookups_total{guard="products",result="rejected"} 1.0' in text

    # A second guard in the same registry: its own label, no duplicate-metric error.
    g2 = Guard(flt, None, Loader({}), metrics=reg, name="users")
    g2.get("nope")
    assert v("ling_bloom_guard_lookups_total", {"guard": "users", "result": "rejected"}) == 1
    assert v("ling_bloom_guard_lookups_total", {"guard": "products", "result": "rejected"}) == 1


def test_two_live_guards_may_not_share_a_name_in_one_registry(flt):
    # Before: two guards whose loaders were lambdas were both "<lambda>" and their
    # series were silently summed.
    prometheus_client = pytest.importorskip("prometheus_client")
    reg = prometheus_client.CollectorRegistry()
    first = Guard(flt, None, lambda k: None, metrics=reg)
    assert first.name.endswith("<lambda>")
    with pytest.raises(ValueError, match="name="):
        Guard(flt, None, lambda k: None, metrics=reg)
    with pytest.raises(ValueError, match="already exports"):
        Guard(flt, None, Loader({}), metrics=reg, name=first.name)
    # explicit names, another registry, or no export: fine
    users = Guard(flt, None, lambda k: None, metrics=reg, name="users")
    # the same explicit name on both: summed on purpose (Django's middleware + guard_for)
    users2 = Guard(flt, None, lambda k: None, metrics=reg, name="users")
    users.get("nope"); users2.get("nope")
    assert reg.get_sample_value("ling_bloom_guard_lookups_total",
                                {"guard": "users", "result": "rejected"}) == 2
    Guard(flt, None, lambda k: None, metrics=prometheus_client.CollectorRegistry())
    Guard(flt, None, lambda k: None, metrics=False)
    # the name a decorated loader gives is checked too
    g = Guard(flt, None, metrics=reg)
    with pytest.raises(ValueError, match="already exports"):
        g(lambda k: None)
    # a guard that is gone frees its name
    del first
    import gc; gc.collect()
    Guard(flt, None, lambda k: None, metrics=reg)


def test_prometheus_default_registry_and_opt_out(flt):
    prometheus_client = pytest.importorskip("prometheus_client")
    g = Guard(flt, None, Loader({}), name="test_default_registry_guard")
    assert g.metrics_registry is prometheus_client.REGISTRY
    g.get("nope")
    assert prometheus_client.REGISTRY.get_sample_value(
        "ling_bloom_guard_lookups_total",
        {"guard": "test_default_registry_guard", "result": "rejected"}) >= 1
    assert Guard(flt, None, metrics=False).metrics_registry is None


# ---------------------------------------------------------------------- caches


def test_memory_cache_ttl_and_bound():
    now = [0.0]
    c = MemoryCache(maxsize=3, clock=lambda: now[0])
    assert isinstance(c, Cache)
    c.set("a", 1, ttl=10); c.set("b", 2); c.set("c", 3)
    assert c.get("a") == 1  # a is now the most recent
    c.set("d", 4)  # evicts b, the least recently used
    assert c.get("b") is None and c.get("c") == 3 and c.get("d") == 4
    now[0] = 10.0
    assert c.get("a") is None  # expired
    assert c.get("c") == 3  # no expiry
    c.delete("c"); c.delete("missing")
    assert c.get("c") is None
    with pytest.raises(ValueError):
        MemoryCache(maxsize=0)


def test_null_marker_survives_pickling():
    assert pickle.loads(pickle.dumps(NULL)) is NULL
    assert is_null(NULL) and not is_null(None) and not NULL


def _redis_py():
    return pytest.importorskip("redis", reason="redis-py is not installed")


def test_redis_cache_with_a_real_server(clean_redis, flt):
    redis = _redis_py()
    client = redis.Redis.from_url(clean_redis.url)
    try:
        cache = RedisCache(client, prefix="t:")
        assert isinstance(cache, Cache)
        load = Loader({"1": {"id": 1, "name": "one"}})
        g = Guard(flt, cache, load, null_ttl=30, value_ttl=600, metrics=False)
        assert g.get("1") == {"id": 1, "name": "one"}
        assert g.get("1") == {"id": 1, "name": "one"}
        assert g.get("2") is None and g.get("2") is None
        assert load.calls == ["1", "2"]
        assert client.get("t:2") == b"\x00ling_bloom:null"
        assert 0 < client.pttl("t:2") <= 30_000
        assert 0 < client.pttl("t:1") <= 600_000
        g.add("2", value=None)
        assert client.exists("t:2") == 0

        jc = RedisCache(client, prefix="j:", dumps=lambda v: json.dumps(v).encode(),
                        loads=json.loads)
        jc.set("k", {"a": [1, 2]})
        assert client.get("j:k") == b'{"a": [1, 2]}' and jc.get("k") == {"a": [1, 2]}
        assert client.pttl("j:k") == -1
        jc.set("n", NULL, 5)
        assert jc.get("n") is NULL
    finally:
        client.close()


def test_async_redis_cache_with_a_real_server(clean_redis, flt):
    redis = _redis_py()
    import redis.asyncio as aredis

    async def main():
        client = aredis.Redis.from_url(clean_redis.url)
        try:
            calls = []

            async def loader(key):
                calls.append(key)
                return None

            g = AsyncGuard(flt, RedisCache(client, asynchronous=True), loader, null_ttl=10,
                           metrics=False)
            assert await g.get("3") is None and await g.get("3") is None
            assert calls == ["3"]
            assert await client.get("3") == b"\x00ling_bloom:null"
        finally:
            await client.aclose()

    asyncio.run(main())


def test_guard_over_a_shared_redis_filter(clean_redis):
    """Two guards (two 'processes') over one RedisFilter bitmap: a key found by one is
    known to the other."""
    f1 = lb._core.RedisFilter("bf:products", 10_000, 0.01, url=clean_redis.url)
    f2 = lb._core.RedisFilter("bf:products", 10_000, 0.01, url=clean_redis.url)
    try:
        f1.update(["1"])
        rows = {"1": "one", "2": "two"}
        g1 = Guard(f1, MemoryCache(), Loader(rows), metrics=False)
        g2 = Guard(f2, MemoryCache(), Loader(rows), metrics=False)
        assert g2.get("1") == "one"
        assert g2.get("2") is None  # not yet in the shared filter
        g1.add("2")  # a new row seen by the first process
        assert g2.get("2") == "two"
    finally:
        f1.close(); f2.close()


def test_a_deleted_key_is_not_an_observed_false_positive():
    # Before: deleting a row was counted as a false positive (not_found=1, rate 0.5).
    flt = lb.MemoryFilter(1000, 0.01)
    flt.update(["1", "2"])
    rows = {"1": "one", "2": "two"}
    g = Guard(flt, MemoryCache(), rows.get, metrics=False, deleted_ttl=60, deleted_max=2)
    assert g.get("1") == "one"
    g.get("never-added")                        # rejected
    del rows["1"]
    g.invalidate("1")
    g.deleted("1")
    assert g.get("1") is None and g.get("1") is None   # loaded, then the null marker
    s = g.stats()
    assert (s.not_found, s.deleted, s.false_positive_rate) == (0, 2, 0.0)
    g.record(False, "1")                        # a framework middleware's outcome
    assert g.stats().deleted == 3 and g.stats().not_found == 0
    g.record(False, "2")                        # not deleted: a real false positive
    assert g.stats().not_found == 1
    # bounded: the oldest remembered key is dropped first
    g.deleted("a"); g.deleted("b")
    g.record(False, "1")
    assert g.stats().not_found == 2


def test_deleted_keys_expire(monkeypatch):
    now = [100.0]
    monkeypatch.setattr(time, "monotonic", lambda: now[0])
    flt = lb.MemoryFilter(1000, 0.01)
    g = Guard(flt, None, metrics=False, deleted_ttl=10)
    g.deleted("1")
    g.record(False, "1")
    now[0] = 111.0
    g.record(False, "1")
    s = g.stats()
    assert (s.deleted, s.not_found) == (1, 1)


def test_a_counting_filter_forgets_a_deleted_key():
    flt = lb.CountingFilter(1000, 0.01)
    flt.add("1")
    g = Guard(flt, None, lambda k: None, metrics=False)
    g.deleted("1")
    assert "1" not in flt
    assert g.get("1") is None and g.stats().rejected == 1 and g.stats().not_found == 0


def test_an_async_lookup_waits_one_socket_timeout_at_most_even_behind_busy_connections():
    # A hung Redis with more lookups than connections: a lookup waited for a connection
    # (the first lookup's socket_timeout) and then its own socket_timeout on it.  The
    # guard bounds the whole lookup, its wait for a connection included, to one timeout
    # and applies its policy.  Here the filter never answers at all.
    hung = []  # the event, made on the loop that waits on it (Python 3.9 binds it there)

    class HungFilter:
        _cfg = {"socket_timeout": 0.05, "socket_connect_timeout": 0.05}
        error_rate = 0.01

        async def test(self, key):
            await hung[0].wait()  # a connection that never comes back
            return True

    guard = AsyncGuard(HungFilter(), metrics=False, breaker_seconds=0)

    async def main():
        hung.append(asyncio.Event())
        return await asyncio.wait_for(
            asyncio.gather(*[guard.acheck(str(i)) for i in range(6)]), 30)  # not a hang

    assert asyncio.run(main()) == [True] * 6          # "open": served without the filter
    s = guard.stats()
    assert (s.filter_errors, s.bypassed) == (6, 6)
    assert not hung[0].is_set()


_MULTIPROC_WORKER = r'''
import sys
import ling_bloom as lb
from ling_bloom.guard import Guard

f = lb.MemoryFilter(1000, 0.01)
f.update(["1", "2"])
guard = Guard(f, name="products")            # Prometheus' default registry
worker = int(sys.argv[1])
for key in ("1", "2", "3", "4", "5")[: 2 + worker]:
    if guard.check(key):
        guard.record(key != "2", key)        # "2": in the filter, no row: a false positive
'''


def test_prometheus_multiprocess_mode_sums_every_worker(tmp_path):
    # Under gunicorn each scrape showed one worker's counts, and with prometheus_client's
    # multiprocess mode (PROMETHEUS_MULTIPROC_DIR) none at all: the guard's collector is
    # per process.  In that mode each process writes its counts to the directory.
    import os
    import subprocess
    import sys

    pytest.importorskip("prometheus_client")
    from prometheus_client import CollectorRegistry, generate_latest
    from prometheus_client.multiprocess import MultiProcessCollector

    mp = tmp_path / "prometheus"
    mp.mkdir()
    env = dict(os.environ, PROMETHEUS_MULTIPROC_DIR=str(mp))
    root = os.path.dirname(os.path.dirname(lb.__file__))
    env["PYTHONPATH"] = root + os.pathsep + env.get("PYTHONPATH", "")
    for worker in range(3):                  # three workers: 2, 3 and 4 lookups
        subprocess.run([sys.executable, "-c", _MULTIPROC_WORKER, str(worker)], env=env,
                       check=True, timeout=60)
    registry = CollectorRegistry()
    MultiProcessCollector(registry, path=str(mp))
    text = generate_latest(registry).decode()

    def value(line_start):
        for line in text.splitlines():
            if line.startswith(line_start + " "):
                return float(line.split()[-1])
        raise AssertionError(f"{line_start} not in:\n{text}")

    # keys 1..k of each worker: found "1", false positive "2", the rest rejected
    assert value('ling_bloom_guard_lookups_total{guard="products",result="found"}') == 3
    assert value('ling_bloom_guard_lookups_total{guard="products",result="not_found"}') == 3
    assert value('ling_bloom_guard_lookups_total{guard="products",result="rejected"}') == 3
    assert value('ling_bloom_guard_filter_error_rate{guard="products"}') == 0.01


# ------------------------------------------------- a write that commits while a loader runs


def _caches(request):
    kind = request.param
    if kind == "memory":
        return MemoryCache(), None
    redis = _redis_py()
    srv = request.getfixturevalue("clean_redis")
    client = redis.Redis.from_url(srv.url)
    if kind == "redis":
        return RedisCache(client, prefix="c:"), client
    return RedisCache(client, prefix="j:", dumps=lambda v: json.dumps(v).encode(),
                      loads=json.loads), client


@pytest.fixture(params=["memory", "redis", "redis-json"])
def shared_cache(request):
    cache, client = _caches(request)
    yield cache
    if client is not None:
        client.close()


@pytest.mark.parametrize("write", ["created", "deleted"])
def test_an_answer_read_before_a_commit_is_not_cached_past_the_invalidation(
        flt, shared_cache, write):
    # A lookup's loader read the database before a write committed ("absent" for a row
    # being created, the old row for one being deleted); the write's hook invalidated
    # the key after the commit, and only then did the loader's answer reach the cache:
    # a null marker left after the commit (the new row 404 for null_ttl), or the deleted
    # row served for value_ttl.  Nothing read before an invalidation is cached after it.
    rows = {} if write == "created" else {"1": {"id": 1}}
    g = Guard(flt, shared_cache, null_ttl=60, value_ttl=600, metrics=False)

    def loader(key):
        seen = rows.get(key)  # read before the other transaction's COMMIT
        if write == "created":
            rows[key] = {"id": 1}
        else:
            del rows[key]
        g.invalidate(key)  # its hook, after the commit (another process: the same cache)
        return seen

    g.get("1", loader=loader)
    assert g.get("1", loader=rows.get) == rows.get("1")


def test_an_async_guard_does_not_cache_an_answer_read_before_an_invalidation(flt):
    rows = {}

    async def main():
        g = AsyncGuard(flt, MemoryCache(), null_ttl=60, metrics=False)

        async def loader(key):
            seen = rows.get(key)
            rows[key] = {"id": 1}
            await g.invalidate(key)
            return seen

        async def current(key):
            return rows.get(key)

        await g.get("1", loader=loader)
        return await g.get("1", loader=current)

    assert asyncio.run(main()) == {"id": 1}


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork on this platform")
def test_the_child_of_a_fork_serves_keys_whose_load_or_lock_the_parent_held():
    # A process forked while another thread of it held a guard's lock, or ran a loader
    # call other lookups of the key wait for, got that lock held and that call never
    # ending: its first lookup of the key hung.  The child starts with its own.
    f = lb.MemoryFilter(1000, 0.01)
    f.update(["slow", "other"])
    entered, release = threading.Event(), threading.Event()

    def loader(key):
        if key == "slow" and not release.is_set() and os.getpid() == parent:
            entered.set()
            release.wait(30)
        return f"row {key}"

    parent = os.getpid()
    g = Guard(f, MemoryCache(), loader, metrics=False)
    t = threading.Thread(target=g.get, args=("slow",))
    t.start()
    assert entered.wait(10)            # the load of "slow" is in flight in this thread
    g._stat_lock.acquire()             # and a thread holds the counters' lock (this one)
    try:
        pid = os.fork()
        if pid == 0:  # the child: every lookup must come back
            code = 1
            try:
                ok = g.get("slow") == "row slow" and g.get("other") == "row other"
                code = 0 if ok and g.stats().loads == 3 else 2
            finally:
                os._exit(code)
    finally:
        g._stat_lock.release()
        release.set()
        t.join(10)
    deadline = time.monotonic() + 30
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        if time.monotonic() > deadline:
            os.kill(pid, 9)
            os.waitpid(pid, 0)
            pytest.fail("the child's lookups hung on what the parent held at the fork")
        time.sleep(0.01)  # polls the child's exit, with the deadline above
    assert os.waitstatus_to_exitcode(status) == 0


def _child_exit_code(pid, what):
    """The forked child's exit code, or a failure when it hangs (killed after 30 s)."""
    deadline = time.monotonic() + 30
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        if time.monotonic() > deadline:
            os.kill(pid, 9)
            os.waitpid(pid, 0)
            pytest.fail(f"the child hung: {what}")
        time.sleep(0.01)  # polls the child's exit, with the deadline above


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork on this platform")
def test_the_child_of_a_fork_serves_async_keys_whose_load_the_parent_held():
    # AsyncGuard keeps its loads in flight (asyncio futures of the parent's loop) across a
    # fork: the child's lookup of the key awaits a future of a loop that never runs there.
    f = lb.MemoryFilter(1000, 0.01)
    f.update(["slow"])
    parent = os.getpid()
    entered, release = threading.Event(), threading.Event()

    async def loader(key):
        if os.getpid() == parent:
            entered.set()
            while not release.is_set():
                await asyncio.sleep(0.01)
        return f"row {key}"

    g = AsyncGuard(f, MemoryCache(), loader, metrics=False)
    t = threading.Thread(target=lambda: asyncio.run(g.get("slow")))
    t.start()
    try:
        assert entered.wait(10)  # the load of "slow" is in flight in the parent's loop
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                code = 0 if asyncio.run(asyncio.wait_for(g.get("slow"), 5)) == "row slow" else 2
            except BaseException as e:
                os.write(2, f"child: {type(e).__name__}: {e}\n".encode())
            finally:
                os._exit(code)
    finally:
        release.set()
        t.join(10)
    assert _child_exit_code(pid, "AsyncGuard.get of a key loading at the fork") == 0


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork on this platform")
def test_the_child_of_a_fork_serves_keys_whose_memory_cache_lock_the_parent_held():
    # The guard's MemoryCache lock, held by a thread of the parent at the fork, stays held
    # in the child: its first lookup hangs (the guard's own locks are renewed, not its cache's).
    f = lb.MemoryFilter(1000, 0.01)
    f.update(["a"])
    cache = MemoryCache()
    g = Guard(f, cache, lambda k: f"row {k}", metrics=False)
    cache._lock.acquire()  # as a thread of the parent in cache.get/set at the fork
    try:
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                code = 0 if g.get("a") == "row a" else 2
            finally:
                os._exit(code)
    finally:
        cache._lock.release()
    assert _child_exit_code(pid, "Guard.get with the MemoryCache lock held at the fork") == 0


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork on this platform")
def test_a_guard_made_in_the_child_of_a_fork_while_the_parent_made_one():
    # A thread of the parent constructing a guard with metrics at the fork holds the
    # metrics registration lock: in the child, the first guard with metrics hangs.
    pytest.importorskip("prometheus_client")
    from prometheus_client import CollectorRegistry
    from ling_bloom import _metrics

    f = lb.MemoryFilter(1000, 0.01)
    _metrics._collectors_lock.acquire()  # as _register_metrics in another thread
    try:
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                Guard(f, MemoryCache(), lambda k: k, name="forked", metrics=CollectorRegistry())
                code = 0
            finally:
                os._exit(code)
    finally:
        _metrics._collectors_lock.release()
    assert _child_exit_code(pid, "Guard(...) with metrics, registration lock held at the fork") == 0
