"""Two builds of ling_bloom on the same Redis calls, interleaved: the blocking driver's cost.

    .venv/bin/python benchmarks/bench_lanes.py BEFORE_ROOT AFTER_ROOT [--rounds 5]

Each ROOT is a source tree built in place (setup.py build_ext --inplace).  One redis-server
is started here; every round runs each build once, in a process of its own (the order
alternating from round to round), on the same filter keys and the same keys: a plain
RedisFilter's batch and single key, and sharded filters' (shards=2, 4, 8) batches, single
keys and len() (a BITCOUNT on every shard).  A figure is the median over the rounds of each round's
best time per call, wall-clock and the process's CPU time (every thread's); the ratio is
after / before (below 1: the after build is faster).
The machine's other load shows up as noise: compare the ratios, taken in the same run.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from typing import Dict, List

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
KEYS = [f"user:{i}" for i in range(1000)]


def _best_ns(fn, calls: int, repeat: int = 5) -> List[float]:
    """[wall, cpu] ns per call of the repeat with the least wall time (cpu: this
    process's, every thread's)."""
    best = [float("inf"), 0.0]
    for _ in range(repeat):
        t, c = time.perf_counter_ns(), time.process_time_ns()
        for _ in range(calls):
            fn()
        wall, cpu = (time.perf_counter_ns() - t) / calls, (time.process_time_ns() - c) / calls
        if wall < best[0]:
            best = [wall, cpu]
    return best


def worker(port: int, quick: bool) -> Dict[str, List[float]]:
    import ling_bloom as lb

    url = f"redis://127.0.0.1:{port}/0"
    calls_batch, calls_one = (5, 50) if quick else (40, 400)
    out: Dict[str, List[float]] = {}
    with lb.RedisFilter.from_url(url, "bench:node", 1_000_000, 0.01) as f:
        f.add_many(KEYS)
        out["node test_many(1000)"] = _best_ns(lambda: f.test_many(KEYS), calls_batch)
        out["node test(1)"] = _best_ns(lambda: f.test("user:7"), calls_one)
    for shards in (2, 4, 8):
        with lb.RedisFilter.from_url(url, f"bench:s{shards}", 1_000_000, 0.01,
                                     shards=shards) as f:
            f.add_many(KEYS)
            out[f"shards={shards} add_many(1000)"] = _best_ns(lambda: f.add_many(KEYS),
                                                              calls_batch)
            out[f"shards={shards} test_many(1000)"] = _best_ns(lambda: f.test_many(KEYS),
                                                               calls_batch)
            out[f"shards={shards} test_many(16)"] = _best_ns(lambda: f.test_many(KEYS[:16]),
                                                             calls_one)
            out[f"shards={shards} test(1)"] = _best_ns(lambda: f.test("user:7"), calls_one)
            out[f"shards={shards} len()"] = _best_ns(lambda: len(f), calls_one)
    return out


def main(argv: List[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("before")
    ap.add_argument("after")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--worker", type=int, default=0, help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.worker:
        import ling_bloom

        print(json.dumps({"_from": os.path.dirname(os.path.dirname(ling_bloom.__file__)),
                          **worker(a.worker, a.quick)}))
        return 0
    sys.path.insert(0, os.path.join(ROOT, "tests", "support"))
    from redis_server import RedisServer

    runs: Dict[str, Dict[str, List[List[float]]]] = {"before": {}, "after": {}}
    with RedisServer() as srv:
        for r in range(a.rounds):
            order = ("before", "after") if r % 2 == 0 else ("after", "before")
            for which in order:
                root = getattr(a, which)
                env = dict(os.environ, PYTHONPATH=os.path.abspath(root))
                cmd = [sys.executable, os.path.abspath(__file__), a.before, a.after,
                       "--worker", str(srv.port)] + (["--quick"] if a.quick else [])
                res = subprocess.run(cmd, env=env, cwd=os.path.abspath(root),
                                     capture_output=True, text=True, timeout=900)
                if res.returncode != 0:
                    print(res.stderr, file=sys.stderr)
                    return 1
                got = json.loads(res.stdout)
                if os.path.realpath(got.pop("_from")) != os.path.realpath(root):
                    print(f"bench_lanes: the {which} run did not import {root}", file=sys.stderr)
                    return 1
                for row, ns in got.items():
                    runs[which].setdefault(row, []).append(ns)
    print("| row | wall: before (ns/call) | after | after/before | best: after/before | "
          "cpu: before (ns/call) | after | after/before |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for row in runs["before"]:
        b, f = runs["before"][row], runs["after"][row]
        bw, fw = (statistics.median(x[0] for x in v) for v in (b, f))
        bb, fb = (min(x[0] for x in v) for v in (b, f))
        bc, fc = (statistics.median(x[1] for x in v) for v in (b, f))
        print(f"| {row} | {bw:,.0f} | {fw:,.0f} | {fw / bw:.2f} | {fb / bb:.2f} | "
              f"{bc:,.0f} | {fc:,.0f} | {fc / bc:.2f} |")
    print(f"({a.rounds} rounds, interleaved; wall and cpu: the median over the rounds of each "
          "round's best repeat, best: the least wall time of all rounds; cpu is this process's, "
          "every thread's)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
