"""The RedisFilter part of `python -m ling_bloom demo`.

When redis-server is installed, a private one is started on a free port of 127.0.0.1 (its own
temporary directory, no persistence) and stopped at the end; otherwise one line says how to
get it.
"""
from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from contextlib import contextmanager
from typing import Callable, Iterator, List, Optional, Sequence, Union

import ling_bloom as lb

_HOST = "127.0.0.1"


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((_HOST, 0))
        return s.getsockname()[1]


def _command(port: int, *args: Union[str, int]) -> bytes:
    """One command on a fresh connection; the raw reply line (enough for GETBIT / PTTL)."""
    out = [b"*%d\r\n" % len(args)]
    for a in args:
        b = str(a).encode()
        out.append(b"$%d\r\n%s\r\n" % (len(b), b))
    with socket.create_connection((_HOST, port), timeout=5) as s:
        s.sendall(b"".join(out))
        return s.makefile("rb").readline().rstrip()


def _int(port: int, *args: Union[str, int]) -> int:
    return int(_command(port, *args)[1:])


@contextmanager
def _server(exe: str, extra_args: Sequence[str] = ()) -> Iterator[int]:
    """A redis-server on a free port; yields the port; always stopped."""
    with tempfile.TemporaryDirectory(prefix="ling-bloom-demo-") as d:
        proc: Optional[subprocess.Popen] = None
        try:
            for _ in range(5):  # the free port may be taken before the server binds it
                port = _free_port()
                proc = subprocess.Popen(
                    [exe, "--port", str(port), "--bind", _HOST, "--save", "", "--appendonly",
                     "no", "--dir", d, "--logfile", os.path.join(d, "log"), "--daemonize", "no",
                     *extra_args],
                    stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL)
                deadline = time.monotonic() + 10
                while proc.poll() is None and time.monotonic() < deadline:
                    try:
                        if _command(port, "PING") == b"+PONG":
                            break
                    except OSError:
                        time.sleep(0.02)
                else:
                    proc.kill()
                    proc.wait()
                    proc = None
                    continue
                if proc.poll() is None:
                    break
                proc = None
            if proc is None:
                raise RuntimeError("redis-server did not start")
            yield port
        finally:
            if proc is not None:
                proc.terminate()
                try:
                    proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()


def _ms(t: float) -> str:
    return f"{t * 1e3:,.0f} ms"


def run(say: Callable[[str], None], present: List[str], absent: List[str],
        error_rate: float = 0.01) -> None:
    exe = shutil.which("redis-server")
    say("RedisFilter (a Redis bitmap shared by every process; hashing on the client)")
    if not exe:
        say("  skipped: redis-server is not installed (Debian/Ubuntu: "
            "sudo apt-get install redis-server; `make demo` installs it)")
        return
    cls = getattr(lb, "RedisFilter", None) or lb._core.RedisFilter
    n = len(present)
    with _server(exe) as port:
        url = f"redis://{_HOST}:{port}"
        say(f"  started a private redis-server at {url} (no persistence; stopped at the end)")

        # Two web processes sharing one filter: the second adopts the stored geometry.
        web1 = cls.from_url(url, "demo:users", n, error_rate, ttl=3600)
        half = n // 2
        t = time.perf_counter()
        web1.update(present[:half])
        t_add = time.perf_counter() - t
        web2 = cls.open(url, "demo:users")
        say(f"  process 1 added {half:,} keys in {_ms(t_add)} "
            f"({half / t_add:,.0f} keys/s, pipelined in round trips of 10,000 keys)")
        say(f"  process 2 opened the same key and adopted m = {web2.m:,}, k = {web2.k}: "
            f"it sees them all = {all(web2.test_many(present[:half]))}; "
            f"web2.add('new user') = {web2.add('new user')}, "
            f"then 'new user' in web1 = {'new user' in web1}")
        say(f"  ttl = 3600 s, refreshed by every write in the same round trip: "
            f"PTTL = {_int(port, 'PTTL', 'demo:users') / 1000:,.0f} s; "
            f"keys used: {[k.decode() for k in web1.key_names()]}")

        # Warm-up from the database: build locally, upload once.
        t = time.perf_counter()
        local = lb.MemoryFilter(n, error_rate)
        local.update(present)
        t_build = time.perf_counter() - t
        t = time.perf_counter()
        web1.load(local)
        t_load = time.perf_counter() - t
        say(f"  warm-up of all {n:,} keys: MemoryFilter built in {_ms(t_build)}, load() into "
            f"Redis in {_ms(t_load)} (OR-merged: other writers' bits are kept)")

        found = web2.test_many(present)
        t = time.perf_counter()
        fp = sum(web2.test_many(absent))
        t_test = time.perf_counter() - t
        say(f"  false negatives: {found.count(False)} (always 0); false positives: {fp:,} of "
            f"{len(absent):,} = {fp / len(absent):.4%}  (theory "
            f"{lb.false_positive_rate(web2.m, web2.k, n):.4%}, promise {error_rate:.2%}); "
            f"tested in {_ms(t_test)}")
        snap = web1.snapshot()
        local.add("new user")
        say(f"  snapshot() -> {snap!r}, equal to the local MemoryFilter plus 'new user': "
            f"{snap == local}; approximate_count() = {web1.approximate_count():,}")
        web1.close()
        web2.close()

        # hash="ling-base": the same bits a Go service using the ling-base Go library sets.
        with cls.from_url(url, "demo:go", 1_000_000, 0.01, hash="ling-base") as go:
            go.add("user:42")
            offsets = lb.indices("user:42", go.m, go.k, "ling-base")
            bits = [_int(port, "GETBIT", "demo:go", o) for o in offsets]
            say(f"  hash=\"ling-base\": add('user:42') set bits {offsets} of the plain Redis "
                f"string 'demo:go' (GETBIT -> {bits}): the offsets the ling-base Go library "
                "computes, so Go services read and write the same filter")
    say("  redis-server stopped")
