"""One test body for both flavours of the Redis filters: the blocking ``RedisFilter`` /
``RedisBloomFilter`` and the asyncio ``AsyncRedisFilter`` / ``AsyncRedisBloomFilter``.

The ``flavor`` fixture (tests/conftest.py) gives a ``Flavor``; a test builds its filters
through it and calls them the blocking way:

    f = flavor.RedisFilter.from_url(url, "k", 1000, 0.01)      # or flavor.RedisBloomFilter
    f.add("a"); "a" in f; f.test_many([...]); f.close()
    flavor.twin(f)               # a blocking filter of the same arguments (f itself in
                                 # the blocking flavour): another client of the same keys

In the async flavour each filter is a ``SyncFacade``: the async filter, driven on an event
loop of its own in a background thread.  Its results and exceptions are the async filter's,
unchanged, so one assertion checks both flavours.
"""
from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from typing import Any, Callable, List, Optional

import ling_bloom as lb

from hang_guard import HUNG  # a call that takes longer fails the test, never hangs the suite


class SyncFacade:
    """The blocking API over one async filter: every call runs on ONE private event loop
    in a background thread, so several test threads may call at once (their calls are
    concurrent tasks on that loop, as in an asyncio program).

    ``target`` is the async filter, or a function of no arguments that builds it (it then
    runs on the loop: a constructor that needs a running loop works too).  The facts
    (``key``, ``m``, ``shards``...) are read from the async filter; an async method that has
    no blocking stand-in here is run to completion too; anything else it lacks is an
    AttributeError, as it should be."""

    def __init__(self, target: Any, twin: Optional[Callable[[], Any]] = None,
                 timeout: float = HUNG):
        self._timeout = timeout
        self._twin = twin
        self._closed = False
        self._lock = threading.Lock()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._serve, name="SyncFacade", daemon=True)
        self._thread.start()
        try:
            self._f = self._call(_build(target)) if callable(target) else target
        except BaseException:
            self._stop()
            raise

    # -- the loop
    def _serve(self) -> None:
        loop = self._loop
        asyncio.set_event_loop(loop)
        try:
            loop.run_forever()
            pending = asyncio.all_tasks(loop)
            for t in pending:
                t.cancel()
            loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
            loop.run_until_complete(loop.shutdown_asyncgens())
        finally:
            loop.close()

    def _call(self, coro: Any) -> Any:
        if self._closed:
            # the loop is gone: the async filter answers on a loop of the caller's (a closed
            # filter raises ClosedError without any I/O)
            return asyncio.run(coro)
        fut = asyncio.run_coroutine_threadsafe(coro, self._loop)
        try:
            return fut.result(timeout=self._timeout)
        except concurrent.futures.TimeoutError:
            if fut.done():
                raise  # the call's own error (RedisTimeoutError is a TimeoutError too)
            fut.cancel()
            raise AssertionError(f"async call hung (no answer within {self._timeout:.0f} s)")

    def _stop(self) -> None:
        if self._loop.is_running():
            self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(self._timeout)

    # -- the blocking API
    def add(self, key: Any) -> bool:
        return self._call(self._f.add(key))

    def test(self, key: Any) -> bool:
        return self._call(self._f.test(key))

    def __contains__(self, key: Any) -> bool:
        return self.test(key)

    def add_many(self, keys: Any) -> List[bool]:
        return self._call(self._f.add_many(keys))

    def test_many(self, keys: Any) -> List[bool]:
        return self._call(self._f.test_many(keys))

    def update(self, keys: Any) -> None:
        return self._call(self._f.update(keys))

    def reset(self) -> None:
        return self._call(self._f.reset())

    def close(self) -> None:
        """aclose() on the loop (calls in flight finish first), then the loop stops."""
        with self._lock:
            if self._closed:
                return
            try:
                self._call(_aclose(self._f, self._timeout))
            finally:
                self._closed = True
                self._stop()

    def __enter__(self) -> "SyncFacade":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        return repr(self._f)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        attr = getattr(self._f, name)
        if asyncio.iscoroutinefunction(attr):
            return lambda *a, **kw: self._call(attr(*a, **kw))
        return attr

    def blocking_twin(self) -> Any:
        """A new blocking filter built with the same arguments (to read what the async
        filter wrote through another client)."""
        if self._twin is None:
            raise TypeError("this facade was not built by a Flavor: no blocking twin")
        return self._twin()


async def _build(make: Callable[[], Any]) -> Any:
    return make()


async def _aclose(f: Any, timeout: float) -> None:
    await f.aclose()
    others = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
    if others:  # calls of other threads still in a round trip: let them end
        await asyncio.wait(others, timeout=timeout)


class _AsyncMaker:
    """``RedisFilter``-like constructors that give a SyncFacade over the async class."""

    def __init__(self, flavor: "Flavor", blocking: Any, async_cls: Any):
        self._flavor, self._blocking, self._async = flavor, blocking, async_cls
        self.__name__ = async_cls.__name__

    def _make(self, build: Callable[[Any], Any]) -> SyncFacade:
        facade = SyncFacade(lambda: build(self._async), twin=lambda: self._flavor._keep(
            build(self._blocking)))
        return self._flavor._keep(facade)

    def __call__(self, *args: Any, **kwargs: Any) -> SyncFacade:
        return self._make(lambda cls: cls(*args, **kwargs))

    def from_url(self, *args: Any, **kwargs: Any) -> SyncFacade:
        return self._make(lambda cls: cls.from_url(*args, **kwargs))

    def from_redis(self, *args: Any, **kwargs: Any) -> SyncFacade:
        return self._make(lambda cls: cls.from_redis(*args, **kwargs))


class Flavor:
    """``flavor.RedisFilter`` / ``flavor.RedisBloomFilter``: the blocking classes
    themselves, or makers of SyncFacades over the async classes (called, ``.from_url``,
    ``.from_redis``).  ``flavor.name`` is "blocking" or "async"; ``flavor.prefix`` is what
    the class names in a repr start with ("" or "Async")."""

    def __init__(self, name: str):
        assert name in ("blocking", "async"), name
        self.name = name
        self.is_async = name == "async"
        self.prefix = "Async" if self.is_async else ""
        self._made: List[Any] = []
        if self.is_async:
            from ling_bloom.aio import AsyncRedisBloomFilter, AsyncRedisFilter

            self.RedisFilter: Any = _AsyncMaker(self, lb.RedisFilter, AsyncRedisFilter)
            self.RedisBloomFilter: Any = _AsyncMaker(self, lb.RedisBloomFilter,
                                                     AsyncRedisBloomFilter)
        else:
            self.RedisFilter = lb.RedisFilter
            self.RedisBloomFilter = lb.RedisBloomFilter

    def __repr__(self) -> str:
        return self.name

    def twin(self, f: Any) -> Any:
        """f in the blocking flavour; a blocking filter of f's arguments in the async one
        (closed at the end of the test)."""
        return f.blocking_twin() if isinstance(f, SyncFacade) else f

    def _keep(self, f: Any) -> Any:
        self._made.append(f)
        return f

    def close_all(self) -> None:
        """At the end of the test: every facade and twin it made, closed (the facades'
        threads end)."""
        for f in reversed(self._made):
            try:
                f.close()
            except Exception:
                pass
        self._made.clear()
