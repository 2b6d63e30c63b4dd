"""The documented flows with the server running in its own processes.

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

ROOT = Path(__file__).resolve().parents[2]
SUPPORT = ROOT / "tests" / "support"  # the Django project, frameworks.py

pytestmark = pytest.mark.slow  # real servers (gunicorn, uvicorn) in worker processes
REJECTED = 410
CHECK_EVERY = 0.2


from redis_server import free_port  # noqa: E402  (this worker's own ports: xdist-safe)


def get(port: int, path: str, method: str = "GET") -> int:
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", method=method)
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code


def settle(port: int, path: str, want: int, times: int = 8, deadline: float = 40.0) -> None:
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
        [str(SUPPORT), str(ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
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


def test_django_workers_serve_and_save_while_redis_is_down(tmp_path, private_redis):
    # Redis down when a worker first made its RedisFilter (adopting the stored geometry):
    # every guarded request was a 500; every save() a 500 although the row was committed.
    require("django", "django")
    import json

    import ling_bloom as lb

    url = private_redis.url
    env = env_with(DJANGO_SETTINGS_MODULE="django_project.settings",
                   LING_BLOOM_DJANGO_TMP=str(tmp_path), LING_BLOOM_TEST_REDIS_URL=url,
                   LING_BLOOM_TEST_REJECT=str(REJECTED))
    dj = [sys.executable, "-m", "django"]
    run(dj + ["migrate", "--run-syncdb", "-v", "0"], env, tmp_path)
    run(dj + ["shell", "-c", "from django_project.shop.models import Product; "
              "Product.objects.bulk_create([Product(id=i, sku=f's{i}', name=f'p{i}') "
              "for i in range(1, 101)])"], env, tmp_path)
    lb.RedisFilter("bloom:products", 10_000, 0.001, url=url).update([str(i) for i in range(1, 101)])
    private_redis.kill()
    port = free_port()
    server = gunicorn("django.core.wsgi:get_wsgi_application()", port, env, tmp_path)
    try:
        for _ in range(6):                      # both workers: "open" serves unguarded
            assert get(port, "/products/7/") == 200
            assert get(port, "/products/99999/") == 404     # the view's own answer
        created = []
        for _ in range(4):
            req = urllib.request.Request(f"http://127.0.0.1:{port}/products/new/", method="POST")
            with urllib.request.urlopen(req, timeout=10) as r:
                assert r.status == 201
                created.append(json.loads(r.read())["id"])
        private_redis.restart()                  # back, empty: the warm-up refills it
        lb.RedisFilter("bloom:products", 10_000, 0.001, url=url).add("0")
        run(dj + ["bloom_warmup", "products"], env, tmp_path)
        settle(port, "/products/99999/", REJECTED, deadline=40.0)  # every worker made it
        for pk in created:
            assert get(port, f"/products/{pk}/") == 200
    finally:
        server.stop()
    log = Path(tmp_path, f"server-{port}.log").read_text()
    assert "Internal Server Error" not in log and "Exception ignored" not in log, log[-3000:]


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


# ---- adds shared by every worker ---------------------------------------------------------
# A row created through one worker is answered 200 by every worker, at once and every
# time: while warm-ups replace the file in another process, after a worker restart, in
# each deployment mode that shares adds (a saved file each worker loads, the file mapped,
# a Redis filter).  Each answer names the worker that gave it, so the test also checks
# that more than one worker answered.

SHARED_FLASK_APP = '''
import os, sqlite3
import flask
import ling_bloom as lb
from ling_bloom.contrib.flask import BloomGuard

DB = os.environ["SHOP_DB"]
MODE = os.environ["SHOP_MODE"]
app = flask.Flask(__name__)
app.config.update(LING_BLOOM_CHECK_EVERY=2.0, LING_BLOOM_REJECT_STATUS=410,
                  LING_BLOOM_UNWARMED="reject")
if MODE == "redis":
    filters = {"products": lambda: lb.RedisFilter.from_url(
        os.environ["SHOP_REDIS_URL"], "bf:shared-products", 100_000, 0.001)}
else:
    app.config.update(LING_BLOOM_FILES={"products": os.environ["SHOP_FILTER"]},
                      LING_BLOOM_MAPPED=(MODE == "mapped"))
    filters = {"products": lambda: lb.MemoryFilter(100_000, 0.001)}
bloom = BloomGuard(app, filters=filters, metrics=False)

def db():
    conn = sqlite3.connect(DB, timeout=30)
    return conn

@app.after_request
def worker(response):
    response.headers["X-Worker"] = str(os.getpid())
    return response

@app.get("/products/<int:product_id>")
@bloom.guard("product_id", filter="products")
def product(product_id):
    with db() as conn:
        row = conn.execute("SELECT id FROM product WHERE id = ?", (product_id,)).fetchone()
    if row is None:
        flask.abort(404)
    return {"id": row[0]}

@app.post("/products")
def create():
    with db() as conn:
        new_id = conn.execute("INSERT INTO product DEFAULT VALUES").lastrowid
    bloom.get_guard("products").add(new_id)          # the documented way: after the commit
    return {"id": new_id}, 201

@bloom.source("products")
def product_ids():
    with db() as conn:
        yield from conn.execute("SELECT id FROM product")
'''

WARMUP_LOOP = '''
import os, subprocess, sys, time
argv, stop, done = sys.argv[3:], sys.argv[1], sys.argv[2]
for _ in range(200):                       # bounded: never outlives a broken test
    if os.path.exists(stop):
        break
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL)
    with open(done, "a") as f:
        f.write("warm-up\\n")
'''


def fetch(port: int, path: str, method: str = "GET"):
    """(status, the X-Worker header, body) of one request."""
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", method=method)
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, r.headers.get("X-Worker"), r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.headers.get("X-Worker"), e.read()


class WarmupLoop:
    """Warm-ups run one after another in another process until stop()."""

    def __init__(self, argv, env, cwd: Path):
        self.stop_file, self.done_file = cwd / "warmups.stop", cwd / "warmups.done"
        for f in (self.stop_file, self.done_file):
            if f.exists():
                f.unlink()
        self.proc = subprocess.Popen(
            [sys.executable, "-c", WARMUP_LOOP, str(self.stop_file), str(self.done_file), *argv],
            env=env, cwd=cwd, stderr=subprocess.PIPE, text=True)

    def count(self) -> int:
        return len(self.done_file.read_text().splitlines()) if self.done_file.exists() else 0

    def stop(self) -> int:
        self.stop_file.write_text("stop")
        _, err = self.proc.communicate(timeout=120)
        assert self.proc.returncode == 0, err
        return self.count()


def create_and_read_everywhere(port: int, create_path: str, read_path: str, loop: WarmupLoop,
                               rows: int = 25, reads: int = 8, min_warmups: int = 3,
                               min_workers: int = 2):
    """Create rows over HTTP while warm-ups run; read each one ``reads`` times right after
    (every answer must be 200).  Goes on past ``rows`` until ``min_warmups`` warm-ups
    finished during the creations and ``min_workers`` workers answered (which worker takes
    a connection is the kernel's choice: on a loaded machine one may take a long run of
    them).  Returns the ids and the workers that answered."""
    ids, workers = [], set()
    end = time.monotonic() + 120            # a bound on a hang, not a timed assertion
    while len(ids) < rows or loop.count() < min_warmups or len(workers) < min_workers:
        assert time.monotonic() < end, (f"only {loop.count()} warm-ups finished, "
                                        f"worker(s) {workers} answered")
        status, _, body = fetch(port, create_path, "POST")
        assert status == 201, body
        new_id = __import__("json").loads(body)["id"]
        ids.append(new_id)
        for _ in range(reads):
            status, worker, body = fetch(port, read_path.format(new_id))
            assert status == 200, (f"row {new_id} created, then answered {status} by worker "
                                   f"{worker} (after {loop.count()} warm-ups)")
            workers.add(worker)
    return ids, workers


def read_all(port: int, read_path: str, ids, reads: int = 4) -> None:
    for i in ids:
        for _ in range(reads):
            status, worker, _ = fetch(port, read_path.format(i))
            assert status == 200, f"row {i}: {status} from worker {worker}"


def gunicorn_workers(app: str, port: int, env, cwd, workers: int) -> Server:
    require("gunicorn", "test")
    return Server([sys.executable, "-m", "gunicorn", app, "-b", f"127.0.0.1:{port}",
                   "-w", str(workers), "--log-level", "warning", "--graceful-timeout", "2"],
                  env, cwd, port)


def worker_pids(server: Server) -> set:
    """The processes gunicorn's master runs now (its children)."""
    pid, kids = server.proc.pid, set()
    for task in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{task}/children") as f:
                kids |= {int(k) for k in f.read().split()}
        except OSError:
            pass
    return kids


def restart_workers(server: Server, port: int, read: str = "/products/{}") -> None:
    """SIGHUP: gunicorn replaces every worker with a new process.  Returns once none of the
    old workers is left and a new one answers (row 1, on the read path)."""
    old = worker_pids(server)
    assert old, "gunicorn runs no worker"
    os.kill(server.proc.pid, signal.SIGHUP)
    end = time.monotonic() + 60  # a bound on a hang, not a timed assertion
    while True:
        now = worker_pids(server)
        if now and not now & old and fetch(port, read.format(1))[0] == 200:
            return
        assert time.monotonic() < end, f"workers {old} not replaced (now {now})"
        time.sleep(0.05)


SHARED_ASGI_APP = '''
import os, sqlite3
from fastapi import FastAPI, HTTPException, Response
from ling_bloom.contrib.asgi import BloomGuardMiddleware
from ling_bloom.warmup import FileFilter

DB = os.environ["SHOP_DB"]
products = FileFilter(os.environ["SHOP_FILTER"], unwarmed="reject",
                      mapped=os.environ["SHOP_MODE"] == "mapped")
app = FastAPI()
guarded = BloomGuardMiddleware(app, filters={"products": products},
                               routes={"/products/{product_id}": ("product_id", "products")},
                               reject_status=410, metrics=False)

@app.get("/products/{product_id}")
def read(product_id: int, response: Response):
    response.headers["X-Worker"] = str(os.getpid())
    with sqlite3.connect(DB, timeout=30) as conn:
        row = conn.execute("SELECT id FROM product WHERE id = ?", (product_id,)).fetchone()
    if row is None:
        raise HTTPException(404)
    return {"id": row[0]}

@app.post("/products", status_code=201)
async def create():
    with sqlite3.connect(DB, timeout=30) as conn:
        new_id = conn.execute("INSERT INTO product DEFAULT VALUES").lastrowid
    await guarded.get_guard("products").add(new_id)
    return {"id": new_id}
'''

ASGI_WARMUP = '''
import os, sqlite3
import ling_bloom as lb
from ling_bloom.warmup import publish
f = lb.MemoryFilter(100_000, 0.001)
with sqlite3.connect(os.environ["SHOP_DB"], timeout=30) as conn:
    f.update(str(i) for (i,) in conn.execute("SELECT id FROM product"))
publish(f, os.environ["SHOP_FILTER"])
'''


class Shop:
    """One deployment whose worker processes share the adds: the warm-up command, the
    server's environment, how to start it on a port, the paths that create a row and read
    one, and whether its workers can be replaced (gunicorn's SIGHUP)."""

    def __init__(self, warm, env, start, create: str, read: str, restart: bool) -> None:
        self.warm, self.env, self.start = warm, env, start
        self.create, self.read, self.restart = create, read, restart


def shop_db(tmp_path: Path) -> Path:
    dbpath = tmp_path / "shop.db"
    with sqlite3.connect(dbpath) as conn:
        conn.execute("CREATE TABLE product (id INTEGER PRIMARY KEY AUTOINCREMENT)")
        conn.executemany("INSERT INTO product VALUES (?)", [(i,) for i in range(1, 101)])
    return dbpath


def flask_shop(tmp_path: Path, request, mode: str, workers: int) -> Shop:
    require("flask", "flask")
    dbpath = shop_db(tmp_path)
    (tmp_path / "shared_app.py").write_text(SHARED_FLASK_APP, encoding="utf-8")
    extra = {}
    if mode == "redis":
        srv = request.getfixturevalue("clean_redis")
        extra["SHOP_REDIS_URL"] = f"redis://127.0.0.1:{srv.port}/0"
    env = env_with(SHOP_DB=str(dbpath), SHOP_FILTER=str(tmp_path / "products.bloom"),
                   SHOP_MODE=mode, **extra)
    env["PYTHONPATH"] = str(tmp_path) + os.pathsep + env["PYTHONPATH"]
    warm = [sys.executable, "-m", "flask", "--app", "shared_app", "bloom-warmup", "products",
            "--no-progress"]
    return Shop(warm, env,
                lambda port: gunicorn_workers("shared_app:app", port, env, tmp_path, workers),
                "/products", "/products/{}", restart=True)


def django_shop(tmp_path: Path, request, mapped: str) -> Shop:
    require("django", "django")
    env = env_with(DJANGO_SETTINGS_MODULE="django_project.settings",
                   LING_BLOOM_DJANGO_TMP=str(tmp_path), LING_BLOOM_TEST_MAPPED=mapped,
                   LING_BLOOM_TEST_REJECT=str(REJECTED))
    dj = [sys.executable, "-m", "django"]
    run(dj + ["migrate", "--run-syncdb", "-v", "0"], env, tmp_path)
    run(dj + ["shell", "-c", "from django_project.shop.models import Product; "
              "Product.objects.bulk_create([Product(id=i, sku=f's{i}', name=f'p{i}') "
              "for i in range(1, 101)])"], env, tmp_path)
    app = "django.core.wsgi:get_wsgi_application()"
    # the view saves a row through the ORM: the post_save hook adds its key
    return Shop(dj + ["bloom_warmup", "products", "--no-progress"], env,
                lambda port: gunicorn_workers(app, port, env, tmp_path, 3),
                "/products/new/", "/products/{}/", restart=True)


def asgi_shop(tmp_path: Path, request, mode: str) -> Shop:
    require("fastapi", "test")
    require("uvicorn", "test")
    dbpath = shop_db(tmp_path)
    (tmp_path / "shared_asgi.py").write_text(SHARED_ASGI_APP, encoding="utf-8")
    env = env_with(SHOP_DB=str(dbpath), SHOP_FILTER=str(tmp_path / "products.bloom"),
                   SHOP_MODE=mode)
    env["PYTHONPATH"] = str(tmp_path) + os.pathsep + env["PYTHONPATH"]

    def start(port: int) -> Server:
        return Server([sys.executable, "-m", "uvicorn", "shared_asgi:guarded", "--host",
                       "127.0.0.1", "--port", str(port), "--workers", "2",
                       "--log-level", "warning"], env, tmp_path, port)

    return Shop([sys.executable, "-c", ASGI_WARMUP], env, start, "/products", "/products/{}",
                restart=False)


@pytest.mark.parametrize("shop", [
    pytest.param(lambda t, r: flask_shop(t, r, "file", 2), id="flask-file"),
    pytest.param(lambda t, r: flask_shop(t, r, "mapped", 4), id="flask-mapped"),
    pytest.param(lambda t, r: flask_shop(t, r, "redis", 3), id="flask-redis",
                 marks=pytest.mark.redis),
    pytest.param(lambda t, r: django_shop(t, r, "0"), id="django-file"),
    pytest.param(lambda t, r: django_shop(t, r, "1"), id="django-mapped"),
    pytest.param(lambda t, r: asgi_shop(t, r, "file"), id="asgi-file"),
    pytest.param(lambda t, r: asgi_shop(t, r, "mapped"), id="asgi-mapped"),
])
def test_row_created_in_one_worker_is_200_in_every_worker(tmp_path, request, shop):
    shop = shop(tmp_path, request)
    run(shop.warm, shop.env, tmp_path)
    port = free_port()
    server = shop.start(port)
    try:
        assert fetch(port, shop.read.format(99999))[0] == REJECTED
        loop = WarmupLoop(shop.warm, shop.env, tmp_path)
        try:
            ids, answered = create_and_read_everywhere(port, shop.create, shop.read, loop)
        finally:
            loop.stop()
        assert len(answered) >= 2, f"only worker(s) {answered} answered"
        if shop.restart:
            restart_workers(server, port, shop.read)
        read_all(port, shop.read, ids)
        # an ASGI worker reloads a published file in a thread, letting lookups the old
        # filter cannot answer pass meanwhile: every worker rejects again once it is done
        settle(port, shop.read.format(99999), REJECTED, deadline=40.0)
    finally:
        server.stop()
