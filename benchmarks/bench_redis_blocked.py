"""Would a blocked layout pay on Redis?  The server's limit for each layout's command stream.

    .venv/bin/python benchmarks/bench_redis_blocked.py            # writes results/redis_blocked.md
    .venv/bin/python benchmarks/bench_redis_blocked.py --quick    # smoke run

Issue 15 asks, before a blocked RedisFilter is built, for the server-side gain measured with
the server-limit method of bench_redis.py.  No client code is timed here: each layout's
requests for 10,000 keys are written as raw protocol and fed to the server by
`redis-cli --pipe` (a C client that writes as fast as the server reads), and the server's own
CPU time per key is read from INFO cpu around the same runs.  One redis-server on a free port
of 127.0.0.1 (tests/redis_server.py), no persistence; the bitmap is allocated to its full size
first, so every read touches real memory.

Streams, per key (k bit indices from ling_bloom.indices, the standard layout's own):

  standard test   BITFIELD key GET u1 i1 ... GET u1 ik     (what RedisFilter sends today)
  blocked test    GETRANGE key a a+63                      (the key's 64-byte block, tested
                                                            by the client)
  standard add    BITFIELD key SET u1 i1 1 ... SET u1 ik 1 (today)
  blocked add     BITFIELD key SET u1 b1 1 ... SET u1 bk 1 with the k offsets inside one
                  512-bit block: an add must stay an atomic OR that reports whether a bit
                  was new, and Redis has no OR of a range, so a blocked add sends the same
                  k sub-commands, only closer together

Sizes: capacity 1e6 at 1% (k = 7) and 1e7 at 0.1% (k = 10).  Keys per second at the
server's limit (best of --repeat) and the ratio blocked / standard.
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from typing import Dict, List, Tuple

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "tests"))
sys.path.insert(0, HERE)

import ling_bloom as lb  # noqa: E402
from bench_redis import _best, _load, _resp, _server_version, write_report  # noqa: E402
from redis_server import RedisServer, redis_server_path  # noqa: E402

SIZES = [(1_000_000, 0.01), (10_000_000, 0.001)]
BATCH = 10_000


def streams(m: int, k: int, keys: List[str]) -> Dict[Tuple[str, str], bytes]:
    key = b"bf"
    out: Dict[Tuple[str, str], List[bytes]] = {}
    nblocks = m // 512
    for name in keys:
        idx = lb.indices(name, m, k)
        block = idx[0] * nblocks // m          # a block for the key, spread as a hash would
        base = block * 512
        inner = [base + (i % 512) for i in idx]  # k offsets inside that block
        std_get = [b"BITFIELD", key]
        std_set = [b"BITFIELD", key]
        blk_set = [b"BITFIELD", key]
        for i, j in zip(idx, inner):
            std_get += [b"GET", b"u1", b"%d" % i]
            std_set += [b"SET", b"u1", b"%d" % i, b"1"]
            blk_set += [b"SET", b"u1", b"%d" % j, b"1"]
        first = base // 8
        out.setdefault(("test", "standard"), []).append(_resp(std_get))
        out.setdefault(("test", "blocked"), []).append(
            _resp([b"GETRANGE", key, b"%d" % first, b"%d" % (first + 63)]))
        out.setdefault(("add", "standard"), []).append(_resp(std_set))
        out.setdefault(("add", "blocked"), []).append(_resp(blk_set))
    return {name: b"".join(parts) for name, parts in out.items()}


def server_cpu(raw) -> float:
    info = raw.command("INFO", "cpu").decode()
    d = dict(line.split(":", 1) for line in info.splitlines() if ":" in line)
    return float(d["used_cpu_user"]) + float(d["used_cpu_sys"])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="one small size, one pass")
    ap.add_argument("--repeat", type=int, default=5, help="runs per figure (best is kept)")
    ap.add_argument("--out", default=os.path.join(HERE, "results", "redis_blocked.md"),
                    help="markdown report ('' for none)")
    args = ap.parse_args(argv)
    cli = shutil.which("redis-cli")
    if not redis_server_path() or not cli:
        print("bench_redis_blocked: redis-server and redis-cli are needed; skipped")
        return 0
    sizes = [(100_000, 0.01)] if args.quick else SIZES
    reps_per_run = 1 if args.quick else 4
    repeat = 1 if args.quick else max(1, args.repeat)
    keys = [f"user:{i}" for i in range(BATCH)]
    rows = []
    t0 = time.perf_counter()
    load0 = _load()
    with RedisServer() as srv:
        raw = srv.client()
        version = _server_version()
        for n, p in sizes:
            g = lb.estimate(n, p)
            raw.command("DEL", "bf")
            raw.command("SETRANGE", "bf", str(g.m // 8 + 64), b"\x00")  # allocate it all
            for (op, layout), data in sorted(streams(g.m, g.k, keys).items()):
                with tempfile.TemporaryFile() as fh:
                    fh.write(data * reps_per_run)

                    def go() -> None:
                        fh.seek(0)
                        subprocess.run([cli, "-h", srv.host, "-p", str(srv.port), "--pipe"],
                                       stdin=fh, stdout=subprocess.DEVNULL,
                                       stderr=subprocess.DEVNULL, check=True)
                    go()
                    cpu0 = server_cpu(raw)
                    t = _best(go, repeat)
                    cpu = (server_cpu(raw) - cpu0) / (repeat * reps_per_run * BATCH)
                rows.append((n, p, g.k, op, layout, reps_per_run * BATCH / t, cpu))
        raw.close()
    elapsed = time.perf_counter() - t0
    lines = ["# A blocked layout on Redis: the server's limit for each layout's commands", "",
             f"- command: python benchmarks/bench_redis_blocked.py{' --quick' if args.quick else ''}",
             f"- redis-server {version} on 127.0.0.1, redis-cli --pipe, batches of {BATCH:,} "
             f"keys, best of {repeat}; load average at the start {load0}, at the end {_load()}; "
             f"run time {elapsed:.0f} s", "",
             "| n, p (k) | op | layout | keys/s at the server's limit | server CPU per key | "
             "blocked / standard |", "|---|---|---|---:|---:|---:|"]
    by = {(r[0], r[3], r[4]): r for r in rows}
    for n, p, k, op, layout, rate, cpu in rows:
        std = by[(n, op, "standard")][5]
        ratio = f"{rate / std:.2f}x" if layout == "blocked" else ""
        lines.append(f"| {n:,}, {p:g} ({k}) | {op} | {layout} | {rate:,.0f} | "
                     f"{cpu * 1e6:.2f} us | {ratio} |")
    text = "\n".join(lines) + "\n"
    print(text)
    write_report(text, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
