"""The guard's set-up and rebuilds: the set-up probe of a guarded filter (a stored
geometry that is not the code's), ``refill`` and ``arefill`` (build a lost filter again
from a source of keys, aside where it can), and how a filter's call is made (a blocking
Redis filter from the event loop in a thread, an awaitable awaited).

``refill`` and ``arefill`` are public as ``ling_bloom.guard.refill`` and ``arefill``."""
from __future__ import annotations

import asyncio
import inspect
from typing import Any, Awaitable, Callable, Iterator, Optional

from ._core import GeometryMismatchError
from ._keys import as_key


def _blocks(filter: Any) -> bool:
    """True for a filter whose calls wait on a network round trip in the calling thread
    (the blocking Redis filters): an AsyncGuard runs them in a thread."""
    from ._core import RedisBloomFilter, RedisFilter

    return isinstance(filter, (RedisFilter, RedisBloomFilter))

def _maybe_await(value: Any) -> Awaitable[Any]:
    if inspect.isawaitable(value):
        return value

    async def done() -> Any:
        return value

    return done()




def _geometry_message(flt: Any, error: BaseException) -> str:
    """What a GeometryMismatchError of a guarded filter means, and how to migrate."""
    key = getattr(flt, "key", None)
    where = f"at {key!r} " if key is not None else ""
    return (f"the filter stored {where}was made with another geometry than this code's "
            f"({error}): the capacity, error rate or hash in the settings changed, the "
            f"stored filter keeps the old ones. A configuration error: migrate by giving "
            f"the filter a new key (e.g. {str(key) + ':v2' if key is not None else 'bf:name:v2'!r}) "
            f"and running the warm-up, or by deleting the stored keys "
            f"(filter.key_names() lists them) and running the warm-up; or restore the old "
            f"settings")


_PROBE_KEY = "ling_bloom:set-up probe"


def _setup_problem(flt: Any) -> Optional[BaseException]:
    """Ask a blocking filter one test at set-up: the GeometryMismatchError it raises, or
    None (it answered, or failed otherwise: an outage is not a set-up mistake)."""
    try:
        out = flt.test(_PROBE_KEY)
    except GeometryMismatchError as e:
        return e
    except Exception:  # noqa: BLE001 - down, lost...: not what set-up checks
        return None
    if inspect.isawaitable(out):  # an async filter: not asked from here
        getattr(out, "close", lambda: None)()
    return None


async def _asetup_problem(flt: Any) -> Optional[BaseException]:
    """_setup_problem() for the event loop: a blocking Redis filter is asked in a thread."""
    try:
        if _blocks(flt):
            await asyncio.get_running_loop().run_in_executor(None, flt.test, _PROBE_KEY)
        else:
            await _maybe_await(flt.test(_PROBE_KEY))
    except GeometryMismatchError as e:
        return e
    except Exception:  # noqa: BLE001
        return None
    return None


def _resolve(value: Any) -> Any:
    """In a rebuild's thread: an awaitable (an async filter's call) run to its end in an
    event loop of the thread's own."""
    if inspect.isawaitable(value):
        async def wait() -> Any:
            return await value

        return asyncio.run(wait())
    return value


_REBUILD_BATCH = 10_000


def _aside(flt: Any) -> Any:
    """For a Redis bitmap filter (RedisFilter or AsyncRedisFilter, one bitmap, not
    shards): an empty in-memory filter of its geometry, to build the keys in aside and
    OR into the bitmap with one ``load()``, which also marks the filter whole again, so
    that no process ever finds it half filled.  None for any other filter."""
    from ._core import BlockedFilter, MemoryFilter, RedisFilter
    from .aio import AsyncRedisFilter

    # isinstance, not the class's name: an application's subclass is rebuilt aside too
    if not isinstance(flt, (RedisFilter, AsyncRedisFilter)) or \
            getattr(flt, "shards", 1) != 1 or not hasattr(flt, "load"):
        return None

    if getattr(flt, "layout", "standard") == "blocked":
        return BlockedFilter(m=flt.m, k=flt.k)
    return MemoryFilter(m=flt.m, k=flt.k, hash=flt.hash)


def _batches(keys: Any, batch_size: int) -> Iterator[list]:
    batch: list = []
    for k in keys:
        batch.append(as_key(k))
        if len(batch) >= batch_size:
            yield batch
            batch = []
    if batch:
        yield batch


def refill(flt: Any, keys: Any, batch_size: int = _REBUILD_BATCH) -> None:
    """A lost filter built again, blocking (a rebuild's thread), from every key of
    ``keys`` (converted as the warm-up converts them).  A RedisFilter's keys are built
    in memory first and OR'd into Redis with one ``load()``: every process finds the
    filter lost until it is whole again, never half filled.  Any other filter:
    ``reset()`` (which makes it again, empty, with its geometry), then the keys in
    batches; another process may ask it meanwhile (see docs/integrations.md)."""
    local = _aside(flt)
    if local is not None:
        for batch in _batches(keys, batch_size):
            local.update(batch)
        _resolve(flt.load(local))
        return
    reset = getattr(flt, "reset", None)
    if reset is not None:
        _resolve(reset())
    for batch in _batches(keys, batch_size):
        _resolve(flt.update(batch))


async def arefill(flt: Any, keys: Any, batch_size: int = _REBUILD_BATCH) -> None:
    """refill() on the event loop: ``keys`` an iterable, an async iterable, or an awaitable
    of either; a blocking Redis filter's calls run in a thread."""
    loop = asyncio.get_running_loop()
    offload = _blocks(flt)

    async def call(method: Callable[..., Any], *args: Any) -> Any:
        if offload:
            return await loop.run_in_executor(None, method, *args)
        return await _maybe_await(method(*args))

    if inspect.isawaitable(keys):
        keys = await keys
    local = _aside(flt)
    if local is None:
        reset = getattr(flt, "reset", None)
        if reset is not None:
            await call(reset)
    sink = local.update if local is not None else flt.update

    async def put(batch: list) -> None:
        if local is not None:
            sink(batch)  # in memory: no round trip
        else:
            await call(sink, batch)

    batch: list = []
    if hasattr(keys, "__aiter__"):
        async for k in keys:
            batch.append(as_key(k))
            if len(batch) >= batch_size:
                await put(batch)
                batch = []
    else:
        for batch_ in _batches(keys, batch_size):
            await put(batch_)
    if batch:
        await put(batch)
    if local is not None:
        await call(flt.load, local)
