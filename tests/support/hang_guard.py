"""A call that hangs fails its test instead of hanging the suite.

Tests assert what a call did (its result, its exception, how many connections or commands it
took), never how fast: speed lives in benchmarks/.  A call that should end on a timeout is
run under ``returns`` (blocking) or ``bounded`` (a coroutine), whose limit is generous: it
tells a hang from an answer, never a slow answer from a fast one.
"""
from __future__ import annotations

import asyncio
import threading
import time
from typing import Any, Callable, Iterable, List

HUNG = 120.0  # seconds; a call that takes longer fails the test instead of hanging the suite


def returns(fn: Callable[[], Any], limit: float = HUNG) -> Any:
    """fn()'s result, or its exception raised here; an AssertionError if it has not ended
    within limit (it goes on in a daemon thread)."""
    out: dict = {}

    def run() -> None:
        try:
            out["value"] = fn()
        except BaseException as e:  # re-raised in the caller's thread
            out["error"] = e

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(limit)
    if t.is_alive():
        raise AssertionError(f"hung: no answer within {limit:.0f} s")
    if "error" in out:
        raise out["error"]
    return out.get("value")


async def bounded(coro, limit: float = HUNG) -> Any:
    """Await coro; an AssertionError if it has not ended within limit (its own exceptions,
    RedisTimeoutError included, pass through unchanged)."""
    task = asyncio.ensure_future(coro)
    done, _ = await asyncio.wait({task}, timeout=limit)
    if not done:
        task.cancel()
        raise AssertionError(f"hung: no answer within {limit:.0f} s")
    return task.result()


def wait_until(cond: Callable[[], Any], what: str, limit: float = HUNG, every: float = 0.005) -> Any:
    """Poll cond() until it is true (returned); an AssertionError naming what was awaited if
    it is not within limit.  A wait on a condition, in place of a sleep that hopes for it."""
    deadline = time.monotonic() + limit
    while True:
        value = cond()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"hung: waited {limit:.0f} s for {what}")
        time.sleep(every)


async def until(cond: Callable[[], Any], what: str, limit: float = HUNG, every: float = 0.005) -> Any:
    """wait_until for a coroutine: the event loop runs between two polls."""
    deadline = time.monotonic() + limit
    while True:
        value = cond()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"hung: waited {limit:.0f} s for {what}")
        await asyncio.sleep(every)


class FakeClock:
    """A clock that moves only when told (advance): for code that takes a clock, where the
    passing of time is what a test is about."""

    def __init__(self, start: float = 1000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


# futex(2)'s number, by machine: a thread blocked in a lock's acquire sits in it
_FUTEX = {"x86_64": 202, "amd64": 202, "aarch64": 98, "arm64": 98}


def waits_on_a_lock(thread) -> bool:
    """True while thread (a started threading.Thread) is blocked in a lock's acquire that
    has no timeout, as /proc/self/task/TID/syscall tells it: futex(2) with a NULL timeout.
    A thread waiting for the GIL waits with a timeout (the switch interval), and a running
    or sleeping one is in another call, so this is the proof that another call really waits
    for the lock a first one holds -- what a test checks before it lets the first one go,
    instead of sleeping.  Elsewhere than Linux x86_64/aarch64: the thread is asleep in the
    kernel (state S), a weaker proof."""
    import platform

    tid = thread.native_id
    try:
        with open(f"/proc/self/task/{tid}/syscall") as f:
            fields = f.read().split()
    except OSError:
        return False  # the thread has ended
    nr = _FUTEX.get(platform.machine().lower())
    if nr is not None and fields and fields[0] not in ("running", "-1"):
        # number, uaddr, op, val, timeout, ...: a wait (FUTEX_WAIT or FUTEX_WAIT_BITSET,
        # private or not, any clock) whose timeout pointer is NULL
        return (int(fields[0]) == nr and int(fields[2], 16) & 0x7f in (0, 9)
                and int(fields[4], 16) == 0)
    if nr is not None:
        return False
    with open(f"/proc/self/task/{tid}/stat", "rb") as f:
        stat = f.read()
    return stat[stat.rindex(b")") + 2:stat.rindex(b")") + 3] == b"S"


def run_threads(targets: Iterable[Callable[[], Any]], limit: float = HUNG) -> None:
    """Run each function of targets on a thread of its own, all at once; wait for them
    (a thread still running after limit seconds fails the test: "a thread is stuck"), then
    raise the first exception any of them raised."""
    errors: List[BaseException] = []

    def wrap(fn: Callable[[], Any]) -> Callable[[], None]:
        def run() -> None:
            try:
                fn()
            except BaseException as e:  # noqa: BLE001
                errors.append(e)
        return run

    threads = [threading.Thread(target=wrap(t)) for t in targets]
    for t in threads:
        t.start()
    for t in threads:
        t.join(limit)
        assert not t.is_alive(), "a thread is stuck"
    if errors:
        raise errors[0]
