"""Measured false-positive rate against theory, for every hashing scheme, at every size.

    python benchmarks/fpr_table.py [--n 1000000] [--probes 2000000] [--seed 1]
    python benchmarks/fpr_table.py --small        # n = 1 .. 10,000, averaged over many filters
    python benchmarks/fpr_table.py --scalable     # the scalable chain through 10^6-fold growth

Large (the default): for each key shape,
n keys are added to a MemoryFilter sized by estimate(n, p) and `probes`
keys that were never added are tested.  theory = (1 - e^(-k n / m))^k for the filter's m and k;
z is (measured - theory) / sqrt(theory (1 - theory) / probes).  "fill (ideal)" is the fraction of
bits set, against 1 - e^(-k n / m) for independent hashes.  Prints a Markdown table.

--small: for each (n, p), many independent filters of geometry(n, p) get n keys each and are
probed with keys never added (ling_bloom.analysis.fpr_over_filters); the rate over all of them
is set against the exact rate of ideal hashing (ling_bloom.ideal_false_positive_rate), with the
standard error from the spread between filters.  The 0.1 walk ("xxh3") is measured on the same
keys at Estimate's geometry, for comparison.

--scalable: ScalableFilter(initial, p) filled with 10^6 uuid keys, probed with --probes uuid
keys never added, at log-spaced checkpoints; the bound is p, and current_error_rate() is the
chain's own estimate.  The 0.1 chain (hash="xxh3", Estimate's stage sizes) beside it.
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
    ap.add_argument("--small", action="store_true", help="small filters, many of each")
    ap.add_argument("--scalable", action="store_true", help="the scalable chain's bound")
    ap.add_argument("--budget", type=float, default=4e6,
                    help="--small: probes per row at p = 0.001 (scaled by 0.001 / p)")
    args = ap.parse_args()
    if args.small:
        return small_table(args)
    if args.scalable:
        return scalable_table(args)

    t0 = time.perf_counter()
    rows = []
    for name, added, probes in shapes(args.n, args.probes, args.seed):
        for p in args.rates:
            for scheme in ("xxh3-mix", "xxh3", "ling-base"):
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
    worst = max(abs(r[9] - 1) for r in rows if r[1] == "xxh3-mix")
    print(f"\nxxh3-mix (default): largest |measured / theory - 1| = {worst * 100:.1f}% over "
          f"{sum(1 for r in rows if r[1] == 'xxh3-mix')} rows.")
    return 0


SMALL_N = (1, 3, 10, 30, 100, 1000, 10_000)


def small_table(args) -> int:
    from ling_bloom import analysis

    t0 = time.perf_counter()
    print("| n | p | hash | m | k | filters x probes | measured | ideal | measured / ideal |")
    print("|---|---|---|---|---|---|---|---|---|")
    worst = 0.0
    for p in args.rates:
        for n in SMALL_N:
            budget = int(args.budget * 0.001 / p)
            probes = max(100, min(20_000, 10 * n))
            filters = max(30, budget // probes)
            em, ek = lb.estimate(n, p)
            for scheme, geo in (("xxh3-mix", {}), ("xxh3", {"m": em, "k": ek})):
                r = analysis.fpr_over_filters(n, None if geo else p, hash=scheme, filters=filters,
                                              probes=probes, seed=args.seed, **geo)
                if scheme == "xxh3-mix":
                    worst = max(worst, r.ratio)
                print(f"| {n:,} | {p:g} | {scheme} | {r.m:,} | {r.k} | {filters:,} x {probes:,} | "
                      f"{r.measured_rate * 100:.4f}% | {r.ideal_rate * 100:.4f}% | "
                      f"{r.ratio:.3f} +- {r.ratio_stderr:.3f} |", flush=True)
    print(f"\nxxh3-mix (default): largest measured / ideal = {worst:.3f}; "
          f"ling_bloom {lb.__version__}, Python {platform.python_version()}, "
          f"{time.perf_counter() - t0:.0f} s.")
    return 0


def scalable_table(args) -> int:
    from ling_bloom import analysis

    t0 = time.perf_counter()
    total = 1_000_000
    added = analysis.make_keys("uuid", total, seed=args.seed)
    probes = analysis.make_keys("uuid", args.probes, seed=args.seed, start=total)
    print("| initial capacity | p | hash | keys added | growth | stages | memory | measured "
          "| current_error_rate() | bound |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for p in args.rates:
        for initial in (1, 10, 100):
            for scheme in ("xxh3-mix", "xxh3"):
                f = lb.ScalableFilter(initial, p, hash=scheme)
                done = 0
                for stop in (1000, 10_000, 100_000, total):
                    f.update(added[done:stop])
                    done = stop
                    fp = sum(f.test_many(probes))
                    print(f"| {initial} | {p:g} | {scheme} | {stop:,} | {stop // initial:,}x | "
                          f"{f.num_sub_filters} | {f.nbytes / 1024:,.1f} KiB | "
                          f"{fp / len(probes) * 100:.4f}% | {f.current_error_rate() * 100:.4f}% | "
                          f"{p * 100:g}% |", flush=True)
    print(f"\n{args.probes:,} never-added uuid keys probed per row (one standard error: "
          f"sqrt(rate / probes)); ling_bloom {lb.__version__}, Python "
          f"{platform.python_version()}, {time.perf_counter() - t0:.0f} s.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
