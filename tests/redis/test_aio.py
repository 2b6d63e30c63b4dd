"""AsyncRedisFilter (ling_bloom.aio): the blocking RedisFilter's results and errors, awaited,
against real redis-servers (plain, unix socket, password and db, TLS), a hung one, a
restarted one, and tests/support/hostile_server.py in front of a real one for the wire rules."""
from __future__ import annotations

import asyncio
import os

import pytest

import ling_bloom as lb
import ling_bloom.aio as aio
from hang_guard import bounded, until, wait_until
from hostile_server import HostileServer, array, integer
from key_names import ALL_BYTES, NUL_KEYS, bitmap_names, server_keys
from ling_bloom import AsyncRedisFilter, RedisFilter


def run(coro):
    return asyncio.run(coro)


def af(srv, key="abf", capacity=1000, **kw):
    kw.setdefault("socket_timeout", 10)
    return AsyncRedisFilter.from_url(srv.url, key, capacity, 0.01, **kw)


# ---- results: the same as the blocking filter, on the same bitmap --------------------------


@pytest.mark.servers
def test_results_match_the_blocking_filter_on_the_same_key(clean_redis):
    keys = [f"user:{i}" for i in range(30_000)]  # three chunks of 10,000
    probe = [f"other:{i}" for i in range(5000)]

    async def main():
        async with af(clean_redis, capacity=50_000) as f:
            assert await f.add("user:1") is True
            assert await f.add("user:1") is False
            assert await f.test("user:1") is True and await f.test("nobody") is False
            assert await f.add_many(["a", "b", "a"]) == [True, True, False]
            await f.update(keys)
            assert await f.test_many(keys) == [True] * len(keys)
            return await f.test_many(probe), (f.m, f.k, f.hash, f.key)

    got, geometry = run(main())
    with RedisFilter.from_url(clean_redis.url, "abf", 50_000, 0.01) as s:
        assert (s.m, s.k, s.hash, s.key) == geometry
        assert s.test_many(keys) == [True] * len(keys)   # what async wrote, blocking reads
        assert s.test_many(probe) == got                 # the same answers, false positives too
        s.add("written-by-blocking")

    async def read_back():
        async with af(clean_redis, capacity=50_000) as f:
            return await f.test("written-by-blocking")

    assert run(read_back()) is True


@pytest.mark.servers
def test_reset_and_ttl(clean_redis, raw_redis):
    async def main():
        async with af(clean_redis, key="att", ttl=100) as f:
            await f.add("x")
            assert 0 < raw_redis.command("PTTL", "att") <= 100_000
            assert 0 < raw_redis.command("PTTL", "{att}:meta") <= 100_000
            await f.reset()
            assert await f.test("x") is False
            assert raw_redis.command("EXISTS", "{att}:meta") == 1  # the geometry stays

    run(main())


def test_empty_batch_and_iterables(clean_redis):
    async def main():
        async with af(clean_redis) as f:
            assert await f.add_many([]) == [] and await f.test_many(iter([])) == []
            await f.update(f"g{i}" for i in range(10))
            assert await f.test_many(f"g{i}" for i in range(10)) == [True] * 10

    run(main())


@pytest.mark.servers
def test_unix_socket_password_and_db(redis_server_factory, tmp_path):
    sock = str(tmp_path / "r.sock")
    srv = redis_server_factory(["--requirepass", "s3cret", "--unixsocket", sock,
                                "--unixsocketperm", "700"])

    async def main():
        async with AsyncRedisFilter("k", 1000, url=f"unix://:s3cret@{sock}?db=3") as f:
            await f.add("x")
            assert await f.test("x")
        async with AsyncRedisFilter("k", 1000, url=f"redis://:wrong@127.0.0.1:{srv.port}") as f:
            with pytest.raises(lb.RedisConnectionError, match="AUTH"):
                await f.add("x")

    run(main())
    with srv.client() as c:
        c.command("AUTH", "s3cret")
        c.command("SELECT", "3")
        assert c.command("EXISTS", "k") == 1


# ---- errors: those of the blocking filter ---------------------------------------------------


def test_bad_keys_and_arguments_raise_before_anything_is_sent(clean_redis, raw_redis):
    with pytest.raises(lb.InvalidFalsePositiveRateError):
        AsyncRedisFilter.from_url(clean_redis.url, "bad", 1000, 2.0)
    with pytest.raises(TypeError):
        AsyncRedisFilter.from_url(None, "bad", 1000)
    with pytest.raises(ValueError):
        AsyncRedisFilter.from_url(clean_redis.url, "bad", 1000, max_connections=0)

    async def main():
        async with af(clean_redis, key="bk") as f:
            with pytest.raises(TypeError):
                await f.add(4.2)
            with pytest.raises(lb.EmptyKeyError):
                await f.test("")
            with pytest.raises(TypeError):
                await f.update("not-a-list-of-keys")
            keys = [f"k{i}" for i in range(25_000)] + [b""]
            with pytest.raises(lb.EmptyKeyError):
                await f.update(keys)  # the bad key is the last: nothing was sent
            with pytest.raises(TypeError, match="await f.test"):
                "x" in f  # noqa: B015

    run(main())
    assert raw_redis.command("EXISTS", "bk") == 0


@pytest.mark.servers
def test_ownership_geometry_and_wrong_type(clean_redis, raw_redis):
    raw_redis.command("SET", "users-string", "hello")
    raw_redis.command("LPUSH", "a-list", "x")
    with RedisFilter.from_url(clean_redis.url, "geo", 1000, 0.01) as s:
        s.add("x")

    async def main():
        async with af(clean_redis, key="users-string") as f:
            with pytest.raises(lb.KeyNotOwnedError):
                await f.add("x")
        async with af(clean_redis, key="a-list") as f:
            with pytest.raises(lb.WrongTypeError) as ei:
                await f.test("x")
            assert ei.value.key == "a-list"
        async with af(clean_redis, key="geo", capacity=5000) as f:
            with pytest.raises(lb.GeometryMismatchError):
                await f.add("y")

    run(main())
    assert raw_redis.command("GET", "users-string") == b"hello"  # untouched


@pytest.mark.parametrize("layout", ["standard", "blocked"])
def test_keys_with_a_nul_byte_are_distinct_filters(clean_redis, layout):
    redis = pytest.importorskip("redis")
    items = [f"item:{i}" for i in range(300)]

    async def main():
        fs = {k: af(clean_redis, key=k, capacity=3000, layout=layout)
              for k in NUL_KEYS + [ALL_BYTES]}
        try:
            await fs[b"a\x00b"].update(items)
            with redis.Redis(host=clean_redis.host, port=clean_redis.port) as client:
                assert server_keys(client) == bitmap_names(b"a\x00b")  # nothing stray
                assert not any(await fs[b"a"].test_many(items))
                assert not any(await fs[b"a\x00c"].test_many(items))
                for k in (b"a", b"a\x00c", ALL_BYTES):
                    await fs[k].add("other")
                assert not any(await fs[b"a"].test_many(items))
                assert all(await fs[b"a\x00b"].test_many(items))
                assert server_keys(client) == set().union(*(bitmap_names(k) for k in fs))
        finally:
            for f in fs.values():
                await f.aclose()

    run(main())


def test_closed_filter(clean_redis):
    async def main():
        f = af(clean_redis)
        await f.add("x")
        await f.aclose()
        await f.aclose()  # idempotent
        assert f.closed
        for call in (f.add("x"), f.test("x"), f.test_many(["x"]), f.reset()):
            with pytest.raises(lb.ClosedError):
                await call

    run(main())


def test_server_down_and_silent(silent_listener):
    port = _free_port()

    async def main():
        f = AsyncRedisFilter("k", 1000, url=f"redis://127.0.0.1:{port}",
                             socket_connect_timeout=2)
        with pytest.raises(lb.RedisConnectionError, match="error connecting"):
            await f.add("x")
        g = AsyncRedisFilter("k", 1000, url=silent_listener.url, socket_timeout=0.3)
        with pytest.raises(lb.RedisTimeoutError) as ei:
            await bounded(g.test("x"))          # socket_timeout taken: no hang
        assert isinstance(ei.value, TimeoutError)
        assert len(silent_listener.accepted) == 1   # and no retry
        await f.aclose()
        await g.aclose()

    run(main())


def _free_port():
    from redis_server import free_port

    return free_port()


# ---- concurrency, cancellation, restart ----------------------------------------------------


def test_many_concurrent_tasks_on_one_filter(clean_redis):
    async def main():
        async with af(clean_redis, key="conc", capacity=10_000, max_connections=3) as f:
            added = await asyncio.gather(*[f.add(f"k{i}") for i in range(200)])
            assert added == [True] * 200
            hits = await asyncio.gather(*[f.test(f"k{i}") for i in range(200)],
                                        *[f.test_many([f"k{i}", f"no{i}"]) for i in range(50)])
            assert hits[:200] == [True] * 200
            assert all(h[0] for h in hits[200:])
            assert len(f._pool().slots) == 3  # the pool grew to its bound, no further

    run(main())
    assert clean_redis.client().command("CLIENT", "LIST").count(b"cmd=") >= 1


def count_round_trips(monkeypatch):
    """The round trips the asyncio transport makes, counted as it sends them."""
    sent = [0]
    send = aio._AsyncRedis._send

    async def counting(self, *args):
        sent[0] += 1
        return await send(self, *args)

    monkeypatch.setattr(aio._AsyncRedis, "_send", counting)
    return sent


def test_single_calls_that_find_every_connection_busy_go_as_one_batch(clean_redis,
                                                                     monkeypatch):
    """With every connection busy, waiting add()/test() calls of a kind share the next round
    trip (as auto-pipelining does); each still gets its own answer, a bad key fails only its
    own call, and a cancelled one is left out."""
    sent = count_round_trips(monkeypatch)

    async def main():
        async with af(clean_redis, key="co", capacity=10_000, max_connections=1) as f:
            await f.add("warm")                  # the meta key's look: before the counts
            sent[0] = 0
            added = await asyncio.gather(*[f.add(f"k{i}") for i in range(300)])
            assert added == [True] * 300
            assert sent[0] <= 300 // 2, sent     # fewer round trips than calls ...
            got = await asyncio.gather(*[f.test(f"k{i}") for i in range(100)],
                                       *[f.test(f"absent{i}") for i in range(100)])
            assert got[:100] == [True] * 100     # ... and each call its own answer
            fp = sum(got[100:])
            with RedisFilter.from_url(clean_redis.url, "co", 10_000, 0.01) as s:
                assert fp == sum(s.test_many([f"absent{i}" for i in range(100)]))
            # a bad key among them: its own TypeError, the others answered
            calls = [f.test("k1"), f.test(b""), f.test(3.5), f.test("k2")]
            out = await asyncio.gather(*calls, return_exceptions=True)
            assert out[0] is True and out[3] is True
            assert isinstance(out[1], lb.EmptyKeyError) and isinstance(out[2], TypeError)
            # cancelled while queued: left out, the others go on
            tasks = [asyncio.ensure_future(f.add(f"c{i}")) for i in range(50)]
            await asyncio.sleep(0)
            for t in tasks[10:20]:
                t.cancel()
            done = await asyncio.gather(*tasks, return_exceptions=True)
            assert all(isinstance(d, asyncio.CancelledError) for d in done[10:20])
            assert done[:10] + done[20:] == [True] * 40
            assert await f.test_many([f"c{i}" for i in range(50) if not 10 <= i < 20]) \
                == [True] * 40

    run(main())


def test_queued_single_calls_all_get_the_error_of_their_round_trip(redis_server_factory):
    srv = redis_server_factory()

    async def main():
        async with af(srv, key="qe", max_connections=1, socket_timeout=0.3) as f:
            await f.add("a")
            srv.pause()                          # the round trips time out, all of them
            try:
                out = await asyncio.gather(*[f.test(f"k{i}") for i in range(20)],
                                           return_exceptions=True)
            finally:
                srv.resume()
            assert all(isinstance(e, lb.RedisTimeoutError) for e in out), out
            assert await f.test("a") is True and await f.test("zz") is False
            f2 = af(srv, key="qe2", max_connections=1)
            pending = [asyncio.ensure_future(f2.test(f"k{i}")) for i in range(20)]
            await f2.aclose()                    # queued calls end with ClosedError
            out = await asyncio.gather(*pending, return_exceptions=True)
            assert all(isinstance(e, (lb.ClosedError, bool)) for e in out), out

    run(main())


def test_one_filter_from_two_event_loops_in_two_threads_at_once(clean_redis):
    """Two threads, each running an event loop of its own, call one filter at the same time
    with its pool busy (max_connections=1): every call of each loop is answered, on its own
    loop; then a later asyncio.run() goes on with the same filter."""
    import threading

    f = af(clean_redis, key="two-threads", capacity=10_000, max_connections=1)
    start = threading.Barrier(2)
    out = {}

    async def calls(name):
        added = await asyncio.gather(*[f.add(f"{name}:{i}") for i in range(150)],
                                     *[f.add_many([f"{name}:m{i}"]) for i in range(20)])
        hits = await asyncio.gather(*[f.test(f"{name}:{i}") for i in range(150)],
                                    f.bits_set())
        return added, hits

    def thread(name):
        async def main():
            start.wait(30)          # both loops running before either calls
            return await bounded(calls(name))

        try:
            out[name] = asyncio.run(main())
        except BaseException as e:  # reported below, with the thread's name
            out[name] = e

    threads = [threading.Thread(target=thread, args=(n,), daemon=True) for n in ("a", "b")]
    for t in threads:
        t.start()
    for t in threads:
        t.join(2 * 120 + 30)
    assert not any(t.is_alive() for t in threads), "a loop's calls never ended"
    for name in ("a", "b"):
        assert not isinstance(out[name], BaseException), (name, out[name])
        added, hits = out[name]
        assert added == [True] * 150 + [[True]] * 20, name
        assert hits[:150] == [True] * 150 and hits[150] > 0, name
    # one loop after the other, as scripts do: the filter goes on, then closes
    assert run(f.test_many(["a:0", "b:149", "a:m3"])) == [True, True, True]
    run(f.aclose())
    with pytest.raises(lb.ClosedError):
        run(f.test("a:0"))


def test_aclose_on_one_loop_ends_the_calls_waiting_on_another(redis_server_factory):
    """aclose() awaited on one loop while another thread's loop has a call in a round trip
    (the server paused) and others waiting for the connection: the waiting ones raise
    ClosedError on their own loop, the server still paused; the one in flight is answered
    once the server goes on."""
    import threading

    srv = redis_server_factory()
    f = af(srv, key="close-across", max_connections=1)
    waiting, ended = threading.Event(), threading.Event()
    out = {}

    async def other_loop():
        await f.add("a")
        srv.pause()                              # the next round trip stays in flight
        in_flight = asyncio.ensure_future(f.test("a"))
        await until(lambda: srv.unread_input() > 0, "the request at the paused server")
        tasks = [asyncio.ensure_future(f.test(f"q{i}")) for i in range(5)]
        tasks.append(asyncio.ensure_future(f.add_many(["x", "y"])))
        # waiting for the connection: the 5 tests queued as one batch, and that batch and
        # add_many each waiting for the connection
        pool = f._pools[asyncio.get_running_loop()]
        await until(lambda: len(pool.queued[aio._TEST]) == 5 and len(pool.waiters) == 2,
                    "the calls waiting for the connection")
        waiting.set()
        try:
            out["waiting"] = await bounded(asyncio.gather(*tasks, return_exceptions=True))
        finally:
            ended.set()
        out["in_flight"] = await bounded(in_flight)

    def thread():
        try:
            asyncio.run(other_loop())
        except BaseException as e:
            out["error"] = e
        finally:
            ended.set()

    t = threading.Thread(target=thread, daemon=True)
    t.start()
    try:
        assert waiting.wait(120), out
        run(f.aclose())                          # on this thread's loop
        assert ended.wait(150), out              # the server still paused
    finally:
        srv.resume()
    t.join(150)
    assert not t.is_alive(), "the other loop's calls never ended"
    assert "error" not in out, out["error"]
    assert all(isinstance(e, lb.ClosedError) for e in out["waiting"]), out
    assert out["in_flight"] is True
    assert f.closed
    with pytest.raises(lb.ClosedError):
        run(f.test("a"))


def test_a_key_changed_while_its_call_waits_to_be_merged_changes_no_other_call(clean_redis,
                                                                              monkeypatch):
    """Single calls queued behind a busy connection go as one batch; a caller that empties
    its bytearray right after calling gets the answer for the key as it was when called, and
    every other call of the batch its own answer."""
    batches = []
    on = aio._AsyncRedis._on

    async def spy(self, slot, kind, keys):
        batches.append(None if keys is None else len(keys))
        return await on(self, slot, kind, keys)

    monkeypatch.setattr(aio._AsyncRedis, "_on", spy)

    async def main():
        async with af(clean_redis, key="mut", capacity=10_000, max_connections=1) as f:
            await f.add_many(["present:0", "present:1", "present:2"])
            for kind in ("add", "test"):
                mutable = bytearray(f"{kind}:mutable".encode())
                if kind == "test":
                    await f.add(bytes(mutable))
                batches.clear()
                busy = asyncio.ensure_future(f.test_many(["present:0"]))
                await asyncio.sleep(0)           # busy holds the only connection
                call = getattr(f, kind)
                others = [f"{kind}:{i}" if kind == "add" else f"present:{i % 3}"
                          for i in range(10)]
                tasks = [asyncio.ensure_future(call(k)) for k in others[:5]]
                tasks.append(asyncio.ensure_future(call(mutable)))
                tasks += [asyncio.ensure_future(call(k)) for k in others[5:]]
                await asyncio.sleep(0)           # every call is queued
                mutable.clear()                  # the caller empties its key
                got = await asyncio.gather(*tasks, return_exceptions=True)
                assert await busy == [True]
                assert batches == [1, 11], batches   # the busy call, then one merged batch
                assert got == [True] * 11, (kind, got)
            assert await f.test_many([b"add:mutable", b"test:mutable"]) == [True, True]

    run(main())


def test_a_cancelled_call_never_leaves_a_reply_for_the_next(redis_server_factory):
    srv = redis_server_factory()

    async def main():
        async with af(srv, key="cx", max_connections=1) as f:
            await f.add("present")
            srv.pause()
            try:
                call = asyncio.ensure_future(f.test("present"))
                await until(srv.unread_input, "the request to reach the hung server")
                assert not call.done()  # waiting on the hung server
                call.cancel()
                with pytest.raises(asyncio.CancelledError):
                    await call
                # a write queued behind the hung reply would read its answer if the
                # connection were kept: a test of an absent key must stay False
            finally:
                srv.resume()
            # the late reply is sent (to a connection that is gone)
            await until(lambda: srv.unread_input() == 0, "the server to read the request")
            assert await f.test("absent") is False
            assert await f.test("present") is True

    run(main())


def test_a_timeout_drops_the_connection_and_the_next_call_is_answered(redis_server_factory):
    srv = redis_server_factory()

    async def main():
        async with af(srv, key="tx", socket_timeout=0.3, max_connections=1) as f:
            await f.add("present")
            srv.pause()
            try:
                with pytest.raises(lb.RedisTimeoutError):
                    await f.test("absent")
            finally:
                srv.resume()
            # the late reply is sent (to a connection that is gone)
            await until(lambda: srv.unread_input() == 0, "the server to read the request")
            assert await f.test("absent") is False
            assert await f.test("present") is True

    run(main())


@pytest.mark.servers
def test_server_restart_is_survived(redis_server_factory):
    srv = redis_server_factory()

    async def main():
        async with af(srv, key="rs", max_connections=1) as f:
            await f.add("a")
            srv.restart()  # empty: no persistence
            # the kept connection is dead; the call goes out again on a new one, whose
            # check finds the filter this client knew gone: not re-created by a write
            with pytest.raises(lb.FilterLostError):
                await f.add("b")
            await f.reset()  # rebuilt on purpose
            assert await f.add("b") is True
            assert await f.test("b") is True and await f.test("a") is False

    run(main())
    with srv.client() as c:
        assert c.command("EXISTS", "{rs}:meta") == 1


# ---- the wire rules, through the same core ----------------------------------------------------


def test_late_reply_is_not_taken_as_the_next_answer(clean_redis):
    with HostileServer(lambda c, args: None, upstream_port=clean_redis.port) as srv:

        async def main():
            async with af(srv, key="late", max_connections=1) as f:
                await f.add("x")
                late = array(*[integer(0)] * f.k)         # one BITFIELD answer too many
                srv.send_to(0, late)
                # the loop's reader takes it in while the connection is idle
                await until(lambda: srv.read_by_client(0), "the client to read the late answer")
                assert await f.test("x") is True  # not the late answer
                assert srv.connections == 2
                assert srv.names(1)[:4] == ["EXISTS", "GETRANGE", "TYPE", "INFO"]  # checks first

        run(main())


def test_late_reply_still_in_the_socket_is_not_taken_as_the_next_answer(clean_redis):
    # The same late answer, but the next call comes before the loop has read it: it waits
    # in the socket's receive queue when the call is made (the loop is held: no await
    # between its arrival and the call).  The call must not take it as its own answer.
    with HostileServer(lambda c, args: None, upstream_port=clean_redis.port) as srv:

        async def main():
            async with af(srv, key="late", max_connections=1) as f:
                await f.add("x")
                srv.send_to(0, array(*[integer(0)] * f.k))  # one BITFIELD answer too many
                wait_until(lambda: srv.unread_by_client(0) > 0,
                           "the late answer in the client's socket")  # holds the loop: unread
                assert await f.test("x") is True
                assert await f.test_many(["x", "y"]) == [True, False]
                assert srv.connections == 2

        run(main())


@pytest.mark.parametrize("banner,close,error", [
    (b"SSH-2.0-OpenSSH_9.2p1\r\n", False, lb.RedisProtocolError),
    (b"-ERR max number of clients reached\r\n", True, lb.RedisConnectionError)],
    ids=["banner", "error-and-close"])
def test_a_server_that_speaks_first_is_answered_as_by_the_blocking_filter(
        monkeypatch, banner, close, error):
    # A server that writes before any request: a banner (an SSH or SMTP port given as
    # Redis's), or an error and the end (Redis at its maxclients).  What it wrote is read
    # as the first reply, as the blocking filter reads it: a protocol error, or the close
    # with the server's error.  The asyncio filter took it as input nobody asked for
    # (before the first send of a new connection too) and reconnected until the tries
    # ran out ("lost before the request was sent", a RedisConnectionError).
    import socket
    import threading

    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(8)
    port = srv.getsockname()[1]
    conns = []

    def serve():
        while True:
            try:
                c, _ = srv.accept()
            except OSError:
                return
            conns.append(c)
            c.sendall(banner)
            if close:
                c.shutdown(socket.SHUT_WR)

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    made = aio._Wire.connection_made

    def connection_made(self, transport):  # the banner is in the socket before any send
        made(self, transport)
        wait_until(lambda: aio._input_waiting(transport), "the banner in the client's socket")

    try:
        url = f"redis://127.0.0.1:{port}"
        with RedisFilter.from_url(url, "k", 1000, 0.01, socket_timeout=5) as f:
            with pytest.raises(lb.RedisError) as blocking:
                f.add("a")
        monkeypatch.setattr(aio._Wire, "connection_made", connection_made)

        async def main():
            async with AsyncRedisFilter.from_url(url, "k", 1000, 0.01, socket_timeout=5) as f:
                with pytest.raises(lb.RedisError) as e:
                    await f.add("a")
                return e

        e = run(main())
        assert type(blocking.value) is error, repr(blocking.value)
        assert type(e.value) is error, repr(e.value)
        assert str(e.value) == str(blocking.value)
    finally:
        srv.shutdown(socket.SHUT_RDWR)  # wakes the accept
        srv.close()
        for c in conns:
            c.close()
        t.join(5)


@pytest.mark.parametrize("reply", [
    b"*0\r\n",                                   # no element at all
    lambda a: array(*[integer(7)] * (len(a[2:]) // 3)),  # u1 values of 7
    b"*2147483647\r\n",                          # a header announcing 2^31 elements
])
def test_reply_that_does_not_fit_is_a_protocol_error(clean_redis, reply):
    state = {"n": 0}

    def script(c, args):
        if args[0].upper() == b"BITFIELD" and state["n"] == 0:
            state["n"] += 1
            return reply(args) if callable(reply) else reply
        return None

    with HostileServer(script, upstream_port=clean_redis.port) as srv:

        async def main():
            async with af(srv, key="fit", max_connections=1) as f:
                with pytest.raises(lb.RedisProtocolError, match="protocol error"):
                    await f.test("never-added")
                conns = srv.connections
                assert await f.test("never-added") is False  # on a new connection
                assert srv.connections == conns + 1

        run(main())


# ---- TLS -------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    from tls_certs import make_certs

    return make_certs(str(tmp_path_factory.mktemp("tls")))


def test_tls_verified_and_refused(redis_server_factory, certs):
    from tls_certs import server_args

    srv = redis_server_factory(server_args(certs, "server", False), tls=True)

    async def main():
        async with AsyncRedisFilter("tls:a", 1000, url=srv.url, ssl_ca_certs=certs["ca"]) as f:
            await f.add("a")
            assert await f.test("a") and not await f.test("b")
        async with AsyncRedisFilter("tls:a", 1000, url=srv.url) as f:  # the system's CAs
            with pytest.raises(lb.RedisConnectionError, match="certificate verify failed"):
                await f.test("a")
        async with AsyncRedisFilter("tls:a", 1000, url=srv.url, ssl_cert_reqs="none") as f:
            assert await f.test("a")

    run(main())
    with RedisFilter("tls:a", 1000, url=srv.url, ssl_ca_certs=certs["ca"]) as s:
        assert s.test("a")  # the blocking filter reads what the async one wrote over TLS


def test_forked_child_uses_a_connection_of_its_own(clean_redis):
    f = af(clean_redis, key="fork", max_connections=1)
    run(f.add("parent"))
    pid = os.fork()
    if pid == 0:  # the child: its own loop, its own connection
        code = 1
        try:
            code = 0 if asyncio.run(f.test("parent")) else 2
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
    assert run(f.test("parent")) is True


# ---- AsyncRedisBloomFilter, on the real RedisBloom module ------------------------------------


def abf(srv, key, *args, **kw):
    kw.setdefault("socket_timeout", 10)
    return lb.AsyncRedisBloomFilter.from_url(srv.url, key, *args, **kw)


@pytest.mark.servers
def test_redisbloom_results_match_the_blocking_filter(bf_server):
    keys = [f"item:{i}" for i in range(2500)]  # three BF.INSERTs of 1,000

    async def main():
        async with abf(bf_server, "arb:1", 10_000, 0.01) as f:
            assert await f.add("x") is True and await f.add("x") is False
            assert await f.test("x") is True and await f.test("nope") is False
            added = await f.add_many(keys)
            assert await f.test_many(keys) == [True] * len(keys)
            return added, (f.capacity, f.error_rate, f.expansion, f.key)

    added, facts = run(main())
    assert facts == (10_000, 0.01, 2, "arb:1")
    with lb.RedisBloomFilter.from_url(bf_server.url, "arb:1", 10_000, 0.01) as s:
        assert s.test_many(keys) == [True] * len(keys)
        assert s.card() == 1 + sum(added)

    async def reset():
        async with abf(bf_server, "arb:1", 10_000, 0.01) as f:
            await f.reset()
            return await f.test("x")

    assert run(reset()) is False


def test_redisbloom_keys_with_a_nul_byte_are_distinct_filters(bf_server):
    redis = pytest.importorskip("redis")
    items = [f"item:{i}" for i in range(300)]

    async def main():
        fs = {k: lb.AsyncRedisBloomFilter(k, 3000, 0.01, url=bf_server.url + "/9")
              for k in NUL_KEYS + [ALL_BYTES]}
        with redis.Redis(host=bf_server.host, port=bf_server.port, db=9) as client:
            client.flushdb()
            try:
                await fs[b"a\x00b"].update(items)
                assert server_keys(client) == {b"a\x00b"}       # nothing stray
                assert not any(await fs[b"a"].test_many(items))
                assert not any(await fs[b"a\x00c"].test_many(items))
                for k in (b"a", b"a\x00c", ALL_BYTES):
                    await fs[k].add("other")
                assert all(await fs[b"a\x00b"].test_many(items))
                assert server_keys(client) == set(fs)
            finally:
                for f in fs.values():
                    await f.aclose()
                client.flushdb()

    run(main())


def test_redisbloom_full_filter_counts_the_whole_batch(bf_server):
    async def main():
        async with abf(bf_server, "arb:full", 5, 0.01, non_scaling=True, chunk_size=3) as f:
            with pytest.raises(lb.FilterFullError) as ei:
                await f.update(list("aabbcdefg"))  # the README's example, in chunks of 3
            assert (ei.value.processed, ei.value.added) == (7, 5)

    run(main())


def test_redisbloom_adds_are_not_merged_tests_are(bf_server, monkeypatch):
    """A RedisBloom add that fills a non-scaling filter reports its own counts, so waiting
    single adds are never merged into one BF.MADD; waiting tests may be (BF.MEXISTS)."""
    async def main():
        async with abf(bf_server, "arb:co", 20, 0.01, non_scaling=True,
                       max_connections=1) as f:
            await f.add("warm")
            sent = count_round_trips(monkeypatch)
            out = await asyncio.gather(*[f.add(f"k{i}") for i in range(40)],
                                       return_exceptions=True)
            full = [e for e in out if isinstance(e, lb.FilterFullError)]
            assert full and all(e.processed == 0 and e.added == 0 for e in full)
            assert sent[0] >= 40, sent           # one round trip per add, at least
            sent[0] = 0
            got = await asyncio.gather(*[f.test(f"k{i}") for i in range(40)])
            assert got[:5] == [True] * 5
            assert sent[0] < 40, sent            # tests share them

    run(main())


@pytest.mark.servers
def test_redisbloom_errors(bf_server, clean_redis):
    with bf_server.client() as c:
        c.command("DEL", "arb:list", "arb:other")
        c.command("LPUSH", "arb:list", "x")
    with lb.RedisBloomFilter.from_url(bf_server.url, "arb:other", 100, 0.01,
                                      non_scaling=True) as s:
        s.add("x")

    async def main():
        async with abf(bf_server, "arb:list", 100, 0.01) as f:
            with pytest.raises(lb.WrongTypeError):  # the module answers 0: the TYPE follow-up
                await f.test("x")
            with pytest.raises(lb.WrongTypeError):
                await f.add("x")
        async with abf(bf_server, "arb:other", 1000, 0.01) as f:
            with pytest.raises(lb.GeometryMismatchError):
                await f.add("y")
        async with abf(bf_server, "arb:missing", no_create=True) as f:
            with pytest.raises(lb.FilterNotFoundError):
                await f.add("y")
        async with abf(clean_redis, "arb:nomodule") as f:
            with pytest.raises(lb.ModuleMissingError):
                await f.add("y")

    run(main())


def test_redisbloom_restart_and_cancel(bf_server_factory):
    srv = bf_server_factory()

    async def main():
        async with abf(srv, "arb:r", 1000, 0.01, max_connections=1) as f:
            await f.add("a")
            srv.pause()
            try:
                call = asyncio.ensure_future(f.test("a"))
                await until(srv.unread_input, "the request to reach the hung server")
                call.cancel()
                with pytest.raises(asyncio.CancelledError):
                    await call
            finally:
                srv.resume()
            assert await f.test("never") is False
            srv.restart()
            with pytest.raises(lb.FilterLostError):  # not created again by a write
                await f.add("b")
            await f.reset()  # made again with our parameters
            assert await f.add("b") is True
            assert (await f.test_many(["a", "b"])) == [False, True]

    run(main())
    with lb.RedisBloomFilter.from_url(srv.url, "arb:r", 1000, 0.01) as s:
        info = s.info()
        assert info.capacity == 1000 and info.expansion == 2


# ---- the whole-filter calls: the blocking filter's own, on a worker thread -------------------


@pytest.mark.servers
def test_whole_filter_calls_give_the_blocking_results(clean_redis):
    """bits_set, approximate_count, fill_ratio, current_error_rate, remaining_ttl, snapshot
    and load, awaited: the blocking filter's answers on the same bitmap, its errors too."""
    keys = [f"k{i}" for i in range(3000)]
    extra = lb.MemoryFilter(10_000, 0.01)
    extra.update(["loaded:1", "loaded:2"])
    wrong = lb.MemoryFilter(50, 0.2)

    async def main():
        with RedisFilter.from_url(clean_redis.url, "whole", 10_000, 0.01, ttl=300) as s:
            async with af(clean_redis, "whole", 10_000, ttl=300) as f:
                await f.update(keys)
                assert await f.bits_set() == s.bits_set() > 0
                assert await f.approximate_count() == s.approximate_count()
                assert abs(await f.approximate_count() - len(keys)) < len(keys) * 0.05
                assert await f.fill_ratio() == s.fill_ratio()
                assert await f.current_error_rate() == s.current_error_rate()
                assert 0 < await f.remaining_ttl() <= 300
                snap = await f.snapshot()
                assert isinstance(snap, lb.MemoryFilter) and snap == s.snapshot()
                assert all(snap.test_many(keys))
                await f.load(extra)
                assert s.test_many(["loaded:1", "loaded:2"]) == [True, True]
                with pytest.raises(lb.GeometryMismatchError) as e:
                    await f.load(wrong)
                with pytest.raises(lb.GeometryMismatchError) as blocking:
                    s.load(wrong)
                assert str(e.value) == str(blocking.value)   # the same error, blocking

    run(main())


def test_a_whole_filter_call_leaves_the_loop_free(redis_server_factory):
    """While bits_set() waits on a paused server, other tasks on the loop go on: the call
    runs on a worker thread; it ends once the server goes on."""
    srv = redis_server_factory()

    async def main():
        async with af(srv, "free", 1000) as f:
            await f.add("a")
            srv.pause()
            try:
                call = asyncio.ensure_future(f.bits_set())
                # the loop runs (until() polls on it) while the call's request waits at
                # the paused server
                await until(lambda: srv.unread_input() > 0, "the request at the server")
                assert not call.done()
            finally:
                srv.resume()
            assert await bounded(call) > 0
            # cancelled while the server is paused: the call ends in its thread, the
            # filter goes on, and aclose() waits for it
            srv.pause()
            try:
                call = asyncio.ensure_future(f.bits_set())
                await until(lambda: srv.unread_input() > 0, "the request at the server")
                call.cancel()
                with pytest.raises(asyncio.CancelledError):
                    await call
                assert len(f._twin_calls) == 1
            finally:
                srv.resume()
            assert await bounded(f.bits_set()) > 0
        assert not f._twin_calls

    run(main())


def test_whole_filter_calls_after_aclose_raise_closed(clean_redis):
    async def main():
        f = af(clean_redis, "closed-whole", 1000)
        await f.add("a")
        assert await f.bits_set() > 0              # the worker's blocking filter is made
        twin = f._twin
        await f.aclose()
        assert f._twin is None and twin.closed    # and closed with the pool
        with pytest.raises(lb.ClosedError):
            await f.bits_set()

    run(main())


def test_whole_filter_calls_from_a_second_event_loop(clean_redis):
    """The worker's blocking filter belongs to no loop: a second asyncio.run() asks it too,
    and a third closes it."""
    with RedisFilter.from_url(clean_redis.url, "two-loops", 1000, 0.01) as s:
        s.add("a")
    f = af(clean_redis, "two-loops", 1000)
    first = run(f.bits_set())
    assert run(f.bits_set()) == first > 0
    run(f.aclose())
    with pytest.raises(lb.ClosedError):
        run(f.bits_set())


def test_open_adopts_the_stored_geometry_off_the_loop(clean_redis, monkeypatch):
    """await AsyncRedisFilter.open(url, key): RedisFilter.open's rules, the geometry read on a
    worker thread, for the first connection and each one after it."""
    with RedisFilter.from_url(clean_redis.url, "stored", 5000, 0.001) as s:
        s.update(["a", "b"])
        m, k = s.m, s.k
    import threading

    loop_threads = []

    async def main():
        loop_threads.append(threading.get_ident())
        f = await AsyncRedisFilter.open(clean_redis.url, "stored", max_connections=3)
        async with f:
            assert (f.m, f.k) == (m, k)
            # three tasks at once: three connections, each made off the loop
            assert await asyncio.gather(*(f.test_many(["a", "b", "c"]) for _ in range(3))) \
                == [[True, True, False]] * 3
            assert len(f._pool().slots) == 3
        with pytest.raises(TypeError, match="adopts the stored geometry; capacity"):
            await AsyncRedisFilter.open(clean_redis.url, "stored", capacity=10)
        with pytest.raises(TypeError, match="url must be a str"):
            await AsyncRedisFilter.open(clean_redis.url.encode(), "stored")
        with pytest.raises(lb.RedisError) as e:
            await AsyncRedisFilter.open(clean_redis.url, "nothing-stored")
        with pytest.raises(type(e.value)):
            RedisFilter.open(clean_redis.url, "nothing-stored")   # the same error, blocking

    made_on = []

    def spy(*a, **kw):
        made_on.append(threading.get_ident())
        return RedisFilter(*a, **kw)

    monkeypatch.setattr(AsyncRedisFilter, "_sync", staticmethod(spy))
    run(main())
    assert made_on and loop_threads[0] not in made_on   # never constructed on the loop


def test_redisbloom_whole_filter_calls_give_the_blocking_results(bf_server):
    """info, card, reserve, dump, restore and remaining_ttl, awaited: the blocking
    filter's answers and errors."""
    from ling_bloom import AsyncRedisBloomFilter, RedisBloomFilter

    async def main():
        async with AsyncRedisBloomFilter.from_url(bf_server.url, "abf:whole", 1000, 0.01) as f:
            with pytest.raises(lb.FilterNotFoundError):
                await f.info()
            assert await f.card() == 0
            assert await f.reserve() is True and await f.reserve() is False
            await f.update(["a", "b", "c"])
            info, card, dump = await f.info(), await f.card(), await f.dump()
            ttl = await f.remaining_ttl()
        async with AsyncRedisBloomFilter.from_url(bf_server.url, "abf:copy", 1000, 0.01) as g:
            await g.restore(dump)
            return info, card, ttl, await g.test_many(["a", "b", "c", "d"])

    info, card, ttl, copied = run(main())
    with RedisBloomFilter.from_url(bf_server.url, "abf:whole", 1000, 0.01) as s:
        assert info == s.info() and card == s.card() == 3
    assert ttl is None
    assert copied == [True, True, True, False]
    with RedisBloomFilter.from_url(bf_server.url, "abf:whole", 5000, 0.01) as s:
        with pytest.raises(lb.GeometryMismatchError):
            s.reserve()

    async def mismatch():
        async with AsyncRedisBloomFilter.from_url(bf_server.url, "abf:whole", 5000, 0.01) as f:
            await f.reserve()

    with pytest.raises(lb.GeometryMismatchError):   # the same error, awaited
        run(mismatch())
