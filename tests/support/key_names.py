"""The Redis key names a filter uses, computed here from the layout's rules (not asked of the
filter), for the tests that check every name on the server byte for byte: keys are bytes, and a
NUL, a brace or any other byte in one must come out in the names exactly as given.

    bitmap_names(key)            RedisFilter: the key (part 0) and its meta key
    sharded_names(key, shards)   a sharded filter (shards=N): the record and each shard's names
    server_keys(client)          every key name on a redis-py client's server (SCAN), a set
"""
from __future__ import annotations

from typing import Set

import ling_bloom as lb

# The keys that must make distinct filters: a NUL cuts nothing off.
NUL_KEYS = [b"a", b"a\x00b", b"a\x00c"]
# Every byte once; the reversed one has a '}' before its '{' (no hash tag).
ALL_BYTES = bytes(range(256))
ALL_BYTES_REVERSED = ALL_BYTES[::-1]


def has_hash_tag(key: bytes) -> bool:
    """Redis Cluster's rule: a '{', then a '}' after it with at least one byte between."""
    o = key.find(b"{")
    return o >= 0 and key.find(b"}", o + 1) > o + 1


def crc16(data: bytes) -> int:
    crc = 0
    for b in data:
        crc ^= b << 8
        for _ in range(8):
            crc = ((crc << 1) ^ 0x1021) & 0xFFFF if crc & 0x8000 else (crc << 1) & 0xFFFF
    return crc


def key_slot(key: bytes) -> int:
    o = key.find(b"{")
    c = key.find(b"}", o + 1) if o >= 0 else -1
    return crc16(key[o + 1:c] if c > o + 1 else key) & 16383


def slot_tag(slot: int) -> bytes:
    """The four bytes of '@'..'O' (0x40 | a nibble each, the smallest first) whose slot is slot."""
    for v in range(65536):
        tag = bytes(0x40 | (v >> s) & 15 for s in (12, 8, 4, 0))
        if crc16(tag) & 16383 == slot:
            return tag
    raise AssertionError(f"no tag for slot {slot}")


def base(key: bytes) -> bytes:
    """The prefix of the names that must share the key's slot: the key when it has a hash tag,
    "{key}" when it holds no '}', else "{T}key" with T a tag of the key's slot."""
    if has_hash_tag(key):
        return key
    if b"}" not in key:
        return b"{" + key + b"}"
    return b"{" + slot_tag(key_slot(key)) + b"}" + key


def bitmap_names(key: bytes, nparts: int = 1) -> Set[bytes]:
    return ({key, base(key) + b":meta"}
            | {base(key) + b":part:%d" % p for p in range(1, nparts)})


def shard_tag(key: bytes) -> bytes:
    """The key itself, or the hex of its XXH3-64 when a brace would break the tag."""
    if b"{" in key or b"}" in key:
        return b"%016x" % lb.hash_pair(key, "xxh3")[0]
    return key


def record_name(key: bytes) -> bytes:
    return b"{" + shard_tag(key) + b"}:shards"


def shard_name(key: bytes, i: int) -> bytes:
    return b"{" + shard_tag(key) + b":%d}" % i


def sharded_names(key: bytes, shards: int, redisbloom: bool = False) -> Set[bytes]:
    names = {record_name(key)}
    for i in range(shards):
        names |= {shard_name(key, i)} if redisbloom else bitmap_names(shard_name(key, i))
    return names


def server_keys(client) -> Set[bytes]:
    return set(client.scan_iter(count=1000))
