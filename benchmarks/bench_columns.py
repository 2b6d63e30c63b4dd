"""Batches from columns: ling_bloom reading a numpy array or an Arrow column in place,
against abloom given the same keys as a list (its conversion timed, as a user pays it).

    python benchmarks/bench_columns.py            # n = 1e6 and 1e7
    python benchmarks/bench_columns.py --quick    # n = 1e5

Each case times one batch of n keys: ling_bloom's `update(column)` / `test_many(column)`
(BlockedFilter and MemoryFilter, sized for n at 1%) against abloom's
`update(column.to_pylist())` and `[k in f for k in column.to_pylist()]` (abloom has no
batch test), abloom's filter of the same n and rate; the reference row is ling_bloom given
the list itself, the conversion not counted.  Every contestant of a case runs once per
round, in turn (interleaved, so a machine busy for a moment slows all of them alike), and
each cell is the best of the rounds.  Ratios: abloom's time / ling_bloom's (above 1:
ling_bloom is faster).  Keys: `user:N` strings (an Arrow string column, a polars Series)
and int64 ids spread over 2**62 (a numpy array).

The table goes to the terminal and to benchmarks/results/columns.md.
"""
from __future__ import annotations

import argparse
import os
import platform
import time
from pathlib import Path
from typing import Callable, Dict, List, Tuple

import numpy as np
import pyarrow as pa

import ling_bloom as lb

RESULTS = Path(__file__).resolve().parent / "results"


def timed(fn: Callable[[], object]) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def cases(n: int, p: float):
    """(name, column, what abloom is given, ours, theirs): ours(f, column), theirs(peer, column);
    the filters are made fresh for each timing (not timed)."""
    rng = np.random.default_rng(7)
    strings = pa.array([f"user:{i}" for i in range(n)])
    ids = rng.integers(0, 1 << 62, size=n, dtype=np.int64)
    present = strings  # test_many of the keys added: every answer True
    out = [
        ("update, Arrow string column", strings, "to_pylist()",
         lambda f, c: f.update(c), lambda a, c: a.update(c.to_pylist())),
        ("test_many, Arrow string column", present, "to_pylist()",
         lambda f, c: f.test_many(c), lambda a, c: [k in a for k in c.to_pylist()]),
        ("update, numpy int64", ids, "tolist()",
         lambda f, c: f.update(c), lambda a, c: a.update(c.tolist())),
        ("test_many, numpy int64", ids, "tolist()",
         lambda f, c: f.test_many(c), lambda a, c: [k in a for k in c.tolist()]),
    ]
    try:
        import polars as pl

        s = pl.Series("id", strings)
        out.append(("update, polars string Series", s, "to_list()",
                    lambda f, c: f.update(c), lambda a, c: a.update(c.to_list())))
    except ImportError:
        print("polars: not installed, its row skipped")
    return out


def run(n: int, p: float, rounds: int) -> List[Tuple[str, Dict[str, float]]]:
    import abloom

    rows = []
    for name, col, given, ours, theirs in cases(n, p):
        add_first = name.startswith("test_many")
        as_list = col.to_pylist() if hasattr(col, "to_pylist") else (
            col.to_list() if hasattr(col, "to_list") else col.tolist())

        def ling(cls):
            def go():
                f = cls(n, p)
                if add_first:
                    f.update(col)
                return timed(lambda: ours(f, col))
            return go

        def ling_list(cls):
            def go():
                f = cls(n, p)
                if add_first:
                    f.update(as_list)
                call = (lambda: f.test_many(as_list)) if add_first else (lambda: f.update(as_list))
                return timed(call)
            return go

        def peer():
            a = abloom.BloomFilter(n, p)
            if add_first:
                a.update(as_list)
            return timed(lambda: theirs(a, col))

        contestants = {
            "BlockedFilter": ling(lb.BlockedFilter),
            "MemoryFilter": ling(lb.MemoryFilter),
            f"abloom, with {given}": peer,
            "BlockedFilter, given the list": ling_list(lb.BlockedFilter),
        }
        best = {k: float("inf") for k in contestants}
        for _ in range(rounds):
            for k, go in contestants.items():
                best[k] = min(best[k], go())
        rows.append((name, {k: v / n * 1e9 for k, v in best.items()}))
    return rows


def table(n: int, p: float, rows) -> List[str]:
    lines = [f"### n = {n:.0e}, p = {p:g}", "",
             "| batch | BlockedFilter | MemoryFilter | abloom (list made from the column) "
             "| abloom / BlockedFilter | abloom / MemoryFilter | BlockedFilter given the list |",
             "|---|---:|---:|---:|---:|---:|---:|"]
    for name, ns in rows:
        peer_key = next(k for k in ns if k.startswith("abloom"))
        peer = ns[peer_key]
        lines.append(f"| {name} | {ns['BlockedFilter']:.1f} | {ns['MemoryFilter']:.1f} | "
                     f"{peer:.1f} ({peer_key[len('abloom, with '):]}) | "
                     f"{peer / ns['BlockedFilter']:.2f} | {peer / ns['MemoryFilter']:.2f} | "
                     f"{ns['BlockedFilter, given the list']:.1f} |")
    return lines + [""]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="n = 1e5, 2 rounds")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--sizes", help="comma-separated n (results/ is then not written)")
    args = ap.parse_args()
    sizes = [100_000] if args.quick else [1_000_000, 10_000_000]
    if args.sizes:
        sizes = [int(float(x)) for x in args.sizes.split(",")]
    rounds = 2 if args.quick else args.rounds
    try:
        import abloom  # noqa: F401
    except ImportError:
        print("abloom: not installed (pip install '.[bench]'): nothing to compare against")
        return
    md = ["# Batches from columns against abloom", "",
          f"ns per key, best of {rounds} interleaved rounds; {platform.machine()}, "
          f"Python {platform.python_version()}, numpy {np.__version__}, pyarrow {pa.__version__}, "
          f"{os.cpu_count()} CPUs, load average at start "
          f"{', '.join(f'{x:.2f}' for x in os.getloadavg())}.", ""]
    for n in sizes:
        rows = run(n, 0.01, rounds)
        md += table(n, 0.01, rows)
        print("\n".join(table(n, 0.01, rows)), flush=True)
    if not args.quick and not args.sizes:
        RESULTS.mkdir(exist_ok=True)
        (RESULTS / "columns.md").write_text("\n".join(md))


if __name__ == "__main__":
    main()
