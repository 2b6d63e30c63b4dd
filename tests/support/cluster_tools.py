"""What the cluster tests ask of the `cluster` fixture's Redis Cluster (RedisClusterServers):
the slot of a key computed as the cluster does (CRC16/XMODEM, which is binascii.crc_hqx with
0, of the hash tag or the key), a hash tag that lands on a chosen node, a URL with the tests'
timeouts, and what the servers say they did (INFO errorstats, EXISTS on one node).

    key_slot(b"{user}:meta")        the slot
    url(cluster, wait_replicas=1)   "redis+cluster://...?socket_timeout=5&...&wait_replicas=1"
    tag_on(cluster, node, "ops")    "{ops:17}": a tag whose slot node serves
    primaries(cluster)              the live nodes whose role is master, now
"""
from __future__ import annotations

import binascii

from redis_server import ClusterNode


def key_slot(key: bytes) -> int:
    start = key.find(b"{")
    if start >= 0:
        end = key.find(b"}", start + 1)
        if end > start + 1:
            key = key[start + 1:end]
    return binascii.crc_hqx(key, 0) % 16384


def url(cluster, **opts) -> str:
    q = {"socket_timeout": 5, "socket_connect_timeout": 1, **opts}
    return cluster.url + "?" + "&".join(f"{k}={v}" for k, v in q.items())


def tag_on(cluster, node: ClusterNode, prefix: str) -> str:
    """A hash tag "{prefix:N}" whose slot node serves."""
    owners = cluster._slot_owners(cluster.live()[0])
    for i in range(100000):
        tag = f"{prefix}:{i}"
        s = key_slot(tag.encode())
        if any(lo <= s <= hi and port == node.port for lo, hi, port in owners):
            return "{" + tag + "}"
    raise AssertionError("no tag found")


def primaries(cluster):
    return [n for n in cluster.live() if n.role() == "master"]


def errorstat(node: ClusterNode, name: str) -> int:
    with node.client() as c:
        text = c.command("INFO", "errorstats").decode()
    for line in text.split("\r\n"):
        if line.startswith(f"errorstat_{name}:count="):
            return int(line.split("=", 1)[1])
    return 0


def cmdstat(node: ClusterNode, name: str) -> int:
    """Calls of a command node counted (INFO commandstats) since its last CONFIG RESETSTAT."""
    with node.client() as c:
        text = c.command("INFO", "commandstats").decode()
    for line in text.split("\r\n"):
        if line.startswith(f"cmdstat_{name}:calls="):
            return int(line.split("=")[1].split(",")[0])
    return 0


def exists(node: ClusterNode, key: str) -> bool:
    with node.client() as c:
        return c.command("EXISTS", key) == 1
