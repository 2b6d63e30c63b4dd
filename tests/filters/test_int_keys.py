"""Integer keys: an int is the key of its decimal text (42 and "42" set the same bits, -42 is
"-42", an int past 64 bits its full decimal text), on every type, alone and in batches; so is
an int-like (numpy's integer scalars, anything with __index__); bool, float and the other
numbers (numpy's floating and bool scalars, Decimal, Fraction) stay a TypeError (keys.c,
lb_key_get_other)."""
from __future__ import annotations

import array
import asyncio
import ctypes
import decimal
import enum
import fractions
import sys

import pytest

import ling_bloom as lb
from ling_bloom import AsyncRedisBloomFilter, AsyncRedisFilter

# 0, small, negative, the 64-bit edges on both sides, and far past them.
INTS = [0, 1, -1, 7, 42, -42, 10**18, 2**31, -(2**31), 2**53 + 1, 2**63 - 1, -(2**63),
        -(2**63) - 1, 2**63, 2**64 - 1, 2**64, -(2**64), 10**30, -(10**40) + 3, 2**200]

FILTERS = {
    "memory": lambda: lb.MemoryFilter(6000, 0.01),
    "memory-xxh3": lambda: lb.MemoryFilter(6000, 0.01, hash="xxh3"),
    "memory-ling-base": lambda: lb.MemoryFilter(6000, 0.01, hash="ling-base"),
    "blocked": lambda: lb.BlockedFilter(6000, 0.01),
    "counting": lambda: lb.CountingFilter(6000, 0.01),
    "scalable": lambda: lb.ScalableFilter(1000, 0.01),
}


@pytest.fixture(params=sorted(FILTERS))
def make(request):
    return FILTERS[request.param]


class Color(enum.IntEnum):
    RED = 7


class Status(int, enum.Enum):
    OK = 200


class Flag(enum.IntFlag):
    A = 1
    B = 2


class Idx:
    """Not an int, but an int-like: __index__ and nothing else."""

    def __init__(self, v: int):
        self.v = v

    def __index__(self) -> int:
        return self.v


@pytest.fixture
def np():
    return pytest.importorskip("numpy")


def numpy_ints(np):
    """An np integer scalar of every width, the int each is, and a 0-d integer array."""
    out = []
    for t in (np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64,
              np.intp):
        info = np.iinfo(t)
        for v in (0, 1, int(info.max), int(info.min)):
            out.append((t(v), v))
    out.append((np.int64(-42), -42))
    out.append((np.array(123456789, dtype=np.int64), 123456789))  # a 0-d array: its int
    return out


def numpy_numbers(np):
    """numpy's scalars that are numbers but not integers, and 0-d arrays of them."""
    return [np.float64(3.0), np.float32(3.0), np.float16(1.5), np.longdouble(2.0),
            np.complex128(1j), np.complex64(1), np.bool_(True), np.bool_(False),
            np.array(2.5), np.array(True)]


class Odd(int):
    """An int subclass whose str() is not its number: keyed by its value all the same."""

    def __str__(self) -> str:
        return "odd"

    __repr__ = __str__


# ---- in memory ------------------------------------------------------------------------------


@pytest.mark.parametrize("v", INTS, ids=str)
def test_an_int_sets_the_bits_of_its_decimal_text(make, v):
    a, b = make(), make()
    assert a.add(v) is True
    assert b.add(str(v)) is True
    assert a.to_bytes() == b.to_bytes()
    assert a.add(str(v)) is False and b.add(v) is False
    assert v in b and str(v) in a and str(v).encode() in a
    assert a.test(v) and b.test(v)
    assert a.test_many([v, str(v)]) == [True, True]


def test_batches_of_ints_and_of_their_text_are_the_same_keys(make):
    # Over two 2048-key chunks and a short last one, with duplicates, both signs and big ones.
    ints = [i * 7919 - 20_000 for i in range(4500)] + [2**64 + i for i in range(100)] + [0, 0]
    strs = [str(i) for i in ints]
    a, b, c, d = make(), make(), make(), make()
    assert a.add_many(ints) == b.add_many(strs)
    c.update(ints)
    d.update(strs)
    assert a.to_bytes() == b.to_bytes() == c.to_bytes() == d.to_bytes()
    probe = ints + list(range(10**6, 10**6 + 3000))
    assert a.test_many(probe) == b.test_many([str(i) for i in probe])
    assert a.test_many(strs) == [True] * len(strs)
    assert [k in a for k in probe[:500]] == [a.test(str(k)) for k in probe[:500]]
    # One key at a time, the same bits again.
    e = make()
    for i in ints:
        e.add(i)
    assert e.to_bytes() == a.to_bytes()


def test_a_mixed_batch(make):
    mixed = [1, "x", b"y", 2**70, -3, bytearray(b"z"), memoryview(b"w"), Color.RED, Odd(9)]
    as_text = ["1", "x", b"y", str(2**70), "-3", b"z", b"w", "7", "9"]
    a, b = make(), make()
    a.update(mixed)
    b.update(as_text)
    assert a.to_bytes() == b.to_bytes()
    assert a.test_many(as_text) == [True] * len(mixed)


def test_int_subclasses_are_keyed_by_their_value(make):
    # IntEnum members and other int subclasses: their number, never their str()/repr().
    a, b = make(), make()
    a.add(Color.RED)
    a.add(Odd(123))
    a.add(Odd(2**80))
    b.update(["7", "123", str(2**80)])
    assert a.to_bytes() == b.to_bytes()
    assert "odd" not in a


@pytest.mark.parametrize("bad", [True, False, 1.0, 42.5, float("nan"), None, 3j])
def test_bool_and_float_stay_a_type_error(make, bad):
    f = make()
    f.update(["a", 1])
    before = f.to_bytes()
    with pytest.raises(TypeError, match=r"str, bytes, a bytes-like object or int, not "
                                        + type(bad).__name__):
        f.add(bad)
    with pytest.raises(TypeError):
        f.test(bad)
    with pytest.raises(TypeError):
        bad in f  # noqa: B015
    for where in (0, 2500):
        batch = list(range(3000))
        batch[where] = bad
        for method in (f.add_many, f.update, f.test_many):
            with pytest.raises(TypeError, match="or int, not " + type(bad).__name__):
                method(batch)
    assert f.to_bytes() == before


def test_int_likes_are_the_key_of_their_int(make):
    # Int subclasses (Enum members mixing in int, IntFlag) and __index__ objects: the int's
    # decimal text, never their str() ("Status.OK", "Flag.A|B") nor their bytes.
    keys = [Status.OK, Flag.A, Flag.A | Flag.B, Idx(42), Idx(-7), Idx(2**70)]
    ints = [200, 1, 3, 42, -7, 2**70]
    a, b, c = make(), make(), make()
    for k in keys:
        assert a.add(k) is True
    b.update(ints)
    assert c.add_many(keys) == [True] * len(keys)
    assert a.to_bytes() == b.to_bytes() == c.to_bytes()
    assert a.test_many([str(i) for i in ints]) == [True] * len(ints)
    assert b.test_many(keys) == [True] * len(keys) and Idx(42) in b
    assert "Status.OK" not in a and "Flag.A|B" not in a


def test_numpy_integer_scalars_are_the_key_of_their_int(make, np):
    pairs = numpy_ints(np)
    a, b = make(), make()
    for scalar, v in pairs:
        a.add(scalar)
        assert b.test(scalar) is b.test(v)
        b.add(v)
        assert a.test(v) and a.test(str(v)) and b.test(scalar), (scalar, v)
    assert a.to_bytes() == b.to_bytes()
    # In batches (and over several chunks), the same bits.
    col = np.arange(-2000, 2600, dtype=np.int64)
    c, d = make(), make()
    c.update(list(col))
    d.update(col.tolist())
    assert c.to_bytes() == d.to_bytes()
    assert c.add_many(list(col[:50])) == [False] * 50
    assert d.test_many(list(col)) == [True] * len(col)


@pytest.mark.parametrize("which", range(10))
def test_numpy_numbers_that_are_not_integers_are_a_type_error(make, np, which):
    bad = numpy_numbers(np)[which]
    f = make()
    f.update(["a", 1])
    before = f.to_bytes()
    for call in (f.add, f.test, f.__contains__):
        with pytest.raises(TypeError, match="or int, not "):
            call(bad)
    for where in (0, 2500):
        batch = list(range(3000))
        batch[where] = bad
        for method in (f.add_many, f.update, f.test_many):
            with pytest.raises(TypeError, match="or int, not "):
                method(batch)
    assert f.to_bytes() == before


@pytest.mark.parametrize("bad", [decimal.Decimal(3), fractions.Fraction(3, 1), 3.0 + 0j,
                                 ctypes.c_double(3.0)], ids=str)
def test_other_numbers_are_a_type_error(make, bad):
    f = make()
    for call in (f.add, f.test, lambda k: f.update([1, k])):
        with pytest.raises(TypeError, match="or int, not "):
            call(bad)
    assert f.approximate_count() == 0


def test_numpy_bytes_arrays_stay_their_bytes(make, np):
    f = make()
    u8 = np.frombuffer(b"abc", dtype=np.uint8)
    f.add(u8)
    f.add(np.array([b"xyz"], dtype="S3"))
    f.add(np.array(b"0-d"))  # a 0-d bytes array: its bytes, not a number
    f.add(np.bytes_(b"npb"))
    assert f.test_many([b"abc", b"xyz", b"0-d", b"npb"]) == [True] * 4
    assert f.test_many([u8, np.array(b"0-d"), b"zzz"]) == [True, True, False]
    # Arrays of other dtypes, as before: their raw bytes.
    ints = np.array([1, 2], dtype="<i4")
    f.add(ints)
    assert f.test(ints.tobytes()) and f.test(array.array("i", [1, 2]).tobytes())


def test_numpy_arrays_of_objects_or_of_text_are_a_type_error(make, np):
    # their buffers' bytes are objects' addresses (another key in every process) or UCS-4
    # text (not the key of the same str): they were keys, silently never found again
    bad = [np.array("x", dtype=object), np.array([5, "a"], dtype=object),
           np.zeros(2, dtype=[("Obj", "i4"), ("b", "O")]), np.array("abc"), np.array(["abc"])]
    f = make()
    f.update(["a", 1])
    before = f.to_bytes()
    for k in bad:
        for call in (f.add, f.test, lb._core.key_bytes, lambda k: f.update([1, k]),
                     lambda k: f.test_many(["a", k])):
            with pytest.raises(TypeError, match="or int, not numpy.ndarray of "):
                call(k)
    assert f.to_bytes() == before
    # a record whose field names hold an O or a w is no object nor text: its bytes
    rec = np.zeros(2, dtype=[("Ow", "i4")])
    f.add(rec)
    assert f.test(rec.tobytes())


def test_key_bytes_is_what_the_filters_hash(np):
    keys = ["x", "é", b"raw", bytearray(b"ba"), memoryview(b"mv"), 42, -42, 2**80, Color.RED,
            Status.OK, Odd(9), Idx(5), np.int64(42), np.uint64(2**64 - 1),
            np.array(b"0-d"), np.frombuffer(b"u8", dtype=np.uint8)]
    for k in keys:
        b = lb._core.key_bytes(k)
        assert type(b) is bytes and lb.hash_pair(k) == lb.hash_pair(b), k
    assert [lb._core.key_bytes(k) for k in (42, np.int64(42), Status.OK, Odd(9))] == \
        [b"42", b"42", b"200", b"9"]
    assert lb._core.key_bytes("é") == "é".encode()
    for bad in (True, 1.5, None, np.float64(1), np.bool_(1), decimal.Decimal(1)):
        with pytest.raises(TypeError):
            lb._core.key_bytes(bad)
    for empty in ("", b"", bytearray()):
        with pytest.raises(lb.EmptyKeyError):
            lb._core.key_bytes(empty)


def test_counting_filter_removes_an_int_as_its_text():
    f = lb.CountingFilter(1000, 0.01)
    f.add("42")
    f.add(-5)
    assert f.count(42) == 1 and f.count("-5") == 1
    f.remove(42)
    assert f.count("42") == 0 and 42 not in f
    assert f.discard("-5") is True and f.discard(-5) is False
    f.add(2**100)
    f.remove(str(2**100))
    assert f.count(2**100) == 0
    with pytest.raises(TypeError):
        f.remove(True)
    with pytest.raises(TypeError):
        f.discard(1.0)


def test_the_hash_functions_take_an_int_as_its_text():
    for v in (0, 42, -42, 2**64, -(2**70)):
        assert lb.hash_pair(v) == lb.hash_pair(str(v))
        assert lb.hash_pair(v, hash="ling-base") == lb.hash_pair(str(v).encode(), "ling-base")
        assert lb.indices(v, 1000, 7) == lb.indices(str(v), 1000, 7)
    with pytest.raises(TypeError):
        lb.hash_pair(True)


def test_the_ling_base_go_library_formats_an_id_as_strconv_does():
    # strconv.FormatInt(-42, 10) == "-42", FormatUint(1<<64-1, 10) == "18446744073709551615":
    # the bytes a Go service hashes for the same id.
    f = lb.MemoryFilter(1000, 0.01, hash="ling-base")
    f.update([-42, 2**64 - 1, 0])
    g = lb.MemoryFilter(1000, 0.01, hash="ling-base")
    g.update([b"-42", b"18446744073709551615", b"0"])
    assert f.to_bitmap() == g.to_bitmap()


@pytest.mark.skipif(not hasattr(sys, "get_int_max_str_digits"), reason="Python < 3.11")
def test_an_int_past_the_str_digit_limit_is_the_value_error_str_gives():
    f = lb.MemoryFilter(1000, 0.01)
    limit = sys.get_int_max_str_digits()
    if limit == 0:
        pytest.skip("no digit limit in this interpreter")
    huge = 10 ** (limit + 10)
    with pytest.raises(ValueError):
        str(huge)
    with pytest.raises(ValueError):
        f.add(huge)
    with pytest.raises(ValueError):
        f.update(["a", huge])
    assert "a" not in f
    just = 10 ** (limit - 1)  # limit digits: str() takes it, and so does the filter
    f.add(just)
    assert str(just) in f


def test_mapped_memory_filter_takes_ints(tmp_path):
    path = str(tmp_path / "m.bloom")
    with lb.MemoryFilter.open(path, "x", 1000, 0.01) as f:
        f.add(42)
        f.update([1, 2, 2**65])
        assert f.test_many(["42", "1", "2", str(2**65)]) == [True] * 4


# ---- Redis ----------------------------------------------------------------------------------

REDIS_KINDS = {
    "bitfield": dict(),
    "blocked": dict(layout="blocked"),
    "sharded": dict(shards=2),
    "small-chunks": dict(chunk_size=512),  # many chunks: the holds of a chunk's int keys
}


@pytest.mark.parametrize("kind", sorted(REDIS_KINDS))
def test_redis_filter_int_keys_set_the_bits_of_their_text(clean_redis, kind):
    opts = REDIS_KINDS[kind]
    ints = [i * 31 - 700 for i in range(3000)] + [2**64 + 5, -(2**70), 0]
    with lb.RedisFilter("ints", 5000, 0.01, url=clean_redis.url, **opts) as a, \
            lb.RedisFilter("strs", 5000, 0.01, url=clean_redis.url, **opts) as b:
        assert a.add(42) is True and b.add("42") is True
        assert a.add("42") is False and b.add(42) is False
        assert a.add_many(ints[:100]) == b.add_many([str(i) for i in ints[:100]])
        a.update(ints)
        b.update([str(i) for i in ints])
        assert a.test_many([str(i) for i in ints]) == [True] * len(ints)
        assert b.test_many(ints) == [True] * len(ints)
        assert 42 in b and "-700" in a and -700 in b
        if kind != "sharded":
            assert a.snapshot().to_bytes() == b.snapshot().to_bytes()
        probe = list(range(10**7, 10**7 + 2000))
        assert a.test_many(probe) == b.test_many([str(i) for i in probe])


@pytest.mark.parametrize("kind", sorted(REDIS_KINDS))
def test_redis_filter_keys_int_likes_by_their_int(clean_redis, kind, np):
    opts = REDIS_KINDS[kind]
    col = np.arange(-300, 1300, dtype=np.int64)
    with lb.RedisFilter("likes", 5000, 0.01, url=clean_redis.url, **opts) as a:
        assert a.add(np.int64(42)) is True
        assert a.add(42) is False and a.test("42") and Status.OK not in a
        assert a.add(Status.OK) is True and a.test(200) and a.test(Idx(200))
        a.update(list(col))
        assert a.test_many(col.tolist()) == [True] * len(col)
        assert a.add_many([np.int32(7), Idx(10**6)]) == [False, True]
        assert a.test_many([np.uint8(7), "1000000", Flag.A | Flag.B]) == [True] * 3
        for bad in (np.float64(1.0), np.float32(1.0), np.bool_(True), decimal.Decimal(1)):
            with pytest.raises(TypeError, match="or int, not "):
                a.add(bad)
            with pytest.raises(TypeError, match="or int, not "):
                a.test_many([1, bad])


def test_redisbloom_filter_keys_int_likes_by_their_int(bf_server, np):
    with lb.RedisBloomFilter("rblikes", 10_000, 0.001, url=bf_server.url, chunk_size=300) as f:
        assert f.add(np.int64(42)) is True and f.add("42") is False
        f.update(list(np.arange(1000, dtype=np.uint32)) + [Status.OK])
        assert f.test_many([str(i) for i in range(1000)] + ["200"]) == [True] * 1001
        with pytest.raises(TypeError, match="or int, not "):
            f.update([1, np.float32(2)])


def test_redis_filter_refuses_bool_and_float_before_sending(clean_redis, raw_redis):
    with lb.RedisFilter("bad", 1000, 0.01, url=clean_redis.url) as f:
        for bad in (True, 1.5):
            with pytest.raises(TypeError, match="or int, not " + type(bad).__name__):
                f.add(bad)
            with pytest.raises(TypeError):
                f.update([1, 2, bad])
            with pytest.raises(TypeError):
                bad in f  # noqa: B015
    assert raw_redis.command("EXISTS", "bad") == 0


def test_redisbloom_filter_int_keys_are_their_text(bf_server):
    ints = [i * 13 - 400 for i in range(2500)] + [2**64, -(2**65)]
    with lb.RedisBloomFilter("rbi", 10_000, 0.001, url=bf_server.url, chunk_size=300) as f, \
            lb.RedisBloomFilter("rbs", 10_000, 0.001, url=bf_server.url) as g:
        assert f.add(42) is True
        assert f.add("42") is False
        assert f.test(b"42") and "42" in f and 42 in f
        f.update(ints)
        g.update([str(i) for i in ints])
        assert f.test_many([str(i) for i in ints]) == [True] * len(ints)
        assert g.test_many(ints) == [True] * len(ints)
        assert g.add_many([-400, "-387", 2**64]) == [False, False, False]
        for bad in (False, 2.0):
            with pytest.raises(TypeError, match="or int, not " + type(bad).__name__):
                f.add(bad)
            with pytest.raises(TypeError):
                f.test_many([1, bad])


def test_async_filters_take_int_keys(clean_redis, bf_server):
    async def main():
        async with AsyncRedisFilter.from_url(clean_redis.url, "aints", 5000, 0.01) as a:
            assert await a.add(42) is True
            assert await a.add("42") is False
            await a.update(list(range(-500, 500)) + [2**64])
            assert await a.test_many([str(i) for i in range(-500, 500)]) == [True] * 1000
            assert await a.test(str(2**64)) is True
            with pytest.raises(TypeError):
                await a.add(True)
            with pytest.raises(TypeError):
                await a.update([1, 2.5])
            np = pytest.importorskip("numpy")
            assert await a.add(np.int64(7000)) is True
            assert await a.add_many([7000, Idx(9000)]) == [False, True]
            assert await a.test_many(["7000", "9000", np.uint16(9000), Status.OK]) == [True] * 4
            with pytest.raises(TypeError):
                await a.test_many([1, np.float64(2)])
        async with AsyncRedisBloomFilter.from_url(bf_server.url, "abints", 5000, 0.01) as b:
            assert await b.add(-42) is True
            assert await b.test("-42") is True
            assert await b.add_many([7, "7", 2**70]) == [True, False, True]
            assert await b.test_many([str(2**70), 7]) == [True, True]
            with pytest.raises(TypeError):
                await b.test(1.0)

    asyncio.run(main())
    with lb.RedisFilter.open(clean_redis.url, "aints") as s:
        assert s.test_many(list(range(-500, 500))) == [True] * 1000
