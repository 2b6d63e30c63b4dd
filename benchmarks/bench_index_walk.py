#!/usr/bin/env python3
"""What the index walk costs: the default "xxh3-mix" against the 0.1 walk "xxh3", in one run.

Both schemes hash a key the same way (XXH3-128); they differ only in how the k indices come
from (h1, h2): "xxh3" maps h1 + i*h2 to [0, m) with a multiply-shift, "xxh3-mix" passes each
h1 + i*h2 through a 64-bit finalizer first (src: csrc/core/hash.h).  Each round builds one
MemoryFilter per scheme with the same m and k, on the same keys, and times, alternating the
two schemes (A B A B ...) so that a drifting machine affects both alike:

  update       filter.update(keys)                 (batch add, n keys into a fresh filter)
  test_many+   filter.test_many(present sample)
  test_many-   filter.test_many(absent sample)
  add          for key in sample: filter.add(key)   (per key, a Python loop)
  in+ / in-    for key in sample: key in filter

ns per key, median of --rounds; "ratio" = xxh3-mix / xxh3 (above 1: the mixing costs that
much).  Keys are "user:<n>" str, like bench_memory.py's short keys.

  python benchmarks/bench_index_walk.py                      # 1e6 @ 0.01 and 1e7 @ 0.001
  python benchmarks/bench_index_walk.py --sizes 1e5:0.01 --rounds 3
"""
from __future__ import annotations

import argparse
import gc
import platform
import statistics
import sys
import time

import ling_bloom as lb

SCHEMES = ("xxh3", "xxh3-mix")


def per_key_loop(f, keys, op):
    t = time.perf_counter_ns()
    if op == "add":
        add = f.add
        for k in keys:
            add(k)
    else:
        for k in keys:
            if k in f:
                pass
    return time.perf_counter_ns() - t


def one_round(m, k, keys, present, absent, results):
    for scheme in SCHEMES:
        r = results[scheme]
        f = lb.MemoryFilter(m=m, k=k, hash=scheme)
        t = time.perf_counter_ns()
        f.update(keys)
        r["update"].append((time.perf_counter_ns() - t) / len(keys))
        t = time.perf_counter_ns()
        f.test_many(present)
        r["test_many+"].append((time.perf_counter_ns() - t) / len(present))
        t = time.perf_counter_ns()
        f.test_many(absent)
        r["test_many-"].append((time.perf_counter_ns() - t) / len(absent))
        r["in+"].append(per_key_loop(f, present, "in") / len(present))
        r["in-"].append(per_key_loop(f, absent, "in") / len(absent))
        g = lb.MemoryFilter(m=m, k=k, hash=scheme)
        g.update(keys[len(present):])
        r["add"].append(per_key_loop(g, present, "add") / len(present))
        del f, g


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", default="1e6:0.01,1e7:0.001",
                    help="comma-separated n:p (default 1e6:0.01,1e7:0.001)")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--sample", type=int, default=200_000, help="keys per test/per-key row")
    a = ap.parse_args(argv)
    print(f"# index walk: xxh3-mix vs xxh3 ({platform.processor() or platform.machine()}, "
          f"Python {platform.python_version()}, {a.rounds} rounds, median ns/key)\n")
    ops = ("update", "test_many+", "test_many-", "add", "in+", "in-")
    print("| n, p | m (k) | " + " | ".join(f"{o} xxh3 / mix / ratio" for o in ops) + " |")
    print("|---|---|" + "---|" * len(ops))
    for spec in a.sizes.split(","):
        n_s, p_s = spec.split(":")
        n, p = int(float(n_s)), float(p_s)
        m, k = lb.estimate(n, p)
        keys = [f"user:{i}" for i in range(n)]
        sample = min(a.sample, n)
        present = keys[:: max(1, n // sample)][:sample]
        absent = [f"user:{i}" for i in range(n, n + sample)]
        results = {s: {o: [] for o in ops} for s in SCHEMES}
        gc.disable()
        try:
            for _ in range(a.rounds):
                one_round(m, k, keys, present, absent, results)
        finally:
            gc.enable()
        cells = []
        for o in ops:
            old = statistics.median(results[SCHEMES[0]][o])
            new = statistics.median(results[SCHEMES[1]][o])
            cells.append(f"{old:.1f} / {new:.1f} / {new / old:.3f}")
        print(f"| {n:.0e}, {p:g} | {m:,} ({k}) | " + " | ".join(cells) + " |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
