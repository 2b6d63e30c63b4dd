"""Several threads on one filter: big batches (which release the GIL) mixed with single calls,
then one thread closes it.  No crash, no false negative, ClosedError afterwards."""
from __future__ import annotations

import sys
import threading

import pytest

import ling_bloom as lb
from hang_guard import run_threads

N_THREADS = 6
PER_THREAD = 30_000  # > several 2048-key chunks per batch


def make(kind: str):
    if kind == "memory":
        return lb.MemoryFilter(N_THREADS * PER_THREAD, 0.01)
    if kind == "counting":
        return lb.CountingFilter(N_THREADS * PER_THREAD, 0.01)
    if kind == "blocked":
        return lb.BlockedFilter(N_THREADS * PER_THREAD, 0.01)
    return lb.ScalableFilter(5_000, 0.01)  # grows while the threads run


@pytest.fixture(autouse=True)
def fast_switching():
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)  # switch threads often, to interleave single calls and chunks
    yield
    sys.setswitchinterval(old)


@pytest.mark.parametrize("kind", ["memory", "counting", "scalable", "blocked"])
def test_concurrent_add_and_test(kind):
    f = make(kind)
    barrier = threading.Barrier(N_THREADS)

    def worker(t: int):
        def run():
            mine = [f"t{t}:{i}" for i in range(PER_THREAD)]
            barrier.wait()
            for j in range(0, PER_THREAD, 5000):
                chunk = mine[j : j + 5000]
                if (j // 5000) % 2:
                    f.update(chunk)  # GIL released inside
                    assert all(f.test_many(chunk))
                else:
                    for key in chunk[:500]:  # single calls, GIL held
                        f.add(key)
                        assert key in f
                    assert len(f.add_many(chunk[500:])) == len(chunk) - 500
                    assert f.test_many(chunk) == [True] * len(chunk)
                # everything this thread added so far is still there
                assert all(f.test_many(mine[: j + 5000]))
        return run

    run_threads([worker(t) for t in range(N_THREADS)])
    everything = [f"t{t}:{i}" for t in range(N_THREADS) for i in range(PER_THREAD)]
    assert all(f.test_many(everything))
    if kind == "scalable":
        assert f.num_sub_filters > 3
        assert f.approximate_count() <= len(everything)
    else:
        assert abs(f.approximate_count() - len(everything)) < 0.05 * len(everything)


@pytest.mark.parametrize("kind", ["memory", "counting", "scalable", "blocked"])
def test_close_while_others_work(kind):
    f = make(kind)
    preload = [f"pre:{i}" for i in range(20_000)]
    f.update(preload)
    started = threading.Barrier(N_THREADS)
    closed_seen = []

    def worker(t: int):
        def run():
            started.wait()
            i = 0
            while True:
                batch = [f"w{t}:{i}:{j}" for j in range(4096)]
                try:
                    f.update(batch)
                    assert all(f.test_many(preload[:5000]))
                    assert all(f.test_many(batch))
                    f.add(f"single:{t}:{i}")
                    assert preload[i % len(preload)] in f
                except lb.ClosedError:
                    closed_seen.append(t)
                    return
                i += 1
        return run

    def closer():
        started.wait()
        # let the others get going; then close while batches are in flight
        for _ in range(20):
            f.test_many(preload[:2048])
        f.close()

    run_threads([worker(t) for t in range(N_THREADS - 1)] + [closer])
    assert sorted(closed_seen) == list(range(N_THREADS - 1))
    assert f.closed
    for op in (lambda: f.add("x"), lambda: f.test("x"), lambda: f.update(["x"]),
               lambda: f.test_many(["x"]), f.reset, f.to_bytes):
        with pytest.raises(lb.ClosedError):
            op()
    f.close()


def test_reset_and_copy_race_with_batches():
    f = lb.MemoryFilter(200_000)
    keys = [f"k{i}" for i in range(50_000)]
    stop = threading.Event()

    def writer():
        while not stop.is_set():
            f.update(keys)

    def other():
        for _ in range(30):
            c = f.copy()
            assert isinstance(c, lb.MemoryFilter)
            data = f.to_bytes()
            assert lb.MemoryFilter.from_bytes(data).m == f.m
            f.reset()
            _ = f | c
            assert f.fill_ratio() >= 0.0
        stop.set()

    run_threads([writer, writer, other])
    f.update(keys)
    assert all(f.test_many(keys))


MUTATION_SCRIPT = r"""
import sys, threading
import ling_bloom as lb
sys.setswitchinterval(1e-6)
mode = sys.argv[1]
f = lb.MemoryFilter(100_000)
shared = [f"s{i}" for i in range(2048 * 5 + 10)]
stop = threading.Event()

def mutate():
    i = 0
    while not stop.is_set():
        if len(shared) > 30_000:
            del shared[2048 * 5 + 10 :]  # back to the original size, then grow again
        elif mode == "shrink-and-grow" and len(shared) > 3000 and i % 3 == 0:
            del shared[-700:]
        shared.append(f"new{i}")
        i += 1

t = threading.Thread(target=mutate)
t.start()
try:
    for _ in range(150):
        r = f.add_many(shared)
        assert isinstance(r, list) and all(type(x) is bool for x in r)
        f.test_many(shared)
        f.update(shared)
finally:
    stop.set()
    t.join()
assert all(f.test_many([f"s{i}" for i in range(1000)]))
print("ok")
"""


@pytest.mark.parametrize("mode", ["grow", "shrink-and-grow"])
def test_a_list_mutated_during_a_batch_does_not_corrupt_memory(mode):
    """A batch walks a list in chunks with the GIL released between them; another thread that
    appends to the list meanwhile must not make it write past its result list or its chunk
    buffers.  Run in a child process: the bug aborts the interpreter (heap corruption)."""
    import os
    import subprocess
    from pathlib import Path

    env = dict(os.environ)
    root = str(Path(lb.__file__).resolve().parents[1])
    env["PYTHONPATH"] = root + os.pathsep + env.get("PYTHONPATH", "")
    r = subprocess.run([sys.executable, "-c", MUTATION_SCRIPT, mode], capture_output=True,
                       text=True, env=env, timeout=120)
    assert r.returncode == 0 and r.stdout.strip() == "ok", (r.returncode, r.stderr[-2000:])


def test_from_bytes_of_a_large_filter_lets_other_threads_run():
    # A served file's reload (FileFilter, in a thread beside an event loop) held the GIL
    # through from_bytes' checksum and copy: 200 ms for 90 MB with no other thread run.
    # With the switch interval out of reach, another thread runs during the call only if
    # the call releases the GIL.  Whether the woken thread is scheduled inside the
    # call's few milliseconds is up to a busy machine's OS, so the call is tried up to 200
    # times (a loaded 2-core machine may miss the window many times in a row; a success
    # ends the loop): a call that holds the GIL never lets it run, in any try.
    data = lb.MemoryFilter(8_000_000, 0.01).to_bytes()   # ~9.6 MB
    assert len(data) > 1 << 20
    old = sys.getswitchinterval()
    tries = []
    try:
        sys.setswitchinterval(1000.0)
        for _ in range(200):
            ready, go, ran = threading.Event(), threading.Event(), []

            def other():
                ready.set()
                go.wait()
                ran.append(1)  # reached only when the main thread lets go of the GIL

            t = threading.Thread(target=other)
            t.start()
            ready.wait()
            go.set()
            f = lb.MemoryFilter.from_bytes(data)
            during = list(ran)
            t.join()
            assert f.m > 0
            tries.append(during)
            if during == [1]:
                break
    finally:
        sys.setswitchinterval(old)
    assert tries[-1] == [1], f"the other thread never ran during from_bytes in {len(tries)} tries"
