"""Both Redis filters on a real Redis Cluster, blocking and
asyncio: a test that takes ``flavor`` runs once with RedisFilter / RedisBloomFilter and once
with AsyncRedisFilter / AsyncRedisBloomFilter (tests/support/flavors.py), with the same
assertions, whole-filter calls (snapshot, load, card, info, dump...) included.  A blocking
filter of the same key (``flavor.twin``) reads what the other client wrote; the CLI and a
forked child stay blocking tests.  tests/redis/test_aio_cluster.py has what only asyncio has.

The cluster is the session's (the `cluster` fixture of tests/conftest.py, flushed before
each test, and brought back after it to the slot map and roles it had): 3 primaries with one replica each, every node on free ports of 127.0.0.1 with
the RedisBloom module loaded, created by ``redis-cli --cluster create``
(tests/support/redis_server.py, RedisClusterServers).  A node timeout of 1 s makes a killed
primary's replica take over within a few seconds.

The slot of a key is computed as the cluster does (tests/support/cluster_tools.py), so
that each test can put its filter on the node it wants.  What the client did on the wire is
read from the servers: INFO errorstats counts the -MOVED and -ASK replies a node sent, INFO
commandstats the commands a replica served.  Also here: wait_replicas (WAIT after every
write; on a single primary too) and the sharded filters (shards=N, redis_sharded.c).
"""
from __future__ import annotations

import asyncio
import os
import socket
import threading
import time

import pytest

import ling_bloom as lb
from cluster_tools import cmdstat, errorstat, exists, key_slot, primaries, tag_on, url
from hang_guard import returns
from hostile_server import HostileServer, array, bulk, integer, wait_until
from key_names import ALL_BYTES, bitmap_names, sharded_names
from redis_server import (HOST, RedisReplyError, SilentListener, exit_code_in_forked_child,
                          free_port)

pytestmark = pytest.mark.cluster


def test_cluster_urls_are_checked(flavor):
    for bad, msg in [
        ("redis+cluster://", "empty cluster node"),
        ("redis+cluster://h:0", "cluster node port"),
        ("redis+cluster://h:1,,h:2", "empty cluster node"),
        ("redis+cluster://h:1/2", "database 0"),
        ("redis+cluster://h:1?db=3", "database 0"),
        ("redis+cluster://h:1?read_from_replicas=maybe", "read_from_replicas"),
        ("redis+cluster://h:1?cluster_retry_timeout=-1", "cluster_retry_timeout"),
        ("redis://h:1?read_from_replicas=true", "redis\\+cluster://"),
    ]:
        with pytest.raises(ValueError, match=msg):
            flavor.RedisFilter.from_url(bad, "k", 100, 0.01)
    # a URL of many nodes: a ValueError naming the limit (it was a bare MemoryError)
    for n in (1001, 30001):
        many = "redis+cluster://" + ",".join(f"10.0.{i // 250}.{i % 250}:7000" for i in range(n))
        with pytest.raises(ValueError, match=f"names {n} nodes, at most 1000"):
            flavor.RedisFilter.from_url(many, "k", 100, 0.01)
    seeds = ",".join(f"10.0.{i // 250}.{i % 250}:7000" for i in range(1000))
    flavor.RedisFilter.from_url("redis+cluster://" + seeds, "k", 100, 0.01).close()
    for kw in ({"host": "h"}, {"port": 1}, {"db": 2}):
        with pytest.raises(TypeError, match="cluster"):
            flavor.RedisFilter.from_url("redis+cluster://h:1", "k", 100, 0.01, **kw)


def test_a_server_that_is_no_cluster_node(flavor, redis_server):
    u = f"redis+cluster://{HOST}:{redis_server.port}"
    with pytest.raises(lb.RedisResponseError, match="cluster"):
        flavor.RedisFilter.from_url(u, "k", 100, 0.01).add("a")


def slot_map(kind: str, ports) -> bytes:
    """A CLUSTER SLOTS / SHARDS reply (RESP2) giving the slots to the nodes at ports of
    127.0.0.1 in equal ranges, then one entry that is not a slot map's: the map is refused."""
    step = 16384 // len(ports)
    entries = []
    for i, port in enumerate(ports):
        lo, hi = i * step, (i + 1) * step - 1 if i + 1 < len(ports) else 16383
        if kind == "slots":
            entries.append(array(integer(lo), integer(hi),
                                 array(bulk(HOST.encode()), integer(port), bulk(b"id%d" % i))))
        else:
            node = array(*(bulk(x) for x in (b"id", b"id%d" % i, b"port")), integer(port),
                         *(bulk(x) for x in (b"ip", HOST.encode(), b"endpoint", HOST.encode(),
                                             b"role", b"master", b"health", b"online")))
            entries.append(array(bulk(b"slots"), array(integer(lo), integer(hi)),
                                 bulk(b"nodes"), array(node)))
    if kind == "slots":  # a range that ends before it starts
        entries.append(array(integer(9), integer(2), array(bulk(HOST.encode()), integer(1))))
    else:                # slots in pairs, and one left over
        entries.append(array(bulk(b"slots"), array(integer(9)), bulk(b"nodes"), array()))
    return array(*entries)


@pytest.mark.parametrize("kind", ["shards", "slots"])
def test_a_refused_slot_map_adds_no_nodes(flavor, kind):
    # A seed answers with a map naming 8 nodes that never answer, then a bad entry: the map is
    # refused whole, the error names it, and no call asks (or even connects to) those nodes.
    silent = [SilentListener() for _ in range(8)]
    answer = slot_map(kind, [s.port for s in silent])

    def script(ctx, args):
        cmd = [a.upper() for a in args[:2]]
        if cmd == [b"CLUSTER", b"SHARDS"] and kind == "slots":  # before Redis 7
            return b"-ERR unknown subcommand 'SHARDS'. Try CLUSTER HELP.\r\n"
        if cmd[:1] == [b"CLUSTER"]:
            return answer
        return b"-ERR no such command here\r\n"

    try:
        with HostileServer(script) as srv:
            # a second seed where nothing listens: the map is still the error told
            for seeds in (f"{HOST}:{srv.port}", f"{HOST}:{srv.port},{HOST}:{free_port()}"):
                u = (f"redis+cluster://{seeds}?socket_timeout=0.5&socket_connect_timeout=0.5"
                     "&cluster_retry_timeout=0.2")
                for f in (flavor.RedisFilter.from_url(u, "k", 100, 0.01),
                          flavor.RedisBloomFilter.from_url(u, "k", 100, 0.01)):
                    for call in (lambda: f.add("x"), lambda: f.test_many(["x", "y"]), f.reset):
                        with pytest.raises(lb.RedisProtocolError,
                                           match=f"{srv.port} answered CLUSTER {kind.upper()} "
                                                 "with something that is not a slot map"):
                            call()
                    f.close()
            assert sum(len(s.accepted) for s in silent) == 0   # none of them was asked
            asked = [a for _, a in srv.commands if a[:1] == [b"CLUSTER"]]
            assert len(asked) == 12 * (2 if kind == "slots" else 1)  # one map read a call
    finally:
        for s in silent:
            s.close()


def test_a_slot_map_past_its_byte_limit_is_refused(flavor):
    # A CLUSTER SHARDS reply of 17 MiB (a real cluster's is under 10 MB): a protocol error as
    # it arrives, nothing parsed; the call returns (it used to parse whatever came).
    huge = array(array(bulk(b"slots"), array(integer(0), integer(16383)), bulk(b"nodes"),
                       array(array(bulk(b"id"), bulk(b"x" * (17 << 20)), bulk(b"port"),
                                   integer(1), bulk(b"ip"), bulk(HOST.encode()), bulk(b"role"),
                                   bulk(b"master"), bulk(b"health"), bulk(b"online")))))

    def script(ctx, args):
        if [a.upper() for a in args[:1]] == [b"CLUSTER"]:
            return huge
        return b"-ERR no such command here\r\n"

    with HostileServer(script) as srv:
        u = f"redis+cluster://{HOST}:{srv.port}?cluster_retry_timeout=0.2"
        for f in (flavor.RedisFilter.from_url(u, "k", 100, 0.01),
                  flavor.RedisBloomFilter.from_url(u, "k", 100, 0.01)):
            with pytest.raises(lb.RedisProtocolError, match="at most 16777"):
                returns(lambda: f.add("x"))
            f.close()


def test_a_slot_map_of_many_ranges_and_nodes_is_read_whole(flavor):
    # One shard of 16384 single-slot ranges and 4000 nodes (0.6 MB): every range once and
    # every node once (the parse went over every node for every range: minutes).  The map
    # names this server for every slot, which then answers the call's commands itself.
    nodes = [array(*(bulk(x) for x in (b"port",)), integer(p),
                   *(bulk(x) for x in (b"ip", HOST.encode(), b"role", b"replica", b"health",
                                       b"online")))
             for p in range(20000, 24000)]

    def script(ctx, args):
        if [a.upper() for a in args[:1]] == [b"CLUSTER"]:
            return the_map
        return b"-ERR no such command here\r\n"

    with HostileServer(script) as srv:
        me = array(bulk(b"port"), integer(srv.port), bulk(b"ip"), bulk(HOST.encode()),
                   bulk(b"role"), bulk(b"master"), bulk(b"health"), bulk(b"online"))
        the_map = array(array(bulk(b"slots"),
                              array(*(integer(s) for s in range(16384) for _ in (0, 1))),
                              bulk(b"nodes"), array(*nodes, me)))
        assert len(the_map) > 500_000
        u = f"redis+cluster://{HOST}:{srv.port}?cluster_retry_timeout=0.2"
        with flavor.RedisFilter.from_url(u, "k", 100, 0.01) as f:
            with pytest.raises(lb.RedisResponseError, match="no such command here"):
                returns(lambda: f.add("x"))
        asked = [a for _, a in srv.commands if a[:1] == [b"CLUSTER"]]
        assert len(asked) == 1 and len(srv.commands) > 1  # the map taken, the call sent


def open_sockets_to(ports) -> int:
    """This process's TCP sockets whose peer is 127.0.0.1 on one of ports, ESTABLISHED:
    each socket descriptor of /proc/self/fd asked itself (a duplicate of it), not the
    machine's whole /proc/net/tcp, which holds every socket of every process (tens of
    thousands of lines late in a run: 80 reads took seconds)."""
    want = set(ports)
    n = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            if not os.readlink(f"/proc/self/fd/{fd}").startswith("socket:["):
                continue
            s = socket.socket(fileno=os.dup(int(fd)))
        except OSError:
            continue
        try:
            if s.family != socket.AF_INET or s.type != socket.SOCK_STREAM:
                continue
            host, port = s.getpeername()
            state = s.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 1)[0]
            if host == "127.0.0.1" and port in want and state == 1:  # TCP_ESTABLISHED
                n += 1
        except OSError:  # not connected
            continue
        finally:
            s.close()
    return n


def test_redirect_targets_the_map_does_not_name_are_closed(flavor, redis_server):
    # Each call is sent with -ASK to another address the map does not name (a server in
    # front of a real one): the client drops such a node when the next call begins, so its
    # connections do not pile up (they used to stay open: 40 calls, 40 sockets).
    targets = []

    def target(ctx, args):
        return b"+OK\r\n" if args[:1] == [b"ASKING"] else None

    def seed(ctx, args):
        if [a.upper() for a in args[:1]] == [b"CLUSTER"]:
            return array(array(bulk(b"slots"), array(integer(0), integer(16383)),
                               bulk(b"nodes"),
                               array(array(bulk(b"port"), integer(srv.port), bulk(b"ip"),
                                           bulk(HOST.encode()), bulk(b"role"), bulk(b"master"),
                                           bulk(b"health"), bulk(b"online")))))
        seed.n += 1
        t = targets[seed.n % len(targets)]
        return b"-ASK 0 %s:%d\r\n" % (HOST.encode(), t.port)
    seed.n = 0

    with HostileServer(seed) as srv:
        targets.extend(HostileServer(target, upstream_port=redis_server.port) for _ in range(40))
        try:
            ports = [t.port for t in targets]
            u = f"redis+cluster://{HOST}:{srv.port}"
            with flavor.RedisFilter.from_url(u, "fd", 1000, 0.01) as f:
                most = 0
                for i in range(80):
                    f.test(f"k{i}")
                    most = max(most, open_sockets_to(ports))
                assert sum(t.connections for t in targets) >= 40  # every target was used
                # one call may meet several redirects (the first call's meta check and
                # claim, then its batch, each sent to the next target), so a few are open
                # at once; what must not happen is their piling up over the 80 calls
                assert most <= 8, f"{most} connections open to the redirect targets"
        finally:
            for t in targets:
                t.stop()


@pytest.mark.servers
def test_a_map_that_lacks_slots_is_read_from_another_node(flavor, cluster):
    # Just after a cluster forms, a node may not know every slot yet: its map leaves some
    # unserved.  Here the seed is such a node for good (its map lacks the range of the
    # filter's key); the client reads the map again from a node that map named, instead of
    # failing with "no node of the Redis Cluster serves slot ...".
    key = "fresh:{x}"
    slot = key_slot(key.encode())
    owners = cluster._slot_owners(cluster.live()[0])
    partial = [(lo, hi, port) for lo, hi, port in owners if not lo <= slot <= hi]
    assert len(partial) == len(owners) - 1

    def script(ctx, args):
        if [a.upper() for a in args[:2]] == [b"CLUSTER", b"SHARDS"]:
            return array(*(array(bulk(b"slots"), array(integer(lo), integer(hi)),
                                 bulk(b"nodes"),
                                 array(array(bulk(b"port"), integer(port), bulk(b"ip"),
                                             bulk(HOST.encode()), bulk(b"role"),
                                             bulk(b"master"), bulk(b"health"), bulk(b"online"))))
                           for lo, hi, port in partial))
        return b"-ERR not a data node\r\n"

    with HostileServer(script) as srv:
        u = f"redis+cluster://{HOST}:{srv.port}?cluster_retry_timeout=1"
        with flavor.RedisFilter.from_url(u, key, 1000, 0.01) as f:
            assert f.add("a") is True and "a" in f and "b" not in f
        with flavor.RedisBloomFilter.from_url(u, key + ":bf", 1000, 0.01) as bf:
            assert bf.add("a") is True and "a" in bf
        assert not [a for _, a in srv.commands if a[:1] != [b"CLUSTER"]]  # no data sent there


def test_a_node_the_new_map_does_not_name_is_closed(flavor, redis_server):
    # A serves every slot, then the map moves them all to B (A answers -MOVED): when the next
    # call begins, A is named by no map and its connection is closed (the asyncio filter
    # closes the socket it carried for that node too).
    state = {"owner": None}

    def map_of(port):
        return array(array(bulk(b"slots"), array(integer(0), integer(16383)), bulk(b"nodes"),
                           array(array(bulk(b"port"), integer(port), bulk(b"ip"),
                                       bulk(HOST.encode()), bulk(b"role"), bulk(b"master"),
                                       bulk(b"health"), bulk(b"online")))))

    def node(me):
        def script(ctx, args):
            if [a.upper() for a in args[:1]] == [b"CLUSTER"]:
                return map_of(state["owner"].port)
            if args[:1] == [b"ASKING"]:
                return b"+OK\r\n"
            if state["owner"] is not me():
                return b"-MOVED 0 %s:%d\r\n" % (HOST.encode(), state["owner"].port)
            return None
        return script

    with HostileServer(node(lambda: None)) as seed, \
            HostileServer(node(lambda: a), upstream_port=redis_server.port) as a, \
            HostileServer(node(lambda: b), upstream_port=redis_server.port) as b:
        state["owner"] = a
        with flavor.RedisFilter.from_url(f"redis+cluster://{HOST}:{seed.port}", "moving",
                                         1000, 0.01) as f:
            f.add("x")
            assert open_sockets_to([a.port]) == 1
            state["owner"] = b
            assert "x" in f           # -MOVED, the map read again: B
            assert "x" in f           # A is dropped as this call begins
            assert wait_until(lambda: open_sockets_to([a.port]) == 0)
            assert open_sockets_to([b.port]) == 1


@pytest.mark.servers
def test_every_operation_on_every_primary(flavor, cluster):
    # snapshot, bits_set, load, card, info, dump and restore too: in the async flavour the
    # async filter's whole-filter calls (the blocking filter's own, on a worker thread).
    keys = [f"user:{i}" for i in range(2000)]
    others = [f"other:{i}" for i in range(2000)]
    for node in primaries(cluster):
        tag = tag_on(cluster, node, "ops")
        bits_key, bf_key = f"{tag}:bits", f"{tag}:bf"
        with flavor.RedisFilter.from_url(url(cluster), bits_key, 5000, 0.01) as f:
            assert f.add("first") is True and f.add("first") is False and "first" in f
            f.update(keys)
            assert all(f.test_many(keys)) and f.add_many(["first", "new"]) == [False, True]
            # Bit for bit the filter a MemoryFilter of the same geometry builds.
            mem = lb.MemoryFilter(m=f.m, k=f.k, hash=f.hash)
            mem.update(["first", "new", *keys])
            assert f.snapshot() == mem and f.bits_set() == mem.bits_set
            assert sum(f.test_many(others)) == sum(mem.test_many(others))
            for name in f.key_names():
                assert exists(node, name.decode())   # on the node that serves the tag
            f.reset()
            assert not any(f.test_many(keys)) and f.bits_set() == 0
            f.load(mem)
            assert all(f.test_many(keys))
        with flavor.RedisBloomFilter.from_url(url(cluster), bf_key, 5000, 0.01) as bf:
            assert bf.add("first") is True and bf.add("first") is False and "first" in bf
            bf.update(keys)
            assert all(bf.test_many(keys)) and bf.card() == 2001
            assert bf.info().capacity == 5000
            dump = bf.dump()
            bf.reset()
            assert not any(bf.test_many(keys))
            bf.restore(dump, replace=True)
            assert all(bf.test_many(keys))
            assert exists(node, bf_key)
        # Keyless and single-key calls of other shapes route too.
        assert lb.RedisFilter.open(url(cluster), bits_key).m == mem.m


def both_filters(flavor, cluster, node, prefix, capacity=5000, **opts):
    """A RedisFilter and a RedisBloomFilter of the flavour in one slot that node serves:
    (tag, slot, f, bf)."""
    tag = tag_on(cluster, node, prefix)
    u = url(cluster, **opts)
    f = flavor.RedisFilter.from_url(u, f"{tag}:bits", capacity, 0.01)
    bf = flavor.RedisBloomFilter.from_url(u, f"{tag}:bf", capacity, 0.01)
    return tag, key_slot(tag.encode()), f, bf


class Writer:
    """A thread that adds batches of `size` new keys to both filters until stop(): the
    batches that returned in .acked, the errors raised in .errors."""

    def __init__(self, f, bf, size):
        self.acked, self.errors = [], []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(f, bf, size))
        self._thread.start()

    def _run(self, f, bf, size):
        i = 0
        while not self._stop.is_set():
            batch = [f"w{i}:{j}" for j in range(size)]
            i += 1
            try:
                f.update(batch)
                bf.update(batch)
                self.acked.append(batch)
            except lb.BloomError as e:
                self.errors.append(e)

    def stop(self):
        self._stop.set()
        self._thread.join(60)


@pytest.mark.servers
def test_moved_after_a_slot_migration(flavor, cluster):
    src = primaries(cluster)[0]
    dst = primaries(cluster)[1]
    tag, slot, f, bf = both_filters(flavor, cluster, src, "moved")
    before = [f"before:{i}" for i in range(500)]
    f.update(before)
    bf.update(before)
    moved = errorstat(src, "MOVED")
    cluster.begin_migration(slot, src, dst)
    cluster.move_keys(slot, src, dst)
    cluster.end_migration(slot, dst)
    # The filters' connections still think src serves the slot: -MOVED, map read again.
    after = [f"after:{i}" for i in range(500)]
    f.update(after)
    bf.update(after)
    assert all(f.test_many(before + after)) and all(bf.test_many(before + after))
    assert errorstat(src, "MOVED") > moved
    assert exists(dst, f"{tag}:bits") and exists(dst, f"{tag}:bf")
    with src.client() as c:
        assert c.command("CLUSTER", "COUNTKEYSINSLOT", slot) == 0
    f.close()
    bf.close()


@pytest.mark.servers
def test_ask_while_a_slot_migrates(flavor, cluster):
    src = primaries(cluster)[1]
    dst = primaries(cluster)[2]
    tag, slot, f, bf = both_filters(flavor, cluster, src, "ask")
    before = [f"before:{i}" for i in range(500)]
    f.update(before)
    bf.update(before)
    asked = errorstat(src, "ASK")
    cluster.begin_migration(slot, src, dst)
    try:
        # Half way: the bitmap and the RedisBloom key are on dst, the meta key still on src.
        cluster.move_keys(slot, src, dst, [f"{tag}:bits".encode(), f"{tag}:bf".encode()])
        assert all(f.test_many(before)) and all(bf.test_many(before))   # -ASK, then dst
        during = [f"during:{i}" for i in range(500)]
        f.update(during)
        bf.update(during)
        assert errorstat(src, "ASK") > asked
        cluster.move_keys(slot, src, dst)                 # the rest (the meta key)
    finally:
        cluster.end_migration(slot, dst)
    assert all(f.test_many(before + during)) and all(bf.test_many(before + during))
    assert all(exists(dst, name.decode())                               # bits and meta
               for name in flavor.twin(f).key_names())
    f.close()
    bf.close()


def test_adds_go_on_while_a_slot_migrates_key_by_key(flavor, cluster):
    """A writer thread adds to both filters while their slot moves to another primary one
    key at a time (the way redis-cli --cluster reshard does): every add succeeds, whether
    its keys answer from the old node, through -ASK from the new one, or after -MOVED."""
    src, dst = primaries(cluster)[2], primaries(cluster)[0]
    tag, slot, f, bf = both_filters(flavor, cluster, src, "live", 50_000)
    f.add("first")
    bf.add("first")
    w = Writer(f, bf, 50)
    acked, errors = w.acked, w.errors

    def more_adds(what):
        """Until the writer has had 2 more batches acknowledged (or has failed): adds in
        each step of the migration."""
        n = len(acked)
        wait_until(lambda: len(acked) >= n + 2 or errors, timeout=60)
        assert len(acked) >= n + 2, f"no add {what}: {errors[:3]}"

    try:
        more_adds("before the migration")
        cluster.begin_migration(slot, src, dst)
        for name in sorted(n.decode() for n in flavor.twin(f).key_names()) + [f"{tag}:bf"]:
            more_adds(f"before {name} moved")
            cluster.move_keys(slot, src, dst, [name.encode()])
        more_adds("with every key moved, the slot still migrating")
        cluster.end_migration(slot, dst)
        more_adds("after the migration")
    finally:
        w.stop()
    assert not errors, errors[:3]
    keys = ["first"] + [k for batch in acked for k in batch]
    assert all(f.test_many(keys)) and all(bf.test_many(keys))
    with src.client() as c:
        assert c.command("CLUSTER", "COUNTKEYSINSLOT", slot) == 0
    f.close()
    bf.close()


def test_a_hung_node_times_out_and_is_not_retried(flavor, cluster):
    node = primaries(cluster)[0]
    tag = tag_on(cluster, node, "hung")
    f = flavor.RedisFilter.from_url(url(cluster, socket_timeout=0.3), f"{tag}:bits", 1000, 0.01)
    f.add("a")
    node.pause()
    try:
        # the timeout ends the call (no retry: test_aio_cluster.py counts the commands a
        # paused node runs once it goes on)
        with pytest.raises(lb.RedisTimeoutError, match=str(node.port)):
            returns(lambda: f.add("b"))
    finally:
        node.resume()
    assert f.add("c") is True and "a" in f
    cluster.wait_ok()
    f.close()


def test_a_forked_child_opens_its_own_connections(cluster):
    # blocking only: test_aio.py has the asyncio filter's fork test
    node = primaries(cluster)[2]
    tag = tag_on(cluster, node, "fork")
    f = lb.RedisFilter.from_url(url(cluster), f"{tag}:bits", 1000, 0.01)
    f.add("parent")

    def child():
        return f.add("child") and "parent" in f

    assert exit_code_in_forked_child(child) == 0
    assert "child" in f and f.add("again")
    f.close()


@pytest.mark.servers
def test_the_asyncio_filters_accept_a_cluster_url(cluster):
    # A round trip of each async class on a redis+cluster:// URL, read back by the blocking
    # classes: the same keys, the same bits.
    tag = tag_on(cluster, primaries(cluster)[1], "aio")

    async def main():
        async with lb.AsyncRedisFilter.from_url(url(cluster), f"{tag}:bits", 100, 0.01) as f:
            assert await f.add("a") is True and await f.add("a") is False
            assert await f.test_many(["a", "b"]) == [True, False]
        async with lb.AsyncRedisBloomFilter.from_url(url(cluster), f"{tag}:bf", 100,
                                                     0.01) as bf:
            assert await bf.add("a") is True and await bf.test("a") is True
            assert await bf.test_many(["a", "b"]) == [True, False]

    asyncio.run(main())
    with lb.RedisFilter.from_url(url(cluster), f"{tag}:bits", 100, 0.01) as f:
        assert "a" in f and "b" not in f
    with lb.RedisBloomFilter.from_url(url(cluster), f"{tag}:bf", 100, 0.01) as bf:
        assert "a" in bf and bf.card() == 1


@pytest.mark.slow
@pytest.mark.servers
def test_a_primary_killed_mid_batch(flavor, cluster):
    """A writer adds batches while the primary of its slot is killed.  The cluster
    promotes the replica; the writer's next calls go there.

    What "acknowledged" means: an update() that returned.  Redis replicates
    asynchronously, so a write the primary answered just before it died may not have
    reached the replica.  With wait_replicas=1 the filters send WAIT 1 after every write
    batch, on the same connection, and return only once the replica has it: then nothing
    acknowledged is lost, which is what this test checks, for every batch."""
    victim = primaries(cluster)[0]
    replica = cluster.replica_of(victim)
    tag, _, f, bf = both_filters(flavor, cluster, victim, "kill", 100_000,
                                 cluster_retry_timeout=20,
                                 wait_replicas=1, wait_timeout=2)
    w = Writer(f, bf, 200)
    acked, errors = w.acked, w.errors
    try:
        assert wait_until(lambda: len(acked) >= 5 or errors, timeout=60) and len(acked) >= 5, \
            f"no 5 batches before the kill: {errors[:3]}"
        victim.kill()
        # each step has its own minute: on a loaded machine a promotion, or the old
        # primary's return as a replica and its full sync, can take a while
        deadline = time.monotonic() + 60
        while replica.role() != "master":
            assert time.monotonic() < deadline, "the replica was never promoted"
            time.sleep(0.1)
        # The new primary has no replica until the old one comes back as its replica:
        # until then every write fails its WAIT (RedisTimeoutError), as it should.
        n = len(acked)
        deadline = time.monotonic() + 60
        while not any(isinstance(e, lb.RedisTimeoutError) for e in errors):
            assert time.monotonic() < deadline, f"no WAIT timeout: {errors}"
            time.sleep(0.05)
        assert len(acked) == n
        victim.restart()
        deadline = time.monotonic() + 60
        while len(acked) < n + 5:                       # writing resumed, replicated again
            assert time.monotonic() < deadline, (
                f"no write after the failover: {errors[-1:]}\n{cluster.describe()}")
            time.sleep(0.05)
    finally:
        w.stop()
    keys = [k for batch in acked for k in batch]
    assert all(f.test_many(keys)) and all(bf.test_many(keys))   # every acknowledged key
    odd = [e for e in errors if not isinstance(e, (lb.RedisConnectionError, lb.RedisTimeoutError))]
    assert not odd, odd[:3]
    cluster.wait_ok()
    assert victim.role() == "slave"
    f.close()
    bf.close()


@pytest.mark.servers
def test_a_write_with_wait_sent_to_a_demoted_primary_is_redirected(flavor, cluster):
    """After a manual failover the client's map still names the old primary, now a replica:
    the write batch comes back -MOVED and its WAIT -ERR (WAIT cannot be used with replica
    instances).  Nothing was written there, so there is nothing to wait for: the batch goes
    to the new primary (and its WAIT there), and the call succeeds."""
    old = primaries(cluster)[0]
    new = cluster.replica_of(old)
    tag = tag_on(cluster, old, "demoted")
    u = url(cluster, wait_replicas=1, wait_timeout=2)
    f = flavor.RedisFilter.from_url(u, f"{tag}:bits", 1000, 0.01)
    bf = flavor.RedisBloomFilter.from_url(u, f"{tag}:bf", 1000, 0.01)
    try:
        assert f.add("a") is True and bf.add("a") is True      # the map: old is the primary
        cluster.failover_to(new)
        assert f.add("b") is True and bf.add("b") is True      # redirected, WAITed there
        assert f.test_many(["a", "b"]) == [True, True]
        assert bf.test_many(["a", "b"]) == [True, True]
        with new.client() as c:
            assert c.command("EXISTS", f"{tag}:bits") == 1
    finally:
        f.close()
        bf.close()


def replica_online(node, primary, replica) -> bool:
    """CLUSTER SHARDS, as node tells it, names replica a replica of primary's shard, with
    health "online": what the client's map needs to send reads there."""
    with node.client() as c:
        shards = c.command("CLUSTER", "SHARDS")
    for shard in shards:
        nodes = dict(zip(shard[::2], shard[1::2]))[b"nodes"]
        by_port = {int(f[b"port"]): f for f in (dict(zip(n[::2], n[1::2])) for n in nodes)}
        if primary.port in by_port:
            p, r = by_port[primary.port], by_port.get(replica.port, {})
            return (p[b"role"] == b"master" and r.get(b"role") == b"replica"
                    and r.get(b"health") == b"online")
    return False


def serves_reads(replica, key: str) -> bool:
    """READONLY, then a read of key: answered by the replica itself, not -MOVED."""
    with replica.client() as c:
        c.command("READONLY")
        try:
            c.command("BITFIELD_RO", key, "GET", "u1", 0)
        except RedisReplyError:
            return False
    return True


@pytest.mark.servers
def test_reads_from_replicas_when_asked(flavor, cluster):
    node = primaries(cluster)[1]
    replica = cluster.replica_of(node)
    tag = tag_on(cluster, node, "ro")
    # CLUSTER SHARDS names a replica "loading", and the client leaves it out of its map,
    # until it has replicated something: a fresh cluster's replicas have not
    with node.client() as c:
        c.command("SET", f"{tag}:warm", "1")
        assert c.command("WAIT", 1, 10000) == 1
    # every node's CLUSTER SHARDS: the client reads its map from any of them, and each
    # learns the replica's progress, and after an earlier test's failover who is whose
    # replica, by gossip, some tenths of a second apart
    deadline = time.monotonic() + 30
    while not all(replica_online(n, node, replica) for n in cluster.live()):
        assert time.monotonic() < deadline, "the replica never showed as online everywhere"
        time.sleep(0.05)
    # and the replica itself serves the slot's reads (after an earlier test's failover it
    # may still answer -MOVED for a moment, and the client would then read on the primary)
    while not serves_reads(replica, f"{tag}:warm"):
        assert time.monotonic() < deadline, "the replica never served a read of the slot"
        time.sleep(0.05)
    for srv in (node, replica):          # the counts of this test only (the cluster is shared)
        with srv.client() as c:
            c.command("CONFIG", "RESETSTAT")

    u = url(cluster, read_from_replicas="true", wait_replicas=1)
    f = flavor.RedisFilter.from_url(u, f"{tag}:bits", 1000, 0.01)
    bf = flavor.RedisBloomFilter.from_url(u, f"{tag}:bf", 1000, 0.01)
    keys = [f"k{i}" for i in range(100)]
    f.update(keys)          # writes go to the primary, and wait for the replica
    bf.update(keys)
    before = cmdstat(replica, "bitfield_ro"), cmdstat(replica, "bf.mexists")
    assert all(f.test_many(keys)) and all(bf.test_many(keys))
    assert cmdstat(replica, "bitfield_ro") > before[0], (
        f"primary: {cmdstat(node, 'bitfield_ro')} BITFIELD_RO, replica refused with MOVED "
        f"{errorstat(replica, 'MOVED')} times")
    assert cmdstat(replica, "bf.mexists") > before[1]
    assert cmdstat(node, "bitfield_ro") == 0
    # Without the option, reads stay on the primary.
    g = flavor.RedisFilter.from_url(url(cluster), f"{tag}:bits", 1000, 0.01)
    n = cmdstat(replica, "bitfield_ro")
    assert all(g.test_many(keys)) and cmdstat(replica, "bitfield_ro") == n
    for x in (f, bf, g):
        x.close()


def test_a_blocked_filter_on_a_cluster(flavor, cluster):
    """layout="blocked" through the slot's node: the answers and bytes of a BlockedFilter."""
    node = primaries(cluster)[2]
    tag = tag_on(cluster, node, "blk")
    keys = [f"user:{i}" for i in range(1000)]
    with flavor.RedisFilter.from_url(url(cluster), f"{tag}:bits", 1000, 0.01,
                                     layout="blocked") as f:
        bf = lb.BlockedFilter(1000, 0.01)
        assert f.add_many(keys) == bf.add_many(keys)
        probe = keys + [f"absent:{i}" for i in range(1000)]
        assert f.test_many(probe) == bf.test_many(probe)
        assert f.snapshot() == bf
        for name in f.key_names():
            assert exists(node, name.decode())


@pytest.mark.servers
def test_wait_replicas_on_one_server(flavor, bf_server_factory):
    """WAIT is not cluster-only: any primary with replicas.  A write that too few replicas
    acknowledged raises RedisTimeoutError; the write itself is done on the primary."""
    primary = bf_server_factory(["--repl-diskless-sync-delay", "0"])  # a replica syncs at once
    alone = f"{primary.url}?wait_replicas=1&wait_timeout=0.2"
    f = flavor.RedisFilter.from_url(alone, "w:bits", 1000, 0.01)
    with pytest.raises(lb.RedisTimeoutError, match="only 0 of the 1 replicas"):
        f.add("a")
    assert "a" in f                         # done on the primary, not known to be replicated
    bf = flavor.RedisBloomFilter.from_url(alone, "w:bf", 1000, 0.01)
    with pytest.raises(lb.RedisTimeoutError, match="wait_replicas"):
        bf.update(["a", "b"])
    replica = bf_server_factory(["--replicaof", HOST, str(primary.port)])
    deadline = time.monotonic() + 20
    while True:     # the primary counts the replica once it is online and acknowledged
        with primary.client() as c:
            info = c.command("INFO", "replication")
        if b"state=online" in info and b"lag=0" in info:
            break
        assert time.monotonic() < deadline, f"the replica never online: {info!r}"
        time.sleep(0.05)
    f.close()
    bf.close()
    synced = f"{primary.url}?wait_replicas=1&wait_timeout=3"   # a first sync may take a moment
    f = flavor.RedisFilter.from_url(synced, "w:bits", 1000, 0.01)
    bf = flavor.RedisBloomFilter.from_url(synced, "w:bf", 1000, 0.01)
    assert f.add("b") is True and bf.add("c") is True   # now acknowledged by the replica
    with replica.client() as c:
        assert c.command("EXISTS", "w:bits") == 1 and c.command("BF.EXISTS", "w:bf", "c") == 1
    for x in (f, bf):
        x.close()
    with pytest.raises(ValueError, match="wait_timeout"):
        flavor.RedisFilter("k", 100, 0.01, url=primary.url, wait_replicas=1, wait_timeout=5,
                           socket_timeout=1)
    with pytest.raises(ValueError, match="wait_replicas"):
        flavor.RedisFilter.from_url(primary.url + "?wait_replicas=x", "k", 100, 0.01)
    with pytest.raises(ValueError, match="wait_replicas"):
        flavor.RedisFilter("k", 100, 0.01, url=primary.url, wait_replicas=-1)


def test_from_redis_takes_a_redis_py_cluster_client(flavor, cluster):
    pytest.importorskip("redis")
    from redis.cluster import RedisCluster

    rc = RedisCluster(host=HOST, port=cluster.nodes[0].port, socket_timeout=5)
    try:
        tag = tag_on(cluster, primaries(cluster)[2], "rp")
        with flavor.RedisFilter.from_redis(rc, f"{tag}:bits", 1000, 0.01) as f:
            f.update(["a", "b"])
            assert f.test_many(["a", "b", "zz"])[:2] == [True, True]
        with flavor.RedisBloomFilter.from_redis(rc, f"{tag}:bf", 1000, 0.01) as bf:
            assert bf.add("a") is True
        # redis-py reads what the filters wrote, through its own slot map
        assert rc.exists(f"{tag}:bits") == 1
        assert rc.execute_command("BF.EXISTS", f"{tag}:bf", "a") == 1
        try:
            from redis.cluster import LoadBalancingStrategy
            replicas = {"load_balancing_strategy": LoadBalancingStrategy.ROUND_ROBIN_REPLICAS}
        except ImportError:   # redis-py before 5.3
            replicas = {"read_from_replicas": True}
        ro = RedisCluster(host=HOST, port=cluster.nodes[0].port, **replicas)
        from ling_bloom._redis_client import connection_kwargs
        assert connection_kwargs(ro)["url"].endswith("?read_from_replicas=true")
        ro.close()
    finally:
        rc.close()


@pytest.mark.servers
def test_from_redis_takes_a_valkey_py_cluster_client(flavor, cluster):
    pytest.importorskip("valkey")
    from valkey.cluster import ValkeyCluster

    vc = ValkeyCluster(host=HOST, port=cluster.nodes[0].port, socket_timeout=5)
    try:
        tag = tag_on(cluster, primaries(cluster)[1], "vp")
        with flavor.RedisFilter.from_redis(vc, f"{tag}:bits", 1000, 0.01) as f:
            f.update(["a", "b"])
            assert f.test_many(["a", "b", "zz"])[:2] == [True, True]
        with flavor.RedisBloomFilter.from_redis(vc, f"{tag}:bf", 1000, 0.01) as bf:
            assert bf.add("a") is True
        # valkey-py reads what the filters wrote, through its own slot map
        assert vc.exists(f"{tag}:bits") == 1
        assert vc.execute_command("BF.EXISTS", f"{tag}:bf", "a") == 1
        ro = ValkeyCluster(host=HOST, port=cluster.nodes[0].port, read_from_replicas=True)
        from ling_bloom._redis_client import connection_kwargs
        assert connection_kwargs(ro)["url"].endswith("?read_from_replicas=true")
        ro.close()
    finally:
        vc.close()


@pytest.mark.servers
def test_a_sharded_filter_spreads_over_the_primaries(flavor, cluster):
    # approximate_count, snapshot, load and bits_set: in the async flavour the async
    # filter's whole-filter calls.
    keys = [f"user:{i}" for i in range(20_000)]
    with flavor.RedisFilter.from_url(url(cluster), "sh:users", 20_000, 0.01, shards=6) as f:
        assert f.shards == 6 and f.m % 6 == 0 and f.capacity == 20_000
        assert f.add_many(["a", "a"]) == [True, False]
        f.update(keys)
        assert all(f.test_many(keys)) and "a" in f
        negatives = [f"other:{i}" for i in range(20_000)]
        assert sum(f.test_many(negatives)) / len(negatives) <= 0.013   # the rate holds
        names = [n.decode() for n in f.key_names()]
        assert names[0] == "{sh:users}:shards" and "{sh:users:5}:meta" in names
        holders = set()
        for name in names[1:]:
            node = cluster.node_for_slot(key_slot(name.encode()))
            assert exists(node, name)
            holders.add(node.port)
        assert len(holders) == 3                        # every primary holds shards
        assert abs(f.approximate_count() - 20_001) < 1000
        # Another process opens it the same way, from the record.
        with lb.RedisFilter.open(url(cluster), "sh:users") as g:
            assert g.shards == 6 and g.m == f.m and all(g.test_many(keys[:100]))
        with pytest.raises(lb.GeometryMismatchError, match="shards=6"):
            flavor.RedisFilter.from_url(url(cluster), "sh:users", 20_000, 0.01,
                                        shards=4).add("x")
        with pytest.raises(lb.NotSupportedError, match="sharded"):
            f.snapshot()
        with pytest.raises(lb.NotSupportedError, match="sharded"):
            f.load(lb.MemoryFilter(m=f.m, k=f.k))
        f.reset()
        assert not any(f.test_many(keys[:1000])) and f.bits_set() == 0
    # A key with braces gets hashed tags; a shard key held by someone else is refused.
    with flavor.RedisFilter.from_url(url(cluster), "{x}y", 1000, 0.01, shards=2) as f:
        tagged = [n.decode() for n in f.key_names()]
        assert all(len(n.split("}")[0]) == 1 + 16 + 2 for n in tagged[1:])
        shard1 = tagged[1].replace(":meta", "")
        node = cluster.node_for_slot(key_slot(shard1.encode()))
        with node.client() as c:
            c.command("SET", shard1, "not a filter")
        with pytest.raises(lb.KeyNotOwnedError):
            f.update([f"k{i}" for i in range(50)])
    # The record's key holding another type: WRONGTYPE, with the server's text and the key.
    rec = "{sh:wrong}:shards"
    with cluster.node_for_slot(key_slot(rec.encode())).client() as c:
        c.command("HSET", rec, "a", "b")
    with pytest.raises(lb.WrongTypeError, match=r"^WRONGTYPE .* \(key '\{sh:wrong\}:shards'\)"):
        flavor.RedisFilter.from_url(url(cluster), "sh:wrong", 100, 0.01, shards=2).add("x")


@pytest.mark.servers
def test_a_sharded_redisbloom_filter(flavor, cluster):
    # card, info, dump, reserve and restore: in the async flavour the async filter's
    # whole-filter calls.
    keys = [f"user:{i}" for i in range(6000)]
    with flavor.RedisBloomFilter.from_url(url(cluster), "sh:bf", 6000, 0.01, shards=3) as bf:
        assert bf.shards == 3 and bf.capacity == 6000 and "shards=3" in repr(bf)
        assert bf.add_many(["a", "a"]) == [True, False]
        bf.update(keys)
        assert all(bf.test_many(keys)) and "a" in bf
        assert abs(bf.card() - 6001) < 30                        # BF.CARD summed
        negatives = [f"other:{i}" for i in range(6000)]
        assert sum(bf.test_many(negatives)) / len(negatives) <= 0.015
        holders = set()
        for i in range(3):
            name = f"{{sh:bf:{i}}}"
            node = cluster.node_for_slot(key_slot(name.encode()))
            with node.client() as c:
                assert c.command("TYPE", name) == "MBbloom--"   # a status reply
                info = c.command("BF.INFO", name, "CAPACITY")
            assert info == [2000 + 135]                         # n/S + 3 sqrt(n/S)
            holders.add(node.port)
        assert len(holders) > 1
        for method in (bf.info, bf.dump, bf.reserve):
            with pytest.raises(lb.NotSupportedError, match="sharded"):
                method()
        with pytest.raises(lb.NotSupportedError, match="sharded"):
            bf.restore([])
        with pytest.raises(lb.GeometryMismatchError, match="shards=3"):
            flavor.RedisBloomFilter.from_url(url(cluster), "sh:bf", 6000, 0.01,
                                             shards=2).add("x")
        with pytest.raises(lb.GeometryMismatchError, match="capacity=2135"):  # per shard
            flavor.RedisBloomFilter.from_url(url(cluster), "sh:bf", 9000, 0.01,
                                             shards=3).add("x")
        bf.reset()
        assert not any(bf.test_many(keys[:500])) and bf.card() == 0
    for kw, msg in (({"non_scaling": True}, "non_scaling"), ({"no_create": True}, "no_create"),
                    ({"ttl": 5}, "ttl")):
        with pytest.raises(lb.NotSupportedError, match=msg):
            flavor.RedisBloomFilter("k", 100, 0.01, url=cluster.url, shards=2, **kw)


def test_keys_with_nul_and_brace_bytes_on_a_cluster(flavor, cluster):
    # Every name is built from all the bytes of the key (a NUL too) and lands in its slot.
    redis = pytest.importorskip("redis")
    items = [f"item:{i}" for i in range(300)]  # every shard gets some
    want, filters = set(), []
    for k in (b"nul:a", b"nul:a\x00b", b"nul:a\x00c", ALL_BYTES + b"nul:a", b"{nul:a\x00}"):
        filters.append(flavor.RedisFilter.from_url(url(cluster), k, 3000, 0.01))
        want |= bitmap_names(k)
        filters.append(flavor.RedisFilter.from_url(url(cluster), k + b":sh", 3000, 0.01,
                                                   shards=3, layout="blocked"))
        want |= sharded_names(k + b":sh", 3)
        filters.append(flavor.RedisBloomFilter.from_url(url(cluster), k + b":bf", 3000, 0.01,
                                                        shards=3))
        want |= sharded_names(k + b":bf", 3, redisbloom=True)
    try:
        for f in filters:
            f.update(items)
            assert all(f.test_many(items))
        found = set()
        for node in primaries(cluster):
            with redis.Redis(host=HOST, port=node.port) as c:
                for name in c.scan_iter(match=b"*nul:a*", count=1000):
                    found.add(name)
                    assert cluster.node_for_slot(key_slot(name)).port == node.port
        hashed = {n for n in want if b"nul:a" not in n}  # the tags of keys with braces
        for name in hashed:
            with redis.Redis(host=HOST, port=cluster.node_for_slot(key_slot(name)).port) as c:
                assert c.exists(name) == 1
        assert found == want - hashed
    finally:
        for f in filters:
            f.close()


def test_keys_with_a_closing_brace_and_no_hash_tag_on_a_cluster(flavor, cluster):
    # "a}b", "a{}b", "order}": no hash tag, so the key hashes whole; its meta key and parts
    # must land in that slot too, or every call fails with CROSSSLOT/MOVED on a cluster
    # while it works on one server.
    redis = pytest.importorskip("redis")
    items = [f"item:{i}" for i in range(200)]
    for k in (b"a}b", b"a{}b", b"order}", b"}{", b"x{}y}"):
        names = bitmap_names(k)
        assert all(cluster.node_for_slot(key_slot(n)).port ==
                   cluster.node_for_slot(key_slot(k)).port for n in names)
        with flavor.RedisFilter.from_url(url(cluster), k, 3000, 0.01) as f:
            assert set(f.key_names()) == names
            assert f.add("first") is True and f.add("first") is False and "first" in f
            f.update(items)
            assert all(f.test_many(items))
            with redis.Redis(host=HOST, port=cluster.node_for_slot(key_slot(k)).port) as c:
                assert all(c.exists(n) == 1 for n in names)
            f.reset()
            assert not any(f.test_many(items))
        with flavor.RedisFilter.from_url(url(cluster), k + b":sh", 3000, 0.01, shards=3) as f:
            f.update(items)
            assert all(f.test_many(items))
            f.reset()
            assert not any(f.test_many(items))


def test_sharded_filter_arguments(flavor):
    # The async flavour: the asyncio filters take shards=N as the blocking ones do.
    for bad, exc in [(0, ValueError), (1025, ValueError), (True, TypeError), ("2", TypeError)]:
        with pytest.raises(exc, match="shards"):
            flavor.RedisFilter("k", 100, 0.01, url="redis://127.0.0.1:1", shards=bad)
    with pytest.raises(lb.NotSupportedError, match="ttl"):
        flavor.RedisFilter("k", 100, 0.01, url="redis://127.0.0.1:1", shards=2, ttl=10)
    f = flavor.RedisFilter("k", m=1000, k=3, url="redis://127.0.0.1:1", shards=3)
    assert f.shards == 3 and f.m == 1002 and f.nbytes == 3 * 42
    assert "shards=3" in repr(f)
    bf = flavor.RedisBloomFilter("k", 100, 0.01, url="redis://127.0.0.1:1", shards=2)
    assert bf.shards == 2 and "shards=2" in repr(bf)
    with pytest.raises(ValueError, match="shards"):
        flavor.RedisBloomFilter("k", 100, 0.01, url="redis://127.0.0.1:1", shards=0)


def test_a_sharded_blocked_filter_spreads_over_the_primaries(flavor, cluster):
    keys = [f"user:{i}" for i in range(20_000)]
    with flavor.RedisFilter.from_url(url(cluster), "shb:users", 20_000, 0.01, shards=6,
                                     layout="blocked") as f:
        assert (f.shards, f.layout, f.m % (6 * 512), f.k % 8) == (6, "blocked", 0, 0)
        f.update(keys)
        assert all(f.test_many(keys))
        negatives = [f"other:{i}" for i in range(20_000)]
        assert sum(f.test_many(negatives)) / len(negatives) <= 0.013
        holders = {cluster.node_for_slot(key_slot(n)).port
                   for n in flavor.twin(f).key_names()[1:]}
        assert len(holders) == 3
        with lb.RedisFilter.open(url(cluster), "shb:users") as g:
            assert (g.layout, g.shards, g.m) == ("blocked", 6, f.m)
            assert all(g.test_many(keys[:100]))


def test_a_sharded_filter_on_one_server_and_a_hung_shard(flavor, cluster, redis_server):
    # Without a cluster the shards share the server: the same filter, other connections.
    with flavor.RedisFilter.from_url(redis_server.url, "sh:one", 1000, 0.01, shards=3) as f:
        f.update(["a", "b", "c"])
        assert f.test_many(["a", "b", "c"]) == [True, True, True]
    # A node that hangs: the batch raises the timeout (naming the node); the shards on the
    # other nodes did their part; after it resumes everything answers.
    node = primaries(cluster)[1]
    f = flavor.RedisFilter.from_url(url(cluster, socket_timeout=0.3), "sh:hung", 3000, 0.01,
                                    shards=6)
    keys = [f"k{i}" for i in range(300)]
    f.update(keys)
    node.pause()
    try:
        with pytest.raises(lb.RedisTimeoutError, match=str(node.port)):
            f.update([f"late{i}" for i in range(300)])
    finally:
        node.resume()
    cluster.wait_ok()
    assert all(f.test_many(keys))
    if not flavor.is_async:  # a forked child: the blocking filter's (test_aio.py: the async one)

        def child():
            return f.add("from the child") and all(f.test_many(keys[:10]))

        assert exit_code_in_forked_child(child) == 0 and "from the child" in f
    f.close()


def test_the_command_line_inspects_filters_on_a_cluster(cluster):
    # blocking only: the command line
    import subprocess
    import sys

    u = url(cluster)
    with lb.RedisFilter.from_url(u, "cli:sharded", 1000, 0.01, shards=3) as f:
        f.update(["a", "b"])
    with lb.RedisFilter.from_url(u, "cli:shb", 1000, 0.01, shards=2, layout="blocked") as f:
        f.update(["a", "b"])
    with lb.RedisBloomFilter.from_url(u, "cli:bf", 1000, 0.01) as bf:
        bf.add("a")
    for key, want in (("cli:sharded", "in 3 shards, hash=xxh3"),
                      ("cli:shb", "in 2 shards (blocked layout), hash=xxh3-block"),
                      ("cli:bf", "RedisBloomFilter")):
        r = subprocess.run([sys.executable, "-m", "ling_bloom", "inspect", u, key],
                           capture_output=True, text=True, timeout=60)
        assert r.returncode == 0 and want in r.stdout, r.stdout + r.stderr
