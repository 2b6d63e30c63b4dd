"""The documented flows with the server running in its own processes (issue 16).

Django and Flask run under gunicorn with 2 worker processes, FastAPI under uvicorn, each on
a free port of 127.0.0.1.  While the server runs, the documented warm-up command runs in
another process, rows are created and deleted, and the server is restarted; the answers
are read over HTTP, as a user's client would.  Rejections by the filter answer 410 (the
integrations' reject status), so they are told apart from the view's own 404.

Waiting for a reload polls with a deadline (a margin of seconds over CHECK_EVERY): that is
a bound on a hang, not a timed assertion.  Every server is stopped at the end.
"""
from __future__ import annotations

import os
import signal
import socket
import sqlite3
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from frameworks import require

ROOT = Path(__file__).resolve().parent.parent
TESTS = Path(__file__).resolve().parent
REJECTED = 410
CHECK_EVERY = 0.2


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get(port: int, path: str, method: str = "GET") -> int:
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", method=method)
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code


def settle(port: int, path: str, want: int, times: int = 8, deadline: float = 15.0) -> None:
    """Ask until ``times`` answers in a row are ``want`` (every worker has reloaded)."""
    end = time.monotonic() + deadline
    row = 0
    last = None
    while row < times:
        last = get(port, path)
        row = row + 1 if last == want else 0
        if row < times:
            assert time.monotonic() < end, f"{path}: still {last}, never {want} x{times}"
            time.sleep(0.05)


class Server:
    """A server process (gunicorn or uvicorn) on a free port, stopped by stop()."""

    def __init__(self, argv, env, cwd, port):
        self.port = port
        self.log = open(os.path.join(cwd, f"server-{port}.log"), "w+")
        self.proc = subprocess.Popen(argv, env=env, cwd=cwd, stdout=self.log,
                                     stderr=subprocess.STDOUT, start_new_session=True)
        end = time.monotonic() + 30
        while True:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1):
                    break
            except OSError:
                if self.proc.poll() is not None or time.monotonic() > end:
                    self.stop()
                    self.log.seek(0)
                    raise RuntimeError("server did not start:\n" + self.log.read()[-3000:])
                time.sleep(0.1)

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(5)
        self.log.close()


def env_with(**extra):
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [str(TESTS), str(ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env.update(extra)
    return env


def run(argv, env, cwd):
    p = subprocess.run(argv, env=env, cwd=cwd, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    return p


def gunicorn(app: str, port: int, env, cwd) -> Server:
    require("gunicorn", "test")
    return Server([sys.executable, "-m", "gunicorn", app, "-b", f"127.0.0.1:{port}",
                   "-w", "2", "--log-level", "warning", "--graceful-timeout", "2"],
                  env, cwd, port)


# ---- Flask -------------------------------------------------------------------------------

FLASK_APP = '''
import os, sqlite3
import flask
import ling_bloom as lb
from ling_bloom.contrib.flask import BloomGuard

DB = os.environ["SHOP_DB"]
app = flask.Flask(__name__)
app.config.update(LING_BLOOM_FILES={"products": os.environ["SHOP_FILTER"]},
                  LING_BLOOM_CHECK_EVERY=float(os.environ["SHOP_CHECK_EVERY"]),
                  LING_BLOOM_MAPPED=True, LING_BLOOM_REJECT_STATUS=410)
bloom = BloomGuard(app, filters={"products": lambda: lb.MemoryFilter(10_000, 0.001)},
                   metrics=False)

def db():
    return sqlite3.connect(DB)

@app.get("/products/<int:product_id>")
@bloom.guard("product_id", filter="products")
def product(product_id):
    with db() as conn:
        row = conn.execute("SELECT id FROM product WHERE id = ?", (product_id,)).fetchone()
    if row is None:
        flask.abort(404)
    return {"id": row[0]}

@app.delete("/products/<int:product_id>")
def delete(product_id):
    with db() as conn:
        conn.execute("DELETE FROM product WHERE id = ?", (product_id,))
    bloom.deleted("products", product_id)
    return "", 204

@bloom.source("products")
def product_ids():
    with db() as conn:
        yield from conn.execute("SELECT id FROM product")
'''


def test_flask_under_gunicorn_warm_up_new_rows_deletes_restart(tmp_path):
    require("flask", "flask")
    dbpath = tmp_path / "shop.db"
    with sqlite3.connect(dbpath) as conn:
        conn.execute("CREATE TABLE product (id INTEGER PRIMARY KEY)")
        conn.executemany("INSERT INTO product VALUES (?)", [(i,) for i in range(1, 101)])
    (tmp_path / "shop_app.py").write_text(FLASK_APP, encoding="utf-8")
    env = env_with(SHOP_DB=str(dbpath), SHOP_FILTER=str(tmp_path / "products.bloom"),
                   SHOP_CHECK_EVERY=str(CHECK_EVERY))
    env["PYTHONPATH"] = str(tmp_path) + os.pathsep + env["PYTHONPATH"]
    warm = [sys.executable, "-m", "flask", "--app", "shop_app", "bloom-warmup", "products",
            "--no-progress"]
    port = free_port()
    server = gunicorn("shop_app:app", port, env, tmp_path)
    try:
        # Before the first warm-up: served unguarded (the view answers), not 404 for all.
        assert get(port, "/products/7") == 200
        assert get(port, "/products/99999") == 404
        run(warm, env, tmp_path)                             # another process saves FILE
        settle(port, "/products/99999", REJECTED)           # both workers reloaded
        assert get(port, "/products/7") == 200
        # A row created while the server runs: unknown until the warm-up, then served.
        with sqlite3.connect(dbpath) as conn:
            conn.execute("INSERT INTO product VALUES (500)")
        assert get(port, "/products/500") == REJECTED
        run(warm, env, tmp_path)
        settle(port, "/products/500", 200)
        # A delete: the row is gone, the answer is the view's 404.
        assert get(port, "/products/7", method="DELETE") == 204
        assert get(port, "/products/7") == 404
    finally:
        server.stop()
    # A restart: warmed from FILE at once, no unwarmed phase.
    port = free_port()
    server = gunicorn("shop_app:app", port, env, tmp_path)
    try:
        assert get(port, "/products/99999") == REJECTED
        assert get(port, "/products/500") == 200
    finally:
        server.stop()


# ---- Django ------------------------------------------------------------------------------

def test_django_under_gunicorn_incremental_warm_up_and_restart(tmp_path):
    require("django", "django")
    env = env_with(DJANGO_SETTINGS_MODULE="django_project.settings",
                   LING_BLOOM_DJANGO_TMP=str(tmp_path),
                   LING_BLOOM_TEST_CHECK_EVERY=str(CHECK_EVERY), LING_BLOOM_TEST_MAPPED="1",
                   LING_BLOOM_TEST_REJECT=str(REJECTED))
    dj = [sys.executable, "-m", "django"]
    run(dj + ["migrate", "--run-syncdb", "-v", "0"], env, tmp_path)
    create = ("from django_project.shop.models import Product; "
              "Product.objects.bulk_create([Product(id=i, sku=f's{{i}}', name=f'p{{i}}') "
              "for i in {ids}])")
    run(dj + ["shell", "-c", create.format(ids="range(1, 101)")], env, tmp_path)
    port = free_port()
    app = "django.core.wsgi:get_wsgi_application()"
    server = gunicorn(app, port, env, tmp_path)
    try:
        assert get(port, "/products/7/") == 200              # unwarmed: served
        run(dj + ["bloom_warmup", "products"], env, tmp_path)
        settle(port, "/products/99999/", REJECTED)
        # bulk_create sends no post_save: the incremental warm-up adds the new row, and the
        # running workers pick up the file it saved.
        run(dj + ["shell", "-c", create.format(ids="[500]")], env, tmp_path)
        assert get(port, "/products/500/") == REJECTED
        run(dj + ["bloom_warmup", "products", "--incremental"], env, tmp_path)
        settle(port, "/products/500/", 200)
        run(dj + ["shell", "-c", "from django_project.shop.models import Product; "
                  "Product.objects.filter(pk=7).delete()"], env, tmp_path)
        assert get(port, "/products/7/") == 404
    finally:
        server.stop()
    port = free_port()
    server = gunicorn(app, port, env, tmp_path)
    try:
        assert get(port, "/products/99999/") == REJECTED
        assert get(port, "/products/500/") == 200
    finally:
        server.stop()


# ---- FastAPI -----------------------------------------------------------------------------

FASTAPI_APP = '''
import os, sqlite3
import ling_bloom as lb
from fastapi import FastAPI, HTTPException
from ling_bloom.contrib.asgi import BloomGuardMiddleware
from ling_bloom.warmup import FileFilter

DB = os.environ["SHOP_DB"]
products = FileFilter(os.environ["SHOP_FILTER"], check_every=float(os.environ["SHOP_CHECK_EVERY"]),
                      mapped=True)
app = FastAPI()
app.add_middleware(BloomGuardMiddleware, filters={"products": products},
                   routes={"/products/{product_id}": ("product_id", "products")},
                   reject_status=410, metrics=False)

@app.get("/products/{product_id}")
def read(product_id: int):
    with sqlite3.connect(DB) as conn:
        row = conn.execute("SELECT id FROM product WHERE id = ?", (product_id,)).fetchone()
    if row is None:
        raise HTTPException(404)
    return {"id": row[0]}
'''


def test_fastapi_under_uvicorn_reload_and_keys(tmp_path):
    require("fastapi", "test")
    require("uvicorn", "test")
    import ling_bloom as lb

    dbpath = tmp_path / "shop.db"
    with sqlite3.connect(dbpath) as conn:
        conn.execute("CREATE TABLE product (id INTEGER PRIMARY KEY)")
        conn.executemany("INSERT INTO product VALUES (?)", [(i,) for i in range(1, 101)])
    (tmp_path / "fastapi_shop.py").write_text(FASTAPI_APP, encoding="utf-8")
    bloom_file = tmp_path / "products.bloom"
    env = env_with(SHOP_DB=str(dbpath), SHOP_FILTER=str(bloom_file),
                   SHOP_CHECK_EVERY=str(CHECK_EVERY))
    env["PYTHONPATH"] = str(tmp_path) + os.pathsep + env["PYTHONPATH"]
    port = free_port()
    server = Server([sys.executable, "-m", "uvicorn", "fastapi_shop:app", "--host", "127.0.0.1",
                     "--port", str(port), "--workers", "2", "--log-level", "warning"],
                    env, tmp_path, port)
    try:
        assert get(port, "/products/7") == 200               # unwarmed: served
        warm = lb.MemoryFilter(10_000, 0.001)                 # a warm-up job, elsewhere
        warm.update(str(i) for i in range(1, 101))
        warm.save(str(bloom_file))
        settle(port, "/products/99999", REJECTED)
        assert get(port, "/products/007") == 200             # the key is "7", as read
        assert get(port, "/products/abc") == 422             # not guarded: FastAPI answers
    finally:
        server.stop()
