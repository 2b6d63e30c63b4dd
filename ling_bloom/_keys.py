"""Keys: how a value from an app (a URL parameter, a primary key, a DB row) becomes the key a
filter tests, a cache stores, or an add log records.

``as_key``     the filter's form of a key, for the guard, the warm-up and the framework
               integrations: ``str`` and bytes-like keys as they are, a one-column row
               unpacked, anything else ``str(key)`` (``42`` and ``"42"`` are the same key)
``key_text``   a key of ``as_key`` as text (the guard's cache keys)
``key_bytes``  a key as the filters hash it (the add log of a served file): ``str`` as
               UTF-8, ``int`` as its decimal text, a buffer as its bytes; anything else a
               TypeError

``ling_bloom.guard.as_key`` is the public name of ``as_key``.
"""
from __future__ import annotations

from typing import Any, Union

__all__ = ["Key", "as_key", "key_bytes", "key_text"]

Key = Union[str, bytes, bytearray, memoryview]


def as_key(key: Any) -> Key:
    """The filter's form of a key: ``str`` and bytes-like keys as they are, a one-column
    row (a 1-tuple or 1-list, as DB cursors yield) unpacked, anything else ``str(key)``
    (``42`` and ``"42"`` are the same key)."""
    if isinstance(key, (str, bytes, bytearray, memoryview)):
        return key
    if isinstance(key, (tuple, list)) and len(key) == 1:
        return as_key(key[0])
    if isinstance(key, bool) or key is None:
        raise TypeError(f"not a key: {key!r}")
    return str(key)


def key_text(key: Key) -> str:
    """A key of ``as_key`` as text: a ``str`` as it is, bytes decoded as UTF-8 (bytes that
    are not UTF-8 as backslash escapes)."""
    if isinstance(key, str):
        return key
    return bytes(key).decode("utf-8", "backslashreplace")


def key_bytes(key: Any) -> bytes:
    """A key as the filters hash it: ``str`` as UTF-8, ``int`` (not bool) as its decimal
    text, a buffer as its bytes."""
    if isinstance(key, str):
        return key.encode("utf-8")
    if isinstance(key, int) and not isinstance(key, bool):
        return str(int(key)).encode("ascii")
    if isinstance(key, (bytes, bytearray, memoryview)):
        return bytes(key)
    try:
        return bytes(memoryview(key))
    except TypeError:
        raise TypeError(f"a key is str, int, bytes or a buffer, not {type(key).__name__}") from None
