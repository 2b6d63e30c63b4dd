"""What only the asyncio filters can get wrong on a Redis Cluster and with shards: tasks
cancelled in the middle of a batch, a writer task through a failover, a paused node under a
short socket timeout, a filter used on two event loops one after the other, and the answers
of a sharded async filter against the blocking one on the same key.

Everything the blocking and the async filters share (routing, -MOVED/-ASK, a killed primary
under a writer thread, replica reads, WAIT, Sentinel...) runs for both flavours in
test_redis_cluster.py and test_redis_sentinel.py (the `flavor` fixture).  The cluster is the
session's (the `cluster` fixture of tests/conftest.py, flushed before each test).

No assertion here is about time: a call that does not end is stopped by ``bounded()`` and
fails the test (AssertionError "hung").
"""
from __future__ import annotations

import asyncio
import random

import pytest

import ling_bloom as lb
from cluster_tools import cmdstat, key_slot, primaries, tag_on, url
from hang_guard import bounded
from ling_bloom import AsyncRedisBloomFilter, AsyncRedisFilter, RedisBloomFilter, RedisFilter

pytestmark = pytest.mark.cluster


async def off_loop(fn, *args):
    """A blocking helper (a RawRedis poll, a cluster check) run beside the loop, so that
    the tasks on it go on meanwhile."""
    return await asyncio.get_running_loop().run_in_executor(None, fn, *args)


async def until(what: str, cond, limit: float = 30.0) -> None:
    """Poll cond (a blocking function) until it is true; AssertionError after limit."""
    loop = asyncio.get_running_loop()
    end = loop.time() + limit
    while not await off_loop(cond):
        assert loop.time() < end, f"never: {what}"
        await asyncio.sleep(0.05)  # a poll with a deadline


# ---- a cancellation storm: tasks cancelled at random points of their add_many ----------------


def storm_filter(kind: str, cluster):
    u = url(cluster)
    tag = tag_on(cluster, primaries(cluster)[0], "storm")
    # chunk_size=64: a batch of 300 keys is 5 round trips, so a task may be cancelled
    # between two of them as well as inside one
    kw = {"chunk_size": 64, "max_connections": 3}
    if kind == "cluster":
        return AsyncRedisFilter.from_url(u, f"{tag}:bits", 100_000, 0.01, **kw)
    if kind == "cluster-redisbloom":
        return AsyncRedisBloomFilter.from_url(u, f"{tag}:bf", 100_000, 0.01, **kw)
    assert kind == "sharded"  # 4 shards spread over the primaries: each batch goes to several
    return AsyncRedisFilter.from_url(u, "storm:sharded", 100_000, 0.01, shards=4, **kw)


@pytest.mark.parametrize("kind", ["cluster", "cluster-redisbloom", "sharded"])
def test_a_cancellation_storm_mid_batch_loses_no_completed_add(cluster, kind):
    """Rounds of 16 tasks, each `await f.add_many(its batch)`, while a canceller cancels
    tasks at random moments (a random sleep of up to 5 ms between cancels, at most half of
    the tasks of a round).  Every batch whose add_many returned tests all-true afterwards
    (no false negative for a completed add), only CancelledError ever comes out of a task,
    and the filter still answers a fresh add and test."""
    rng = random.Random(20240917)
    tasks_per_round, rounds, size = 16, 5, 300

    async def main():
        f = storm_filter(kind, cluster)
        returned, cancelled = [], 0

        async def writer(batch):
            await f.add_many(batch)
            returned.append(batch)

        async def canceller(tasks):
            nonlocal cancelled
            await asyncio.sleep(0)  # every task has started: some mid round trip, some waiting
            for _ in range(tasks_per_round // 2):
                pending = [t for t in tasks if not t.done()]
                if not pending:
                    return
                if rng.choice(pending).cancel():
                    cancelled += 1
                await asyncio.sleep(rng.uniform(0, 0.005))  # pacing: cancels at random moments

        for r in range(rounds):
            batches = [[f"r{r}:t{i}:{j}" for j in range(size)] for i in range(tasks_per_round)]
            tasks = [asyncio.ensure_future(writer(b)) for b in batches]
            stopper = asyncio.ensure_future(canceller(tasks))
            results = await bounded(asyncio.gather(*tasks, return_exceptions=True))
            await bounded(stopper)
            escaped = [x for x in results
                       if x is not None and not isinstance(x, asyncio.CancelledError)]
            assert not escaped, escaped[:3]
        assert cancelled >= rounds                    # the storm did cancel...
        assert len(returned) >= rounds * tasks_per_round // 2   # ...and adds did complete
        for batch in returned:
            answers = await bounded(f.test_many(batch))
            assert all(answers), f"a completed add_many lost {answers.count(False)} keys"
        assert await bounded(f.add("fresh after the storm")) is True
        assert await bounded(f.test("fresh after the storm")) is True
        assert await bounded(f.test_many(["fresh after the storm", returned[0][0]])) == [True,
                                                                                        True]
        await f.aclose()
        return returned

    returned = asyncio.run(main())
    # and the blocking filter of the same key agrees: the adds are on the servers
    tag = tag_on(cluster, primaries(cluster)[0], "storm")
    u = url(cluster)
    if kind == "cluster":
        g = RedisFilter.from_url(u, f"{tag}:bits", 100_000, 0.01)
    elif kind == "cluster-redisbloom":
        g = RedisBloomFilter.from_url(u, f"{tag}:bf", 100_000, 0.01)
    else:
        g = RedisFilter.from_url(u, "storm:sharded", 100_000, 0.01, shards=4)
    with g:
        assert all(g.test_many([k for b in returned for k in b]))


# ---- a killed primary under a writer task, with WAIT -----------------------------------------


@pytest.mark.slow
def test_a_primary_killed_under_a_writer_task(cluster):
    """The asyncio twin of test_redis_cluster.py's test_a_primary_killed_mid_batch: a writer
    TASK adds batches to both async filters (wait_replicas=1) while the primary of their slot
    is killed.  Every batch acknowledged (its awaits returned) before, during and after the
    promotion is present afterwards; while the new primary has no replica its writes fail
    their WAIT (RedisTimeoutError) and nothing is acknowledged."""
    victim = primaries(cluster)[0]
    replica = cluster.replica_of(victim)
    tag = tag_on(cluster, victim, "akill")
    u = url(cluster, cluster_retry_timeout=20, wait_replicas=1, wait_timeout=2)

    async def main():
        f = AsyncRedisFilter.from_url(u, f"{tag}:bits", 100_000, 0.01)
        bf = AsyncRedisBloomFilter.from_url(u, f"{tag}:bf", 100_000, 0.01)
        acked, errors = [], []
        stop = asyncio.Event()

        async def writer():
            i = 0
            while not stop.is_set():
                batch = [f"w{i}:{j}" for j in range(200)]
                i += 1
                try:
                    await f.update(batch)
                    await bf.update(batch)
                    acked.append(batch)
                except lb.BloomError as e:
                    errors.append(e)
                    await asyncio.sleep(0)  # an error at once must not starve the loop

        task = asyncio.ensure_future(writer())
        try:
            await until("5 batches acknowledged", lambda: len(acked) >= 5)
            victim.kill()
            await until("the replica promoted", lambda: replica.role() == "master")
            # No replica of the new primary until the old one comes back: WAIT times out.
            n = len(acked)
            await until("a WAIT timeout",
                        lambda: any(isinstance(e, lb.RedisTimeoutError) for e in errors))
            assert len(acked) == n
            # on this (the main) thread: a server started from an executor's thread dies
            # with that thread (PDEATHSIG), when asyncio.run shuts the executor down
            victim.restart()
            await until("writing resumed, replicated again", lambda: len(acked) >= n + 5,
                        limit=60)
        finally:
            stop.set()
            await bounded(task)
        keys = [k for batch in acked for k in batch]
        assert all(await bounded(f.test_many(keys)))     # every acknowledged key
        assert all(await bounded(bf.test_many(keys)))
        assert all(isinstance(e, (lb.RedisConnectionError, lb.RedisTimeoutError))
                   for e in errors), [e for e in errors
                                  if not isinstance(e, (lb.RedisConnectionError,
                                                        lb.RedisTimeoutError))][:3]
        await f.aclose()
        await bf.aclose()

    asyncio.run(main())
    cluster.wait_ok()
    assert victim.role() == "slave"


# ---- a paused node: the timeout, no retry, and nothing out of step afterwards ----------------


@pytest.mark.parametrize("shards", [1, 3])
def test_a_paused_node_times_out_once_and_the_filter_stays_in_step(cluster, shards):
    """SIGSTOP the primary that holds the filter (for shards=3: the node of its first shard)
    with socket_timeout=0.3: the batch raises RedisTimeoutError naming the node.  It is not
    retried: once the node runs again it has executed at most the BITFIELDs of ONE sending of
    that batch (counted beforehand by sending the same batch once; a retry would double
    them).  After SIGCONT the filter answers right: no late reply is taken for the answer of
    a later call."""
    kw = {} if shards == 1 else {"shards": shards}
    if shards == 1:
        node = primaries(cluster)[0]
        key = f"{tag_on(cluster, node, 'apause')}:bits"
    else:
        key = "apause:sharded"
        with RedisFilter.from_url(url(cluster), key, 5000, 0.01, **kw) as g:
            node = cluster.node_for_slot(key_slot(g.key_names()[1]))
    u = url(cluster, socket_timeout=0.3)
    known = [f"known:{i}" for i in range(50)]
    absent = [f"absent:{i}" for i in range(50)]
    late = [f"late:{i}" for i in range(50)]

    async def main():
        f = AsyncRedisFilter.from_url(u, key, 5000, 0.01, **kw)
        await bounded(f.update(known))
        before = await off_loop(cmdstat, node, "bitfield")
        await bounded(f.update(late))             # what one sending of the batch costs node
        once = await off_loop(cmdstat, node, "bitfield") - before
        assert once > 0
        before += once
        node.pause()
        try:
            with pytest.raises(lb.RedisTimeoutError, match=str(node.port)):
                await bounded(f.update(late))
        finally:
            node.resume()
        await off_loop(cluster.wait_ok)
        assert await off_loop(cmdstat, node, "bitfield") - before <= once  # not retried
        # In step: every answer is the one for its own call.
        for _ in range(3):
            assert await bounded(f.test_many(known)) == [True] * len(known)
            assert await bounded(f.add("after the pause")) in (True, False)
            assert await bounded(f.test("after the pause")) is True
            got = await bounded(f.test_many(absent + known))
            assert got[len(absent):] == [True] * len(known)
        with RedisFilter.from_url(url(cluster), key, 5000, 0.01, **kw) as g:
            assert g.test_many(absent) == got[:len(absent)]  # the same false positives
        await f.aclose()

    asyncio.run(main())


# ---- one filter on two event loops, one after the other --------------------------------------


@pytest.mark.parametrize("shards", [1, 4])
def test_a_filter_used_under_two_event_loops(cluster, shards):
    """asyncio.run() twice with the same filter on a redis+cluster:// URL: the connections
    of the first loop are not used on the second (they belong to a closed loop); both runs
    get the right answers."""
    tag = tag_on(cluster, primaries(cluster)[1], "loops")
    kw = {} if shards == 1 else {"shards": shards}
    f = AsyncRedisFilter.from_url(url(cluster), f"{tag}:bits", 1000, 0.01, **kw)

    async def first():
        assert await bounded(f.add("a")) is True
        await bounded(f.update([f"k{i}" for i in range(100)]))
        return await bounded(f.test_many(["a", "b"]))

    async def second():
        assert await bounded(f.test("a")) is True
        assert await bounded(f.add("b")) is True
        assert all(await bounded(f.test_many([f"k{i}" for i in range(100)])))
        got = await bounded(f.test_many(["a", "b"]))
        await f.aclose()
        return got

    assert asyncio.run(first()) == [True, False]
    assert asyncio.run(second()) == [True, True]
    with RedisFilter.from_url(url(cluster), f"{tag}:bits", 1000, 0.01, **kw) as g:
        assert g.test_many(["a", "b"]) == [True, True]


@pytest.mark.parametrize("shards", [1, 3])
def test_a_forked_child_opens_connections_of_its_own(cluster, shards):
    """A child forked after the parent used the filter on a cluster (its nodes' connections
    open, and each shard's) answers on connections of its own, and the parent's keep
    working: nothing is sent on, or closed of, the parent's sockets."""
    import os

    tag = tag_on(cluster, primaries(cluster)[2], "afork")
    kw = {"max_connections": 1} if shards == 1 else {"max_connections": 1, "shards": shards}
    f = AsyncRedisFilter.from_url(url(cluster), f"{tag}:bits", 1000, 0.01, **kw)
    asyncio.run(bounded(f.update(["parent", "p2"])))
    pid = os.fork()
    if pid == 0:  # the child: its own loop, its own connections
        code = 1
        try:
            async def child():
                ok = await bounded(f.test_many(["parent", "p2", "absent"]))
                assert await bounded(f.add("child")) is True
                return ok == [True, True, False]
            code = 0 if asyncio.run(child()) else 2
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0

    async def parent():
        got = await bounded(f.test_many(["parent", "child", "absent"]))
        await f.aclose()
        return got

    assert asyncio.run(parent()) == [True, True, False]


# ---- a sharded async filter against the blocking one on the same key --------------------------


@pytest.mark.parametrize("where", ["one-server", "cluster"])
@pytest.mark.parametrize("kind", ["bitmap", "redisbloom"])
def test_a_sharded_async_filter_answers_as_the_blocking_one(request, where, kind):
    """shards=4, on one server and on the cluster: what the blocking filter wrote the async
    one reads, and the other way round, with the same answers for every key (false
    positives included) and the same geometry."""
    if where == "cluster":
        cl = request.getfixturevalue("cluster")
        u = url(cl)
    else:
        u = request.getfixturevalue("bf_server_factory")().url + "?socket_timeout=10"
    blocking_cls, async_cls = ((RedisFilter, AsyncRedisFilter) if kind == "bitmap"
                               else (RedisBloomFilter, AsyncRedisBloomFilter))
    a_keys = [f"blocking:{i}" for i in range(2000)]
    b_keys = [f"async:{i}" for i in range(2000)]
    probe = a_keys + b_keys + [f"absent:{i}" for i in range(5000)]

    with blocking_cls.from_url(u, "sh:twin", 5000, 0.01, shards=4) as s:
        s.update(a_keys)

        async def main():
            async with async_cls.from_url(u, "sh:twin", 5000, 0.01, shards=4) as f:
                facts = [getattr(f, n) for n in ("shards", "capacity", "error_rate")]
                if kind == "bitmap":
                    facts += [f.m, f.k, f.hash, f.key_names()]
                assert await bounded(f.add_many(a_keys)) == [False] * len(a_keys)
                await bounded(f.update(b_keys))
                return facts, await bounded(f.test_many(probe))

        facts, got = asyncio.run(main())
        want = [getattr(s, n) for n in ("shards", "capacity", "error_rate")]
        if kind == "bitmap":
            want += [s.m, s.k, s.hash, s.key_names()]
        assert facts == want
        assert s.add_many(b_keys) == [False] * len(b_keys)   # async wrote them
        assert s.test_many(probe) == got                      # the same answer for every key
        assert all(got[:len(a_keys) + len(b_keys)])

        async def reset():  # every shard emptied, the record kept: the same filter after
            async with async_cls.from_url(u, "sh:twin", 5000, 0.01, shards=4) as f:
                await bounded(f.reset())
                return await bounded(f.test_many(a_keys[:100]))

        assert asyncio.run(reset()) == [False] * 100
        assert s.test_many(a_keys + b_keys) == [False] * (len(a_keys) + len(b_keys))


# ---- from_redis with redis.asyncio's cluster client ------------------------------------------


@pytest.mark.parametrize("module, name, primary, tag_name", [
    ("redis.asyncio.cluster", "RedisCluster", 0, "rpa"),     # redis-py
    ("valkey.asyncio.cluster", "ValkeyCluster", 1, "vpa"),   # valkey-py, as redis-py
], ids=["redis-py", "valkey-py"])
def test_from_redis_takes_an_asyncio_cluster_client(cluster, module, name, primary, tag_name):
    """An async service hands over its asyncio cluster client (redis-py's RedisCluster or
    valkey-py's ValkeyCluster): the filter takes its nodes and settings (not its
    connections) and routes as with the URL."""
    client_cls = getattr(pytest.importorskip(module), name)

    host, port = url(cluster).split("//", 1)[1].split(",")[0].split(":")
    tag = tag_on(cluster, primaries(cluster)[primary], tag_name)

    async def main():
        client = client_cls(host=host, port=int(port), socket_timeout=10)
        await client.initialize()
        try:
            async with AsyncRedisFilter.from_redis(client, f"{tag}:bits", 1000, 0.01) as f:
                await bounded(f.update(["a", "b"]))
                assert await bounded(f.test_many(["a", "b", "c"])) == [True, True, False]
            assert await client.exists(f"{tag}:bits") == 1
        finally:
            await client.aclose()

    asyncio.run(main())
