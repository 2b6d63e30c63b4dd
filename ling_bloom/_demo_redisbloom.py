"""The RedisBloomFilter part of the demo: run(say, present, absent).

Uses the server named by LING_BLOOM_REDISBLOOM_URL (a Redis with the RedisBloom module), or
starts fakeredis's TCP server (with BF.* through pyprobables) on a free port of 127.0.0.1
when fakeredis is importable; otherwise prints one line on how to get one.
"""
from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import uuid
from typing import Callable, List, Optional, Tuple

ENV_URL = "LING_BLOOM_REDISBLOOM_URL"

_SERVE = r"""
import sys
from fakeredis import TcpFakeServer
server = TcpFakeServer(("127.0.0.1", int(sys.argv[1])), server_version=(7, 4))
try:
    server.serve_forever(poll_interval=0.05)
finally:
    server.server_close()
"""


def _start_fake() -> Tuple[Optional[subprocess.Popen], Optional[str], str]:
    """(process, url, why-not)."""
    try:
        import fakeredis  # noqa: F401
        from fakeredis import TcpFakeServer  # noqa: F401
        import probables  # noqa: F401
    except ImportError:
        return None, None, ("no BF.* server at hand: set LING_BLOOM_REDISBLOOM_URL to a Redis "
                            "with the RedisBloom module, or pip install 'fakeredis[bf]' to "
                            "try it on a fake one")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([sys.executable, "-c", _SERVE, str(port)],
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return proc, f"redis://127.0.0.1:{port}/0", ""
        except OSError:
            time.sleep(0.05)
    proc.kill()
    proc.wait(5)
    return None, None, "could not start a fakeredis server"


def run(say: Callable[[str], None], present: List[str], absent: List[str]) -> None:
    import ling_bloom as lb

    url = os.environ.get(ENV_URL)
    proc = None
    where = "the RedisBloom module at $" + ENV_URL
    if not url:
        proc, url, why = _start_fake()
        if not url:
            say(f"RedisBloomFilter: {why}")
            return
        where = "a fakeredis server started for the demo (pure Python: slow, and not the module)"
    # the fake is slow: a sample is enough to show the behaviour
    n = min(len(present), 20_000 if proc is None else 5_000)
    keys, others = present[:n], absent[:n]
    key = f"ling_bloom:demo:{uuid.uuid4().hex[:8]}"
    try:
        say(f"RedisBloomFilter (BF.* on the server) at {where}")
        with lb.RedisBloomFilter(key, capacity=n, error_rate=0.01, url=url) as f:
            t0 = time.perf_counter()
            new = f.add_many(keys)
            t_add = time.perf_counter() - t0
            found = f.test_many(keys)
            fp = sum(f.test_many(others))
            say(f"  add_many({n:,}) in {t_add * 1e3:.0f} ms: {sum(new):,} reported new; "
                f"reserved = {f.is_reserved}")
            say(f"  false negatives: {found.count(False)} (always 0); false positives: {fp:,} "
                f"of {n:,} = {fp / n:.3%} (promise 1%)")
            info = f.info()
            say(f"  info(): capacity {info.capacity:,}, filters {info.filters}, items "
                f"{info.items:,}, expansion {info.expansion}; card() = {f.card():,}")
            chunks = f.dump()
            with lb.RedisBloomFilter(key + ":copy", url=url) as g:
                g.restore(chunks)
                say(f"  dump() -> {len(chunks)} chunk(s), {sum(len(c) for _, c in chunks):,} "
                    f"bytes; restored into another key: {all(g.test_many(keys[:1000]))} for "
                    "the first 1,000 keys")
                g.reset()
            with lb.RedisBloomFilter(key + ":small", capacity=10, non_scaling=True,
                                     url=url) as s:
                try:
                    s.add_many([f"k{i}" for i in range(25)])
                except lb.FilterFullError as e:
                    say(f"  a non-scaling filter of capacity 10 given 25 keys: FilterFullError "
                        f"(added = {e.added})")
                s.reset()
            f.reset()
    except lb.RedisError as e:
        say(f"  RedisBloomFilter failed: {type(e).__name__}: {e}")
    finally:
        if proc is not None:
            proc.terminate()
            try:
                proc.wait(5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)


if __name__ == "__main__":
    run(print, [f"user:{i}" for i in range(20_000)], [f"absent:{i}" for i in range(20_000)])
