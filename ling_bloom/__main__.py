"""The command line: `python -m ling_bloom` (or `ling-bloom`).

Commands:
  demo                the filters at work (the README's main job)
  estimate N P        m, k and memory for N keys at false-positive rate P
  inspect FILE        what a saved filter holds

Exit codes: 0 success, 1 the command failed (bad file, ...), 2 bad usage.
"""
from __future__ import annotations

import argparse
import sys
from typing import List, Optional

import ling_bloom as lb


def _human_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"  # pragma: no cover


def cmd_demo(args: argparse.Namespace) -> int:
    from .demo import run

    return run(n=args.n, error_rate=args.error_rate)


def cmd_estimate(args: argparse.Namespace) -> int:
    p = lb.estimate(args.n, args.p)
    print(f"n = {args.n:,}  p = {args.p}")
    print(f"m = {p.m:,} bits  k = {p.k}")
    print(f"memory: {_human_bytes(p.nbytes)} (bit array), {_human_bytes((p.m + 1) // 2)} "
          f"(counting filter)")
    print(f"theoretical rate at n: {lb.false_positive_rate(p.m, p.k, args.n):.6g}")
    return 0


def cmd_inspect(args: argparse.Namespace) -> int:
    f = lb.load(args.file)
    name = type(f).__name__
    print(f"{args.file}: {name}, hash={f.hash}")
    if isinstance(f, lb.ScalableFilter):
        print(f"  error_rate={f.error_rate} initial_capacity={f.initial_capacity:,} "
              f"growth_ratio={f.growth_ratio} fpr_ratio={f.fpr_ratio}")
        print(f"  {f.num_sub_filters} stages, {f.approximate_count():,} keys, "
              f"{_human_bytes(f.nbytes)}, current rate {f.current_error_rate():.6g}")
        for i, s in enumerate(f.stages()):
            print(f"  stage {i}: capacity {s['capacity']:,} count {s['count']:,} "
                  f"m {s['m']:,} k {s['k']} rate {s['error_rate']:.3g}")
    else:
        print(f"  m={f.m:,} k={f.k} capacity={f.capacity} error_rate={f.error_rate}")
        print(f"  {_human_bytes(f.nbytes)}, fill {f.fill_ratio():.4f}, about "
              f"{f.approximate_count():,} keys, current rate {f.current_error_rate():.6g}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m ling_bloom",
        description="Bloom filters with a C core: demo, capacity planning, saved filters.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    d = sub.add_parser("demo", help="show the filters at work")
    d.add_argument("--n", type=int, default=200_000, help="keys to add (default 200000)")
    d.add_argument("--error-rate", type=float, default=0.01, help="target rate (default 0.01)")
    d.set_defaults(func=cmd_demo)
    e = sub.add_parser("estimate", help="m, k and memory for N keys at rate P")
    e.add_argument("n", type=int, metavar="N", help="expected number of keys")
    e.add_argument("p", type=float, metavar="P", help="false-positive rate, in (0, 1)")
    e.set_defaults(func=cmd_estimate)
    i = sub.add_parser("inspect", help="what a saved filter holds")
    i.add_argument("file", metavar="FILE")
    i.set_defaults(func=cmd_inspect)
    return parser


def main(argv: Optional[List[str]] = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return int(args.func(args))
    except (ValueError, OSError, lb.BloomError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
