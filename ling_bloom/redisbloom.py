"""What RedisBloomFilter returns besides booleans: the typed BF.INFO result, and helpers
to keep a dump (the BF.SCANDUMP chunks) as one bytes value.

RedisBloomFilter itself is in the C extension (``ling_bloom.RedisBloomFilter``).
"""
from __future__ import annotations

import struct
from typing import Iterable, List, NamedTuple, Optional, Tuple

Chunk = Tuple[int, bytes]
"""One step of BF.SCANDUMP: (iterator, data), replayed as BF.LOADCHUNK key iterator data."""


class RedisBloomInfo(NamedTuple):
    """BF.INFO of a RedisBloom filter, read by field name.

    A field the server did not report is None; ``expansion`` is None for a non-scaling
    filter (the module answers nil).  On the real module ``size`` is the memory the
    filter uses, in bytes.
    """

    capacity: Optional[int]
    """"Capacity": items the filter holds at its error rate (all sub-filters)."""
    size: Optional[int]
    """"Size": bytes of memory."""
    filters: Optional[int]
    """"Number of filters": sub-filters (1 until a scaling filter grows)."""
    items: Optional[int]
    """"Number of items inserted"."""
    expansion: Optional[int]
    """"Expansion rate": growth factor of each new sub-filter; None when non-scaling."""


_MAGIC = b"LBRBDUMP"
_VERSION = 1
_HEAD = struct.Struct(">8sBI")   # magic, version, number of chunks
_ITEM = struct.Struct(">qQ")     # iterator, length


def chunks_to_bytes(chunks: Iterable[Chunk]) -> bytes:
    """Pack the list that ``RedisBloomFilter.dump()`` returns into one bytes value (to
    store in a file or another key); ``chunks_from_bytes`` unpacks it."""
    items = [(int(it), bytes(data)) for it, data in chunks]
    parts = [_HEAD.pack(_MAGIC, _VERSION, len(items))]
    for it, data in items:
        parts.append(_ITEM.pack(it, len(data)))
        parts.append(data)
    return b"".join(parts)


def chunks_from_bytes(blob: bytes) -> List[Chunk]:
    """The chunk list packed by ``chunks_to_bytes``; ValueError when blob is not one."""
    view = memoryview(blob)
    if len(view) < _HEAD.size:
        raise ValueError("not a packed RedisBloom dump: too short")
    magic, version, count = _HEAD.unpack_from(view, 0)
    if magic != _MAGIC:
        raise ValueError("not a packed RedisBloom dump: bad magic")
    if version != _VERSION:
        raise ValueError(f"packed RedisBloom dump of version {version}, expected {_VERSION}")
    off = _HEAD.size
    out: List[Chunk] = []
    for _ in range(count):
        if off + _ITEM.size > len(view):
            raise ValueError("packed RedisBloom dump is truncated")
        it, n = _ITEM.unpack_from(view, off)
        off += _ITEM.size
        if off + n > len(view):
            raise ValueError("packed RedisBloom dump is truncated")
        out.append((it, bytes(view[off:off + n])))
        off += n
    if off != len(view):
        raise ValueError("packed RedisBloom dump has trailing bytes")
    return out


__all__ = ["Chunk", "RedisBloomInfo", "chunks_from_bytes", "chunks_to_bytes"]
