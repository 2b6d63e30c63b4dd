"""Threads truly in parallel on one in-memory filter (a free-threaded CPython with the GIL
off; on a build with the GIL, the same races at the interpreter's switch points).

Eight threads add disjoint keys, by single calls and batches, to one filter of each kind:
every key acknowledged is there at once and at the end, and the filter equals one built by
a single thread from the same keys (a bit or a counter step lost to a race, or a count of
set bits that missed an update, would differ).  Then reset, copy, union, ==, to_bytes and
close race with the adders: nothing crashes, nothing raises but ClosedError after the close,
and a key acknowledged with no reset since is in the filter and in every copy or union made
after it."""
from __future__ import annotations

import sys
import sysconfig
import threading

import pytest

import ling_bloom as lb
from hang_guard import run_threads

N_THREADS = 8
PER_THREAD = 3_000
KINDS = ["memory", "mapped", "blocked", "counting", "scalable"]
FREE_THREADED = bool(sysconfig.get_config_var("Py_GIL_DISABLED"))


@pytest.fixture(autouse=True)
def fast_switching():
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)  # with the GIL: switch often, so calls interleave
    yield
    sys.setswitchinterval(old)


def make(kind: str, path, capacity: int = N_THREADS * PER_THREAD):
    if kind == "memory":
        return lb.MemoryFilter(capacity, 0.01)
    if kind == "mapped":
        return lb.MemoryFilter.open(str(path), "w", capacity=capacity, error_rate=0.01)
    if kind == "blocked":
        return lb.BlockedFilter(capacity, 0.01)
    if kind == "counting":
        return lb.CountingFilter(capacity, 0.01)
    return lb.ScalableFilter(capacity // 20, 0.01)  # grows while the threads add


def keys_of(t: int) -> list[str]:
    return [f"thread{t}:key{i}" for i in range(PER_THREAD)]


@pytest.mark.parametrize("kind", KINDS)
def test_parallel_adds_of_disjoint_keys_lose_nothing(kind, tmp_path):
    # sized for a sixth of the keys: most adds then share a byte, a lane or a block
    # with another thread's, where a lost update would show
    f = make(kind, tmp_path / "f.bloom", capacity=N_THREADS * PER_THREAD // 6)
    barrier = threading.Barrier(N_THREADS)

    def adder(t: int):
        def run():
            mine = keys_of(t)
            barrier.wait()
            for j in range(0, PER_THREAD, 500):
                chunk = mine[j : j + 500]
                how = (j // 500 + t) % 3
                if how == 0:
                    for key in chunk:
                        f.add(key)
                        assert key in f  # acknowledged, so there
                elif how == 1:
                    f.update(chunk)
                else:
                    assert len(f.add_many(chunk)) == len(chunk)
                assert all(f.test_many(chunk))
            assert all(f.test_many(mine))  # nothing of this thread's got lost since
        return run

    run_threads([adder(t) for t in range(N_THREADS)], limit=300)
    everything = [k for t in range(N_THREADS) for k in keys_of(t)]
    assert all(f.test_many(everything))
    if kind != "scalable":  # a chain's stages depend on the order of the adds
        serial = make("memory" if kind == "mapped" else kind, None, capacity=N_THREADS * PER_THREAD // 6)
        serial.update(everything)
        # the same cells, and the same count of cells in use: no bit, no counter step
        # and no update of the count lost to a race
        assert f == serial
        if kind != "counting":
            assert f.bits_set == serial.bits_set
    f.close()


@pytest.mark.parametrize("kind", KINDS)
def test_reset_copy_union_and_close_race_with_adders(kind, tmp_path):
    f = make(kind, tmp_path / "f.bloom")
    other = make(kind, tmp_path / "other.bloom")
    other_keys = [f"other:{i}" for i in range(200)]
    other.update(other_keys)
    # Resets are counted before they start and after they end: a key whose add began
    # with no reset in flight (started == done), and with none started by the time it
    # was checked, must be there.  acked holds (key, resets started before its add).
    resets_started = [0]
    resets_done = [0]
    acked: list[tuple[str, int]] = []
    problems: list[str] = []
    go = threading.Barrier(N_THREADS)
    closing = threading.Event()

    def quiet_generation():
        done = resets_done[0]
        started = resets_started[0]
        return started if started == done else None

    def adder(t: int):
        def run():
            go.wait()
            i = 0
            try:
                while True:
                    gen = quiet_generation()
                    if i % 2:
                        key = f"a{t}:{i}"
                        f.add(key)
                        present = f.test(key)
                        batch = [key]
                    else:
                        batch = [f"a{t}:{i}:{j}" for j in range(64)]
                        f.update(batch)
                        present = all(f.test_many(batch))
                    if gen is not None and resets_started[0] == gen:
                        if not present:
                            problems.append(f"{batch[0]} acknowledged, then absent")
                        acked.extend((k, gen) for k in batch)
                    i += 1
            except lb.ClosedError:
                assert closing.is_set(), "ClosedError before close()"
        return run

    def resetter():
        go.wait()
        try:
            for _ in range(30):
                resets_started[0] += 1
                f.reset()
                resets_done[0] += 1
                f.test_many(other_keys)  # give the adders a moment
        except lb.ClosedError:
            assert closing.is_set()

    def copier():
        go.wait()
        try:
            for n in range(60):
                gen = quiet_generation()
                before = [k for k, g in list(acked) if g == gen]
                if n % 3 == 0:
                    made = f.copy()
                elif n % 3 == 1 and kind != "scalable":
                    made = f | other
                    assert all(made.test_many(other_keys))
                else:
                    assert f.to_bytes()
                    if kind != "scalable":
                        assert (f == other) in (True, False)
                    continue
                if gen is not None and resets_started[0] == gen and before:
                    if not all(made.test_many(before)):
                        problems.append("a copy or union lacks an acknowledged key")
                if kind != "scalable":
                    assert made.m == f.m
                made.close()
        except lb.ClosedError:
            assert closing.is_set()

    def closer():
        go.wait()
        while len(acked) < 20_000 and resets_done[0] < 30:
            f.test_many(other_keys)
        closing.set()
        f.close()

    n_adders = N_THREADS - 3
    run_threads([adder(t) for t in range(n_adders)] + [resetter, copier, closer], limit=300)
    assert not problems, problems[:5]
    assert f.closed
    for op in (lambda: f.add("x"), lambda: f.test("x"), lambda: f.update(["x"]), f.reset, f.copy):
        with pytest.raises(lb.ClosedError):
            op()
    other.close()


def test_the_extension_is_built_for_this_interpreter_s_threading():
    # a free-threaded CPython builds the core with atomic bits (LB_ATOMIC_STORAGE)
    assert lb.build_info()["free_threaded"] is FREE_THREADED
