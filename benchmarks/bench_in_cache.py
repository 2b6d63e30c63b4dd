"""Per-key cost with the filter in cache: what a call costs when memory is not the limit.

    python benchmarks/bench_in_cache.py

A filter of 1,000 keys (about 1.2 KB; a BlockedFilter too) is tested 1,000,000 times from a
Python loop; the peers that are installed (abloom, rbloom) and a Python set do the same.  ns per call, best
of 5.  For reference, the same loops calling C that ignores the key: `key in ()` (an empty
tuple's contains) for `in`, `e.count(key)` on an empty tuple for a method call like
`f.add(key)`, and the loop alone.
"""
from __future__ import annotations

import importlib
import time
from typing import Callable, List

import ling_bloom as lb


def best(fn: Callable[[], object], calls: int) -> float:
    times = []
    for _ in range(5):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times) / calls * 1e9


def main() -> None:
    base = [f"user:{i}" for i in range(1000)]
    keys: List[str] = base * 1000
    rows = []
    f = lb.MemoryFilter(1000, 0.01)
    f.update(base)
    rows.append(("ling_bloom: key in f", best(lambda: [k in f for k in keys], len(keys))))
    rows.append(("ling_bloom: f.add(key)", best(lambda: [f.add(k) for k in keys], len(keys))))
    bf = lb.BlockedFilter(1000, 0.01)
    bf.update(base)
    rows.append(("BlockedFilter: key in f", best(lambda: [k in bf for k in keys], len(keys))))
    rows.append(("BlockedFilter: f.add(key)", best(lambda: [bf.add(k) for k in keys], len(keys))))
    for module, make in (("abloom", lambda m: m.BloomFilter(1000, 0.01)),
                         ("rbloom", lambda m: m.Bloom(1000, 0.01))):
        try:
            peer = make(importlib.import_module(module))
        except ImportError:
            print(f"{module}: not installed (pip install '.[bench]'), skipped")
            continue
        peer.update(base)
        rows.append((f"{module}: key in f", best(lambda: [k in peer for k in keys], len(keys))))
    s = set(base)
    rows.append(("set: key in s", best(lambda: [k in s for k in keys], len(keys))))
    e = ()
    rows.append(("bare: key in ()", best(lambda: [k in e for k in keys], len(keys))))
    rows.append(("bare: e.count(key)", best(lambda: [e.count(k) for k in keys], len(keys))))
    rows.append(("the loop alone", best(lambda: [k for k in keys], len(keys))))
    for name, ns in rows:
        print(f"{name:26s} {ns:6.1f} ns")


if __name__ == "__main__":
    main()
