"""Would a blocked (split-block) layout make RedisFilter cheaper for the server?

    .venv/bin/python benchmarks/bench_redis_blocked.py          # writes results/redis_blocked.md
    .venv/bin/python benchmarks/bench_redis_blocked.py --quick  # 100,000 keys, one run: a smoke test

bench_redis.py's server-limit method, on command streams only (no client library is timed):
for each geometry, the exact RESP bytes of 10,000-key batches are written to a file and fed
to `redis-cli --pipe` (a C client that writes as fast as the server reads), on one
redis-server of tests/support/redis_server.py (127.0.0.1, a free port, no persistence).  Two
figures per stream, both keys per second:

- "cli --pipe": keys / wall time of redis-cli --pipe;
- "server CPU": keys / the CPU time redis-server itself spent on them (INFO cpu, user +
  sys): the ceiling of a client that costs nothing.  The ratio of the gain is taken on it.

Streams, per key (the standard geometry is lb.estimate's, the blocked one
BlockedFilter.geometry's; the offsets are the real ones of each layout's hash):

- standard add:  BITFIELD key SET u1 o1 1 ... SET u1 ok 1   (RedisFilter's standard layout)
- standard test: BITFIELD key GET u1 o1 ... GET u1 ok       (the same)
- blocked add:   BITFIELD key SET u1 b1 1 ...               (the key's distinct bits, at most
                                                             k, in one 64-byte block: what
                                                             layout="blocked" sends)
- blocked test:  GETRANGE key a a+63                         (one range read: what
                                                             layout="blocked" sends)
                 BITFIELD key GET u1 b1 ...                  (its bits, one block: not used)
                 BITFIELD key GET i64 w ... x8               (the block's 8 lanes: not used)

A blocked filter's k is a multiple of 8 with one bit or more in every lane, so a test needs
the whole block: never fewer than 8 words.  The add stays k SET u1 fields: BITFIELD SET is the
only atomic OR with the old bit in its reply (SETRANGE overwrites, BITOP works on whole keys).
Each stream runs on its own Redis key, the adds first (so the tests read a filled bitmap of
the full size).  Then RedisFilter itself, layout="standard" against layout="blocked", on the
same keys: add_many / test_many of 10,000-key batches (hashing, encoding and the reply checks
included), keys per second of the client and the server's CPU per key meanwhile.
Best of --repeat runs; compare the ratios, taken in the same run.
"""
from __future__ import annotations

import argparse
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from typing import Dict, List, Optional, Tuple

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_redis import ROOT, _load, _resp, _server_version, write_report  # noqa: E402
from redis_server import RedisServer, redis_server_path  # noqa: E402  (bench_redis's path)

import ling_bloom as lb  # noqa: E402

CONFIGS = [(1_000_000, 0.01), (10_000_000, 0.001)]
QUICK_CONFIGS = [(100_000, 0.01)]
SAVED_HEADER = 40  # csrc/core/format.h: the header of a fixed filter's to_bytes()
BATCH = 10_000


def blocked_bits(key: str, m: int, k: int, one: "lb.BlockedFilter") -> Tuple[int, List[int]]:
    """(block, Redis bit offsets of the key's k bits) in a BlockedFilter's bytes stored as a
    Redis string.  The block is floor(h1 * nblocks / 2^64) (csrc/core/blocked.h); the bits
    inside it do not depend on the filter's size, so a one-block BlockedFilter with the same
    k (one) shows them: lane i, bit b is byte 8 i + b // 8, which Redis numbers MSB first."""
    h1, _ = lb.hash_pair(key, "xxh3-block")
    block = (h1 * (m // 512)) >> 64
    one.reset()
    one.add(key)
    payload = one.to_bytes()[SAVED_HEADER:SAVED_HEADER + 64]
    offs = [block * 512 + 8 * byte + 7 - bit
            for byte, v in enumerate(payload) for bit in range(8) if v >> bit & 1]
    assert len(offs) == one.bits_set  # the header's length is right: the payload holds the bits
    return block, offs


def streams(n_cap: int, p: float, keys: List[str]) -> Dict[Tuple[str, str], Tuple[bytes, str]]:
    """(layout, op) -> (the RESP bytes of the batch, what it sends per key)."""
    std = lb.estimate(n_cap, p)
    bm, bk = lb.BlockedFilter.geometry(n_cap, p)
    out: Dict[Tuple[str, str], Tuple[bytes, str]] = {}
    s_add, s_test, b_add, b_test_u1, b_range, b_i64 = [], [], [], [], [], []
    ks, kb = b"std", b"blk"
    one = lb.BlockedFilter(m=512, k=bk)
    for key in keys:
        offs = [str(i).encode() for i in lb.indices(key, std.m, std.k)]
        s_add.append(_resp([b"BITFIELD", ks] + [a for o in offs for a in (b"SET", b"u1", o, b"1")]))
        s_test.append(_resp([b"BITFIELD", ks] + [a for o in offs for a in (b"GET", b"u1", o)]))
        block, boffs = blocked_bits(key, bm, bk, one)
        bo = [str(o).encode() for o in boffs]
        b_add.append(_resp([b"BITFIELD", kb] + [a for o in bo for a in (b"SET", b"u1", o, b"1")]))
        b_test_u1.append(_resp([b"BITFIELD", kb] + [a for o in bo for a in (b"GET", b"u1", o)]))
        b_range.append(_resp([b"GETRANGE", kb, b"%d" % (64 * block), b"%d" % (64 * block + 63)]))
        b_i64.append(_resp([b"BITFIELD", kb] + [a for i in range(8) for a in
                                                (b"GET", b"i64", b"%d" % (512 * block + 64 * i))]))
    out[("standard", "add")] = (b"".join(s_add), f"BITFIELD SET u1 x{std.k}")
    out[("standard", "test")] = (b"".join(s_test), f"BITFIELD GET u1 x{std.k}")
    out[("blocked", "add")] = (b"".join(b_add), f"BITFIELD SET u1 x{bk} at most (its distinct bits), one block")
    out[("blocked", "test")] = (b"".join(b_range), "GETRANGE a a+63")
    out[("blocked", "test u1")] = (b"".join(b_test_u1), f"BITFIELD GET u1 x{bk} at most, one block")
    out[("blocked", "test i64")] = (b"".join(b_i64), "BITFIELD GET i64 x8")
    return out


class Server:
    def __init__(self, srv: RedisServer, cli: str):
        self.srv, self.cli = srv, cli
        self.raw = srv.client()

    def cpu(self) -> float:
        info = self.raw.command("INFO", "cpu").decode()
        d = dict(line.split(":", 1) for line in info.splitlines() if ":" in line)
        return float(d["used_cpu_user"]) + float(d["used_cpu_sys"])

    def pipe(self, stream: bytes, reps: int, repeat: int) -> Tuple[float, float]:
        """(keys/s of redis-cli --pipe, keys/s at the server-CPU ceiling), best of repeat."""
        n = reps * BATCH
        with tempfile.TemporaryFile() as fh:
            fh.write(stream * reps)
            best_wall = best_cpu = float("inf")
            for _ in range(repeat):
                fh.seek(0)
                c0, t0 = self.cpu(), time.perf_counter()
                subprocess.run([self.cli, "-h", self.srv.host, "-p", str(self.srv.port), "--pipe"],
                               stdin=fh, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                               check=True, timeout=300)
                t1 = time.perf_counter()
                best_wall, best_cpu = min(best_wall, t1 - t0), min(best_cpu, self.cpu() - c0)
        return n / best_wall, n / best_cpu


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true",
                    help="one small filter, one batch, one run (a smoke test)")
    ap.add_argument("--reps", type=int, default=10, help="10,000-key batches per stream run")
    ap.add_argument("--repeat", type=int, default=3, help="runs per figure (best is kept)")
    ap.add_argument("--out", default=os.path.join(ROOT, "benchmarks", "results",
                                                  "redis_blocked.md"))
    args = ap.parse_args(argv)
    cli = shutil.which("redis-cli")
    if not redis_server_path() or not cli:
        print("bench_redis_blocked: needs redis-server and redis-cli; skipped")
        return 0
    reps = 1 if args.quick else args.reps
    repeat = 1 if args.quick else max(1, args.repeat)
    configs = QUICK_CONFIGS if args.quick else CONFIGS
    keys = [f"user:{i}" for i in range(BATCH)]
    lines: List[str] = []
    say = lines.append
    t_start = time.perf_counter()
    load = _load()
    with RedisServer() as srv:
        s = Server(srv, cli)
        say("# Blocked layout for RedisFilter: the server's side")
        say("")
        say(f"redis-server {_server_version()} on 127.0.0.1 (no persistence), "
            f"{platform.machine()}, {os.cpu_count()} CPUs.  redis-cli --pipe on the exact "
            f"bytes of {reps} batches of {BATCH:,} keys per run, best of {repeat}.  "
            f"Load average at start: {load}.  Command: "
            "`.venv/bin/python benchmarks/bench_redis_blocked.py`.")
        say("")
        say("| filter | layout | op | sends per key | cli --pipe keys/s | server-CPU keys/s "
            "| server us/key | vs standard (CPU) |")
        say("|---|---|---|---|---:|---:|---:|---:|")
        for n_cap, p in configs:
            std = lb.estimate(n_cap, p)
            bm, bk = lb.BlockedFilter.geometry(n_cap, p)
            st = streams(n_cap, p, keys)
            s.raw.command("FLUSHALL")
            # fill both bitmaps to their full size first (a test reads a bitmap of the real size)
            s.raw.command("SETBIT", "std", str(std.m - 1), "0")
            s.raw.command("SETBIT", "blk", str(bm - 1), "0")
            res: Dict[Tuple[str, str], Tuple[float, float]] = {}
            for key in (("standard", "add"), ("blocked", "add"), ("standard", "test"),
                        ("blocked", "test"), ("blocked", "test u1"), ("blocked", "test i64")):
                res[key] = s.pipe(st[key][0], reps, repeat)
            label = (f"{n_cap:,} at {p} (standard m={std.m:,} k={std.k}; "
                     f"blocked m={bm:,} k={bk})")
            for (layout, op), (wall, cpu) in res.items():
                base = res[("standard", op.split()[0])][1]
                say(f"| {label} | {layout} | {op} | {st[(layout, op)][1]} | {wall:,.0f} | "
                    f"{cpu:,.0f} | {1e6 / cpu:.2f} | {cpu / base:.2f} |")
                label = ""
        say("")
        say("RedisFilter itself, 10,000-key batches (add_many / test_many), keys per second "
            "of the client; server CPU per key meanwhile:")
        say("")
        say("| filter | op | standard keys/s | blocked keys/s | blocked / standard | "
            "server us/key standard | blocked |")
        say("|---|---|---:|---:|---:|---:|---:|")
        for n_cap, p in configs:
            s.raw.command("FLUSHALL")
            rows = {}
            for layout in ("standard", "blocked"):
                f = lb.RedisFilter(f"rf:{layout}", n_cap, p, url=srv.url, layout=layout)
                f.test("warm up")  # the meta key's look and claim
                for op, call in (("add", f.add_many), ("test", f.test_many)):
                    best = best_cpu = float("inf")
                    for _ in range(repeat):
                        c0, t0 = s.cpu(), time.perf_counter()
                        for _ in range(reps):
                            call(keys)
                        best = min(best, time.perf_counter() - t0)
                        best_cpu = min(best_cpu, s.cpu() - c0)
                    rows[(layout, op)] = (reps * BATCH / best, best_cpu / (reps * BATCH))
                f.close()
            for op in ("add", "test"):
                (a, ca), (b, cb) = rows[("standard", op)], rows[("blocked", op)]
                say(f"| {n_cap:,} at {p} | {op} | {a:,.0f} | {b:,.0f} | {b / a:.2f} | "
                    f"{ca * 1e6:.2f} | {cb * 1e6:.2f} |")
    say("")
    say("\"vs standard (CPU)\" is the server-CPU ceiling of the row over the standard layout's "
        "for the same op (add or test) and filter: above 1, the server does the blocked "
        "request for less CPU.")
    text = "\n".join(lines) + "\n"
    print(text)
    print(f"(bench_redis_blocked took {time.perf_counter() - t_start:.1f} s)")
    write_report(text, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
