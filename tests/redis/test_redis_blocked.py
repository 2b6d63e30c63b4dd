"""RedisFilter(layout="blocked") against a real redis-server: BlockedFilter's layout in a Redis
string (one GETRANGE of a 64-byte block per test, one BITFIELD of k SET u1 in that block per
add), bit for bit a BlockedFilter's bytes; its meta key; the mismatch with a standard filter
both ways; what it refuses; the asyncio filter over the same wire operations; replies that do
not fit a GETRANGE of one block."""
from __future__ import annotations

import asyncio
import math

import pytest

import ling_bloom as lb
from hostile_server import HostileServer, bulk, integer
from ling_bloom import AsyncRedisFilter, RedisFilter

HEADER, TRAILER = 40, 8  # csrc/core/format.h: a fixed filter's header and checksum


def rf(srv, key="blk", *args, **kwargs):
    kwargs.setdefault("url", srv.url)
    kwargs.setdefault("layout", "blocked")
    if not args and "m" not in kwargs and "capacity" not in kwargs:
        args = (3000, 0.01)
    return RedisFilter(key, *args, **kwargs)


def payload(bf: lb.BlockedFilter) -> bytes:
    """A BlockedFilter's bytes: the lanes as little-endian words, block after block."""
    data = bf.to_bytes()
    assert len(data) == HEADER + bf.m // 8 + TRAILER
    return data[HEADER:HEADER + bf.m // 8]


def redis_bytes(raw, key, nbytes: int) -> bytes:
    """The filter's bytes of the Redis string; past them, only the canary byte."""
    value = raw.command("GET", key) or b""
    assert len(value) <= nbytes + 1
    assert value[nbytes:] in (b"", b"\x80")
    value = value[:nbytes]
    return value + bytes(nbytes - len(value))


KEYS = [f"user:{i % 1500}" for i in range(2000)]  # repeats: add answers False for those
ABSENT = [f"absent:{i}" for i in range(4000)]


@pytest.mark.servers
def test_same_answers_and_bytes_as_a_blocked_filter(clean_redis, raw_redis):
    bf = lb.BlockedFilter(1000, 0.01)  # 1,500 keys: overfull, so some absent keys test present
    with rf(clean_redis, "blk", 1000, 0.01) as f:
        assert (f.m, f.k) == lb.BlockedFilter.geometry(1000, 0.01) == (bf.m, bf.k)
        assert f.add_many(KEYS) == bf.add_many(KEYS)
        assert redis_bytes(raw_redis, "blk", f.nbytes) == payload(bf)
        probe = KEYS + ABSENT
        got = f.test_many(probe)
        assert got == bf.test_many(probe)
        assert all(got[:len(KEYS)]) and 0 < sum(got[len(KEYS):]) < 800  # false positives too
        assert f.add("one more") is True and f.add("one more") is False
        never = next(k for k in ABSENT if k not in bf)  # overfull: not every absent key tests absent
        assert f.test("one more") and "one more" in f and never not in f
        assert bf.add("one more") is True
        assert f.bits_set() == bf.bits_set
        assert f.approximate_count() == bf.approximate_count()


def test_an_empty_or_short_string_reads_as_zeros(clean_redis):
    """GETRANGE past the end of the string (or of a missing key) answers fewer bytes."""
    bf = lb.BlockedFilter(m=512 * 64, k=16)
    with rf(clean_redis, m=bf.m, k=bf.k) as f:
        assert f.test_many(ABSENT[:200]) == [False] * 200
        low = next(k for k in ABSENT if f.add_many([k]) and bf.add(k))  # the string grows to it
        assert f.test_many(ABSENT) == bf.test_many(ABSENT) and f.test(low)


def test_chunks_and_the_meta_key(clean_redis, raw_redis):
    with rf(clean_redis, "a") as one, rf(clean_redis, "b", chunk_size=7) as chunked:
        assert one.add_many(KEYS) == chunked.add_many(KEYS)
        assert chunked.test_many(KEYS + ABSENT) == one.test_many(KEYS + ABSENT)
        assert raw_redis.command("GET", "a") == raw_redis.command("GET", "b")
        assert raw_redis.command("GET", "{a}:meta") == (
            f"ling_bloom:v=2;m={one.m};k={one.k};hash=xxh3-block;layout=blocked;canary=1".encode())
        one.reset()
        assert one.test_many(KEYS[:10]) == [False] * 10
        assert raw_redis.command("GET", "{a}:meta").endswith(b";layout=blocked;canary=1")


def test_snapshot_and_load_are_byte_copies(clean_redis, raw_redis):
    bf = lb.BlockedFilter(3000, 0.01)
    bf.update(KEYS)
    with rf(clean_redis, "src") as f, rf(clean_redis, "dst") as g:
        f.update(KEYS)
        snap = f.snapshot()
        assert type(snap) is lb.BlockedFilter and snap == bf and payload(snap) == payload(bf)
        assert (snap.capacity, snap.error_rate) == (3000, 0.01)
        g.add("already there")
        g.load(bf)  # an OR: the bits already there stay
        other = lb.BlockedFilter(m=bf.m, k=bf.k)
        other.add("already there")
        assert g.snapshot() == bf | other
        assert redis_bytes(raw_redis, "dst", g.nbytes) == payload(bf | other)
        with pytest.raises(TypeError, match="BlockedFilter"):
            g.load(lb.MemoryFilter(m=bf.m, k=8))
        with pytest.raises(lb.GeometryMismatchError, match="m=1024 k=8"):
            g.load(lb.BlockedFilter(m=1024, k=8))


STD = "m=4096 k=8 hash=xxh3-mix"
BLK = "m=4096 k=8 hash=xxh3-block layout=blocked"


@pytest.mark.parametrize("first, then, stored, this", [
    ("standard", "blocked", STD, BLK + "$"),
    ("blocked", "standard", BLK, STD + "$"),
])
def test_a_standard_filter_and_a_blocked_one_refuse_each_other(clean_redis, first, then,
                                                               stored, this):
    m, k = 4096, 8  # a geometry both layouts can have
    with RedisFilter("bf", m=m, k=k, url=clean_redis.url, layout=first) as f:
        f.add("x")
        with RedisFilter("bf", m=m, k=k, url=clean_redis.url, layout=then) as other, \
                pytest.raises(lb.GeometryMismatchError,
                              match=f"stored {stored}, this filter {this}"):
            other.test("x")
        with pytest.raises(lb.GeometryMismatchError, match=f"layout={first}.*layout={then}"):
            RedisFilter.open(clean_redis.url, "bf", layout=then)
        with RedisFilter.open(clean_redis.url, "bf") as o:  # the stored layout is adopted
            assert (o.layout, o.m, o.k) == (first, m, k)
            assert o.test("x") and not o.test("y")


@pytest.mark.servers
def test_a_foreign_wrong_type_or_deleted_key(clean_redis, raw_redis):
    """The standard layout's guards hold for the blocked one: a string it did not write is
    refused, a key of another type is named, a deleted filter comes back with its meta."""
    raw_redis.command("SET", "user-data", b"\x01" * 10)  # someone else's string
    with rf(clean_redis, "user-data") as f:
        for call in (lambda: f.add("a"), lambda: f.test("a")):
            with pytest.raises(lb.KeyNotOwnedError):
                call()
    assert raw_redis.command("GET", "user-data") == b"\x01" * 10
    raw_redis.command("LPUSH", "list", "x")
    with rf(clean_redis, "list") as f:
        for call in (lambda: f.add("a"), lambda: f.test_many(["a", "b"])):
            with pytest.raises(lb.WrongTypeError) as e:
                call()
            assert e.value.key == "list"
    with rf(clean_redis, "gone") as f:
        f.add("a")
        raw_redis.command("DEL", "gone", "{gone}:meta")  # another client, or an eviction
        for call in (lambda: f.test("a"), lambda: f.add("b")):
            with pytest.raises(lb.FilterLostError):
                call()
        assert raw_redis.command("GET", "{gone}:meta").endswith(b";layout=blocked;canary=1")
    with RedisFilter.open(clean_redis.url, "gone") as g:
        assert g.layout == "blocked"
        with pytest.raises(lb.FilterLostError):  # lost for every process, not re-created
            g.test_many(["a", "b"])
        g.reset()
        g.add("b")
        assert g.test_many(["a", "b"]) == [False, True]


def test_properties(clean_redis):
    with rf(clean_redis, "p", ttl=100) as f:
        assert (f.layout, f.hash, f.shards, f.nparts, f.nbytes) == (
            "blocked", "xxh3-block", 1, 1, f.m // 8)
        assert f.key_names() == [b"p", b"{p}:meta"]
        assert repr(f) == f"<RedisFilter key='p' layout=blocked m={f.m} k={f.k}>"
        f.add("a")
        assert 0 < f.remaining_ttl() <= 100
        with pytest.raises(lb.NotSupportedError, match="snapshot"):
            f.current_error_rate()
    with RedisFilter("s", 100, url=clean_redis.url) as s:
        assert s.layout == "standard"


@pytest.mark.parametrize("kwargs, exc, match", [
    (dict(m=4096, k=8, hash="xxh3-mix", adopt=True), lb.NotSupportedError, "never a blocked"),
    (dict(mode="setbit"), ValueError, "GETRANGE"),
    (dict(hash="ling-base"), ValueError, "xxh3-block"),
    (dict(hash="xxh3-mix"), ValueError, "xxh3-block"),
    (dict(m=1000, k=8), lb.InvalidCapacityError, "multiple of 512"),
    (dict(m=1024, k=7), lb.InvalidCapacityError, "multiple of 8"),
    (dict(layout="tiled"), ValueError, "layout must be"),
    (dict(layout=1), ValueError, "layout must be"),
])
def test_what_it_refuses(clean_redis, raw_redis, kwargs, exc, match):
    if "m" not in kwargs:
        kwargs = dict(kwargs, capacity=3000)
    with pytest.raises(exc, match=match):
        rf(clean_redis, "r", **kwargs)
    assert raw_redis.command("DBSIZE") == 0  # nothing was written


def frf(flavor, srv, key, *args, **kwargs):
    """rf() of the flavour: the blocking RedisFilter, or the async one behind a SyncFacade."""
    kwargs.setdefault("url", srv.url)
    kwargs.setdefault("layout", "blocked")
    return flavor.RedisFilter(key, *args, **kwargs)


@pytest.mark.servers
def test_shards_are_blocked_strings_each_a_blocked_filter(flavor, clean_redis, raw_redis):
    """shards=4: four blocked strings of the geometry BlockedFilter gives each one's share
    (n/S + 3 sqrt(n/S) keys), a version-2 record naming the layout, every key in the shard its
    hash picks, and the rate of the whole.  For the blocking and the asyncio filter (the
    `flavor` fixture); key_names, snapshot, load, bits_set and open() are the blocking
    class's alone, asked of `s`, a blocking filter of the same key (f itself if blocking)."""
    n, shards = 20_000, 4
    per = n / shards
    ms, k = lb.BlockedFilter.geometry(math.ceil(per + 3 * math.sqrt(per)), 0.01)
    keys = [f"user:{i}" for i in range(n)]
    with frf(flavor, clean_redis, "sb", n, 0.01, shards=shards) as f:
        s = flavor.twin(f)
        assert (f.shards, f.layout, f.hash, f.m, f.k, f.capacity) == (
            shards, "blocked", "xxh3-block", ms * shards, k, n)
        assert repr(f) == (f"<{flavor.prefix}RedisFilter key='sb' shards=4 layout=blocked "
                           f"m={f.m} k={k}>")
        assert f.add_many(["a", "a"]) == [True, False]
        f.update(keys)
        assert all(f.test_many(keys)) and "a" in f
        negatives = [f"other:{i}" for i in range(n)]
        assert sum(f.test_many(negatives)) / n <= 0.013
        assert raw_redis.command("GET", "{sb}:shards") == (
            f"ling_bloom:v=2;shards=4;m={ms};k={k};hash=xxh3-block;layout=blocked".encode())
        names = [x.decode() for x in s.key_names()]
        assert names[0] == "{sb}:shards" and "{sb:3}" in names and "{sb:3}:meta" in names
        # Each shard is a blocked RedisFilter of its own (its meta key says so): its bytes are
        # a BlockedFilter's.  A key sits in the one shard its hash picks, so over the four a
        # key tests present about 1 + 3 * rate times, and each shard holds a fair share.
        parts = []
        for i in range(shards):
            with RedisFilter.open(clean_redis.url, f"{{sb:{i}}}") as one:
                assert (one.layout, one.m, one.k) == ("blocked", ms, k)
                parts.append(one.snapshot())
        hits = [sum(key in p for p in parts) for key in keys]
        assert min(hits) >= 1 and sum(hits) <= n * 1.05
        for p in parts:
            assert abs(p.approximate_count() - per) < 0.1 * per
        # Another process opens it from the record, as blocked.
        with RedisFilter.open(clean_redis.url, "sb") as g:
            assert (g.layout, g.shards, g.m, g.k) == ("blocked", shards, f.m, k)
            assert all(g.test_many(keys[:500]))
        with pytest.raises(lb.GeometryMismatchError, match="stored layout=blocked"):
            RedisFilter("sb", url=clean_redis.url, layout="standard")
        with pytest.raises(lb.GeometryMismatchError, match="hash=xxh3-block layout=blocked"):
            flavor.RedisFilter("sb", n, 0.01, url=clean_redis.url, shards=shards).add("x")
        with pytest.raises(lb.GeometryMismatchError, match="shards=4"):
            frf(flavor, clean_redis, "sb", n, 0.01, shards=2).add("x")
        for call in (s.snapshot, lambda: s.load(lb.BlockedFilter(m=f.m, k=k))):
            with pytest.raises(lb.NotSupportedError, match="sharded"):
                call()
        f.reset()
        assert not any(f.test_many(keys[:1000])) and s.bits_set() == 0
    # A shard's key held by something else (a user's string): refused, nothing written.
    raw_redis.command("SET", "{sf:1}", "not a filter")
    with frf(flavor, clean_redis, "sf", 1000, 0.01, shards=2) as f:
        with pytest.raises(lb.KeyNotOwnedError):
            f.update([f"k{i}" for i in range(50)])
    assert raw_redis.command("GET", "{sf:1}") == b"not a filter"
    # A standard sharded filter at the key refuses a blocked one the same way.
    with flavor.RedisFilter("ss", n, 0.01, url=clean_redis.url, shards=2) as s:
        s.add("x")
        with pytest.raises(lb.GeometryMismatchError, match="layout=blocked"):
            frf(flavor, clean_redis, "ss", n, 0.01, shards=2).add("x")


@pytest.mark.parametrize("m, k, shards, shard_m", [
    (3 * 4096, 16, 3, 4096),
    (1024, 8, 3, 512),  # m/S rounded up to whole blocks
])
def test_shards_with_m_and_k(flavor, clean_redis, m, k, shards, shard_m):
    with frf(flavor, clean_redis, "mk", m=m, k=k, shards=shards) as f:
        assert (f.m, f.k, f.shards) == (shard_m * shards, k, shards)
        f.update(["a", "b", "c"])
        assert f.test_many(["a", "b", "c"]) == [True, True, True]
        assert f.nbytes == shards * shard_m // 8


def test_hash_xxh3_block_is_accepted(clean_redis):
    with rf(clean_redis, "h", 3000, hash="xxh3-block") as f:
        assert f.hash == "xxh3-block"


def test_asyncio_filter_gets_the_same_answers(clean_redis):
    bf = lb.BlockedFilter(3000, 0.01)
    expect_add = bf.add_many(KEYS)
    expect_test = bf.test_many(KEYS + ABSENT)

    async def go():
        async with AsyncRedisFilter("aio", 3000, 0.01, url=clean_redis.url,
                                    layout="blocked") as f:
            assert f.layout == "blocked"
            added = await f.add_many(KEYS)
            tested = await f.test_many(KEYS + ABSENT)
            single = (await f.add("x"), await f.add("x"), await f.test("x"))
            return added, tested, single

    added, tested, single = asyncio.run(go())
    assert added == expect_add and tested == expect_test and single == (True, False, True)
    with rf(clean_redis, "aio") as f:
        assert f.snapshot() == bf | _with("x", bf)


def _with(key, like):
    other = lb.BlockedFilter(m=like.m, k=like.k)
    other.add(key)
    return other


@pytest.mark.parametrize("reply", [bulk(b"\xff" * 65), integer(1), bulk(None)])
def test_a_getrange_reply_that_does_not_fit(clean_redis, reply):
    """More than the 64 bytes asked, or not a string: RedisProtocolError, never an answer."""
    def script(ctx, args):
        return reply if args[0].upper() == b"GETRANGE" and args[1] == b"h" else None

    with HostileServer(script, upstream_port=clean_redis.port) as srv:
        with RedisFilter("h", 3000, 0.01, url=srv.url, layout="blocked") as f:
            f.add("a")  # adds are BITFIELD: unaffected
            with pytest.raises(lb.RedisProtocolError, match="GETRANGE"):
                f.test("a")
