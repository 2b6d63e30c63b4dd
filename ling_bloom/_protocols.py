"""The three interfaces of the ling-base Go library (Filter, Remover and Batcher) as typing
Protocols.  Every ling_bloom filter is a Filter and a Batcher; CountingFilter is also a
Remover."""
from __future__ import annotations

from typing import Iterable, List, Optional, Protocol, Type, Union, runtime_checkable

from types import TracebackType

Key = Union[str, bytes, bytearray, memoryview, int]
"""What the filters take: an int is the key of its decimal text (42 and "42" are one key);
bool and float are a TypeError at run time."""


@runtime_checkable
class Filter(Protocol):
    """Add keys, test keys, empty, close."""

    def add(self, key: Key) -> bool: ...

    def test(self, key: Key) -> bool: ...

    def __contains__(self, key: object) -> bool: ...

    def reset(self) -> None: ...

    def close(self) -> None: ...

    def __enter__(self) -> "Filter": ...

    def __exit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> Optional[bool]: ...


@runtime_checkable
class Remover(Protocol):
    """Filters that can remove a key (CountingFilter)."""

    def remove(self, key: Key) -> None: ...

    def discard(self, key: Key) -> bool: ...


@runtime_checkable
class Batcher(Protocol):
    """Many keys in one call (one round trip for the Redis filters)."""

    def add_many(self, keys: Iterable[Key]) -> List[bool]: ...

    def update(self, keys: Iterable[Key]) -> None: ...

    def test_many(self, keys: Iterable[Key]) -> List[bool]: ...
