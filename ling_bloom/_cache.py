"""The guard's caches and its single flight.

- ``NULL`` / ``is_null``: the null marker, "the loader found nothing", cached for
  ``null_ttl`` seconds so the database is not asked again.
- ``Cache``: what the guard needs from a cache (get, set with a TTL, delete);
  ``MemoryCache`` (in-process, TTL, LRU-bounded), ``RedisCache`` (a redis-py client),
  ``_NoCache`` (cache=None).
- ``_Flight``: one running loader call of a Guard, which concurrent lookups of the same key
  wait for and share (AsyncGuard uses a future per key instead).

Every public name here is imported from ``ling_bloom.guard``.
"""
from __future__ import annotations

import math
import os
import pickle
import threading
import time
import weakref
from collections import OrderedDict
from typing import Any, Callable, Optional, Tuple

try:
    from typing import Protocol, runtime_checkable
except ImportError:  # pragma: no cover - Python < 3.8
    from typing_extensions import Protocol, runtime_checkable  # type: ignore

__all__ = ["Cache", "MemoryCache", "NULL", "RedisCache", "is_null"]


# ------------------------------------------------------------------ null marker


class _Null:
    """The null marker: "the loader found nothing", cached for a short TTL.

    A singleton that survives pickling (it pickles as a reference to ``NULL``), so any
    pickling cache (Django's, redis with pickle) gives the same object back."""

    # Pickles name ling_bloom.guard.NULL, the marker's public home, as they always have: a
    # marker cached by one version of ling_bloom reads back in another.
    __module__ = "ling_bloom.guard"

    _instance: Optional["_Null"] = None

    def __new__(cls) -> "_Null":
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __reduce__(self) -> str:
        return "NULL"

    def __repr__(self) -> str:
        return "ling_bloom.guard.NULL"

    def __bool__(self) -> bool:
        return False


NULL = _Null()


def is_null(value: Any) -> bool:
    """True for the null marker (however the cache returned it)."""
    return value is NULL or isinstance(value, _Null)


class _Loading:
    """The loading marker: a loader runs for this key, and ``token`` is its call.  What the
    loader returns is cached only while its marker is still there: an invalidation
    meanwhile (a write's hook, in any process sharing the cache) removes it, so an answer
    read before the write committed ("absent" for a row being created, a row being
    deleted) is not cached after it.  A lookup that finds the marker loads as on a miss."""

    __slots__ = ("token",)

    def __init__(self, token: str):
        self.token = token

    def __reduce__(self) -> Any:
        return (_Loading, (self.token,))

    def __repr__(self) -> str:
        return f"<ling_bloom loading {self.token}>"


def is_loading(value: Any) -> bool:
    """True for a loading marker (a miss: a loader is running for the key)."""
    return isinstance(value, _Loading)


# Seconds a loading marker lives: a loader slower than this caches nothing.
LOADING_TTL = 60.0


# ----------------------------------------------------------------------- caches


@runtime_checkable
class Cache(Protocol):
    """What the guard needs from a cache.  ``get`` returns None on a miss (found values are
    never None: None is the loader's "not found"); ``ttl`` is in seconds, None for no
    expiry.  AsyncGuard also accepts these three as coroutine functions."""

    def get(self, key: str) -> Any: ...

    def set(self, key: str, value: Any, ttl: Optional[float] = None) -> None: ...

    def delete(self, key: str) -> None: ...


# Every MemoryCache, for the child of a fork: a lock held there by another thread of the
# parent would stay held (that thread is not in the child), and the first lookup hang.
_MEMORY_CACHES: "weakref.WeakSet[MemoryCache]" = weakref.WeakSet()


def _memory_caches_forked() -> None:
    for c in list(_MEMORY_CACHES):
        c._lock = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_memory_caches_forked)


class MemoryCache:
    """An in-process TTL cache, thread-safe, bounded: at most ``maxsize`` entries, the least
    recently used go first.  ``clock`` (seconds, monotonic) can be replaced in tests."""

    def __init__(self, maxsize: int = 100_000, clock: Callable[[], float] = time.monotonic):
        if maxsize <= 0:
            raise ValueError("maxsize must be positive")
        self.maxsize = maxsize
        self.clock = clock
        self._data: "OrderedDict[str, Tuple[Any, float]]" = OrderedDict()
        self._lock = threading.Lock()
        _MEMORY_CACHES.add(self)

    def get(self, key: str) -> Any:
        with self._lock:
            item = self._data.get(key)
            if item is None:
                return None
            value, expires = item
            if expires <= self.clock():
                del self._data[key]
                return None
            self._data.move_to_end(key)
            return value

    def set(self, key: str, value: Any, ttl: Optional[float] = None) -> None:
        expires = math.inf if ttl is None else self.clock() + ttl
        with self._lock:
            self._data[key] = (value, expires)
            self._data.move_to_end(key)
            while len(self._data) > self.maxsize:
                self._data.popitem(last=False)

    def delete(self, key: str) -> None:
        with self._lock:
            self._data.pop(key, None)

    def clear(self) -> None:
        with self._lock:
            self._data.clear()

    def __len__(self) -> int:
        return len(self._data)


_NULL_BYTES = b"\x00ling_bloom:null"
_LOADING_BYTES = b"\x00ling_bloom:loading:"


class RedisCache:
    """The cache protocol over a redis-py client (``redis.Redis``; for ``redis.asyncio``
    clients use ``RedisCache(client, asynchronous=True)`` with AsyncGuard).

    Values are stored with ``dumps``/``loads`` (pickle by default: use it only with a
    Redis you trust, or pass json.dumps/json.loads); the null marker is stored as a short
    byte string of its own.  TTLs are sent in milliseconds (PX)."""

    def __init__(
        self,
        client: Any,
        prefix: str = "",
        dumps: Callable[[Any], bytes] = pickle.dumps,
        loads: Callable[[bytes], Any] = pickle.loads,
        asynchronous: bool = False,
    ):
        self.client = client
        self.prefix = prefix
        self.dumps = dumps
        self.loads = loads
        if asynchronous:
            self.get = self._aget  # type: ignore[method-assign,assignment]
            self.set = self._aset  # type: ignore[method-assign,assignment]
            self.delete = self._adelete  # type: ignore[method-assign,assignment]

    def _decode(self, raw: Any) -> Any:
        if raw is None:
            return None
        if isinstance(raw, str):
            raw = raw.encode("utf-8", "surrogateescape")
        if raw == _NULL_BYTES:
            return NULL
        if raw.startswith(_LOADING_BYTES):
            return _Loading(raw[len(_LOADING_BYTES):].decode("ascii", "replace"))
        return self.loads(raw)

    def _encode(self, value: Any) -> bytes:
        if is_loading(value):
            return _LOADING_BYTES + value.token.encode("ascii")
        return _NULL_BYTES if is_null(value) else self.dumps(value)

    @staticmethod
    def _px(ttl: Optional[float]) -> Optional[int]:
        return None if ttl is None else max(1, int(ttl * 1000))

    def get(self, key: str) -> Any:
        return self._decode(self.client.get(self.prefix + key))

    def set(self, key: str, value: Any, ttl: Optional[float] = None) -> None:
        self.client.set(self.prefix + key, self._encode(value), px=self._px(ttl))

    def delete(self, key: str) -> None:
        self.client.delete(self.prefix + key)

    async def _aget(self, key: str) -> Any:
        return self._decode(await self.client.get(self.prefix + key))

    async def _aset(self, key: str, value: Any, ttl: Optional[float] = None) -> None:
        await self.client.set(self.prefix + key, self._encode(value), px=self._px(ttl))

    async def _adelete(self, key: str) -> None:
        await self.client.delete(self.prefix + key)


class _NoCache:
    """cache=None: nothing is cached (the filter and single flight still work)."""

    def get(self, key: str) -> Any:
        return None

    def set(self, key: str, value: Any, ttl: Optional[float] = None) -> None:
        pass

    def delete(self, key: str) -> None:
        pass


# ----------------------------------------------------------------- single flight


class _Flight:
    """One running loader call of a Guard: the lookups of its key that arrive meanwhile wait
    on ``event`` and share its ``value`` or ``error``."""

    __slots__ = ("event", "value", "error", "waiters")

    def __init__(self) -> None:
        self.event = threading.Event()
        self.value: Any = None
        self.error: Optional[BaseException] = None
        self.waiters = 0
