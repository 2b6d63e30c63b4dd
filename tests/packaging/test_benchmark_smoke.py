"""The memory benchmark runs end to end at a tiny size (no timing is checked).

Only the peers that import are run (the benchmark skips the others itself); the C floor
is built when a compiler and libxxhash are there and skipped otherwise.
"""
import json
import os
import re
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BENCH = os.path.join(ROOT, "benchmarks", "bench_memory.py")


def _table_rows(text):
    """Implementation names in the first column of every table line."""
    names = set()
    for line in text.splitlines():
        first = line.split("  ")[0].strip()
        if first:
            names.add(first)
    return names


@pytest.mark.skipif(not os.path.exists(BENCH), reason="benchmarks/ not in this checkout")
def test_memory_benchmark_quick_tiny(tmp_path):
    out = tmp_path / "results"
    r = subprocess.run(
        [sys.executable, BENCH, "--quick", "--sizes", "2000:0.01", "--keys",
         "short,uuid-bytes", "--repeat", "1", "--slow-keys", "200", "--no-chart",
         "--out-dir", str(out)],
        capture_output=True, text=True, timeout=300, cwd=ROOT,
    )
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    rows = _table_rows(r.stdout)
    assert "ling_bloom" in rows
    assert "set" in rows
    md = (out / "bench_memory.md").read_text()
    assert "| ling_bloom |" in md
    assert "| set |" in md
    assert "n = 2,000, p = 0.01" in md
    # The reference row, the fresh-key column and the per-key notes.
    assert "bare loop" in rows and "| bare loop |" in md
    assert "test+ fresh" in md
    # the note's form, not its sign: at n = 2,000 a filter's add can beat the bare loop's
    # call (a timing, which a test must not assert)
    assert re.search(r"ling_bloom per key over the bare loop \(ns\): add [+-]\d", md), md
    if "C floor" in rows:
        assert "of the C floor's speed (floor time / ling_bloom time): update " in md
    if "BlockedFilter C floor" in rows:
        assert ("ling_bloom BlockedFilter batches at this fraction of the BlockedFilter C "
                "floor's speed (floor time / ling_bloom BlockedFilter time): update ") in md
        # The floor runs BlockedFilter's layout, geometry and hash on the same keys: the
        # same absent keys are its false positives.
        for sec in json.loads((out / "bench_memory.json").read_text())["sections"]:
            by = {row["impl"]: row for row in sec["rows"]}
            assert by["BlockedFilter C floor"]["fp"] == by["ling_bloom BlockedFilter"]["fp"]
    assert (out / "bench_memory.txt").exists()
    assert (out / "bench_memory.json").exists()


@pytest.mark.skipif(not os.path.exists(BENCH), reason="benchmarks/ not in this checkout")
def test_blocked_table_ratios():
    """The README's BlockedFilter-against-abloom table: abloom's time / BlockedFilter's."""
    sys.path.insert(0, os.path.dirname(BENCH))
    try:
        import bench_memory
    finally:
        sys.path.pop(0)
    sec = {"n": 1_000_000, "p": 0.01, "keys": "short", "rows": [
        {"impl": "ling_bloom BlockedFilter", "add": 20.0, "test_present": 40.0,
         "test_absent": 10.0, "test_fresh": 50.0, "batch_add": 8.0},
        {"impl": "abloom", "add": 30.0, "test_present": 20.0, "test_absent": 10.0,
         "test_fresh": 60.0, "batch_add": 16.0},
        {"impl": "abloom (xxh64)", "add": 40.0, "test_present": 44.0},
    ]}
    table = bench_memory.blocked_table([sec, {"n": 10, "p": 0.5, "keys": "uuid", "rows": []}])
    assert table[2] == ("| 1e6, 1%, `user:N` | 20.0: 1.50 / 2.00 | 40.0: 0.50 / 1.10 "
                        "| 10.0: 1.00 / - | 50.0: 1.20 / - | 8.0: 2.00 / - |")
    assert len(table) == 3  # a section without both filters has no line
    assert bench_memory.blocked_table([]) == []


ASYNC_BENCH = os.path.join(ROOT, "benchmarks", "bench_async.py")


@pytest.mark.redis  # the benchmark starts its own redis-server
@pytest.mark.slow
@pytest.mark.skipif(not os.path.exists(ASYNC_BENCH), reason="benchmarks/ not in this checkout")
def test_async_benchmark_quick():
    pytest.importorskip("redis.asyncio")
    r = subprocess.run([sys.executable, ASYNC_BENCH, "--quick", "--repeat", "1", "--no-cluster"],
                       capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    _check_async_rows(r.stdout)
    assert "Redis Cluster" not in r.stdout


def _check_async_rows(out):
    rows = [line for line in out.splitlines() if line.startswith("| add") or
            line.startswith("| test")]
    assert len(rows) == 8 and all(line.rstrip().endswith("x |") for line in rows), out


@pytest.mark.cluster  # the benchmark's cluster rows start a cluster of 3 primaries
@pytest.mark.slow
@pytest.mark.skipif(not os.path.exists(ASYNC_BENCH), reason="benchmarks/ not in this checkout")
def test_async_benchmark_cluster_rows_quick():
    """The Redis Cluster rows: one bitmap and shards=3, batches of 100 and 10,000 and 200
    tasks, add and test.  RedisCluster is measured in every row; AsyncRedisFilter either is
    (a ratio and the goal) or the rows say that this build cannot route to a cluster."""
    pytest.importorskip("redis.asyncio.cluster")
    r = subprocess.run([sys.executable, ASYNC_BENCH, "--quick", "--repeat", "1"],
                       capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    _check_async_rows(r.stdout)
    if "On a Redis Cluster: skipped" in r.stdout:
        pytest.skip(r.stdout.strip().splitlines()[-1])
    cells = [[c.strip() for c in line.split("|")[1:-1]] for line in r.stdout.splitlines()
             if line.startswith("| one bitmap |") or line.startswith("| shards=3 |")]
    assert [c[:3] for c in cells] == [
        [f, op, size] for f in ("one bitmap", "shards=3") for op in ("add", "test")
        for size in ("100", "10,000", "200 tasks")], r.stdout
    for f, op, size, ours, theirs, ratio, goal in cells:
        assert float(theirs.replace(",", "")) > 0
        assert goal.startswith(">= 2x" if size == "200 tasks" else ">= 3x")
        if ours == "not available":
            assert ratio == "-"
            assert "ling_bloom: asyncio cluster filters not available in this build" in r.stdout
        else:
            assert float(ours.replace(",", "")) > 0 and re.fullmatch(r"\d+\.\d\dx", ratio)


REDIS_BLOCKED_BENCH = os.path.join(ROOT, "benchmarks", "bench_redis_blocked.py")


@pytest.mark.redis  # the benchmark starts its own redis-server
@pytest.mark.slow
@pytest.mark.skipif(not os.path.exists(REDIS_BLOCKED_BENCH),
                    reason="benchmarks/ not in this checkout")
def test_redis_blocked_benchmark_quick():
    r = subprocess.run([sys.executable, REDIS_BLOCKED_BENCH, "--quick", "--out", ""],
                       capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    if "skipped" in r.stdout:
        pytest.skip(r.stdout.strip())
    rows = [line.split("|") for line in r.stdout.splitlines() if line.startswith("| ")]
    streams = [c for c in rows if len(c) == 10 and c[2].strip() in ("standard", "blocked")]
    # six command streams (two standard, four blocked), each with its ratio to the standard
    # stream of the same op: 1.00 for the standard ones
    assert [(c[2].strip(), c[3].strip()) for c in streams] == [
        ("standard", "add"), ("blocked", "add"), ("standard", "test"), ("blocked", "test"),
        ("blocked", "test u1"), ("blocked", "test i64")], r.stdout
    assert all(float(c[8]) > 0 for c in streams) and float(streams[0][8]) == 1.0
    # RedisFilter itself, both layouts, add and test: client keys/s and the ratio
    itself = [c for c in rows if len(c) == 9 and c[1].startswith(" 100,000")]
    assert [c[2].strip() for c in itself] == ["add", "test"], r.stdout
    assert all(float(c[5]) > 0 for c in itself)


CLUSTER_BENCH = os.path.join(ROOT, "benchmarks", "bench_cluster.py")


@pytest.mark.cluster  # the benchmark starts its own cluster
@pytest.mark.slow
@pytest.mark.skipif(not os.path.exists(CLUSTER_BENCH), reason="benchmarks/ not in this checkout")
def test_cluster_benchmark_quick():
    pytest.importorskip("redis.cluster")
    r = subprocess.run([sys.executable, CLUSTER_BENCH, "--quick"],
                       capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    rows = [line for line in r.stdout.splitlines() if line.startswith("| RedisFilter")
            or line.startswith("| redis-py") or line.startswith("| server-CPU")]
    assert len(rows) == 8 and all(line.rstrip().endswith("× |") for line in rows), rows


COLUMNS_BENCH = os.path.join(ROOT, "benchmarks", "bench_columns.py")


@pytest.mark.skipif(not os.path.exists(COLUMNS_BENCH), reason="benchmarks/ not in this checkout")
def test_columns_benchmark_runs_at_a_tiny_size():
    r = subprocess.run([sys.executable, COLUMNS_BENCH, "--sizes", "2000", "--rounds", "1"],
                       capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    try:
        import abloom  # noqa: F401  (the bench extra's peer)
    except ImportError:
        assert "abloom: not installed" in r.stdout
        return
    for row in ("update, Arrow string column", "test_many, Arrow string column",
                "update, numpy int64"):
        assert f"| {row} |" in r.stdout
