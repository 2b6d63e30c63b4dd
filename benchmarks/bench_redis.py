"""RedisFilter against redis-py on one redis-server, and against the server's own limit.

    .venv/bin/python benchmarks/bench_redis.py            # full run, writes benchmarks/results/redis.md
    .venv/bin/python benchmarks/bench_redis.py --quick    # small counts (smoke test)

One redis-server is started here on a free port of 127.0.0.1 (no persistence) and stopped at
the end.  The same filter geometry (capacity 1,000,000, error_rate 0.01: m = 9,585,059 bits,
k = 7) and the same keys are used by every contender, each on its own Redis key:

- RedisFilter, mode="bitfield" (one BITFIELD per key) and mode="setbit" (k SETBIT/GETBIT);
- redis-py (with its hiredis parser when installed) doing the same job by hand, as a Bloom
  filter written over redis-py does: the bit indices are computed in Python beforehand with
  ling_bloom.indices (NOT timed: only the Redis part is),
  then a non-transactional pipeline of SETBIT/GETBIT -- or of BITFIELD -- is built, executed,
  and its replies folded into one bool per key (timed);
- the server's limit for the same command stream: `redis-cli --pipe` (a C client that writes
  the raw protocol as fast as the server takes it) on the exact bytes of the 10,000-key
  batches, and the ceiling given by the server's own CPU time per key during RedisFilter's
  10,000-key batches (INFO cpu), i.e. what a client that costs nothing could reach.

Sizes: single keys (add/test, one round trip each), batches of 100 and of 10,000 keys.
Goals: batches >= 3x redis-py, single keys no slower than redis-py, 10,000-key
batch throughput >= 70% of the server's limit.  Each figure is the best of --repeat runs;
other load on the machine shows up as noise, so compare the ratios, taken in the same run.
"""
from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
import tempfile
import time
from typing import Callable, Dict, List, Optional, Tuple

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "support"))  # redis_server.py: the server helper

import ling_bloom as lb  # noqa: E402
from redis_server import RedisServer, redis_server_path  # noqa: E402

RedisFilter = getattr(lb, "RedisFilter", None) or lb._core.RedisFilter

CAPACITY, ERROR_RATE = 1_000_000, 0.01


def _best(fn: Callable[[], None], repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def _resp(args: List[bytes]) -> bytes:
    return b"*%d\r\n" % len(args) + b"".join(b"$%d\r\n%s\r\n" % (len(a), a) for a in args)


class Bench:
    def __init__(self, srv: RedisServer, quick: bool, repeat: int):
        self.srv = srv
        self.repeat = repeat
        self.counts = {1: 200 if quick else 1000, 100: 10 if quick else 100,
                       10_000: 1 if quick else 5}
        n_keys = max(self.counts[1], 100 * self.counts[100], 10_000)
        self.keys = [f"user:{i}" for i in range(n_keys)]
        p = lb.estimate(CAPACITY, ERROR_RATE)
        self.m, self.k = p.m, p.k
        self.idx = [lb.indices(key, self.m, self.k) for key in self.keys]
        self.raw = srv.client()
        self.results: Dict[Tuple[str, str, int], float] = {}  # (impl, op, size) -> keys/s
        self.server_cpu: Dict[str, float] = {}  # mode -> server CPU seconds per key

    def server_cpu_now(self) -> float:
        info = self.raw.command("INFO", "cpu").decode()
        d = dict(line.split(":", 1) for line in info.splitlines() if ":" in line)
        return float(d["used_cpu_user"]) + float(d["used_cpu_sys"])

    # -- one contender at one size: keys per second
    def run(self, impl: str, op: str, size: int, single: Callable[[int], object],
            batch: Callable[[int, int], object]) -> None:
        reps = self.counts[size]
        if size == 1:
            def go() -> None:
                for i in range(reps):
                    single(i)
        else:
            def go() -> None:
                for r in range(reps):
                    batch(r * size % len(self.keys), size)
        go()  # warm up (connections, server-side allocation of the bitmap)
        cpu0 = self.server_cpu_now()
        t = _best(go, self.repeat)
        cpu = self.server_cpu_now() - cpu0
        self.results[(impl, op, size)] = reps * size / t
        if impl.startswith("RedisFilter") and size == 10_000:
            self.server_cpu[(impl, op)] = cpu / (reps * size * self.repeat)

    def ling_bloom(self, mode: str) -> None:
        f = RedisFilter(f"lb:{mode}", CAPACITY, ERROR_RATE, host=self.srv.host,
                        port=self.srv.port, mode=mode)
        keys = self.keys
        name = f"RedisFilter {mode}"
        for size in (1, 100, 10_000):
            self.run(name, "add", size, lambda i: f.add(keys[i]),
                     lambda s, n: f.add_many(keys[s:s + n]))
            self.run(name, "test", size, lambda i: f.test(keys[i]),
                     lambda s, n: f.test_many(keys[s:s + n]))
        f.close()

    def redis_py(self, client, cmd: str) -> None:
        idx, k = self.idx, self.k
        key = f"py:{cmd}"
        name = f"redis-py {cmd.lower()}"

        if cmd == "SETBIT":
            def batch(start: int, n: int, write: bool) -> List[bool]:
                pipe = client.pipeline(transaction=False)
                for ii in idx[start:start + n]:
                    for i in ii:
                        if write:
                            pipe.setbit(key, i, 1)
                        else:
                            pipe.getbit(key, i)
                res = pipe.execute()
                if write:
                    return [0 in res[j * k:(j + 1) * k] for j in range(n)]
                return [0 not in res[j * k:(j + 1) * k] for j in range(n)]
        else:
            def batch(start: int, n: int, write: bool) -> List[bool]:
                pipe = client.pipeline(transaction=False)
                for ii in idx[start:start + n]:
                    args: list = []
                    for i in ii:
                        if write:
                            args += ("SET", "u1", i, 1)
                        else:
                            args += ("GET", "u1", i)
                    pipe.execute_command("BITFIELD", key, *args)
                res = pipe.execute()
                return [(0 in r) if write else (0 not in r) for r in res]

            def one(i: int, write: bool) -> bool:  # a single command: no pipeline needed
                args: list = []
                for j in idx[i]:
                    args += ("SET", "u1", j, 1) if write else ("GET", "u1", j)
                r = client.execute_command("BITFIELD", key, *args)
                return (0 in r) if write else (0 not in r)

        for size in (1, 100, 10_000):
            if size == 1 and cmd == "BITFIELD":
                single_add, single_test = (lambda i: one(i, True)), (lambda i: one(i, False))
            else:
                single_add = lambda i: batch(i, 1, True)  # noqa: E731  k SETBITs, one round trip
                single_test = lambda i: batch(i, 1, False)  # noqa: E731
            self.run(name, "add", size, single_add, lambda s, n: batch(s, n, True))
            self.run(name, "test", size, single_test, lambda s, n: batch(s, n, False))

    # -- the server's limit for the same stream, measured with redis-cli --pipe
    def cli_pipe(self, mode: str, cli: str) -> None:
        reps = max(2, self.counts[10_000])
        n = 10_000
        for op in ("add", "test"):
            key = f"cli:{mode}".encode()
            parts = []
            for ii in self.idx[:n]:
                offs = [str(i).encode() for i in ii]
                if mode == "bitfield":
                    args = [b"BITFIELD", key]
                    for o in offs:
                        args += [b"SET", b"u1", o, b"1"] if op == "add" else [b"GET", b"u1", o]
                    parts.append(_resp(args))
                else:
                    for o in offs:
                        parts.append(_resp([b"SETBIT", key, o, b"1"] if op == "add"
                                           else [b"GETBIT", key, o]))
            stream = b"".join(parts) * reps
            with tempfile.TemporaryFile() as fh:
                fh.write(stream)

                def go() -> None:
                    fh.seek(0)
                    subprocess.run([cli, "-h", self.srv.host, "-p", str(self.srv.port), "--pipe"],
                                   stdin=fh, stdout=subprocess.DEVNULL,
                                   stderr=subprocess.DEVNULL, check=True)
                go()
                t = _best(go, self.repeat)
            self.results[(f"server limit {mode} (redis-cli --pipe)", op, n)] = reps * n / t


def _fmt_rate(v: Optional[float]) -> str:
    return "-" if v is None else f"{v:,.0f}"


def report(b: Bench, hiredis: Optional[bool], have_py: bool, have_cli: bool) -> str:
    r = b.results
    lines: List[str] = []
    say = lines.append
    say("# RedisFilter benchmark")
    say("")
    say(f"redis-server {_server_version()} on 127.0.0.1 (no persistence), {platform.machine()}, "
        f"{os.cpu_count()} CPUs, Python {platform.python_version()}, "
        f"redis-py {_redis_py_version()} (hiredis parser: {hiredis}).  Filter: capacity "
        f"{CAPACITY:,}, error_rate {ERROR_RATE} (m = {b.m:,}, k = {b.k}).  Best of {b.repeat}; "
        f"counts: {b.counts[1]} single keys, {b.counts[100]} batches of 100, "
        f"{b.counts[10_000]} batches of 10,000.  Load average at start: {_load()}.")
    say("")
    say("Keys per second (single keys: one round trip per key):")
    say("")
    say("| contender | add 1 | test 1 | add 100 | test 100 | add 10k | test 10k |")
    say("|---|---:|---:|---:|---:|---:|---:|")
    impls = sorted({i for i, _, _ in r}, key=lambda s: (not s.startswith("RedisFilter"),
                                                        s.startswith("server"), s))
    for impl in impls:
        cells = [_fmt_rate(r.get((impl, op, size))) for size in (1, 100, 10_000)
                 for op in ("add", "test")]
        say(f"| {impl} | " + " | ".join(cells) + " |")
    say("")
    if b.server_cpu:
        say("Server CPU per key during RedisFilter's 10,000-key batches (INFO cpu): "
            + ", ".join(f"{impl.split()[-1]} {op} {v * 1e6:.2f} us"
                        for (impl, op), v in sorted(b.server_cpu.items())))
        say("")

    say("## Ratios against the goals")
    say("")
    say("| goal | measured | ratio | met |")
    say("|---|---|---:|:---:|")
    checks: List[Tuple[str, str, float, float]] = []
    if have_py:
        for mode, cmd in (("bitfield", "bitfield"), ("setbit", "setbit")):
            ours, theirs = f"RedisFilter {mode}", f"redis-py {cmd}"
            for size in (100, 10_000):
                for op in ("add", "test"):
                    a, c = r[(ours, op, size)], r[(theirs, op, size)]
                    checks.append((f"batch {size:,} {op}: {ours} vs {theirs} (>= 3x)",
                                   f"{a:,.0f} vs {c:,.0f} keys/s", a / c, 3.0))
            for op in ("add", "test"):
                a, c = r[(ours, op, 1)], r[(theirs, op, 1)]
                checks.append((f"single {op}: {ours} vs {theirs} (no slower)",
                               f"{1e6 / a:.0f} vs {1e6 / c:.0f} us", a / c, 1.0))
        # against redis-py's best way of doing it
        for size in (1, 100, 10_000):
            for op in ("add", "test"):
                best_py = max(r[(f"redis-py {c}", op, size)] for c in ("bitfield", "setbit"))
                a = r[("RedisFilter bitfield", op, size)]
                checks.append((f"size {size:,} {op}: RedisFilter (default) vs redis-py's best "
                               f"({'>= 3x' if size > 1 else 'no slower'})",
                               f"{a:,.0f} vs {best_py:,.0f} keys/s", a / best_py,
                               3.0 if size > 1 else 1.0))
    for mode in ("bitfield", "setbit"):
        for op in ("add", "test"):
            a = r[(f"RedisFilter {mode}", op, 10_000)]
            if have_cli:
                c = r[(f"server limit {mode} (redis-cli --pipe)", op, 10_000)]
                checks.append((f"batch 10,000 {op} {mode}: vs redis-cli --pipe, same stream "
                               "(>= 70%)", f"{a:,.0f} vs {c:,.0f} keys/s", a / c, 0.7))
            cpu = b.server_cpu.get((f"RedisFilter {mode}", op))
            if cpu:
                c = 1.0 / cpu
                checks.append((f"batch 10,000 {op} {mode}: vs the server-CPU ceiling "
                               "(>= 70%)", f"{a:,.0f} vs {c:,.0f} keys/s", a / c, 0.7))
    for goal, measured, ratio, need in checks:
        say(f"| {goal} | {measured} | {ratio:.2f} | {'yes' if ratio >= need else 'NO'} |")
    say("")
    say("redis-py's rows exclude hashing (its bit indices are computed before the clock starts); "
        "RedisFilter's rows include hashing, encoding and reply parsing.  The server-CPU "
        "ceiling is keys divided by the CPU time redis-server itself spent during the batches: "
        "the throughput of a client that costs nothing, with the server 100% busy.  "
        "redis-cli --pipe is a real C client on the same bytes; when RedisFilter beats it, "
        "the ceiling is the stricter measure.")
    return "\n".join(lines) + "\n"


def _server_version() -> str:
    try:
        out = subprocess.run([redis_server_path() or "redis-server", "--version"],
                             capture_output=True, text=True, timeout=10).stdout
        return out.split("v=")[1].split()[0]
    except Exception:  # noqa: BLE001
        return "?"


def _redis_py_version() -> str:
    try:
        import redis

        return redis.__version__
    except ImportError:
        return "not installed"


def _load() -> str:
    try:
        return ", ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        return "?"


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="small counts (a smoke test)")
    ap.add_argument("--repeat", type=int, default=3, help="runs per figure (best is kept)")
    ap.add_argument("--out", default=os.path.join(ROOT, "benchmarks", "results", "redis.md"),
                    help="markdown report ('' for none)")
    args = ap.parse_args(argv)

    if not redis_server_path():
        print("bench_redis: redis-server is not installed (apt-get install redis-server); "
              "skipped")
        return 0
    try:
        import redis
        from redis.utils import HIREDIS_AVAILABLE as hiredis
    except ImportError:
        redis, hiredis = None, None
        print("bench_redis: redis-py is not installed: only RedisFilter and the server limit")
    cli = None
    import shutil

    cli = shutil.which("redis-cli")
    with RedisServer() as srv:
        b = Bench(srv, args.quick, max(1, args.repeat))
        t0 = time.perf_counter()
        for mode in ("bitfield", "setbit"):
            b.ling_bloom(mode)
        if redis is not None:
            client = redis.Redis(host=srv.host, port=srv.port)
            b.redis_py(client, "BITFIELD")
            b.redis_py(client, "SETBIT")
            client.close()
        if cli:
            for mode in ("bitfield", "setbit"):
                b.cli_pipe(mode, cli)
        text = report(b, hiredis, redis is not None, cli is not None)
        b.raw.close()
    print(text)
    print(f"(bench_redis took {time.perf_counter() - t0:.1f} s)")
    write_report(text, args.out)
    return 0


def write_report(text: str, out: str) -> None:
    """Write a benchmark's markdown report to out ('' for none) and say where."""
    if out:
        os.makedirs(os.path.dirname(out), exist_ok=True)
        with open(out, "w") as fh:
            fh.write(text)
        print(f"written to {os.path.relpath(out, ROOT)}")


if __name__ == "__main__":
    sys.exit(main())
