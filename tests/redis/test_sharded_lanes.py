"""A sharded filter's batch runs its shards' round trips on the calling thread, at once
(one poll over their sockets, csrc/redis/lanes.h), and a shard that fails mid-batch ends
alone: the call raises its error, the other shards keep what they did."""
from __future__ import annotations

import os
import shutil
import threading
import time

import pytest

import ling_bloom as lb
from hostile_server import HostileServer
from tls_certs import make_certs, server_args

pytestmark = pytest.mark.redis

SHARDS = 4
KEYS = [f"key:{i}" for i in range(400)]


def wait_for(cond, what, timeout=30.0):
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"gave up waiting for {what}")
        time.sleep(0.01)


def tasks():
    return set(os.listdir("/proc/self/task"))


def test_a_sharded_batch_starts_no_thread(clean_redis):
    gate = threading.Event()
    paused = []
    lock = threading.Lock()
    hold = {"on": False}

    def script(c, args):
        if hold["on"]:
            with lock:
                paused.append(c.index)
            gate.wait(60)
        return None

    with HostileServer(script, upstream_port=clean_redis.port) as srv:
        with lb.RedisFilter.from_url(srv.url, "k", 10_000, 0.01, shards=SHARDS,
                                     socket_timeout=60) as f:
            f.add_many(KEYS[:100])  # every shard connected: the server's threads exist
            assert srv.connections == SHARDS
            before = tasks()
            hold["on"] = True
            out = {}
            caller = threading.Thread(target=lambda: out.setdefault("r", f.add_many(KEYS)))
            caller.start()
            try:
                # every shard's batch is out and held by the server: the call is in C now
                wait_for(lambda: len(set(paused)) == SHARDS, "every shard's batch")
                started = tasks() - before - {str(caller.native_id)}
            finally:
                gate.set()
                caller.join(60)
            assert started == set()
            assert out["r"] == [False] * 100 + [True] * 300
            assert f.test_many(KEYS) == [True] * len(KEYS)


def test_a_shard_failing_mid_batch_fails_the_call_and_the_others_keep_their_keys(clean_redis):
    # every command on shard 1's keys has its connection closed by the server; the
    # other shards' round trips go on at the same time and succeed
    def script(c, args):
        if any(b"{k:1}" in a for a in args[1:]):
            c.close()
            return b""
        return None

    with HostileServer(script, upstream_port=clean_redis.port) as srv:
        with lb.RedisFilter.from_url(srv.url, "k", 10_000, 0.01, shards=SHARDS,
                                     socket_timeout=10) as f:
            with pytest.raises(lb.RedisConnectionError, match="closed"):
                f.add_many(KEYS)
    with lb.RedisFilter.from_url(clean_redis.url, "k", 10_000, 0.01, shards=SHARDS) as g:
        present = g.test_many(KEYS)
    # shard 1's keys were never written, the others' were
    assert 0 < sum(present) < len(KEYS)
    assert sum(present) > len(KEYS) // 2


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    if shutil.which("openssl") is None:
        pytest.skip("no openssl command")
    return make_certs(str(tmp_path_factory.mktemp("tls")))


@pytest.mark.servers
def test_sharded_batches_over_tls_answer_every_key(redis_server_factory, certs):
    # every shard's lane on a TLS session at once, replies of many TLS records each
    srv = redis_server_factory(server_args(certs, "server", False), tls=True)
    keys = [f"tls:{i}" for i in range(20_000)]
    with lb.RedisFilter.from_url(srv.url, "k", 100_000, 0.01, shards=SHARDS,
                                 ssl_ca_certs=certs["ca"], socket_timeout=5) as f:
        assert f.add_many(keys) == [True] * len(keys)
        assert f.test_many(keys) == [True] * len(keys)
        assert sum(f.test_many([f"other:{i}" for i in range(5000)])) < 200
        assert len(f) > 0
