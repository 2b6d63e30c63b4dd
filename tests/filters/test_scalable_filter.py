"""ScalableFilter: a chain of bit arrays that grows, with a bound on the whole chain."""
from __future__ import annotations

import copy
import math
import pickle

import pytest

import ling_bloom as lb
from ling_bloom import ScalableFilter


def keys(n: int, prefix: str = "k") -> list[str]:
    return [f"{prefix}:{i}" for i in range(n)]


@pytest.fixture(params=["xxh3-mix", "xxh3", "ling-base"])
def scheme(request):
    return request.param


def test_defaults_and_properties():
    f = ScalableFilter(1000)
    assert (f.initial_capacity, f.error_rate, f.growth_ratio, f.fpr_ratio, f.hash) == (
        1000, 0.01, 2.0, 0.9, "xxh3-mix")
    assert f.num_sub_filters == 1 and f.capacity == 1000
    (st,) = f.stages()
    # the first stage gets error_rate * (1 - r): the sum over every stage stays under error_rate
    assert st["error_rate"] == pytest.approx(0.01 * 0.1)
    # xxh3-mix sizes each stage so that its exact rate at capacity is within its share
    m, k = lb.estimate(1000, st["error_rate"])
    assert m <= st["m"] <= m * 1.01
    assert lb.ideal_false_positive_rate(st["m"], st["k"], 1000) <= st["error_rate"]
    assert f.nbytes == (st["m"] + 7) // 8
    assert st["count"] == 0 and st["bits_set"] == 0 and st["capacity"] == 1000
    g = ScalableFilter(initial_capacity=10, error_rate=0.05, growth_ratio=3, fpr_ratio=0.5, hash="ling-base")
    assert (g.growth_ratio, g.fpr_ratio, g.hash) == (3.0, 0.5, "ling-base")


@pytest.mark.parametrize("growth", [1.0, 0.5, 0.0, -2.0, float("nan"), float("inf"), float("-inf"),
                                    64.001, 1e3, 8.6e9])
def test_invalid_growth_ratio(growth):
    with pytest.raises(ValueError):
        ScalableFilter(100, 0.01, growth)
    with pytest.raises(ValueError):
        ScalableFilter(100, growth_ratio=growth)


@pytest.mark.parametrize("ratio", [0.0, 1.0, -0.1, 1.5, float("nan"), float("inf"), float("-inf")])
def test_invalid_fpr_ratio(ratio):
    with pytest.raises(ValueError):
        ScalableFilter(100, 0.01, 2.0, ratio)
    with pytest.raises(ValueError):
        ScalableFilter(100, fpr_ratio=ratio)


def test_invalid_capacity_and_rate():
    with pytest.raises(lb.InvalidCapacityError):
        ScalableFilter(0)
    with pytest.raises(lb.InvalidCapacityError):
        ScalableFilter(-5)
    for p in (0.0, 1.0, float("nan"), float("inf"), -0.5):
        with pytest.raises(lb.InvalidFalsePositiveRateError):
            ScalableFilter(10, p)
    with pytest.raises(TypeError):
        ScalableFilter()
    with pytest.raises(TypeError):
        ScalableFilter(10, growth_ratio="2")
    with pytest.raises(ValueError):
        ScalableFilter(10, hash="crc32")


def test_growth_and_stage_parameters(scheme):
    f = ScalableFilter(50, 0.01, hash=scheme)
    ks = keys(5000)
    f.update(ks)
    assert all(f.test_many(ks))  # no false negatives across stages
    stages = f.stages()
    assert f.num_sub_filters == len(stages) >= 5
    for i, st in enumerate(stages):
        assert st["capacity"] == round(50 * 2.0**i)
        assert st["error_rate"] == pytest.approx(0.01 * 0.1 * 0.9**i)
        if scheme == "xxh3-mix":  # sized by the exact rate: never above the stage's share
            assert lb.ideal_false_positive_rate(st["m"], st["k"], st["capacity"]) <= st["error_rate"]
        else:  # the 0.1 and Go sizing, kept so that their files load as they were written
            assert (st["m"], st["k"]) == lb.estimate(st["capacity"], st["error_rate"])
        assert 0 < st["count"] <= st["capacity"]
    # every stage but the newest was filled to capacity before the next was added
    assert all(st["count"] == st["capacity"] for st in stages[:-1])
    assert f.approximate_count() == sum(st["count"] for st in stages)
    assert f.capacity == sum(st["capacity"] for st in stages)
    assert f.nbytes == sum((st["m"] + 7) // 8 for st in stages)
    assert sum(st["error_rate"] for st in stages) < 0.01


def test_a_stage_is_added_lazily():
    f = ScalableFilter(4, 0.01)
    added = [k for k in keys(100) if f.add(k)][:4]
    f2 = ScalableFilter(4, 0.01)
    for k in added:
        f2.add(k)
    assert f2.num_sub_filters == 1 and f2.stages()[0]["count"] == 4
    for k in keys(50, "more"):
        if f2.add(k):
            break
    assert f2.num_sub_filters == 2 and f2.stages()[1]["count"] == 1


def test_non_integer_growth_rounds_per_stage():
    f = ScalableFilter(100, 0.01, 1.5)
    f.update(keys(3000))
    for i, st in enumerate(f.stages()):
        assert st["capacity"] == round(100 * 1.5**i)


def test_re_adding_changes_nothing(scheme):
    f = ScalableFilter(10, 0.01, hash=scheme)
    ks = keys(500)
    first = f.add_many(ks)
    snapshot = (f.num_sub_filters, f.approximate_count(), f.to_bytes())
    assert sum(first) == f.approximate_count()
    assert f.add_many(ks) == [False] * 500
    assert [f.add(k) for k in ks] == [False] * 500
    f.update(ks)
    assert (f.num_sub_filters, f.approximate_count(), f.to_bytes()) == snapshot


def test_ling_base_example_from_the_spec():
    """Go: n0=10, 11 distinct keys, then the same 11 again: 2 stages and count 21.  Here the
    second pass changes nothing."""
    f = ScalableFilter(10, 0.01)
    ks = keys(11)
    f.update(ks)
    n, c = f.num_sub_filters, f.approximate_count()
    f.update(ks)
    assert (f.num_sub_filters, f.approximate_count()) == (n, c)
    assert c <= 11


def test_chain_keeps_its_bound():
    f = ScalableFilter(1000, 0.01)
    f.update(keys(30000))
    assert f.num_sub_filters >= 5
    assert f.current_error_rate() < 0.01
    probes = keys(50000, "absent")
    measured = sum(f.test_many(probes)) / len(probes)
    assert measured < 0.0125  # the bound plus > 4 sigma


def test_current_error_rate_formula():
    f = ScalableFilter(100, 0.01)
    assert f.current_error_rate() == 0.0
    f.update(keys(700))
    prod = 1.0
    for st in f.stages():
        prod *= 1 - (st["bits_set"] / st["m"]) ** st["k"]
    assert f.current_error_rate() == pytest.approx(1 - prod)


def test_add_and_batches_agree(scheme):
    a = ScalableFilter(20, hash=scheme)
    b = ScalableFilter(20, hash=scheme)
    ks = keys(3000) + keys(500)
    assert [a.add(k) for k in ks] == b.add_many(ks)
    assert a == b
    assert a.test_many(ks + keys(100, "x")) == [a.test(k) for k in ks + keys(100, "x")]
    assert b.test_many(k for k in ks) == [True] * len(ks)


def test_batch_with_a_bad_key_changes_nothing():
    f = ScalableFilter(10)
    f.update(keys(30))
    before = f.to_bytes()
    for bad in ("", b"", None, 5.0, ["nested"]):
        with pytest.raises((TypeError, ValueError)):
            f.add_many(keys(5000, "new") + [bad])
        with pytest.raises((TypeError, ValueError)):
            f.update([bad] + keys(5, "new"))
    assert f.to_bytes() == before
    for single in ("abc", b"abc", bytearray(b"abc")):
        with pytest.raises(TypeError):
            f.add_many(single)
        with pytest.raises(TypeError):
            f.test_many(single)


def test_growth_that_cannot_happen_is_a_clear_error_and_changes_nothing():
    # Stages 0..3 take rates 5e-19, 2.5e-19, 1.25e-19 and the floor 2**-63 (together just
    # under 1e-18); stage 4 would take the chain past its bound: the 16th key cannot go in.
    f = ScalableFilter(1, 1e-18, 2.0, 0.5)
    assert f.add("first") is True
    grew = None
    for k in keys(200):
        before, stages = f.to_bytes(), f.num_sub_filters
        try:
            f.add(k)
        except ValueError as e:
            grew = e
            break
    assert isinstance(grew, lb.InvalidCapacityError)
    assert "cannot grow further" in str(grew)
    assert f.num_sub_filters == stages == 4 and "first" in f
    assert f.to_bytes() == before
    with pytest.raises(lb.InvalidCapacityError):
        f.add_many(keys(200, "batch"))
    assert "first" in f and f.num_sub_filters == 4
    assert f.to_bytes() == before


def test_reset():
    f = ScalableFilter(10)
    f.update(keys(200))
    assert f.num_sub_filters > 1
    assert f.reset() is None
    assert f.num_sub_filters == 1 and f.approximate_count() == 0 and f.capacity == 10
    assert not any(f.test_many(keys(200)))
    assert f == ScalableFilter(10)
    f.update(keys(200))
    assert all(f.test_many(keys(200)))


def test_copy_and_equality(scheme):
    f = ScalableFilter(10, hash=scheme)
    f.update(keys(100))
    for c in (f.copy(), copy.copy(f), copy.deepcopy(f)):
        assert c == f and c is not f
        assert c.stages() == f.stages()
        c.add("extra")
        assert c != f and "extra" not in f
    assert ScalableFilter(10) != ScalableFilter(11)
    assert ScalableFilter(10) != ScalableFilter(10, hash="ling-base")
    assert ScalableFilter(10) != ScalableFilter(10, 0.02)
    assert ScalableFilter(10) != lb.MemoryFilter(10)
    with pytest.raises(TypeError):
        hash(f)


def test_copy_and_compare_work_past_64_stages():
    """A chain can grow past the 64 stages the file format holds (growth near 1 keeps every
    stage at capacity 1).  copy() and == must still work: they should not go through to_bytes()."""
    f = ScalableFilter(1, 0.01, 1.0001, 0.9999)
    f.update(keys(100))
    assert f.num_sub_filters > 64
    c = f.copy()
    assert c.num_sub_filters == f.num_sub_filters
    assert f == c


def test_a_chain_past_64_stages_saves_and_loads():
    f = ScalableFilter(1, 0.01, 1.0001, 0.9999)
    f.update(keys(100))
    assert f.num_sub_filters > 64
    again = ScalableFilter.from_bytes(f.to_bytes())
    assert again == f and again.num_sub_filters == f.num_sub_filters
    assert pickle.loads(pickle.dumps(f)) == f
    assert all(again.test_many(keys(100)))


def test_close():
    f = ScalableFilter(10)
    f.add("a")
    ops = [
        lambda: f.add("a"), lambda: f.test("a"), lambda: "a" in f, lambda: f.add_many(["a"]),
        lambda: f.update(["a"]), lambda: f.test_many(["a"]), f.reset, f.approximate_count,
        f.current_error_rate, f.stages, f.copy, f.to_bytes, lambda: pickle.dumps(f),
        lambda: f == ScalableFilter(10), f.__enter__, lambda: f.save("/nonexistent/x"),
    ]
    assert f.close() is None
    f.close()
    assert f.closed
    for op in ops:
        with pytest.raises(lb.ClosedError):
            op()
    assert "closed" in repr(f)
    with ScalableFilter(10) as g:
        g.add("x")
    assert g.closed


class Sub(ScalableFilter):
    def seen_all(self, ks):
        return all(self.test_many(ks))


def test_subclass():
    f = Sub(10, 0.01)
    f.update(keys(100))
    assert f.seen_all(keys(100))
    assert type(f.copy()) is Sub and type(pickle.loads(pickle.dumps(f))) is Sub
    assert math.isfinite(f.current_error_rate())


def test_a_tight_fpr_ratio_floors_stage_rates_and_keeps_the_bound():
    """With fpr_ratio 0.05 the 15th stage's rate would need more than 64 hash functions:
    later stages are built for 2**-63 instead, and the chain keeps its bound."""
    f = ScalableFilter(1, 0.01, 1.03125, 0.05)
    ks = keys(60)
    f.update(ks)
    stages = f.stages()
    assert len(stages) > 20
    assert all(s["k"] <= 64 for s in stages)
    assert min(s["error_rate"] for s in stages) == 2.0 ** -63
    # The bound holds up to the rounding of the sum itself: 3.12's sum() compensates
    # (0.010000000000000002 here), where the C chain and earlier Pythons add plainly.
    assert math.fsum(s["error_rate"] for s in stages) <= 0.01 * (1 + 1e-12)
    assert all(f.test_many(ks))


def test_a_bound_too_small_for_any_stage_is_an_error():
    with pytest.raises(ValueError):
        ScalableFilter(1, 1e-300)
