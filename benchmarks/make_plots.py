#!/usr/bin/env python3
"""The README's plots, made by the code: python benchmarks/make_plots.py [--out docs/images]

  fpr-measured-vs-theory.png  MemoryFilter(n=200,000, p=0.01) filled to twice its capacity:
                              the measured false-positive rate beside (1 - e^(-kn/m))^k, for
                              the default hash on sequential ids and UUIDs and for ling-base's
                              FNV-1a scheme on sequential ids
  fpr-xxh3-vs-ling-base.png   the same at p=0.001 on sequential ids: XXH3 against ling-base's
                              FNV-1a double hashing (fewer bits set, rate above the promise)
  scalable-growth.png         ScalableFilter(initial_capacity=1,000, error_rate=0.01) growing
                              to 1,000,000 keys: its rate, its stages, its memory

Needs matplotlib (the plot extra).  Deterministic: the same keys every run.
"""
from __future__ import annotations

import argparse
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

from ling_bloom import analysis  # noqa: E402


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=os.path.join(os.path.dirname(HERE), "docs", "images"))
    ap.add_argument("--n", type=int, default=200_000)
    args = ap.parse_args(argv)
    plt = analysis._pyplot()
    os.makedirs(args.out, exist_ok=True)

    n, p = args.n, 0.01
    common = dict(load=2.0, checkpoints=16, probes=200_000)
    exps = [
        analysis.run_experiment("memory", n, p, keys="sequential",
                                label="xxh3-mix (default), sequential ids", **common),
        analysis.run_experiment("memory", n, p, keys="uuid", label="xxh3-mix (default), UUIDs", **common),
        analysis.run_experiment("memory", n, p, keys="sequential", hash="ling-base",
                                label="ling-base (FNV-1a), sequential ids", **common),
    ]
    ax = analysis.plot_fpr(exps, x="load", title=(
        f"MemoryFilter sized for {n:,} keys at p = {p}: measured (dots, ±2σ) vs theory"))
    ax.axvline(1.0, color="0.5", lw=0.8, ls="--")
    ax.annotate("capacity", xy=(1.0, 0.02), xycoords=("data", "axes fraction"), ha="right",
                fontsize=8, color="0.3", rotation=90)
    path = os.path.join(args.out, "fpr-measured-vs-theory.png")
    ax.figure.savefig(path, dpi=100)
    plt.close(ax.figure)
    print(path)
    for e in exps:
        print(e.to_markdown())

    kw = dict(keys="sequential", load=1.5, checkpoints=12, probes=400_000)
    pair = [
        analysis.run_experiment("memory", n, 0.001, label="xxh3-mix (default)", **kw),
        analysis.run_experiment("memory", n, 0.001, hash="ling-base",
                                label="ling-base (FNV-1a double hashing)", **kw),
    ]
    ax = analysis.plot_fpr(pair, x="load", title=(
        f"Sequential ids \"id:N\", MemoryFilter({n:,}, 0.001): the hash decides"))
    path = os.path.join(args.out, "fpr-xxh3-vs-ling-base.png")
    ax.figure.savefig(path, dpi=100)
    plt.close(ax.figure)
    print(path)
    for e in pair:
        print(e.to_markdown())

    s = analysis.run_experiment("scalable", 1000, p, load=1000, checkpoints=40, spacing="log",
                                probes=100_000)
    ax = analysis.plot_scalable_growth(s)
    path = os.path.join(args.out, "scalable-growth.png")
    ax.figure.savefig(path, dpi=100)
    plt.close(ax.figure)
    print(path)
    print(s.to_markdown())
    return 0


if __name__ == "__main__":
    sys.exit(main())
