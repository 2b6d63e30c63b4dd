#!/usr/bin/env python3
"""BlockedFilter's measured false-positive rate against its expected rate (README, "What a
filter promises").

n keys "user:N" go into BlockedFilter(n, p); as many absent "user:N" keys as --probes says are
tested.  Printed per p: the geometry, bits per key (and the standard layout's, from
ling_bloom.geometry), the expected rate (BlockedFilter.ideal_false_positive_rate), the
measured rate (in brackets measured / expected and the distance in standard deviations), and
the filter's own current_error_rate().

  python benchmarks/fpr_blocked.py                     # n = 1e6, 4e6 probes, p = 1%, 0.1%, 0.01%
  python benchmarks/fpr_blocked.py --n 1e5 --probes 1e6 --rates 0.01
"""
from __future__ import annotations

import argparse
import math

import ling_bloom as lb


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=float, default=1e6)
    ap.add_argument("--probes", type=float, default=4e6)
    ap.add_argument("--rates", type=float, nargs="+", default=[0.01, 0.001, 0.0001])
    args = ap.parse_args()
    n, count = int(args.n), int(args.probes)
    added = [f"user:{i}" for i in range(n)]
    probes = [f"user:{i}" for i in range(n, n + count)]
    print("| p | m (k) | bits/key | standard bits/key | expected | measured | current_error_rate() |")
    print("|---|---|---|---|---|---|---|")
    for p in args.rates:
        f = lb.BlockedFilter(n, p)
        f.update(added)
        expected = lb.BlockedFilter.ideal_false_positive_rate(f.m, f.k, n)
        measured = sum(f.test_many(probes)) / count
        sd = math.sqrt(expected * (1 - expected) / count)
        print(f"| {p} | {f.m:,} ({f.k}) | {f.m / n:.2f} | {lb.geometry(n, p).m / n:.2f} | "
              f"{expected * 100:.4f}% | {measured * 100:.4f}% ({measured / expected:.3f}x, "
              f"{(measured - expected) / sd:+.1f} sd) | {f.current_error_rate() * 100:.4f}% |")


if __name__ == "__main__":
    main()
