"""Measured false-positive rate against theory, for both hashing schemes, on several key shapes.

    python benchmarks/fpr_table.py [--n 1000000] [--probes 2000000] [--seed 1]

For each key shape, n keys are added to a MemoryFilter sized by estimate(n, p) and `probes`
keys that were never added are tested.  theory = (1 - e^(-k n / m))^k for the filter's m and k;
z is (measured - theory) / sqrt(theory (1 - theory) / probes).  "fill (ideal)" is the fraction of
bits set, against 1 - e^(-k n / m) for independent hashes.  Prints a Markdown table.
"""
from __future__ import annotations

import argparse
import math
import platform
import random
import sys
import time

import ling_bloom as lb


def uuid4s(rng: random.Random, count: int) -> list[str]:
    out = []
    for _ in range(count):
        h = f"{rng.getrandbits(128):032x}"
        v = "89ab"[int(h[16], 16) & 3]
        out.append(f"{h[:8]}-{h[8:12]}-4{h[13:16]}-{v}{h[17:20]}-{h[20:]}")
    return out


def shapes(n: int, probes: int, seed: int):
    """(name, added keys, probe keys): probes are disjoint from the added keys."""
    rng = random.Random(seed)
    yield ('"user:N" / "user:N" (N disjoint)',
           [f"user:{i}" for i in range(n)], [f"user:{i}" for i in range(n, n + probes)])
    added = uuid4s(rng, n)
    seen = set(added)
    yield "uuid4 / uuid4", added, [u for u in uuid4s(rng, probes) if u not in seen]
    url = "https://shop.example.com/product/{}?ref=campaign-{}&lang=en"
    yield ("URL / URL (disjoint ids)", [url.format(i, i % 97) for i in range(n)],
           [url.format(i, i % 97) for i in range(n, n + probes)])
    added_b = [rng.randbytes(16) for _ in range(n)]
    seen_b = set(added_b)
    yield ("16 random bytes / 16 random bytes", added_b,
           [b for b in (rng.randbytes(16) for _ in range(probes)) if b not in seen_b])
    # hashing-fpr.md's worst case for the ling-base scheme
    yield ('16 random hex chars / "absent:N"', [f"{rng.getrandbits(64):016x}" for _ in range(n)],
           [f"absent:{i}" for i in range(probes)])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=1_000_000)
    ap.add_argument("--probes", type=int, default=2_000_000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--rates", type=float, nargs="+", default=[0.01, 0.001])
    args = ap.parse_args()

    t0 = time.perf_counter()
    rows = []
    for name, added, probes in shapes(args.n, args.probes, args.seed):
        for p in args.rates:
            for scheme in ("xxh3", "ling-base"):
                f = lb.MemoryFilter(len(added), p, hash=scheme)
                f.update(added)
                fp = sum(f.test_many(probes))
                measured = fp / len(probes)
                theory = lb.false_positive_rate(f.m, f.k, len(added))
                sigma = math.sqrt(theory * (1 - theory) / len(probes))
                ideal_fill = -math.expm1(-f.k * len(added) / f.m)
                rows.append((name, scheme, p, f.m, f.k, f.fill_ratio(), ideal_fill, measured,
                             theory, measured / theory, (measured - theory) / sigma))
                f.close()
    elapsed = time.perf_counter() - t0

    print(f"n = {args.n:,} keys added, {args.probes:,} absent keys probed per row "
          f"(seed {args.seed}); ling_bloom {lb.__version__}, Python {platform.python_version()}, "
          f"{elapsed:.0f} s.\n")
    print("| keys added / keys probed | hash | p | m | k | fill (ideal) | measured FPR | theory "
          "| measured / theory | z |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for (name, scheme, p, m, k, fill, ideal, measured, theory, ratio, z) in rows:
        print(f"| {name} | {scheme} | {p:g} | {m:,} | {k} | {fill:.3f} ({ideal:.3f}) | "
              f"{measured * 100:.4f}% | {theory * 100:.4f}% | {ratio:.3f}x | {z:+.1f} |")
    worst = max(abs(r[9] - 1) for r in rows if r[1] == "xxh3")
    print(f"\nxxh3 (default): largest |measured / theory - 1| = {worst * 100:.1f}% over "
          f"{sum(1 for r in rows if r[1] == 'xxh3')} rows.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
