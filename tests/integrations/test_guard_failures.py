"""The guard when its filter's backend fails: the on_filter_error policy ("open", "closed",
"raise"), the circuit breaker (one failed call per interval, not one per lookup), the log
(once per interval), the counters and Prometheus series; against a scripted failing filter
and against a real redis-server that is down, hung (SIGSTOP) and restarted."""
from __future__ import annotations

import asyncio
import gc
import logging
import os
import signal
import threading
import time
import warnings

import pytest

import ling_bloom as lb
from ling_bloom.guard import Guard, MemoryCache, refill
from lost_filters import AsyncLostFilter, LostFilter, MismatchedFilter, wait_for

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
    from ling_bloom.warmup import warmup

    warmup(f, ["1", "2"], progress=False)  # the filter reconnects, finds it lost, rebuilds it
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
        with pytest.raises(lb.FilterLostError):  # gone with the server: not made again by a write
            await f.add("1")
        await f.reset()
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


# ---- a lost filter: "cannot say", whatever the policy ---------------------------------------


def lost_guard(policy="open", rebuild=None, keys=("1", "2"), **kw):
    loads = []

    def load(key):
        loads.append(key)
        return ROWS.get(key)

    f = LostFilter(keys)
    g = Guard(f, MemoryCache(), load, on_filter_error=policy, metrics=False,
              name=f"lost-{policy}", rebuild=rebuild, null_ttl=0, **kw)
    return g, f, loads


@pytest.mark.parametrize("policy", ["open", "closed", "raise"])
def test_a_lost_filter_lets_every_lookup_through_whatever_the_policy(policy):
    g, f, loads = lost_guard(policy)
    assert g.get("3") is None and loads == []    # before: the filter rejects the absent row
    f.lose()
    assert g.get("1") == "one"     # an existing row is served, never a 404 or an error
    assert g.get("9") is None      # the database answers for the absent one
    assert g.check("2") is True
    st = g.stats()
    assert st.filter_lost and st.filter_losses == 1 and st.lost_lookups == 3
    # not evidence about the filter, and not a backend failure
    assert (st.not_found, st.found, st.filter_errors, st.bypassed) == (0, 0, 0, 0)
    assert not st.circuit_open


def test_a_lost_filter_is_logged_once_per_loss(caplog):
    g, f, _ = lost_guard()
    with caplog.at_level(logging.INFO, logger="ling_bloom.guard"):
        f.lose()
        for i in range(50):
            g.check(str(i))
        assert len([r for r in caplog.records if "gone from its server" in r.getMessage()
                    and r.levelno == logging.WARNING]) == 1
        f.reset()                       # someone else rebuilt it (a warm-up, reset())
        f.inner.update(["1", "2"])
        assert g.check("1") is True and g.check("no such row") is False  # it decides again
        assert not g.stats().filter_lost
        f.lose()                        # a new loss is a new line
        g.check("1")
        g.check("1")
    lost = [r for r in caplog.records if "gone from its server" in r.getMessage()]
    assert len(lost) == 2
    assert any("answers again" in r.getMessage() for r in caplog.records)
    assert g.stats().filter_losses == 2


def test_a_lost_filter_is_rebuilt_once_in_the_background_then_used_again():
    release = threading.Event()
    calls = []

    def rebuild(flt):
        calls.append(threading.current_thread().name)
        flt.reset()
        flt.update(["1", "2"])
        assert release.wait(10)

    g, f, loads = lost_guard("closed", rebuild=rebuild)
    f.lose()
    assert g.get("1") == "one"                 # the loss: logged, the rebuild started
    wait_for(lambda: calls, "the rebuild to start")
    asked = f.tests
    for _ in range(20):                        # meanwhile: not asked (it is half filled)
        assert g.check("1") is True and g.check("absent") is True
    assert f.tests == asked
    assert g.stats().rebuilding and g.stats().filter_lost
    g.add("5")                                 # a row saved while it runs: kept for after
    release.set()
    wait_for(lambda: g.stats().rebuilds == 1, "the rebuild to end")
    st = g.stats()
    assert not st.filter_lost and not st.rebuilding
    assert len(calls) == 1 and calls[0] != threading.current_thread().name
    assert g.check("5") is True and g.check("1") is True
    assert g.check("absent") is False          # the filter decides again


def test_a_failed_rebuild_is_logged_and_lookups_keep_passing(caplog):
    def rebuild(flt):
        raise RuntimeError("the database is down too")

    g, f, _ = lost_guard(rebuild=rebuild)
    f.lose()
    with caplog.at_level(logging.WARNING, logger="ling_bloom.guard"):
        assert g.check("1") is True
        wait_for(lambda: g.stats().rebuild_failures == 1, "the rebuild to fail")
        for _ in range(10):                    # retried later, not at every lookup
            assert g.check("1") is True
    assert g.stats().rebuild_failures == 1 and g.stats().filter_lost
    assert any("rebuilding the lost filter failed" in r.getMessage()
               and "database is down too" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize("policy", ["open", "closed", "raise"])
def test_a_rebuild_that_fails_mid_way_never_turns_an_existing_row_away(policy, monkeypatch):
    """refill() resets the filter, then adds the source's rows: a source that fails mid-way
    leaves the filter back on its server, answering, but without the rows it never reached.
    Asked, it turned every one of them into a 404; the guard does not ask it until a
    rebuild of it is done, and the next rebuild (after the retry delay) is started by a
    lookup, since the filter itself raises nothing any more."""
    import ling_bloom._breaker as breaker

    rows = [str(i) for i in range(40)]
    fail = [True]

    def source():
        for i, k in enumerate(rows):
            if fail[0] and i == 10:
                raise RuntimeError("the database connection dropped mid-way")
            yield k

    monkeypatch.setattr(breaker, "REBUILD_RETRY_SECONDS", 0.0)  # retried at once
    g, f, loads = lost_guard(policy, rebuild=lambda flt: refill(flt, source(), batch_size=4),
                             keys=rows)
    g.loader = {k: f"row {k}" for k in rows}.get
    f.lose()
    assert g.get("39") == "row 39"
    wait_for(lambda: g.stats().rebuild_failures >= 1, "the rebuild to fail")
    assert f.resets >= 1 and not f.lost          # reset, and part of the rows added
    assert [k for k in rows if g.get(k) is None] == []   # no row turned away
    assert g.stats().filter_lost and g.stats().rebuilds == 0
    # a lookup after the retry delay starts the next rebuild (the filter raises nothing
    # any more); once one is done the filter decides again
    fail[0] = False
    def looked_up_then_rebuilt():
        g.check("no such row")          # a lookup: starts a rebuild, none being under way
        return g.stats().rebuilds == 1  # (the lookup's own answer depends on the race)

    wait_for(looked_up_then_rebuilt, "a rebuild to be done")
    assert [k for k in rows if g.get(k) is None] == []
    assert g.check("no such row") is False and not g.stats().filter_lost


def test_a_failed_rebuild_keeps_every_guard_of_the_filter_from_asking_it():
    """Two guards of one filter: when the first one's rebuild fails mid-way, the second
    (which rebuilds nothing itself) does not ask the half-filled filter either."""
    def rebuild(flt):
        flt.reset()
        flt.update(["1"])
        raise RuntimeError("the source failed after one row")

    f = LostFilter(["1", "2", "3"])
    a = Guard(f, None, ROWS.get, rebuild=rebuild, metrics=False, name="a", null_ttl=0)
    b = Guard(f, None, ROWS.get, metrics=False, name="b", null_ttl=0)
    f.lose()
    assert a.check("2") is True
    wait_for(lambda: a.stats().rebuild_failures == 1, "the rebuild to fail")
    assert not f.lost and not f.inner.test("2")   # back, without row 2
    assert b.check("2") is True and a.check("2") is True
    assert b.stats().filter_lost


class GatedLostFilter(LostFilter):
    """A LostFilter whose next call of ``method`` is held (after it saw the filter lost)
    until ``release`` is set: a request of a storm whose answer comes after the rebuild."""

    def __init__(self, keys, method):
        super().__init__(keys)
        self.method = method
        self.held = threading.Event()
        self.release = threading.Event()

    def _gate(self, name):
        lost = self.lost
        if name == self.method and not self.held.is_set():
            self.held.set()
            assert self.release.wait(10)
        if lost:
            raise lb.FilterLostError("the filter at 'bf:rows' is gone (scripted)")

    def test(self, key):
        self.tests += 1
        self._gate("test")
        return self.inner.test(key)

    def add(self, key):
        self._gate("add")
        return self.inner.add(key)


def test_a_lookup_that_saw_the_loss_answered_after_the_rebuild_is_no_new_loss(caplog):
    """A storm of lookups: one of them asked the lost filter before the rebuild and hears
    back after it is done.  Its FilterLostError is the loss that is over: it was logged a
    second time and started a second rebuild (a second reset of the filter)."""
    rebuilds = []

    def rebuild(flt):
        rebuilds.append(1)
        refill(flt, ["1", "2"])

    f = GatedLostFilter(["1", "2"], "test")
    g = Guard(f, None, ROWS.get, rebuild=rebuild, metrics=False, name="storm", null_ttl=0)
    f.lose()
    slow = threading.Thread(target=g.check, args=("1",))
    with caplog.at_level(logging.WARNING, logger="ling_bloom.guard"):
        slow.start()
        assert f.held.wait(10)                  # asked the lost filter; its answer is late
        assert g.check("2") is True             # the loss: logged, the rebuild started
        wait_for(lambda: g.stats().rebuilds == 1, "the rebuild to end")
        f.release.set()
        slow.join(10)
    assert g.check("absent") is False           # the rebuilt filter decides
    st = g.stats()
    assert (st.filter_losses, st.rebuilds, len(rebuilds), f.resets) == (1, 1, 1, 1)
    assert not st.filter_lost
    assert len([r for r in caplog.records if "gone from its server" in r.getMessage()]) == 1


def test_an_add_refused_before_the_rebuild_ended_is_added_to_the_rebuilt_filter():
    """A row saved while the filter is lost: its add is refused (FilterLostError), but the
    answer comes after the rebuild, which read the source before the row was there.  The
    key was dropped (no rebuild to hand it to any more): the row was a 404 from then on."""
    f = GatedLostFilter(["1", "2"], "add")
    g = Guard(f, None, ROWS.get, rebuild=lambda flt: refill(flt, ["1", "2"]), metrics=False,
              name="late-add", null_ttl=0)
    f.lose()
    adder = threading.Thread(target=g.add, args=("7",))
    adder.start()
    assert f.held.wait(10)                      # the add asked the lost filter
    assert g.check("1") is True                 # the loss: the rebuild starts
    wait_for(lambda: g.stats().rebuilds == 1, "the rebuild to end")
    f.release.set()
    adder.join(10)
    assert f.inner.test("7") and g.check("7") is True


def test_async_guard_late_answers_of_a_lost_filter_are_no_new_loss_and_lose_no_add():
    """The AsyncGuard's storm: a lookup and an add asked the lost filter, and hear back
    after the rebuild (a task of the loop) is done.  The lookup was a second loss (a second
    rebuild); the add was dropped, its row missing from the rebuilt filter."""
    from ling_bloom.guard import AsyncGuard, arefill

    class Gated(AsyncLostFilter):
        def __init__(self, keys):
            super().__init__(keys)
            self.release = asyncio.Event()
            self.held = 0

        async def _gate(self):
            lost = self.lost
            if self.held < 2:
                self.held += 1
                await self.release.wait()
            if lost:
                raise lb.FilterLostError("the filter at 'bf:rows' is gone (scripted)")

        async def test(self, key):
            await self._gate()
            return self.inner.test(key)

        async def add(self, key):
            await self._gate()
            return self.inner.add(key)

    async def main():
        rebuilds = []

        async def rebuild(flt):
            rebuilds.append(1)
            await arefill(flt, ["1", "2"])

        async def load(k):
            return ROWS.get(k)

        f = Gated(["1", "2"])
        g = AsyncGuard(f, None, load, rebuild=rebuild, metrics=False, name="alate",
                       null_ttl=0)
        f.lose()
        late = [asyncio.ensure_future(g.acheck("1")), asyncio.ensure_future(g.add("7"))]
        await until(lambda: f.held == 2, "both late calls held")
        assert await g.acheck("2") is True          # the loss: the rebuild task starts
        await until(lambda: g.stats().rebuilds == 1, "the rebuild to end")
        f.release.set()
        await asyncio.gather(*late)
        st = g.stats()
        assert (st.filter_losses, st.rebuilds, len(rebuilds)) == (1, 1, 1)
        assert f.inner.test("7") and await g.acheck("7") is True

    asyncio.run(main())


def test_adds_past_the_kept_ones_during_a_rebuild_are_said_when_it_is_done(
        caplog, monkeypatch):
    """The keys added while a rebuild runs are kept up to PENDING_ADDS_MAX; past it they
    are dropped.  A rebuild that then succeeded said only "lookups use it again", the
    dropped rows silently rejected until the next warm-up."""
    import ling_bloom._breaker as breaker

    monkeypatch.setattr(breaker, "PENDING_ADDS_MAX", 2)
    release = threading.Event()

    def rebuild(flt):
        flt.reset()
        flt.update(["1", "2"])
        assert release.wait(10)

    g, f, _ = lost_guard(rebuild=rebuild)
    f.lose()
    g.check("1")
    wait_for(lambda: g.stats().rebuilding, "the rebuild to start")
    for k in ("5", "6", "7", "8", "9"):
        g.add(k)
    with caplog.at_level(logging.WARNING, logger="ling_bloom.guard"):
        release.set()
        wait_for(lambda: g.stats().rebuilds == 1, "the rebuild to end")
    assert f.inner.test("5") and f.inner.test("6")   # the kept ones are added
    said = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any("3 keys added while the filter was rebuilt" in m and "next warm-up" in m
               for m in said), said


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_child_forked_during_a_rebuild_asks_its_filter_again():
    """A process forked while a rebuild runs in one of its threads: the thread is not in
    the child, so the rebuild never ended there, and the child's guards never asked their
    filter again (every lookup unfiltered, every add kept for nobody)."""
    release = threading.Event()

    def rebuild(flt):
        assert release.wait(10)
        refill(flt, ["1", "2"])

    g, f, _ = lost_guard(rebuild=rebuild)
    f.lose()
    g.check("1")
    wait_for(lambda: g.stats().rebuilding, "the rebuild to start")
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: its filter is rebuilt by someone else, then asked
        try:
            f.reset()
            f.update(["1", "2"])
            asked = f.tests
            answer = g.check("absent")
            os.write(w, f"{g.stats().rebuilding} {f.tests - asked} {answer}".encode())
        finally:
            os._exit(0)
    os.close(w)
    with os.fdopen(r) as pipe:
        said = pipe.read()
    os.waitpid(pid, 0)
    release.set()
    wait_for(lambda: g.stats().rebuilds == 1, "the parent's rebuild to end")
    assert said == "False 1 False"


@pytest.mark.parametrize("policy", ["open", "closed", "raise"])
def test_adds_to_a_lost_filter_do_not_fail(policy):
    g, f, _ = lost_guard(policy)
    f.lose()
    g.add("7")                                 # a new row: saved, the add is counted
    assert g.get("2") == "two"                 # found by a lookup: its add is skipped
    assert g.stats().lost_adds == 1 and g.stats().filter_losses == 1


def test_lost_filter_prometheus_series():
    prometheus_client = pytest.importorskip("prometheus_client")
    reg = prometheus_client.CollectorRegistry()
    f = LostFilter(["1"])
    g = Guard(f, MemoryCache(), ROWS.get, name="prom-lost", metrics=reg)
    f.lose()
    for _ in range(3):
        g.get("1")
    g.add("4")

    def value(name, **labels):
        return reg.get_sample_value(name, {"guard": "prom-lost", **labels})

    assert value("ling_bloom_guard_filter_losses_total") == 1
    assert value("ling_bloom_guard_lost_lookups_total") == 3
    assert value("ling_bloom_guard_lost_adds_total") == 1
    assert value("ling_bloom_guard_filter_lost") == 1
    assert value("ling_bloom_guard_rebuilds_total", result="done") == 0


def test_async_guard_a_lost_filter_passes_and_is_rebuilt_on_the_loop():
    from ling_bloom.guard import AsyncGuard, arefill

    async def main():
        release = asyncio.Event()
        started = []

        async def keys():
            started.append(1)
            await release.wait()        # the loop is free meanwhile
            for k in ("1", "2"):
                yield k

        async def rebuild(flt):
            await arefill(flt, keys())

        f = AsyncLostFilter(["1", "2"])
        g = AsyncGuard(f, MemoryCache(), ROWS.get, on_filter_error="raise", metrics=False,
                       name="async-lost", rebuild=rebuild, null_ttl=0)
        f.lose()
        assert await g.get("1") == "one"
        await until(lambda: started, "the rebuild to start")
        assert g.stats().rebuilding
        asked = f.tests
        assert await g.acheck("absent") is True and f.tests == asked
        await g.add("5")                         # kept for after the rebuild
        release.set()
        await until(lambda: g.stats().rebuilds, "the rebuild to end")
        st = g.stats()
        assert st.rebuilds == 1 and not st.filter_lost and f.resets == 1
        assert await g.acheck("5") and await g.acheck("1")
        assert await g.acheck("absent") is False
        assert st.filter_losses == 1

    asyncio.run(main())


# ---- a stored filter of another geometry: a configuration error ----------------------------


@pytest.mark.parametrize("policy,expect", [("open", "one"), ("closed", None)])
def test_a_geometry_mismatch_follows_the_policy_and_is_logged_once(caplog, policy, expect):
    g = Guard(MismatchedFilter(), MemoryCache(), ROWS.get, on_filter_error=policy,
              metrics=False, name=f"geom-{policy}")
    with caplog.at_level(logging.WARNING, logger="ling_bloom.guard"):
        for _ in range(5):
            assert g.get("1") == expect      # under "open": never a 500
        g.add("3")                           # a save does not fail either
    logged = [r for r in caplog.records if "another geometry" in r.getMessage()]
    assert len(logged) == 1 and "new key" in logged[0].getMessage()
    assert "'bf:rows:v2'" in logged[0].getMessage()
    st = g.stats()
    assert st.geometry_mismatch and st.filter_errors == 6


class AddMismatchedFilter:
    """Answers every test "present"; its adds meet a stored filter of another geometry."""

    def __init__(self):
        self.adds = 0

    def test(self, key):
        return True

    def add(self, key):
        self.adds += 1
        raise lb.GeometryMismatchError("stored m=9585 k=7, this filter m=19170 k=7 (scripted)")


@pytest.mark.parametrize("policy", ["open", "closed"])
def test_a_found_keys_add_refused_for_its_geometry_serves_the_value_in_both_guards(policy):
    from ling_bloom.guard import AsyncGuard

    blocking = AddMismatchedFilter()
    g = Guard(blocking, MemoryCache(), ROWS.get, on_filter_error=policy, metrics=False)
    assert g.get("1") == "one" and blocking.adds == 1

    async def main():
        f = AddMismatchedFilter()
        ag = AsyncGuard(f, MemoryCache(), ROWS.get, on_filter_error=policy, metrics=False)
        assert await ag.get("1") == "one"    # the value is served, not a GeometryMismatchError
        assert f.adds == 1                   # asked once, as the blocking guard asks
        assert ag.stats().geometry_mismatch and ag.stats().filter_errors == 1

    asyncio.run(main())


def test_a_geometry_mismatch_under_raise_raises():
    g = Guard(MismatchedFilter(), None, ROWS.get, on_filter_error="raise", metrics=False)
    with pytest.raises(lb.GeometryMismatchError):
        g.get("1")


# ---- a real RedisFilter whose server lost it -------------------------------------------------


def test_real_redis_filter_flushed_passes_lookups_and_is_rebuilt(clean_redis, raw_redis):
    f = RedisFilter.from_url(clean_redis.url, "bf:lost-rows", 1000, 0.01)
    f.update(["1", "2"])
    rebuilt = threading.Event()

    def rebuild(flt):
        from ling_bloom.guard import refill

        refill(flt, ["1", "2"])
        rebuilt.set()

    g = Guard(f, MemoryCache(), ROWS.get, metrics=False, rebuild=rebuild, null_ttl=0)
    assert g.get("1") == "one" and g.check("absent") is False
    raw_redis.command("FLUSHALL")
    assert g.get("1") == "one"          # not a 404 (None) for an existing row
    assert g.stats().filter_losses == 1  # (the rebuild may be done already: no flag read)
    assert rebuilt.wait(10)
    wait_for(lambda: not g.stats().filter_lost and g.stats().rebuilds == 1,
             "the guard to use the filter again")
    assert g.check("2") is True and g.check("absent") is False
    f.close()


def test_a_rebuild_that_returns_another_filter_is_used_from_then_on():
    fresh = lb.MemoryFilter(1000, 0.01)

    def rebuild(flt):
        fresh.update(["1", "2"])
        return fresh                             # e.g. a new key, made and filled

    g, f, _ = lost_guard(rebuild=rebuild)
    f.lose()
    assert g.check("1") is True
    wait_for(lambda: g.stats().rebuilds == 1, "the rebuild")
    assert g.filter is fresh
    assert g.check("2") is True and g.check("absent") is False


def test_async_guard_with_a_plain_rebuild_runs_it_in_a_thread():
    from ling_bloom.guard import AsyncGuard, refill

    threads = []

    def rebuild(flt):
        threads.append(threading.current_thread())
        refill(flt, ["1", "2"])

    async def main():
        f = LostFilter(["1", "2"])
        g = AsyncGuard(f, None, ROWS.get, metrics=False, name="async-plain", rebuild=rebuild)
        f.lose()
        assert await g.acheck("1") is True
        await until(lambda: g.stats().rebuilds, "the rebuild in its thread to end")
        assert g.stats().rebuilds == 1 and threads[0] is not threading.current_thread()
        assert await g.acheck("absent") is False

    asyncio.run(main())


def test_geometry_mismatch_prometheus_gauge():
    prometheus_client = pytest.importorskip("prometheus_client")
    reg = prometheus_client.CollectorRegistry()
    g = Guard(MismatchedFilter(), None, ROWS.get, name="prom-geom", metrics=reg)
    g.get("1")
    assert reg.get_sample_value("ling_bloom_guard_geometry_mismatch", {"guard": "prom-geom"}) == 1


def test_real_redis_filter_of_another_capacity_fails_open_not_a_500(clean_redis, caplog):
    old = RedisFilter.from_url(clean_redis.url, "bf:resized", 1000, 0.01)
    old.update(["1", "2"])
    new = RedisFilter.from_url(clean_redis.url, "bf:resized", 50_000, 0.01)  # settings changed
    g = Guard(new, MemoryCache(), ROWS.get, metrics=False, name="resized")
    with caplog.at_level(logging.ERROR, logger="ling_bloom.guard"):
        for _ in range(3):
            assert g.get("1") == "one"
        g.add("9")
    [logged] = [r.getMessage() for r in caplog.records if "another geometry" in r.getMessage()]
    assert "'bf:resized:v2'" in logged and "key_names()" in logged
    assert g.stats().geometry_mismatch
    old.close()
    new.close()


def test_two_guards_of_one_lost_filter_rebuild_it_once():
    release = threading.Event()
    calls = []

    def rebuild(flt):
        calls.append(1)
        flt.reset()
        assert release.wait(10)
        flt.update(["1", "2"])

    f = LostFilter(["1", "2"])
    a = Guard(f, None, ROWS.get, metrics=False, name="a", rebuild=rebuild)
    b = Guard(f, None, ROWS.get, metrics=False, name="b", rebuild=rebuild)
    f.lose()
    assert a.check("1") is True
    wait_for(lambda: calls, "the rebuild to start")
    asked = f.tests
    assert b.check("1") is True and b.check("2") is True   # not asked: it is half filled
    assert f.tests == asked and b.stats().filter_lost and b.stats().rebuilding
    b.add("5")                                              # handed to a's rebuild
    release.set()
    wait_for(lambda: a.stats().rebuilds == 1, "the rebuild to end")
    assert calls == [1]
    assert b.check("5") is True and b.check("absent") is False


@pytest.mark.parametrize("layout", ["standard", "blocked"])
def test_a_rebuilt_redis_filter_is_never_seen_half_filled_by_another_process(
        clean_redis, raw_redis, layout):
    # The rebuild builds the keys in memory and ORs them in with one load(): another
    # process's client (here a second filter object at the key) finds the filter lost until
    # it is whole, never answering "absent" for a row the rebuild has not reached yet.
    kw = {"layout": "blocked"} if layout == "blocked" else {}
    f = RedisFilter.from_url(clean_redis.url, "bf:aside-rows", 1000, 0.01, **kw)
    other = RedisFilter.from_url(clean_redis.url, "bf:aside-rows", 1000, 0.01, **kw)
    f.update([str(i) for i in range(100)])
    assert other.test("1")
    raw_redis.command("FLUSHALL")
    seen_midway = []

    def rows():
        for i in range(100):
            if i == 50:  # half way through the source
                try:
                    seen_midway.append(other.test("75"))  # a row not yet reached
                except lb.FilterLostError:
                    seen_midway.append("lost")
            yield str(i)

    from ling_bloom.guard import refill

    refill(f, rows(), batch_size=10)
    assert seen_midway == ["lost"]            # before: False, a 404 for an existing row
    assert other.test_many([str(i) for i in range(100)]) == [True] * 100
    assert f.test("absent-row") is False
    f.close()
    other.close()


def test_a_subclass_of_redis_filter_is_also_rebuilt_aside_never_half_filled(
        clean_redis, raw_redis):
    # An application's own subclass of RedisFilter is rebuilt the same way: keys aside,
    # one load(); a source failing mid-way leaves it lost, not half filled and answering
    # "absent" for rows it holds.
    class AppFilter(RedisFilter):
        pass

    f = AppFilter.from_url(clean_redis.url, "bf:aside-sub", 1000, 0.01)
    f.update(["1", "2"])
    raw_redis.command("FLUSHALL")
    seen_midway = []

    def rows():
        for i in range(20):
            if i == 10:
                try:
                    seen_midway.append(f.test("15"))
                except lb.FilterLostError:
                    seen_midway.append("lost")
            yield str(i)
        raise RuntimeError("source failed")

    from ling_bloom.guard import refill

    with pytest.raises(RuntimeError):
        refill(f, rows(), batch_size=5)
    assert seen_midway == ["lost"]
    with pytest.raises(lb.FilterLostError):
        f.test("1")
    f.close()


def test_an_async_redis_filter_is_rebuilt_whole_by_arefill(clean_redis, raw_redis):
    from ling_bloom.aio import AsyncRedisFilter
    from ling_bloom.guard import arefill

    async def main():
        f = AsyncRedisFilter.from_url(clean_redis.url, "bf:aside-async", 1000, 0.01)
        await f.update(["1", "2"])
        raw_redis.command("FLUSHALL")
        with pytest.raises(lb.FilterLostError):
            await f.test("1")

        async def rows():
            for i in range(40):
                yield str(i)

        await arefill(f, rows(), batch_size=7)
        assert await f.test_many([str(i) for i in range(40)]) == [True] * 40
        await f.aclose()

    asyncio.run(main())
