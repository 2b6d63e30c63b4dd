"""Both Redis filters behind Redis Sentinel, blocking and
asyncio: a test that takes ``flavor`` runs once with RedisFilter / RedisBloomFilter and once
with AsyncRedisFilter / AsyncRedisBloomFilter (tests/support/flavors.py), with the same
assertions.

A real set on free ports of 127.0.0.1: a primary and a replica (the RedisBloom module
loaded on both) and one sentinel with quorum 1, started once for the module.  One
sentinel is enough to find the primary and to run a failover on its own (it is its own
majority); SENTINEL FAILOVER and a killed primary both move the service to the replica.

What "acknowledged" means here: an add whose call returned was answered by the primary;
Redis replicates asynchronously, so an add the primary answered just before it died may
not have reached the replica.  A caller who needs the replica's copy opens the filter with
``wait_replicas`` (the failover test does), or sends a write and `WAIT` of its own
(``replicated()``): `WAIT` alone on a fresh connection counts the replicas that have that
connection's last write, which is none, and returns at once whatever the replica holds.
"""
from __future__ import annotations

import asyncio
import socket
import threading
import time

import pytest

import ling_bloom as lb
from conftest import _new_server
from hang_guard import returns
from redis_server import HOST, RedisReplyError, SentinelServer, free_port

SERVICE = "lbprimary"


def wait_for(what, cond, deadline=20.0, state=None):
    """Poll cond until true; an AssertionError after deadline, with state() (what the
    servers say) when given."""
    end = time.monotonic() + deadline
    while not cond():
        assert time.monotonic() < end, f"never: {what}" + (f"\n{state()}" if state else "")
        time.sleep(0.1)


def role(srv) -> str:
    """The server's ROLE; "" when the connection was cut, as a sentinel does while it
    reconfigures a server (it kills that server's normal clients), so polls ask again."""
    try:
        with srv.client() as c:
            return c.command("ROLE")[0].decode()
    except ConnectionError:
        return ""


def replicated(srv) -> int:
    """How many replicas have every write srv took so far: a write on this connection, then
    WAIT for it (replication keeps order, so a replica with it has the earlier writes of
    every other connection too)."""
    with srv.client() as c:
        c.command("INCR", "sent:waited")
        return c.command("WAIT", 1, 30000)


def bits_on(srv, key):
    """BITCOUNT of key on srv, or what stopped the read."""
    try:
        with srv.client() as c:
            return c.command("BITCOUNT", key)
    except (OSError, RedisReplyError) as e:
        return repr(e)


class SentinelSet:
    def __init__(self, module, server="redis"):
        # either server may be the primary a replica syncs from: at once, not after the
        # 5 s diskless-sync delay (each set's start and each failover paid it)
        load = ["--loadmodule", module, "--repl-diskless-sync-delay", "0"]
        self.a = _new_server(extra_args=load, unix_socket=False, server=server)
        self.a.start()
        self.b = _new_server(extra_args=load + ["--replicaof", HOST, str(self.a.port)],
                             unix_socket=False, server=server)
        self.b.start()
        wait_for("replica in sync", lambda: self._synced())
        self.sentinel = SentinelServer(SERVICE, self.a.port, server=server)
        self.sentinel.start()
        wait_for("the sentinel sees the replica", self._sentinel_sees_replica)

    def _synced(self) -> bool:
        return self._link_up(self.b)

    def describe(self) -> str:
        """Each server's INFO replication, the sentinel's view, the end of each log."""
        out = []
        for name, srv in (("a", self.a), ("b", self.b), ("sentinel", self.sentinel)):
            out.append(f"--- {name} {srv.port} ({'running' if srv.running else 'stopped'})")
            if srv.running:
                try:
                    with srv.client() as c:
                        if srv is self.sentinel:
                            info = c.command("SENTINEL", "master", SERVICE)
                            out.append(repr(dict(zip(info[::2], info[1::2]))))
                        else:
                            out.append(c.command("INFO", "replication").decode().strip())
                except (OSError, RedisReplyError) as e:
                    out.append(repr(e))
            out.extend(srv.log().splitlines()[-15:])
        return "\n".join(out)

    @staticmethod
    def _link_up(srv) -> bool:
        with srv.client() as c:
            info = c.command("INFO", "replication").decode()
        return "master_link_status:up" in info

    def _sentinel_sees_replica(self) -> bool:
        """The sentinel knows the replica and has its INFO: a replica it may promote."""
        with self.sentinel.client() as c:
            replicas = c.command("SENTINEL", "replicas", SERVICE)
        if len(replicas) != 1:
            return False
        fields = dict(zip(replicas[0][::2], replicas[0][1::2]))
        return fields.get(b"flags") == b"slave" and fields.get(b"master-link-status") == b"ok"

    @property
    def url(self) -> str:
        return f"redis+sentinel://{HOST}:{self.sentinel.port}/{SERVICE}"

    def primary(self):
        host, port = self.sentinel.primary()
        return self.a if port == self.a.port else self.b

    def replica(self):
        return self.b if self.primary() is self.a else self.a

    def failover(self):
        """SENTINEL FAILOVER; returns when the sentinel names the old replica and it is a
        master, and the old primary is its replica again."""
        old, new = self.primary(), self.replica()
        wait_for("a replica the sentinel may promote", self._sentinel_sees_replica)
        wait_for("the replica in sync", lambda: self._link_up(new))

        def started() -> bool:
            with self.sentinel.client() as c:
                try:
                    c.command("SENTINEL", "FAILOVER", SERVICE)
                    return True
                except RedisReplyError as e:  # NOGOODSLAVE until its INFO is fresh
                    assert "NOGOODSLAVE" in str(e) or "INPROG" in str(e), e
                    return False

        wait_for("SENTINEL FAILOVER accepted", started)
        wait_for("failover", lambda: self.primary() is new and role(new) == "master")
        wait_for("old primary demoted", lambda: role(old) == "slave")
        # and in sync with the new primary (a full sync when the sentinels' hello messages
        # moved its offset on meanwhile), so that a write's WAIT for one replica can succeed
        wait_for("the old primary in sync with the new", lambda: self._link_up(old), 60,
                 self.describe)
        return old, new

    def check_primary(self, primary) -> None:
        """The set healthy with this primary: named by the sentinel and a master, the
        other server its replica with the link up, and the sentinel sees that replica."""
        other = self.b if primary is self.a else self.a
        wait_for("the set as found", lambda: (
            self.primary() is primary and role(primary) == "master" and role(other) == "slave"
            and self._link_up(other) and self._sentinel_sees_replica()), 60, self.describe)

    def stop(self):
        for s in (self.sentinel, self.b, self.a):
            s.stop()


def _module_set(module, server):
    s = SentinelSet(module, server)
    try:
        yield s
    finally:
        s.stop()


@pytest.fixture(scope="module")
def redis_sentinel_set(redisbloom_module):
    yield from _module_set(redisbloom_module, "redis")


@pytest.fixture(scope="module")
def redis8_sentinel_set(redisbloom_module):
    yield from _module_set(redisbloom_module, "redis8")


@pytest.fixture(scope="module")
def valkey_sentinel_set(redisbloom_module):
    yield from _module_set(redisbloom_module, "valkey")


@pytest.fixture
def sentinels(request, server_kind):
    """The module's set of server_kind, its primary flushed (a test runs once per flavour
    on the same keys).  Every test leaves the set as it found it, checked: one primary
    that the sentinel names and that is a master, the other server its replica in sync,
    seen by the sentinel.  Which of the two is the primary is the sentinel's to say (every
    test asks it, as a client does), so a test that failed over is not failed back: a
    second failover cost about 26 s a test and checked nothing more."""
    sentinel_set = request.getfixturevalue(f"{server_kind}_sentinel_set")
    wait_for("a primary", lambda: role(sentinel_set.primary()) == "master")
    with sentinel_set.primary().client() as c:
        c.command("FLUSHALL")
    yield sentinel_set
    sentinel_set.check_primary(sentinel_set.primary())


def test_urls_are_checked(flavor):
    for url, msg in [
        ("redis+sentinel://127.0.0.1:1", "names the service"),
        ("redis+sentinel://127.0.0.1:1/", "names the service"),
        ("redis+sentinel://127.0.0.1:0/s", "sentinel port"),
        ("redis+sentinel://,127.0.0.1:1/s", "empty sentinel"),
        ("redis+sentinel://[::1]:1/s", "invalid character"),
        ("redis+sentinel://h:1/s/x", "database"),
        ("redis+sentinel://h:1/s?sentinel_pass=x", "unknown URL option"),
    ]:
        with pytest.raises(ValueError, match=msg):
            flavor.RedisFilter.from_url(url, "k", 100, 0.01)
    with pytest.raises(TypeError, match="sentinel"):
        flavor.RedisFilter.from_url("redis+sentinel://h:1/s", "k", 100, 0.01, host="other")


@pytest.mark.servers
def test_both_filters_through_the_sentinels(flavor, sentinels):
    url = sentinels.url + "?socket_timeout=5"
    with flavor.RedisFilter.from_url(url, "sent:bits", 10_000, 0.01) as f:
        assert f.add("a") is True and "a" in f
        f.update([f"k{i}" for i in range(1000)])
        assert all(f.test_many([f"k{i}" for i in range(1000)]))
    with flavor.RedisBloomFilter.from_url(url, "sent:bf", 10_000, 0.01) as bf:
        assert bf.add("a") is True and "a" in bf
    # What was written is on the primary the sentinel names.
    with sentinels.primary().client() as c:
        assert c.command("EXISTS", "sent:bits") == 1 and c.command("EXISTS", "sent:bf") == 1


@pytest.mark.servers
def test_from_redis_takes_a_redis_py_sentinel_client(flavor, sentinels):
    pytest.importorskip("redis")
    from redis.sentinel import Sentinel

    s = Sentinel([(HOST, sentinels.sentinel.port)], socket_timeout=5)
    client = s.master_for(SERVICE, socket_timeout=5)
    with flavor.RedisFilter.from_redis(client, "sent:rp", 1000, 0.01) as f:
        f.update(["a", "b"])
        assert f.test_many(["a", "b"]) == [True, True]
    with flavor.RedisBloomFilter.from_redis(client, "sent:rpbf", 1000, 0.01) as bf:
        assert bf.add("a")
    assert client.exists("sent:rp") == 1 and client.execute_command("BF.EXISTS", "sent:rpbf", "a")
    with pytest.raises(ValueError, match="master_for"):
        flavor.RedisFilter.from_redis(s.slave_for(SERVICE), "sent:rp", 1000, 0.01)
    client.close()


@pytest.mark.servers
def test_from_redis_takes_a_valkey_py_sentinel_client(flavor, sentinels):
    pytest.importorskip("valkey")
    from valkey.sentinel import Sentinel

    s = Sentinel([(HOST, sentinels.sentinel.port)], socket_timeout=5)
    client = s.master_for(SERVICE, socket_timeout=5)
    with flavor.RedisFilter.from_redis(client, "sent:vp", 1000, 0.01) as f:
        f.update(["a", "b"])
        assert f.test_many(["a", "b"]) == [True, True]
    with flavor.RedisBloomFilter.from_redis(client, "sent:vpbf", 1000, 0.01) as bf:
        assert bf.add("a")
    assert client.exists("sent:vp") == 1 and client.execute_command("BF.EXISTS", "sent:vpbf", "a")
    with pytest.raises(ValueError, match="master_for"):
        flavor.RedisFilter.from_redis(s.slave_for(SERVICE), "sent:vp", 1000, 0.01)
    client.close()


@pytest.mark.slow
@pytest.mark.servers
def test_failover_moves_the_filter_to_the_new_primary(flavor, sentinels):
    # wait_replicas=1: each write returns once the replica has it, so nothing acknowledged
    # is lost when the replica is promoted (the caller's way to ask for that)
    url = sentinels.url + "?socket_timeout=10&wait_replicas=1&wait_timeout=8"
    f = flavor.RedisFilter.from_url(url, "sent:fo", 10_000, 0.01)
    bf = flavor.RedisBloomFilter.from_url(url, "sent:fobf", 10_000, 0.01)
    before = [f"before:{i}" for i in range(500)]
    f.update(before)
    bf.update(before)
    old, new = sentinels.primary(), sentinels.replica()
    # what wait_replicas promised, read on the replica itself
    assert bits_on(new, "sent:fo") == bits_on(old, "sent:fo") > 0
    assert sentinels.failover() == (old, new)
    # The kept connections point at the demoted primary: the next calls find the new one
    # (a -READONLY write, or a closed connection, sends them back to the sentinels).
    after = [f"after:{i}" for i in range(500)]
    f.update(after)
    bf.update(after)
    for name, filt in (("RedisFilter", f), ("RedisBloomFilter", bf)):
        got = filt.test_many(before + after)
        missing = [k for k, present in zip(before + after, got) if not present]
        assert not missing, (
            f"{name}: {len(missing)} of {len(got)} keys test False, first {missing[:5]}; "
            f"BITCOUNT sent:fo on the new primary {bits_on(new, 'sent:fo')}, "
            f"on the old {bits_on(old, 'sent:fo')}\n{sentinels.describe()}")
    with new.client() as c:
        assert c.command("EXISTS", "sent:fo") == 1
    f.close()
    bf.close()


@pytest.fixture
def own_sentinels(redisbloom_module, server_kind):
    """A primary, a replica and a sentinel of the test's own, for a test that leaves them
    broken (a killed primary): the next test does not wait for them to mend."""
    s = SentinelSet(redisbloom_module, server_kind)
    try:
        yield s
    finally:
        s.stop()


@pytest.mark.slow
@pytest.mark.servers
def test_killed_primary_and_a_new_connection(flavor, own_sentinels):
    sentinels = own_sentinels
    url = sentinels.url + "?socket_timeout=5&socket_connect_timeout=1"
    f = flavor.RedisFilter.from_url(url, "sent:kill", 10_000, 0.01)
    f.update(["x", "y"])
    primary, replica = sentinels.primary(), sentinels.replica()
    wait_for("the replica in sync", lambda: sentinels._link_up(replica))
    assert replicated(primary) == 1  # the replica may still be in its first sync
    primary.kill()
    try:
        wait_for("sentinel promotes the replica", lambda: sentinels.primary() is replica, 90,
                 sentinels.describe)
        wait_for("promoted", lambda: role(replica) == "master")
        # The first call may fail (its connection died under it); then the filter reconnects
        # through the sentinel.  Nothing acknowledged (and waited for) is lost.
        try:
            f.add("z")
        except lb.RedisConnectionError:
            f.add("z")
        assert f.test_many(["x", "y", "z"]) == [True, True, True]
    finally:
        f.close()


def test_unknown_service_and_sentinels_down(flavor, sentinels):
    url = f"redis+sentinel://{HOST}:{sentinels.sentinel.port}/nosuchservice"
    with pytest.raises(lb.RedisConnectionError, match="nosuchservice"):
        flavor.RedisFilter.from_url(url, "k", 100, 0.01).add("a")
    dead = free_port()
    url = f"redis+sentinel://{HOST}:{dead}/{SERVICE}?socket_connect_timeout=1"
    with pytest.raises(lb.RedisConnectionError, match=SERVICE):
        flavor.RedisFilter.from_url(url, "k", 100, 0.01).add("a")
    # A dead sentinel first, a live one second: the second answers.
    url = f"redis+sentinel://{HOST}:{dead},{HOST}:{sentinels.sentinel.port}/{SERVICE}"
    with flavor.RedisFilter.from_url(url, "sent:second", 100, 0.01) as f:
        assert f.add("a")


def test_a_hung_sentinel_times_out_and_the_next_is_asked(flavor, sentinels, silent_listener):
    """A sentinel that accepts and never answers is asked once (one connection), its probe
    times out, and the next sentinel answers; with no other sentinel, RedisTimeoutError."""
    port = silent_listener.port
    url = (f"redis+sentinel://{HOST}:{port},{HOST}:{sentinels.sentinel.port}/{SERVICE}"
           "?socket_connect_timeout=0.5")
    with flavor.RedisFilter.from_url(url, "sent:hung", 100, 0.01) as f:
        assert returns(lambda: f.add("a"))
    assert len(silent_listener.accepted) == 1
    url = f"redis+sentinel://{HOST}:{port}/{SERVICE}?socket_connect_timeout=0.5"
    g = flavor.RedisFilter.from_url(url, "sent:hung", 100, 0.01)
    with pytest.raises(lb.RedisTimeoutError, match="sentinel"):
        returns(lambda: g.add("a"))
    g.close()


def test_a_sentinel_that_answers_garbage(flavor, sentinels):
    srv = socket.socket()
    srv.bind((HOST, 0))
    srv.listen(5)
    port = srv.getsockname()[1]
    replies = [b"*2\r\n$9\r\n127.0.0.1\r\n$5\r\nnotnb\r\n", b":42\r\n",
               b"*3\r\n$1\r\na\r\n$1\r\nb\r\n$1\r\nc\r\n"]

    def serve():
        for reply in replies:
            try:
                conn, _ = srv.accept()
            except OSError:  # closed by the test: it asked fewer times (it failed)
                return
            with conn:
                conn.recv(4096)
                conn.sendall(reply)

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    try:
        for _ in replies:
            with pytest.raises(lb.RedisProtocolError, match="protocol error"):
                flavor.RedisFilter.from_url(f"redis+sentinel://{HOST}:{port}/{SERVICE}", "k",
                                            100, 0.01).add("a")
    finally:
        srv.close()
        t.join(5)


def test_the_asyncio_filters_accept_a_sentinel_url(sentinels):
    # A round trip of each async class through the sentinel, on the primary it names.
    url = sentinels.url + "?socket_timeout=5"

    async def main():
        async with lb.AsyncRedisFilter.from_url(url, "sent:aio", 100, 0.01) as f:
            assert await f.add("a") is True and await f.add("a") is False
            assert await f.test_many(["a", "b"]) == [True, False]
        async with lb.AsyncRedisBloomFilter.from_url(url, "sent:aiobf", 100, 0.01) as bf:
            assert await bf.add("a") is True and await bf.test("a") is True

    asyncio.run(main())
    with sentinels.primary().client() as c:
        assert c.command("EXISTS", "sent:aio") == 1
        assert c.command("BF.EXISTS", "sent:aiobf", "a") == 1


class ScriptedSentinel:
    """A sentinel stand-in that names whatever primary the test sets (``self.port``)."""

    def __init__(self, port):
        self.port = port
        self.asked = 0
        self.srv = socket.socket()
        self.srv.bind((HOST, 0))
        self.srv.listen(16)
        self.srv.settimeout(0.2)
        self.stopped = False
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    @property
    def url(self):
        return f"redis+sentinel://{HOST}:{self.srv.getsockname()[1]}/{SERVICE}"

    def _serve(self):
        while not self.stopped:
            try:
                conn, _ = self.srv.accept()
            except OSError:
                continue
            with conn:
                conn.settimeout(5)
                try:
                    if b"get-master-addr-by-name" in conn.recv(4096):
                        self.asked += 1
                        port = str(self.port).encode()
                        conn.sendall(b"*2\r\n$9\r\n127.0.0.1\r\n$%d\r\n%s\r\n" % (len(port), port))
                except OSError:
                    pass

    def stop(self):
        self.stopped = True
        self.thread.join(5)
        self.srv.close()


@pytest.mark.slow
def test_a_demoted_primary_readonly_sends_the_filter_back_to_the_sentinels(
        flavor, redis_server_factory):
    # A failover that leaves the client's connection open: the old primary answers writes
    # with -READONLY.  The filter drops that connection, asks the sentinels again, and sends
    # the (idempotent) batch to the new primary: the caller sees no error.
    nodelay = ["--repl-diskless-sync-delay", "0"]  # a replica syncs at once, not after 5 s
    a = redis_server_factory(nodelay)
    b = redis_server_factory(nodelay + ["--replicaof", HOST, str(a.port)])
    wait_for("b in sync", lambda: SentinelSet._link_up(b))
    fake = ScriptedSentinel(a.port)
    try:
        f = flavor.RedisFilter.from_url(fake.url, "ro:bits", 10_000, 0.01)
        f.update(["one"])
        # "one" is on the replica too.  (A WAIT from another connection proves nothing: it
        # waits for that connection's own writes, none, and answered 1 at once; under the
        # sanitizers b was promoted before the bit arrived.)
        def bits(srv):
            with srv.client() as c:
                return c.command("GET", "ro:bits")
        wait_for('"one" on the replica', lambda: bits(a) is not None and bits(b) == bits(a))
        asked = fake.asked
        with b.client() as c:
            c.command("REPLICAOF", "NO", "ONE")
        with a.client() as c:
            c.command("REPLICAOF", HOST, b.port)            # a is a replica now: READONLY
            assert c.command("ROLE")[0] == b"slave"
        wait_for("a in sync with b", lambda: SentinelSet._link_up(a))
        fake.port = b.port                                   # what the sentinels now say
        f.update(["two"])                                    # -READONLY, then b
        assert fake.asked > asked
        assert f.test_many(["one", "two"]) == [True, True]
        with b.client() as c:
            assert c.command("EXISTS", "ro:bits") == 1
        f.close()
    finally:
        fake.stop()


def test_a_filter_the_primary_lost_says_so(flavor, sentinels):
    """Flushed on the primary (a restart without its data, an eviction): FilterLostError
    through the sentinels too, for both filters; reset() brings each back."""
    keys = [f"user:{i}" for i in range(200)]
    f = flavor.RedisFilter("lost", 2000, 0.01, url=sentinels.url)
    b = flavor.RedisBloomFilter("lost:bf", 2000, 0.01, url=sentinels.url)
    f.update(keys)
    b.update(keys)
    with sentinels.primary().client() as c:
        c.command("FLUSHALL")
    for flt in (f, b):
        with pytest.raises(lb.FilterLostError):
            flt.test_many(keys)
        with pytest.raises(lb.FilterLostError):
            flt.add("x")
        flt.reset()
        assert flt.test_many(keys) == [False] * len(keys)


def _asking_sentinel(sentinel) -> int:
    """Connections to the sentinel whose last command asked for the primary's address
    (the test's own connection's last command is CLIENT LIST; the other sentinels' links
    show other SENTINEL subcommands, is-master-down-by-addr after a failover)."""
    with sentinel.client() as c:
        listing = c.command("CLIENT", "LIST").decode()
    return sum("get-master-addr-by-name" in line for line in listing.splitlines())


@pytest.mark.servers
def test_the_connection_that_asked_a_sentinel_is_closed_once_answered(flavor, sentinels):
    url = sentinels.url + "?socket_timeout=5"
    with flavor.RedisFilter.from_url(url, "sent:asked", 1000, 0.01) as f:
        assert f.add("a") is True
        # connected to the primary, done with the sentinel: its connection is gone
        wait_for("no connection left open to the sentinel",
                 lambda: _asking_sentinel(sentinels.sentinel) == 0, 10)
        assert "a" in f
