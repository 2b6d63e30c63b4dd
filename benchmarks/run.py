"""The one command behind `make bench`: every benchmark, one after the other.

    python benchmarks/run.py            # default sizes (several minutes on 2 cores)
    python benchmarks/run.py --quick    # a smoke run at small sizes

Each benchmark writes its table to the terminal and to benchmarks/results/.  The penetration
benchmark (a web app over PostgreSQL and Redis under wrk) is separate:
`python benchmarks/penetration/run.py`.
"""
from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent

BENCHMARKS = [
    ("in-memory filters against the peers", "bench_memory.py"),
    ("per-key cost with the filter in cache", "bench_in_cache.py"),
    ("batches from numpy and Arrow columns against abloom", "bench_columns.py"),
    ("RedisFilter against redis-py", "bench_redis.py"),
    ("a blocked layout on Redis: the server's limit per layout", "bench_redis_blocked.py"),
    ("RedisBloomFilter against redis-py's r.bf()", "bench_redisbloom.py"),
    ("a sharded RedisFilter on a Redis Cluster of 1 and 3 primaries", "bench_cluster.py"),
]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, a smoke run")
    parser.add_argument("--only", choices=[name for _, name in BENCHMARKS], action="append",
                        help="run only this benchmark (may be repeated)")
    args = parser.parse_args()
    failed = []
    for title, script in BENCHMARKS:
        if args.only and script not in args.only:
            continue
        print(f"\n=== {title} ({script}) ===", flush=True)
        quick = ["--quick"] if args.quick and script != "bench_in_cache.py" else []
        # the README's tables: each cell the best of 3 rounds (bench_memory's --rounds)
        rounds = ["--rounds", "3"] if script == "bench_memory.py" and not args.quick else []
        cmd = [sys.executable, str(HERE / script)] + quick + rounds
        t0 = time.perf_counter()
        rc = subprocess.call(cmd)
        print(f"=== {script}: exit {rc} after {time.perf_counter() - t0:.0f} s ===", flush=True)
        if rc != 0:
            failed.append(script)
    if failed:
        print(f"failed: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
