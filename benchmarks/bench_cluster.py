"""A sharded RedisFilter on a Redis Cluster of 1 and of 3 primaries, against redis-py.

    .venv/bin/python benchmarks/bench_cluster.py            # full run, writes benchmarks/results/cluster.md
    .venv/bin/python benchmarks/bench_cluster.py --quick    # small counts (smoke test)

Two clusters are started here, one after the other, on free ports of 127.0.0.1 (no
persistence, no replicas: only the primaries' work is measured): 1 primary holding every
slot, then 3 primaries (redis-cli --cluster create).  On each, the same keys and the same
geometry (capacity 1,000,000 keys, error_rate 0.01, spread over 6 shards) are used by:

- RedisFilter(shards=6): the keys grouped by shard, each shard's batch on its own
  connection, the shards' round trips at the same time (redis_sharded.c);
- RedisFilter (one bitmap): the whole filter in one slot, so on one primary;
- redis-py's RedisCluster pipeline doing the same commands: the shard and the bit indices of
  every key computed beforehand (ling_bloom.hash_pair / indices, NOT timed), then one
  BITFIELD SET (or GET) per key on its shard's key, pipelined, replies folded into one bool
  per key (timed).

Each contender adds then tests the keys in batches of 10,000.  Also reported: the ceiling the
servers' own CPU time sets (keys per second of server CPU, summed over the primaries, times
the cores the primaries can use on this machine: min(primaries, cores)), i.e. what a client
that costs nothing could reach.  This machine has few cores (2 here), shared by the servers
and the client: 3 primaries cannot run 3x as fast as 1, so read the 3-vs-1 ratio against the
ceiling's own ratio.  Each figure is the best of --repeat runs; compare the ratios.
"""
from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from typing import Callable, Dict, List, Optional, Tuple

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "support"))  # redis_server.py

import ling_bloom as lb  # noqa: E402
from redis_server import RedisClusterServers  # noqa: E402

CAPACITY, ERROR_RATE, SHARDS, BATCH = 1_000_000, 0.01, 6, 10_000
MASK = (1 << 64) - 1


def shard_of(key: str, shards: int) -> int:
    """redis_sharded.c's pick, in Python (for the redis-py contender)."""
    h1, h2 = lb.hash_pair(key)
    x = (h1 + h2 * 0x9E3779B97F4A7C15) & MASK
    x = ((x ^ (x >> 32)) * 0xD6E8FEB86659FD93) & MASK
    return (x * shards) >> 64


def cpu_seconds(pids: List[int]) -> float:
    tick = os.sysconf("SC_CLK_TCK")
    total = 0.0
    for pid in pids:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        total += (int(fields[11]) + int(fields[12])) / tick
    return total


class Run:
    def __init__(self, primaries: int, keys: List[str], repeat: int):
        self.primaries = primaries
        self.keys = keys
        self.repeat = repeat
        self.rates: Dict[Tuple[str, str], float] = {}
        self.ceiling: Dict[str, float] = {}

    def timed(self, name: str, op: str, go: Callable[[List[str]], object],
              pids: List[int]) -> None:
        best, cpu_best = float("inf"), float("inf")
        for _ in range(self.repeat):
            c0, t0 = cpu_seconds(pids), time.perf_counter()
            for i in range(0, len(self.keys), BATCH):
                go(self.keys[i:i + BATCH])
            t, c = time.perf_counter() - t0, cpu_seconds(pids) - c0
            best, cpu_best = min(best, t), min(cpu_best, c)
        self.rates[(name, op)] = len(self.keys) / best
        if name.startswith("RedisFilter(shards") and cpu_best > 0:
            cores = min(self.primaries, os.cpu_count() or 1)
            self.ceiling[op] = len(self.keys) / cpu_best * cores


def redis_py_contender(cluster: RedisClusterServers, f: "lb.RedisFilter", keys: List[str]):
    from redis.cluster import RedisCluster

    rc = RedisCluster(host=cluster.nodes[0].host, port=cluster.nodes[0].port)
    m_s, k = f.m // SHARDS, f.k
    names = [f"{{bench:py:{i}}}" for i in range(SHARDS)]
    plan = {key: (names[shard_of(key, SHARDS)], lb.indices(key, m_s, k)) for key in keys}

    def batch(chunk: List[str], write: bool) -> List[bool]:
        p = rc.pipeline(transaction=False)
        for key in chunk:
            name, idx = plan[key]
            args: List[object] = ["BITFIELD", name]
            for i in idx:
                args += ["SET", "u1", i, 1] if write else ["GET", "u1", i]
            p.execute_command(*args)
        out = p.execute()
        return [0 in r for r in out] if write else [0 not in r for r in out]

    return rc, batch


def run_cluster(primaries: int, keys: List[str], repeat: int, with_py: bool) -> Run:
    run = Run(primaries, keys, repeat)
    with RedisClusterServers(primaries, 0) as cluster:
        pids = cluster.pids()
        sharded = lb.RedisFilter.from_url(cluster.url, "bench:sharded", CAPACITY, ERROR_RATE,
                                          shards=SHARDS)
        single = lb.RedisFilter.from_url(cluster.url, "bench:one", CAPACITY, ERROR_RATE)
        for name, f in ((f"RedisFilter(shards={SHARDS})", sharded), ("RedisFilter", single)):
            f.reset()
            run.timed(name, "add", f.update, pids)
            run.timed(name, "test", f.test_many, pids)
            assert all(f.test_many(keys[:1000]))
        if with_py:
            rc, batch = redis_py_contender(cluster, sharded, keys)
            run.timed("redis-py RedisCluster pipeline", "add", lambda c: batch(c, True), pids)
            run.timed("redis-py RedisCluster pipeline", "test", lambda c: batch(c, False), pids)
            rc.close()
        sharded.close()
        single.close()
    return run


def fmt(v: Optional[float]) -> str:
    return "—" if v is None else f"{v:,.0f}"


def report(one: Run, three: Run, n: int, with_py: bool, load: str = "") -> str:
    names = [f"RedisFilter(shards={SHARDS})", "RedisFilter"]
    if with_py:
        names.append("redis-py RedisCluster pipeline")
    lines = [
        "# A sharded RedisFilter on a Redis Cluster",
        "",
        f"`python benchmarks/bench_cluster.py` — {n:,} keys in batches of {BATCH:,}, capacity "
        f"{CAPACITY:,} at {ERROR_RATE}, {SHARDS} shards; {platform.machine()}, "
        f"{os.cpu_count()} cores, Python {platform.python_version()}, ling_bloom "
        f"{lb.__version__}{load}. Keys per second (best of the runs).",
        "",
        "| contender | op | 1 primary | 3 primaries | 3 / 1 |",
        "|---|---|---:|---:|---:|",
    ]
    for name in names:
        for op in ("add", "test"):
            a, b = one.rates.get((name, op)), three.rates.get((name, op))
            ratio = f"{b / a:.2f}×" if a and b else "—"
            lines.append(f"| {name} | {op} | {fmt(a)} | {fmt(b)} | {ratio} |")
    for op in ("add", "test"):
        a, b = one.ceiling.get(op), three.ceiling.get(op)
        ratio = f"{b / a:.2f}×" if a and b else "—"
        lines.append(f"| server-CPU ceiling (sharded stream) | {op} | {fmt(a)} | {fmt(b)} | "
                     f"{ratio} |")
    lines += ["", "Ratios in the same run:", ""]
    for run, label in ((one, "1 primary"), (three, "3 primaries")):
        for op in ("add", "test"):
            s = run.rates.get((names[0], op))
            u = run.rates.get(("RedisFilter", op))
            p = run.rates.get(("redis-py RedisCluster pipeline", op))
            c = run.ceiling.get(op)
            parts = [f"sharded / one bitmap {s / u:.2f}×" if s and u else ""]
            if p:
                parts.append(f"sharded / redis-py {s / p:.2f}×")
            if c:
                parts.append(f"sharded / server-CPU ceiling {s / c:.0%}")
            lines.append(f"- {label}, {op}: " + ", ".join(x for x in parts if x))
    lines += ["", "The ceiling multiplies the servers' keys per CPU-second by the cores they can "
              "use here (min(primaries, cores)); the client shares those cores."]
    return "\n".join(lines) + "\n"


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="small counts (a smoke test)")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--out", default=os.path.join(ROOT, "benchmarks", "results", "cluster.md"))
    args = ap.parse_args(argv)
    n = 20_000 if args.quick else 200_000
    repeat = 1 if args.quick else args.repeat
    keys = [f"user:{i}" for i in range(n)]
    try:
        import redis.cluster  # noqa: F401
        with_py = True
    except ImportError:
        with_py = False
    start = os.getloadavg()[0]
    one = run_cluster(1, keys, repeat, with_py)
    three = run_cluster(3, keys, repeat, with_py)
    load = f", load average {start:.2f} at the start and {os.getloadavg()[0]:.2f} at the end"
    text = report(one, three, n, with_py, load)
    print(text)
    if not args.quick:
        with open(args.out, "w", encoding="utf-8") as f:
            f.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
