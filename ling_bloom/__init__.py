"""ling_bloom: Bloom filters for Python with a C core.

Six filters share one interface (add, test / ``in``, add_many, update, test_many,
reset, close, context manager):

- MemoryFilter: a bit array.
- BlockedFilter: a split-block bit array: one 64-byte block (cache line) per key; the
  fastest, sized for its own false-positive rate.
- CountingFilter: 4-bit saturating counters; can remove keys.
- ScalableFilter: a chain of bit arrays that grows (Almeida et al. 2007).
- RedisFilter: a Redis bitmap, hashing on the client.
- RedisBloomFilter: the RedisBloom module's BF.* commands.

AsyncRedisFilter and AsyncRedisBloomFilter (ling_bloom.aio) are the two Redis filters for
asyncio: the same keys on the server, awaited.

Keys are str (hashed as UTF-8), bytes, any bytes-like object, or int (hashed as its
decimal text: ``42`` and ``"42"`` are one key, as a Go service's strconv writes it).  The
default hash
is XXH3-128 with double hashing; ``hash="ling-base"`` reproduces the Go library
ling-base bit for bit, to share a Redis bitmap with Go services.
"""
from __future__ import annotations

import os
from typing import TYPE_CHECKING, BinaryIO, NamedTuple, Optional

from . import _core
from ._core import (
    FORMAT_VERSION,
    MAX_BITS,
    MAX_K,
    BlockedFilter,
    BloomError,
    BoolArray,
    ClosedError,
    CorruptFileError,
    CountingFilter,
    EmptyKeyError,
    EvictionWarning,
    FilterFullError,
    FilterNotFoundError,
    GeometryMismatchError,
    FilterLostError,
    KeyNotOwnedError,
    InvalidCapacityError,
    InvalidFalsePositiveRateError,
    MemoryFilter,
    ModuleMissingError,
    NotSupportedError,
    RedisConnectionError,
    RedisFilter,
    RedisError,
    RedisProtocolError,
    RedisResponseError,
    RedisTimeoutError,
    ScalableFilter,
    WrongTypeError,
    build_info,
    hash_pair,
    indices,
)
from ._core import RedisBloomFilter
from ._protocols import Batcher, Filter, Remover
from .theory import false_positive_rate, ideal_false_positive_rate, optimal_k

from ._version import __version__ as __version__


# What the C binding needs of the package, handed over once (it never imports
# ling_bloom); each imports its module on first use, so ``import ling_bloom`` stays light.
def _atomic_write(path: object, data: bytes) -> None:
    from ._io import atomic_write

    atomic_write(path, data)  # type: ignore[arg-type]


def _read_file(path: object) -> bytes:
    from ._io import read_file

    return read_file(path)  # type: ignore[arg-type]


def _umask() -> int:
    from ._io import _umask

    return _umask()


def _html(f: object) -> str:
    from ._display import html

    return html(f)


def _connection_kwargs(client: object) -> "dict[str, object]":
    from ._redis_client import connection_kwargs

    return connection_kwargs(client)


def _bloom_info(*fields: "int | None") -> object:
    from .redisbloom import RedisBloomInfo

    return RedisBloomInfo(*fields)


_core._set_hooks(atomic_write=_atomic_write, read_file=_read_file, umask=_umask,
                 html=_html, connection_kwargs=_connection_kwargs, bloom_info=_bloom_info)


class Params(NamedTuple):
    """The geometry of a Bloom filter: m bits and k hash functions."""

    m: int
    k: int

    @property
    def nbytes(self) -> int:
        """Bytes of a bit array of m bits."""
        return (self.m + 7) // 8


def estimate(n: int, p: float) -> Params:
    """m and k for n keys at false-positive rate p, as the ling-base Go library's Estimate computes them.

    m = ceil(n * -ln(p) / ln(2)**2), k = max(1, ceil(ln(2) * m / n)).
    InvalidCapacityError for n <= 0 (or an m beyond 2**63), InvalidFalsePositiveRateError
    unless 0 < p < 1.  This is the bare arithmetic, as the Go library computes it: m may
    exceed MAX_BITS (2**48) and k MAX_K (64), which no filter can have; :func:`geometry`
    raises the constructors' errors for those instead.
    """
    m, k = _core.estimate(n, p)
    return Params(m, k)


def geometry(n: int, p: float, hash: Optional[str] = None) -> Params:
    """m and k of a filter built for n keys at false-positive rate p (``MemoryFilter(n, p)``).

    ``estimate(n, p)``, except where its asymptotic formula undershoots: for small n (below
    about a thousand keys) the default hash ("xxh3-mix") gets more bits, so that the rate at n
    keys (with ideal hashing, :func:`ideal_false_positive_rate`) stays within 1% of p.  The
    "ling-base" and "xxh3" schemes keep ``estimate``'s values (Go services and files written with the unmixed walk
    compute them the same way).  Sizes no filter can have raise what the constructors
    raise: InvalidCapacityError for m beyond MAX_BITS (2**48), InvalidFalsePositiveRateError
    for k beyond MAX_K (64).
    """
    m, k = _core.geometry(n, p, hash)
    return Params(m, k)


if TYPE_CHECKING:
    from .aio import AsyncRedisBloomFilter, AsyncRedisFilter
    from .guard import AsyncGuard, Guard, MemoryCache, RedisCache, bloom_guard
    from .filefilter import UnsharedFilterWarning
    from .warmup import sync, warmup

# Loaded on first use, so that ``import ling_bloom`` stays light: the asyncio filters and
# the guard import asyncio (and aio ssl), the warm-up helpers their own modules.
_LAZY = {
    "AsyncRedisBloomFilter": "aio",
    "AsyncRedisFilter": "aio",
    "AsyncGuard": "guard",
    "Guard": "guard",
    "MemoryCache": "guard",
    "RedisCache": "guard",
    "bloom_guard": "guard",
    "sync": "warmup",
    "warmup": "warmup",
    "UnsharedFilterWarning": "filefilter",
}


def __getattr__(name: str) -> object:
    import importlib

    if name == "aio":  # ling_bloom.aio without importing it first, as when it was eager
        return importlib.import_module(f"{__name__}.aio")
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'ling_bloom' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> "list[str]":
    # The names loaded on first use too (tab completion, help()), without loading them.
    return sorted(set(globals()) | set(_LAZY) | {"aio"})


_KINDS: "dict[str, type[MemoryFilter | CountingFilter | ScalableFilter | BlockedFilter]]" = {
    cls.__name__: cls for cls in (MemoryFilter, CountingFilter, ScalableFilter, BlockedFilter)
}


def from_bytes(data: bytes) -> MemoryFilter | CountingFilter | ScalableFilter | BlockedFilter:
    """Rebuild whichever filter to_bytes() saved in data.

    CorruptFileError (a BloomError and a ValueError) when data is not a saved filter.
    """
    return _KINDS[_core.peek_header(data)["kind"]].from_bytes(data)


def load(
    path: "str | os.PathLike[str] | BinaryIO",
) -> MemoryFilter | CountingFilter | ScalableFilter | BlockedFilter:
    """Read a filter saved with save(path), whatever its type.

    path may be a binary file object (io.BytesIO, open(..., "rb")): the filter is read
    from its position, exactly as many bytes as it has, so filters saved one after the
    other into one stream load one after the other.  CorruptFileError when the data is not
    a saved filter.
    """
    from ._io import read_file

    return from_bytes(read_file(path))


__all__ = [
    "AsyncGuard",
    "Guard",
    "MemoryCache",
    "RedisCache",
    "bloom_guard",
    "sync",
    "warmup",
    "UnsharedFilterWarning",
    "Batcher",
    "BlockedFilter",
    "BoolArray",
    "BloomError",
    "ClosedError",
    "CorruptFileError",
    "CountingFilter",
    "EmptyKeyError",
    "EvictionWarning",
    "FORMAT_VERSION",
    "Filter",
    "FilterFullError",
    "FilterNotFoundError",
    "GeometryMismatchError",
    "FilterLostError",
    "KeyNotOwnedError",
    "InvalidCapacityError",
    "InvalidFalsePositiveRateError",
    "MAX_BITS",
    "MAX_K",
    "MemoryFilter",
    "ModuleMissingError",
    "NotSupportedError",
    "Params",
    "RedisBloomFilter",
    "RedisConnectionError",
    "RedisError",
    "RedisProtocolError",
    "RedisFilter",
    "AsyncRedisFilter",
    "AsyncRedisBloomFilter",
    "RedisResponseError",
    "RedisTimeoutError",
    "Remover",
    "ScalableFilter",
    "WrongTypeError",
    "build_info",
    "estimate",
    "false_positive_rate",
    "ideal_false_positive_rate",
    "from_bytes",
    "geometry",
    "hash_pair",
    "indices",
    "load",
    "optimal_k",
]
