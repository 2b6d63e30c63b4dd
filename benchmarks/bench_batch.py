"""Batches from a list, and single keys, against abloom, up to filters of 1e8 keys.

    python benchmarks/bench_batch.py                      # n = 1e6 and 1e7
    python benchmarks/bench_batch.py --sizes 1e8 --rounds 1
    python benchmarks/bench_batch.py --quick              # n = 1e5

For each n (filters sized for n keys at 1%): every contestant's filter is filled with the
same `user:N` keys, made in slices of at most --slice keys (so a run at 1e8 holds one
slice of key objects, not 1e8 of them), each slice given to every contestant in turn
(interleaved: a machine busy for a moment slows all of them alike):

  batch add    `update(slice)`: BlockedFilter and MemoryFilter against abloom's `update`
  add          `for k in sample: f.add(k)`: the last --sample keys, one call each
  test+        `for k in sample: k in f` over those keys (present)
  test-        the same over --sample keys never added

Times are the CPU time of the thread (time.thread_time: a process that waits for a core
on a shared machine is not charged for the wait), ns per key; each cell is the best of
--rounds (a round fills fresh filters).  Ratios: abloom's time / ling_bloom's (above 1:
ling_bloom is faster).  Before anything is timed every key's hash() is computed, as it is
for any str used before: abloom, which uses hash(), finds it cached.

The table goes to the terminal, and with --out to that file (Markdown).
"""
from __future__ import annotations

import argparse
import gc
import os
import platform
import sys
import time
from typing import Callable, Dict, List

import ling_bloom as lb


def make_keys(start: int, count: int) -> List[str]:
    keys = [f"user:{i}" for i in range(start, start + count)]
    for k in keys:
        hash(k)
    return keys


def contestants(n: int, p: float) -> Dict[str, Callable[[], object]]:
    import abloom

    return {
        "BlockedFilter": lambda: lb.BlockedFilter(n, p),
        "MemoryFilter": lambda: lb.MemoryFilter(n, p),
        "abloom": lambda: abloom.BloomFilter(n, p),
    }


def one_round(n: int, p: float, slice_len: int, sample: int) -> Dict[str, Dict[str, float]]:
    makers = contestants(n, p)
    filters = {name: make() for name, make in makers.items()}
    spent = {name: 0.0 for name in filters}
    bulk = n - sample
    base = 100_000
    done = 0
    while done < bulk:
        count = min(slice_len, bulk - done)
        keys = make_keys(base + done, count)
        for name, f in filters.items():
            t0 = time.thread_time()
            f.update(keys)
            spent[name] += time.thread_time() - t0
        done += count
        del keys
    out = {name: {"batch add": spent[name] / max(1, bulk) * 1e9} for name in filters}
    present = make_keys(base + bulk, sample)
    absent = make_keys(base + n + 1_000_000, sample)
    for name, f in filters.items():
        add = f.add
        t0 = time.thread_time()
        for k in present:
            add(k)
        out[name]["add"] = (time.thread_time() - t0) / sample * 1e9
    for name, f in filters.items():
        t0 = time.thread_time()
        hits = 0
        for k in present:
            if k in f:
                hits += 1
        out[name]["test+"] = (time.thread_time() - t0) / sample * 1e9
        assert hits == sample, (name, hits)
        t0 = time.thread_time()
        for k in absent:
            if k in f:
                pass
        out[name]["test-"] = (time.thread_time() - t0) / sample * 1e9
    for f in filters.values():
        if hasattr(f, "close"):
            f.close()
    return out


COLUMNS = ["batch add", "add", "test+", "test-"]


def table(n: int, p: float, best: Dict[str, Dict[str, float]]) -> List[str]:
    peer = best["abloom"]
    lines = [f"### n = {n:.0e}, p = {p:g}", "",
             "| | " + " | ".join(COLUMNS) + " |", "|---|" + "---:|" * len(COLUMNS)]
    for name, cells in best.items():
        row = []
        for c in COLUMNS:
            v = cells[c]
            row.append(f"{v:.1f}" if name == "abloom" else f"{v:.1f} ({peer[c] / v:.2f})")
        lines.append(f"| {name} | " + " | ".join(row) + " |")
    return lines + ["", "ns per key; in brackets abloom's time / this row's (above 1: faster "
                    "than abloom)", ""]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="1e6,1e7", help="comma-separated n")
    ap.add_argument("--p", type=float, default=0.01)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--slice", type=int, default=5_000_000, help="keys per update call")
    ap.add_argument("--sample", type=int, default=500_000, help="keys of the per-key loops")
    ap.add_argument("--quick", action="store_true", help="n = 1e5, 2 rounds")
    ap.add_argument("--out", help="also write the tables to this Markdown file")
    args = ap.parse_args()
    sizes = [int(float(x)) for x in args.sizes.split(",")]
    rounds = args.rounds
    if args.quick:
        sizes, rounds = [100_000], 2
    try:
        import abloom  # noqa: F401
    except ImportError:
        print("abloom: not installed (pip install abloom): nothing to compare against")
        return
    import importlib.metadata as md

    head = [f"# Batches from a list and single keys against abloom", "",
            f"CPU time per key, best of {rounds} round(s); {platform.machine()}, Python "
            f"{platform.python_version()}, ling_bloom from {os.path.dirname(lb.__file__)}, "
            f"abloom {md.version('abloom')}, {os.cpu_count()} CPUs, load average at start "
            f"{', '.join(f'{x:.2f}' for x in os.getloadavg())}; "
            f"command: {' '.join(sys.argv)}", ""]
    print("\n".join(head), flush=True)
    md_lines = list(head)
    gc.disable()
    for n in sizes:
        sample = min(args.sample, n // 4)
        best: Dict[str, Dict[str, float]] = {}
        for _ in range(rounds):
            r = one_round(n, args.p, args.slice, sample)
            for name, cells in r.items():
                b = best.setdefault(name, dict(cells))
                for c, v in cells.items():
                    b[c] = min(b[c], v)
            gc.collect()
        lines = table(n, args.p, best)
        print("\n".join(lines), flush=True)
        md_lines += lines
    if args.out:
        with open(args.out, "w") as f:
            f.write("\n".join(md_lines))


if __name__ == "__main__":
    main()
