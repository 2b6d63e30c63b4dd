"""ling_bloom.contrib.flask with Flask's test client over a SQLite database (sqlite3),
counting the queries each request runs."""
from __future__ import annotations

import sqlite3

import pytest

from frameworks import require

flask = require("flask", "flask")

import ling_bloom as lb  # noqa: E402
from ling_bloom.contrib.flask import BloomGuard  # noqa: E402


class DB:
    """A SQLite file; every statement run through any of its connections is recorded."""

    def __init__(self, path):
        self.path = str(path)
        self.queries = []
        with self.connect() as c:
            c.execute("CREATE TABLE product (id INTEGER PRIMARY KEY, sku TEXT UNIQUE, name TEXT)")
            c.executemany("INSERT INTO product VALUES (?, ?, ?)",
                          [(i, f"sku-{i}", f"product {i}") for i in range(1, 201)])
        self.queries.clear()

    def connect(self):
        conn = sqlite3.connect(self.path)
        conn.set_trace_callback(self.queries.append)
        return conn

    def selects(self):
        return [q for q in self.queries if q.lstrip().upper().startswith("SELECT")]


def make_app(db, **config):
    app = flask.Flask(__name__)
    app.config.update(TESTING=True, **config)
    bloom = BloomGuard(app, filters={
        "products": lb.MemoryFilter(10_000, 0.001),
        "skus": lambda: lb.MemoryFilter(10_000, 0.001),  # made at first use
    }, metrics=False)

    def one(sql, *args):
        conn = db.connect()
        try:
            return conn.execute(sql, args).fetchone()
        finally:
            conn.close()

    @app.get("/products/<int:product_id>")
    @bloom.guard("product_id", filter="products")
    def product(product_id):
        row = one("SELECT id, sku, name FROM product WHERE id = ?", product_id)
        if row is None:
            flask.abort(404)
        return {"id": row[0], "sku": row[1], "name": row[2]}

    @app.get("/by-sku/<sku>")
    def by_sku(sku):  # guarded by configuration (LING_BLOOM_ROUTES), not a decorator
        row = one("SELECT id FROM product WHERE sku = ?", sku)
        return ({"id": row[0]}, 200) if row else ({"error": "no such sku"}, 404)

    @app.get("/unguarded/<int:product_id>")
    def unguarded(product_id):
        row = one("SELECT id FROM product WHERE id = ?", product_id)
        return ({"id": row[0]}, 200) if row else ("", 404)

    @bloom.source("products")
    def product_ids():
        conn = db.connect()
        try:
            yield from conn.execute("SELECT id FROM product ORDER BY id")
        finally:
            conn.close()

    @bloom.source("skus")
    def skus():
        conn = db.connect()
        try:
            for (sku,) in conn.execute("SELECT sku FROM product"):
                yield "sku:" + sku
        finally:
            conn.close()

    # a 404 after the filter passed is a false positive when the row is missing
    bloom.exists("products")(lambda product_id: one("SELECT 1 FROM product WHERE id = ?", product_id) is not None)
    bloom.exists("skus")(lambda sku: one("SELECT 1 FROM product WHERE sku = ?", sku) is not None)

    @bloom.fetcher("products")
    def fetch(after, limit):
        conn = db.connect()
        try:
            return conn.execute("SELECT id FROM product WHERE id > ? ORDER BY id LIMIT ?",
                                (after or 0, limit)).fetchall()
        finally:
            conn.close()

    return app, bloom


@pytest.fixture
def db(tmp_path):
    return DB(tmp_path / "shop.sqlite3")


def request(client, db, url):
    db.queries.clear()
    r = client.get(url)
    return r.status_code, len(db.selects())


def warm(app, *args):
    result = app.test_cli_runner().invoke(args=["bloom-warmup", *args])
    assert result.exit_code == 0, result.output
    return result.output


def test_decorated_view_rejects_unknown_ids_without_a_query(db):
    app, bloom = make_app(db)
    c = app.test_client()
    assert request(c, db, "/products/5") == (404, 0)  # before the warm-up: unknown
    out = warm(app, "products", "--no-progress")
    assert "products: 200 keys in" in out
    assert request(c, db, "/products/5") == (200, 1)
    assert c.get("/products/5").get_json()["sku"] == "sku-5"
    for bad in [201, 999_999, 10**15]:
        assert request(c, db, f"/products/{bad}") == (404, 0)
    s = bloom.get_guard("products").stats()
    assert (s.rejected, s.found, s.not_found) == (4, 2, 0)


def test_control_unguarded_view_queries(db):
    app, _ = make_app(db)
    assert request(app.test_client(), db, "/unguarded/999999") == (404, 1)


def test_false_positive_is_counted(db):
    app, bloom = make_app(db)
    bloom.get_filter("products").add("424242")
    # the view's query, and @bloom.exists's on its 404
    assert request(app.test_client(), db, "/products/424242") == (404, 2)
    s = bloom.get_guard("products").stats()
    assert (s.passed, s.not_found, s.false_positive_rate) == (1, 1, 1.0)


def test_configured_route_with_prefix_and_status(db):
    app, bloom = make_app(db, LING_BLOOM_ROUTES={"by_sku": ("sku", "skus", "sku:")},
                          LING_BLOOM_REJECT_STATUS=410)
    warm(app, "skus", "--no-progress")
    c = app.test_client()
    assert request(c, db, "/by-sku/sku-7") == (200, 1)
    assert request(c, db, "/by-sku/nope") == (410, 0)
    bloom.get_filter("skus").add("sku:ghost")
    assert request(c, db, "/by-sku/ghost") == (404, 2)  # and @bloom.exists's query
    s = bloom.get_guard("skus").stats()
    assert (s.lookups, s.rejected, s.found, s.not_found) == (3, 1, 1, 1)


def test_init_app_later_and_single_filter(db):
    f = lb.MemoryFilter(100, 0.01)
    f.add("1")
    bloom = BloomGuard(filter=f, metrics=False)
    app = flask.Flask(__name__)
    bloom.init_app(app)
    seen = []

    @app.get("/items/<item_id>")
    @bloom.guard("item_id")
    def item(item_id):
        seen.append(item_id)
        return "ok"

    c = app.test_client()
    assert c.get("/items/1").status_code == 200
    assert c.get("/items/2").status_code == 404
    assert seen == ["1"]
    assert app.extensions["ling_bloom"] is bloom


def test_warmup_save_and_incremental(db, tmp_path):
    app, bloom = make_app(db)
    path = tmp_path / "products.bloom"
    state = tmp_path / "products.sync.json"
    out = warm(app, "products", "--no-progress", "--save", str(path))
    assert "saved to" in out
    assert all(lb.load(str(path)).test_many([str(i) for i in range(1, 201)]))

    conn = db.connect()
    conn.executemany("INSERT INTO product VALUES (?, ?, ?)", [(201, "a", "a"), (202, "b", "b")])
    conn.commit(); conn.close()
    out = warm(app, "products", "--incremental", "--state", str(state), "--batch-size", "150")
    assert "202 new keys in 2 batches, last id 202" in out  # the first run: everything
    out = warm(app, "products", "--incremental", "--state", str(state))
    assert "0 new keys" in out
    c = app.test_client()
    assert request(c, db, "/products/202") == (200, 1)


def test_warmup_cli_errors(db):
    app, _ = make_app(db)
    runner = app.test_cli_runner()
    r = runner.invoke(args=["bloom-warmup", "nope"])
    assert r.exit_code == 2 and "no ling_bloom filter named 'nope'" in r.output
    r = runner.invoke(args=["bloom-warmup", "products", "--incremental"])
    assert r.exit_code == 2 and "--state" in r.output
    r = runner.invoke(args=["bloom-warmup", "skus", "--incremental", "--state", "x"])
    assert r.exit_code == 2 and "fetcher" in r.output


def test_decorator_on_a_view_without_the_parameter(db):
    # Before: this was a 500 at request time; now the decorator refuses it at set-up.
    f = lb.MemoryFilter(100, 0.01)
    bloom = BloomGuard(filter=f, metrics=False)
    app = flask.Flask(__name__)
    app.config["TESTING"] = True
    bloom.init_app(app)

    with pytest.raises(TypeError, match="no parameter 'item_id'.*other"):
        @app.get("/x/<other>")
        @bloom.guard("item_id")
        def x(other):
            return "ok"


def test_a_misspelled_filter_name_is_a_set_up_error():
    bloom = BloomGuard(filters={"products": lb.MemoryFilter(100, 0.01)}, metrics=False)
    with pytest.raises(ValueError, match="no ling_bloom filter named 'prodcts'.*products"):
        @bloom.guard("pid", filter="prodcts")
        def view(pid):
            return "ok"
    # filters that come from the app's config: checked at init_app
    later = BloomGuard(metrics=False)

    @later.guard("pid", filter="prodcts")
    def view2(pid):
        return "ok"

    app = flask.Flask(__name__)
    app.config["LING_BLOOM_FILTERS"] = {"products": lb.MemoryFilter(100, 0.01)}
    with pytest.raises(ValueError, match="prodcts"):
        later.init_app(app)


@pytest.mark.parametrize("routes,match", [
    ({"prodct": ("product_id", "products")}, "no endpoint 'prodct'"),
    ({"product": ("id", "products")}, "has no parameter 'id'"),
])
def test_a_misconfigured_route_is_an_error_not_a_silent_unguarded_route(routes, match):
    # Before: a typo in LING_BLOOM_ROUTES turned the guard off without a word.
    app = flask.Flask(__name__)
    app.config.update(TESTING=True, LING_BLOOM_ROUTES=routes)
    bloom = BloomGuard(app, filters={"products": lb.MemoryFilter(100, 0.01)}, metrics=False)

    @app.get("/products/<int:product_id>")
    def product(product_id):
        return "ok"

    with pytest.raises(ValueError, match=match):
        bloom.check(app)
    with pytest.raises(ValueError, match=match):  # run by itself before the first request
        app.test_client().get("/products/1")


@pytest.mark.parametrize("routes,match", [
    ({"product": ("product_id", "prodcts")}, "no ling_bloom filter named 'prodcts'"),
    ({"product": "product_id"}, "expected"),
])
def test_a_route_with_a_bad_filter_or_shape_fails_at_init_app(routes, match):
    app = flask.Flask(__name__)
    app.config.update(TESTING=True, LING_BLOOM_ROUTES=routes)
    with pytest.raises(ValueError, match=match):
        BloomGuard(app, filters={"products": lb.MemoryFilter(100, 0.01)}, metrics=False)


def test_check_passes_a_correct_configuration():
    app = flask.Flask(__name__)
    app.config.update(TESTING=True, LING_BLOOM_ROUTES={"product": ("product_id", "products")})
    bloom = BloomGuard(app, filters={"products": lb.MemoryFilter(100, 0.01)}, metrics=False)

    @app.get("/products/<int:product_id>")
    def product(product_id):
        return "ok"

    bloom.check(app)
    assert app.test_client().get("/products/1").status_code == 404


APP_WITH_FILE = '''
import os, sqlite3
import flask
import ling_bloom as lb
from ling_bloom.contrib.flask import BloomGuard

DB = os.environ["SHOP_DB"]
app = flask.Flask(__name__)
app.config.update(LING_BLOOM_FILES={"products": os.environ["SHOP_FILTER"]},
                  LING_BLOOM_CHECK_EVERY=0.2,
                  LING_BLOOM_MAPPED=os.environ.get("SHOP_MAPPED") == "1")
bloom = BloomGuard(app, filters={"products": lambda: lb.MemoryFilter(10_000, 0.001)},
                   metrics=False)

def one(sql, *args):
    conn = sqlite3.connect(DB)
    try:
        return conn.execute(sql, args).fetchone()
    finally:
        conn.close()

@app.get("/products/<int:product_id>")
@bloom.guard("product_id", filter="products")
def product(product_id):
    row = one("SELECT id FROM product WHERE id = ?", product_id)
    if row is None:
        flask.abort(404)
    return {"id": row[0]}

@bloom.source("products")
def product_ids():
    conn = sqlite3.connect(DB)
    try:
        yield from conn.execute("SELECT id FROM product")
    finally:
        conn.close()
'''


@pytest.mark.parametrize("mapped", [False, True])
def test_flask_warm_up_in_another_process_updates_the_running_server(db, tmp_path, monkeypatch, caplog,
                                                                      mapped):
    # Before: `flask bloom-warmup products` filled a filter in its own process, which then
    # exited; the running server still rejected product 7.  With LING_BLOOM_FILES the
    # command saves the file and the running app reloads it.
    import importlib
    import os
    import subprocess
    import sys
    import time

    (tmp_path / "shop_app.py").write_text(APP_WITH_FILE, encoding="utf-8")
    monkeypatch.setenv("SHOP_DB", db.path)
    monkeypatch.setenv("SHOP_FILTER", str(tmp_path / "products.bloom"))
    monkeypatch.setenv("SHOP_MAPPED", "1" if mapped else "0")
    monkeypatch.syspath_prepend(str(tmp_path))
    sys.modules.pop("shop_app", None)
    shop = importlib.import_module("shop_app")
    client = shop.app.test_client()
    with caplog.at_level("WARNING", logger="ling_bloom.warmup"):
        assert client.get("/products/7").status_code == 200       # unwarmed: served
        assert client.get("/products/99999").status_code == 404   # by the view
    assert any("does not exist yet" in m for m in caplog.messages)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")]))
    proc = subprocess.run([sys.executable, "-m", "flask", "--app", "shop_app", "bloom-warmup",
                           "products", "--no-progress"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "saved to" in proc.stdout and "warning" not in proc.stderr
    deadline = time.monotonic() + 30   # a margin of seconds over LING_BLOOM_CHECK_EVERY=0.2
    while client.get("/products/99999").status_code != 404 or not bloom_warmed(shop):
        assert time.monotonic() < deadline, "the running app never reloaded the file"
        time.sleep(0.1)
    db.queries.clear()
    assert client.get("/products/7").status_code == 200
    assert client.get("/products/99999").status_code == 404
    assert shop.bloom.get_guard("products").stats().rejected >= 1
    live = shop.bloom.get_guard("products").filter.filter
    # LING_BLOOM_MAPPED: the worker maps the saved file instead of reading it in.
    assert getattr(live, "path", None) == (str(tmp_path / "products.bloom") if mapped else None)


def bloom_warmed(shop):
    return shop.bloom.get_guard("products").filter.warmed


def test_warm_up_of_an_in_memory_filter_without_a_file_warns(db):
    app = make_app(db)[0]
    result = app.test_cli_runner().invoke(args=["bloom-warmup", "products"])
    assert result.exit_code == 0
    assert "in-memory filter of this process" in result.output   # stderr is mixed in


def test_a_plain_route_keys_follow_the_views_annotation(db):
    # (Flask's side of the FastAPI finding) with <product_id> (string converter)
    # and a view reading it as an int, /p/007 must have the key "7".
    app = flask.Flask(__name__)
    app.config["TESTING"] = True
    f = lb.MemoryFilter(1000, 0.01)
    f.update(["7"])
    bloom = BloomGuard(app, filters={"products": f}, metrics=False)
    seen = []

    @app.get("/p/<product_id>")
    @bloom.guard("product_id", filter="products")
    def p(product_id: int):
        seen.append(product_id)
        return "ok"

    client = app.test_client()
    assert client.get("/p/007").status_code == 200
    assert client.get("/p/8").status_code == 404             # rejected before the view
    assert client.get("/p/abc").status_code == 200           # not an int: the view's call
    assert seen == ["007", "abc"]


def test_configured_routes_keys_follow_the_views_annotation(db):
    # Before: routes given in LING_BLOOM_ROUTES (not decorated) convert the key as the
    # view's annotation does, as @bloom.guard does: /c/007 has the key "7".
    app = flask.Flask(__name__)
    app.config["TESTING"] = True
    app.config["LING_BLOOM_ROUTES"] = {"c": ("product_id", "products"),
                                       "f": ("price", "prices")}
    f = lb.MemoryFilter(1000, 0.01)
    f.update(["7"])
    prices = lb.MemoryFilter(1000, 0.01)
    prices.update(["2.5"])
    seen = []

    @app.get("/c/<product_id>")
    def c(product_id: int):
        seen.append(product_id)
        return "ok"

    def price_view(price: float):
        return "ok"

    app.add_url_rule("/f/<price>", endpoint="f", view_func=price_view)
    BloomGuard(app, filters={"products": f, "prices": prices}, metrics=False)
    client = app.test_client()
    assert client.get("/c/007").status_code == 200           # key "7", as the view reads it
    assert client.get("/c/8").status_code == 404             # rejected before the view
    assert client.get("/c/abc").status_code == 200           # not an int: the view's call
    assert seen == ["007", "abc"]
    assert client.get("/f/2.50").status_code == 200          # float("2.50") -> "2.5"
    assert client.get("/f/3").status_code == 404


def test_guard_written_above_the_route_decorator_fails_at_set_up():
    # @bloom.guard above @app.get: Flask registered the bare view, so the guard was off
    # and nothing said so.  Now the decorator refuses, or (app bound later) init_app.
    app = flask.Flask(__name__)
    bloom = BloomGuard(app, filters={"p": lb.MemoryFilter(100, 0.01)}, metrics=False)
    with pytest.raises(ValueError, match="above the route decorator"):
        @bloom.guard("pid", filter="p")
        @app.get("/p/<int:pid>")
        def view(pid):
            return "ok"

    later = BloomGuard(filters={"p": lb.MemoryFilter(100, 0.01)}, metrics=False)
    app2 = flask.Flask(__name__)

    @later.guard("pid", filter="p")
    @app2.get("/p/<int:pid>")
    def view2(pid):
        return "ok"

    with pytest.raises(ValueError, match="registered endpoint 'view2' with the view unguarded"):
        later.init_app(app2)
    # the right order is accepted and guards
    app3 = flask.Flask(__name__)
    ok = BloomGuard(app3, filters={"p": lb.MemoryFilter(100, 0.01)}, metrics=False)

    @app3.get("/p/<int:pid>")
    @ok.guard("pid", filter="p")
    def view3(pid):
        return "ok"

    ok.check(app3)
    assert app3.test_client().get("/p/1").status_code == 404


def test_an_in_memory_filter_warns_at_set_up_that_workers_do_not_share_adds(tmp_path):
    with pytest.warns(lb.UnsharedFilterWarning, match="'p' is an in-memory MemoryFilter"):
        BloomGuard(flask.Flask(__name__), filters={"p": lb.MemoryFilter(100, 0.01)},
                   metrics=False)
    app = flask.Flask(__name__)
    lazy = BloomGuard(app, filters={"p": lambda: lb.BlockedFilter(100, 0.01)}, metrics=False)
    with pytest.warns(lb.UnsharedFilterWarning, match="BlockedFilter"):
        lazy.get_guard("p")                        # a factory's filter: when it is made
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")             # a file, or Redis: shared, no warning
        app = flask.Flask(__name__)
        app.config["LING_BLOOM_FILES"] = {"p": str(tmp_path / "p.bloom")}
        BloomGuard(app, filters={"p": lambda: lb.MemoryFilter(100, 0.01)},
                   metrics=False).get_guard("p")


# ---- a filter the server lost; a stored geometry that is not the code's ---------------------

import logging  # noqa: E402

from lost_filters import LostFilter, MismatchedFilter, wait_for  # noqa: E402


def lost_app(flt, rows, **config):
    app = flask.Flask(__name__)
    app.config.update({"TESTING": True,
                       "LING_BLOOM_GUARD_OPTIONS": {"on_filter_error": "raise"}, **config})
    bloom = BloomGuard(app, filters={"rows": flt}, metrics=False)
    seen = []

    @app.get("/rows/<int:row_id>")
    @bloom.guard("row_id", filter="rows")
    def row(row_id):
        seen.append(row_id)
        return ({"id": row_id}, 200) if row_id in rows else ({}, 404)

    @bloom.source("rows")
    def row_ids():
        assert flask.current_app._get_current_object() is app   # in an app context
        return list(rows)

    return app, bloom, seen


def test_a_lost_filter_serves_existing_rows_and_is_rebuilt_from_the_source():
    rows = {1, 2, 3}
    flt = LostFilter([str(i) for i in rows])
    app, bloom, seen = lost_app(flt, rows)
    client = app.test_client()
    assert client.get("/rows/9").status_code == 404 and seen == []   # rejected
    flt.lose()
    assert client.get("/rows/2").status_code == 200     # not a 404, not a 500 ("raise")
    guard = bloom.get_guard("rows")
    wait_for(lambda: guard.stats().rebuilds == 1, "the rebuild from @bloom.source")
    assert flt.resets == 1 and not guard.stats().filter_lost
    seen.clear()
    assert client.get("/rows/9").status_code == 404 and seen == []   # the filter again
    assert client.get("/rows/3").status_code == 200


def test_no_rebuild_without_a_source_or_when_turned_off():
    flt = LostFilter(["1"])
    app, bloom, _ = lost_app(flt, {1}, LING_BLOOM_REBUILD=False)
    flt.lose()
    assert app.test_client().get("/rows/1").status_code == 200
    assert bloom.get_guard("rows").rebuild is None and flt.resets == 0
    bloom.get_guard("rows").add(5)                      # an add: counted, not raised
    assert bloom.get_guard("rows").stats().lost_adds == 1


def test_a_stored_geometry_that_is_not_the_codes_is_logged_at_init_app_and_fails_open(caplog):
    with caplog.at_level(logging.ERROR, logger="ling_bloom.guard"):
        app, bloom, seen = lost_app(MismatchedFilter(), {1},
                                    LING_BLOOM_GUARD_OPTIONS={"on_filter_error": "open"})
        assert [r for r in caplog.records if "another geometry" in r.getMessage()]
        for _ in range(3):
            assert app.test_client().get("/rows/1").status_code == 200   # never a 500
    assert len([r for r in caplog.records if "another geometry" in r.getMessage()]) == 1
    assert bloom.get_guard("rows").stats().geometry_mismatch


def test_incremental_warm_up_when_the_served_file_is_gone_is_a_full_one(db, tmp_path):
    # FILE deleted, its position kept: --incremental published a filter of only the new
    # rows, and every older row answered 404 in every worker.
    path = tmp_path / "products.bloom"
    state = tmp_path / "products.sync.json"
    app, bloom = make_app(db, LING_BLOOM_FILES={"products": str(path)})
    warm(app, "products", "--incremental", "--state", str(state))
    assert all(lb.load(str(path)).test_many([str(i) for i in range(1, 201)]))
    path.unlink()
    conn = db.connect()
    conn.execute("INSERT INTO product VALUES (?, ?, ?)", (201, "n", "n"))
    conn.commit(); conn.close()
    out = warm(app, "products", "--incremental", "--state", str(state))
    assert "a full warm-up instead of --incremental" in out
    assert all(lb.load(str(path)).test_many([str(i) for i in range(1, 202)]))


# ---------------------------------------------------------------- methods, apps, views


def _one_filter_app(keys=("7",), **config):
    app = flask.Flask(__name__)
    app.config.update(TESTING=True, **config)
    f = lb.MemoryFilter(1000, 0.001)
    f.update(list(keys))
    return app, f


def test_an_async_view_is_awaited_and_answers_for_keys_in_the_filter():
    pytest.importorskip("asgiref")
    app, f = _one_filter_app()
    bloom = BloomGuard(app, filters={"products": f}, metrics=False)

    @app.get("/products/<int:product_id>")
    @bloom.guard("product_id", filter="products")
    async def product(product_id):
        return {"id": product_id}

    c = app.test_client()
    r = c.get("/products/7")
    assert (r.status_code, r.get_json()) == (200, {"id": 7})
    assert c.get("/products/8").status_code == 404
    s = bloom.get_guard("products").stats()
    assert (s.rejected, s.found) == (1, 1)


def test_only_get_and_head_are_guarded_by_default_and_methods_are_configurable():
    app, f = _one_filter_app(LING_BLOOM_ROUTES={"put_item": ("item_id", "items")})
    bloom = BloomGuard(app, filters={"items": f}, metrics=False)
    created = []

    @app.route("/items/<item_id>", methods=["GET", "PUT", "DELETE"])
    @bloom.guard("item_id", filter="items")
    def item(item_id):
        if flask.request.method == "PUT":
            created.append(item_id)
            return "", 201
        return "ok"

    @app.route("/put-items/<item_id>", methods=["GET", "PUT"], endpoint="put_item")
    def put_item(item_id):
        return ("", 201) if flask.request.method == "PUT" else "ok"

    @app.route("/strict/<item_id>", methods=["GET", "DELETE"])
    @bloom.guard("item_id", filter="items", methods=None)       # every method
    def strict(item_id):
        return "ok"

    c = app.test_client()
    assert c.get("/items/8").status_code == 404
    assert c.head("/items/8").status_code == 404
    assert c.put("/items/8").status_code == 201                 # a PUT that creates the row
    assert created == ["8"]
    assert c.options("/items/8").status_code == 200             # a CORS preflight
    assert c.get("/put-items/8").status_code == 404
    assert c.put("/put-items/8").status_code == 201
    assert c.options("/put-items/8").status_code == 200
    assert c.delete("/strict/8").status_code == 404
    app.config["LING_BLOOM_METHODS"] = ["GET", "HEAD", "PUT"]
    assert c.put("/put-items/9").status_code == 404


def test_one_extension_shared_by_two_apps_keeps_each_apps_settings(tmp_path):
    bloom = BloomGuard(filters={"products": lambda: lb.MemoryFilter(1000, 0.001)}, metrics=False)

    @bloom.source("products")
    def ids():
        return flask.current_app.config["IDS"]

    def create(name, ids):
        app = flask.Flask(name)
        app.config.update(TESTING=True, IDS=ids, LING_BLOOM_FILES={"products": tmp_path / f"{name}.bloom"},
                          LING_BLOOM_CHECK_EVERY=0, LING_BLOOM_UNWARMED="reject")
        bloom.init_app(app)

        @app.get("/products/<int:product_id>")
        @bloom.guard("product_id", filter="products")
        def product(product_id):
            return "ok"
        return app

    a, b = create("a", [1, 2]), create("b", [3])
    assert a.test_client().get("/products/3").status_code == 404   # no file yet: reject
    result = b.test_cli_runner().invoke(args=["bloom-warmup", "products", "--no-progress"])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "b.bloom").exists() and not (tmp_path / "a.bloom").exists()
    assert b.test_client().get("/products/3").status_code == 200
    assert b.test_client().get("/products/1").status_code == 404
    assert a.test_client().get("/products/3").status_code == 404   # a's file: still none
    result = a.test_cli_runner().invoke(args=["bloom-warmup", "products", "--no-progress"])
    assert result.exit_code == 0, result.output
    assert a.test_client().get("/products/1").status_code == 200
    assert a.test_client().get("/products/3").status_code == 404
    with a.app_context():
        assert bloom.get_guard("products").stats().found == 1
    with b.app_context():
        assert bloom.get_guard("products").stats().found == 1


_TYPE_CHECKING_VIEW = '''
from __future__ import annotations
from typing import TYPE_CHECKING
if TYPE_CHECKING:
    from werkzeug.wrappers import Response

def product(product_id: int) -> Response:
    return "ok"

def unknown(product_id: ProductId) -> str:
    return "ok"
'''


def test_an_int_annotation_is_read_when_another_annotation_does_not_resolve(tmp_path):
    ns: dict = {}
    exec(compile(_TYPE_CHECKING_VIEW, str(tmp_path / "views.py"), "exec"), ns)
    app, f = _one_filter_app()
    bloom = BloomGuard(app, filters={"products": f}, metrics=False)
    app.get("/p/<product_id>")(bloom.guard("product_id", filter="products")(ns["product"]))
    c = app.test_client()
    assert c.get("/p/007").status_code == 200                    # the key "7", as the view reads it
    assert c.get("/p/8").status_code == 404
    with pytest.warns(UserWarning, match="ProductId"):           # said at set-up
        bloom.guard("product_id", filter="products")(ns["unknown"])


def test_a_method_views_int_annotation_converts_the_key():
    from flask.views import MethodView

    app, f = _one_filter_app(LING_BLOOM_ROUTES={"configured": ("product_id", "products")})
    bloom = BloomGuard(app, filters={"products": f}, metrics=False)

    class Decorated(MethodView):
        decorators = [bloom.guard("product_id", filter="products")]

        def get(self, product_id: int):
            return "ok"

    class Configured(MethodView):
        def get(self, product_id: int):
            return "ok"

    app.add_url_rule("/d/<product_id>", view_func=Decorated.as_view("decorated"))
    app.add_url_rule("/c/<product_id>", view_func=Configured.as_view("configured"))
    c = app.test_client()
    for prefix in ("/d/", "/c/"):
        assert c.get(prefix + "007").status_code == 200, prefix
        assert c.get(prefix + "8").status_code == 404, prefix


def test_a_key_normaliser_matches_a_case_insensitive_column(db):
    app = flask.Flask(__name__)
    app.config.update(TESTING=True)
    bloom = BloomGuard(app, filters={"skus": lb.MemoryFilter(1000, 0.001)}, metrics=False,
                       normalize={"skus": str.lower})

    @app.get("/by-sku/<sku>")
    @bloom.guard("sku", filter="skus")
    def by_sku(sku):
        conn = db.connect()
        row = conn.execute("SELECT id FROM product WHERE sku = ? COLLATE NOCASE", (sku,)).fetchone()
        conn.close()
        return ("ok", 200) if row else ("", 404)

    @bloom.source("skus")
    def skus():
        return ["SKU-5", "sku-6"]

    warm(app, "skus", "--no-progress")
    c = app.test_client()
    for sku in ("sku-5", "SKU-5", "Sku-6"):
        assert c.get(f"/by-sku/{sku}").status_code == 200, sku
    assert c.get("/by-sku/sku-7").status_code == 404
    bloom.get_guard("skus").add("SKU-NEW")
    assert bloom.get_filter("skus").test("sku-new")


def test_a_views_own_404_is_not_a_false_positive_and_an_absent_row_is(db):
    app, bloom = make_app(db)
    warm(app, "products", "--no-progress")
    conn = db.connect()
    conn.execute("ALTER TABLE product ADD COLUMN active INTEGER DEFAULT 1")
    conn.execute("UPDATE product SET active = 0 WHERE id = 5")
    conn.commit()
    conn.close()

    @bloom.exists("products")
    def product_exists(product_id):
        conn = db.connect()
        try:
            return conn.execute("SELECT 1 FROM product WHERE id = ?", (product_id,)).fetchone() is not None
        finally:
            conn.close()

    @app.get("/on-sale/<int:product_id>")
    @bloom.guard("product_id", filter="products")
    def on_sale(product_id):
        conn = db.connect()
        row = conn.execute("SELECT id FROM product WHERE id = ? AND active = 1", (product_id,)).fetchone()
        conn.close()
        if row is None:
            flask.abort(404)                                     # off sale: the view's own 404
        return "ok"

    c = app.test_client()
    for _ in range(3):
        assert c.get("/on-sale/5").status_code == 404
    bloom.get_filter("products").add("424242")                   # a real false positive
    assert c.get("/on-sale/424242").status_code == 404
    s = bloom.get_guard("products").stats()
    assert (s.not_found, s.false_positive_rate) == (1, 1.0)
