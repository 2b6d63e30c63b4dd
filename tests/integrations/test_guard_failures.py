"""The guard when its filter's backend fails: the on_filter_error policy ("open", "closed",
"raise"), the circuit breaker (one failed call per interval, not one per lookup), the log
(once per interval), the counters and Prometheus series; against a scripted failing filter
and against a real redis-server that is down, hung (SIGSTOP) and restarted."""
from __future__ import annotations

import asyncio
import gc
import logging
import signal
import threading
import time
import warnings

import pytest

import ling_bloom as lb
from ling_bloom.guard import Guard, MemoryCache

from hang_guard import FakeClock, until

RedisFilter = lb.RedisFilter


class FlakyFilter:
    """A filter whose backend can be switched off: test/add raise RedisConnectionError."""

    def __init__(self, keys=()):
        self.inner = lb.MemoryFilter(1000, 0.01)
        self.inner.update(list(keys))
        self.down = False
        self.tests = 0
        self.error_rate = 0.01

    def test(self, key):
        self.tests += 1
        if self.down:
            raise lb.RedisConnectionError("connection refused (scripted)")
        return self.inner.test(key)

    def add(self, key):
        if self.down:
            raise lb.RedisConnectionError("connection refused (scripted)")
        return self.inner.add(key)


ROWS = {"1": "one", "2": "two"}


def make_guard(policy="open", breaker=5.0, keys=("1", "2"), **kw):
    loads = []

    def load(key):
        loads.append(key)
        return ROWS.get(key)

    f = FlakyFilter(keys)
    g = Guard(f, MemoryCache(), load, on_filter_error=policy, breaker_seconds=breaker,
              metrics=False, name=f"t-{policy}", **kw)
    return g, f, loads


def test_default_policy_is_open():
    g, f, loads = make_guard()
    assert g.on_filter_error == "open"
    f.down = True
    assert g.get("1") == "one"  # served from the loader, as if there were no filter
    assert g.get("3") is None   # not in the database: the loader says so
    assert loads == ["1", "3"]
    st = g.stats()
    assert (st.filter_errors, st.bypassed, st.lookups) == (1, 2, 2)
    # decided by the policy, not the filter: not an observed false positive
    assert st.not_found == 0 and st.found == 0 and st.false_positive_rate is None
    assert st.circuit_open


def test_closed_policy_rejects_and_never_calls_the_loader():
    g, f, loads = make_guard("closed")
    f.down = True
    assert g.get("1", default="nope") == "nope"
    assert g.check("2") is False
    assert loads == []
    st = g.stats()
    assert st.bypassed == 2 and st.rejected == 0  # a rejection by policy is not the filter's


def test_raise_policy_propagates():
    g, f, loads = make_guard("raise")
    f.down = True
    with pytest.raises(lb.RedisConnectionError):
        g.get("1")
    assert loads == [] and g.stats().filter_errors == 1


def test_bad_policy_and_breaker():
    f = FlakyFilter()
    with pytest.raises(ValueError, match="on_filter_error"):
        Guard(f, on_filter_error="sometimes", metrics=False)
    for bad in (-1, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="breaker_seconds"):
            Guard(f, breaker_seconds=bad, metrics=False)


def test_the_breaker_asks_a_dead_backend_once_per_interval():
    g, f, loads = make_guard(breaker=0.3)
    g._breaker.clock = clock = FakeClock()
    f.down = True
    for _ in range(200):
        g.get("1")
    assert f.tests == 1  # one failed call; the other 199 lookups did not wait on the backend
    assert g.stats().bypassed == 200
    clock.advance(0.4)
    g.get("1")
    assert f.tests == 2  # half-open: one lookup tried again, failed, circuit open again
    f.down = False
    clock.advance(0.4)
    assert g.get("1") == "one" and f.tests == 3
    st = g.stats()
    assert not st.circuit_open and st.circuit_open_seconds >= 0.7
    assert g.get("3") is None  # the filter answers again: a rejection, and counted as one
    assert g.stats().rejected == 1


def test_breaker_zero_asks_every_time():
    g, f, _ = make_guard(breaker=0)
    f.down = True
    for _ in range(20):
        g.get("1")
    assert f.tests == 20 and g.stats().filter_errors == 20
    assert not g.stats().circuit_open


def test_half_open_lets_one_caller_probe():
    """While one lookup retries a hung backend, the others do not pile up behind it."""
    release = threading.Event()
    entered = threading.Event()

    class Hung(FlakyFilter):
        def test(self, key):
            self.tests += 1
            if self.down:
                entered.set()
                release.wait(10)
                raise lb.RedisTimeoutError("timed out (scripted)")
            return super().test(key)

    f = Hung(["1"])
    g = Guard(f, MemoryCache(), ROWS.get, breaker_seconds=0.05, metrics=False)
    g._breaker.clock = clock = FakeClock()
    f.down = True
    release.set()
    g.get("1")            # fails: circuit open
    release.clear()
    clock.advance(0.1)    # interval over: the next lookup probes
    t = threading.Thread(target=g.get, args=("1",))
    t.start()
    assert entered.wait(10)
    for _ in range(50):   # meanwhile: decided by the policy at once
        assert g.get("1") == "one"
    assert f.tests == 2
    release.set()
    t.join(10)
    assert not t.is_alive()


def test_the_failure_is_logged_once_per_interval(caplog):
    g, f, _ = make_guard(breaker=0)  # no breaker: every lookup fails, the log still does not flood
    f.down = True
    with caplog.at_level(logging.WARNING, logger="ling_bloom.guard"):
        for _ in range(100):
            g.get("1")
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert "failing open" in warnings[0].getMessage()
    assert "RedisConnectionError" in warnings[0].getMessage()


def test_a_failing_add_after_a_load_still_serves_the_value():
    """The filter answered "maybe", the loader found the row, then adding its key failed:
    the value is served; the error is counted."""
    g, f, loads = make_guard(keys=("1", "2", "5"))
    ROWS["5"] = "five"
    try:
        real_add = f.add

        def failing_add(key):
            raise lb.RedisTimeoutError("timed out (scripted)")

        f.add = failing_add
        assert g.get("5") == "five"
        assert g.stats().filter_errors == 1 and g.stats().bypassed == 0
        assert g.stats().circuit_open
        # while the circuit is open, a lookup let through does not try the add again
        f.add = real_add
        f.down = True
        assert g.get("5") == "five"
        assert g.stats().filter_errors == 1
    finally:
        del ROWS["5"]


def test_bypassed_lookups_do_not_set_off_the_drift_warning(caplog):
    g, f, _ = make_guard(breaker=0, drift_min_samples=10)
    f.down = True
    with caplog.at_level(logging.WARNING, logger="ling_bloom.guard"):
        for i in range(100):
            g.get(f"absent:{i}")  # let through by the policy, not found
    assert g.stats().not_found == 0
    assert not [r for r in caplog.records if "above the filter's promise" in r.getMessage()]


def test_prometheus_series():
    prometheus_client = pytest.importorskip("prometheus_client")
    reg = prometheus_client.CollectorRegistry()
    f = FlakyFilter(["1"])
    g = Guard(f, MemoryCache(), ROWS.get, name="prom", metrics=reg, breaker_seconds=5)
    f.down = True
    for _ in range(3):
        g.get("1")

    def value(name, **labels):
        return reg.get_sample_value(name, {"guard": "prom", **labels})

    assert value("ling_bloom_guard_filter_errors_total") == 1
    assert value("ling_bloom_guard_bypassed_total", policy="open") == 3
    assert value("ling_bloom_guard_circuit_open") == 1
    assert value("ling_bloom_guard_circuit_open_seconds_total") >= 0


# ---- a real redis-server: down, hung, restarted --------------------------------------------


@pytest.mark.parametrize("policy", ["open", "closed"])
def test_real_redis_down_hung_restarted(redis_server_factory, policy):
    srv = redis_server_factory()
    f = RedisFilter.from_url(srv.url, "bf:rows", 1000, 0.01, socket_timeout=0.5,
                             socket_connect_timeout=0.5)
    f.update(["1", "2"])
    loads = []

    def load(key):
        loads.append(key)
        return ROWS.get(key)

    g = Guard(f, MemoryCache(), load, on_filter_error=policy, breaker_seconds=0.5,
              metrics=False, null_ttl=0, value_ttl=0)
    g._breaker.clock = clock = FakeClock()
    assert g.get("1") == "one" and g.get("3") is None and loads == ["1"]

    expect = "one" if policy == "open" else None
    # hung: the server stops answering; one lookup waits out the timeout, then the circuit
    # is open and the next lookups are decided at once
    srv.proc.send_signal(signal.SIGSTOP)
    try:
        assert g.get("1") == expect
        for _ in range(20):
            assert g.get("1") == expect
        assert g.stats().filter_errors == 1
    finally:
        srv.proc.send_signal(signal.SIGCONT)
    # down: the process is gone
    srv.kill()
    clock.advance(0.6)
    assert g.get("1") == expect
    assert g.stats().filter_errors == 2
    # restarted (empty: what the filter held is gone; the warm-up's job)
    srv.restart()
    f.update(["1", "2"])  # a warm-up; the filter reconnects
    clock.advance(0.6)
    assert g.get("1") == "one"
    assert g.get("3") is None
    st = g.stats()
    assert not st.circuit_open
    assert st.rejected == 2  # before the outage and after it: the filter decides again
    f.close()


# ---- the middleware take the same policy ---------------------------------------------------


@pytest.mark.parametrize("options,status", [(None, 200), ({"on_filter_error": "closed"}, 404)])
def test_flask_policy(options, status):
    flask = pytest.importorskip("flask")
    from ling_bloom.contrib.flask import BloomGuard

    app = flask.Flask(__name__)
    if options:
        app.config["LING_BLOOM_GUARD_OPTIONS"] = options
    f = FlakyFilter(["1"])
    bloom = BloomGuard(app, filters={"rows": f}, metrics=False)

    @app.get("/rows/<key>")
    @bloom.guard("key", filter="rows")
    def row(key):
        return {"row": ROWS.get(key)}

    f.down = True
    assert app.test_client().get("/rows/1").status_code == status
    assert bloom.get_guard("rows").stats().filter_errors == 1


@pytest.mark.parametrize("options,status", [(None, 200), ({"on_filter_error": "closed"}, 404)])
def test_asgi_policy(options, status):
    pytest.importorskip("starlette")
    try:
        import httpx2  # noqa: F401
    except ImportError:
        pytest.importorskip("httpx")
    from starlette.applications import Starlette
    from starlette.responses import JSONResponse
    from starlette.routing import Route
    from starlette.testclient import TestClient

    from ling_bloom.contrib.asgi import BloomGuardMiddleware

    async def row(request):
        return JSONResponse({"row": ROWS.get(request.path_params["key"])})

    f = FlakyFilter(["1"])
    app = BloomGuardMiddleware(Starlette(routes=[Route("/rows/{key}", row)]),
                               routes={"/rows/{key}": "key"}, filter=f, metrics=False,
                               guard_options=options)
    f.down = True
    with TestClient(app) as client:
        assert client.get("/rows/1").status_code == status
    assert app.get_guard().stats().filter_errors == 1


# ---- the event loop never waits on a hung filter backend -----------------------------------


async def asgi_get(app, path):
    """One GET through an ASGI app, called directly in this loop; returns the status."""
    sent = []

    async def receive():
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message):
        sent.append(message)

    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1",
             "method": "GET", "scheme": "http", "path": path, "raw_path": path.encode(),
             "root_path": "", "query_string": b"", "headers": [],
             "client": ("127.0.0.1", 1), "server": ("127.0.0.1", 80)}
    await app(scope, receive, send)
    return next(m["status"] for m in sent if m["type"] == "http.response.start")


def hung_redis_app(filter):
    pytest.importorskip("starlette")
    from starlette.applications import Starlette
    from starlette.responses import JSONResponse, PlainTextResponse
    from starlette.routing import Route

    from ling_bloom.contrib.asgi import BloomGuardMiddleware

    async def row(request):
        return JSONResponse({"row": ROWS.get(request.path_params["key"])})

    async def health(request):
        return PlainTextResponse("ok")

    return BloomGuardMiddleware(
        Starlette(routes=[Route("/rows/{key}", row), Route("/health", health)]),
        routes={"/rows/{key}": "key"}, filter=filter, metrics=False)


def run_while_redis_hangs(srv, app, timeout):
    """A guarded request waits on a SIGSTOPped redis-server; meanwhile /health answers,
    while the guarded request is still waiting (a loop blocked by the hung call could serve
    /health only after that call's timeout had ended it).  Returns the guarded request's
    final status, once the server goes on."""

    async def main():
        srv.pause()
        try:
            hung = asyncio.ensure_future(asgi_get(app, "/rows/1"))
            await until(srv.unread_input, "the request to reach the hung server")
            assert not hung.done()  # it waits on the hung server
            assert await asyncio.wait_for(asgi_get(app, "/health"), timeout) == 200
            assert not hung.done()  # still waiting: the loop did not wait with it
        finally:
            srv.resume()
        return await asyncio.wait_for(hung, timeout + 10)

    return asyncio.run(main())


def test_a_hung_blocking_redis_filter_does_not_block_the_asgi_loop(redis_server_factory):
    """A blocking RedisFilter behind the ASGI middleware runs in a thread: while Redis hangs,
    an unrelated endpoint answers while the hung call still waits on its 5 s timeout."""
    srv = redis_server_factory()
    f = RedisFilter.from_url(srv.url, "bf:rows", 1000, 0.01, socket_timeout=5)
    f.add("1")
    status = run_while_redis_hangs(srv, hung_redis_app(f), timeout=5)
    assert status == 200  # the server came back and answered the guarded request
    f.close()


def test_a_hung_async_redis_filter_does_not_block_the_asgi_loop(redis_server_factory):
    """The same with an AsyncRedisFilter: awaited, on the loop's own sockets."""
    srv = redis_server_factory()
    f = lb.AsyncRedisFilter.from_url(srv.url, "bf:rows", 1000, 0.01, socket_timeout=5)
    asyncio.run(f.add("1"))
    status = run_while_redis_hangs(srv, hung_redis_app(f), timeout=5)
    assert status == 200


def test_async_redis_filter_down_follows_the_policy(redis_server_factory):
    srv = redis_server_factory()
    f = lb.AsyncRedisFilter.from_url(srv.url, "bf:rows", 1000, 0.01, socket_timeout=1,
                                     socket_connect_timeout=1)
    app = hung_redis_app(f)

    async def main():
        await f.add("1")
        assert await asgi_get(app, "/rows/1") == 200
        assert await asgi_get(app, "/rows/3") == 404  # the filter says no
        srv.kill()
        assert await asgi_get(app, "/rows/3") == 200  # fail open: the endpoint decides
        guard = app.get_guard()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            st = guard.stats()
            gc.collect()
        assert not [w for w in caught if "never awaited" in str(w.message)]
        assert st.filter_errors == 1 and st.bypassed == 1 and st.circuit_open
        # an async filter's current_error_rate() is a coroutine: stats() (synchronous)
        # does not ask it
        assert st.estimated_error_rate is None and st.error_rate == 0.01
        srv.restart()
        await f.add("1")

    asyncio.run(main())


def test_a_cancelled_lookup_does_not_keep_the_circuit_open():
    """The half-open circuit lets one lookup probe the backend; if that lookup is cancelled
    (the client went away), the next one probes instead of the circuit staying shut."""
    from ling_bloom.guard import AsyncGuard

    gate = None

    class SlowFilter(FlakyFilter):
        async def test(self, key):  # an async backend that hangs while the gate is shut
            self.tests += 1
            if self.down:
                raise lb.RedisConnectionError("connection refused (scripted)")
            await gate.wait()
            return self.inner.test(key)

    f = SlowFilter(["1"])
    g = AsyncGuard(f, MemoryCache(), lambda k: ROWS.get(k), breaker_seconds=0.05,
                   metrics=False, on_filter_error="closed", name="t-cancel")
    g._breaker.clock = clock = FakeClock()

    async def main():
        nonlocal gate
        gate = asyncio.Event()
        f.down = True
        assert await g.acheck("1") is False  # the failure opens the circuit
        f.down = False
        clock.advance(0.1)
        probe = asyncio.ensure_future(g.acheck("1"))  # half-open: this one probes
        await until(lambda: f.tests == 2, "the probe to reach the filter")
        probe.cancel()
        with pytest.raises(asyncio.CancelledError):
            await probe
        gate.set()
        assert await g.acheck("1") is True  # the next lookup probes, and closes it
        assert not g.stats().circuit_open

    asyncio.run(main())
