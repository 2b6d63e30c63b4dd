"""AsyncRedisFilter against redis.asyncio (with hiredis) on one redis-server, same run.

    .venv/bin/python benchmarks/bench_async.py            # full run, writes benchmarks/results/async.md
    .venv/bin/python benchmarks/bench_async.py --quick    # small counts (smoke test)

One redis-server is started here on a free port of 127.0.0.1 (no persistence) and stopped at
the end.  Both contenders use the same geometry (capacity 1,000,000, error_rate 0.01) and the
same keys, each on its own Redis key, on one event loop:

- AsyncRedisFilter (one BITFIELD per key; the C core builds the requests and checks the
  replies, asyncio carries the bytes);
- redis.asyncio doing the same job by hand, as a Bloom filter written over redis-py does:
  the bit indices are computed in Python beforehand with ling_bloom.indices (NOT timed:
  only the Redis part is), then a non-transactional pipeline of one BITFIELD per key is
  built, executed, and its replies folded into one bool per key (timed).

Rows: single add/test awaited one after another; batches of 100 and 10,000 keys; and 200
concurrent tasks each testing one key (asyncio.gather), both clients with 4 connections.
Goals: batches >= 3x redis.asyncio, single calls >= 1x.  Each figure is the
best of --repeat runs, in keys per second; the ratio is ling_bloom / redis.asyncio.
"""
from __future__ import annotations

import argparse
import asyncio
import os
import platform
import sys
import time
from typing import Awaitable, Callable, Dict, List, Optional, Tuple

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "support"))  # redis_server.py: the server helper

import ling_bloom as lb  # noqa: E402
from redis_server import RedisServer  # noqa: E402

CAPACITY, ERROR_RATE = 1_000_000, 0.01
CONCURRENT = 200


async def _best(fn: Callable[[], Awaitable[None]], repeat: int) -> float:
    await fn()  # warm up: connections, the server's allocation of the bitmap
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        await fn()
        best = min(best, time.perf_counter() - t0)
    return best


class Bench:
    def __init__(self, srv: RedisServer, quick: bool, repeat: int):
        self.srv, self.repeat = srv, repeat
        self.counts = {1: 200 if quick else 2000, 100: 5 if quick else 50,
                       10_000: 1 if quick else 3, "tasks": 1 if quick else 10}
        n = max(self.counts[1], 100 * self.counts[100], 10_000, CONCURRENT)
        self.keys = [f"user:{i}" for i in range(n)]
        p = lb.geometry(CAPACITY, ERROR_RATE)
        self.m, self.k = p.m, p.k
        self.idx = [lb.indices(key, self.m, self.k) for key in self.keys]
        self.results: Dict[Tuple[str, str, object], float] = {}

    async def run(self, impl: str, op: str, size: object,
                  single: Callable[[int], Awaitable[object]],
                  batch: Callable[[int, int], Awaitable[object]]) -> None:
        reps = self.counts[size]
        keys = self.keys
        if size == 1:
            async def go() -> None:
                for i in range(reps):
                    await single(i)
            n = reps
        elif size == "tasks":
            async def go() -> None:
                for _ in range(reps):
                    await asyncio.gather(*(single(i) for i in range(CONCURRENT)))
            n = reps * CONCURRENT
        else:
            async def go() -> None:
                for r in range(reps):
                    await batch(r * size % len(keys), size)  # type: ignore[operator]
            n = reps * size  # type: ignore[operator]
        self.results[(impl, op, size)] = n / await _best(go, self.repeat)

    async def ling_bloom(self) -> None:
        f = lb.AsyncRedisFilter(b"lb:async", CAPACITY, ERROR_RATE, host=self.srv.host,
                                port=self.srv.port, max_connections=4)
        assert (f.m, f.k) == (self.m, self.k)
        keys = self.keys
        for size in (1, 100, 10_000, "tasks"):
            await self.run("AsyncRedisFilter", "add", size, lambda i: f.add(keys[i]),
                           lambda s, n: f.add_many(keys[s:s + n]))
            await self.run("AsyncRedisFilter", "test", size, lambda i: f.test(keys[i]),
                           lambda s, n: f.test_many(keys[s:s + n]))
        await f.aclose()

    async def redis_py(self) -> None:
        import redis.asyncio as aredis

        pool = aredis.BlockingConnectionPool(host=self.srv.host, port=self.srv.port,
                                             max_connections=4)  # waits, as ours does
        client = aredis.Redis(connection_pool=pool)
        idx, key = self.idx, "py:async"

        async def batch(start: int, n: int, write: bool) -> List[bool]:
            pipe = client.pipeline(transaction=False)
            for ii in idx[start:start + n]:
                args: list = []
                for i in ii:
                    args += ("SET", "u1", i, 1) if write else ("GET", "u1", i)
                pipe.execute_command("BITFIELD", key, *args)
            res = await pipe.execute()
            if write:
                return [0 in r for r in res]
            return [0 not in r for r in res]

        async def single(i: int, write: bool) -> bool:
            args: list = []
            for j in idx[i]:
                args += ("SET", "u1", j, 1) if write else ("GET", "u1", j)
            r = await client.execute_command("BITFIELD", key, *args)
            return (0 in r) if write else (0 not in r)

        for size in (1, 100, 10_000, "tasks"):
            await self.run("redis.asyncio", "add", size, lambda i: single(i, True),
                           lambda s, n: batch(s, n, True))
            await self.run("redis.asyncio", "test", size, lambda i: single(i, False),
                           lambda s, n: batch(s, n, False))
        await client.aclose() if hasattr(client, "aclose") else await client.close()


def _hiredis() -> Optional[bool]:
    try:
        from redis.utils import HIREDIS_AVAILABLE
    except ImportError:
        return None
    return bool(HIREDIS_AVAILABLE)


def report(b: Bench) -> str:
    lines = [f"# AsyncRedisFilter vs redis.asyncio (hiredis parser: {_hiredis()})", "",
             f"python {platform.python_version()}, {os.cpu_count()} cores, load "
             f"{os.getloadavg()[0]:.2f} at the end; keys/s, best of {b.repeat}", "",
             "| op | size | AsyncRedisFilter | redis.asyncio | ratio |",
             "|---|---|---|---|---|"]
    for op in ("add", "test"):
        for size in (1, 100, 10_000, "tasks"):
            ours = b.results.get(("AsyncRedisFilter", op, size))
            theirs = b.results.get(("redis.asyncio", op, size))
            label = f"{CONCURRENT} tasks" if size == "tasks" else f"{size:,}"
            ratio = f"{ours / theirs:.2f}x" if ours and theirs else "-"
            lines.append(f"| {op} | {label} | {ours or 0:,.0f} | {theirs or 0:,.0f} | {ratio} |")
    return "\n".join(lines) + "\n"


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="small counts (smoke test)")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--out", default=os.path.join(ROOT, "benchmarks", "results", "async.md"))
    args = ap.parse_args(argv)
    try:
        import redis.asyncio  # noqa: F401
    except ImportError:
        print("redis.asyncio is not installed (pip install 'redis[hiredis]'); nothing to "
              "compare with")
        return 1
    with RedisServer() as srv:
        b = Bench(srv, args.quick, args.repeat)

        async def both() -> None:
            await b.ling_bloom()
            await b.redis_py()

        asyncio.run(both())
    text = report(b)
    print(text)
    if not args.quick:
        os.makedirs(os.path.dirname(args.out), exist_ok=True)
        with open(args.out, "w") as fh:
            fh.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
