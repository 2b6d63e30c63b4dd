"""CountingFilter: 4-bit saturating counters that can remove keys."""
from __future__ import annotations

import copy
import pickle
import sys

import pytest

import ling_bloom as lb
from ling_bloom import CountingFilter

HEADER = 40  # bytes of the fixed header before the counters in to_bytes()


def keys(n: int, prefix: str = "k") -> list[str]:
    return [f"{prefix}:{i}" for i in range(n)]


def cells(f: CountingFilter) -> list[int]:
    """Every counter, read from to_bytes(): cell i in byte i//2, even cells in the low nibble."""
    raw = f.to_bytes()[HEADER:-8]
    assert len(raw) == f.nbytes == (f.m + 1) // 2
    return [(raw[i // 2] >> (4 * (i & 1))) & 0xF for i in range(f.m)]


@pytest.fixture(params=["xxh3-mix", "xxh3", "ling-base"])
def scheme(request):
    return request.param


def test_construction_and_properties(scheme):
    f = CountingFilter(1000, 0.01, hash=scheme)
    assert (f.m, f.k, f.capacity, f.error_rate, f.hash) == (9586, 7, 1000, 0.01, scheme)
    assert f.nbytes == 4793
    g = CountingFilter(m=7, k=2)
    assert (g.m, g.k, g.nbytes, g.capacity, g.error_rate) == (7, 2, 4, None, None)
    for bad, exc in [
        (dict(capacity=0), lb.InvalidCapacityError),
        (dict(capacity=10, error_rate=0), lb.InvalidFalsePositiveRateError),
        (dict(m=0, k=1), lb.InvalidCapacityError),
        (dict(m=10, k=0), ValueError),
        (dict(capacity=10, hash="x"), ValueError),
    ]:
        with pytest.raises(exc):
            CountingFilter(**bad)


def test_add_test_remove(scheme):
    f = CountingFilter(1000, hash=scheme)
    assert f.add("a") is True
    assert f.add("b") is True
    assert f.add("a") is False  # present; its counters still go up
    assert f.count("a") == 2 and f.count("b") >= 1
    assert f.remove("a") is None
    assert "a" in f and f.count("a") == 1
    f.remove("a")
    assert "a" not in f and f.count("a") == 0
    assert "b" in f


def test_remove_absent_is_key_error_and_changes_nothing():
    f = CountingFilter(m=64, k=3)
    f.update(keys(5))
    before = f.to_bytes()
    with pytest.raises(KeyError) as info:
        f.remove("never-added")
    assert info.value.args == ("never-added",)
    assert f.to_bytes() == before
    assert f.discard("never-added") is False
    assert f.to_bytes() == before


def test_discard(scheme):
    f = CountingFilter(100, hash=scheme)
    f.add(b"x")
    assert f.discard("x") is True
    assert f.discard("x") is False
    assert "x" not in f


def test_counter_layout_in_to_bytes(scheme):
    f = CountingFilter(m=11, k=3, hash=scheme)
    expected = [0] * 11
    for key in keys(6):
        for i in lb.indices(key, 11, 3, hash=scheme):
            expected[i] = min(15, expected[i] + 1)
        f.add(key)
    assert cells(f) == expected
    # the padding nibble of an odd m stays zero
    assert f.to_bytes()[HEADER:-8][-1] >> 4 == 0


def test_repeated_index_counts_twice():
    # with m=1 every index is 0: one add of a k=3 key adds 3 to the only cell
    f = CountingFilter(m=1, k=3)
    f.add("z")
    assert cells(f) == [3] and f.count("z") == 3
    f.remove("z")
    assert cells(f) == [0] and "z" not in f


def test_ling_base_defect_saturation_protects_other_keys():
    """The spec's defect: Go decrements saturated counters, so a key that is still present
    can be removed by other keys' legitimate removals."""
    f = CountingFilter(m=1, k=1)
    f.add("a")
    for _ in range(15):
        f.add("b")
    assert cells(f) == [15] and f.count("b") == 15
    for _ in range(15):
        f.remove("b")
    assert f.test("a") is True
    assert cells(f) == [15]  # a saturated counter is never decremented


def test_saturation_sat_100_times():
    f = CountingFilter(m=64, k=3)
    for _ in range(100):
        f.add("sat")
    assert f.count("sat") == 15
    assert max(cells(f)) == 15
    f.remove("sat")
    assert "sat" in f
    for _ in range(200):
        f.discard("sat")
    assert "sat" in f and f.count("sat") == 15


def test_balanced_add_remove_empties(scheme):
    f = CountingFilter(2000, hash=scheme)
    ks = keys(1000)
    f.update(ks)
    assert all(f.test_many(ks))
    for k in ks:
        f.remove(k)
    left = [c for c in cells(f) if c]
    if scheme.startswith("xxh3"):
        assert left == [] and f.fill_ratio() == 0.0 and f.approximate_count() == 0
        assert not any(f.test_many(ks))
    else:
        # FNV's correlated indices pile onto a few cells; those saturated and were kept
        assert all(c == 15 for c in left)
        assert sum(f.test_many(ks)) < 50


def test_removal_never_causes_false_negatives_for_remaining_keys(scheme):
    f = CountingFilter(m=3000, k=4, hash=scheme)
    ks = keys(1500)  # overloaded on purpose: many shared and saturated counters
    f.update(ks)
    f.update(ks[:200])  # some keys twice
    for k in ks[:700]:
        f.remove(k)
    assert all(f.test_many(ks[700:]))


def test_batches(scheme):
    f = CountingFilter(5000, hash=scheme)
    g = CountingFilter(5000, hash=scheme)
    ks = keys(3000) + keys(100)
    assert f.add_many(ks) == [g.add(k) for k in ks]
    assert f == g
    assert f.update(keys(10, "u")) is None
    assert all(f.test_many(keys(10, "u")))
    assert f.test_many(x for x in ["k:1", "nope:1"])[0] is True
    for single in ("ab", b"ab", bytearray(b"ab")):
        with pytest.raises(TypeError):
            f.add_many(single)
    before = f.to_bytes()
    with pytest.raises(lb.EmptyKeyError):
        f.add_many(keys(4000, "x") + [""])
    with pytest.raises(TypeError):
        f.update(["fine", 3.0])
    assert f.to_bytes() == before


def test_counts_and_fill():
    f = CountingFilter(m=1000, k=4)
    f.update(keys(100))
    used = sum(1 for c in cells(f) if c)
    assert f.fill_ratio() == used / 1000
    assert f.current_error_rate() == pytest.approx((used / 1000) ** 4)
    assert 85 <= f.approximate_count() <= 115


def test_reset_copy_eq(scheme):
    f = CountingFilter(100, hash=scheme)
    f.update(keys(20))
    c = f.copy()
    assert c == f and c is not f and copy.copy(f) == f
    c.remove("k:1")
    assert c != f and "k:1" in f
    f.reset()
    assert f.fill_ratio() == 0 and (f.m, f.k) == (c.m, c.k)
    assert f != c
    assert f == CountingFilter(100, hash=scheme)
    assert CountingFilter(m=10, k=2) != CountingFilter(m=10, k=2, hash="ling-base")
    assert CountingFilter(m=10, k=2) != CountingFilter(m=10, k=3)
    assert CountingFilter(m=10, k=2) != lb.MemoryFilter(m=10, k=2)
    with pytest.raises(TypeError):
        hash(f)


def test_close():
    f = CountingFilter(100)
    f.add("a")
    ops = [
        lambda: f.add("a"), lambda: f.test("a"), lambda: "a" in f, lambda: f.remove("a"),
        lambda: f.discard("a"), lambda: f.count("a"), lambda: f.add_many(["a"]),
        lambda: f.update(["a"]), lambda: f.test_many(["a"]), f.reset, f.approximate_count,
        f.fill_ratio, f.current_error_rate, f.copy, f.to_bytes, lambda: pickle.dumps(f),
        lambda: f == CountingFilter(100), f.__enter__, lambda: f.save("/nonexistent/x"),
    ]
    f.close()
    f.close()
    assert f.closed
    for op in ops:
        with pytest.raises(lb.ClosedError):
            op()
    with CountingFilter(10) as g:
        g.add("x")
    assert g.closed


class Mine(CountingFilter):
    def remove_all(self, ks):
        for k in ks:
            self.discard(k)


def test_subclass():
    f = Mine(100)
    f.update(["a", "b"])
    f.remove_all(["a", "b"])
    assert f.test_many(["a", "b"]) == [False, False]
    assert type(f.copy()) is Mine
    assert type(pickle.loads(pickle.dumps(f))) is Mine


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="huge pages: Linux only")
def test_counters_of_several_mib_ask_for_huge_pages_and_work_the_same():
    # As MemoryFilter's bits: from 4 MiB on, a mapping with huge pages asked for (the "hg"
    # flag in /proc/self/smaps); before, calloc'd (no such mapping).  The batch's prefetch
    # ahead gives the counters of single calls.  (Where the platform does not show the
    # advice, under qemu-user, what the filter does with its counters is checked alone.)
    from huge_pages import advice_shows, huge_page_ranges

    one = 1 if advice_shows() else 0
    before = huge_page_ranges()
    f, single = CountingFilter(2_000_000, 0.01), CountingFilter(2_000_000, 0.01)
    assert f.nbytes >= 4 << 20
    ours = huge_page_ranges() - before
    assert len(ours) == 2 * one
    ks = keys(20_000) + keys(5_000)  # counters of 5,000 keys raised twice
    assert f.add_many(ks) == [single.add(k) for k in ks]
    assert f.to_bytes() == single.to_bytes()
    assert all(f.test_many(ks)) and f.count("k:1") >= 2
    f.close()
    single.close()
    del f, single
    import gc

    gc.collect()
    assert not huge_page_ranges() & ours  # both given back
