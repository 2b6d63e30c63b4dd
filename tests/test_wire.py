"""The wire against a misbehaving server (issue 10, "The wire"): a late reply, replies that
do not match what was sent, a reply header that announces more than any command can answer,
a BF.SCANDUMP that never ends, and what Python code can override in load().

The server is tests/hostile_server.py on 127.0.0.1: a script in front of the session's real
redis-server (RedisFilter) or a script alone (RedisBloomFilter's BF.* replies, as the module
words them).
"""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
import time

import pytest

import ling_bloom as lb
from hostile_server import HostileServer, array, bulk, integer, wait_until

OK = b"+OK\r\n"
HERE = os.path.dirname(os.path.abspath(__file__))


def rf(srv, key="bf", **kw):
    kw.setdefault("socket_timeout", 10)
    return lb.RedisFilter.from_url(srv.url, key, 1000, 0.01, **kw)


def settle(srv, n=1):
    """Wait until the server wrote n late replies, and a moment for loopback to carry them."""
    assert wait_until(lambda: srv.late_sent >= n)
    time.sleep(0.05)


# ------------------------------------------------------------------ 7: a late reply


@pytest.mark.parametrize("mode", ["setbit", "bitfield"])
def test_late_reply_is_not_taken_as_the_next_answer(clean_redis, mode):
    first = {"done": False}

    def script(c, args):
        name = args[0].upper()
        if name in (b"SETBIT", b"BITFIELD") and not first["done"]:
            first["done"] = True
            reply = c.forward(args)
            # the same reply once more, 50 ms later, nobody asked for it
            late = integer(0) if name == b"SETBIT" else reply.replace(b":1\r\n", b":0\r\n")
            c.send_later(late, 0.05)
            return reply
        return None

    with HostileServer(script, upstream_port=clean_redis.port) as srv:
        with rf(srv, mode=mode) as f:
            f.add("x")
            settle(srv)
            assert f.test("x")          # not the late ":0"
            assert srv.connections == 2  # the connection with input pending was dropped
            assert f.test_many(["x"] * 5) == [True] * 5
            assert srv.connections == 2


def test_late_reply_redisbloom_never_added_key_stays_absent():
    sent = {"late": False}

    def script(c, args):
        name = args[0].upper()
        if name == b"BF.INFO":
            return b"-ERR not found\r\n"
        if name == b"INFO":
            return b"$8\r\n# Memory\r\n"
        if name == b"BF.INSERT":
            if not sent["late"]:
                sent["late"] = True
                c.send_later(b"*1\r\n" + integer(1), 0.05)
            return b"*1\r\n" + integer(1)
        if name == b"BF.EXISTS":
            return integer(0)
        if name == b"TYPE":
            return b"+MBbloom--\r\n"
        return b"-ERR unexpected\r\n"

    with HostileServer(script) as srv:
        with lb.RedisBloomFilter("k", url=srv.url, socket_timeout=10) as f:
            assert f.add("a")
            settle(srv)
            assert f.test("never") is False  # not the late ":1"
            assert srv.connections == 2
            assert f.add("b")  # a write after the discard checks the key on the new connection
            assert srv.names(1)[-3:] == ["BF.INFO", "INFO", "BF.INSERT"]


def test_late_reply_before_a_write_rechecks_the_meta_key(clean_redis):
    # the discarded connection is replaced by one whose meta key is checked again before
    # the write goes out (a server that came back empty could have been claimed meanwhile)
    first = {"done": False}

    def script(c, args):
        if args[0].upper() == b"BITFIELD" and not first["done"]:
            first["done"] = True
            c.send_later(b"*1\r\n:0\r\n", 0.05)
        return None

    with HostileServer(script, upstream_port=clean_redis.port) as srv:
        with rf(srv) as f:
            f.add("x")
            settle(srv)
            f.add("y")
            assert srv.connections == 2
            assert srv.names(1)[:3] == ["GET", "TYPE", "INFO"]  # the meta check first
            assert f.test_many(["x", "y"]) == [True, True]
