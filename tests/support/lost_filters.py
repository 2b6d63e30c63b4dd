"""Filters that stand in for a Redis filter whose server lost it (FilterLostError) or whose
stored geometry is not the code's (GeometryMismatchError), for the guard's tests and the
frameworks'; and wait_for, a poll with a deadline."""
from __future__ import annotations

import time

import ling_bloom as lb

__all__ = ["AsyncLostFilter", "LostFilter", "MismatchedFilter", "wait_for"]


class LostFilter:
    """A filter whose server lost it: while ``lost``, test/add/update raise FilterLostError
    (what the Redis filters raise for a filter made without a ttl that is gone); reset()
    builds it again, empty."""

    error_rate = 0.01
    key = "bf:rows"

    def __init__(self, keys=()):
        self.inner = lb.MemoryFilter(1000, 0.01)
        self.inner.update(list(keys))
        self.lost = False
        self.tests = 0
        self.resets = 0

    def lose(self):
        self.lost = True
        self.inner = lb.MemoryFilter(1000, 0.01)

    def _check(self):
        if self.lost:
            raise lb.FilterLostError("the filter at 'bf:rows' is gone from the server (scripted)")

    def test(self, key):
        self.tests += 1
        self._check()
        return self.inner.test(key)

    def add(self, key):
        self._check()
        return self.inner.add(key)

    def update(self, keys):
        self._check()
        self.inner.update(list(keys))

    def reset(self):
        self.resets += 1
        self.lost = False
        self.inner = lb.MemoryFilter(1000, 0.01)


class AsyncLostFilter(LostFilter):
    """The same, with coroutine methods (as AsyncRedisFilter)."""

    async def test(self, key):
        return LostFilter.test(self, key)

    async def add(self, key):
        return LostFilter.add(self, key)

    async def update(self, keys):
        return LostFilter.update(self, keys)

    async def reset(self):
        return LostFilter.reset(self)


class MismatchedFilter:
    error_rate = 0.01
    key = "bf:rows"

    def __init__(self):
        self.tests = 0

    def test(self, key):
        self.tests += 1
        raise lb.GeometryMismatchError("stored m=9585 k=7, this filter m=19170 k=7 (scripted)")

    add = test


def wait_for(condition, what, timeout=30.0):
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.005)
