"""Stress per type: threads adding, testing, resetting, copying, comparing and closing, and
forks during batches (the workload is tests/support/stress.py; it runs in a process of its
own, so that a crash or a hang is reported as this test's failure with the worker's output).

LING_BLOOM_STRESS_SECONDS sets the length of each run (default 3 s; `make sanitize` and
CI use the same).  Every run must end with exit status 0: no crash, no hang (the worker's
faulthandler watchdog and the timeout here turn one into a failure), no false negative,
no exception other than ClosedError (and FilterFullError from the full RedisBloom
filter), no failed or hung forked child.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

SUPPORT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "support")
SECONDS = float(os.environ.get("LING_BLOOM_STRESS_SECONDS", "3"))
TIMEOUT = SECONDS + 240  # generous: the worker's own watchdog fires first

pytestmark = pytest.mark.slow


def run_stress(kind: str, url: str | None = None) -> dict:
    args = [sys.executable, os.path.join(SUPPORT, "stress.py"), kind, str(SECONDS)]
    if url:
        args.append(url)
    try:
        p = subprocess.run(args, capture_output=True, text=True, timeout=TIMEOUT)
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"the {kind} stress run hung for {TIMEOUT} s:\n{e.stderr}")
    last = p.stdout.strip().splitlines()[-1] if p.stdout.strip() else "{}"
    counts = json.loads(last) if last.startswith("{") else {}
    # One line per run, to read the counts with -s (or in the log of make sanitize).
    print(f"stress {kind}: rc={p.returncode} {last}")
    assert p.returncode == 0, (
        f"the {kind} stress run failed (exit {p.returncode}; negative: killed by that "
        f"signal)\nstdout:\n{p.stdout[-4000:]}\nstderr:\n{p.stderr[-8000:]}")
    assert counts.get("problems") == [], counts
    # It really ran: operations, forks and closes all happened.
    assert counts["operations"] > 0 and counts["forks"] > 0 and counts["closes"] > 0, counts
    return counts


@pytest.mark.parametrize("kind", ["blocked", "memory", "counting", "scalable"])
def test_stress_in_memory(kind):
    run_stress(kind)


@pytest.mark.parametrize("kind", ["redis", "redis-blocked"])  # RedisFilter's two layouts
def test_stress_redis_filter(clean_redis, kind):
    run_stress(kind, clean_redis.url)


def test_stress_redisbloom_filter(bf_server_factory):
    srv = bf_server_factory()  # a redis-server of its own with the real RedisBloom module
    run_stress("redisbloom", srv.url)
