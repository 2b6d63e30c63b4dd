"""Keys: how a value from an app (a URL parameter, a primary key, a DB row) becomes the key a
filter tests, a cache stores, or an add log records.

There is one conversion, the filters' own (csrc/py/keys.c, exposed as ``_core._key`` and
``_core.key_bytes``): every name here defers to it, so a key the guard tests, a key a
warm-up adds and a key a served file logs are the key the filter hashes.

``as_key``     the filter's form of a key, for the guard, the warm-up and the framework
               integrations: ``str`` and bytes-like keys as they are, an int or int-like
               (an int subclass, an ``IntEnum``, numpy's integer scalars: ``__index__``) as
               its decimal text, a buffer as its bytes, a one-column row unpacked (a
               1-D numpy array of numbers or text is a row too); other
               numbers (float, Decimal, numpy's floats, bool) and wider rows a TypeError;
               anything else ``str(key)`` (a UUID, a date)
``route_key``  a URL route's value (Flask, ASGI): as ``as_key``, but a float (a
               ``<float:...>`` route, a view annotated ``float``) is its ``str()``
``key_text``   a key of ``as_key`` as text (the guard's cache keys)
``key_bytes``  a key as the filters hash it (the add log of a served file): the bytes of
               ``_core.key_bytes``; a key no filter takes raises what ``add`` raises

``ling_bloom.guard.as_key`` is the public name of ``as_key``.
"""
from __future__ import annotations

import numbers
from collections.abc import Iterator, Mapping, Sequence
from collections.abc import Set as AbstractSet
from typing import Any, Union

from . import _core

__all__ = ["Key", "as_key", "key_bytes", "key_text", "route_key"]

Key = Union[str, bytes, bytearray, memoryview]

#: The bytes every filter hashes for a key (a str's UTF-8, an int's or int-like's decimal
#: text, a buffer's bytes); TypeError, EmptyKeyError or ValueError as ``add`` raises them.
key_bytes = _core.key_bytes


def _row_key(row: Any) -> Key:
    """The key of a row: its one column's, or a TypeError."""
    values = list(row.values()) if isinstance(row, Mapping) else row
    if len(values) != 1:
        raise TypeError(f"a row of {len(values)} columns is not a key: {row!r}")
    return as_key(values[0])


def _is_array_row(key: Any) -> bool:
    """A row of a 2-D numpy array (``df[["id"]].to_numpy()``, a fetch into an array): a 1-D
    array of numbers, text or objects.  A 1-D array of bytes (``S``, ``V``, one-byte
    integers: ``np.frombuffer(b"...", np.uint8)``) stays its bytes, as the filters take it."""
    if getattr(key, "ndim", None) != 1 or type(key).__module__ != "numpy":
        return False
    dtype = key.dtype
    return not (dtype.kind in "SV" or (dtype.kind in "iu" and dtype.itemsize == 1))


def _is_buffer(key: Any) -> bool:
    try:
        memoryview(key)
    except TypeError:
        return False
    return True


def as_key(key: Any) -> Key:
    """The filter's form of a key: ``str`` and bytes-like keys as they are, an int or
    int-like as its decimal text (``42``, ``np.int64(42)`` and an ``IntEnum`` member of
    value 42 are the key ``"42"``), a buffer as its bytes, a one-column row (a 1-tuple or
    1-list, an ``sqlite3.Row`` or mapping of one column, as DB cursors yield, a 1-D numpy
    array of numbers or text, as a 2-D array's rows are) unpacked.
    A row of more columns, ``None``, ``bool``, the numbers no filter takes (float,
    complex, Decimal, Fraction, numpy's floating and bool scalars), an int-like whose
    ``__index__`` fails, and objects whose ``str()`` is no stable key (a generator or other
    iterator, a set, an object with the default ``repr``) are a TypeError; anything else is
    ``str(key)`` (a UUID, a date)."""
    if isinstance(key, (str, bytes, bytearray, memoryview)):
        return key
    if isinstance(key, (tuple, list)):
        return _row_key(key)
    if key is None:
        raise TypeError(f"not a key: {key!r}")
    if _is_array_row(key):
        return _row_key(key)
    try:
        return _core._key(key)
    except TypeError:
        if isinstance(key, (Sequence, Mapping)):  # sqlite3.Row, other DB API rows
            return _row_key(key)
        if isinstance(key, (bool, numbers.Number)) or _is_buffer(key) \
                or hasattr(type(key), "__index__"):
            raise  # a number, a buffer or an int-like that no filter takes: never its str()
    if isinstance(key, (Iterator, AbstractSet)) or \
            (type(key).__str__ is object.__str__ and type(key).__repr__ is object.__repr__):
        # its str() names its address (an object(), a generator) or its hash order (a
        # set): another key in every process, never found again
        raise TypeError(f"not a key: {type(key).__name__} (its str() is no stable key)")
    return str(key)


def route_key(value: Any) -> Key:
    """A URL route's value as a key: as ``as_key``, except that a float, the value of a
    ``<float:...>`` route or of a view annotated ``float``, is its ``str()`` ("2.50" is
    read as 2.5, the key "2.5"): the number as the view reads it."""
    if type(value) is float:
        return str(value)
    return as_key(value)


def key_text(key: Key) -> str:
    """A key of ``as_key`` as text, one text per filter key: a ``str`` as it is, bytes
    decoded as UTF-8 (so ``b"abc"`` and ``"abc"``, one key to a filter, are one text), the
    bytes that are not UTF-8 as ``\\xNN`` escapes.  A backslash of the key itself (of a
    ``str`` too) is doubled, so an escape is never a key's own text: ``b"\\xff"`` (one byte) and the
    four characters ``"\\xff"`` are two keys and two texts."""
    if isinstance(key, str):
        return key.replace("\\", "\\\\") if "\\" in key else key
    raw = bytes(key)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        # each byte that is not UTF-8 comes out as U+DC80..U+DCFF, written \xNN
        return "".join("\\\\" if c == "\\" else
                       f"\\x{ord(c) - 0xDC00:02x}" if 0xDC80 <= ord(c) <= 0xDCFF else c
                       for c in raw.decode("utf-8", "surrogateescape"))
    return text.replace("\\", "\\\\") if "\\" in text else text
