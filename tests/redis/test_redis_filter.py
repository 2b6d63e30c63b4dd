"""RedisFilter against a real redis-server (tests/support/redis_server.py): the happy paths,
the bitmap bit for bit (MemoryFilter, Go ling-base offsets read back with plain GETBIT), TTL,
geometry guard, parts over 2**32 bits, and the faults: server down, killed, restarted,
silent, wrong key type, closed filter, fork, threads, huge and empty batches, bad URLs and
options."""
from __future__ import annotations

import asyncio
import datetime
import json
import os
import pathlib
import signal
import threading
import time

import pytest

import ling_bloom as lb
from hang_guard import returns
from key_names import (ALL_BYTES, ALL_BYTES_REVERSED, NUL_KEYS, bitmap_names, server_keys,
                       sharded_names)
from redis_server import (RawRedis, RedisReplyError, connections_received,
                          exit_code_in_forked_child, free_port)

RedisFilter = getattr(lb, "RedisFilter", None) or lb._core.RedisFilter

DATA = pathlib.Path(__file__).resolve().parents[1] / "data" / "ling-base-hash-and-estimate.json"
PART = 1 << 32


def rf(srv, key="bf", *args, **kwargs):
    kwargs.setdefault("host", srv.host)
    kwargs.setdefault("port", srv.port)
    if not args and "m" not in kwargs and "capacity" not in kwargs:
        args = (10_000, 0.01)
    return RedisFilter(key, *args, **kwargs)


def bitmap(raw: RawRedis, key, nbytes: int) -> bytes:
    """The filter's bytes of the Redis string, padded with zeros to nbytes (Redis strings end at
    their last set byte); past them, only the canary byte (the first bit of the next byte)."""
    value = raw.command("GET", key) or b""
    assert len(value) <= nbytes + 1
    assert value[nbytes:] in (b"", b"\x80")
    value = value[:nbytes]
    return value + bytes(nbytes - len(value))


def test_exported_from_the_package():
    assert "RedisFilter" in lb.__all__ and lb.RedisFilter is lb._core.RedisFilter


# ------------------------------------------------------------------ happy paths


@pytest.mark.servers
def test_add_test_contains(clean_redis):
    with rf(clean_redis) as f:
        assert f.test("a") is False and "a" not in f
        assert f.add("a") is True
        assert f.add("a") is False
        assert f.test("a") is True and "a" in f
        assert f.add(b"a") is False  # str hashes as its UTF-8
        assert f.add(memoryview(b"b")) is True and bytearray(b"b") in f


@pytest.mark.servers
def test_batches(clean_redis):
    with rf(clean_redis) as f:
        assert f.add_many(["x", "y", "x", b"z"]) == [True, True, False, True]
        assert f.update(["u", "v"]) is None
        assert f.test_many(["x", "y", "z", "u", "v", "nope"]) == [True] * 5 + [False]
        assert f.add_many(k for k in ["w", "x"]) == [True, False]  # any iterable
        assert f.test_many(iter(["w"])) == [True]


# A key whose __index__ empties the caller's list while the batch converts its keys: the
# batch's keys are the ones it was given (the list is copied first), never items read past
# the list's end or str keys freed with it.  Run in a child: the bug was a segfault.
_SHRINKING_LIST = r"""
import asyncio, gc, sys
import ling_bloom as lb
host, port, flavor, method, when = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], int(sys.argv[5])

class Shrinker:
    def __init__(self, keys):
        self.keys, self.calls = keys, 0
    def __index__(self):
        self.calls += 1
        if self.calls == when:
            self.keys.clear()
            gc.collect()
        return 5

def make():
    keys = [f"k{i}" * 40 for i in range(3000)]
    keys.insert(0, Shrinker(keys))
    return keys

if flavor == "blocking":
    with lb.RedisFilter(f"shrink-{method}-{when}", 10_000, 0.01, host=host, port=port) as f:
        getattr(f, method)(make())
        print(f.test_many(["5", "k0" * 40, "k2999" * 40]))
else:
    async def main():
        async with lb.AsyncRedisFilter(f"ashrink-{method}-{when}", 10_000, 0.01, host=host,
                                       port=port) as f:
            await getattr(f, method)(make())
            print(await f.test_many(["5", "k0" * 40, "k2999" * 40]))
    asyncio.run(main())
"""


@pytest.mark.parametrize("flavor_name", ["blocking", "async"])
@pytest.mark.parametrize("method", ["add_many", "update"])
@pytest.mark.parametrize("when", [1, 2])  # while the keys are checked / while a chunk is read
def test_a_key_that_empties_its_batch_list_changes_nothing_it_was_given(
        clean_redis, flavor_name, method, when):
    import subprocess
    import sys

    env = dict(os.environ)
    root = str(pathlib.Path(lb.__file__).resolve().parents[1])
    env["PYTHONPATH"] = root + os.pathsep + env.get("PYTHONPATH", "")
    r = subprocess.run([sys.executable, "-c", _SHRINKING_LIST, clean_redis.host,
                        str(clean_redis.port), flavor_name, method, str(when)],
                       capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 0, (r.returncode, r.stderr[-2000:])
    # every key the call was given is in the filter: the list's emptying changed nothing
    assert r.stdout.strip() == "[True, True, True]", r.stdout


@pytest.mark.parametrize("mode", ["bitfield", "setbit"])
@pytest.mark.servers
def test_chunked_batches_match_one_round_trip(clean_redis, raw_redis, mode):
    keys = [f"k{i % 700}" for i in range(1000)]  # repeats across chunk boundaries
    with rf(clean_redis, "one", m=20_000, k=5, mode=mode) as one, \
            rf(clean_redis, "chunked", m=20_000, k=5, mode=mode, chunk_size=7) as chunked:
        a = one.add_many(keys)
        b = chunked.add_many(keys)
        assert a == b and a.count(False) >= 300
        assert chunked.test_many(keys) == [True] * len(keys)
        assert raw_redis.command("GET", "one") == raw_redis.command("GET", "chunked")


@pytest.mark.servers
def test_modes_write_the_same_bitmap(clean_redis, raw_redis):
    keys = [f"user:{i}" for i in range(3000)]
    with rf(clean_redis, "bf1", m=50_000, k=7, mode="bitfield") as a, \
            rf(clean_redis, "bf2", m=50_000, k=7, mode="setbit") as b:
        ra, rb = a.add_many(keys), b.add_many(keys)
        assert ra == rb
        assert raw_redis.command("GET", "bf1") == raw_redis.command("GET", "bf2")
        probe = keys[:100] + [f"absent:{i}" for i in range(1000)]
        assert a.test_many(probe) == b.test_many(probe)
        assert [a.add(k) for k in probe[95:105]] == [b.add(k) for k in probe[95:105]]


def test_empty_batches_send_nothing(clean_redis, raw_redis):
    with rf(clean_redis) as f:
        assert f.add_many([]) == []
        assert f.test_many([]) == []
        assert f.update([]) is None
        assert f.add_many(iter(())) == []
        assert raw_redis.command("DBSIZE") == 0  # not even the meta key


def test_reset_keeps_the_geometry(clean_redis, raw_redis):
    with rf(clean_redis, ttl=100) as f:
        f.update(["a", "b"])
        f.reset()
        assert f.test_many(["a", "b"]) == [False, False]
        assert raw_redis.command("EXISTS", "bf") == 0
        assert raw_redis.command("GET", "{bf}:meta") == (
            f"ling_bloom:v=1;m={f.m};k={f.k};hash=xxh3-mix".encode())
        assert f.add("a") is True


@pytest.mark.servers
def test_counts(clean_redis, raw_redis):
    n = 2000
    with rf(clean_redis, capacity=n, error_rate=0.01) as f:
        assert f.bits_set() == 0 and f.approximate_count() == 0 and f.fill_ratio() == 0.0
        f.update(f"key:{i}" for i in range(n))
        bits = raw_redis.command("BITCOUNT", "bf", 0, f.nbytes - 1)  # not the canary's byte
        assert f.bits_set() == bits > 0 == raw_redis.command("BITCOUNT", "bf") - bits - 1
        assert f.fill_ratio() == pytest.approx(bits / f.m)
        assert f.current_error_rate() == pytest.approx((bits / f.m) ** f.k)
        assert abs(f.approximate_count() - n) < n * 0.05


def test_properties(clean_redis):
    f = rf(clean_redis, "users", 5000, 0.001, hash="ling-base", ttl=datetime.timedelta(hours=1))
    p = lb.estimate(5000, 0.001)
    assert (f.key, f.m, f.k, f.hash) == ("users", p.m, p.k, "ling-base")
    assert (f.capacity, f.error_rate, f.ttl) == (5000, 0.001, 3600.0)
    assert (f.nparts, f.nbytes, f.closed) == (1, (p.m + 7) // 8, False)
    assert f.key_names() == [b"users", b"{users}:meta"]
    assert "users" in repr(f)
    g = rf(clean_redis, b"raw", m=100, k=3)
    assert (g.key, g.capacity, g.error_rate, g.ttl, g.hash) == (b"raw", None, None, None, "xxh3-mix")
    assert rf(clean_redis, "bf:{users}", m=100, k=3).key_names() == [b"bf:{users}",
                                                                      b"bf:{users}:meta"]
    f.close()
    g.close()
    assert f.closed and "closed" in repr(f)


def test_context_manager_and_close(clean_redis):
    with rf(clean_redis) as f:
        f.add("a")
    assert f.closed
    f.close()  # idempotent
    g = rf(clean_redis)
    assert g.test("a") is True  # the data stays in Redis
    g.close()


def test_closed_filter_raises_everywhere(clean_redis):
    f = rf(clean_redis)
    f.add("a")
    f.close()
    mf = lb.MemoryFilter(m=f.m, k=f.k)
    calls = [lambda: f.add("a"), lambda: f.test("a"), lambda: "a" in f,
             lambda: f.add_many(["a"]), lambda: f.update(["a"]), lambda: f.test_many(["a"]),
             f.reset, f.bits_set, f.approximate_count, f.fill_ratio, f.current_error_rate,
             lambda: f.load(mf), f.snapshot, f.key_names]
    for call in calls:
        with pytest.raises(lb.ClosedError):
            call()
    assert f.closed


def test_different_keys_types_and_binary_keys(clean_redis, raw_redis):
    with rf(clean_redis, b"bin\x00key", m=1000, k=3) as f:
        f.add("x")
        assert raw_redis.command("EXISTS", b"bin\x00key") == 1
        assert raw_redis.command("EXISTS", b"{bin\x00key}:meta") == 1
    with pytest.raises(TypeError):
        rf(clean_redis, 12, m=1000, k=3)
    with pytest.raises(lb.EmptyKeyError):
        rf(clean_redis, "", m=1000, k=3)


# Keys are bytes: every name built from one (parts, meta key, shards, the shard record) carries
# all of its bytes, a NUL too, and nothing else (key_names.py has the rules, computed apart).

@pytest.fixture
def redis_py(clean_redis):
    redis = pytest.importorskip("redis")
    client = redis.Redis(host=clean_redis.host, port=clean_redis.port)
    yield client
    client.close()


def frf(flavor, srv, key, *args, **kwargs):
    """rf() of the flavour: the blocking RedisFilter, or the async one behind a SyncFacade."""
    return flavor.RedisFilter(key, *args, host=srv.host, port=srv.port, **kwargs)


# These run for the blocking and the asyncio filter (the `flavor` fixture); key_names() is
# the blocking class's alone, asked of flavor.twin(f).

@pytest.mark.parametrize("shards", [1, 3])
@pytest.mark.parametrize("layout", ["standard", "blocked"])
@pytest.mark.servers
def test_keys_with_a_nul_byte_are_distinct_filters(flavor, clean_redis, redis_py, shards,
                                                   layout):
    kw = {"shards": shards} if shards > 1 else {}
    items = [f"item:{i}" for i in range(300)]  # every shard gets some

    def names(key):
        return sharded_names(key, shards) if shards > 1 else bitmap_names(key)

    fs = {key: frf(flavor, clean_redis, key, 3000, 0.01, layout=layout, **kw)
          for key in NUL_KEYS}
    try:
        fs[b"a\x00b"].update(items)
        assert server_keys(redis_py) == names(b"a\x00b")   # exactly its names, nothing stray
        assert fs[b"a\x00b"].test_many(items) == [True] * len(items)
        assert not any(fs[b"a"].test_many(items))        # the others share none of its bits
        assert not any(fs[b"a\x00c"].test_many(items))
        others = [f"other:{i}" for i in range(300)]
        for key in (b"a", b"a\x00c"):
            fs[key].update(others)
        assert not any(fs[b"a"].test_many(items)) and all(fs[b"a"].test_many(others))
        assert server_keys(redis_py) == names(b"a") | names(b"a\x00b") | names(b"a\x00c")
        for key, f in fs.items():
            assert set(flavor.twin(f).key_names()) == names(key)
        fs[b"a"].reset()                                 # a reset empties its own keys only
        assert fs[b"a\x00b"].test_many(items) == [True] * len(items)
    finally:
        for f in fs.values():
            f.close()


@pytest.mark.parametrize("single", [b"ab", bytearray(b"ab"), memoryview(b"ab"), "ab"])
def test_a_single_bytes_like_key_is_not_a_batch_of_its_byte_values(flavor, clean_redis, single):
    # the asyncio filter took a bytearray or memoryview as the keys "97" and "98"
    with frf(flavor, clean_redis, "single", 1000, 0.01) as f:
        for method in ("add_many", "update", "test_many"):
            with pytest.raises(TypeError, match="single"):
                getattr(f, method)(single)
        assert f.test_many(["97", "98"]) == [False, False]


class SecondLookFails:
    """An int-like whose __index__ answers once, then raises."""

    def __init__(self):
        self.calls = 0

    def __index__(self):
        self.calls += 1
        if self.calls > 1:
            raise ValueError("asked a second time")
        return 5


@pytest.mark.parametrize("method", ["add_many", "update"])
def test_a_batch_converts_each_key_once_so_a_key_cannot_fail_mid_way(flavor, clean_redis,
                                                                     method):
    # The keys were checked, then converted again chunk by chunk: a key that failed the
    # second time raised after the chunks before it were written (10,000 keys added by a
    # call that raised).  A batch's keys are the ones it checked.
    with frf(flavor, clean_redis, "once", 100_000, 0.01, chunk_size=1000) as f:
        keys = [f"once-{i}" for i in range(3000)]
        keys[2500] = SecondLookFails()
        getattr(f, method)(keys)
        assert f.test_many(["5", "once-0", "once-2999"]) == [True, True, True]


def test_open_reads_the_sharded_record_of_the_whole_key(flavor, clean_redis, redis_py):
    # written by the flavour's filter, opened by the blocking class (open() is its alone)
    with frf(flavor, clean_redis, b"a", 1000, 0.01, shards=2) as f:
        f.add("x")
    with pytest.raises(lb.FilterNotFoundError):
        RedisFilter.open(clean_redis.url, b"a\x00b")    # b"a"'s record is not its own
    with frf(flavor, clean_redis, b"a\x00b", 1000, 0.01, shards=3, layout="blocked") as f:
        f.add("x")
    with RedisFilter.open(clean_redis.url, b"a\x00b") as g:
        assert (g.shards, g.layout) == (3, "blocked") and "x" in g
    with RedisFilter.open(clean_redis.url, b"a") as g:
        assert (g.shards, g.layout) == (2, "standard") and "x" in g


@pytest.mark.parametrize("key", [ALL_BYTES, ALL_BYTES_REVERSED, b"a\x00b", b"{a\x00b}",
                                 b"x{\x00}y", b"}\x00{"],
                         ids=["all", "reversed", "nul", "nul-tag", "tag-of-nul", "close-open"])
@pytest.mark.parametrize("shards", [1, 2])
def test_every_byte_of_a_key_round_trips(flavor, clean_redis, redis_py, key, shards):
    kw = {"shards": shards} if shards > 1 else {}
    want = sharded_names(key, shards) if shards > 1 else bitmap_names(key)
    with frf(flavor, clean_redis, key, 1000, 0.01, **kw) as f:
        assert f.key == key
        f.update([f"item:{i}" for i in range(50)])
        assert server_keys(redis_py) == want and set(flavor.twin(f).key_names()) == want
    with RedisFilter.open(clean_redis.url, key) as g:
        assert g.key == key and g.shards == shards and "item:7" in g


# ------------------------------------------------------------------------- TTL


@pytest.mark.servers
def test_ttl_is_set_and_refreshed_by_writes_only(clean_redis, raw_redis):
    with rf(clean_redis, ttl=100) as f:
        f.add("a")
        for key in ("bf", "{bf}:meta"):
            assert 95_000 < raw_redis.command("PTTL", key) <= 100_000
        # age the filter, then: reads leave the expiry alone, writes put it back to 100 s
        for key in ("bf", "{bf}:meta"):
            raw_redis.command("PEXPIRE", key, 20_000)
        f.test("a")
        f.test_many(["a", "b"])
        assert raw_redis.command("PTTL", "bf") <= 20_000
        f.add("b")
        for key in ("bf", "{bf}:meta"):
            assert raw_redis.command("PTTL", key) > 95_000
        raw_redis.command("PEXPIRE", "bf", 20_000)
        f.add_many(["c", "d"])
        assert raw_redis.command("PTTL", "bf") > 95_000
        raw_redis.command("PEXPIRE", "bf", 20_000)
        f.update(["a"])  # a write that changes no bit still refreshes
        assert raw_redis.command("PTTL", "bf") > 95_000
        raw_redis.command("PEXPIRE", "{bf}:meta", 20_000)
        f.reset()
        assert raw_redis.command("PTTL", "{bf}:meta") > 95_000


def test_ttl_refresh_costs_no_extra_round_trip(clean_redis, raw_redis):
    """The PEXPIREs travel in the same pipeline as the writes: count commands on the server."""
    with rf(clean_redis, ttl=100) as f, rf(clean_redis, "plain") as g:
        f.add("warm")
        g.add("warm")

        def calls(cmd):
            info = raw_redis.command("INFO", "commandstats").decode()
            for line in info.splitlines():
                if line.startswith(f"cmdstat_{cmd}:"):
                    return int(line.split("calls=")[1].split(",")[0])
            return 0

        before = calls("pexpire")
        f.add_many(["a", "b", "c"])
        assert calls("pexpire") - before == 2  # the bitmap and the meta key, once per round trip
        before = calls("pexpire")
        g.add_many(["a", "b", "c"])
        f.test_many(["a", "b"])
        assert calls("pexpire") == before


def test_ttl_expires(clean_redis, raw_redis):
    with rf(clean_redis, ttl=0.3) as f:
        f.add("a")
        deadline = time.monotonic() + 30  # a bound on a hang: expiry takes 0.3 s
        while raw_redis.command("EXISTS", "bf", "{bf}:meta") and time.monotonic() < deadline:
            time.sleep(0.05)
        assert raw_redis.command("EXISTS", "bf", "{bf}:meta") == 0
        assert f.test("a") is False
        assert f.add("a") is True


@pytest.mark.parametrize("ttl", [0, -1, float("nan"), float("inf"), "10"])
def test_bad_ttl(clean_redis, ttl):
    with pytest.raises((ValueError, TypeError)):
        rf(clean_redis, ttl=ttl)


# -------------------------------------------------------------- bit for bit


def _vectors():
    data = json.loads(DATA.read_text())
    for entry in data["hash"]:
        key = bytes.fromhex(entry["key_hex"])
        for geo in entry["indices"]:
            if key and geo["m"] <= 1 << 24:  # bigger m: a 512 MiB Redis string
                yield key, geo["m"], geo["k"], geo["indices"]


def test_ling_base_sets_exactly_the_go_offsets(clean_redis, raw_redis):
    vectors = list(_vectors())
    assert len(vectors) >= 22 * 5
    for i, (key, m, k, offsets) in enumerate(vectors):
        name = f"go:{i}"
        with rf(clean_redis, name, m=m, k=k, hash="ling-base") as f:
            assert f.add(key) is True
            assert f.test(key) is True
        got = raw_redis.pipeline([("GETBIT", name, o) for o in offsets])
        assert got == [1] * len(offsets), (key, m, k)
        # exactly those: no other bit is set
        assert raw_redis.command("BITCOUNT", name, 0, (m + 7) // 8 - 1) == len(set(offsets)), (
            key, m, k)
        assert raw_redis.command("GETBIT", name, 8 * ((m + 7) // 8)) == 1  # the canary


@pytest.mark.parametrize("hash_", ["xxh3-mix", "xxh3", "ling-base"])
@pytest.mark.parametrize("mode", ["bitfield", "setbit"])
@pytest.mark.servers
def test_memory_filter_bytes_equal_the_redis_string(clean_redis, raw_redis, hash_, mode):
    keys = [f"item:{i}" for i in range(5000)]
    mf = lb.MemoryFilter(5000, 0.01, hash=hash_)
    mf.update(keys)
    with rf(clean_redis, "bf", 5000, 0.01, hash=hash_, mode=mode) as f:
        assert (f.m, f.k) == (mf.m, mf.k)
        f.update(keys)
        assert bitmap(raw_redis, "bf", f.nbytes) == mf.to_bitmap()
        snap = f.snapshot()
        assert snap.to_bitmap() == mf.to_bitmap() and snap == mf


@pytest.mark.servers
def test_snapshot(clean_redis, raw_redis):
    with rf(clean_redis, "bf", 1000, 0.01) as f:
        empty = f.snapshot()  # no bitmap in Redis yet: all zeros
        assert isinstance(empty, lb.MemoryFilter)
        assert (empty.m, empty.k, empty.hash, empty.bits_set) == (f.m, f.k, "xxh3-mix", 0)
        f.update(["a", "b"])
        snap = f.snapshot()
        assert snap.test_many(["a", "b"]) == [True, True]
        assert (snap.capacity, snap.error_rate) == (1000, 0.01)
        again = f.snapshot()
        snap.add("local only")  # a copy: Redis does not change
        assert f.test("local only") is False
        assert f.snapshot() == again != snap


@pytest.mark.servers
def test_load_merges_with_other_writers(clean_redis, raw_redis):
    local = [f"db:{i}" for i in range(20_000)]
    other = [f"live:{i}" for i in range(500)]
    with rf(clean_redis, "bf", 20_000, 0.01, ttl=100) as f:
        f.update(other)  # another process wrote these first
        mine = lb.MemoryFilter(20_000, 0.01)
        mine.update(local)
        before = bitmap(raw_redis, "bf", f.nbytes)
        raw_redis.command("PEXPIRE", "bf", 20_000)
        f.load(mine)
        after = bitmap(raw_redis, "bf", f.nbytes)
        assert after == bytes(a | b for a, b in zip(before, mine.to_bitmap()))
        assert f.test_many(local + other) == [True] * (len(local) + len(other))
        assert raw_redis.command("PTTL", "bf") > 95_000
        assert [k for k in raw_redis.command("KEYS", "*") if b":load:" in k] == []
        f.load(mine)  # idempotent
        assert bitmap(raw_redis, "bf", f.nbytes) == after


def test_load_checks_what_it_is_given(clean_redis):
    with rf(clean_redis, "bf", m=1000, k=3) as f:
        with pytest.raises(lb.GeometryMismatchError):
            f.load(lb.MemoryFilter(m=1001, k=3))
        with pytest.raises(lb.GeometryMismatchError):
            f.load(lb.MemoryFilter(m=1000, k=4))
        with pytest.raises(lb.GeometryMismatchError):
            f.load(lb.MemoryFilter(m=1000, k=3, hash="ling-base"))
        with pytest.raises(TypeError):
            f.load(lb.CountingFilter(m=1000, k=3))
        with pytest.raises(TypeError):
            f.load(b"\x00" * 125)
        f.load(lb.MemoryFilter(m=1000, k=3))  # empty: fine, nothing set
        assert f.bits_set() == 0


# ------------------------------------------------------- open and the geometry


def test_open_adopts_the_stored_geometry(clean_redis):
    with rf(clean_redis, "users", m=12345, k=5, hash="ling-base") as f:
        f.add("alice")
    with RedisFilter.open(clean_redis.url, "users") as g:
        assert (g.m, g.k, g.hash) == (12345, 5, "ling-base")
        assert g.test("alice") is True and g.add("bob") is True
    with RedisFilter("users", url=clean_redis.url) as h:
        assert (h.m, h.k) == (12345, 5) and "bob" in h


def test_never_touches_a_key_it_does_not_own(clean_redis, raw_redis):
    # a user's string: it was written to ("hello\0\0...") and add answered True
    raw_redis.command("SET", "bf", "hello")
    with rf(clean_redis, "bf") as f:
        for call in (lambda: f.add("a"), lambda: f.test("a"), lambda: f.add_many(["a", "b"]),
                     lambda: f.test_many(["a"]), f.reset, f.bits_set, f.snapshot,
                     lambda: f.load(lb.MemoryFilter(m=f.m, k=f.k))):
            with pytest.raises(lb.KeyNotOwnedError) as e:
                call()
            assert e.value.key == "bf" and "'bf'" in str(e.value)
            assert "adopt=True" in str(e.value)
            assert isinstance(e.value, lb.RedisError) and isinstance(e.value, ValueError)
    assert raw_redis.command("GET", "bf") == b"hello"
    assert raw_redis.command("EXISTS", "{bf}:meta") == 0
    # a key of another type is a WrongTypeError, as before; a missing key is created
    with rf(clean_redis, "new") as g:
        assert g.add("a") is True
    assert raw_redis.command("EXISTS", "{new}:meta") == 1


def test_expired_or_deleted_filter_comes_back_with_its_meta_key(clean_redis, raw_redis):
    # the meta key is checked once per connection; a write after the filter expired or
    # was deleted must not leave a bare bitmap, which every other process would refuse
    with rf(clean_redis, "bf", ttl=60) as f:
        f.add("a")
        raw_redis.command("PEXPIRE", "bf", 1)
        raw_redis.command("PEXPIRE", "{bf}:meta", 1)
        deadline = time.monotonic() + 60  # a watchdog: expiry takes a millisecond
        while raw_redis.command("EXISTS", "bf", "{bf}:meta") and time.monotonic() < deadline:
            time.sleep(0.001)
        assert raw_redis.command("EXISTS", "bf", "{bf}:meta") == 0
        assert f.add("b") is True
        assert 0 < raw_redis.command("PTTL", "{bf}:meta") <= 60_000
        raw_redis.command("DEL", "bf", "{bf}:meta")  # another client
        f.add_many(["c", "d"])
        assert raw_redis.command("EXISTS", "{bf}:meta") == 1
    with rf(clean_redis, "bf") as g:  # a new connection: its own, not someone else's
        assert g.test_many(["a", "b", "c", "d"]) == [False, False, True, True]


def test_adopt_a_bitmap_written_without_a_meta_key(clean_redis, raw_redis):
    m, k = 4096, 3
    for i in lb.indices("alice", m, k, hash="ling-base"):  # as a Go service writes it
        raw_redis.command("SETBIT", "go:users", i, 1)
    with pytest.raises(TypeError, match="m, k and hash"):
        rf(clean_redis, "go:users", 100, 0.01, adopt=True)
    with pytest.raises(TypeError, match="m, k and hash"):
        rf(clean_redis, "go:users", m=m, k=k, adopt=True)  # the hash too: no default guessed
    with rf(clean_redis, "go:users", m=m, k=k, hash="ling-base") as f:
        with pytest.raises(lb.KeyNotOwnedError):
            f.test("alice")
    with rf(clean_redis, "go:users", m=m, k=k, hash="ling-base", adopt=True) as f:
        assert f.test("alice") is True
        assert f.add("bob") is True
    assert raw_redis.command("EXISTS", "{go:users}:meta") == 1  # claimed: guarded from now on
    with rf(clean_redis, "go:users", m=m, k=k, hash="ling-base") as g:
        assert g.test_many(["alice", "bob"]) == [True, True]
    with rf(clean_redis, "go:users", m=m + 1, k=k, hash="ling-base", adopt=True) as h:
        with pytest.raises(lb.GeometryMismatchError):
            h.add("x")  # adopting never overrides a meta key


def test_size_limit_before_anything_is_sent(clean_redis, raw_redis):
    # a capacity typo took 3.4 s and 2 GB of the server's memory
    with pytest.raises(lb.InvalidCapacityError, match="max_bytes"):
        RedisFilter.from_url(clean_redis.url, "k12", 10**12, 0.01)
    with pytest.raises(lb.InvalidCapacityError, match="max_bytes"):
        rf(clean_redis, "k12", m=(256 << 23) + 8, k=1)
    rf(clean_redis, "k12", m=256 << 23, k=1).close()  # exactly 256 MiB: the default allows it
    with pytest.raises(lb.InvalidCapacityError, match="max_bytes"):
        rf(clean_redis, "k12", m=1 << 32, k=1, max_bytes=1000)
    rf(clean_redis, "k12", m=1 << 40, k=1, max_bytes=1 << 40).close()
    for bad in (0, -1):
        with pytest.raises(ValueError):
            rf(clean_redis, "k12", max_bytes=bad)
    assert raw_redis.command("DBSIZE") == 0
    # an existing filter is opened whatever its size: the limit guards what is asked for
    with rf(clean_redis, "huge", m=1 << 40, k=1, max_bytes=1 << 40) as f:
        f.reset()  # writes the meta key only
    with RedisFilter.open(clean_redis.url, "huge") as g:
        assert g.m == 1 << 40


@pytest.mark.servers
def test_maxmemory_before_anything_is_written(redis_server_factory):
    srv = redis_server_factory(["--maxmemory", "8mb"])
    with rf(srv, "big", 10_000_000, 0.01) as f:  # about 12 MB
        for call in (lambda: f.add("a"), lambda: f.test("a"), f.reset):
            with pytest.raises(lb.InvalidCapacityError, match="maxmemory"):
                call()
    with rf(srv, "small", 100_000, 0.01) as g:
        assert g.add("a") is True
    with srv.client() as c:
        assert c.command("EXISTS", "big", "{big}:meta") == 0


def test_open_missing_filter_is_a_key_error(clean_redis, raw_redis):
    with pytest.raises(KeyError, match="nothing|no ling_bloom filter"):
        RedisFilter.open(clean_redis.url, "missing")
    raw_redis.command("SETBIT", "goonly", 5, 1)  # a Go bitmap without a meta key
    with pytest.raises(KeyError):
        RedisFilter.open(clean_redis.url, "goonly")
    with pytest.raises(TypeError):
        RedisFilter.open(clean_redis.url, "users", capacity=10)
    with pytest.raises(TypeError):
        RedisFilter.open(clean_redis.url)


def test_open_garbage_meta_key(clean_redis, raw_redis):
    raw_redis.command("SET", "{junk}:meta", "not a geometry")
    with pytest.raises(lb.GeometryMismatchError):
        RedisFilter.open(clean_redis.url, "junk")


def test_from_url(clean_redis, raw_redis):
    with RedisFilter.from_url(clean_redis.url + "/3", "bf", 1000, 0.01) as f:
        f.add("x")
    assert raw_redis.command("EXISTS", "bf") == 0
    with RawRedis(clean_redis.port, db=3) as db3:
        assert db3.command("EXISTS", "bf") == 1
    with RedisFilter.from_url(clean_redis.unix_url(db=3), "bf", 1000, 0.01) as f:
        assert "x" in f
    with RedisFilter("bf", 1000, 0.01, unix_socket_path=clean_redis.unix_path, db=3) as f:
        assert "x" in f
    with RedisFilter.from_url(clean_redis.url, "bf", 1000, 0.01, db=3) as f:
        assert "x" in f  # a keyword wins over the URL


@pytest.mark.parametrize("other", [dict(m=2000, k=7), dict(m=1000, k=6),
                                   dict(m=1000, k=7, hash="ling-base")])
def test_geometry_mismatch_is_an_error_and_touches_nothing(clean_redis, raw_redis, other):
    with rf(clean_redis, "bf", m=1000, k=7) as f:
        f.add("a")
    before = raw_redis.command("GET", "bf")
    with rf(clean_redis, "bf", **other) as g:
        for call in (lambda: g.add("b"), lambda: g.test("a"), lambda: g.add_many(["b"]),
                     lambda: g.test_many(["a"]), g.reset, lambda: g.update(["c"])):
            with pytest.raises(lb.GeometryMismatchError) as e:
                call()
            assert isinstance(e.value, ValueError) and "m=1000" in str(e.value)
    assert raw_redis.command("GET", "bf") == before


def test_geometry_rechecked_after_the_server_lost_it(private_redis):
    """A restarted (empty) server: the first writer after it claims the meta key again."""
    f = rf(private_redis, "bf", m=1000, k=7)
    f.add("a")
    private_redis.kill()
    private_redis.restart()
    g = rf(private_redis, "bf", m=2000, k=7)
    g.add("b")  # claims the meta key on the empty server
    with pytest.raises(lb.GeometryMismatchError):
        f.add("c")  # reconnects, re-checks, refuses
    f.close()
    g.close()


# ----------------------------------------------------------- over 2**32 bits


@pytest.mark.servers
def test_parts_over_2_32_bits(clean_redis, raw_redis):
    m = PART + (1 << 20)
    # k = 1 and keys whose bit is low in part 0 or anywhere in part 1: Redis allocates
    # strings only up to the highest bit set, so the test stays small.
    low, high = [], []
    i = 0
    while len(low) < 3 or len(high) < 3:
        key = f"mp:{i}"
        (idx,) = lb.indices(key, m, 1)
        if idx < 1 << 20 and len(low) < 3:
            low.append((key, idx))
        elif idx >= PART and len(high) < 3:
            high.append((key, idx))
        i += 1
    with rf(clean_redis, "big", m=m, k=1, ttl=100, max_bytes=m // 8) as f:
        assert f.nparts == 2 and f.nbytes == m // 8
        assert f.key_names() == [b"big", b"{big}:part:1", b"{big}:meta"]
        keys = [k for k, _ in low + high]
        assert f.add_many(keys) == [True] * 6
        assert f.test_many(keys) == [True] * 6
        for _, idx in low:
            assert raw_redis.command("GETBIT", "big", idx) == 1
        for _, idx in high:
            assert raw_redis.command("GETBIT", "{big}:part:1", idx - PART) == 1
        assert raw_redis.command("STRLEN", "{big}:part:1") <= (1 << 17)
        assert raw_redis.command("STRLEN", "big") <= (1 << 17)
        assert f.bits_set() == len({i for _, i in low + high})
        for name in ("big", "{big}:part:1", "{big}:meta"):
            raw_redis.command("PEXPIRE", name, 20_000)
        f.add(high[0][0])  # TTL covers every part
        for name in ("big", "{big}:part:1", "{big}:meta"):
            assert raw_redis.command("PTTL", name) > 95_000
        f.reset()  # and so does reset
        assert raw_redis.command("EXISTS", "big", "{big}:part:1") == 0
        assert f.test_many(keys) == [False] * 6


# ---------------------------------------------------------------------- faults


def test_server_down_before_the_first_call():
    port = free_port()  # nothing listens there
    f = RedisFilter("bf", 1000, host="127.0.0.1", port=port, socket_connect_timeout=2)
    for call in (lambda: f.add("a"), lambda: f.test("a"), lambda: f.add_many(["a"]),
                 f.reset, f.bits_set, f.snapshot):
        with pytest.raises(lb.RedisConnectionError) as e:
            call()
        assert isinstance(e.value, ConnectionError) and isinstance(e.value, lb.RedisError)
        assert isinstance(e.value, lb.BloomError)
    with pytest.raises(lb.RedisConnectionError):
        RedisFilter.open(f"redis://127.0.0.1:{port}", "bf")
    f.close()


def test_a_refused_connection_says_so_in_both_flavors(flavor):
    # The blocking filter says the system's reason ("Connection refused"); the asyncio
    # filter said asyncio's text instead ("Connect call failed ('127.0.0.1', 1234)").
    port = free_port()  # nothing listens there
    with flavor.RedisFilter.from_url(f"redis://127.0.0.1:{port}", "bf", 1000, 0.01,
                                     socket_connect_timeout=2) as f:
        with pytest.raises(lb.RedisConnectionError) as e:
            f.add("a")
    assert str(e.value) == f"error connecting to Redis at 127.0.0.1:{port}: Connection refused"


@pytest.mark.servers
def test_server_down_between_calls_then_restarted(private_redis):
    f = rf(private_redis)
    assert f.add("a") is True
    private_redis.kill()
    for call in (lambda: f.add("b"), lambda: f.test("a"), lambda: f.test_many(["a"])):
        with pytest.raises(lb.RedisConnectionError) as e:
            call()
        assert isinstance(e.value, ConnectionError)
    private_redis.restart()  # empty: nothing is persisted
    with pytest.raises(lb.FilterLostError):  # the filter this client knew is gone
        f.test("a")
    f.reset()  # rebuilt on purpose
    assert f.test("a") is False
    assert f.add("a") is True and f.test("a") is True
    f.close()


def test_restart_between_calls_is_invisible(private_redis):
    """A stale connection after a restart: the idempotent batch is retried on a new one.
    (A filter with a ttl: one without says the restart lost it, test_lost_filter.py.)"""
    f = rf(private_redis, ttl=3600)
    f.add("a")
    private_redis.kill()
    private_redis.restart()
    assert f.add("b") is True
    assert f.test_many(["a", "b"]) == [False, True]
    private_redis.kill()
    private_redis.restart()
    assert f.test("b") is False
    f.close()


def test_killed_during_a_big_batch(private_redis):
    keys = [f"key:{i}" for i in range(1_500_000)]
    f = rf(private_redis, "bf", 1_500_000, 0.01, chunk_size=2000)
    f.add("warm")
    outcome = {}

    def run():
        try:
            f.update(keys)
            outcome["result"] = "finished"
        except BaseException as e:  # noqa: BLE001
            outcome["error"] = e

    watcher = private_redis.client()
    t = threading.Thread(target=run)
    t.start()
    # wait until some chunks landed (bits beyond "warm"'s), then crash the server
    deadline = time.monotonic() + 60
    while watcher.command("BITCOUNT", "bf") < 10_000:
        assert time.monotonic() < deadline, f"no chunk landed: {outcome}"
        time.sleep(0.001)
    watcher.close()
    private_redis.kill()
    t.join(timeout=60)
    assert not t.is_alive(), "the batch hung after the server died"
    assert "result" not in outcome, "the batch finished before the kill: make it bigger"
    assert isinstance(outcome["error"], lb.RedisConnectionError), outcome
    private_redis.restart()
    with pytest.raises(lb.FilterLostError):  # the next call works on a fresh connection
        f.add("after")
    f.reset()
    assert f.add("after") is True
    f.update(keys[:10_000])
    assert f.test_many(keys[:10_000]) == [True] * 10_000
    f.close()


@pytest.mark.parametrize("call", ["add", "test_many", "add_many", "open"])
def test_silent_server_times_out(silent_listener, call):
    """The call ends with RedisTimeoutError (a TimeoutError), on its one connection: no
    retry of a call that timed out."""
    timeout = 0.5

    def run():
        if call == "open":
            RedisFilter.open(silent_listener.url, "bf", socket_timeout=timeout)
        else:
            f = RedisFilter("bf", 1000, url=silent_listener.url, socket_timeout=timeout)
            if call == "add":
                f.add("a")
            elif call == "test_many":
                f.test_many(["a"] * 5)
            else:
                f.add_many([f"k{i}" for i in range(50_000)])

    with pytest.raises(lb.RedisTimeoutError) as e:
        returns(run)
    assert isinstance(e.value, TimeoutError) and isinstance(e.value, lb.RedisError)
    assert len(silent_listener.accepted) == 1


def test_timeout_then_the_filter_recovers(clean_redis, silent_listener):
    """After a timeout the connection is discarded; a working server later answers fine."""
    f = RedisFilter("bf", 1000, url=silent_listener.url, socket_timeout=0.3)
    with pytest.raises(lb.RedisTimeoutError):
        f.add("a")
    with pytest.raises(lb.RedisTimeoutError):
        f.add("a")  # a new connection, timing out again: never a stale reply
    f.close()
    assert len(silent_listener.accepted) >= 2


@pytest.mark.servers
def test_wrong_key_type_names_the_key(clean_redis, raw_redis):
    raw_redis.command("LPUSH", "bf", "x")
    with rf(clean_redis, "bf") as f:
        for call in (lambda: f.add("a"), lambda: f.test("a"), lambda: f.add_many(["a", "b"]),
                     lambda: f.test_many(["a"]), f.bits_set, f.snapshot):
            with pytest.raises(lb.WrongTypeError) as e:
                call()
            assert e.value.key == "bf" and "'bf'" in str(e.value)
            assert e.value.reply.startswith("WRONGTYPE")
            assert isinstance(e.value, lb.RedisResponseError)
        assert raw_redis.command("LRANGE", "bf", 0, -1) == [b"x"]
        raw_redis.command("DEL", "bf")
        assert f.add("a") is True  # the connection stayed in step
    raw_redis.command("FLUSHALL")
    raw_redis.command("HSET", "{bf}:meta", "f", "v")
    with rf(clean_redis, "bf") as f:
        with pytest.raises(lb.WrongTypeError) as e:
            f.add("a")
        assert "meta" in str(e.value)


@pytest.mark.servers
def test_server_error_reply_carries_the_text(private_redis):
    with rf(private_redis) as f:
        f.add("before")  # created (and checked against maxmemory) while there was room
        with private_redis.client() as c:
            c.command("CONFIG", "SET", "maxmemory", "1")
            c.command("CONFIG", "SET", "maxmemory-policy", "noeviction")
        with pytest.raises(lb.RedisResponseError) as e:
            f.add("a")
        assert "OOM" in e.value.reply and "OOM" in str(e.value)
        with private_redis.client() as c:
            c.command("CONFIG", "SET", "maxmemory", "0")
        assert f.add("a") is True


@pytest.mark.servers
def test_password_and_db(redis_server_factory):
    srv = redis_server_factory(["--requirepass", "s3cret"])
    with RedisFilter.from_url(f"redis://:s3cret@127.0.0.1:{srv.port}/2", "bf", 100) as f:
        assert f.add("a") is True
    with RedisFilter("bf", 100, port=srv.port, host="127.0.0.1", password="s3cret",
                     db=2) as f:
        assert "a" in f
    with RedisFilter.from_url(f"redis://default:s3cret@127.0.0.1:{srv.port}/2", "bf",
                              100) as f:
        assert "a" in f
    with RedisFilter("bf", 100, port=srv.port, host="127.0.0.1", password="wrong") as f:
        with pytest.raises(lb.RedisConnectionError):
            f.add("a")
    with RedisFilter("bf", 100, port=srv.port, host="127.0.0.1") as f:
        with pytest.raises(lb.RedisError):
            f.add("a")


def test_forked_child_reconnects(clean_redis, raw_redis):
    f = rf(clean_redis)
    f.add("parent")
    before = connections_received(raw_redis)
    assert exit_code_in_forked_child(
        lambda: f.test("parent") and f.add("child")
        and f.test_many(["parent", "child"]) == [True, True]) == 0
    after = connections_received(raw_redis)
    assert after > before  # the child opened its own connection
    # the parent's connection is still in step
    for i in range(20):
        assert f.add(f"p{i}") is True
        assert f.test_many(["parent", "child", f"p{i}"]) == [True, True, True]
    f.close()


def test_threads_share_one_filter(clean_redis):
    f = rf(clean_redis, "bf", 200_000, 0.01, chunk_size=500)
    errors = []

    def worker(t):
        try:
            mine = [f"t{t}:{i}" for i in range(20_000)]
            f.update(mine[:10_000])
            for key in mine[10_000:10_200]:
                f.add(key)
                if key not in f:
                    errors.append(("single", key))
            f.add_many(mine[10_200:])
            if f.test_many(mine) != [True] * len(mine):
                errors.append(("batch", t))
        except BaseException as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not any(t.is_alive() for t in threads)
    assert errors == []
    every = [f"t{t}:{i}" for t in range(8) for i in range(20_000)]
    assert f.test_many(every) == [True] * len(every)
    f.close()


def test_close_while_other_threads_run(clean_redis):
    f = rf(clean_redis, "bf", 100_000, 0.01, chunk_size=1000)
    keys = [f"k{i}" for i in range(100_000)]
    errors = []

    def worker():
        try:
            while True:
                f.test_many(keys[:5000])
                f.add("x")
        except lb.ClosedError:
            pass
        except BaseException as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for t in threads:
        t.start()
    f.update(keys)
    f.close()
    for t in threads:
        t.join(timeout=60)
    assert not any(t.is_alive() for t in threads) and errors == []


def test_huge_batch(clean_redis, raw_redis):
    n = 200_000
    keys = [f"user:{i}" for i in range(n)]
    with rf(clean_redis, "bf", n, 0.01) as f:
        added = f.add_many(keys)
        assert len(added) == n and added.count(True) > n * 0.98
        assert f.test_many(keys) == [True] * n
        mf = lb.MemoryFilter(n, 0.01)
        mf.update(keys)
        assert bitmap(raw_redis, "bf", f.nbytes) == mf.to_bitmap()
        absent = f.test_many(f"absent:{i}" for i in range(n))
        assert sum(absent) < n * 0.02


def test_bad_keys_in_a_batch_change_nothing(clean_redis, raw_redis):
    with rf(clean_redis) as f:
        with pytest.raises(lb.EmptyKeyError):
            f.add_many(["a", "b", ""])
        with pytest.raises(TypeError):
            f.update(["a", 3.0])
        with pytest.raises(TypeError):
            f.add_many("abc")  # a single key, not an iterable of keys
        with pytest.raises(TypeError):
            f.add(None)
        with pytest.raises(lb.EmptyKeyError):
            f.test("")
        assert raw_redis.command("EXISTS", "bf") == 0


# ---------------------------------------------------------- URLs and options


@pytest.mark.parametrize("url", [
    "http://127.0.0.1:6379", "redis://127.0.0.1:notaport", "redis://127.0.0.1:99999",
    "redis://127.0.0.1:6379/notadb", "127.0.0.1:6379", "", "redis://[::1", "unix://",
])
def test_bad_urls(url):
    with pytest.raises(ValueError):
        RedisFilter("bf", 100, url=url)
    with pytest.raises(ValueError):
        RedisFilter.from_url(url, "bf", 100)


@pytest.mark.parametrize("kwargs, what", [
    (dict(url="redis://good\x00@evil:1234"), "URL"),
    (dict(url="redis+sentinel://127.0.0.1:26379/svc\x00other"), "URL"),
    (dict(url="redis+cluster://127.0.0.1:7000\x00,evil:1"), "URL"),
    (dict(host="good\x00evil"), "host"),
    (dict(host=b"good\x00evil"), "host"),
    (dict(password="secret\x00tail"), "password"),
    (dict(username="user\x00tail"), "username"),
    (dict(unix_socket_path="/tmp/a\x00b"), "unix_socket_path"),
    (dict(ssl=True, ssl_ca_certs="/etc/ssl\x00/x"), "ssl_ca_certs"),
    (dict(ssl=True, ssl_cert_reqs="required\x00x"), "ssl_cert_reqs"),
])
def test_a_nul_byte_in_a_url_or_connection_keyword_is_refused(flavor, kwargs, what):
    # C takes these as C strings: a NUL would cut them short and connect elsewhere
    # ("redis://good\0@evil:1234" read as good:6379), so it is refused, as a newline is.
    for make in (lambda: flavor.RedisFilter("bf", 100, **kwargs),
                 lambda: flavor.RedisBloomFilter("bf", 100, 0.01, **kwargs)):
        with pytest.raises(ValueError, match=f"{what}.*NUL byte"):
            make()


@pytest.mark.parametrize("kwargs, exc", [
    (dict(url=123), TypeError),
    (dict(port="6379"), TypeError),
    (dict(port=0), ValueError),
    (dict(port=70000), ValueError),
    (dict(db=-1), ValueError),
    (dict(host=5), TypeError),
    (dict(socket_timeout=-1), ValueError),
    (dict(socket_timeout=0), ValueError),
    (dict(socket_connect_timeout="x"), TypeError),
    (dict(mode="pipeline"), ValueError),
    (dict(mode=1), ValueError),
    (dict(chunk_size=0), ValueError),
    (dict(chunk_size=10**9), ValueError),
    (dict(hash="md5"), ValueError),
    (dict(bogus=1), TypeError),
])
def test_bad_options(kwargs, exc):
    with pytest.raises(exc):
        RedisFilter("bf", 100, **kwargs)


def test_bad_geometry():
    with pytest.raises(lb.InvalidCapacityError):
        RedisFilter("bf", 0)
    with pytest.raises(lb.InvalidFalsePositiveRateError):
        RedisFilter("bf", 100, 1.5)
    with pytest.raises((TypeError, ValueError)):
        RedisFilter("bf", 100, m=1000, k=3)
    with pytest.raises((TypeError, ValueError)):
        RedisFilter("bf", m=1000)
    with pytest.raises(TypeError):
        RedisFilter.from_url("redis://127.0.0.1:1")


def test_construction_does_not_connect():
    f = RedisFilter("bf", 100, port=free_port(), host="127.0.0.1")  # nothing listens
    assert not f.closed
    f.close()


# ------------------------------------------------------------------ from_redis


@pytest.mark.servers
def test_from_redis(clean_redis, raw_redis):
    redis = pytest.importorskip("redis")
    client = redis.Redis(host=clean_redis.host, port=clean_redis.port, db=4, socket_timeout=3)
    with RedisFilter.from_redis(client, "bf", 1000, 0.01) as f:
        assert f.add("x") is True
    assert client.exists("bf") == 1 and raw_redis.command("EXISTS", "bf") == 0
    assert client.getbit("bf", lb.indices("x", f.m, f.k)[0]) == 1
    with RedisFilter.from_redis(redis.Redis.from_url(clean_redis.url + "/4"), "bf") as g:
        assert (g.m, g.k) == (f.m, f.k) and "x" in g  # adopted from the meta key
    unix = redis.Redis(unix_socket_path=clean_redis.unix_path, db=4)
    with RedisFilter.from_redis(unix, "bf", 1000, 0.01) as h:
        assert "x" in h
    with RedisFilter.from_redis(client, "bf", 1000, 0.01, db=0) as h:  # keywords win
        assert "x" not in h
    with pytest.raises(TypeError, match="redis-py or valkey-py client"):
        RedisFilter.from_redis(object(), "bf", 100)
    client.close()
    unix.close()


@pytest.mark.servers
def test_from_redis_takes_a_valkey_py_client(clean_redis, raw_redis):
    """valkey-py (the Valkey project's fork of redis-py) clients hand over their settings as
    redis-py's do: host, port, db, timeout, a unix socket, a valkey:// URL, and asyncio's."""
    valkey = pytest.importorskip("valkey")
    import valkey.asyncio

    client = valkey.Valkey(host=clean_redis.host, port=clean_redis.port, db=4, socket_timeout=3)
    with RedisFilter.from_redis(client, "bf", 1000, 0.01) as f:
        assert f.add("x") is True
    assert client.exists("bf") == 1 and raw_redis.command("EXISTS", "bf") == 0
    assert client.getbit("bf", lb.indices("x", f.m, f.k)[0]) == 1
    by_url = valkey.Valkey.from_url(f"valkey://{clean_redis.host}:{clean_redis.port}/4")
    with RedisFilter.from_redis(by_url, "bf") as g:
        assert (g.m, g.k) == (f.m, f.k) and "x" in g  # adopted from the meta key
    unix = valkey.Valkey(unix_socket_path=clean_redis.unix_path, db=4)
    with RedisFilter.from_redis(unix, "bf", 1000, 0.01) as h:
        assert "x" in h

    async def main():
        aclient = valkey.asyncio.Valkey(host=clean_redis.host, port=clean_redis.port, db=4)
        try:
            async with lb.AsyncRedisFilter.from_redis(aclient, "bf", 1000, 0.01) as a:
                assert await a.test_many(["x", "never added"]) == [True, False]
                await a.add("y")
            assert await aclient.exists("bf") == 1
        finally:
            await aclient.aclose()

    asyncio.run(main())
    assert raw_redis.command("EXISTS", "bf") == 0  # all of it in db 4
    for c in (client, by_url, unix):
        c.close()


def test_from_redis_takes_the_timeout(silent_listener):
    redis = pytest.importorskip("redis")
    client = redis.Redis(host="127.0.0.1", port=silent_listener.port, socket_timeout=0.3)
    f = RedisFilter.from_redis(client, "bf", 100)
    with pytest.raises(lb.RedisTimeoutError):
        returns(lambda: f.add("a"))             # socket_timeout=0.3 taken: no hang
    assert len(silent_listener.accepted) == 1   # and no retry
    f.close()


def test_raw_helper_error_reply(raw_redis):
    with pytest.raises(RedisReplyError):
        raw_redis.command("NOSUCHCOMMAND")
    assert raw_redis.command("PING") == "PONG"


def test_server_helper_kill_and_restart(private_redis):
    port = private_redis.port
    first = private_redis.proc
    private_redis.kill()
    assert first.poll() == -signal.SIGKILL
    assert not private_redis.ping() and not private_redis.running
    private_redis.restart()
    second = private_redis.proc
    assert private_redis.port == port and second.pid != first.pid and private_redis.ping()
    private_redis.stop()
    assert second.poll() is not None and not private_redis.ping()
    assert not os.path.exists(private_redis.dir)


BENCH = pathlib.Path(__file__).resolve().parents[2] / "benchmarks" / "bench_redis.py"


@pytest.mark.slow
@pytest.mark.skipif(not BENCH.exists(), reason="benchmarks/ not in this checkout")
def test_redis_benchmark_quick(tmp_path, redis_server):
    """The benchmark runs end to end at small counts (no timing is checked)."""
    import subprocess
    import sys

    out = tmp_path / "redis.md"
    r = subprocess.run([sys.executable, str(BENCH), "--quick", "--repeat", "1", "--out", str(out)],
                       capture_output=True, text=True, timeout=600, cwd=str(BENCH.parent.parent))
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    md = out.read_text()
    assert "| RedisFilter bitfield |" in md and "## Ratios against the goals" in md


def test_missing_server_skips_locally_and_fails_under_ci(monkeypatch):
    import conftest
    import redis_server

    monkeypatch.setattr(redis_server, "redis_server_path", lambda: None)
    with pytest.raises(redis_server.RedisServerNotInstalled):
        redis_server.RedisServer()
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="CI=true"):
        conftest._new_server()
    monkeypatch.setenv("CI", "")
    with pytest.raises(pytest.skip.Exception, match="not installed"):
        conftest._new_server()


def test_a_bitmap_of_0_1_is_read_with_its_own_walk(clean_redis, raw_redis):
    """A bitmap that ling_bloom 0.1 wrote records hash=xxh3 (the 0.1 walk).  A filter built
    today with the default hash refuses it; open() adopts it, and so does hash="xxh3"."""
    with rf(clean_redis, "old", 1000, 0.01, hash="xxh3") as f:  # what 0.1 wrote
        f.update(["a", "b"])
        (m, k) = (f.m, f.k)
    assert raw_redis.command("GET", "{old}:meta") == (
        f"ling_bloom:v=1;m={m};k={k};hash=xxh3;canary=1".encode())
    with rf(clean_redis, "old", 1000, 0.01) as g:
        assert g.hash == "xxh3-mix"
        with pytest.raises(lb.GeometryMismatchError, match="hash=xxh3"):
            g.add("c")
        with pytest.raises(lb.GeometryMismatchError):
            g.test("a")
    with RedisFilter.open(f"redis://{clean_redis.host}:{clean_redis.port}/0", "old") as h:
        assert (h.m, h.k, h.hash) == (m, k, "xxh3")
        assert h.test_many(["a", "b"]) == [True, True]


def test_a_lost_filter_rebuilt_by_load_is_not_marked_whole_before_its_bits_are_in(
        private_redis):
    # The rebuild of a lost filter (guard.refill: keys aside, then one load()) claimed the
    # key first, and the claim set the canary: between that round trip and the load's bits
    # every other process found the filter whole and empty, and answered "absent" for
    # every existing key (a false 404 under gunicorn right after Redis restarted empty).
    # The canary must reach the key only with, or after, the last BITOP OR of the bits.  (The rebuild runs
    # before any lookup of this process found the loss: a worker whose first request
    # after the restart was another worker's rebuild.)
    from ling_bloom.guard import refill

    keys = [f"row{i}" for i in range(200)]
    with rf(private_redis, "bf", 1000, 0.01) as f:
        f.add_many(keys)
        m = f.m
        private_redis.restart()  # empty, on a new connection: the key is looked at again
        with private_redis.client() as mon, private_redis.client() as other:
            mon.sock.sendall(mon._encode(["MONITOR"]))
            assert mon._read() == "OK"
            refill(f, keys)
            other.command("ECHO", "adv-end-of-load")
            lines = []
            while True:
                line = mon._read()
                if "adv-end-of-load" in line:
                    break
                lines.append(line)
        canary = f'"SETBIT" "bf" "{8 * ((m + 7) // 8)}" "1"'
        order = [("canary" if canary in ln else "bits") for ln in lines
                 if canary in ln or '"BITOP"' in ln]
        # the canary comes with the load's last bits (the BITOP OR of its temporary key),
        # or after them: never a SETBIT of it into the filter's key before they are in
        assert "bits" in order, lines
        last_bits = max(i for i, w in enumerate(order) if w == "bits")
        assert all(i > last_bits for i, w in enumerate(order) if w == "canary"), lines
        assert all(f.test_many(keys))
