"""The penetration benchmark's web app: GET /products/<id> over PostgreSQL, cached in Redis.

One code path for every variant (ling_bloom.guard.Guard), configured by environment:

  BENCH_VARIANT   none          cache-aside: values cached in Redis, a "not found" is not
                                cached, so every unknown id reaches the database
                  nullcache     the same, plus "not found" cached as a null marker (60 s)
                  guard-memory  a MemoryFilter of every product id (filled from the database
                                in the gunicorn master, shared by the forked workers) in
                                front of the null-caching cache
                  guard-redis   the same with a RedisFilter (one bitmap in Redis for every
                                worker; filled by run.py before the server starts)
                  guard-file    a saved filter file (BENCH_FILTER_FILE, written by run.py)
                                that each worker loads itself (warmup.FileFilter): one
                                copy of the bits per worker, as after a reload
                  guard-mapped  the same file mapped by each worker (FileFilter(mapped=True),
                                MemoryFilter.open): one copy for all workers
  BENCH_WORKLOAD  cheap         the product row by primary key
                  heavy         the product row with an unindexed aggregate over its reviews
                                (see queries.py): every lookup, found or not, scans
  BENCH_PG_DSN, BENCH_REDIS_URL, BENCH_FILTER_KEY, BENCH_ERROR_RATE, BENCH_FILTER_FILE

404 for an id that is not a product (rejected by the filter or not found), 200 and JSON
otherwise.
"""
from __future__ import annotations

import logging
import os
import threading

import psycopg
import redis
from flask import Flask, abort, jsonify

import ling_bloom as lb
from ling_bloom.guard import Guard, RedisCache
from queries import LOOKUP, WORKLOADS, row_to_value

VARIANT = os.environ.get("BENCH_VARIANT", "none")
DSN = os.environ["BENCH_PG_DSN"]
REDIS_URL = os.environ["BENCH_REDIS_URL"]
FILTER_KEY = os.environ.get("BENCH_FILTER_KEY", "bench:products:bloom")
ERROR_RATE = float(os.environ.get("BENCH_ERROR_RATE", "0.001"))
WORKLOAD = os.environ.get("BENCH_WORKLOAD", "cheap")
VARIANTS = ("none", "nullcache", "guard-memory", "guard-redis", "guard-file", "guard-mapped")
if VARIANT not in VARIANTS:
    raise SystemExit(f"BENCH_VARIANT must be one of {VARIANTS}, not {VARIANT!r}")
if WORKLOAD not in WORKLOADS:
    raise SystemExit(f"BENCH_WORKLOAD must be one of {WORKLOADS}, not {WORKLOAD!r}")
QUERY = LOOKUP[WORKLOAD]

_local = threading.local()


def db() -> psycopg.Connection:
    """One connection per worker thread (made in the worker, never inherited over fork)."""
    conn = getattr(_local, "conn", None)
    if conn is None or conn.closed or _local.pid != os.getpid():
        conn = psycopg.connect(DSN, autocommit=True)
        _local.conn, _local.pid = conn, os.getpid()
    return conn


def load_product(key: str):
    with db().cursor() as cur:
        cur.execute(QUERY, {"id": int(key)})
        row = cur.fetchone()
    return row_to_value(WORKLOAD, row)


class PassAll:
    """No filter: every id may exist."""

    def test(self, key) -> bool:
        return True

    def add(self, key) -> bool:
        return False


class PerWorker:
    """warmup.FileFilter made in each worker at its first request, not in the gunicorn
    master (--preload): what each worker holds is then its own, as after a reload."""

    def __init__(self, mapped: bool):
        self.mapped = mapped
        self.pid = None
        self.filter = None

    def _get(self):
        if self.pid != os.getpid():
            from ling_bloom.warmup import FileFilter

            self.filter = FileFilter(os.environ["BENCH_FILTER_FILE"], check_every=2.0,
                                     mapped=self.mapped)
            self.pid = os.getpid()
        return self.filter

    def test(self, key) -> bool:
        return self._get().test(key)

    def add(self, key) -> bool:
        return self._get().add(key)


def make_filter():
    if VARIANT in ("none", "nullcache"):
        return PassAll()
    if VARIANT in ("guard-file", "guard-mapped"):
        return PerWorker(mapped=VARIANT == "guard-mapped")
    if VARIANT == "guard-redis":
        # the geometry stored beside the bitmap by run.py is adopted
        return lb._core.RedisFilter(FILTER_KEY, url=REDIS_URL)
    with psycopg.connect(DSN) as conn:
        (n,) = conn.execute("SELECT count(*) FROM products").fetchone()
        f = lb.MemoryFilter(max(1, 2 * n), ERROR_RATE)   # room to grow: 2x the rows
        with conn.cursor(name="ids") as cur:              # a server-side cursor
            cur.itersize = 50_000
            cur.execute("SELECT id FROM products")
            batch = []
            for (pid,) in cur:
                batch.append(str(pid))
                if len(batch) == 50_000:
                    f.update(batch)
                    batch.clear()
            f.update(batch)
    return f


quiet = logging.getLogger("bench.guard")
quiet.setLevel(logging.ERROR)
guard = Guard(
    make_filter(),
    RedisCache(redis.Redis.from_url(REDIS_URL)),
    load_product,
    null_ttl=0 if VARIANT == "none" else 60,
    value_ttl=300,
    metrics=False,
    logger=quiet,
)

app = Flask(__name__)


@app.get("/products/<int:pid>")
def product(pid: int):
    value = guard.get(str(pid))
    if value is None:
        abort(404)
    return jsonify(value)


@app.get("/healthz")
def healthz():
    return {"variant": VARIANT, "workload": WORKLOAD, "pid": os.getpid()}
