"""A Redis filter made without a ttl that the server lost (restarted without its data,
flushed, deleted, evicted) says so: FilterLostError on test and add, for every process that
shares the key, never an empty filter answering "absent" to every key.  It comes back
through reset(), load() or a warm-up; a filter with a ttl is still empty after its loss.
Also: the EvictionWarning of a server whose maxmemory-policy can evict the filter, and a
meta key holding another program's long value."""
from __future__ import annotations

import socket
import threading
import warnings

import pytest

import ling_bloom as lb
from cluster_tools import primaries, url as cluster_url

KEYS = [f"user:{i}" for i in range(500)]


def rf(flavor, srv, key="bf", *args, **kw):
    if not args and "m" not in kw:
        args = (2000, 0.01)
    return flavor.RedisFilter(key, *args, url=srv.url, **kw)


def calls(f, keys=KEYS):
    """Every call of the request path, one by one."""
    return [lambda: f.test(keys[0]), lambda: keys[0] in f, lambda: f.test_many(keys),
            lambda: f.add("new"), lambda: f.add_many(["new2", "new3"]),
            lambda: f.update(["new4"])]


def assert_lost(f, key="bf"):
    for call in calls(f):
        with pytest.raises(lb.FilterLostError) as e:
            call()
        assert isinstance(e.value, lb.FilterNotFoundError) and e.value.key == key


class SplitProxy:
    """A TCP proxy to a server that reads the commands a client sends and, once armed,
    holds the `nth` command named `name` (0: the first) of those that follow: it waits for
    the server's answer to the commands of the round trip sent before it (when there were
    any), runs `between` (a FLUSHALL on another connection, say), then sends it on.  It is
    how a flush lands between two commands of one round trip, as it may on a busy server
    (a pipeline is not atomic), or between two round trips of one call."""

    def __init__(self, port: int) -> None:
        self.upstream = ("127.0.0.1", port)
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"redis://127.0.0.1:{self.listener.getsockname()[1]}"
        self.armed = None
        self.fired = threading.Event()
        self.answered = 0
        self.cond = threading.Condition()
        self.socks = []
        threading.Thread(target=self._accept, daemon=True).start()

    def arm(self, name: bytes, between, nth: int = 1) -> None:
        self.fired.clear()
        self.armed = [name.upper(), nth, between]

    def close(self) -> None:
        self.listener.close()
        for s in self.socks:
            s.close()

    def _accept(self) -> None:
        while True:
            try:
                c, _ = self.listener.accept()
            except OSError:
                return
            s = socket.create_connection(self.upstream)
            self.socks += [c, s]
            threading.Thread(target=self._up, args=(c, s), daemon=True).start()
            threading.Thread(target=self._down, args=(s, c), daemon=True).start()

    def _down(self, s, c) -> None:
        try:
            while (d := s.recv(1 << 20)):
                with self.cond:
                    self.answered += len(d)
                    self.cond.notify_all()
                c.sendall(d)
        except OSError:
            pass
        c.close()

    @staticmethod
    def _command(buf: bytes, at: int):
        """(name, end) of the RESP command at buf[at:], None while it is incomplete."""
        eol = buf.find(b"\r\n", at)
        if eol < 0:
            return None
        n, pos, name = int(buf[at + 1:eol]), eol + 2, b""
        for i in range(n):
            eol = buf.find(b"\r\n", pos)
            if eol < 0:
                return None
            ln = int(buf[pos + 1:eol])
            if len(buf) < eol + 2 + ln + 2:
                return None
            if i == 0:
                name = buf[eol + 2:eol + 2 + ln].upper()
            pos = eol + 2 + ln + 2
        return name, pos

    def _up(self, c, s) -> None:
        buf, at = b"", 0
        try:
            while (d := c.recv(1 << 20)):
                buf += d
                start = at
                while at < len(buf) and (cmd := self._command(buf, at)):
                    name, end = cmd
                    armed = self.armed
                    if armed and name == armed[0]:
                        if armed[1] == 0:
                            self.armed = None
                            if at > start:  # commands of this round trip went before it
                                with self.cond:
                                    seen = self.answered
                                s.sendall(buf[start:at])
                                with self.cond:
                                    assert self.cond.wait_for(lambda: self.answered > seen, 10)
                                start = at
                            armed[2]()
                            self.fired.set()
                        armed[1] -= 1
                    at = end
                s.sendall(buf[start:at])
                buf, at = buf[at:], 0
        except OSError:
            pass
        s.close()


@pytest.fixture
def split_proxy(clean_redis):
    p = SplitProxy(clean_redis.port)
    yield p
    p.close()


def commandstats(raw) -> dict:
    out = {}
    for line in raw.command("INFO", "commandstats").decode().split("\r\n"):
        if line.startswith("cmdstat_"):
            name, rest = line[len("cmdstat_"):].split(":", 1)
            fields = dict(kv.split("=") for kv in rest.split(","))
            out[name] = (int(fields["calls"]), float(fields["usec"]))
    return out


# ---- what loses it ----------------------------------------------------------------------


@pytest.mark.parametrize("layout", ["standard", "blocked"])
def test_a_flushed_filter_is_lost_for_this_client_and_for_one_that_comes_later(
        flavor, clean_redis, raw_redis, layout):
    f = rf(flavor, clean_redis, layout=layout)
    f.update(KEYS)
    raw_redis.command("FLUSHALL")
    assert_lost(f)
    # the writes above went into what is left, and made the meta key again: a client that
    # connects after the loss and those writes sees the loss too
    assert raw_redis.command("EXISTS", "bf") == 1
    g = rf(flavor, clean_redis, layout=layout)
    assert_lost(g)
    with lb.RedisFilter.open(clean_redis.url, "bf") as h:
        with pytest.raises(lb.FilterLostError):
            h.test_many(KEYS)


@pytest.mark.parametrize("layout", ["standard", "blocked"])
def test_a_snapshot_or_a_count_of_a_lost_filter_raises(flavor, clean_redis, raw_redis, layout):
    """They read the canary after the bits: a snapshot of a flushed filter was an empty
    MemoryFilter (every key absent), and its counts 0, with nothing raised."""
    f = rf(flavor, clean_redis, layout=layout)
    f.update(KEYS)
    assert f.snapshot().test(KEYS[0]) and f.bits_set() > 0 and f.approximate_count() > 0
    raw_redis.command("FLUSHALL")
    for call in (f.snapshot, f.bits_set, f.approximate_count):
        with pytest.raises(lb.FilterLostError):
            call()
    f.reset()
    assert f.bits_set() == 0 and not f.snapshot().test(KEYS[0])


def test_deleting_the_bitmap_alone_is_a_loss(flavor, clean_redis, raw_redis):
    f = rf(flavor, clean_redis)
    f.update(KEYS)
    raw_redis.command("DEL", "bf")
    assert_lost(f)
    assert_lost(rf(flavor, clean_redis))


def test_deleting_the_meta_key_alone_loses_nothing(flavor, clean_redis, raw_redis):
    """The bits are all there: the answers stay right, and the next write puts the meta key
    back (until then, a new client finds a bitmap with no meta: KeyNotOwnedError)."""
    f = rf(flavor, clean_redis)
    f.update(KEYS)
    raw_redis.command("DEL", "{bf}:meta")
    assert all(f.test_many(KEYS))
    with pytest.raises(lb.KeyNotOwnedError):
        rf(flavor, clean_redis).test("x")
    f.add("one more")
    assert raw_redis.command("EXISTS", "{bf}:meta") == 1
    assert all(rf(flavor, clean_redis).test_many(KEYS))


def test_a_server_restarted_empty(flavor, private_redis):
    f = rf(flavor, private_redis)
    f.update(KEYS)
    private_redis.kill()
    private_redis.restart()  # empty: nothing is persisted
    assert_lost(f)
    with private_redis.client() as c:  # the client that knew it wrote nothing back
        assert c.command("EXISTS", "bf", "{bf}:meta") == 0
    f.reset()
    assert f.test_many(KEYS) == [False] * len(KEYS)
    assert f.add("a") is True and f.test("a") is True


def test_a_server_restarted_empty_before_anyone_wrote_again_looks_new(flavor, private_redis):
    """What cannot be told apart: a new process finding nothing at all at the key (never
    made, or lost before anyone wrote) makes the filter, as it always did; from then on it
    is a new filter for every client, the ones that knew the old one included."""
    f = rf(flavor, private_redis)
    f.update(KEYS)
    private_redis.kill()
    private_redis.restart()
    g = rf(flavor, private_redis)
    assert g.test_many(KEYS) == [False] * len(KEYS)
    assert g.add("a") is True
    assert f.test("a") is True and f.test_many(KEYS) == [False] * len(KEYS)


def test_an_evicted_filter_is_lost(redis_server_factory):
    srv = redis_server_factory()
    with srv.client() as c:
        c.command("CONFIG", "SET", "maxmemory-policy", "allkeys-random")
        with pytest.warns(lb.EvictionWarning, match="allkeys-random"):
            c.command("CONFIG", "SET", "maxmemory", "1gb")
            f = lb.RedisFilter("bf", 1_000_000, 0.01, url=srv.url)  # about 1.2 MB
            f.update(KEYS)
        used = int(c.command("INFO", "memory").decode().split("used_memory:")[1].split("\r")[0])
        c.command("CONFIG", "SET", "maxmemory", used - 600_000)  # the bitmap must go
        c.command("PING")  # evictions happen before a command runs
        c.command("CONFIG", "SET", "maxmemory", 0)
        assert c.command("EXISTS", "bf") == 0
    with pytest.raises(lb.FilterLostError):
        f.test_many(KEYS)
    f.close()


def test_one_lost_shard_of_a_sharded_filter(flavor, clean_redis, raw_redis):
    f = rf(flavor, clean_redis, shards=3)
    f.update(KEYS)
    shard1 = [n for n in f.key_names() if n.startswith(b"{bf:1}") and b":meta" not in n]
    assert shard1
    raw_redis.command("DEL", *shard1)
    with pytest.raises(lb.FilterLostError):
        f.test_many(KEYS)
    with pytest.raises(lb.FilterLostError):
        rf(flavor, clean_redis, shards=3).update(KEYS)
    f.reset()
    f.update(KEYS)
    assert all(f.test_many(KEYS))


@pytest.mark.parametrize("layout", ["standard", "blocked"])
def test_a_flush_between_two_commands_of_one_round_trip_is_seen(flavor, clean_redis,
                                                                 split_proxy, layout):
    """The canary is read after every bit of the round trip: read with the first key's
    bits, a flush run before the second key's command left "absent" for a key added and
    acknowledged, and nothing raised."""
    f = flavor.RedisFilter("bf", 2048, 0.01, url=split_proxy.url, layout=layout)
    f.update(["a", "b"])

    def flush():
        with clean_redis.client() as c:
            c.command("FLUSHALL")

    split_proxy.arm(b"GETRANGE" if layout == "blocked" else b"BITFIELD", flush)
    with pytest.raises(lb.FilterLostError):
        f.test_many(["a", "b"])
    assert split_proxy.fired.is_set()
    f.reset()
    f.update(["a", "b"])
    split_proxy.arm(b"BITFIELD", flush)
    with pytest.raises(lb.FilterLostError):  # the adds: the second went into what is left
        f.add_many(["c", "d"])
    assert split_proxy.fired.is_set()


def test_a_load_into_a_filter_lost_in_a_restart_is_not_whole_before_its_bits(flavor,
                                                                             private_redis):
    """The load that rebuilds a lost filter (the guard's) claims its meta key, and the
    canary comes with its last bits: set by the claim, every other process found the
    filter whole and empty while the load ran, and answered "absent" for every key."""
    proxy = SplitProxy(private_redis.port)
    try:
        f = flavor.RedisFilter("bf", m=1 << 16, k=7, url=proxy.url)
        f.update(KEYS)
        private_redis.kill()
        private_redis.restart()
        with pytest.raises(lb.FilterLostError):
            f.test(KEYS[0])  # how the guard learns of it (on a new connection)
        mem = lb.MemoryFilter(m=1 << 16, k=7)
        mem.update(KEYS)
        seen = []

        def other_process():
            g = lb.RedisFilter("bf", m=1 << 16, k=7, url=private_redis.url)
            try:
                seen.append(g.test_many(KEYS).count(False))
            except lb.FilterLostError:
                seen.append("lost")
            g.close()

        proxy.arm(b"SETRANGE", other_process, nth=0)  # the load's bits, held
        flavor.twin(f).load(mem)
        assert proxy.fired.is_set() and seen == ["lost"]
        assert all(f.test_many(KEYS)) and all(rf(flavor, private_redis, m=1 << 16, k=7)
                                              .test_many(KEYS))
    finally:
        proxy.close()


def test_a_flush_between_two_chunks_of_a_load_is_seen(flavor, clean_redis, split_proxy):
    """A load of over 8 MiB goes in chunks through a temporary key; a flush between two
    of them took the first away, and the canary set at the end made what was left whole
    (1993 of 2000 loaded keys absent, nothing raised)."""
    m = 1 << 27  # 16 MiB: two chunks
    mem = lb.MemoryFilter(m=m, k=7)
    mem.update(KEYS)
    f = flavor.RedisFilter("bf", m=m, k=7, url=split_proxy.url)
    f.add("x")

    def flush():
        with clean_redis.client() as c:
            c.command("FLUSHALL")

    split_proxy.arm(b"SETRANGE", flush, nth=1)
    with pytest.raises(lb.FilterLostError, match="load"):
        flavor.twin(f).load(mem)
    assert split_proxy.fired.is_set()
    with pytest.raises(lb.FilterLostError):
        rf(flavor, clean_redis, m=m, k=7).test_many(KEYS)
    flavor.twin(f).load(mem)  # again, undisturbed: whole
    assert all(f.test_many(KEYS)) and all(rf(flavor, clean_redis, m=m, k=7).test_many(KEYS))


@pytest.mark.cluster
def test_a_flushed_filter_on_a_cluster(flavor, cluster):
    f = flavor.RedisFilter("bf", 2000, 0.01, url=cluster_url(cluster))
    f.update(KEYS)
    for node in primaries(cluster):
        with node.client() as c:
            c.command("FLUSHALL")
    with pytest.raises(lb.FilterLostError):
        f.test_many(KEYS)
    with pytest.raises(lb.FilterLostError):
        f.add("x")
    f.reset()
    assert f.test_many(KEYS[:10]) == [False] * 10


# ---- what brings it back ----------------------------------------------------------------


def test_load_and_warmup_bring_it_back_whole(flavor, clean_redis, raw_redis):
    from ling_bloom.warmup import warmup

    f = rf(flavor, clean_redis)
    f.update(KEYS)
    snap = flavor.twin(f).snapshot()
    raw_redis.command("FLUSHALL")
    flavor.twin(f).load(snap)
    assert all(f.test_many(KEYS)) and f.add("after load") is True
    raw_redis.command("FLUSHALL")
    with pytest.raises(lb.FilterLostError):
        f.test("x")
    blocking = flavor.twin(f)
    warmup(blocking, KEYS, progress=False)  # resets the lost filter, then fills it
    assert all(f.test_many(KEYS)) and all(rf(flavor, clean_redis).test_many(KEYS))


def test_a_filter_with_a_ttl_is_empty_after_its_loss(flavor, clean_redis, raw_redis):
    f = rf(flavor, clean_redis, ttl=3600)
    f.update(KEYS)
    raw_redis.command("FLUSHALL")
    assert f.test_many(KEYS) == [False] * len(KEYS)
    assert f.add("a") is True and f.test("a") is True
    assert raw_redis.command("GET", "{bf}:meta").endswith(b"hash=xxh3-mix")  # no canary


def test_a_filter_of_the_previous_version_gets_its_canary(flavor, clean_redis, raw_redis):
    f = rf(flavor, clean_redis)
    f.update(KEYS)
    meta = raw_redis.command("GET", "{bf}:meta")
    assert meta.endswith(b";canary=1")
    # what the previous version left: its meta text, no canary
    raw_redis.command("SET", "{bf}:meta", meta[:-len(b";canary=1")])
    raw_redis.command("SETBIT", "bf", 8 * f.nbytes, 0)
    g = rf(flavor, clean_redis)
    assert all(g.test_many(KEYS))
    assert raw_redis.command("GET", "{bf}:meta") == meta
    assert raw_redis.command("GETBIT", "bf", 8 * f.nbytes) == 1
    raw_redis.command("DEL", "bf")
    with pytest.raises(lb.FilterLostError):
        g.test("x")


def test_an_earlier_versions_write_after_a_restart_is_no_upgrade_for_a_client_that_knew(
        flavor, private_redis):
    """A client that saw the canary field and, after a reconnect, finds a meta key without
    it: an earlier ling_bloom's write made the filter again after the loss. The upgrade
    took what was there as whole (300 of 300 keys absent, nothing raised)."""
    f = rf(flavor, private_redis)
    f.update(KEYS)
    with private_redis.client() as c:
        meta = c.command("GET", "{bf}:meta")
    private_redis.kill()
    private_redis.restart()
    with private_redis.client() as c:  # an earlier version's add, after the restart
        c.command("SET", "{bf}:meta", meta[:-len(b";canary=1")], "NX")
        c.command("SETBIT", "bf", 3, 1)
    with pytest.raises(lb.FilterLostError):
        f.test_many(KEYS)
    f.reset()  # what brings it back
    assert f.test_many(KEYS) == [False] * len(KEYS) and f.add("a") is True


# ---- RedisBloomFilter -------------------------------------------------------------------


def test_a_lost_redisbloom_filter(flavor, bf_server):
    with bf_server.client() as c:
        c.command("FLUSHALL")
        f = flavor.RedisBloomFilter("rb", 5000, 0.01, url=bf_server.url)
        f.update(KEYS)
        c.command("DEL", "rb")
        assert_lost(f, "rb")
        assert c.command("EXISTS", "rb") == 0  # a write does not make it again
        f.reset()
        assert f.test_many(KEYS) == [False] * len(KEYS)
        assert f.add("a") is True
        assert f.info().capacity == 5000
        c.command("FLUSHALL")


@pytest.mark.parametrize("shards", [None, 4])
def test_the_count_of_a_lost_redisbloom_filter_raises(flavor, bf_server, shards):
    """card() (len()) asks TYPE with BF.CARD once this client saw the filter: BF.CARD
    answers 0 for a missing key, so a flushed filter counted 0 items, nothing raised,
    while its tests raised FilterLostError.  A filter with a ttl counts 0 once gone.
    The asyncio filter's card() runs on a blocking twin, told what it saw."""
    kw = {"shards": shards} if shards else {}
    with bf_server.client() as c:
        c.command("FLUSHALL")
        f = flavor.RedisBloomFilter("rb", 5000, 0.01, url=bf_server.url, **kw)
        assert f.card() == 0                      # nothing seen yet: a missing key is 0
        f.update(KEYS)
        assert f.card() >= len(KEYS) * 0.9
        c.command("FLUSHALL")
        with pytest.raises(lb.FilterLostError):
            f.card()
        if not flavor.is_async:
            with pytest.raises(lb.FilterLostError):
                len(f)
        f.reset()
        assert f.card() == 0
        f.close()
        if not shards:
            g = flavor.RedisBloomFilter("rt", 5000, 0.01, url=bf_server.url, ttl=3600)
            g.update(KEYS)
            c.command("FLUSHALL")
            assert g.card() == 0
            g.close()


def test_a_sharded_count_with_shards_never_written_counts_them_0_until_the_written_one_is_lost(
        flavor, bf_server):
    with bf_server.client() as c:
        c.command("FLUSHALL")
        f = flavor.RedisBloomFilter("rb", 5000, 0.01, url=bf_server.url, shards=8)
        f.add("one")                              # one shard made, seven never
        assert f.card() == 1
        c.command("FLUSHALL")
        with pytest.raises(lb.FilterLostError):
            f.card()
        f.close()


@pytest.mark.parametrize("other", [("SET", "rb", "x"), ("LPUSH", "rb", "x"),
                                   ("SETBIT", "rb", 5, 1)])
def test_a_redisbloom_filter_replaced_by_a_key_of_another_type(flavor, bf_server, other):
    """A test asks TYPE with its answers: BF.EXISTS answers 0 on a key of another type,
    and EXISTS 1, so a filter replaced by a string or a list answered "absent" for every
    key it had, nothing raised (the type was confirmed once, on this connection)."""
    with bf_server.client() as c:
        c.command("FLUSHALL")
        f = flavor.RedisBloomFilter("rb", 5000, 0.01, url=bf_server.url)
        f.update(KEYS)
        assert all(f.test_many(KEYS))
        c.command("DEL", "rb")
        c.command(*other)
        for call in (lambda: f.test_many(KEYS), lambda: f.test(KEYS[0]), lambda: f.add("z"),
                     lambda: f.card()):       # a key of another type, not a lost filter
            with pytest.raises(lb.WrongTypeError):
                call()
        c.command("FLUSHALL")


def test_a_redisbloom_filter_with_a_ttl_is_made_again_by_a_write(flavor, bf_server):
    with bf_server.client() as c:
        c.command("FLUSHALL")
        f = flavor.RedisBloomFilter("rb", 5000, 0.01, url=bf_server.url, ttl=3600)
        f.update(KEYS)
        c.command("DEL", "rb")
        assert f.test("user:1") is False
        assert f.add("a") is True and f.info().capacity == 5000
        c.command("FLUSHALL")


# ---- the cost: no round trip more ----------------------------------------------------------


def test_a_test_and_an_add_are_still_one_command_each(clean_redis, raw_redis):
    with lb.RedisFilter("bf", 2000, 0.01, url=clean_redis.url) as f:
        f.add("warm")  # the check and the claim are done
        raw_redis.command("CONFIG", "RESETSTAT")
        f.test("a")
        f.add("b")
        f.test_many(["c", "d"])
        stats = commandstats(raw_redis)
        stats.pop("config|resetstat", None)
        stats.pop("info", None)
        # the canary rides in the last BITFIELD: no GETBIT, no extra round trip
        assert stats["bitfield"][0] == 4 and "getbit" not in stats, stats
        assert set(stats) == {"bitfield", "set"}, stats  # set: the meta key's SET NX


# ---- the warning -----------------------------------------------------------------------


@pytest.mark.parametrize("policy,ttl,warned", [
    ("allkeys-lru", None, True), ("allkeys-random", 60, True), ("volatile-lru", None, False),
    ("volatile-ttl", 60, True), ("noeviction", None, False)])
def test_a_policy_that_can_evict_the_filter_is_named_once(flavor, redis_server_factory,
                                                          policy, ttl, warned):
    srv = redis_server_factory()
    with srv.client() as c:
        c.command("CONFIG", "SET", "maxmemory-policy", policy)
        c.command("CONFIG", "SET", "maxmemory", "1gb")
    with warnings.catch_warnings(record=True) as got:
        warnings.simplefilter("always")
        f = rf(flavor, srv, ttl=ttl)
        f.add("a")
        f.test_many(["a", "b"])
        f.add("c")
    mine = [w for w in got if issubclass(w.category, lb.EvictionWarning)]
    assert len(mine) == (1 if warned else 0), [str(w.message) for w in got]
    if warned:
        assert policy in str(mine[0].message) and "'bf'" in str(mine[0].message)
    assert "EvictionWarning" in lb.__all__
    assert issubclass(lb.EvictionWarning, RuntimeWarning)


def test_no_maxmemory_no_warning(flavor, redis_server_factory):
    srv = redis_server_factory()
    with srv.client() as c:
        c.command("CONFIG", "SET", "maxmemory-policy", "allkeys-lru")  # maxmemory 0: no limit
    with warnings.catch_warnings():
        warnings.simplefilter("error", lb.EvictionWarning)
        rf(flavor, srv).add("a")


# ---- a meta key that is another program's -------------------------------------------------


def test_a_meta_key_holding_a_long_foreign_value_is_a_key_clash(clean_redis, raw_redis):
    raw_redis.command("SET", "{junk}:meta", b"x" * 5000)
    with pytest.raises(lb.GeometryMismatchError, match="junk.*not a ling_bloom geometry"):
        lb.RedisFilter.open(clean_redis.url, "junk")
    with lb.RedisFilter("junk", 1000, 0.01, url=clean_redis.url) as f:
        with pytest.raises(lb.GeometryMismatchError, match="256 bytes or more"):
            f.add("a")
        conns = int(raw_redis.command("INFO", "stats").decode()
                    .split("total_connections_received:")[1].split("\r")[0])
        with pytest.raises(lb.GeometryMismatchError):
            f.test("a")
        after = int(raw_redis.command("INFO", "stats").decode()
                    .split("total_connections_received:")[1].split("\r")[0])
        assert after == conns  # the filter kept its connection: no protocol error
    assert raw_redis.command("STRLEN", "{junk}:meta") == 5000



def test_a_reserved_redisbloom_filter_lost_before_any_add(flavor, bf_server):
    with bf_server.client() as c:
        c.command("FLUSHALL")
        f = flavor.RedisBloomFilter("rb", 5000, 0.01, url=bf_server.url)
        flavor.twin(f).reserve() if flavor.is_async else f.reserve()
        if flavor.is_async:
            f.add("seen")  # the async filter saw it with its first check
        c.command("DEL", "rb")
        with pytest.raises(lb.FilterLostError):
            f.add("a")
        assert c.command("EXISTS", "rb") == 0
