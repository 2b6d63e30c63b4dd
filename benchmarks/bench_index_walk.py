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

ns per key, the fastest of --rounds (on a machine shared with other work the minimum is the
figure least disturbed by it; --stat median for the median); "ratio" = xxh3-mix / xxh3
(above 1: the mixing costs that much).  Keys are "user:<n>" str, like bench_memory.py's short keys.

  python benchmarks/bench_index_walk.py                      # 1e6 @ 0.01 and 1e7 @ 0.001
  python benchmarks/bench_index_walk.py --sizes 1e5:0.01 --rounds 3
  python benchmarks/bench_index_walk.py --instructions       # valgrind's count, per key
  python benchmarks/bench_index_walk.py --floor              # the C core alone, timed

--instructions counts the machine instructions of the C core's batch add and batch test
(lb_bits_add_batch, lb_bits_test_batch in benchmarks/floor.c, the core with no Python) under
valgrind --tool=callgrind: the same count on every run, whatever else the machine is doing,
so it says what the mixing adds when timings are too noisy to.  It does not see memory
latency, which dominates once the filter is out of cache: there the time ratio is smaller
than the instruction ratio.

--floor times the same two functions through benchmarks/floor.c (the core with no Python, so
no key conversion or allocation in the figure), the schemes alternating for --rounds runs,
the fastest run of each reported.
"""
from __future__ import annotations

import argparse
import gc
import math
import os
import platform
import statistics
import sys
import time

import ling_bloom as lb

SCHEMES = ("xxh3", "xxh3-mix")


def sizes(a):
    """(n, p, m, k, keys, present sample, absent sample) for each of --sizes."""
    for spec in a.sizes.split(","):
        n_s, p_s = spec.split(":")
        n, p = int(float(n_s)), float(p_s)
        m, k = lb.estimate(n, p)
        keys = [f"user:{i}" for i in range(n)]
        sample = min(a.sample, n)
        present = keys[:: max(1, n // sample)][:sample]
        absent = [f"user:{i}" for i in range(n, n + sample)]
        yield n, p, m, k, keys, present, absent


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


def instruction_counts(n, p):
    """Instructions per key of lb_bits_add_batch and lb_bits_test_batch, per scheme."""
    import json
    import shutil
    import subprocess
    import tempfile

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import bench_memory

    if not shutil.which("valgrind"):
        raise SystemExit("--instructions needs valgrind (apt-get install valgrind)")
    exe, why = bench_memory.build_floor(os.path.join(os.path.dirname(__file__), ".build"))
    if exe is None:
        raise SystemExit(f"cannot build benchmarks/floor.c: {why}")
    m, k = lb.estimate(n, p)
    keys = [f"user:{i}" for i in range(n)]
    out = {}
    with tempfile.TemporaryDirectory(prefix="lb-walk-") as tmp:
        files = [os.path.join(tmp, f) for f in ("present", "sample", "absent")]
        for path, ks in zip(files, (keys, keys[:1000], [f"user:{i}" for i in range(n, n + 1000)])):
            bench_memory.write_key_file(path, ks)
        for scheme in SCHEMES:
            for fn in ("lb_bits_add_batch", "lb_bits_test_batch"):
                cg = os.path.join(tmp, "cg.out")
                subprocess.run(["valgrind", "--tool=callgrind", f"--toggle-collect={fn}",
                                f"--callgrind-out-file={cg}", exe, *files, str(m), str(k),
                                scheme, "1"], check=True, capture_output=True)
                total = next(int(line.split()[1]) for line in open(cg)
                             if line.startswith(("summary:", "totals:")))
                calls_keys = n if fn == "lb_bits_add_batch" else None
                out[(scheme, fn)] = total, calls_keys
    return m, k, out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", default="1e6:0.01,1e7:0.001",
                    help="comma-separated n:p (default 1e6:0.01,1e7:0.001)")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--sample", type=int, default=200_000, help="keys per test/per-key row")
    ap.add_argument("--stat", choices=("min", "median"), default="min")
    ap.add_argument("--floor", action="store_true", help="time the C core alone (floor.c)")
    ap.add_argument("--instructions", action="store_true",
                    help="count instructions with valgrind instead of timing")
    a = ap.parse_args(argv)
    if a.instructions:
        return instructions_table(a)
    if a.floor:
        return floor_table(a)
    print(f"# index walk: xxh3-mix vs xxh3 ({platform.processor() or platform.machine()}, "
          f"Python {platform.python_version()}, {a.rounds} rounds, {a.stat} ns/key, "
          f"load average {' '.join(f'{x:.1f}' for x in os.getloadavg())})\n")
    ops = ("update", "test_many+", "test_many-", "add", "in+", "in-")
    print("| n, p | m (k) | " + " | ".join(f"{o} xxh3 / mix / ratio" for o in ops) + " |")
    print("|---|---|" + "---|" * len(ops))
    for n, p, m, k, keys, present, absent in sizes(a):
        results = {s: {o: [] for o in ops} for s in SCHEMES}
        gc.disable()
        try:
            for _ in range(a.rounds):
                one_round(m, k, keys, present, absent, results)
        finally:
            gc.enable()
        cells = []
        for o in ops:
            pick = min if a.stat == "min" else statistics.median
            old = pick(results[SCHEMES[0]][o])
            new = pick(results[SCHEMES[1]][o])
            cells.append(f"{old:.1f} / {new:.1f} / {new / old:.3f}")
        print(f"| {n:.0e}, {p:g} | {m:,} ({k}) | " + " | ".join(cells) + " |", flush=True)
    return 0


def floor_table(a):
    import json
    import subprocess
    import tempfile

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import bench_memory

    exe, why = bench_memory.build_floor(os.path.join(os.path.dirname(__file__), ".build"))
    if exe is None:
        raise SystemExit(f"cannot build benchmarks/floor.c: {why}")
    print(f"# C core alone (benchmarks/floor.c), fastest of {a.rounds} runs per scheme, ns/key, "
          f"load average {' '.join(f'{x:.1f}' for x in os.getloadavg())}\n")
    print("| n, p | m (k) | batch add xxh3 / mix / ratio | batch test+ xxh3 / mix / ratio | "
          "batch test- xxh3 / mix / ratio |")
    print("|---|---|---|---|---|")
    fields = ("batch_add", "batch_test_present", "batch_test_absent")
    for n, p, m, k, keys, present, absent in sizes(a):
        best = {s: {f: math.inf for f in fields} for s in SCHEMES}
        with tempfile.TemporaryDirectory(prefix="lb-walk-") as tmp:
            files = [os.path.join(tmp, f) for f in ("present", "sample", "absent")]
            for path, ks in zip(files, (keys, present, absent)):
                bench_memory.write_key_file(path, ks)
            for _ in range(a.rounds):
                for scheme in SCHEMES:
                    r = json.loads(subprocess.run([exe, *files, str(m), str(k), scheme, "3"],
                                                  capture_output=True, text=True,
                                                  check=True).stdout)
                    for f in fields:
                        best[scheme][f] = min(best[scheme][f], r[f])
        cells = [f"{best[SCHEMES[0]][f]:.1f} / {best[SCHEMES[1]][f]:.1f} / "
                 f"{best[SCHEMES[1]][f] / best[SCHEMES[0]][f]:.3f}" for f in fields]
        print(f"| {n:.0e}, {p:g} | {m:,} ({k}) | " + " | ".join(cells) + " |", flush=True)
    return 0


def instructions_table(a):
    print("| n, p | m (k) | scheme | batch add: instructions / key | batch test: instructions / key |")
    print("|---|---|---|---|---|")
    for spec in a.sizes.split(","):
        n_s, p_s = spec.split(":")
        n, p = int(float(n_s)), float(p_s)
        n = min(n, 1_000_000)  # counts per key do not depend on n; valgrind is slow
        m, k, out = instruction_counts(n, p)
        base = {}
        for scheme in SCHEMES:
            cells = []
            for fn in ("lb_bits_add_batch", "lb_bits_test_batch"):
                total, _ = out[(scheme, fn)]
                # floor.c: the add batch runs once over the n keys (REPEAT 1); the test batch
                # once over the 1,000-key sample and once over the 1,000 absent keys
                per = total / (n if fn == "lb_bits_add_batch" else 2000)
                base.setdefault(fn, per)
                cells.append(f"{per:.1f} ({per / base[fn]:.3f})")
            print(f"| {n:.0e}, {p:g} | {m:,} ({k}) | {scheme} | {cells[0]} | {cells[1]} |",
                  flush=True)
    print("\nIn brackets: against the first scheme.  valgrind --tool=callgrind, "
          "--toggle-collect on each function.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
