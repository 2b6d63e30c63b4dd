"""AsyncRedisFilter against redis.asyncio (with hiredis) on one redis-server, same run.

    .venv/bin/python benchmarks/bench_async.py            # full run, writes benchmarks/results/async.md
    .venv/bin/python benchmarks/bench_async.py --quick    # small counts (smoke test)
    .venv/bin/python benchmarks/bench_async.py --no-cluster   # the one-server rows only

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

Then a Redis Cluster of 3 primaries (no replicas) is started on free ports of 127.0.0.1
(redis-cli --cluster create) and, on the same keys and geometry:

- one bitmap: AsyncRedisFilter.from_url("redis+cluster://...", key, ..., max_connections=4)
  (the bitmap is one key, so one slot, one primary), against redis.asyncio.cluster's
  RedisCluster sending a non-transactional pipeline of one BITFIELD per key on its own
  bitmap key (bit indices computed beforehand, NOT timed, as above);
- shards=3: AsyncRedisFilter.from_url(..., shards=3), whose three bitmaps carry distinct hash
  tags ("{key:0}", "{key:1}", "{key:2}", the key chosen so that they sit on three different
  primaries: a batch spans the three), against RedisCluster with its keys spread the same
  way over three bitmap keys of its own on the three primaries (each key's shard and bit
  indices computed beforehand, NOT timed: the shard pick is ling_bloom's, so each primary
  gets the same share of the work), one RedisCluster pipeline per batch, which redis-py
  splits per node.

Rows: batches of 100 and 10,000 keys, and 200 concurrent tasks each testing one key.
Goals: batches >= 3x RedisCluster, 200 concurrent tasks >= 2x.  redis-py's asyncio cluster
client does not wait for a free connection (it raises MaxConnectionsError past
max_connections per node), so it is given one connection per concurrent task (200 per
node); AsyncRedisFilter waits for one of its own.  Until this build's AsyncRedisFilter can
route to a Redis Cluster, its cluster rows say so and only RedisCluster is measured.
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
# bench_cluster.py, a neighbour (not on sys.path when Python runs with PYTHONSAFEPATH=1)
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))

import ling_bloom as lb  # noqa: E402
from bench_cluster import shard_of  # noqa: E402  (ling_bloom's shard pick, in Python)
from redis_server import RedisClusterServers, RedisServer, RedisServerNotInstalled  # noqa: E402

CAPACITY, ERROR_RATE = 1_000_000, 0.01
CONCURRENT = 200
PRIMARIES = SHARDS = 3
CLUSTER_SIZES = (100, 10_000, "tasks")
NOT_AVAILABLE = "ling_bloom: asyncio cluster filters not available in this build"


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


def _spread_tag(base: str, owner: Callable[[str], int]) -> str:
    """The first of base, base:1, base:2, ... whose SHARDS hash-tagged names "{T:i}" sit
    on SHARDS different primaries (so that a batch spans them all)."""
    for n in range(100_000):
        tag = base if n == 0 else f"{base}:{n}"
        if len({owner(f"{{{tag}:{i}}}") for i in range(SHARDS)}) == SHARDS:
            return tag
    raise RuntimeError("no hash tag spreads over the primaries")  # pragma: no cover


class ClusterBench(Bench):
    """The same rows on a Redis Cluster: a one-bitmap filter and a sharded one."""

    FILTERS = ("one bitmap", f"shards={SHARDS}")
    OURS, PEER = "AsyncRedisFilter", "RedisCluster"

    def __init__(self, cluster: "RedisClusterServers", quick: bool, repeat: int):
        super().__init__(None, quick, repeat)  # type: ignore[arg-type]
        from redis.crc import key_slot

        self.cluster, self.url = cluster, cluster.url
        with cluster.nodes[0].client() as c:
            ranges = [(lo, hi, port) for lo, hi, (_h, port, *_rest) in
                      c.command("CLUSTER", "SLOTS")]
        ports = sorted({port for _lo, _hi, port in ranges})

        def owner(name: str) -> int:
            s = key_slot(name.encode())
            return next(ports.index(port) for lo, hi, port in ranges if lo <= s <= hi)

        self.ours_key = _spread_tag("lb:async:sharded", owner)   # its shards: "{key:i}"
        self.peer_tag = _spread_tag("bf", owner)                  # RedisCluster's: "{tag:i}"
        # the sharded geometry as RedisFilter(shards=...) sizes it (nothing is sent)
        f = lb.RedisFilter.from_url(self.url, self.ours_key, CAPACITY, ERROR_RATE, shards=SHARDS)
        self.sharded_m, self.sharded_k = f.m, f.k
        f.close()
        m_s = self.sharded_m // SHARDS
        names = [f"{{{self.peer_tag}:{i}}}" for i in range(SHARDS)]
        self.plans: Dict[str, List[Tuple[str, List[int]]]] = {
            "one bitmap": [("py:async:cluster", ii) for ii in self.idx],
            f"shards={SHARDS}": [(names[shard_of(key, SHARDS)],
                                  lb.indices(key, m_s, self.sharded_k)) for key in self.keys],
        }
        self.missing: List[str] = []
        self.same_bits: Dict[str, bool] = {}

    async def ling_bloom(self) -> None:
        keys = self.keys
        for label in self.FILTERS:
            try:
                if label == "one bitmap":
                    f = lb.AsyncRedisFilter.from_url(self.url, b"lb:async:cluster", CAPACITY,
                                                     ERROR_RATE, max_connections=4)
                    want = (self.m, self.k)
                else:
                    f = lb.AsyncRedisFilter.from_url(self.url, self.ours_key, CAPACITY,
                                                     ERROR_RATE, shards=SHARDS)
                    want = (self.sharded_m, self.sharded_k)
            except lb.NotSupportedError:
                self.missing.append(label)
                print(f"{NOT_AVAILABLE} ({label} rows)", flush=True)
                continue
            if (f.m, f.k) != want:
                raise SystemExit(f"{label}: AsyncRedisFilter has m={f.m}, k={f.k}, the "
                                 f"benchmark expected m={want[0]}, k={want[1]}")
            for size in CLUSTER_SIZES:
                await self.run(f"{self.OURS} {label}", "add", size, lambda i: f.add(keys[i]),
                               lambda s, n: f.add_many(keys[s:s + n]))
                await self.run(f"{self.OURS} {label}", "test", size, lambda i: f.test(keys[i]),
                               lambda s, n: f.test_many(keys[s:s + n]))
            if not all(await f.test_many(keys[:1000])):  # untimed: every added key is there
                raise SystemExit(f"{label}: AsyncRedisFilter lost keys it added")
            await f.aclose()

    async def redis_py(self) -> None:
        from redis.asyncio.cluster import RedisCluster

        node = self.cluster.nodes[0]
        # no waiting for a connection in redis-py's asyncio cluster client: one per task
        rc = RedisCluster(host=node.host, port=node.port, max_connections=CONCURRENT)
        await rc.initialize()

        def bitfield(name: str, ii: List[int], write: bool) -> list:
            args: list = ["BITFIELD", name]
            for i in ii:
                args += ("SET", "u1", i, 1) if write else ("GET", "u1", i)
            return args

        for label in self.FILTERS:
            plan = self.plans[label]

            async def batch(start: int, n: int, write: bool) -> List[bool]:
                pipe = rc.pipeline(transaction=False)  # split per node by redis-py
                for name, ii in plan[start:start + n]:
                    pipe.execute_command(*bitfield(name, ii, write))
                res = await pipe.execute()
                if write:
                    return [0 in r for r in res]
                return [0 not in r for r in res]

            async def single(i: int, write: bool) -> bool:
                name, ii = plan[i]
                r = await rc.execute_command(*bitfield(name, ii, write))
                return (0 in r) if write else (0 not in r)

            for size in CLUSTER_SIZES:
                await self.run(f"{self.PEER} {label}", "add", size, lambda i: single(i, True),
                               lambda s, n: batch(s, n, True))
                await self.run(f"{self.PEER} {label}", "test", size, lambda i: single(i, False),
                               lambda s, n: batch(s, n, False))
            if not all(await batch(0, 1000, False)):  # untimed: every added key is there
                raise SystemExit(f"{label}: the RedisCluster contender lost keys it added")
        await rc.aclose()


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


def cluster_report(b: ClusterBench) -> str:
    goal = {100: 3.0, 10_000: 3.0, "tasks": 2.0}
    lines = [f"## On a Redis Cluster of {PRIMARIES} primaries: AsyncRedisFilter vs "
             f"redis.asyncio.cluster.RedisCluster (hiredis parser: {_hiredis()})", "",
             f"python {platform.python_version()}, {os.cpu_count()} cores (shared by the "
             f"client and the {PRIMARIES} primaries), load {os.getloadavg()[0]:.2f} at the end; "
             f"keys/s, best of {b.repeat}.  Goals: batches >= 3x RedisCluster, "
             f"{CONCURRENT} concurrent tasks >= 2x.  AsyncRedisFilter: 4 connections "
             f"(one bitmap) or its default pool (shards={SHARDS}); RedisCluster: up to "
             f"{CONCURRENT} a node (it cannot wait for one).", "",
             "| filter | op | size | AsyncRedisFilter | RedisCluster | ratio | goal |",
             "|---|---|---|---|---|---|---|"]
    for label in b.FILTERS:
        for op in ("add", "test"):
            for size in CLUSTER_SIZES:
                ours = b.results.get((f"{b.OURS} {label}", op, size))
                theirs = b.results.get((f"{b.PEER} {label}", op, size))
                name = f"{CONCURRENT} tasks" if size == "tasks" else f"{size:,}"
                mine = "not available" if label in b.missing else f"{ours or 0:,.0f}"
                ratio = f"{ours / theirs:.2f}x" if ours and theirs else "-"
                met = "" if not (ours and theirs) else (
                    " (met)" if ours / theirs >= goal[size] else " (not met)")
                lines.append(f"| {label} | {op} | {name} | {mine} | {theirs or 0:,.0f} | "
                             f"{ratio} | >= {goal[size]:.0f}x{met} |")
    if b.missing:
        lines += ["", f"{NOT_AVAILABLE} (rows: {', '.join(b.missing)})."]
    for label, same in b.same_bits.items():
        lines += ["", f"{label}: after the runs, AsyncRedisFilter's bitmaps and RedisCluster's "
                  f"hold {'the same bits' if same else 'DIFFERENT bits (not the same work)'}."]
    lines += ["", f"Bitmap keys: one bitmap `lb:async:cluster` / `py:async:cluster`; "
              f"shards={SHARDS} `{{{b.ours_key}:i}}` / `{{{b.peer_tag}:i}}`, i < {SHARDS}, one "
              f"per primary."]
    return "\n".join(lines) + "\n"


def run_cluster(quick: bool, repeat: int) -> str:
    try:
        import redis.asyncio.cluster  # noqa: F401
        cluster = RedisClusterServers(PRIMARIES, 0).start()
    except (ImportError, RedisServerNotInstalled) as e:
        return f"## On a Redis Cluster: skipped ({e})\n"
    try:
        b = ClusterBench(cluster, quick, repeat)

        async def both() -> None:
            await b.ling_bloom()
            await b.redis_py()

        asyncio.run(both())
        b.same_bits = same_bits(b)
    finally:
        cluster.stop()
    return cluster_report(b)


def same_bits(b: ClusterBench) -> Dict[str, bool]:
    """Untimed: after the same rows (the same keys added), ling_bloom's bitmaps and the
    RedisCluster contender's hold the same bits, i.e. both did the same work."""
    from redis.cluster import RedisCluster

    node = b.cluster.nodes[0]
    rc = RedisCluster(host=node.host, port=node.port)
    pairs = {"one bitmap": [("lb:async:cluster", "py:async:cluster")],
             f"shards={SHARDS}": [(f"{{{b.ours_key}:{i}}}", f"{{{b.peer_tag}:{i}}}")
                                  for i in range(SHARDS)]}
    try:
        return {label: all(rc.get(ours) == rc.get(peer) for ours, peer in pairs[label])
                for label in b.FILTERS if label not in b.missing}
    finally:
        rc.close()


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="small counts (smoke test)")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--out", default=os.path.join(ROOT, "benchmarks", "results", "async.md"))
    ap.add_argument("--no-cluster", action="store_true",
                    help="skip the Redis Cluster rows (which start 3 redis-servers)")
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
    print(text, flush=True)
    if not args.no_cluster:
        more = run_cluster(args.quick, args.repeat)
        print(more)
        text += "\n" + more
    if not args.quick:
        os.makedirs(os.path.dirname(args.out), exist_ok=True)
        with open(args.out, "w") as fh:
            fh.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
