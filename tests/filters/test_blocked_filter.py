"""BlockedFilter: the split-block layout (its bits follow the spec in csrc/core/blocked.h, the
same with AVX2 and the portable code), its sizing, and the interface it shares with
MemoryFilter, bad input and edges included.  Its false-positive rate is in test_fpr.py."""
from __future__ import annotations

import copy
import pickle
import struct

import pytest

import ling_bloom as lb
from ling_bloom import BlockedFilter

try:  # forged headers need a valid checksum (the test extra installs xxhash)
    import xxhash
except ImportError:  # pragma: no cover
    xxhash = None

M64 = (1 << 64) - 1
# The multipliers of the spec (blocked.h): round 0 is Parquet's; the rest are fixed constants.
SALT = [
    0x47b6137b, 0x44974d91, 0x8824ad5b, 0xa2b7289d, 0x705495c7, 0x2df1424b, 0x9efc4947, 0x5c6bfb31,
    0x612cb08f, 0x7849f019, 0x290f90e3, 0x71553995, 0x49fcdd13, 0xfc6395b3, 0xc372f77f, 0x71e1726f,
    0x8b44adf3, 0x2c6025ef, 0x80ec0101, 0x7b444717, 0x1c73ad81, 0xf5060e89, 0xf7815919, 0xc0fdb137,
    0xb60b53c5, 0x5138a095, 0xc59cb4bb, 0x0b9fb033, 0xfbfc0e91, 0xb8cf50c1, 0xde96fc6d, 0xfb61f79b,
    0xd981dfdb, 0x421c078f, 0x7b6f6815, 0x448549dd, 0xfb5f70db, 0xefd6e0cf, 0xf7a9808b, 0x4631a155,
    0x654884ab, 0x355cb61f, 0x537617ad, 0x136cd14f, 0xb84712e3, 0xa8ad11fd, 0x2d1c4121, 0xcaaa0797,
    0x9c560e7d, 0xda57fecb, 0x648080cd, 0x602bdb5f, 0x87bf1e89, 0x5013a53f, 0x1c5e3277, 0x053ea787,
    0xa0dc7873, 0xbdc01f11, 0x08abc8e5, 0x8b2d97cb, 0x73d851e5, 0xd8b2cff9, 0x0d1a4b57, 0x05513427,
]


def mix64(x: int) -> int:
    return ((x ^ (x >> 32)) * 0xD6E8FEB86659FD93) & M64


def spec_pair(key) -> tuple[int, int]:
    """The key hash of the spec, from the xxhash package: h = XXH3-64 of the key's bytes
    (str as UTF-8), (h1, h2) = (h, mix64(h + 0x9e3779b97f4a7c15))."""
    if xxhash is None:
        pytest.skip("needs the xxhash package (the test extra) for an independent XXH3-64")
    data = key.encode() if isinstance(key, str) else bytes(key)
    h = xxhash.xxh3_64_intdigest(data)
    return h, mix64((h + 0x9E3779B97F4A7C15) & M64)


def spec_words(keys, m: int, k: int) -> list[int]:
    """The lanes a filter of m bits and k bits per key holds after keys, computed from the
    spec with nothing but XXH3-64 (the xxhash package)."""
    nblocks, rounds = m // 512, k // 8
    words = [0] * (8 * nblocks)
    for key in keys:
        h1, h2 = spec_pair(key)
        block = (h1 * nblocks) >> 64
        for j in range(rounds):
            if j == 0:
                y = h1 & 0xFFFFFFFF
            elif j == 1:
                y = h2 >> 32
            else:
                y = mix64((h2 + j * 0x9E3779B97F4A7C15) & M64) >> 32
            for i in range(8):
                words[8 * block + i] |= 1 << (((y * SALT[8 * j + i]) & 0xFFFFFFFF) >> 26)
    return words


def words_of(f: BlockedFilter) -> list[int]:
    data = f.to_bytes()
    payload = data[40:-8]
    assert len(payload) == f.m // 8 == f.nbytes
    return list(struct.unpack(f"<{len(payload) // 8}Q", payload))


def keys(n: int, prefix: str = "k") -> list[str]:
    return [f"{prefix}:{i}" for i in range(n)]


@pytest.fixture
def impl():
    """Restores the automatic choice of implementation after a test that switched it."""
    yield
    BlockedFilter._simd("auto")


def available_impls() -> list[str]:
    out = ["portable"]
    try:
        BlockedFilter._simd("avx2")
        out.append("avx2")
    except ValueError:
        pass
    BlockedFilter._simd("auto")
    return out


# ---- the layout --------------------------------------------------------------------------


@pytest.mark.parametrize("which", ["portable", "avx2"])
@pytest.mark.parametrize("k", [8, 16, 24, 64])
def test_bits_follow_the_spec_with_every_implementation(impl, which, k):
    if which not in available_impls():
        pytest.skip(f"{which} is not available on this machine")
    assert BlockedFilter._simd(which) == which
    # every length where XXH3 (or the per-key entry, at 128) changes path, both sides
    edges = [("b" * n).encode() for n in (3, 4, 8, 9, 16, 17, 128, 129, 240, 241)]
    ks = keys(300) + ["é", b"\x00\xff", "a" * 1000] + edges
    single = BlockedFilter(m=512 * 7, k=k)
    fresh = [single.add(key) for key in ks]  # per-key path
    batch = BlockedFilter(m=512 * 7, k=k)
    assert batch.add_many(ks) == fresh      # batch path: same answers, same bits
    expected = spec_words(ks, 512 * 7, k)
    assert words_of(single) == expected == words_of(batch)
    assert single.bits_set == sum(bin(w).count("1") for w in expected)
    probes = ks + keys(3000, "absent")
    assert single.test_many(probes) == [p in single for p in probes]
    assert all(single.test_many(ks))


def test_hash_pair_gives_the_key_hash_of_the_layout():
    """hash_pair(key, "xxh3-block") is the spec's pair (checked against the xxhash package),
    and it is no walk a standard filter takes."""
    for key in keys(200) + ["é", b"\x00\xff", "a" * 1000, b"x" * 17, "ab"]:
        assert lb.hash_pair(key, "xxh3-block") == spec_pair(key)
    assert lb.hash_pair("k:1", "xxh3-block") != lb.hash_pair("k:1")
    with pytest.raises(ValueError):
        lb.MemoryFilter(100, 0.01, hash="xxh3-block")


def test_both_implementations_agree_on_a_large_filter(impl):
    if "avx2" not in available_impls():
        pytest.skip("no AVX2 here: only the portable code runs")
    ks = keys(20_000)
    probes = keys(20_000, "absent")
    out = {}
    for which in ("portable", "avx2"):
        BlockedFilter._simd(which)
        f = BlockedFilter(20_000, 0.001)
        added = f.add_many(ks)
        out[which] = (f.to_bytes(), added, f.test_many(probes), [p in f for p in probes[:2000]])
    assert out["portable"] == out["avx2"]


def test_the_simd_switch_rejects_what_it_does_not_know(impl):
    with pytest.raises(ValueError):
        BlockedFilter._simd("neon")
    with pytest.raises(TypeError):
        BlockedFilter._simd(3)
    assert BlockedFilter._simd() in ("avx2", "portable")


def test_str_is_hashed_as_utf8_and_buffers_as_their_bytes():
    f = BlockedFilter(1000)
    f.add("héllo")
    assert "héllo".encode() in f
    assert bytearray("héllo".encode()) in f and memoryview("héllo".encode()) in f
    f.add(b"raw")
    assert "raw" in f


# ---- sizing ------------------------------------------------------------------------------


@pytest.mark.parametrize("n,p", [(1, 0.01), (10, 0.001), (1000, 0.01), (10**6, 0.001),
                                 (10**6, 1e-6), (10**9, 0.01)])
def test_sizing_keeps_the_promised_rate_with_the_fewest_blocks(n, p):
    m, k = BlockedFilter.geometry(n, p)
    assert m % 512 == 0 and k % 8 == 0 and 8 <= k <= 64
    rate = BlockedFilter.ideal_false_positive_rate
    assert rate(m, k, n) <= p
    # one block fewer breaks the promise at every k
    if m > 512:
        assert all(rate(m - 512, kk, n) > p for kk in range(8, 65, 8))
    if n <= 10**6:
        f = BlockedFilter(n, p)
        assert (f.m, f.k, f.capacity, f.error_rate) == (m, k, n, p)


def test_blocked_needs_more_bits_than_standard_at_equal_rate():
    m, _ = BlockedFilter.geometry(10**6, 0.01)
    assert m > lb.geometry(10**6, 0.01).m
    # ... and k grows past 8 where one bit per lane would cost much more memory
    assert BlockedFilter.geometry(10**6, 1e-6)[1] > 8


def test_ideal_rate_edges():
    rate = BlockedFilter.ideal_false_positive_rate
    assert rate(512, 8, 0) == 0.0
    # one key in one block: each of its 8 lanes must hit the one bit set there
    assert rate(512, 8, 1) == pytest.approx(64.0 ** -8, rel=1e-9)
    # two keys, one block: per lane P(bit set) = 1 - (63/64)^2
    assert rate(512, 8, 2) == pytest.approx((1 - (63 / 64) ** 2) ** 8, rel=1e-9)
    # many blocks: the Binomial mixture is above the standard formula at equal m, k
    assert rate(10_099_712, 8, 10**6) > lb.false_positive_rate(10_099_712, 8, 10**6)
    with pytest.raises(lb.InvalidCapacityError):
        rate(500, 8, 1)
    with pytest.raises(lb.InvalidCapacityError):
        rate(512, 12, 1)


def test_theory_and_sizing_at_the_extremes_answer_at_once():
    rate = BlockedFilter.ideal_false_positive_rate
    # far more keys than bits: a rate of 1, computed without walking 10**18 loads
    assert rate(512 * 3, 8, 10**18) == 1.0
    assert rate(lb.MAX_BITS, 64, 2**64 - 1) == 1.0
    assert rate(512 * 1000, 8, 10**7) == 1.0
    with pytest.raises(lb.InvalidCapacityError, match="2\\*\\*48"):
        BlockedFilter.geometry(10**15, 0.01)
    with pytest.raises(lb.InvalidFalsePositiveRateError):
        BlockedFilter.geometry(1, 1e-300)
    with pytest.raises(lb.InvalidCapacityError):
        BlockedFilter.geometry(0, 0.01)
    with pytest.raises(lb.InvalidFalsePositiveRateError):
        BlockedFilter.geometry(10, 1.5)
    with pytest.raises(TypeError):
        BlockedFilter.geometry(10, None)


def test_capacity_one_is_one_block():
    f = BlockedFilter(1)
    assert (f.m, f.k, f.nbytes) == (512, 8, 64)
    assert f.add("only") is True and f.add("only") is False
    assert "only" in f and "other" not in f


# ---- bad input ---------------------------------------------------------------------------


@pytest.mark.parametrize("kwargs,exc", [
    ({"capacity": 0}, lb.InvalidCapacityError),
    ({"capacity": -1}, lb.InvalidCapacityError),
    ({"capacity": 2**62}, lb.InvalidCapacityError),                # past 2**48 bits
    ({"capacity": 100, "error_rate": 0}, lb.InvalidFalsePositiveRateError),
    ({"capacity": 100, "error_rate": 1.0}, lb.InvalidFalsePositiveRateError),
    ({"capacity": 1, "error_rate": 1e-300}, lb.InvalidFalsePositiveRateError),  # > 64 bits/key
    ({"m": 0, "k": 8}, lb.InvalidCapacityError),
    ({"m": 513, "k": 8}, lb.InvalidCapacityError),                 # not whole blocks
    ({"m": 2**48 + 512, "k": 8}, lb.InvalidCapacityError),         # past the limit
    ({"m": 512, "k": 12}, lb.InvalidCapacityError),                # not one bit per lane
    ({"m": 512, "k": 0}, lb.InvalidCapacityError),
    ({"m": 512, "k": 72}, lb.InvalidCapacityError),
    ({"capacity": None}, TypeError),
    ({"capacity": 100, "error_rate": None}, TypeError),
    ({"m": None, "k": 8}, TypeError),
    ({"m": 512}, TypeError),
    ({"capacity": 100, "m": 512, "k": 8}, TypeError),
    ({"capacity": True}, TypeError),
    ({"capacity": "100"}, TypeError),
    ({"capacity": 100, "hash": "xxh3"}, TypeError),                # one hash only
    ({}, TypeError),
])
def test_bad_arguments(kwargs, exc):
    with pytest.raises(exc):
        BlockedFilter(**kwargs)


def test_the_2_48_limit_is_allowed_up_to_memory():
    # m = 2**48 passes the geometry check; allocating 32 TiB fails with a MemoryError that
    # says what was asked, never a crash
    with pytest.raises(MemoryError, match="bytes of bits"):
        BlockedFilter(m=2**48, k=8)


def test_bad_keys():
    f = BlockedFilter(1000)
    for bad in ("", b"", bytearray()):
        with pytest.raises(lb.EmptyKeyError):
            f.add(bad)
        with pytest.raises(lb.EmptyKeyError):
            f.test(bad)
        with pytest.raises(lb.EmptyKeyError):
            _ = bad in f
    for bad in (True, None, 2.5, ["a"]):
        with pytest.raises(TypeError):
            f.add(bad)
    # a batch with a bad key raises before anything in it changes
    with pytest.raises(lb.EmptyKeyError):
        f.update(keys(5000) + [""])
    with pytest.raises(TypeError):
        f.add_many(["a", 7.0])  # a float (an int is its decimal text)
    with pytest.raises(TypeError):
        f.update("not a list of keys")
    assert f.bits_set == 0 and not any(f.test_many(keys(5000)))


# ---- the interface -----------------------------------------------------------------------


def test_add_test_batches_len_and_reset():
    f = BlockedFilter(20_000, 0.01)
    ks = keys(10_000)
    assert f.add("a") is True and f.add("a") is False
    assert f.add_many(["b", "b", "a"]) == [True, False, False]
    assert f.update(ks) is None
    assert all(f.test_many(ks)) and all(k in f for k in ks[:100]) and f.test(ks[0])
    assert abs(len(f) - 10_003) < 0.03 * 10_003
    assert f.approximate_count() == len(f)
    assert 0 < f.fill_ratio() < 1 and f.bits_set == round(f.fill_ratio() * f.m)
    assert f.current_error_rate() < 0.01  # half full
    assert f.test_many([]) == [] and f.add_many(()) == [] and f.update(iter([])) is None
    f.reset()
    assert f.bits_set == 0 and len(f) == 0 and not any(f.test_many(ks))
    assert bool(f) is True and f.current_error_rate() == 0.0


def test_current_error_rate_is_what_it_measures():
    f = BlockedFilter(50_000, 0.01)
    f.update(keys(50_000))
    probes = keys(200_000, "absent")
    measured = sum(f.test_many(probes)) / len(probes)
    now = f.current_error_rate()
    assert abs(measured - now) <= 5 * (now / len(probes)) ** 0.5, (measured, now)
    assert now <= 0.0115  # the promise, within the spread of one filter


def test_union_intersection_and_their_operators():
    a, b = BlockedFilter(1000), BlockedFilter(1000)
    a.update(["x", "both"])
    b.update(["y", "both"])
    u = a.union(b)
    assert all(u.test_many(["x", "y", "both"])) and u == a | b
    assert words_of(u) == [p | q for p, q in zip(words_of(a), words_of(b))]
    i = a.intersection(b)
    assert "both" in i and i == a & b
    assert words_of(i) == [p & q for p, q in zip(words_of(a), words_of(b))]
    c = a.copy()
    c |= b
    assert c == u
    c &= a
    assert c == a
    with pytest.raises(lb.GeometryMismatchError):
        a.union(BlockedFilter(100_000))
    with pytest.raises(lb.GeometryMismatchError):
        a |= BlockedFilter(m=a.m, k=16)
    with pytest.raises(TypeError):
        a.union(lb.MemoryFilter(m=a.m, k=a.k))
    with pytest.raises(TypeError):
        _ = a | lb.MemoryFilter(m=a.m, k=a.k)


def test_copy_equality_and_subclass():
    a = BlockedFilter(1000)
    a.add("x")
    b = a.copy()
    assert b == a and b is not a and copy.copy(a) == a
    b.add("y")
    assert b != a and "y" not in a
    assert BlockedFilter(1000) != lb.MemoryFilter(1000)  # no cross-type equality

    class Mine(BlockedFilter):
        pass

    m = Mine(1000)
    m.add("x")
    assert type(m.copy()) is Mine and m == a
    assert type(Mine.from_bytes(a.to_bytes())) is Mine


def test_closed_filter():
    f = BlockedFilter(1000)
    f.add("x")
    with f as g:
        assert g is f
    assert f.closed
    for op in (lambda: f.add("x"), lambda: f.test("x"), lambda: "x" in f,
               lambda: f.update(["x"]), lambda: f.add_many(["x"]), lambda: f.test_many(["x"]),
               f.reset, f.copy, f.to_bytes, lambda: len(f), f.fill_ratio,
               f.current_error_rate, lambda: f.union(BlockedFilter(1000)),
               lambda: f == BlockedFilter(1000), lambda: pickle.dumps(f)):
        with pytest.raises(lb.ClosedError):
            op()
    assert f == f and bool(f)
    f.close()  # idempotent
    assert "closed" in repr(f) and "closed" in f._repr_html_()


def test_repr_html_and_sizeof():
    f = BlockedFilter(1000)
    f.add("x")
    assert repr(f).startswith("<BlockedFilter m=") and "bits_set=8" in repr(f)
    html = f._repr_html_()
    assert "BlockedFilter" in html and "xxh3-block" in html
    assert f.__sizeof__() >= f.nbytes


# ---- persistence -------------------------------------------------------------------------


def test_bytes_pickle_save_and_load(tmp_path):
    f = BlockedFilter(5000, 0.001)
    f.update(keys(3000))
    data = f.to_bytes()
    assert data[:4] == b"LBLM" and data[6] == 4 and len(data) == 40 + f.nbytes + 8
    for blob in (data, bytearray(data), memoryview(data)):
        for g in (BlockedFilter.from_bytes(blob), lb.from_bytes(blob)):
            assert type(g) is BlockedFilter and g == f
            assert (g.m, g.k, g.capacity, g.error_rate, g.bits_set) == (
                f.m, f.k, f.capacity, f.error_rate, f.bits_set)
    for proto in range(pickle.HIGHEST_PROTOCOL + 1):
        assert pickle.loads(pickle.dumps(f, protocol=proto)) == f
    path = tmp_path / "b.lbf"
    f.save(path)
    assert BlockedFilter.load(path) == f and lb.load(str(path)) == f
    geo = BlockedFilter(m=1024, k=16)
    geo.add("x")
    g = BlockedFilter.from_bytes(geo.to_bytes())
    assert (g.capacity, g.error_rate, g.k) == (None, None, 16) and "x" in g


def test_saved_bytes_are_stable():
    """A saved filter is the same bytes on every machine and process: the spec's words, in
    little-endian order, after the fixed header."""
    f = BlockedFilter(m=1024, k=16)
    f.update(["alpha", "beta"])
    words = spec_words(["alpha", "beta"], 1024, 16)
    payload = struct.pack("<16Q", *words)
    head = b"LBLM" + struct.pack("<HBBQIIQd", 1, 4, 2, 1024, 16, 0, 0, 0.0)
    assert f.to_bytes()[:-8] == head + payload


def test_corrupt_and_other_types_are_refused():
    f = BlockedFilter(1000)
    f.add("x")
    data = bytearray(f.to_bytes())
    data[50] ^= 0x01
    with pytest.raises(lb.CorruptFileError, match="checksum"):
        BlockedFilter.from_bytes(bytes(data))
    with pytest.raises(lb.CorruptFileError):
        BlockedFilter.from_bytes(f.to_bytes()[:-1])
    with pytest.raises(lb.CorruptFileError, match="holds a BlockedFilter, not a MemoryFilter"):
        lb.MemoryFilter.from_bytes(f.to_bytes())
    with pytest.raises(lb.CorruptFileError, match="holds a MemoryFilter, not a BlockedFilter"):
        BlockedFilter.from_bytes(lb.MemoryFilter(1000).to_bytes())
    with pytest.raises(TypeError):
        BlockedFilter.from_bytes("text")


def _reseal(data: bytes, edit) -> bytes:
    if xxhash is None:
        pytest.skip("needs the xxhash package to forge a valid checksum")
    body = bytearray(data[:-8])
    edit(body)
    return bytes(body) + struct.pack("<Q", xxhash.xxh3_64_intdigest(bytes(body)))


@pytest.mark.parametrize("edit,why", [
    (lambda b: struct.pack_into("<I", b, 16, 12), "m or k out of range"),     # k = 12
    (lambda b: struct.pack_into("<I", b, 16, 72), "m or k out of range"),     # k = 72
    (lambda b: b.__setitem__(7, 0), "hash byte"),                             # scheme 0
    (lambda b: struct.pack_into("<Q", b, 24, 10**5), "do not follow"),        # capacity
    (lambda b: struct.pack_into("<d", b, 32, 0.5), "do not follow"),          # error rate
])
def test_forged_headers_are_refused(edit, why):
    f = BlockedFilter(1000)
    with pytest.raises(lb.CorruptFileError, match=why):
        BlockedFilter.from_bytes(_reseal(f.to_bytes(), edit))


def test_forged_length_is_refused_before_allocating():
    f = BlockedFilter(m=512, k=8)
    # m says 2**48 bits; the file holds 64 bytes of them
    forged = _reseal(f.to_bytes(), lambda b: struct.pack_into("<Q", b, 8, 2**48))
    with pytest.raises(lb.CorruptFileError, match="length"):
        BlockedFilter.from_bytes(forged)
    forged = _reseal(f.to_bytes(), lambda b: struct.pack_into("<Q", b, 8, 1000))
    with pytest.raises(lb.CorruptFileError, match="m or k out of range"):
        BlockedFilter.from_bytes(forged)


def test_a_filter_of_several_mib_is_mapped_for_huge_pages_and_works_the_same():
    """From 4 MiB on the blocks are mapped (2 MiB aligned, huge pages asked for) instead of
    calloc'd: every operation behaves the same, and the memory goes back on close."""
    f = BlockedFilter(5_000_000, 0.01)
    assert f.nbytes >= 4 << 20
    ks = keys(20_000)
    f.update(ks)
    g = f.copy()
    assert all(g.test_many(ks)) and g == f
    h = BlockedFilter.from_bytes(f.to_bytes())
    assert h == f and (f | h) == f and (f & h) == f
    assert words_of(BlockedFilter(m=f.m, k=f.k) | f)[:64] == words_of(f)[:64]
    f.reset()
    assert f.bits_set == 0 and not any(f.test_many(ks[:100]))
    for x in (f, g, h):
        x.close()
    assert g.closed
