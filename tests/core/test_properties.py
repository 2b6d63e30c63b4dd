"""Property-based tests (hypothesis): no false negatives, ever; counting add/remove against a
multiset model; scalable idempotence; persistence round trips."""
from __future__ import annotations

from collections import Counter

import pytest

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

import ling_bloom as lb  # noqa: E402

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])

text_keys = st.text(min_size=1, max_size=40).filter(lambda s: not any(0xD800 <= ord(c) <= 0xDFFF for c in s))
binary_keys = st.binary(min_size=1, max_size=40)
any_key = st.one_of(text_keys, binary_keys)
key_lists = st.lists(any_key, max_size=300)
schemes = st.sampled_from(["xxh3-mix", "xxh3", "ling-base"])


def as_bytes(k) -> bytes:
    return k.encode("utf-8") if isinstance(k, str) else k


@SETTINGS
@given(ks=key_lists, scheme=schemes, m=st.integers(1, 5000), k=st.integers(1, 12))
def test_memory_by_geometry_has_no_false_negatives(ks, scheme, m, k):
    f = lb.MemoryFilter(m=m, k=k, hash=scheme)
    results = f.add_many(ks)
    assert len(results) == len(ks)
    assert all(f.test_many(ks))
    assert all(k_ in f for k_ in ks)
    # a key whose bytes were seen before is never "new"
    seen = set()
    for key, new in zip(ks, results):
        if as_bytes(key) in seen:
            assert new is False
        seen.add(as_bytes(key))
    assert f.bits_set <= m


@SETTINGS
@given(ks=key_lists, scheme=schemes, cap=st.integers(1, 2000), p=st.floats(1e-6, 0.5))
def test_every_type_by_capacity_has_no_false_negatives(ks, scheme, cap, p):
    filters = [
        lb.MemoryFilter(cap, p, hash=scheme),
        lb.CountingFilter(cap, p, hash=scheme),
        lb.ScalableFilter(cap, p, hash=scheme),
    ]
    for f in filters:
        half = len(ks) // 2
        f.update(ks[:half])
        for key in ks[half:]:
            f.add(key)
        assert all(f.test_many(ks)), type(f)
        assert all(f.test(key) for key in ks), type(f)


@SETTINGS
@given(ks=key_lists, scheme=schemes, n0=st.integers(1, 50),
       growth=st.floats(1.01, 4.0), ratio=st.floats(0.05, 0.95))
def test_scalable_no_false_negatives_and_idempotent(ks, scheme, n0, growth, ratio):
    f = lb.ScalableFilter(n0, 0.05, growth, ratio, hash=scheme)
    f.update(ks)
    assert all(f.test_many(ks))
    if f.num_sub_filters > 64:
        return  # cannot be saved; see test_scalable_filter
    snapshot = f.to_bytes()
    stages, count = f.num_sub_filters, f.approximate_count()
    assert f.add_many(ks) == [False] * len(ks)
    assert (f.num_sub_filters, f.approximate_count(), f.to_bytes()) == (stages, count, snapshot)
    assert lb.ScalableFilter.from_bytes(snapshot) == f


@SETTINGS
@given(
    ops=st.lists(
        st.tuples(st.sampled_from(["add", "remove", "discard"]), st.integers(0, 40)),
        max_size=400,
    ),
    scheme=schemes,
    m=st.integers(1, 400),
    k=st.integers(1, 6),
)
def test_counting_matches_a_multiset_model(ops, scheme, m, k):
    """Keys still present in the model (added more times than removed) always test present,
    however small and overloaded the filter (m=1 included), with saturation."""
    f = lb.CountingFilter(m=m, k=k, hash=scheme)
    model: Counter[str] = Counter()
    for op, i in ops:
        key = f"key:{i}"
        if op == "add":
            f.add(key)
            model[key] += 1
        elif model[key] > 0:  # remove only keys that were added (the documented contract)
            if op == "remove":
                f.remove(key)
            else:
                assert f.discard(key) is True
            model[key] -= 1
        present = [x for x, c in model.items() if c > 0]
        assert all(f.test_many(present)) if present else True
    for key, c in model.items():
        if c > 0:
            assert key in f
            assert f.count(key) >= min(c, 1)
    assert lb.CountingFilter.from_bytes(f.to_bytes()) == f


@SETTINGS
@given(ks=key_lists, scheme=schemes)
def test_counting_count_is_at_least_the_multiplicity(ks, scheme):
    f = lb.CountingFilter(m=4096, k=3, hash=scheme)
    f.update(ks)
    for key, c in Counter(as_bytes(x) for x in ks).items():
        assert f.count(key) >= min(c, 15)


@SETTINGS
@given(a=key_lists, b=key_lists, scheme=schemes)
def test_union_and_intersection_have_no_false_negatives(a, b, scheme):
    fa = lb.MemoryFilter(m=3000, k=4, hash=scheme)
    fb = lb.MemoryFilter(m=3000, k=4, hash=scheme)
    fa.update(a)
    fb.update(b)
    u = fa | fb
    assert all(u.test_many(a + b))
    i = fa & fb
    common = set(map(as_bytes, a)) & set(map(as_bytes, b))
    assert all(i.test_many(list(common)))


@SETTINGS
@given(ks=key_lists, scheme=schemes, m=st.integers(1, 3000), k=st.integers(1, 8))
def test_bitmap_and_bytes_round_trip(ks, scheme, m, k):
    f = lb.MemoryFilter(m=m, k=k, hash=scheme)
    f.update(ks)
    bm = f.to_bitmap()
    expected = set()
    for key in ks:
        expected.update(lb.indices(key, m, k, hash=scheme))
    got = {i for i in range(m) if bm[i // 8] & (0x80 >> (i % 8))}
    assert got == expected
    assert lb.MemoryFilter.from_bitmap(bm, m, k, hash=scheme) == f
    assert lb.from_bytes(f.to_bytes()) == f


@SETTINGS
@given(key=any_key, m=st.integers(1, 2**48), k=st.integers(1, 64), scheme=schemes)
def test_indices_are_in_range(key, m, k, scheme):
    idx = lb.indices(key, m, k, hash=scheme)
    assert len(idx) == k and all(0 <= i < m for i in idx)
    assert lb.indices(as_bytes(key), m, k, hash=scheme) == idx
