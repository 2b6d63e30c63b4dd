"""MemoryFilter: the whole API as built."""
from __future__ import annotations

import copy
import gc
import math
import pickle
import sys
import weakref

import pytest

import ling_bloom as lb
from ling_bloom import MemoryFilter


def keys(n: int, prefix: str = "k") -> list[str]:
    return [f"{prefix}:{i}" for i in range(n)]


def set_bits(bitmap: bytes, m: int) -> list[int]:
    """Redis's SETBIT order: bit i is byte i//8, mask 0x80 >> (i % 8)."""
    return [i for i in range(m) if bitmap[i // 8] & (0x80 >> (i % 8))]


@pytest.fixture(params=["xxh3-mix", "xxh3", "ling-base"])
def scheme(request):
    return request.param


# ---- construction and properties ------------------------------------------------------------


def test_by_capacity_uses_estimate(scheme):
    f = MemoryFilter(1000, 0.01, hash=scheme)
    assert (f.m, f.k) == lb.estimate(1000, 0.01) == (9586, 7)
    assert f.capacity == 1000
    assert f.error_rate == 0.01
    assert f.hash == scheme
    assert f.nbytes == (9586 + 7) // 8
    assert f.bits_set == 0
    assert f.closed is False


def test_default_error_rate_and_hash():
    f = MemoryFilter(1000)
    assert f.error_rate == 0.01 and f.hash == "xxh3-mix"
    assert MemoryFilter(capacity=1000, error_rate=0.001).k == 10
    assert MemoryFilter(1e6).m == 9585059  # a float that is a whole number


def test_by_geometry():
    f = MemoryFilter(m=100, k=3)
    assert (f.m, f.k, f.capacity, f.error_rate, f.nbytes) == (100, 3, None, None, 13)
    assert MemoryFilter(m=1, k=1).nbytes == 1


@pytest.mark.parametrize(
    "kwargs,exc",
    [
        (dict(capacity=0), lb.InvalidCapacityError),
        (dict(capacity=-1), lb.InvalidCapacityError),
        (dict(capacity=1.5), lb.InvalidCapacityError),
        (dict(capacity=float("nan")), lb.InvalidCapacityError),
        (dict(capacity=10, error_rate=0.0), lb.InvalidFalsePositiveRateError),
        (dict(capacity=10, error_rate=1.0), lb.InvalidFalsePositiveRateError),
        (dict(capacity=10, error_rate=float("nan")), lb.InvalidFalsePositiveRateError),
        (dict(capacity=10, error_rate=float("inf")), lb.InvalidFalsePositiveRateError),
        (dict(m=0, k=3), lb.InvalidCapacityError),
        (dict(m=10, k=0), ValueError),
        (dict(m=10, k=65), ValueError),
        (dict(capacity=10, hash="sha1"), ValueError),
        (dict(m=10), TypeError),
        (dict(k=10), TypeError),
        (dict(capacity=10, m=10, k=3), TypeError),
        (dict(), TypeError),
        (dict(capacity=True), TypeError),
        (dict(capacity="10"), TypeError),
        (dict(capacity=10, hash=b"xxh3"), TypeError),
    ],
)
def test_invalid_arguments(kwargs, exc):
    with pytest.raises(exc):
        MemoryFilter(**kwargs)


# ---- single keys --------------------------------------------------------------------------


def test_add_reports_new_keys(scheme):
    f = MemoryFilter(1000, hash=scheme)
    assert f.add("alpha") is True
    assert f.add("alpha") is False
    assert f.add(b"alpha") is False  # same bytes
    assert f.add("beta") is True
    assert f.test("alpha") is True and f.test("beta") is True
    assert "alpha" in f and b"beta" in f
    assert f.test("gamma") is False and "gamma" not in f


def test_no_false_negatives_and_a_sane_false_positive_rate(scheme):
    f = MemoryFilter(5000, 0.01, hash=scheme)
    added = keys(5000)
    for k in added:
        f.add(k)
    assert all(f.test(k) for k in added)
    fp = sum(f.test(k) for k in keys(20000, "absent"))
    assert fp / 20000 < 0.03  # 1% promised; 3% is > 6 sigma away


def test_approximate_count_and_fill(scheme):
    f = MemoryFilter(10000, 0.01, hash=scheme)
    assert f.approximate_count() == 0
    assert f.fill_ratio() == 0.0
    assert f.current_error_rate() == 0.0
    f.update(keys(5000))
    est = f.approximate_count()
    assert isinstance(est, int)
    if scheme.startswith("xxh3"):
        assert 4750 <= est <= 5250
    else:  # FNV's correlated indices set fewer bits than ideal (hashing-fpr.md)
        assert 3500 <= est <= 5250
    assert f.fill_ratio() == f.bits_set / f.m
    assert f.current_error_rate() == pytest.approx(f.fill_ratio() ** f.k)
    if scheme.startswith("xxh3"):
        theory = lb.false_positive_rate(f.m, f.k, 5000)
        assert f.current_error_rate() == pytest.approx(theory, rel=0.5)


def test_approximate_count_of_a_full_filter():
    f = MemoryFilter(m=8, k=1)
    f.update(keys(500))
    assert f.bits_set == 8 and f.fill_ratio() == 1.0
    assert f.approximate_count() == 8  # infinite estimate clamps to m
    assert f.current_error_rate() == 1.0


def test_bits_set_counts_bits():
    f = MemoryFilter(m=1000, k=5)
    f.update(keys(50))
    assert f.bits_set == sum(bin(b).count("1") for b in f.to_bitmap())


# ---- batches --------------------------------------------------------------------------------


def test_add_many_matches_single_adds(scheme):
    ks = keys(6000) + keys(3000)  # duplicates across the batch, > one 2048-key chunk
    a = MemoryFilter(5000, hash=scheme)
    b = MemoryFilter(5000, hash=scheme)
    singles = [a.add(k) for k in ks]
    batch = b.add_many(ks)
    assert batch == singles
    assert a == b
    assert batch[6000:] == [False] * 3000
    assert all(b.test_many(ks))


# lb_bits_add / lb_bits_test take another path (all k lines fetched first, an early exit)
# once the bits pass 4 MiB: both sizes, in memory and in a mapped file, must give the
# batches' answers and bits.
@pytest.mark.parametrize("m", [20_000, 40_000_000])
@pytest.mark.parametrize("mapped", [False, True])
def test_single_keys_match_batches_at_every_size(m, mapped, tmp_path):
    ks = keys(3000) + keys(500)  # the repeats must come back as not new
    probe = keys(3000) + keys(3000, "other")
    if mapped:
        a = MemoryFilter.open(str(tmp_path / "a.bloom"), "w", m=m, k=7)
    else:
        a = MemoryFilter(m=m, k=7)
    b = MemoryFilter(m=m, k=7)
    assert [a.add(k) for k in ks] == b.add_many(ks)
    assert a.bits_set == b.bits_set
    assert a.to_bytes() == b.to_bytes()
    assert [k in a for k in probe] == b.test_many(probe)
    assert all(k in a for k in ks)
    a.close()


def test_duplicates_inside_one_batch():
    f = MemoryFilter(1000)
    assert f.add_many(["x", "x", "y", "x"]) == [True, False, True, False]


def test_update_returns_none_and_adds(scheme):
    f = MemoryFilter(1000, hash=scheme)
    assert f.update(keys(300)) is None
    assert f.test_many(keys(300)) == [True] * 300
    g = MemoryFilter(1000, hash=scheme)
    g.add_many(keys(300))
    assert f == g


def test_test_many_matches_single_tests():
    f = MemoryFilter(m=20000, k=4)
    f.update(keys(2000))
    probe = keys(3000) + keys(3000, "other")
    assert f.test_many(probe) == [f.test(k) for k in probe]


def test_batches_accept_any_iterable():
    f = MemoryFilter(1000)
    assert f.add_many(k for k in ["g1", "g2"]) == [True, True]
    assert f.add_many(("t1", b"t2", bytearray(b"t3"), memoryview(b"t4"))) == [True] * 4
    assert f.test_many(iter(["g1", "t4", "nope"])) == [True, True, False]
    f.update(map(str, range(10)))
    assert all(f.test_many(map(str, range(10))))
    assert f.add_many([]) == [] and f.test_many(()) == [] and f.update([]) is None
    assert f.add_many({"d1": 1}) == [True]  # a dict iterates its keys


@pytest.mark.parametrize("single", ["abc", b"abc", bytearray(b"abc")])
def test_a_single_key_is_not_a_batch(single):
    f = MemoryFilter(1000)
    for method in (f.add_many, f.update, f.test_many):
        with pytest.raises(TypeError):
            method(single)
    assert f.bits_set == 0


def test_non_iterables_are_type_errors():
    f = MemoryFilter(1000)
    for bad in (5, None, 1.0):
        with pytest.raises(TypeError):
            f.add_many(bad)


@pytest.mark.parametrize("bad", ["", None, 7.0, memoryview(b"abcd")[::2]])
def test_a_bad_key_anywhere_changes_nothing(bad):
    f = MemoryFilter(10000)
    f.update(keys(10))
    before = f.to_bitmap()
    for n in (3, 5000):  # one chunk; several chunks with the bad key last
        batch = keys(n, "new") + [bad]
        with pytest.raises((TypeError, ValueError)):
            f.add_many(batch)
        with pytest.raises((TypeError, ValueError)):
            f.update(batch)
        with pytest.raises((TypeError, ValueError)):
            f.test_many(batch)
        assert f.to_bitmap() == before


def test_a_generator_that_raises_changes_nothing():
    f = MemoryFilter(1000)

    def gen():
        yield "a"
        yield "b"
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError):
        f.update(gen())
    assert f.bits_set == 0


# ---- reset, close, context manager ------------------------------------------------------------


def test_reset_keeps_geometry(scheme):
    f = MemoryFilter(1000, 0.001, hash=scheme)
    f.update(keys(100))
    m, k = f.m, f.k
    assert f.reset() is None
    assert (f.m, f.k, f.hash, f.capacity, f.error_rate) == (m, k, scheme, 1000, 0.001)
    assert f.bits_set == 0 and not any(f.test_many(keys(100)))
    assert f.add("k:0") is True


def _every_operation(f):
    other = MemoryFilter(m=f.m, k=f.k, hash=f.hash)
    return {
        "add": lambda: f.add("a"),
        "test": lambda: f.test("a"),
        "contains": lambda: "a" in f,
        "add_many": lambda: f.add_many(["a"]),
        "update": lambda: f.update(["a"]),
        "test_many": lambda: f.test_many(["a"]),
        "reset": f.reset,
        "approximate_count": f.approximate_count,
        "fill_ratio": f.fill_ratio,
        "current_error_rate": f.current_error_rate,
        "union": lambda: f.union(other),
        "union_rev": lambda: other.union(f),
        "intersection": lambda: f.intersection(other),
        "or": lambda: f | other,
        "and": lambda: other & f,
        "ior": lambda: other.__ior__(f),
        "iand": lambda: f.__iand__(other),
        "copy": f.copy,
        "copy.copy": lambda: copy.copy(f),
        "eq": lambda: f == other,
        "to_bytes": f.to_bytes,
        "to_bitmap": f.to_bitmap,
        "pickle": lambda: pickle.dumps(f),
        "save": lambda: f.save("/nonexistent-dir/never-written"),
        "enter": f.__enter__,
    }


def test_close_makes_every_operation_raise_closed_error():
    f = MemoryFilter(1000)
    f.update(keys(10))
    ops = _every_operation(f)
    assert f.close() is None
    assert f.closed is True
    for name, op in ops.items():
        with pytest.raises(lb.ClosedError):
            op()
            pytest.fail(name)
    assert f.close() is None  # idempotent
    assert f.closed is True
    # geometry stays readable, as ling-base's getters do
    assert (f.m, f.k, f.hash) == (9586, 7, "xxh3-mix")
    assert "closed" in repr(f)
    assert issubclass(lb.ClosedError, lb.BloomError)


def test_context_manager():
    with MemoryFilter(1000) as f:
        assert isinstance(f, MemoryFilter)
        f.add("x")
        assert "x" in f
    assert f.closed
    with pytest.raises(lb.ClosedError):
        f.test("x")


def test_context_manager_closes_on_error_and_does_not_swallow_it():
    with pytest.raises(KeyError):
        with MemoryFilter(1000) as f:
            raise KeyError("inner")
    assert f.closed


# ---- union, intersection ------------------------------------------------------------------


def test_union_and_intersection(scheme):
    a = MemoryFilter(2000, hash=scheme)
    b = MemoryFilter(2000, hash=scheme)
    a.update(keys(500, "a"))
    b.update(keys(500, "b"))
    both = keys(100, "both")
    a.update(both)
    b.update(both)
    u = a.union(b)
    assert isinstance(u, MemoryFilter) and u is not a and u is not b
    assert all(u.test_many(keys(500, "a") + keys(500, "b") + both))
    assert u == (a | b) == (b | a)
    assert u.bits_set == sum(bin(x | y).count("1") for x, y in zip(a.to_bitmap(), b.to_bitmap()))
    i = a.intersection(b)
    assert i == (a & b)
    assert all(i.test_many(both))
    assert i.to_bitmap() == bytes(x & y for x, y in zip(a.to_bitmap(), b.to_bitmap()))
    assert i.bits_set == sum(bin(x).count("1") for x in i.to_bitmap())
    # operands untouched
    assert not any(a.test_many(keys(50, "b")[:0]))
    a_bits = a.to_bitmap()
    _ = a | b
    assert a.to_bitmap() == a_bits


def test_in_place_union_and_intersection():
    a = MemoryFilter(1000)
    b = MemoryFilter(1000)
    a.update(["a1", "shared"])
    b.update(["b1", "shared"])
    expected_or = (a | b).to_bitmap()
    expected_and = (a & b).to_bitmap()
    ident = id(a)
    a |= b
    assert id(a) == ident and a.to_bitmap() == expected_or
    assert a.bits_set == sum(bin(x).count("1") for x in a.to_bitmap())
    c = MemoryFilter(1000)
    c.update(["a1", "shared"])
    c &= b
    assert c.to_bitmap() == expected_and
    assert c.bits_set == sum(bin(x).count("1") for x in c.to_bitmap())
    assert "shared" in c


@pytest.mark.parametrize(
    "other",
    [
        dict(capacity=2000),
        dict(m=9586, k=6),
        dict(m=9587, k=7),
        dict(capacity=1000, hash="ling-base"),
    ],
)
def test_unlike_filters_do_not_combine(other):
    a = MemoryFilter(1000)
    b = MemoryFilter(**other)
    for op in (a.union, a.intersection, lambda o: a | o, lambda o: a & o, a.__ior__, a.__iand__):
        with pytest.raises(lb.GeometryMismatchError):
            op(b)
    assert issubclass(lb.GeometryMismatchError, ValueError)
    assert a.bits_set == 0


def test_combining_with_other_types():
    a = MemoryFilter(1000)
    with pytest.raises(TypeError):
        a | 3
    with pytest.raises(TypeError):
        3 & a
    with pytest.raises(TypeError):
        a.union(lb.CountingFilter(1000))
    with pytest.raises(TypeError):
        a.union("x")


# ---- copy, equality ---------------------------------------------------------------------------


def test_copy_is_independent(scheme):
    a = MemoryFilter(1000, 0.02, hash=scheme)
    a.update(keys(50))
    for b in (a.copy(), copy.copy(a), copy.deepcopy(a)):
        assert b == a and b is not a
        assert (b.m, b.k, b.hash, b.capacity, b.error_rate, b.bits_set) == (
            a.m, a.k, a.hash, a.capacity, a.error_rate, a.bits_set)
        b.add("only-in-copy")
        assert b != a
        assert "only-in-copy" not in a


def test_equality():
    a, b = MemoryFilter(1000), MemoryFilter(1000)
    assert a == b and not (a != b)
    a.add("x")
    assert a != b
    b.add("x")
    assert a == b
    assert MemoryFilter(m=100, k=3) != MemoryFilter(m=100, k=4)
    assert MemoryFilter(m=100, k=3) != MemoryFilter(m=100, k=3, hash="ling-base")
    assert MemoryFilter(m=100, k=3) != MemoryFilter(m=101, k=3)
    assert (a == "x") is False and (a != 3) is True
    assert a != lb.CountingFilter(1000)
    with pytest.raises(TypeError):
        hash(a)
    with pytest.raises(TypeError):
        a < b  # noqa: B015


# ---- the bitmap in Redis's order ----------------------------------------------------------------


@pytest.mark.parametrize("m,k", [(1, 1), (7, 2), (8, 3), (100, 3), (1001, 7), (9586, 7)])
def test_to_bitmap_uses_redis_bit_order(m, k, scheme):
    f = MemoryFilter(m=m, k=k, hash=scheme)
    expected: set[int] = set()
    for key in keys(12):
        f.add(key)
        expected.update(lb.indices(key, m, k, hash=scheme))
    bm = f.to_bitmap()
    assert len(bm) == (m + 7) // 8 == f.nbytes
    assert set_bits(bm, m) == sorted(expected)
    assert f.bits_set == len(expected)


def test_single_bit_positions():
    # find keys that land on bit 0 and bit 9 of a 16-bit, k=1 filter
    found = {}
    for i in range(10000):
        (idx,) = lb.indices(f"p{i}", 16, 1)
        found.setdefault(idx, f"p{i}")
        if 0 in found and 9 in found and 15 in found:
            break
    f = MemoryFilter(m=16, k=1)
    f.add(found[0])
    assert f.to_bitmap() == b"\x80\x00"
    f.add(found[9])
    assert f.to_bitmap() == b"\x80\x40"
    f.add(found[15])
    assert f.to_bitmap() == b"\x80\x41"


def test_from_bitmap_round_trip(scheme):
    f = MemoryFilter(m=1001, k=5, hash=scheme)
    f.update(keys(80))
    g = MemoryFilter.from_bitmap(f.to_bitmap(), 1001, 5, hash=scheme)
    assert g == f and g.hash == scheme and g.bits_set == f.bits_set
    assert all(g.test_many(keys(80)))
    assert (g.capacity, g.error_rate) == (None, None)
    g2 = MemoryFilter.from_bitmap(data=bytearray(f.to_bitmap()), m=1001, k=5, hash=scheme)
    assert g2 == f


def test_from_bitmap_short_input_is_zero_padded_like_redis():
    f = MemoryFilter(m=100, k=2)
    for i in range(10000):  # a key whose bits are both in the first byte
        if max(lb.indices(f"s{i}", 100, 2)) < 8:
            f.add(f"s{i}")
            break
    bm = f.to_bitmap()
    assert bm[1:] == bytes(12)
    g = MemoryFilter.from_bitmap(bm[:1], 100, 2)
    assert g == f and g.nbytes == 13
    assert MemoryFilter.from_bitmap(b"", 100, 2) == MemoryFilter(m=100, k=2)


def test_from_bitmap_rejects_bad_input():
    with pytest.raises(ValueError):
        MemoryFilter.from_bitmap(bytes(14), 100, 3)  # longer than ceil(100/8)
    with pytest.raises(ValueError):
        MemoryFilter.from_bitmap(bytes(12) + b"\x01", 100, 3)  # bit 103 set, m = 100
    with pytest.raises(ValueError):
        MemoryFilter.from_bitmap(bytes(12) + b"\x08", 100, 3)  # bit 100, the first past m
    assert MemoryFilter.from_bitmap(bytes(12) + b"\x10", 100, 3).bits_set == 1  # bit 99
    with pytest.raises(lb.InvalidCapacityError):
        MemoryFilter.from_bitmap(b"", 0, 3)
    with pytest.raises(ValueError):
        MemoryFilter.from_bitmap(b"", 10, 0)
    with pytest.raises(TypeError):
        MemoryFilter.from_bitmap("text", 100, 3)
    with pytest.raises(ValueError):
        MemoryFilter.from_bitmap(b"", 10, 3, hash="nope")


# ---- misc -------------------------------------------------------------------------------------


def test_repr_and_sizeof():
    f = MemoryFilter(m=800, k=3)
    f.add("a")
    r = repr(f)
    assert "MemoryFilter" in r and "m=800" in r and "k=3" in r and "xxh3-mix" in r
    assert sys.getsizeof(f) >= 100  # includes the bit array


def test_weakref_and_gc():
    f = MemoryFilter(1000)
    r = weakref.ref(f)
    assert r() is f
    del f
    gc.collect()
    assert r() is None


class TaggedFilter(MemoryFilter):
    """A Python subclass: extra state and an overridden method.  (The C type parses its
    arguments in __new__, so a subclass keeps the constructor's signature.)"""

    def __init__(self, *args, **kwargs):
        self.tag = "t"
        self.seen = 0

    def add(self, key):
        self.seen += 1
        return super().add(key)


def test_subclassing():
    f = TaggedFilter(1000, error_rate=0.01)
    f.tag = "users"
    assert f.tag == "users" and isinstance(f, MemoryFilter) and f.m == 9586
    assert f.add("x") is True and f.seen == 1
    assert "x" in f and f.test("x")
    assert f.add_many(["y"]) == [True]  # the C batch does not go through add()
    assert f.seen == 1
    c = f.copy()
    assert type(c) is TaggedFilter and c == f
    u = f | MemoryFilter(1000)
    assert isinstance(u, MemoryFilter)
    p = pickle.loads(pickle.dumps(f))
    assert type(p) is TaggedFilter and p == f
    with f:
        pass
    assert f.closed


def test_large_filter_math_does_not_overflow():
    f = MemoryFilter(m=2**33 + 1, k=2)  # 1 GiB, allocated lazily by calloc
    assert f.nbytes == (2**33 + 8) // 8
    f.add("x")
    assert "x" in f and f.bits_set == len(set(lb.indices("x", 2**33 + 1, 2)))
    assert f.approximate_count() == 1
    f.close()


def test_theory_helpers_agree_with_estimate():
    m, k = lb.estimate(1000, 0.01)
    assert lb.false_positive_rate(m, k, 1000) == pytest.approx(0.01, rel=0.05)
    assert lb.optimal_k(m, 1000) == 7
    assert math.isclose(lb.false_positive_rate(m, k, 0), 0.0)


def test_a_filter_that_cannot_be_allocated_is_a_memory_error_that_says_so():
    # 2**48 bits is 32 TiB: within the limit on m, beyond any machine's memory.
    with pytest.raises(MemoryError, match="cannot allocate 35184372088832 bytes"):
        MemoryFilter(m=2**48, k=7)
    with pytest.raises(lb.InvalidCapacityError):
        MemoryFilter(m=2**48 + 1, k=7)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="huge pages: Linux only")
def test_a_bit_array_of_several_mib_asks_for_huge_pages_and_works_the_same():
    # From 4 MiB on the bits are a mapping aligned to 2 MiB with huge pages asked for (with
    # 4 KiB pages nearly every probe of a large filter misses the TLB too); before, calloc'd
    # like the small ones: no new "hg" mapping.  (Where the platform does not show the
    # advice, under qemu-user, what the filter does with its array is checked alone.)
    from huge_pages import advice_shows, huge_page_ranges

    one = 1 if advice_shows() else 0
    small = MemoryFilter(100_000, 0.01)
    before = huge_page_ranges()
    f = MemoryFilter(5_000_000, 0.01)
    assert f.nbytes >= 4 << 20 and small.nbytes < 4 << 20
    assert len(huge_page_ranges() - before) == one
    ks = keys(30_000)
    f.update(ks)
    small.update(ks)
    assert all(f.test_many(ks)) and f.add_many(ks) == [False] * len(ks)
    g = MemoryFilter.from_bytes(f.to_bytes())
    assert g == f and (g | f) == f and (g & f) == f
    ours = huge_page_ranges() - before
    assert len(ours) == 2 * one
    f.reset()
    assert f.bits_set == 0 and not any(f.test_many(ks[:100]))
    f.close()
    del f, g
    gc.collect()
    assert not huge_page_ranges() & ours  # both given back
