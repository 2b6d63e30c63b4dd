"""A small program using the public API; tests/docs/test_typing.py runs `mypy --strict` on it.

It also runs as a plain script (python tests/support/typing_example.py), so every line is
real code.
"""
from __future__ import annotations

import array
import os
import tempfile
from typing import Iterable, List, Tuple

import ling_bloom as lb
from ling_bloom import (
    Batcher,
    CountingFilter,
    Filter,
    MemoryFilter,
    Params,
    Remover,
    ScalableFilter,
)


def fill(f: Filter, keys: Iterable[str]) -> int:
    """Works with any filter through the Filter protocol."""
    return sum(1 for k in keys if f.add(k))


def fill_batched(b: Batcher, keys: List[str]) -> List[bool]:
    b.update(keys)
    return b.test_many(keys)


def forget(r: Remover, key: str) -> bool:
    return r.discard(key)


def main() -> None:
    params: Params = lb.estimate(1000, 0.01)
    m: int = params.m
    nbytes: int = params.nbytes

    mf = MemoryFilter(1000, 0.01)
    geo = MemoryFilter(m=m, k=params.k, hash="ling-base")
    as_filter: Filter = mf
    as_batcher: Batcher = mf
    as_remover: Remover = CountingFilter(100)
    assert fill(as_filter, ["a", "b"]) == 2
    assert fill_batched(as_batcher, ["c", "d"]) == [True, True]
    new: bool = mf.add(b"raw") and mf.add(bytearray(b"ba")) and mf.add(memoryview(b"mv"))
    mf.add(array.array("B", b"arr"))
    by_id: bool = mf.add(42) or 42 in mf or mf.test(-7)  # an int is its decimal text
    ids: List[bool] = mf.test_many([1, 2, "3"])
    present: bool = "a" in mf
    results: List[bool] = mf.add_many(k for k in ["e", "f"])
    union: MemoryFilter = mf | MemoryFilter(1000, 0.01)
    inter: MemoryFilter = mf.intersection(MemoryFilter(1000, 0.01))
    mf |= MemoryFilter(1000, 0.01)
    bitmap: bytes = mf.to_bitmap()
    again = MemoryFilter.from_bitmap(bitmap, mf.m, mf.k, hash=mf.hash)
    same: bool = again == mf
    rate: float = mf.current_error_rate() + mf.fill_ratio()
    approx: int = mf.approximate_count() + mf.bits_set + mf.nbytes
    cap = mf.capacity
    if cap is not None:
        approx += cap

    cf = CountingFilter(m=64, k=3)
    cf.add("x")
    count: int = cf.count("x")
    removed: bool = cf.discard("x")
    assert forget(as_remover, "nothing") is False
    try:
        cf.remove("x")
    except KeyError:
        pass

    sf = ScalableFilter(100, 0.01, growth_ratio=2.0, fpr_ratio=0.9, hash="xxh3")
    sf.update(["s1", "s2"])
    stages: int = sf.num_sub_filters
    info = sf.stages()[0]["m"]
    copy_of: ScalableFilter = sf.copy()

    data: bytes = sf.to_bytes()
    restored: ScalableFilter = ScalableFilter.from_bytes(data)
    any_filter = lb.from_bytes(mf.to_bytes())
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "f.lbf")
        mf.save(path)
        loaded: MemoryFilter = MemoryFilter.load(path)
        generic = lb.load(path)

    idx: List[int] = lb.indices("key", 1000, 7, hash="ling-base")
    pair: Tuple[int, int] = lb.hash_pair(b"key")
    theory: float = lb.false_positive_rate(m, params.k, 1000)

    with MemoryFilter(10) as scoped:
        scoped.add("z")
    try:
        scoped.test("z")
    except lb.ClosedError:
        pass
    try:
        mf.add("")
    except lb.EmptyKeyError as e:
        err: ValueError = e
    try:
        mf.union(geo)
    except lb.GeometryMismatchError:
        pass

    print(nbytes, new, present, by_id, ids, results, union, inter, same, rate, approx, count, removed,
          stages, info, copy_of, restored, any_filter, loaded, generic, idx, pair, theory)


if __name__ == "__main__":
    main()
