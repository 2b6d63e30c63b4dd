"""ling_bloom.contrib.asgi with Starlette's TestClient over a SQLite database, counting
queries; and the full flow (AsyncGuard) inside an async endpoint."""
from __future__ import annotations

import sqlite3

import pytest

from frameworks import require

require("starlette", "asgi")
try:  # Starlette's TestClient runs on httpx2 (httpx is its deprecated fallback)
    import httpx2  # noqa: F401
except ImportError:
    require("httpx", "asgi")

from starlette.applications import Starlette  # noqa: E402
from starlette.middleware import Middleware  # noqa: E402
from starlette.responses import JSONResponse, PlainTextResponse  # noqa: E402
from starlette.routing import Mount, Route, WebSocketRoute  # noqa: E402
from starlette.testclient import TestClient  # noqa: E402

import ling_bloom as lb  # noqa: E402
from ling_bloom.contrib.asgi import BloomGuardMiddleware, BloomRoute  # noqa: E402
from ling_bloom.guard import AsyncGuard, MemoryCache  # noqa: E402
from ling_bloom.warmup import warmup  # noqa: E402


class DB:
    def __init__(self, path):
        self.path = str(path)
        self.queries = []
        conn = self.connect()
        conn.execute("CREATE TABLE product (id INTEGER PRIMARY KEY, sku TEXT UNIQUE)")
        conn.executemany("INSERT INTO product VALUES (?, ?)",
                         [(i, f"sku-{i}") for i in range(1, 101)])
        conn.commit()
        conn.close()
        self.queries.clear()

    def connect(self):
        conn = sqlite3.connect(self.path, check_same_thread=False)
        conn.set_trace_callback(self.queries.append)
        return conn

    def one(self, sql, *args):
        conn = self.connect()
        try:
            return conn.execute(sql, args).fetchone()
        finally:
            conn.close()

    def selects(self):
        return len([q for q in self.queries if q.lstrip().upper().startswith("SELECT")])


@pytest.fixture
def db(tmp_path):
    return DB(tmp_path / "shop.sqlite3")


@pytest.fixture
def filters(db):
    products = lb.MemoryFilter(10_000, 0.001)
    conn = db.connect()
    warmup(products, conn.execute("SELECT id FROM product"), progress=False)
    skus = lb.MemoryFilter(10_000, 0.001)
    warmup(skus, ("sku:" + s for (s,) in conn.execute("SELECT sku FROM product")),
           progress=False)
    conn.close()
    db.queries.clear()
    return {"products": products, "skus": skus}


def make_app(db, filters, **mw):
    async def product(request):
        row = db.one("SELECT id, sku FROM product WHERE id = ?", request.path_params["product_id"])
        if row is None:
            return JSONResponse({"detail": "Not Found"}, status_code=404)
        return JSONResponse({"id": row[0], "sku": row[1]})

    async def by_sku(request):
        row = db.one("SELECT id FROM product WHERE sku = ?", request.path_params["sku"])
        return JSONResponse({"id": row[0]}) if row else JSONResponse({}, status_code=404)

    async def update(request):
        db.one("SELECT id FROM product WHERE id = ?", request.path_params["product_id"])
        return PlainTextResponse("updated")

    async def ws(websocket):
        await websocket.accept()
        await websocket.send_text("hello")
        await websocket.close()

    routes = [
        Route("/products/{product_id:int}", product),
        Route("/products/{product_id:int}", update, methods=["PUT"]),
        Route("/sku/{sku}", by_sku),
        WebSocketRoute("/ws", ws),
        Mount("/api", routes=[Route("/products/{product_id:int}", product)]),
    ]
    options = dict(
        filters=filters,
        routes=[
            BloomRoute("/products/{product_id:int}", "product_id", "products"),
            BloomRoute("/sku/{sku}", "sku", "skus", prefix="sku:"),
        ],
        metrics=False,
    )
    options.update(mw)
    return Starlette(routes=routes, middleware=[Middleware(BloomGuardMiddleware, **options)])


def call(client, db, method, url):
    db.queries.clear()
    r = client.request(method, url)
    return r.status_code, db.selects()


def middleware_of(client):
    app = client.app
    stack = app.middleware_stack or app.build_middleware_stack()
    while not isinstance(stack, BloomGuardMiddleware):
        stack = stack.app
    return stack


def test_unknown_ids_are_rejected_before_the_endpoint(db, filters):
    with TestClient(make_app(db, filters)) as client:  # lifespan passes through
        assert call(client, db, "GET", "/products/42") == (200, 1)
        assert client.get("/products/42").json() == {"id": 42, "sku": "sku-42"}
        for bad in ["/products/101", "/products/999999", "/products/0"]:
            assert call(client, db, "GET", bad) == (404, 0)
        r = client.get("/products/555")
        assert r.json() == {"detail": "Not Found"}
        assert call(client, db, "GET", "/sku/sku-9") == (200, 1)
        assert call(client, db, "GET", "/sku/unknown") == (404, 0)
        s = middleware_of(client).get_guard("products").stats()
        assert (s.rejected, s.found, s.not_found) == (4, 2, 0)


def test_other_methods_paths_and_websockets_pass(db, filters):
    with TestClient(make_app(db, filters)) as client:
        assert call(client, db, "PUT", "/products/999999") == (200, 1)  # only GET/HEAD guarded
        with client.websocket_connect("/ws") as ws:
            assert ws.receive_text() == "hello"
        # not a guarded path (the mounted copy is not in routes): reaches the database
        assert call(client, db, "GET", "/api/products/999999") == (404, 1)


def test_false_positive_is_counted(db, filters):
    filters["products"].add("500")
    exists = {"products": lambda pid: db.one("SELECT 1 FROM product WHERE id = ?", pid) is not None}
    with TestClient(make_app(db, filters, exists=exists)) as client:
        assert call(client, db, "GET", "/products/500") == (404, 2)   # and exists's query
        s = middleware_of(client).get_guard("products").stats()
        assert (s.passed, s.not_found, s.false_positive_rate) == (1, 1, 1.0)


def test_an_endpoints_own_404_is_not_a_false_positive(db, filters):
    async def on_sale(request):  # product 5 exists but is off sale
        pid = request.path_params["pid"]
        return PlainTextResponse("", status_code=404 if pid in (5, 500) else 200)

    async def exists(pid):
        return db.one("SELECT 1 FROM product WHERE id = ?", pid) is not None

    filters["products"].add("500")                                 # a real false positive
    app = Starlette(routes=[Route("/on-sale/{pid:int}", on_sale)],
                    middleware=[Middleware(BloomGuardMiddleware, filters=filters, metrics=False,
                                           routes={"/on-sale/{pid:int}": ("pid", "products")},
                                           exists={"products": exists})])
    with TestClient(app) as client:
        for _ in range(3):
            assert client.get("/on-sale/5").status_code == 404
        assert client.get("/on-sale/500").status_code == 404
        s = middleware_of(client).get_guard("products").stats()
        assert (s.not_found, s.false_positive_rate) == (1, 1.0)


def test_reject_status_and_custom_reject(db, filters):
    with TestClient(make_app(db, filters, reject_status=410)) as client:
        r = client.get("/products/999")
        assert (r.status_code, r.json()) == (410, {"detail": "Gone"})

    async def reject(scope, key, name):
        return PlainTextResponse(f"no {name} {key}", status_code=404)

    with TestClient(make_app(db, filters, reject=reject)) as client:
        r = client.get("/products/999")
        assert (r.status_code, r.text) == (404, "no products 999")
        assert db.selects() == 0


def test_dict_routes_and_default_filter(db, filters):
    app = Starlette(routes=[Route("/p/{pid:int}", lambda r: PlainTextResponse("ok"))],
                    middleware=[Middleware(BloomGuardMiddleware, filter=filters["products"],
                                           routes={"/p/{pid:int}": "pid"}, metrics=False)])
    with TestClient(app) as client:
        assert client.get("/p/1").status_code == 200
        assert client.get("/p/1001").status_code == 404


def test_configuration_errors(filters):
    with pytest.raises(ValueError, match="no parameter"):
        BloomRoute("/p/{id}", "pid")
    with pytest.raises(ValueError, match="no filter named 'nope'"):
        BloomGuardMiddleware(lambda *a: None, routes={"/p/{id}": ("id", "nope")},
                             filters=filters, metrics=False)


def test_root_path_is_stripped(db, filters):
    with TestClient(make_app(db, filters), root_path="/prefix") as client:
        assert call(client, db, "GET", "/products/999999") == (404, 0)
        assert call(client, db, "GET", "/products/7") == (200, 1)


def test_async_guard_in_an_endpoint(db, filters):
    """The full flow in an async app: filter, cache, one query per key, null caching."""
    guard = AsyncGuard(filters["products"], MemoryCache(), metrics=False)

    @guard
    async def load(key):
        row = db.one("SELECT id, sku FROM product WHERE id = ?", int(key))
        return None if row is None else {"id": row[0], "sku": row[1]}

    async def product(request):
        value = await load(request.path_params["pid"])
        return JSONResponse(value) if value else JSONResponse({}, status_code=404)

    app = Starlette(routes=[Route("/c/{pid:int}", product)])
    filters["products"].add("777")  # a false positive
    with TestClient(app) as client:
        assert call(client, db, "GET", "/c/3") == (200, 1)
        assert call(client, db, "GET", "/c/3") == (200, 0)
        assert call(client, db, "GET", "/c/123456") == (404, 0)
        assert call(client, db, "GET", "/c/777") == (404, 1)
        assert call(client, db, "GET", "/c/777") == (404, 0)
    assert guard.stats().null_hits == 1


def test_fastapi_app(db, filters):
    fastapi = require("fastapi", "asgi")
    app = fastapi.FastAPI()
    app.add_middleware(BloomGuardMiddleware, filters=filters, metrics=False,
                       routes={"/items/{item_id:int}": ("item_id", "products")})

    @app.get("/items/{item_id}")
    def read_item(item_id: int):
        row = db.one("SELECT id, sku FROM product WHERE id = ?", item_id)
        if row is None:
            raise fastapi.HTTPException(status_code=404, detail="Item not found")
        return {"id": row[0], "sku": row[1]}

    with TestClient(app) as client:
        assert call(client, db, "GET", "/items/12") == (200, 1)
        assert client.get("/items/12").json() == {"id": 12, "sku": "sku-12"}
        assert call(client, db, "GET", "/items/9999") == (404, 0)
        assert client.get("/items/9999").json() == {"detail": "Not Found"}


def test_fastapi_plain_route_keys_follow_the_declared_type(db, filters):
    # Before: with a plain {product_id} route, /products/007 was 404 where the app serves
    # product 7, and /products/abc 404 instead of FastAPI's 422.
    fastapi = require("fastapi", "asgi")
    app = fastapi.FastAPI()
    app.add_middleware(BloomGuardMiddleware, filters=filters, metrics=False,
                       routes={"/products/{product_id}": ("product_id", "products")})

    @app.get("/products/{product_id}")
    def read(product_id: int):
        row = db.one("SELECT id FROM product WHERE id = ?", product_id)
        if row is None:
            raise fastapi.HTTPException(status_code=404)
        return {"id": row[0]}

    with TestClient(app) as client:
        assert call(client, db, "GET", "/products/007") == (200, 1)
        assert client.get("/products/007").json() == {"id": 7}
        assert client.get("/products/abc").status_code == 422   # the framework's answer
        assert call(client, db, "GET", "/products/99999") == (404, 0)


def test_starlette_route_with_an_explicit_convert(db, filters):
    async def product(request):
        return JSONResponse({"id": request.path_params["pid"]})

    app = Starlette(routes=[Route("/p/{pid}", product)])
    guarded = BloomGuardMiddleware(app, filters=filters, metrics=False, routes=[
        BloomRoute("/p/{pid}", "pid", filter="products", convert=int)])
    with TestClient(guarded) as client:
        assert client.get("/p/0042").status_code == 200        # key "42"
        assert client.get("/p/99999").status_code == 404
        assert client.get("/p/x").status_code == 200            # not an int: the app decides


def test_a_file_filter_is_reloaded_by_a_running_asgi_app(db, tmp_path):
    # The "filters that stay current in every process", for ASGI: a FileFilter
    # serves unguarded until the warm-up's file exists, then follows each new file.
    from ling_bloom.warmup import FileFilter

    path = tmp_path / "products.bloom"
    seen = []

    async def product(request):
        seen.append(request.path_params["pid"])
        return JSONResponse({"id": request.path_params["pid"]})

    app = Starlette(routes=[Route("/p/{pid:int}", product)])
    guarded = BloomGuardMiddleware(app, filters={"products": FileFilter(path, check_every=0)},
                                   metrics=False, routes={"/p/{pid:int}": ("pid", "products")})
    with TestClient(guarded) as client:
        assert client.get("/p/5").status_code == 200              # unwarmed: served
        assert guarded.get_guard("products").stats().lookups == 0  # and not counted
        f = lb.MemoryFilter(1000, 0.01)
        f.update(["5"])
        f.save(str(path))                                         # the warm-up, elsewhere
        assert client.get("/p/5").status_code == 200              # (loaded in a thread)
        loaded(guarded.get_guard("products").filter, 1)
        assert client.get("/p/6").status_code == 404              # now guarded
        f.add("6")
        f.save(str(path))
        assert client.get("/p/6").status_code == 200              # the new file, no restart
        loaded(guarded.get_guard("products").filter, 2)
        assert client.get("/p/7").status_code == 404
    assert seen == [5, 5, 6]


def loaded(flt, reloads):
    """Wait until the FileFilter's thread has loaded its ``reloads``-th file."""
    import time

    deadline = time.monotonic() + 30  # a bound on a hang on a loaded machine
    while flt.reloads < reloads and time.monotonic() < deadline:
        time.sleep(0.005)
    assert flt.reloads == reloads


def test_a_path_with_a_lone_surrogate_is_rejected_not_a_500():
    # A scope path holding a lone surrogate made the filter's UTF-8 encoding raise
    # UnicodeEncodeError out of the middleware (a 500).  No such key can have been added:
    # it is rejected like any unknown key, and counted so.
    import asyncio

    reached = []

    async def inner(scope, receive, send):
        reached.append(scope["path"])
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})

    skus = lb.MemoryFilter(1000, 0.01)
    skus.add("sku:a")
    mw = BloomGuardMiddleware(inner, routes=[BloomRoute("/sku/{sku}", "sku", "skus", prefix="sku:")],
                              filters={"skus": skus}, metrics=False)
    sent = []

    async def receive():
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message):
        sent.append(message)

    for path in ("/sku/\ud800", "/sku/a\udfff"):
        sent.clear()
        scope = {"type": "http", "method": "GET", "path": path, "root_path": "",
                 "headers": [], "query_string": b""}
        asyncio.run(mw(scope, receive, send))
        assert sent[0]["status"] == 404 and not reached
    assert mw.get_guard("skus").stats().rejected == 2


def test_an_in_memory_filter_warns_that_workers_do_not_share_adds(tmp_path):
    import warnings

    from ling_bloom.warmup import FileFilter

    async def inner(scope, receive, send):  # pragma: no cover - never called
        pass

    routes = {"/p/{pid}": ("pid", "p")}
    with pytest.warns(lb.UnsharedFilterWarning, match="'p' is an in-memory MemoryFilter"):
        BloomGuardMiddleware(inner, routes=routes, filters={"p": lb.MemoryFilter(100, 0.01)},
                             metrics=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error")            # a served file shares adds: no warning
        BloomGuardMiddleware(inner, routes=routes,
                             filters={"p": FileFilter(str(tmp_path / "p.bloom"))},
                             metrics=False)


# ---- start-up: a guarded path that matches no route; a lost or mismatched filter ------------

import logging  # noqa: E402

from lost_filters import AsyncLostFilter, LostFilter, MismatchedFilter, wait_for  # noqa: E402


def _unmatched(caplog):
    return [r.getMessage() for r in caplog.records if "matches no route" in r.getMessage()]


def test_a_guarded_path_that_matches_no_route_is_a_start_up_warning(db, filters, caplog):
    typo = BloomRoute("/prodcts/{product_id:int}", "product_id", "products")
    with caplog.at_level(logging.WARNING, logger="ling_bloom.guard"):
        with TestClient(make_app(db, filters, routes=[typo])):  # the lifespan's startup
            assert len(_unmatched(caplog)) == 1
        message = _unmatched(caplog)[0]
        assert "'/prodcts/{product_id:int}'" in message
        assert "'/products/{product_id:int}'" in message          # the route close to it
        caplog.clear()
        ok = [BloomRoute("/products/{product_id:int}", "product_id", "products"),
              BloomRoute("/api/products/{product_id:int}", "product_id", "products")]
        with TestClient(make_app(db, filters, routes=ok)) as client:   # a Mount's route too
            client.get("/products/1")
        assert _unmatched(caplog) == []


def test_without_a_lifespan_the_first_request_says_it(db, filters, caplog):
    typo = BloomRoute("/product/{product_id:int}", "product_id", "products")
    with caplog.at_level(logging.WARNING, logger="ling_bloom.guard"):
        client = TestClient(make_app(db, filters, routes=[typo]))  # no `with`: no lifespan
        client.get("/products/1")
        client.get("/products/2")
    assert len(_unmatched(caplog)) == 1


def test_fastapi_a_guarded_path_that_matches_no_route_is_a_start_up_warning(filters, caplog):
    fastapi = require("fastapi", "asgi")
    app = fastapi.FastAPI()
    app.add_middleware(BloomGuardMiddleware, filters=filters, metrics=False,
                       routes={"/item/{item_id:int}": ("item_id", "products")})

    @app.get("/items/{item_id}")
    def read_item(item_id: int):
        return {"id": item_id}

    with caplog.at_level(logging.WARNING, logger="ling_bloom.guard"):
        with TestClient(app):
            pass
    [message] = _unmatched(caplog)
    assert "'/item/{item_id:int}'" in message and "'/items/{item_id}'" in message


@pytest.mark.parametrize("make", [AsyncLostFilter, LostFilter], ids=["async", "blocking"])
def test_a_lost_filter_serves_existing_rows_and_is_rebuilt_from_its_source(db, make):
    flt = make([str(i) for i in range(1, 101)])

    async def product_ids():                      # an async source: an async iterable
        conn = sqlite3.connect(db.path)           # not counted as the app's queries
        for (i,) in conn.execute("SELECT id FROM product").fetchall():
            yield i
        conn.close()

    app = make_app(db, {"products": flt, "skus": lb.MemoryFilter(100, 0.01)},
                   sources={"products": product_ids},
                   guard_options={"on_filter_error": "closed"})
    with TestClient(app) as client:
        assert call(client, db, "GET", "/products/4242") == (404, 0)
        flt.lose()
        assert call(client, db, "GET", "/products/7") == (200, 1)    # not a 404
        guard = middleware_of(client).get_guard("products")
        wait_for(lambda: guard.stats().rebuilds == 1, "the rebuild from the source")
        assert flt.resets == 1 and not guard.stats().filter_lost
        assert call(client, db, "GET", "/products/4242") == (404, 0)  # the filter again
        assert call(client, db, "GET", "/products/8") == (200, 1)


def test_a_stored_geometry_that_is_not_the_codes_is_said_at_start_up_and_fails_open(db, caplog):
    app = make_app(db, {"products": MismatchedFilter(), "skus": lb.MemoryFilter(100, 0.01)})
    with caplog.at_level(logging.ERROR, logger="ling_bloom.guard"):
        with TestClient(app) as client:
            assert [r for r in caplog.records if "another geometry" in r.getMessage()]
            for _ in range(3):
                assert call(client, db, "GET", "/products/7") == (200, 1)   # never a 500
            assert middleware_of(client).get_guard("products").stats().geometry_mismatch
    assert len([r for r in caplog.records if "another geometry" in r.getMessage()]) == 1


# ------------------------------------------------------ keyed on the route the app resolves


def _ids_filter(*keys):
    f = lb.MemoryFilter(1000, 0.001)
    f.update([str(k) for k in keys])
    return f


def test_fastapi_route_declared_before_a_parameter_route_is_not_guarded_as_it():
    fastapi = require("fastapi", "asgi")
    app = fastapi.FastAPI()
    app.add_middleware(BloomGuardMiddleware, filters={"users": _ids_filter("alice")}, metrics=False,
                       routes={"/users/{username}": ("username", "users")})

    @app.get("/users/me")
    def me():
        return {"user": "the current one"}

    @app.get("/users/{username}")
    def user(username: str):
        return {"user": username}

    with TestClient(app) as client:
        assert client.get("/users/me").json() == {"user": "the current one"}
        assert client.get("/users/alice").status_code == 200
        assert client.get("/users/bob").status_code == 404


def test_host_routing_checks_each_host_against_its_own_filter():
    from starlette.routing import Host, Router

    async def public(request):
        return PlainTextResponse("public " + request.path_params["username"])

    async def admin(request):
        return PlainTextResponse("admin " + request.path_params["username"])

    app = Starlette(routes=[
        Host("admin.example.com", app=Router([Route("/users/{username}", admin)])),
        Route("/users/{username}", public),
    ], middleware=[Middleware(BloomGuardMiddleware, metrics=False,
                              filters={"users": _ids_filter("alice"), "admins": _ids_filter("root")},
                              routes=[BloomRoute("/users/{username}", "username", "users"),
                                      BloomRoute("/users/{username}", "username", "admins",
                                                 host="admin.example.com")])])
    with TestClient(app) as client:
        admin_host = {"host": "admin.example.com"}
        assert client.get("/users/root", headers=admin_host).text == "admin root"
        assert client.get("/users/alice", headers=admin_host).status_code == 404
        assert client.get("/users/alice").text == "public alice"
        assert client.get("/users/root").status_code == 404


def test_an_int_parameter_in_a_mounted_app_or_an_api_router_is_keyed_as_the_int():
    fastapi = require("fastapi", "asgi")
    seen = []

    async def starlette_product(request):
        seen.append(request.path_params["id"])
        return JSONResponse({"id": request.path_params["id"]})

    sub = fastapi.FastAPI()

    @sub.get("/products/{id}")
    def sub_product(id: int):
        seen.append(id)
        return {"id": id}

    router = fastapi.APIRouter(prefix="/v2")

    @router.get("/products/{id}")
    def routed_product(id: int):
        seen.append(id)
        return {"id": id}

    app = fastapi.FastAPI()
    app.include_router(router)
    app.mount("/v1", sub)
    app.mount("/v3", Starlette(routes=[Route("/products/{id:int}", starlette_product)]))
    app.add_middleware(BloomGuardMiddleware, filters={"products": _ids_filter(7)}, metrics=False,
                       routes={"/v1/products/{id}": ("id", "products"),
                               "/v2/products/{id}": ("id", "products"),
                               "/v3/products/{id}": ("id", "products")})
    with TestClient(app) as client:
        for v in ("v1", "v2", "v3"):
            assert client.get(f"/{v}/products/007").status_code == 200, v
            assert client.get(f"/{v}/products/8").status_code == 404, v
        assert client.get("/v1/products/abc").status_code == 422   # FastAPI's own answer
    assert seen == [7, 7, 7]


def test_a_file_filter_reload_after_a_publish_does_not_hold_the_event_loop(tmp_path):
    # Loading a published file (250 ms for 90 MB) ran on the event loop: every request of
    # the worker waited.  It runs in a thread; a request meanwhile is answered at once.
    import threading
    import time

    from ling_bloom.warmup import FileFilter, publish

    path = tmp_path / "products.bloom"
    first = lb.MemoryFilter(1000, 0.001)
    first.update(["5"])
    publish(first, str(path))

    async def product(request):
        return JSONResponse({"id": request.path_params["pid"]})

    flt = FileFilter(path, check_every=3600)
    app = Starlette(routes=[Route("/p/{pid:int}", product)])
    guarded = BloomGuardMiddleware(app, filters={"products": flt}, metrics=False,
                                   routes={"/p/{pid:int}": ("pid", "products")})
    gate, loading = threading.Event(), threading.Event()
    real_open = flt._open_file

    def held_open():
        loading.set()
        gate.wait(5)
        return real_open()

    flt._open_file = held_open
    with TestClient(guarded) as client:
        assert client.get("/p/6").status_code == 404
        second = lb.MemoryFilter(1000, 0.001)
        second.update(["5", "6"])
        publish(second, str(path))                   # a warm-up elsewhere: the log is sealed
        r = client.get("/p/6")                        # the reload starts; this one is answered
        assert flt.reloads == 1                       # while the new file is not loaded yet
        assert r.status_code == 200                   # passed (not a false 404) meanwhile
        assert loading.wait(10)
        gate.set()
        deadline = time.monotonic() + 30  # a bound on a hang on a loaded machine
        while flt.reloads < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert flt.reloads == 2
        assert client.get("/p/6").status_code == 200
        assert client.get("/p/7").status_code == 404


def test_a_key_normaliser_matches_a_case_insensitive_column():
    async def item(request):
        return PlainTextResponse(request.path_params["sku"])

    skus = _ids_filter("item-2")                   # the warm-up's keys, lower-cased
    app = Starlette(routes=[Route("/items/{sku}", item)],
                    middleware=[Middleware(BloomGuardMiddleware, filters={"skus": skus},
                                           metrics=False, routes={"/items/{sku}": ("sku", "skus")},
                                           guard_options={"normalize": str.lower})])
    with TestClient(app) as client:
        assert client.get("/items/Item-2").status_code == 200
        assert client.get("/items/ITEM-2").status_code == 200
        assert client.get("/items/Item-3").status_code == 404


def test_the_app_behind_other_middleware_is_resolved_with_its_router():
    fastapi = require("fastapi", "asgi")
    from starlette.middleware.cors import CORSMiddleware

    app = fastapi.FastAPI()

    @app.get("/users/me")
    def me():
        return {"user": "me"}

    @app.get("/users/{username}")
    def user(username: str):
        return {"user": username}

    wrapped = BloomGuardMiddleware(CORSMiddleware(app, allow_origins=["*"]), metrics=False,
                                   filters={"users": _ids_filter("alice")},
                                   routes={"/users/{username}": ("username", "users")})
    with TestClient(wrapped) as client:
        assert client.get("/users/me").json() == {"user": "me"}
        assert client.get("/users/alice").status_code == 200
        assert client.get("/users/bob").status_code == 404


@pytest.mark.skipif(not hasattr(__import__("os"), "fork"), reason="needs fork")
def test_a_worker_forked_during_a_reload_does_not_wait_for_the_parents_thread(tmp_path):
    # A worker forked while its parent's FileFilter loaded a new file in a thread would
    # let every absent key pass for ever: the thread that ends the load is not the child's.
    import os

    from ling_bloom.warmup import FileFilter, publish

    path = tmp_path / "products.bloom"
    f = lb.MemoryFilter(1000, 0.001)
    f.add("5")
    publish(f, str(path))
    flt = FileFilter(path, check_every=3600)
    flt.reload_in_thread = True
    assert flt.test("6") is False
    flt._loading = True                      # the parent's reload thread is loading
    assert flt.test("6") is True             # (the parent passes meanwhile)
    pid = os.fork()
    if pid == 0:  # the worker
        code = 1
        try:
            code = 0 if (flt.test("6") is False and flt.test("5") is True) else 3
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    flt._loading = False
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
