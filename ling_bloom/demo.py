"""The demo behind `python -m ling_bloom demo` (`make demo`): each filter at work, with its
measured false-positive rate next to the one it promises, BlockedFilter beside MemoryFilter,
the Redis filters on a private redis-server, and the guard in front of a web app."""
from __future__ import annotations

import os
import tempfile
import time
from typing import Callable, List, Optional, TextIO

import ling_bloom as lb


def _rate(positives: int, probes: int) -> str:
    return f"{positives / probes:.4%}"


def _timed(fn: Callable[[], object]) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def run(n: int = 200_000, error_rate: float = 0.01, out: Optional[TextIO] = None) -> int:
    """Run the demo, writing to out (stdout by default).  Returns an exit code."""
    import sys

    w = out or sys.stdout

    def say(line: str = "") -> None:
        print(line, file=w)

    present: List[str] = [f"user:{i}" for i in range(n)]
    absent: List[str] = [f"absent:{i}" for i in range(n)]

    say(f"ling_bloom {lb.__version__} demo: n = {n:,} keys, error_rate = {error_rate}")
    params = lb.estimate(n, error_rate)
    say(f"estimate({n}, {error_rate}) -> m = {params.m:,} bits ({params.nbytes:,} bytes), "
        f"k = {params.k}")
    say()

    say("MemoryFilter (bit array)")
    with lb.MemoryFilter(n, error_rate) as mf:
        t_add = _timed(lambda: mf.update(present))
        found = mf.test_many(present)
        t_test = _timed(lambda: mf.test_many(absent))
        fp = sum(mf.test_many(absent))
        say(f"  added {n:,} keys in {t_add * 1e3:.1f} ms, tested {n:,} absent keys in "
            f"{t_test * 1e3:.1f} ms")
        say(f"  false negatives: {found.count(False)} (always 0)")
        say(f"  false positives: {fp:,} of {n:,} = {_rate(fp, n)}  (theory "
            f"{lb.false_positive_rate(mf.m, mf.k, n):.4%}, promise {error_rate:.2%})")
        say(f"  approximate_count() = {mf.approximate_count():,}, fill = {mf.fill_ratio():.3f}, "
            f"memory = {mf.nbytes:,} bytes")
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "users.bloom")
            mf.save(path)
            again = lb.load(path)
            say(f"  saved to a file ({os.path.getsize(path):,} bytes) and loaded back: "
                f"equal = {again == mf}")
    say()

    say("BlockedFilter beside MemoryFilter: the same keys, the same promise")
    _blocked_beside_memory(say, present, absent, error_rate)
    say()

    say("Same keys with hash=\"ling-base\" (the Go library's FNV-1a scheme, kept for sharing "
        "a Redis bitmap with Go services that use the ling-base Go library)")
    with lb.MemoryFilter(n, error_rate, hash="ling-base") as gf:
        gf.update(present)
        fp = sum(gf.test_many(absent))
        say(f"  false positives: {fp:,} of {n:,} = {_rate(fp, n)}: the rate depends on the key "
            "shape, which is why it is not the default")
    say()

    say("CountingFilter (4-bit counters: can remove)")
    with lb.CountingFilter(n, error_rate) as cf:
        cf.update(present)
        for key in present[: n // 2]:
            cf.remove(key)
        still = sum(cf.test_many(present[n // 2:]))
        gone = sum(cf.test_many(present[: n // 2]))
        say(f"  removed the first half: {gone:,} of {n // 2:,} removed keys still test present "
            f"(false positives); {still:,} of {n - n // 2:,} kept keys test present")
        cf.add("hot")
        for _ in range(20):
            cf.add("hot")
        cf.remove("hot")
        say(f"  a key added 21 times saturates its counters at 15 and stays present after a "
            f"remove: count('hot') = {cf.count('hot')}")
    say()

    say("ScalableFilter (grows as keys arrive)")
    with lb.ScalableFilter(initial_capacity=max(1, n // 64), error_rate=error_rate) as sf:
        sf.update(present)
        fp = sum(sf.test_many(absent))
        say(f"  started for {max(1, n // 64):,} keys, now {sf.num_sub_filters} stages holding "
            f"{sf.approximate_count():,} keys")
        say(f"  false positives: {fp:,} of {n:,} = {_rate(fp, n)}  (the whole chain keeps "
            f"error_rate {error_rate:.2%})")
        before = sf.num_sub_filters
        sf.update(present)
        say(f"  adding the same keys again changes nothing: stages {before} -> "
            f"{sf.num_sub_filters}")
    say()

    _redis_demo(say, present, absent)
    say()

    from . import _demo_web

    _demo_web.run(say)
    return 0


def _blocked_beside_memory(say: Callable[[str], None], present: List[str], absent: List[str],
                           error_rate: float) -> None:
    """One row per filter: time to add every key and to test the absent ones, the false
    positives measured, the memory."""
    n = len(present)
    rows = []
    for cls in (lb.MemoryFilter, lb.BlockedFilter):
        with cls(n, error_rate) as f:
            t_add = min(_timed(lambda: (f.reset(), f.update(present))) for _ in range(3))
            t_test = min(_timed(lambda: f.test_many(absent)) for _ in range(3))
            t_one = _timed(lambda: [k in f for k in absent[:50_000]]) / min(n, 50_000)
            fp = sum(f.test_many(absent))
            assert all(f.test_many(present))
            rows.append((cls.__name__, t_add, t_test, t_one, fp, f.nbytes, f.m, f.k))
    say(f"  {'':<14} {'update()':>10} {'test_many()':>12} {'key in f':>10} "
        f"{'false positives':>22} {'memory':>14}")
    for name, t_add, t_test, t_one, fp, nbytes, m, k in rows:
        say(f"  {name:<14} {t_add * 1e9 / n:>7.1f} ns {t_test * 1e9 / n:>9.1f} ns "
            f"{t_one * 1e9:>7.1f} ns {fp:>9,} = {_rate(fp, len(absent)):>8} "
            f"{nbytes:>8,} bytes  (m = {m:,}, k = {k})")
    say(f"  per key, best of 3; both keep the {error_rate:.0%} promise.  BlockedFilter reads one "
        "64-byte block (a cache line) per key, at the price of about 5% more memory at 1%")


def _redis_demo(say: Callable[[str], None], present: List[str], absent: List[str]) -> None:
    from . import _demo_redis, _demo_redisbloom

    _demo_redis.run(say, present, absent)
    say("")
    _demo_redisbloom.run(say, present, absent)
