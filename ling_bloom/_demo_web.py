"""The guard part of `python -m ling_bloom demo`: a real web app, guarded, under a real server.

run(say) builds a SQLite database of products in a temporary directory, fills a
MemoryFilter with their ids (the warm-up) and saves it, then starts this module's Flask app
under gunicorn on a free port of 127.0.0.1, in a subprocess, with WORKERS worker processes.
Every worker serves the filter from that one file (LING_BLOOM_FILES): a key one worker adds
goes into the file's add log, which the others read, so all of them know it at once.  The
app serves the same product lookup twice: /products/<id> behind the guard (BloomGuard) and
/unguarded/products/<id> without it; each answer says which worker gave it and whether it
read the database (headers X-Worker, X-Database).  The demo asks both for ids that exist
and ids that do not, and prints what each answered and how many database reads it cost;
then it creates a product through one worker (POST /products: the row, and the guard's
add) and asks for it until another worker answers.  The server is stopped at the end,
whatever happens.  Without Flask or gunicorn (`pip install '.[demo]'`; `make demo`
installs them) one line says so.
"""
from __future__ import annotations

import importlib.util
import json
import os
import random
import shutil
import socket
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from typing import Any, Callable, Dict, List, Optional, Tuple

_HOST = "127.0.0.1"
ENV_DB = "LING_BLOOM_DEMO_DB"
ENV_FILTER = "LING_BLOOM_DEMO_FILTER"
PRODUCTS = 10_000
REVIEWS_PER_PRODUCT = 5
GEOMETRY = (2 * PRODUCTS, 0.001)  # the products filter: capacity, error rate
WORKERS = 3                       # gunicorn worker processes, each with THREADS threads
THREADS = 2


# ---- the app (runs in the gunicorn worker) ---------------------------------------------------

def create_app() -> Any:
    """The demo's Flask app: one product lookup, guarded and unguarded, over SQLite, and
    the creation of a product."""
    import flask

    import ling_bloom as lb
    from ling_bloom.contrib.flask import BloomGuard

    db_path = os.environ[ENV_DB]
    app = flask.Flask("ling_bloom_demo")
    # The filter the warm-up fills and saves; every worker serves it from the file (adds
    # shared through its add log), and reloads the file when a later warm-up replaces it.
    app.config["LING_BLOOM_FILES"] = {"products": os.environ[ENV_FILTER]}
    app.config["LING_BLOOM_CHECK_EVERY"] = 1.0
    bloom = BloomGuard(app, filters={"products": lb.MemoryFilter(*GEOMETRY)})
    local = threading.local()

    def lookup(product_id: int) -> Any:
        """A product page: the product, and its reviews' count and mean (a query that
        scans the reviews, as many a real page's does)."""
        db = getattr(local, "db", None)
        if db is None:
            db = local.db = sqlite3.connect(f"file:{db_path}?mode=ro", uri=True)
        flask.g.database = True
        reviews, stars = db.execute("SELECT count(*), avg(stars) FROM review WHERE product_id = ?",
                                    (product_id,)).fetchone()
        row = db.execute("SELECT id, name FROM product WHERE id = ?", (product_id,)).fetchone()
        if row is None:
            flask.abort(404)
        return {"id": row[0], "name": row[1], "reviews": reviews, "stars": stars}

    @app.get("/products/<int:product_id>")
    @bloom.guard("product_id", filter="products")
    def product(product_id: int) -> Any:
        return lookup(product_id)

    @app.get("/unguarded/products/<int:product_id>")
    def product_unguarded(product_id: int) -> Any:
        return lookup(product_id)

    @app.post("/products")
    def create_product() -> Any:
        """A new product: its row, then its id added to the filter (every worker's)."""
        with sqlite3.connect(db_path, timeout=10) as db:
            new_id = db.execute("INSERT INTO product (name) VALUES (?)",
                                (flask.request.form.get("name", "new product"),)).lastrowid
        bloom.get_guard("products").add(new_id)
        return {"id": new_id}, 201

    @app.get("/health")
    def health() -> Any:
        return {"worker": os.getpid()}

    @app.after_request
    def who_answered(response: Any) -> Any:
        response.headers["X-Worker"] = str(os.getpid())
        response.headers["X-Database"] = "1" if flask.g.get("database") else "0"
        return response

    bloom.check(app)
    return app


# ---- the demo (runs in `python -m ling_bloom demo`) ------------------------------------------

def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((_HOST, 0))
        return int(s.getsockname()[1])


def _get(base: str, path: str, form: Optional[Dict[str, str]] = None) -> Tuple[int, bytes, Any]:
    """(status, body, headers) of a GET, or of a POST of form."""
    data = urllib.parse.urlencode(form).encode() if form is not None else None
    try:
        with urllib.request.urlopen(base + path, data=data, timeout=10) as r:
            return r.status, r.read(), r.headers
    except urllib.error.HTTPError as e:
        return e.code, e.read(), e.headers


def _health(base: str) -> None:
    status, _, _ = _get(base, "/health")
    if status != 200:
        raise RuntimeError(f"/health answered {status}")


def _make_database(path: str, n: int) -> None:
    rng = random.Random(1)
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE product (id INTEGER PRIMARY KEY, name TEXT NOT NULL)")
        db.execute("CREATE TABLE review (product_id INTEGER NOT NULL, stars INTEGER NOT NULL)")
        db.executemany("INSERT INTO product VALUES (?, ?)",
                       ((i, f"product {i}") for i in range(1, n + 1)))
        db.executemany("INSERT INTO review VALUES (?, ?)",
                       ((rng.randrange(1, n + 1), rng.randrange(1, 6))
                        for _ in range(REVIEWS_PER_PRODUCT * n)))


def _warm_up(db_path: str, filter_path: str) -> Any:
    import ling_bloom as lb
    from ling_bloom.warmup import warmup

    products = lb.MemoryFilter(*GEOMETRY)
    with sqlite3.connect(db_path) as db:
        summary = warmup(products, db.execute("SELECT id FROM product"), progress=False)
    products.save(filter_path)
    return products, summary


def _start_server(env: Dict[str, str], log_path: str) -> Tuple[subprocess.Popen, str]:
    """gunicorn with the app on a free port; waits until it answers.  RuntimeError when it
    does not start (its log is in log_path)."""
    for _ in range(3):  # the free port may be taken before gunicorn binds it
        port = _free_port()
        base = f"http://{_HOST}:{port}"
        with open(log_path, "ab") as log:
            proc = subprocess.Popen(
                [sys.executable, "-m", "gunicorn", "--bind", f"{_HOST}:{port}",
                 "--workers", str(WORKERS), "--threads", str(THREADS),
                 "--graceful-timeout", "2", "--log-level", "warning",
                 "ling_bloom._demo_web:create_app()"],
                env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=log)
        deadline = time.monotonic() + 30
        while proc.poll() is None and time.monotonic() < deadline:
            try:
                _health(base)
                return proc, base
            except (OSError, RuntimeError, ValueError):
                time.sleep(0.1)
        _stop(proc)
    raise RuntimeError("gunicorn did not start")


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _phase(base: str, prefix: str, ids: List[int]) -> Dict[str, Any]:
    """Each id asked once: the answers, the database reads, the answers given without
    one (a guarded 404: rejected by the filter) and the workers that answered."""
    t0 = time.perf_counter()
    codes: Dict[int, int] = {}
    queries = rejected = 0
    workers = set()
    for i in ids:
        status, _, headers = _get(base, f"{prefix}/products/{i}")
        codes[status] = codes.get(status, 0) + 1
        read = headers.get("X-Database") == "1"
        queries += read
        rejected += status == 404 and not read
        workers.add(headers.get("X-Worker"))
    elapsed = time.perf_counter() - t0
    return {"codes": codes, "queries": queries, "rejected": rejected, "seconds": elapsed,
            "workers": len(workers)}


def _shared_add(base: str, seconds: float = 30.0) -> Dict[str, Any]:
    """A product created through one worker, then asked for until every worker has
    answered (which worker takes a connection is the kernel's choice, so it asks until
    each has had one, within seconds): every answer must be 200."""
    status, body, headers = _get(base, "/products", {"name": "new product"})
    if status != 201:
        raise RuntimeError(f"POST /products answered {status}")
    new_id, created_by = json.loads(body)["id"], headers.get("X-Worker")
    statuses: Dict[str, List[int]] = {}
    deadline = time.monotonic() + seconds
    while len(statuses) < WORKERS and time.monotonic() < deadline:
        status, _, headers = _get(base, f"/products/{new_id}")
        statuses.setdefault(headers.get("X-Worker"), []).append(status)
    return {"id": new_id, "created_by": created_by, "statuses": statuses,
            "others": sorted(w for w in statuses if w != created_by)}


def missing() -> Optional[str]:
    """None when the web part can run here; else what to install."""
    for module, package in (("flask", "Flask"), ("gunicorn", "gunicorn")):
        if importlib.util.find_spec(module) is None:
            return package
    return None


def run(say: Callable[[str], None], existing: int = 200, absent: int = 800) -> Optional[Dict[str, Dict[str, Any]]]:
    """The guard in front of a web app; returns each phase's counts (None when skipped)."""
    say("The guard in front of a web app (Flask under gunicorn, SQLite)")
    lacking = missing()
    if lacking:
        say(f"  skipped: {lacking} is not installed (pip install '.[demo]' in a clone; "
            "`make demo` installs it)")
        return None
    d = tempfile.mkdtemp(prefix="ling-bloom-demo-web-")
    proc = None
    try:
        db_path = os.path.join(d, "shop.sqlite3")
        filter_path = os.path.join(d, "products.bloom")
        n = PRODUCTS
        _make_database(db_path, n)
        products, summary = _warm_up(db_path, filter_path)
        say(f"  SQLite: {n:,} products (ids 1 to {n:,}) and {REVIEWS_PER_PRODUCT * n:,} reviews; a "
            "product page is two queries, one of them a scan of the reviews")
        say(f"  warm-up: {summary.keys:,} ids into a MemoryFilter ({products.nbytes:,} bytes, "
            "0.1% false positives), saved to a file every worker serves (LING_BLOOM_FILES: "
            "adds shared through its add log, reloaded when a warm-up replaces it)")
        env = dict(os.environ)
        pkg_root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [pkg_root, env.get("PYTHONPATH")]))
        env[ENV_DB] = db_path
        env[ENV_FILTER] = filter_path
        proc, base = _start_server(env, os.path.join(d, "gunicorn.log"))
        say(f"  started gunicorn ({WORKERS} worker processes, {THREADS} threads each) with "
            f"the app at {base} (stopped at the end)")
        rng = random.Random(7)
        ids = rng.sample(range(1, n + 1), existing) + [rng.randrange(10**6, 10**9)
                                                       for _ in range(absent)]
        rng.shuffle(ids)
        say(f"  {len(ids):,} requests: {existing} for ids that exist, {absent} for random ids "
            "that do not (what a scraper or an attack sends)")
        results = {"unguarded": _phase(base, "/unguarded", ids), "guarded": _phase(base, "", ids)}
        for name, r in results.items():
            codes = ", ".join(f"{c} x{k}" for k, c in sorted(r["codes"].items()))
            path = "/unguarded/products/<id>" if name == "unguarded" else "/products/<id>"
            say(f"  {path:<25} answers: {codes}; product pages read from the database: "
                f"{r['queries']:,}; {r['seconds']:.1f} s; {r['workers']} workers answered")
        g = results["guarded"]
        say(f"  the guard answered {g['rejected']:,} requests with 404 before the view ran: "
            f"{results['unguarded']['queries'] - g['queries']:,} pages the database never "
            f"read; {g['queries'] - existing} of the absent ids passed the filter (false "
            "positives) and found nothing")
        shared = _shared_add(base)
        results["shared"] = shared
        say(f"  POST /products: product {shared['id']:,} created through worker "
            f"{shared['created_by']} (its row, and its id added to the filter)")
        answers = "; ".join(f"worker {w}: {', '.join(str(c) for c in sorted(set(codes)))}"
                            for w, codes in sorted(shared["statuses"].items()))
        say(f"  GET /products/{shared['id']} until every worker answered: {answers}")
        if shared["others"]:
            say(f"  {len(shared['others'])} other worker process(es) knew the new id at once: "
                "they read the add from the file's add log (a filter in each worker's own "
                "memory would answer 404 there until the next warm-up)")
        else:
            say("  no other worker took a connection in time: nothing shown across processes")
        return results
    except RuntimeError as e:
        log = os.path.join(d, "gunicorn.log")
        tail = open(log, encoding="utf-8", errors="replace").read()[-2000:] if os.path.exists(log) else ""
        say(f"  the web app failed: {e}\n{tail}")
        return None
    finally:
        if proc is not None:
            _stop(proc)
            say("  gunicorn stopped")
        shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    run(print)
