"""The locking rule, call by call: every operation either completes against a live filter
or raises ClosedError, and what a failed call reports belongs to that call.

The races are made certain with a scripted server (tests/support/bf_server.py) that holds
a reply until the test lets it go, so that the other thread's close() or call lands while
the first call is in its round trip.  The stress runs (tests/filters/test_stress.py) cover
the same rule with random interleavings, forks included.
"""
from __future__ import annotations

import os
import threading
import time
import warnings

import pytest

import ling_bloom as lb

from bf_server import ScriptedServer
from hang_guard import waits_on_a_lock

OK = b"+OK\r\n"
FULL = b"*1\r\n-ERR non scaling filter is full\r\n"  # BF.INSERT of one key, not taken
# The key check a RedisBloomFilter makes on each new connection before it writes: no filter
# there yet (BF.INFO), and no maxmemory (INFO memory).
KEY_CHECK = {"BF.INFO": b"-ERR not found\r\n", "INFO": b"$8\r\n# Memory\r\n"}


def wait_for(cond, what: str, timeout: float = 20.0) -> None:
    end = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > end:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.002)


class Held:
    """A reply held until release() (or 20 s, so a broken test cannot hang)."""

    def __init__(self, reply: bytes) -> None:
        self.reply = reply
        self.arrived = threading.Event()
        self.go = threading.Event()

    def __call__(self, args) -> bytes:
        self.arrived.set()
        self.go.wait(20)
        return self.reply


def in_thread(fn):
    box: dict = {}

    def run():
        try:
            box["value"] = fn()
        except BaseException as e:  # noqa: BLE001
            box["error"] = e

    t = threading.Thread(target=run)
    t.start()
    return t, box


def test_close_during_a_full_add_raises_filter_full():
    """add() on a full non-scaling filter while another thread closes it: the add
    entered first, so it completes with its FilterFullError (built from live state)."""
    held = Held(FULL)
    with ScriptedServer({**KEY_CHECK, "BF.INSERT": held}) as s:
        f = lb.RedisBloomFilter("k", non_scaling=True, url=s.url)
        t, box = in_thread(lambda: f.add("z"))
        assert held.arrived.wait(20)
        c, cbox = in_thread(f.close)
        wait_for(lambda: f.closed, "close() to mark the filter closed")  # mid round trip
        held.go.set()
        t.join(20)
        c.join(20)
        assert not t.is_alive() and not c.is_alive()
        assert "error" not in cbox
        e = box.get("error")
        assert isinstance(e, lb.FilterFullError), box
        assert e.reply == "ERR non scaling filter is full"
        assert f.closed
        with pytest.raises(lb.ClosedError):
            f.add("y")


@pytest.mark.parametrize("rounds", [5])
def test_error_text_belongs_to_its_call(rounds):
    """A failed call's message is read before another thread can use the
    connection: a second call waiting for the first must not replace its text."""
    for _ in range(rounds):
        first = Held(b"-ERR first call failed\r\n")

        def bf_add(args):
            if args[-1] == b"slow":
                return first(args)
            return b"-ERR second call failed\r\n"

        with ScriptedServer({**KEY_CHECK, "BF.INSERT": bf_add}) as s:
            with lb.RedisBloomFilter("k", url=s.url) as f:
                t, box = in_thread(lambda: f.add("slow"))
                assert first.arrived.wait(20)
                u, ubox = in_thread(lambda: f.add("fast"))
                wait_for(lambda: waits_on_a_lock(u), "the second call to wait for the first")
                first.go.set()
                t.join(20)
                u.join(20)
                assert not t.is_alive() and not u.is_alive()
                e1, e2 = box.get("error"), ubox.get("error")
                assert isinstance(e1, lb.RedisResponseError), box
                assert isinstance(e2, lb.RedisResponseError), ubox
                assert "first call failed" in str(e1) and e1.reply == "ERR first call failed"
                assert "second call failed" in str(e2) and e2.reply == "ERR second call failed"


def test_redis_filter_error_text_belongs_to_its_batch():
    """For RedisFilter's batches: the failed chunk's status and text are its own."""
    for _ in range(5):
        first = Held(b"-ERR first batch failed\r\n")
        calls = []

        def bitfield(args):
            calls.append(args)
            if len(calls) == 1:
                return first(args)
            return b"-ERR second batch failed\r\n"

        meta = []

        def set_(args):
            meta.append(args[2])
            return OK

        def get(args):
            v = meta[-1] if meta else None
            return b"$-1\r\n" if v is None else b"$%d\r\n%s\r\n" % (len(v), v)

        def exists(args):
            return b":1\r\n" if meta else b":0\r\n"

        # the ownership check on a new connection: the meta key (EXISTS, GETRANGE of its
        # head), the key's type, maxmemory
        replies = {"GET": get, "GETRANGE": get, "EXISTS": exists, "SET": set_,
                   "TYPE": b"+none\r\n", "INFO": b"$8\r\n# Memory\r\n", "BITFIELD": bitfield,
                   "SETBIT": b":0\r\n"}  # the claim sets the canary bit
        with ScriptedServer(replies) as s:
            with lb.RedisFilter("k", m=1024, k=3, url=s.url) as f:
                t, box = in_thread(lambda: f.add_many(["a", "b"]))
                assert first.arrived.wait(20), s.names()
                u, ubox = in_thread(lambda: f.add_many(["c", "d"]))
                wait_for(lambda: waits_on_a_lock(u), "the second batch to wait for the first")
                first.go.set()
                t.join(20)
                u.join(20)
                e1, e2 = box.get("error"), ubox.get("error")
                assert isinstance(e1, lb.RedisResponseError), box
                assert isinstance(e2, lb.RedisResponseError), ubox
                assert "first batch failed" in str(e1), e1
                assert "second batch failed" in str(e2), e2


def test_close_while_a_batch_runs_frees_after_it():
    """close() during a batch: the batch stops at a chunk boundary with ClosedError (or
    completes); the storage is freed once it has left, and the filter stays closed."""
    f = lb.MemoryFilter(1_000_000, 0.01)
    keys = [f"k{i}" for i in range(400_000)]
    t, box = in_thread(lambda: f.update(keys))
    wait_for(lambda: "k0" in f, "the batch to have added its first keys")  # a read may run
    f.close()                                                            # during a batch
    t.join(60)
    assert not t.is_alive()
    assert "error" not in box or isinstance(box["error"], lb.ClosedError), box
    assert f.closed
    with pytest.raises(lb.ClosedError):
        f.test("k1")


@pytest.mark.parametrize("op", ["ior", "union", "and", "eq"])
def test_binary_operation_while_a_third_thread_closes(op):
    """a |= b (union, &, ==) waits for b's batch, and a third thread closes a
    meanwhile: the operation completes on a live a or raises ClosedError."""
    b = lb.MemoryFilter(2_000_000, 0.01)
    keys = [f"k{i}" for i in range(300_000)]
    stop = threading.Event()

    def batches():
        while not stop.is_set():
            b.update(keys)

    runner = threading.Thread(target=batches)
    runner.start()
    try:
        for _ in range(60):
            a = lb.MemoryFilter(m=b.m, k=b.k)
            closer = threading.Timer(0.0005, a.close)
            closer.start()
            for _ in range(5):
                try:
                    if op == "ior":
                        a |= b
                    elif op == "union":
                        a.union(b).close()
                    elif op == "and":
                        (a & b).close()
                    else:
                        _ = a == b
                except lb.ClosedError:
                    pass
            closer.join()
    finally:
        stop.set()
        runner.join(60)


@pytest.mark.slow
def test_forked_child_of_a_waiting_thread_runs_batches():
    """Forks while one thread runs batches and another waits for them: the child's
    own batch of 256+ keys must finish (it used to spin forever in lb_busy_end)."""
    f = lb.MemoryFilter(1_000_000, 0.01)
    keys = [f"k{i}" for i in range(20_000)]
    stop = threading.Event()

    def batches():
        while not stop.is_set():
            f.update(keys)

    def waiter():
        while not stop.is_set():
            f.add("w")  # waits for each chunk of the other thread's batch

    threads = [threading.Thread(target=batches)] + [threading.Thread(target=waiter)
                                                    for _ in range(3)]
    for t in threads:
        t.start()
    hung = 0
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            for _ in range(100):
                time.sleep(0.0005)  # pacing: a fork at another moment of the batches
                pid = os.fork()
                if pid == 0:
                    try:
                        f.add_many([f"c{i}" for i in range(3000)])
                        os._exit(0 if f.test("k1") and f.test("c7") else 3)
                    except BaseException:  # noqa: BLE001
                        os._exit(2)
                end = time.monotonic() + 30  # a hang, not a slow child of a loaded machine
                while True:
                    done, status = os.waitpid(pid, os.WNOHANG)
                    if done:
                        assert os.waitstatus_to_exitcode(status) == 0
                        break
                    if time.monotonic() > end:
                        os.kill(pid, 9)
                        os.waitpid(pid, 0)
                        hung += 1
                        break
                    time.sleep(0.005)
                if hung:
                    break
    finally:
        stop.set()
        for t in threads:
            t.join(60)
    assert hung == 0, "a forked child hung"


@pytest.mark.slow
def test_scalable_sizes_wait_for_a_batch_that_grows_the_chain():
    """.capacity, .nbytes and repr() read the stage array, which a batch moves
    when the chain grows (GIL released): they wait for it.  Before, they read the freed
    array (heap-use-after-free under make sanitize)."""
    box = [lb.ScalableFilter(1, 0.01, growth_ratio=1.01)]
    keys = [f"k{i}" for i in range(1200)]  # about 250 stages: the array moves 6 times
    stop = threading.Event()
    seen = []

    def reader():
        while not stop.is_set():
            f = box[0]
            repr(f)
            seen.append((f.capacity, f.nbytes))
            del seen[:-10]

    t = threading.Thread(target=reader)
    t.start()
    try:
        end = time.monotonic() + 4
        # for 4 s, and on until the reader has read a size at least once (a loaded
        # machine may not have scheduled it yet), unless it died
        while time.monotonic() < end or (not seen and t.is_alive()):
            f = lb.ScalableFilter(1, 0.01, growth_ratio=1.01)
            box[0] = f
            f.update(keys)
            assert all(f.test_many(keys))
            assert f.num_sub_filters > 64  # the stage array moved at 4, 8, 16, 32 and 64
    finally:
        stop.set()
        t.join(60)
    assert seen and all(c >= 1 and n >= 1 for c, n in seen)


@pytest.mark.slow
def test_forked_child_never_frees_what_a_parent_thread_was_using(clean_redis):
    """Forks while another thread is in RedisFilter round trips (big replies being
    parsed): the child must not free the inherited reader and arena that thread was
    changing (a double free, seen under make sanitize in about 1 of 20 children); it gets
    a connection of its own and the parent's stays in step.  The child allocates while
    the parent thread may have been allocating at the fork: under a sanitizer runtime that
    takes no lock around fork (GCC 12's libasan) it hangs in the allocator; `make
    sanitize` uses one that does (see the Makefile)."""
    f = lb.RedisFilter("bf", 100_000, 0.01, url=clean_redis.url, chunk_size=2000)
    keys = [f"k{i}" for i in range(6000)]
    f.update(keys)
    stop = threading.Event()
    errors = []

    def round_trips():
        try:
            while not stop.is_set():
                if not all(f.test_many(keys)):
                    errors.append("false negative in the parent")
        except BaseException as e:  # noqa: BLE001
            errors.append(e)

    t = threading.Thread(target=round_trips)
    t.start()
    failed = []
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            for i in range(150):
                time.sleep(0.001)  # pacing: a fork at another moment of the round trips
                pid = os.fork()
                if pid == 0:
                    code = 2
                    try:
                        import signal
                        signal.alarm(30)
                        ok = all(f.test_many(keys[:500]))
                        f.add_many([f"c{i}:{j}" for j in range(300)])
                        code = 0 if ok and f.test(f"c{i}:7") else 3
                    finally:
                        os._exit(code)
                _, status = os.waitpid(pid, 0)
                if os.waitstatus_to_exitcode(status) != 0:
                    failed.append(os.waitstatus_to_exitcode(status))
                    break
    finally:
        stop.set()
        t.join(60)
    assert failed == [], f"a forked child failed: exit {failed} (negative: that signal)"
    assert errors == []
    assert all(f.test_many(keys)) and f.test("c0:7")
    f.close()
