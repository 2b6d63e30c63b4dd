"""The wire against a misbehaving server: a late reply, replies that
do not match what was sent, a reply header that announces more than any command can answer,
a BF.SCANDUMP that never ends, and what Python code can override in load().

The server is tests/support/hostile_server.py on 127.0.0.1: a script in front of the session's real
redis-server (RedisFilter) or a script alone (RedisBloomFilter's BF.* replies, as the module
words them).
"""
from __future__ import annotations

import re
import subprocess
import sys
import textwrap
import threading

import pytest

import ling_bloom as lb
from hostile_server import HostileServer, array, bulk, integer, wait_until

OK = b"+OK\r\n"


def rf(srv, key="bf", **kw):
    kw.setdefault("socket_timeout", 10)
    return lb.RedisFilter.from_url(srv.url, key, 1000, 0.01, **kw)


# ------------------------------------------------------------------ 7: a late reply


def send_late(srv, data, index=0):
    """A reply nobody asked for: written on client connection `index` by the test itself,
    after the call it made returned (so it can only follow that call's replies), and
    waited for until it is in the client's socket."""
    srv.send_to(index, data)
    assert wait_until(lambda: srv.unread_by_client(index) >= len(data)), "never delivered"


@pytest.mark.parametrize("mode", ["setbit", "bitfield"])
def test_late_reply_is_not_taken_as_the_next_answer(clean_redis, mode):
    with HostileServer(lambda c, args: None, upstream_port=clean_redis.port) as srv:
        with rf(srv, mode=mode) as f:
            f.add("x")
            # the answer of one more SETBIT / BITFIELD: a bit (or the bits) that were 0
            send_late(srv, integer(0) if mode == "setbit" else array(*[integer(0)] * f.k))
            assert f.test("x")          # not the late ":0"
            assert srv.connections == 2  # the connection with input pending was dropped
            assert f.test_many(["x"] * 5) == [True] * 5
            assert srv.connections == 2


def test_late_reply_redisbloom_never_added_key_stays_absent():
    def script(c, args):
        name = args[0].upper()
        if name == b"BF.INFO":
            return b"-ERR not found\r\n"
        if name == b"INFO":
            return b"$8\r\n# Memory\r\n"
        if name == b"BF.INSERT":
            return b"*1\r\n" + integer(1)
        if name == b"BF.EXISTS":
            return integer(0)
        if name == b"TYPE":
            return b"+MBbloom--\r\n"
        if name == b"EXISTS":  # asked with every test once the filter was seen
            return integer(1)
        return b"-ERR unexpected\r\n"

    with HostileServer(script) as srv:
        with lb.RedisBloomFilter("k", url=srv.url, socket_timeout=10) as f:
            assert f.add("a")
            send_late(srv, b"*1\r\n" + integer(1))
            assert f.test("never") is False  # not the late ":1"
            assert srv.connections == 2
            assert f.add("b")  # a write after the discard checks the key on the new connection
            assert srv.names(1)[-3:] == ["BF.INFO", "INFO", "BF.INSERT"]


def test_late_reply_before_a_write_rechecks_the_meta_key(clean_redis):
    # the discarded connection is replaced by one whose meta key is checked again before
    # the write goes out (a server that came back empty could have been claimed meanwhile)
    with HostileServer(lambda c, args: None, upstream_port=clean_redis.port) as srv:
        with rf(srv) as f:
            f.add("x")
            send_late(srv, array(*[integer(0)] * f.k))
            f.add("y")
            assert srv.connections == 2
            assert srv.names(1)[:4] == ["EXISTS", "GETRANGE", "TYPE", "INFO"]  # the meta check first
            assert f.test_many(["x", "y"]) == [True, True]


# --------------------------------------- 9: a reply header announcing a huge array

_HUGE_CLIENT = textwrap.dedent(r"""
    import resource, sys
    maps = open("/proc/self/maps").read()
    asan = "libasan" in maps or "libclang_rt.asan" in maps  # gcc's or clang's runtime
    if not asan:  # the code before the fix would touch 16 GiB: never let it near that
        resource.setrlimit(resource.RLIMIT_AS, (3 << 30, 3 << 30))
    import ling_bloom as lb
    url, mode = sys.argv[1], sys.argv[2]
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    if mode == "bf":
        f = lb.RedisBloomFilter("k", url=url, socket_timeout=5)
        call = lambda: f.test_many(["a", "b", "c"])
    elif mode == "dump":
        f = lb.RedisBloomFilter("k", url=url, socket_timeout=5)
        call = f.dump
    else:
        f = lb.RedisFilter.from_url(url, "bf", 1000, 0.01, socket_timeout=5)
        call = lambda: f.test("x")
    try:
        call()
        print("no error")
    except BaseException as e:
        grew = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
        print(type(e).__name__, isinstance(e, lb.RedisError), grew // 1024, "|", e)
""")


@pytest.mark.parametrize("header", [b"*2147483647\r\n", b"*50000000\r\n"])
@pytest.mark.parametrize("mode", ["bitfield", "bf"])
def test_huge_array_header_allocates_nothing(clean_redis, header, mode):
    def script(c, args):
        name = args[0].upper()
        if name in (b"BITFIELD", b"BF.MEXISTS"):
            return header + b":1\r\n:1\r\n"  # and then nothing: the rest never comes
        if mode == "bf":
            return b"+MBbloom--\r\n" if name == b"TYPE" else OK
        return None

    with HostileServer(script, upstream_port=clean_redis.port) as srv:
        out = subprocess.run([sys.executable, "-c", _HUGE_CLIENT, srv.url, mode],
                             capture_output=True, text=True, timeout=120)
    line = out.stdout.strip()
    assert out.returncode == 0, out.stderr
    name, is_redis_error, grew_mib, _, msg = line.split(" ", 4)
    # a protocol error at once: not MemoryError, not a timeout waiting for the elements
    assert name not in ("MemoryError", "RedisTimeoutError", "RedisConnectionError"), line
    assert is_redis_error == "True", line
    want = "more than the command can answer"
    assert want in msg, line
    assert int(grew_mib) < 64, line  # nothing was allocated for the announced length


# ------------------------------------- 8: replies checked against what was sent


def _replace(name, reply, once=True):
    """A script that answers the first (or every) command `name` with `reply`."""
    state = {"n": 0}

    def script(c, args):
        if args[0].upper() == name and (not once or state["n"] == 0):
            state["n"] += 1
            return reply(args) if callable(reply) else reply
        return None

    return script


def _bits(n, v):
    return array(*[integer(v)] * n)


@pytest.mark.parametrize("name,reply,call", [
    # test() of a never-added key must not become True
    (b"BITFIELD", b"*0\r\n", "test"),                               # no element at all
    (b"BITFIELD", lambda a: _bits(len(a[2:]) // 3, 7), "test"),      # u1 values of 7
    (b"BITFIELD", lambda a: _bits(len(a[2:]) // 3, -1), "test"),     # ... and -1
    (b"BITFIELD", lambda a: _bits(len(a[2:]) // 3 - 1, 1), "test"),  # one GET short
    (b"BITFIELD", lambda a: _bits(len(a[2:]) // 3 + 1, 1), "test"),  # one too many
    (b"BITFIELD", lambda a: array(*[bulk(b"1")] * (len(a[2:]) // 3)), "test"),  # strings
    (b"GETBIT", integer(7), "test_setbit"),
    (b"GETBIT", integer(-1), "test_setbit"),
    (b"GETBIT", bulk(b"1"), "test_setbit"),
    # add() must not report a key as present (or new) on a bad answer
    (b"BITFIELD", lambda a: _bits(len(a[2:]) // 4, 2), "add"),
    (b"SETBIT", integer(5), "add_setbit"),
    (b"PEXPIRE", b"+OK\r\n", "add_ttl"),
    (b"PEXPIRE", integer(2), "add_ttl"),
    # counts beyond the bits there are
    (b"BITCOUNT", integer(10**9), "bits_set"),
    (b"BITCOUNT", integer(-3), "bits_set"),
    # the meta key's SET NX: +OK or nil, nothing else
    (b"SET", integer(1), "test"),
    (b"SET", b"+QUEUED\r\n", "test"),
    (b"SET", integer(1), "test_ttl"),  # a claim without the canary's SETBIT

])
def test_reply_that_does_not_fit_is_a_protocol_error(clean_redis, name, reply, call):
    with HostileServer(_replace(name, reply), upstream_port=clean_redis.port) as srv:
        kw = {}
        if call.endswith("_setbit"):
            kw["mode"] = "setbit"
        if call.endswith("_ttl"):
            kw["ttl"] = 60
        with rf(srv, **kw) as f:
            op = call.split("_")[0]
            fn = {"test": lambda: f.test("never-added"), "add": lambda: f.add("k1"),
                  "bits": lambda: f.bits_set()}[op]
            with pytest.raises(lb.RedisProtocolError) as ei:
                fn()
            assert "protocol error" in str(ei.value)
            assert isinstance(ei.value, lb.RedisError)
            # the connection was dropped; the next call is answered on a new one
            conns = srv.connections
            assert f.test("never-added") is False
            assert srv.connections == conns + 1


@pytest.mark.parametrize("reply", [integer(-3), bulk(b"1000"), b"+OK\r\n",
                                   array(integer(1)), b"$-1\r\n"])
def test_pttl_reply_that_does_not_fit_is_a_protocol_error(clean_redis, reply):
    # remaining_ttl(): PTTL answers an integer >= -2, nothing else
    with HostileServer(_replace(b"PTTL", reply), upstream_port=clean_redis.port) as srv:
        with rf(srv) as f:
            with pytest.raises(lb.RedisProtocolError, match="protocol error"):
                f.remaining_ttl()
            conns = srv.connections
            assert f.remaining_ttl() is None  # on a new connection, the real answer
            assert srv.connections == conns + 1


def test_bitcount_counts_only_the_filter_bytes(clean_redis):
    # another writer appended bytes past the filter: they do not count (BITCOUNT 0 last)
    with rf(clean_redis, key="bc") as f:
        f.add("a")
        n = f.bits_set()
        with clean_redis.client() as c:
            c.command("SETRANGE", "bc", (f.m + 7) // 8 + 10, b"\xff" * 8)
        assert f.bits_set() == n


def _bf_script(**over):
    base = {b"BF.RESERVE": OK, b"BF.EXISTS": integer(0), b"EXISTS": integer(1),
            b"BF.INSERT": lambda a: array(*[integer(1)] * (len(a) - a.index(b"ITEMS") - 1)),
            b"INFO": bulk(b"# Memory\r\nused_memory:1000\r\nmaxmemory:0\r\n"),
            b"BF.MADD": lambda a: array(*[integer(1)] * (len(a) - 2)),
            b"BF.MEXISTS": lambda a: array(*[integer(0)] * (len(a) - 2)),
            b"TYPE": b"+MBbloom--\r\n", b"PEXPIRE": integer(1), b"DEL": integer(1),
            b"BF.INFO": (b"*10\r\n+Capacity\r\n:1000\r\n+Size\r\n:2080\r\n+Number of filters\r\n"
                         b":1\r\n+Number of items inserted\r\n:3\r\n+Expansion rate\r\n:2\r\n"),
            b"BF.CARD": integer(3)}
    bad = {k.replace("_", ".").upper().encode(): v for k, v in over.items()}
    state = {"bad_done": set()}

    def script(c, args):
        name = args[0].upper()
        if name in bad and name not in state["bad_done"]:
            state["bad_done"].add(name)
            r = bad[name]
        else:
            r = base.get(name, b"-ERR unknown command\r\n")
        return r(args) if callable(r) else r

    return script


@pytest.mark.parametrize("over,call", [
    ({"BF_INFO": b"-ERR not found\r\n", "BF_RESERVE": b"+QUEUED\r\n"}, "reserve"),
    ({"BF_INFO": b"-ERR not found\r\n", "BF_RESERVE": integer(1)}, "reserve"),
    ({"PEXPIRE": b"+OK\r\n"}, "add_ttl"),
    ({"PEXPIRE": integer(7)}, "add_ttl"),
    ({"BF_INSERT": array(integer(7))}, "add"),
    ({"BF_INSERT": integer(1)}, "add"),  # not the array of one answer per item
    ({"BF_EXISTS": integer(-1)}, "test"),
    ({"BF_MEXISTS": lambda a: array(*[integer(2)] * (len(a) - 2))}, "test_many"),
    ({"BF_MEXISTS": lambda a: array(*[integer(0)] * (len(a) - 3))}, "test_many"),
    ({"DEL": b"+OK\r\n"}, "reset"),
    ({"DEL": integer(5)}, "reset"),
    ({"BF_INFO": (b"*10\r\n+Capacity\r\n:0\r\n+Size\r\n:2080\r\n+Number of filters\r\n"
                  b":1\r\n+Number of items inserted\r\n:3\r\n+Expansion rate\r\n:2\r\n")}, "info"),
    ({"BF_INFO": (b"*10\r\n+Capacity\r\n:1000\r\n+Size\r\n:2080\r\n+Number of filters\r\n"
                  b":0\r\n+Number of items inserted\r\n:3\r\n+Expansion rate\r\n:2\r\n")}, "info"),
    ({"BF_CARD": integer(-2)}, "card"),
])
def test_redisbloom_reply_that_does_not_fit_is_a_protocol_error(over, call):
    with HostileServer(_bf_script(**over)) as srv:
        kw = {"ttl": 60} if call.endswith("_ttl") else {}
        with lb.RedisBloomFilter("k", url=srv.url, socket_timeout=10, **kw) as f:
            fn = {"add": lambda: f.add("a"), "test": lambda: f.test("a"),
                  "test_many": lambda: f.test_many(["a", "b", "c"]), "reset": f.reset,
                  "info": f.info, "card": f.card, "reserve": f.reserve}[call.split("_ttl")[0]]
            with pytest.raises(lb.RedisProtocolError):
                fn()
            conns = srv.connections
            assert f.test("a") is False
            assert srv.connections == conns + 1


# ---------------------------------------- 10: a BF.SCANDUMP that never ends

_INFO = (b"*10\r\n+Capacity\r\n:1000\r\n+Size\r\n:2080\r\n+Number of filters\r\n:1\r\n"
         b"+Number of items inserted\r\n:3\r\n+Expansion rate\r\n:2\r\n")


def _scandump_server(step):
    """BF.SCANDUMP answered by step(iterator) -> (next iterator, chunk bytes)."""
    def script(c, args):
        name = args[0].upper()
        if name == b"TYPE":
            return b"+MBbloom--\r\n"
        if name == b"BF.INFO":
            return _INFO
        if name == b"BF.SCANDUMP":
            nxt, data = step(int(args[2]))
            return array(integer(nxt), bulk(data))
        return b"-ERR unexpected\r\n"

    return HostileServer(script)


def _run_bounded(fn, watchdog=30.0):
    """fn() in a thread; (finished, exception).  The watchdog only turns a hang into a
    failure (generous: a bounded dump ends in well under a second)."""
    out = {}

    def run():
        try:
            out["value"] = fn()
        except BaseException as e:  # noqa: BLE001 - reported to the test
            out["error"] = e

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(watchdog)
    return not t.is_alive(), out.get("error")


@pytest.mark.parametrize("kind,step", [
    ("iter+1", lambda it: (it + 1, b"x" * 4096)),
    ("iter+1, empty chunks", lambda it: (it + 1, b"")),
    ("1,2,1,2", lambda it: (1 if it != 1 else 2, b"y" * 100)),
    ("the same iterator", lambda it: (max(it, 1), b"z")),
])
def test_scandump_that_never_ends_is_bounded(kind, step):
    with _scandump_server(step) as srv:
        f = lb.RedisBloomFilter("k", url=srv.url, socket_timeout=10)
        finished, err = _run_bounded(f.dump)
        assert finished, f"dump() still running against a server answering {kind}"
        assert isinstance(err, lb.RedisProtocolError), repr(err)
        assert "BF.SCANDUMP" in str(err)
        f.close()


def test_close_does_not_wait_forever_behind_a_dump():
    with _scandump_server(lambda it: (it + 1, b"x" * 1024)) as srv:
        f = lb.RedisBloomFilter("k", url=srv.url, socket_timeout=10)
        t = threading.Thread(target=lambda: pytest.raises(lb.RedisError, f.dump), daemon=True)
        t.start()
        assert wait_until(lambda: "BF.SCANDUMP" in srv.names())
        finished, err = _run_bounded(f.close)
        assert finished and err is None, repr(err)
        t.join(30)
        assert not t.is_alive()
        assert f.closed


def test_dump_within_the_bounds_is_whole():
    chunks = {0: (1, b"header"), 1: (7, b"a" * 1000), 7: (1007, b"b" * 500), 1007: (0, b"")}
    with _scandump_server(lambda it: chunks[it]) as srv:
        with lb.RedisBloomFilter("k", url=srv.url, socket_timeout=10) as f:
            assert f.dump() == [(1, b"header"), (7, b"a" * 1000), (1007, b"b" * 500)]


# ------------------------------ 11: what Python code can override in load/snapshot


class _Liar(lb.MemoryFilter):
    """A MemoryFilter whose to_bitmap() answers something else."""

    answer = None

    def to_bitmap(self):
        return self.answer(self) if callable(self.answer) else self.answer


@pytest.mark.parametrize("answer", [
    lambda self: bytearray(lb.MemoryFilter.to_bitmap(self)),  # right size, but resizable
    lambda self: bytearray(1),                                 # short: heap memory after it
    lambda self: b"\xff" * ((self.m + 7) // 8),                # bytes, all bits set
    lambda self: b"",
    "not bytes",
    None,
])
def test_load_takes_the_filters_own_bits(clean_redis, answer):
    with rf(clean_redis, key="ld") as f:
        mf = _Liar(m=f.m, k=f.k)
        mf.answer = answer
        mf.update([f"u{i}" for i in range(50)])
        f.load(mf)
        # exactly the filter's bits went to Redis: not the subclass's answer
        assert f.snapshot().to_bitmap() == lb.MemoryFilter.to_bitmap(mf)
        assert f.test_many([f"u{i}" for i in range(50)]) == [True] * 50


@pytest.fixture
def patched_memory_filter():
    saved = {n: lb.MemoryFilter.__dict__[n] for n in ("to_bitmap", "from_bitmap")}
    try:
        yield lb.MemoryFilter
    finally:
        for n, v in saved.items():
            setattr(lb.MemoryFilter, n, v)


@pytest.mark.parametrize("answer", [bytearray(4), b"\x00", "x", 1])
def test_load_with_to_bitmap_replaced_on_the_type(clean_redis, patched_memory_filter, answer):
    with rf(clean_redis, key="lt") as f:
        mf = lb.MemoryFilter(m=f.m, k=f.k)
        mf.add("a")
        patched_memory_filter.to_bitmap = lambda self: answer
        with pytest.raises(TypeError):
            f.load(mf)


def test_snapshot_with_from_bitmap_replaced_on_the_type(clean_redis, patched_memory_filter):
    with lb.RedisFilter.from_url(clean_redis.url, "sn", 1000, 0.01) as f:  # has a capacity
        f.add("a")
        patched_memory_filter.from_bitmap = classmethod(lambda cls, *a: object())
        with pytest.raises(TypeError):
            f.snapshot()


@pytest.mark.parametrize("mode", ["meta", "dump"])
def test_huge_bulk_reply_is_cut_off_at_what_the_command_can_answer(clean_redis, mode):
    # a bulk header of 1 GB, then data streaming in: the client must stop reading at the
    # bytes its command can answer (the meta key's value; the dump's bound from BF.INFO),
    # not buffer 100 MB waiting for the rest
    def stream(c):
        c.send(b"$1000000000\r\n")
        piece = b"x" * 65536
        for _ in range(1600):  # 100 MiB, unless the client hangs up first
            try:
                c.sock.sendall(piece)
            except OSError:
                break
        return b""

    def script(c, args):
        name = args[0].upper()
        if mode == "meta":
            return stream(c) if name == b"GETRANGE" else None
        if name == b"BF.SCANDUMP":
            return stream(c)
        return {b"TYPE": b"+MBbloom--\r\n", b"BF.INFO": _INFO}.get(name, OK)

    with HostileServer(script, upstream_port=clean_redis.port) as srv:
        out = subprocess.run([sys.executable, "-c", _HUGE_CLIENT, srv.url, mode],
                             capture_output=True, text=True, timeout=120)
    line = out.stdout.strip()
    assert out.returncode == 0, out.stderr
    name, is_redis_error, grew_mib, _, msg = line.split(" ", 4)
    assert name == "RedisProtocolError", line
    assert "more reply bytes than the commands sent can answer" in msg, line
    assert int(grew_mib) < 64, line


@pytest.mark.parametrize("name,reply", [(b"AUTH", integer(1)), (b"AUTH", b"+QUEUED\r\n"),
                                        (b"SELECT", bulk(b"OK"))])
def test_handshake_replies_must_be_ok(clean_redis, name, reply):
    def script(c, args):
        if args[0].upper() == name:
            return reply
        if args[0].upper() in (b"AUTH", b"SELECT"):
            return OK
        return None

    with HostileServer(script, upstream_port=clean_redis.port) as srv:
        url = f"redis://:secret@127.0.0.1:{srv.port}/3"
        with lb.RedisFilter.from_url(url, "hs", 1000, 0.01, socket_timeout=10) as f:
            with pytest.raises(lb.RedisProtocolError) as ei:
                f.test("a")
            assert name.decode() in str(ei.value)


def test_scandump_bounds_from_a_lying_info_stay_finite():
    # BF.INFO claiming 10**18 sub-filters of capacity 1 (non-scaling): computing the
    # bounds must not loop over them; the dump still ends
    info = (b"*10\r\n+Capacity\r\n:1\r\n+Size\r\n:1\r\n+Number of filters\r\n"
            b":1000000000000000000\r\n+Number of items inserted\r\n:1\r\n+Expansion rate\r\n$-1\r\n")

    def script(c, args):
        name = args[0].upper()
        if name == b"TYPE":
            return b"+MBbloom--\r\n"
        if name == b"BF.INFO":
            return info
        if name == b"BF.SCANDUMP":
            it = int(args[2])
            return array(integer(0 if it == 5 else it + 1), bulk(b"" if it == 5 else b"c"))
        return b"-ERR unexpected\r\n"

    with HostileServer(script) as srv:
        f = lb.RedisBloomFilter("k", url=srv.url, socket_timeout=10)
        finished, err = _run_bounded(f.dump)
        assert finished and err is None, repr(err)
        f.close()


@pytest.mark.parametrize("when", ["handshake", "command"])
def test_a_server_that_closes_mid_round_trip_is_named_alike_in_both_flavors(
        clean_redis, flavor, when):
    # The connection closed by the server before its replies: the blocking filter says how
    # many of them it read; the asyncio filter said only "closed by the server".
    def script(c, args):
        name = args[0].upper()
        if (when == "handshake" and name == b"AUTH") or \
                (when == "command" and name in (b"EXISTS", b"GETRANGE", b"BITFIELD_RO",
                                                b"BITFIELD", b"SETBIT", b"GET", b"MGET")):
            c.close()
            return b""
        return None

    with HostileServer(script, upstream_port=clean_redis.port) as srv:
        url = srv.url.replace("redis://", "redis://:pw@") if when == "handshake" else srv.url
        with flavor.RedisFilter.from_url(url, "bf", 1000, 0.01, socket_timeout=10) as f:
            with pytest.raises(lb.RedisConnectionError) as e:
                f.test("a")
    assert re.fullmatch(rf"connection to Redis at 127\.0\.0\.1:{srv.port} closed by the "
                        r"server \(0 of [1-9]\d* replies read\)", str(e.value)), str(e.value)


@pytest.mark.parametrize("when", ["handshake", "command"])
def test_a_server_that_stops_answering_times_out_alike_in_both_flavors(
        clean_redis, flavor, when):
    # No byte for socket_timeout: the blocking filter says how many replies it read; the
    # asyncio filter said only "did not answer within 300 ms".
    answered = threading.Event()

    def script(c, args):
        name = args[0].upper()
        if (when == "handshake" and name == b"AUTH") or \
                (when == "command" and name in (b"EXISTS", b"GETRANGE", b"BITFIELD_RO",
                                                b"BITFIELD", b"SETBIT", b"GET", b"MGET")):
            answered.wait(10)  # held until the test is over: the client times out
            return b""
        return None

    with HostileServer(script, upstream_port=clean_redis.port) as srv:
        url = srv.url.replace("redis://", "redis://:pw@") if when == "handshake" else srv.url
        try:
            with flavor.RedisFilter.from_url(url, "bf", 1000, 0.01, socket_timeout=0.3) as f:
                with pytest.raises(lb.RedisTimeoutError) as e:
                    f.test("a")
        finally:
            answered.set()
    assert re.fullmatch(rf"timeout: Redis at 127\.0\.0\.1:{srv.port} did not answer within "
                        r"300 ms \(0 of [1-9]\d* replies read\)", str(e.value)), str(e.value)


def test_a_bitmap_key_made_a_list_during_the_claim_is_the_key_named(clean_redis, flavor):
    # Another client makes the bitmap key a list between the filter's look (TYPE: none) and
    # its claim (SET meta NX, SETBIT of the canary on the bitmap, the meta read back): the
    # SETBIT's WRONGTYPE named the meta key, which holds this filter's meta.
    made = []

    def script(c, args):
        if args[0].upper() == b"SETBIT" and args[1] == b"bf" and not made:
            made.append(1)
            c.forward([b"LPUSH", b"bf", b"x"])
        return None

    with HostileServer(script, upstream_port=clean_redis.port) as srv:
        with flavor.RedisFilter.from_url(srv.url, "bf", 1000, 0.01, socket_timeout=10) as f:
            with pytest.raises(lb.WrongTypeError) as e:
                f.add("a")
    assert made
    assert e.value.key == "bf" and str(e.value).endswith("(key 'bf')"), str(e.value)


def test_a_server_that_refuses_a_new_client_says_why_in_both_flavors(flavor):
    # A server with no room for another client writes its error on the new connection and
    # closes it, before any request (Redis at its maxclients).  Both filters read the
    # error as the first reply and say it with the close; the asyncio filter took it as
    # input nobody asked for ("lost before the request was sent"), and neither said what
    # the server answered.
    import socket

    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(8)
    port = srv.getsockname()[1]
    conns = []

    def drain(c):  # what the client sends is read (a close with unread input resets)
        try:
            while c.recv(65536):
                pass
        except OSError:  # closed by the test
            pass

    def serve():
        while True:
            try:
                c, _ = srv.accept()
            except OSError:
                return
            conns.append(c)
            c.sendall(b"-ERR max number of clients reached\r\n")
            c.shutdown(socket.SHUT_WR)  # the end, after the error
            threading.Thread(target=drain, args=(c,), daemon=True).start()

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    try:
        with flavor.RedisFilter.from_url(f"redis://127.0.0.1:{port}", "bf", 1000, 0.01,
                                         socket_timeout=10) as f:
            with pytest.raises(lb.RedisConnectionError) as e:
                f.add("a")
    finally:
        srv.shutdown(socket.SHUT_RDWR)  # wakes the accept
        srv.close()
        for c in conns:
            c.close()
        t.join(5)
    assert re.fullmatch(rf"connection to Redis at 127\.0\.0\.1:{port} closed by the server "
                        r"\(1 of [1-9]\d* replies read; it answered: ERR max number of "
                        r"clients reached\)", str(e.value)), str(e.value)


def test_a_connection_reset_mid_round_trip_is_named_alike_in_both_flavors(clean_redis, flavor):
    # The server resets the connection (RST) instead of answering: the blocking filter
    # says the system's reason; the asyncio filter said Python's ("[Errno 104] ...").
    import os
    import socket
    import struct

    def script(c, args):
        if args[0].upper() in (b"EXISTS", b"GETRANGE", b"BITFIELD_RO", b"BITFIELD",
                               b"SETBIT", b"GET", b"MGET"):
            c.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            os.close(c.sock.detach())  # with a linger of 0: a reset (its reader fails)
            return b""
        return None

    with HostileServer(script, upstream_port=clean_redis.port) as srv:
        with flavor.RedisFilter.from_url(srv.url, "bf", 1000, 0.01, socket_timeout=10) as f:
            with pytest.raises(lb.RedisConnectionError) as e:
                f.test("a")
    assert str(e.value) == (f"connection to Redis at 127.0.0.1:{srv.port} lost: Connection "
                            f"reset by peer"), str(e.value)
