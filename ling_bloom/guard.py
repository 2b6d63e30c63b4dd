"""A cache-penetration guard: the lookup flow of a RedisBloom cache-penetration article, framework-neutral.

    filter --(unseen: rejected, nothing else touched)--> cache --(miss)--> loader (the DB)

- The filter rejects keys it has never seen: no cache, no database is touched.
- A key that passes is looked up in the cache (a value, or a null marker).
- On a miss one loader call per key runs at a time: concurrent lookups of the same key wait
  for it and share its result (single flight; the per-key entries exist only while a load
  runs, so they never pile up).
- "Not found" (the loader returned None) is cached as a null marker for ``null_ttl``
  seconds; a found value is cached for ``value_ttl`` seconds (None: no expiry) and its key
  added to the filter.
- A load puts a loading marker in the cache first, and its answer is cached only while the
  marker is still there: a write whose hook invalidates the key meanwhile (``add``,
  ``invalidate``, in any process sharing the cache) keeps an answer read before the write
  committed ("not found" for a row being created) out of the cache.  A cache whose values
  cannot hold the marker caches answers as they come.

Every lookup that passed the filter but resolved to "not found" (from the loader, a cached
null marker, or a load it waited for) is an observed false positive of the filter; the guard
counts them next to the rejections, so ``stats()`` can compare the observed rate with the
filter's promise (its ``error_rate``), Prometheus can export it, and a log warning fires when
the observed rate drifts above the promise.

    guard = Guard(products_filter, MemoryCache(), load_product, null_ttl=60)
    guard.get("42")            # value, or None (rejected or not found)

    @bloom_guard(products_filter, MemoryCache())
    def load_product(key): ...
    load_product("42")         # the same flow

Keys that are not ``str``/``bytes`` (an ``int`` primary key) are turned into ``str`` for
the filter and the cache, exactly as ``ling_bloom.warmup`` does when it fills a filter.

When the filter's backend fails (a RedisFilter whose server is down, hung or refusing), the
guard follows its ``on_filter_error`` policy instead of failing the request:

- ``"open"`` (the default): the lookup goes on to the cache and the loader, as if there were
  no filter.  The app keeps answering correctly, at the cost the filter was there to save;
  a web team would rather pay database load for a few seconds than turn every guarded URL
  into an error or a wrong 404 because a cache-side helper is down.
- ``"closed"``: the lookup is rejected (``default``, a 404 in the middleware), for services
  where the database must never see unfiltered traffic.
- ``"raise"``: the error propagates.

A circuit breaker keeps a dead backend from costing a timeout per request: after a failure
the filter is not asked for ``breaker_seconds`` (5 by default; 0 turns the breaker off); then
one lookup tries it again, and a success closes the circuit.  The failure is logged once per
interval, not once per request; ``stats()`` and Prometheus count the errors, the lookups the
policy decided, and the time the circuit was open.  Lookups the policy decided are not
counted as observed false positives.

A lost filter (``FilterLostError``: a Redis filter made without a ttl is gone from its
server, which restarted empty, was flushed or evicted it) is not an outage: the server
answers, but every answer would be "absent", every existing row a 404.  So the guard "cannot
say": the lookup passes (fails open) under every policy, "closed" and "raise" included (a
lost filter must never turn a real user away, and neither rejecting nor raising can do
anything about it but wait for a rebuild).  It is logged once per loss (a new loss after the
filter came back is logged again), counted (``filter_losses``, ``lost_lookups``,
``lost_adds``) and flagged (``stats().filter_lost``).  With ``rebuild=`` (a function
``rebuild(filter)``, or a coroutine function for an AsyncGuard; the frameworks pass their
warm-up source) one rebuild starts per loss, in a thread (a coroutine function: a task of
the running event loop); while it runs the filter is not asked (half filled, it would reject
rows not yet added again), and keys added meanwhile are handed to it.  The guard uses the
filter again when its rebuild is done, or, without one, at the first lookup the filter
answers (someone else rebuilt it).  A rebuild that fails may have reset the filter and
added part of the rows: no guard of this process asks it until a later rebuild (started by
a lookup, no sooner than 30 s later) is done.  Adds the lost filter refuses never fail the caller.

A stored filter whose geometry is not the code's (``GeometryMismatchError``: the capacity
changed in the settings) is a configuration error: logged once with how to migrate, counted
as a filter error, flagged (``stats().geometry_mismatch``), and the lookup follows the
policy ("open": it passes, never a 500).
"""
from __future__ import annotations

import asyncio
import functools
import inspect
import threading
import uuid
from typing import Any, Awaitable, Callable, Dict, Optional, TypeVar

# The guard's parts, a module each; their public names are imported from here.
from . import _breaker
from ._breaker import POLICIES, REBUILD_RETRY_SECONDS  # noqa: F401
from ._breaker import _queue_add, _take_pending
from ._cache import (LOADING_TTL, NULL, Cache, MemoryCache, RedisCache, _Flight, _Loading,
                     is_loading, is_null)
from ._cache import _Null  # noqa: F401  (the marker's class, where its pickles name it)
from ._guard_base import _GuardBase, _Steps, log  # noqa: F401  (log: the guard's logger)
from ._keys import Key, as_key  # noqa: F401  (Key: the type of a converted key)
from ._metrics import GuardStats
from ._rebuild import (  # noqa: F401  (refill, arefill: public here)
    _asetup_problem,
    _blocks,
    _geometry_message,
    _maybe_await,
    _setup_problem,
    arefill,
    refill,
)

__all__ = [
    "AsyncGuard",
    "Cache",
    "Guard",
    "GuardStats",
    "MemoryCache",
    "NULL",
    "RedisCache",
    "as_key",
    "arefill",
    "bloom_guard",
    "is_null",
    "refill",
]

V = TypeVar("V")
_R = TypeVar("_R")


class Guard(_GuardBase):
    """The lookup flow for threads (WSGI apps, scripts).

    ``Guard(filter, cache=None, loader=None, *, null_ttl=60, value_ttl=None,
    key_prefix="", name=None, metrics=None, logger=None, drift_factor=1.5,
    drift_min_samples=1000, add_found=True)``

    filter     any ling_bloom filter (or anything with test/add)
    cache      MemoryCache(), RedisCache(redis_client), DjangoCache(), or any object with
               get/set(ttl)/delete; None caches nothing
    loader     ``loader(key) -> value or None`` (None: not found); or decorate it
    null_ttl   seconds a "not found" stays cached (None: no expiry, 0: not cached)
    value_ttl  seconds a found value stays cached (None: no expiry, 0: not cached)
    name       the guard's label in metrics and logs (default: the loader's __qualname__,
               else "default"); live guards exporting to one registry share a name (and
               one summed series) only when each was given it with name=; a derived name
               that collides is a ValueError (two lambdas are both "<lambda>")
    metrics    None: export to Prometheus' default registry if prometheus_client is
               installed; False: no export; a CollectorRegistry: that one
    logger     where the drift warning goes (default: logging "ling_bloom.guard")
    on_filter_error  what a lookup does when the filter's backend fails: "open" (default:
               go on to the cache and loader), "closed" (reject), "raise"
    breaker_seconds  after a failure, how long the filter is not asked (0: ask every time)
    filter_errors    the exceptions that count as a backend failure (default: ling_bloom's
               RedisError, and OSError: ConnectionError, TimeoutError)
    deleted_ttl, deleted_max  how long (3600 s) and how many (100,000) keys reported with
               ``deleted(key)`` are remembered, so that their lookups count as ``deleted``,
               not as observed false positives (a CountingFilter forgets them instead)
    rebuild    ``rebuild(filter)``: builds a lost filter again (e.g. ``refill(filter,
               keys)``: a RedisFilter built aside and OR'd in whole, any other reset() then the
               keys); run once per loss off the request path.
               It may return another filter object for the guard to use. None: the guard
               waits for the filter to answer again
    normalize  a function of a key giving the key the filter and cache see (``str.lower``
               for a case-insensitive key column); the warm-up must add keys through the
               same function
    """

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self._flights: Dict[str, _Flight] = {}
        self._flights_lock = threading.Lock()

    def _forked(self) -> None:
        # the loader calls in flight at the fork run in the parent's threads: nobody in
        # the child would end them, and a lookup of one of their keys would wait forever
        super()._forked()
        self._flights = {}
        self._flights_lock = threading.Lock()

    def get(self, key: Any, default: Any = None, *, loader: Optional[Callable[..., Any]] = None) -> Any:
        """The value for key, or ``default`` when the filter rejects it or it is not
        found.  The loader is called with the key as given."""
        if not self.check(key):
            return default
        ck = self.cache_key(key)
        cached = self.cache.get(ck)
        if cached is not None and not is_loading(cached):
            return self._from_cache(cached, default, key)
        return self._load(key, ck, default, loader)

    def _load(self, key: Any, ck: str, default: Any, loader: Optional[Callable[..., Any]]) -> Any:
        with self._flights_lock:
            running = self._flights.get(ck)
            leader = running is None
            if running is None:
                flight = self._flights[ck] = _Flight()
            else:
                flight = running
                flight.waiters += 1
        if not leader:
            flight.event.wait()
            if flight.error is not None:
                self._count(coalesced=1, errors=1)
                raise flight.error
            self._count(coalesced=1, **({"not_found": 1} if flight.value is None else {"found": 1}))
            return default if flight.value is None else flight.value
        try:
            # Another lookup may have filled the cache between our miss and our flight.
            cached = self.cache.get(ck)
            if cached is not None and not is_loading(cached):
                flight.value = None if is_null(cached) else cached
                return self._from_cache(cached, default, key)
            self._count(loads=1)
            token = self._loading(ck)
            try:
                value = self._call_loader(loader, key)
            except BaseException as e:
                flight.error = e
                self._count(errors=1)
                raise
            flight.value = value
            self._store(key, ck, value, token)
            return default if value is None else value
        finally:
            with self._flights_lock:
                del self._flights[ck]
            flight.event.set()

    def _loading(self, ck: str) -> Optional[_Loading]:
        """Put a loading marker for the loader about to run (None: nothing is cached, or
        the cache cannot hold the marker: the answer is cached as it comes)."""
        if self.null_ttl == 0 and self.value_ttl == 0:
            return None
        token = _Loading(uuid.uuid4().hex)
        try:
            self.cache.set(ck, token, LOADING_TTL)
        except Exception:  # noqa: BLE001 - a cache of values only (its own encoding)
            return None
        return token

    def _store(self, key: Any, ck: str, value: Any, token: Optional[_Loading] = None) -> None:
        # read before a write that invalidated the key meanwhile: not cached past it
        keep = token is None or _still_loading(self.cache.get(ck), token)
        if value is None:
            self._count_missing(key)
            if self.null_ttl != 0 and keep:
                self.cache.set(ck, NULL, self.null_ttl)
        else:
            self._count(found=1)
            if self.value_ttl != 0 and keep:
                self.cache.set(ck, value, self.value_ttl)
            if self.add_found:
                self._add_found(key)

    def add(self, key: Any, value: Any = None) -> None:
        """A key that now exists (a new row): add it to the filter, and cache value (when
        given) or drop any null marker cached for it.  A lost filter (FilterLostError) does
        not fail it: the add is counted (``lost_adds``) and handed to the rebuild; nor, under
        "open" and "closed", a stored geometry that is not the code's (logged once)."""
        fk = self.filter_key(key)
        if not _queue_add(self.filter, fk):
            self._run(self._add_steps(fk))
        ck = self.cache_key(key)
        if value is None:
            self.cache.delete(ck)
        elif self.value_ttl != 0:
            self.cache.set(ck, value, self.value_ttl)

    def invalidate(self, key: Any) -> None:
        """Drop what the cache holds for key (a value or a null marker)."""
        self.cache.delete(self.cache_key(key))

    def in_flight(self) -> int:
        """Loader calls running now (the number of per-key entries held)."""
        with self._flights_lock:
            return len(self._flights)

    def waiting(self, key: Any) -> int:
        """Lookups waiting now for the running loader call of key (0 when none runs)."""
        with self._flights_lock:
            flight = self._flights.get(self.cache_key(key))
            return flight.waiters if flight is not None else 0

    def __call__(self, func: Callable[[Any], V]) -> "Callable[[Any], Optional[V]]":
        """``@guard`` on a loader: the decorated function runs the whole flow."""
        if not callable(func):
            raise TypeError("a Guard is used as a decorator on a loader; for a lookup call "
                            "guard.get(key)")
        self._set_loader(func)
        guard = self

        @functools.wraps(func)
        def guarded(key: Any) -> Optional[V]:
            return guard.get(key)

        guarded.guard = guard  # type: ignore[attr-defined]
        guarded.stats = guard.stats  # type: ignore[attr-defined]
        guarded.invalidate = guard.invalidate  # type: ignore[attr-defined]
        guarded.add = guard.add  # type: ignore[attr-defined]
        guarded.uncached = func  # type: ignore[attr-defined]
        return guarded


def _still_loading(cached: Any, token: _Loading) -> bool:
    """Whether the answer of the loader of ``token`` may be cached: its loading marker is
    still there (no invalidation, no write, no other answer came meanwhile)."""
    return is_loading(cached) and cached.token == token.token


def _is_async_method(method: Any) -> bool:
    return inspect.iscoroutinefunction(method) or inspect.iscoroutinefunction(
        getattr(method, "__func__", None))

def _timeout_of(filter: Any) -> Optional[float]:
    """A Redis filter's longest timeout (socket_timeout, socket_connect_timeout), or None."""
    cfg = getattr(filter, "_cfg", None)  # the async filters
    if not isinstance(cfg, dict):
        read = getattr(type(filter), "_wire_config", None)  # the blocking ones
        try:
            cfg = read(filter) if read is not None else None
        except Exception:
            cfg = None
    if not isinstance(cfg, dict):
        return None
    times = [t for t in (cfg.get("socket_timeout"), cfg.get("socket_connect_timeout"))
             if isinstance(t, (int, float)) and t > 0]
    return float(max(times)) if times else None

class AsyncGuard(_GuardBase):
    """The same flow for asyncio: ``await guard.get(key)``.  The loader may be a coroutine
    function or a plain one; the cache's get/set/delete may be coroutine functions (Django's
    cache through DjangoCache, RedisCache(asynchronous=True)) or plain ones (MemoryCache).
    Concurrent lookups of one key share one loader call (per-key futures, dropped when
    the call ends).

    The filter never blocks the event loop: an async filter (``AsyncRedisFilter``,
    ``AsyncRedisBloomFilter``, or anything whose ``test``/``add`` return awaitables) is
    awaited; a blocking Redis filter (``RedisFilter``, ``RedisBloomFilter``) is called in the
    loop's default executor (a thread), so a hung Redis holds a thread, not the loop; an
    in-memory filter answers in well under a microsecond and is called directly.  A lookup
    cancelled while it waits for the filter (the client went away) is neither a failure
    nor a success of the backend: the circuit breaker lets the next lookup try."""

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self._flights: Dict[str, "asyncio.Future[Any]"] = {}
        self._waiters: Dict[str, int] = {}
        self._offload = _blocks(self.filter)
        self._bound = _timeout_of(self.filter)

    def _forked(self) -> None:
        # the lookups in flight at the fork wait on futures of the parent's event loop
        super()._forked()
        self._flights = {}
        self._waiters = {}

    async def _within_timeout(self, call: Awaitable[Any]) -> Any:
        """A lookup of a Redis filter ends within one timeout of the filter (the longer of
        socket_timeout and socket_connect_timeout), its wait for a connection included:
        a hung server with more lookups than connections made the lookups that waited
        for a connection wait a second timeout on it (and a blocking filter in threads, one
        per lookup before it).  Past it the lookup is a RedisTimeoutError (the policy
        decides); the call it waited on ends by its own timeout."""
        bound = self._bound
        if bound is None:
            return await call
        try:
            return await asyncio.wait_for(call, bound)
        except (TimeoutError, asyncio.TimeoutError) as e:  # one class since 3.11
            if type(e) is not TimeoutError and type(e) is not asyncio.TimeoutError:
                raise  # the filter's own (RedisTimeoutError)
            from ._core import RedisTimeoutError

            raise RedisTimeoutError(f"the filter did not answer within {bound:g} s "
                                    f"(its timeout, the wait for a connection included)") from None

    async def _ask(self, method: Callable[[Any], Any], key: Any) -> Any:
        """One call of the filter, awaited or run in a thread as the filter needs."""
        if self._offload:
            return await asyncio.get_running_loop().run_in_executor(None, method, key)
        out = method(key)
        if inspect.isawaitable(out):
            out = await out
        return out

    async def _arun(self, steps: "_Steps[_R]") -> "_R":
        """Drive steps, awaiting each filter call (``_ask``): the asyncio twin of
        ``_run``."""
        try:
            call = next(steps)
            while True:
                try:
                    out = await self._ask(call[0], call[1])
                except BaseException as e:  # handed to the steps, which decide
                    call = steps.throw(e)
                else:
                    call = steps.send(out)
        except StopIteration as stop:
            return stop.value  # type: ignore[no-any-return]

    async def acheck(self, key: Any) -> bool:
        """``check()`` for the event loop (the ASGI middleware calls it): the same
        counting and failure policy, without blocking the loop."""
        fk = self.filter_key(key)
        early = self._before_test()
        if early is not None:
            return early
        epoch = _breaker.comebacks
        try:
            hit = await self._within_timeout(self._ask(self.filter.test, fk))
        except BaseException as e:
            return self._test_failed(e, epoch)
        return self._answered(hit)

    def _start_rebuild(self, flt: Any) -> None:
        """A coroutine function's rebuild runs as a task of the running event loop (it
        never blocks it); a plain function's in a thread."""
        fn = self.rebuild
        if not inspect.iscoroutinefunction(fn):
            return super()._start_rebuild(flt)
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return super()._start_rebuild(flt)
        task = loop.create_task(self._arun_rebuild(flt))
        self._rebuild_tasks.add(task)  # held until it ends
        task.add_done_callback(self._rebuild_tasks.discard)

    async def _arun_rebuild(self, flt: Any) -> None:
        try:
            out = await self.rebuild(flt)  # type: ignore[misc]
        except BaseException as e:  # noqa: BLE001 - reported, retried later
            self._rebuild_failed(flt, e)
            if isinstance(e, asyncio.CancelledError):
                raise
            return
        target = out if out is not None and hasattr(out, "test") else flt
        offload = _blocks(target)
        dropped = 0
        while True:
            keys, more = _take_pending(flt)
            dropped += more
            if not keys:
                break
            try:
                if offload:
                    await asyncio.get_running_loop().run_in_executor(None, target.update, keys)
                else:
                    await _maybe_await(target.update(keys))
            except BaseException as e:  # noqa: BLE001
                self._rebuild_failed(flt, e, len(keys) + dropped)
                return
        self._finish_rebuild(flt, target, dropped)

    def check(self, key: Any) -> bool:
        if not self._offload and _is_async_method(self.filter.test):
            raise TypeError("this guard's filter is asynchronous: await guard.acheck(key)")
        return super().check(key)

    async def _aadd_found(self, key: Any) -> None:
        await self._arun(self._add_found_steps(key))

    async def get(self, key: Any, default: Any = None, *, loader: Optional[Callable[..., Any]] = None) -> Any:
        if not await self.acheck(key):
            return default
        ck = self.cache_key(key)
        cached = await _maybe_await(self.cache.get(ck))
        if cached is not None and not is_loading(cached):
            return self._from_cache(cached, default, key)
        return await self._load(key, ck, default, loader)

    async def _load(self, key: Any, ck: str, default: Any, loader: Optional[Callable[..., Any]]) -> Any:
        flight = self._flights.get(ck)
        if flight is not None:
            self._waiters[ck] = self._waiters.get(ck, 0) + 1
            try:
                value = await asyncio.shield(flight)
            except asyncio.CancelledError:
                if flight.cancelled():  # the loading task was cancelled: load again
                    return await self._load(key, ck, default, loader)
                raise
            except BaseException:
                self._count(coalesced=1, errors=1)
                raise
            self._count(coalesced=1, **({"not_found": 1} if value is None else {"found": 1}))
            return default if value is None else value
        flight = asyncio.get_running_loop().create_future()
        self._flights[ck] = flight
        try:
            cached = await _maybe_await(self.cache.get(ck))
            if cached is not None and not is_loading(cached):
                flight.set_result(None if is_null(cached) else cached)
                return self._from_cache(cached, default, key)
            self._count(loads=1)
            token = await self._aloading(ck)
            try:
                value = await _maybe_await(self._call_loader(loader, key))
            except asyncio.CancelledError:
                raise  # finally cancels the flight: its waiters load again
            except BaseException as e:
                self._count(errors=1)
                flight.set_exception(e)
                # Mark the exception as retrieved if nobody waited for it.
                flight.add_done_callback(lambda f: f.exception())
                raise
            flight.set_result(value)
            await self._store(key, ck, value, token)
            return default if value is None else value
        finally:
            if not flight.done():  # cancelled while loading: its waiters load again
                flight.cancel()
            del self._flights[ck]
            self._waiters.pop(ck, None)

    async def _aloading(self, ck: str) -> Optional[_Loading]:
        """Guard._loading for a cache of coroutine methods too."""
        if self.null_ttl == 0 and self.value_ttl == 0:
            return None
        token = _Loading(uuid.uuid4().hex)
        try:
            await _maybe_await(self.cache.set(ck, token, LOADING_TTL))
        except Exception:  # noqa: BLE001 - a cache of values only (its own encoding)
            return None
        return token

    async def _store(self, key: Any, ck: str, value: Any,
                     token: Optional[_Loading] = None) -> None:
        keep = token is None or _still_loading(await _maybe_await(self.cache.get(ck)), token)
        if value is None:
            self._count_missing(key)
            if self.null_ttl != 0 and keep:
                await _maybe_await(self.cache.set(ck, NULL, self.null_ttl))
        else:
            self._count(found=1)
            if self.value_ttl != 0 and keep:
                await _maybe_await(self.cache.set(ck, value, self.value_ttl))
            if self.add_found:
                await self._aadd_found(key)

    async def add(self, key: Any, value: Any = None) -> None:
        fk = self.filter_key(key)
        if not _queue_add(self.filter, fk):
            await self._arun(self._add_steps(fk))
        ck = self.cache_key(key)
        if value is None:
            await _maybe_await(self.cache.delete(ck))
        elif self.value_ttl != 0:
            await _maybe_await(self.cache.set(ck, value, self.value_ttl))

    async def invalidate(self, key: Any) -> None:
        await _maybe_await(self.cache.delete(self.cache_key(key)))

    def in_flight(self) -> int:
        """Loader calls running now (the number of per-key entries held)."""
        return len(self._flights)

    def waiting(self, key: Any) -> int:
        """Lookups waiting now for the running loader call of key (0 when none runs)."""
        return self._waiters.get(self.cache_key(key), 0)

    def __call__(self, func: Callable[..., Any]) -> Callable[[Any], Awaitable[Any]]:
        if not callable(func):
            raise TypeError("an AsyncGuard is used as a decorator on a loader; for a lookup "
                            "await guard.get(key)")
        self._set_loader(func)
        guard = self

        @functools.wraps(func)
        async def guarded(key: Any) -> Any:
            return await guard.get(key)

        guarded.guard = guard  # type: ignore[attr-defined]
        guarded.stats = guard.stats  # type: ignore[attr-defined]
        guarded.invalidate = guard.invalidate  # type: ignore[attr-defined]
        guarded.add = guard.add  # type: ignore[attr-defined]
        guarded.uncached = func  # type: ignore[attr-defined]
        return guarded


def bloom_guard(filter: Any, cache: Any = None, **options: Any) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Decorate a loader with a new guard: ``@bloom_guard(filter, cache, null_ttl=30)``.
    A coroutine function gets an AsyncGuard, a plain one a Guard.  The decorated function
    has ``.guard``, ``.stats()``, ``.invalidate(key)``, ``.add(key)`` and ``.uncached``."""

    def decorate(func: Callable[..., Any]) -> Callable[..., Any]:
        cls = AsyncGuard if inspect.iscoroutinefunction(func) else Guard
        return cls(filter, cache, **options)(func)

    return decorate
