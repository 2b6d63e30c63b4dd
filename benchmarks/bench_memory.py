#!/usr/bin/env python3
"""ling_bloom.MemoryFilter against the other Bloom filters for Python, in one process run.

Every implementation gets the same keys, the same n and the same p:

  ling_bloom           MemoryFilter (XXH3-128, double hashing, k probes in a flat bit array)
  ling_bloom BlockedFilter  split-block: one 64-byte block per key (XXH3-64, AVX2 or portable)
  C floor              benchmarks/floor.c: ling_bloom's own C core over the same keys, no Python
  BlockedFilter C floor  the same for the split-block layout, with BlockedFilter's m and k
  abloom               BloomFilter (split-block: one 64-byte block per key, Python's hash())
  abloom (xxh64)       the same with serializable=True (XXH64 of the key's bytes)
  rbloom               Bloom (Rust, Python's hash())
  pybloomfiltermmap3   BloomFilter (C, in memory)
  fastbloom-rs         FilterBuilder(...).build_bloom_filter() (Rust)
  pybloom-live         BloomFilter (pure Python over bitarray)        [slow: sampled]
  pyprobables          BloomFilter (pure Python)                      [slow: sampled]
  set                  Python's set, the lower bound for exact membership
  bare loop            not a filter: the same Python loops calling a C method that does
                       nothing with the key (tuple.count on an empty tuple for add, `in ()`
                       for tests): what the loop and the call cost before any hashing


Workloads, for each size (n, p) and each key set:
  add          for k in keys: f.add(k)           (n keys into a fresh filter)
  test+        for k in keys: if k in f: ...     (keys that were added)
  test-        the same over a disjoint set of keys never added
  test+ fresh  test+ with each key built inside the timed loop, as a request handler gets
               it (a str decoded from the request's bytes; a bytes key encoded from its
               str): a fresh object per lookup, so a filter that uses Python's hash()
               finds no cached hash on it
  batch add    the peer's bulk insert (ling_bloom: update; add_many has a row of its own);
               under each table, ling_bloom's update as a fraction of the C floor's speed
               (and BlockedFilter's as a fraction of its own C floor's)
  batch test   the peer's bulk lookup (ling_bloom: test_many), where the peer has one
  memory       the filter's own size as it reports it (nbytes, byte_count, m/8, ...),
               and the RSS growth while it was filled
  FPR          false positives over the absent keys / number of absent keys

Timing: each implementation gets one fresh filter, filled in --repeat equal slices of the
n keys; each slice starts with a per-key part (the Python loop; --add-sample keys in all)
and goes on with the peer's bulk insert over the rest (the batch add), so both run at a
realistic fill and the filter ends full.  The median slice is reported.  Tests run
--repeat times over the same --test-sample keys (median reported); the FPR is one more
pass over all the absent keys.  Times are ns per key.  "ratio" = peer time / ling_bloom
time: above 1 means ling_bloom is faster.  With --rounds N every implementation and the C
floor are measured N times, in turn (all of them, then all of them again), and each cell is
the smallest of its N medians: a burst of other work on this shared machine then spoils one
round of one implementation, not the table.

Before anything is timed every key's Python hash is computed once (as it is for any key
that was used before): peers that use hash() (set, rbloom, abloom) then find it cached.
The garbage collector is off while timing.

Pure-Python peers (pybloom-live, pyprobables) cost microseconds per key: they get a filter
sized for the full n and p but only the first --slow-keys keys are timed, and their FPR is
not measured (the filter is not full).

  python benchmarks/bench_memory.py                # default sizes: 1e6 @ 0.01, 1e7 @ 0.001
  python benchmarks/bench_memory.py --rounds 3     # the README's tables
  python benchmarks/bench_memory.py --quick        # smoke run: small n
  python benchmarks/bench_memory.py --sizes 1e5:0.01,1e6:0.001 --keys short,uuid
  python benchmarks/bench_memory.py --install      # pip-install the peers first (each on
                                                   # its own; a failure is printed, skipped)

Results: the terminal, and --out-dir (benchmarks/results/): bench_memory.md (the tables,
machine and versions), bench_memory.txt (the same as printed), bench_memory.png (chart),
bench_memory.json (raw numbers).
"""
from __future__ import annotations

import argparse
import array
import gc
import importlib
import importlib.metadata
import json
import os
import platform
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from typing import Any, Callable

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

# The `bench` extra: what --install installs (each on its own), and what pyproject lists.
PEER_PACKAGES = [
    "rbloom",
    "abloom",
    "pybloomfiltermmap3",
    "fastbloom-rs",
    "pybloom-live",
    "pyprobables",
    "matplotlib",
]

DEFAULT_SIZES = "1e6:0.01,1e7:0.001"
QUICK_SIZES = "20000:0.01,100000:0.001"


# ---------------------------------------------------------------------------------------
# keys

@dataclass
class KeySet:
    name: str
    label: str
    present: list
    absent: list


def _short_ids(start: int, count: int) -> list[str]:
    return [f"user:{i}" for i in range(start, start + count)]


def _uuids(rnd: random.Random, count: int) -> list[str]:
    """count random version-4-looking UUID strings, built column by column in C."""
    hexb = rnd.randbytes(16 * count).hex().encode()
    out = bytearray(36 * count)
    pos = [i for i in range(36) if i not in (8, 13, 18, 23)]
    for j, i in enumerate(pos):
        out[i::36] = hexb[j::32]
    for i in (8, 13, 18, 23):
        out[i::36] = b"-" * count
    out[14::36] = b"4" * count
    text = out.decode("ascii")
    return [text[i:i + 36] for i in range(0, 36 * count, 36)]


KEY_KINDS = {
    "short": "str, short ids like 'user:123456'",
    "uuid": "str, 36-char UUIDs",
    "short-bytes": "bytes, short ids like b'user:123456'",
    "uuid-bytes": "bytes, 36-char UUIDs",
}


def make_keys(kind: str, n: int, n_absent: int, seed: int) -> KeySet:
    base = kind.split("-")[0]
    if base == "short":
        # Ids from 100000 on: at least 6 digits, like "user:123456".  The absent keys
        # continue the sequence, so the two sets are disjoint.
        present = _short_ids(100_000, n)
        absent = _short_ids(100_000 + n, n_absent)
    else:
        rnd = random.Random(seed)
        present = _uuids(rnd, n)
        absent = _uuids(rnd, n_absent)
        seen = set(present)
        absent = [k for k in absent if k not in seen]  # 2^-122 per pair, but be sure
    if kind.endswith("-bytes"):
        present = [k.encode() for k in present]
        absent = [k.encode() for k in absent]
    for k in present:
        hash(k)
    for k in absent:
        hash(k)
    return KeySet(kind, KEY_KINDS[kind], present, absent)


def write_key_file(path: str, keys: list) -> None:
    """The floor's format: uint64 count, uint32 lengths, the bytes back to back."""
    raw = [k.encode() if isinstance(k, str) else k for k in keys]
    lens = array.array("I", map(len, raw))
    if sys.byteorder != "little":
        lens.byteswap()
    with open(path, "wb") as f:
        f.write(len(raw).to_bytes(8, "little"))
        f.write(lens.tobytes())
        f.write(b"".join(raw))


# ---------------------------------------------------------------------------------------
# the implementations

@dataclass
class Impl:
    name: str
    dist: str | None                      # distribution, for the version
    module: str | None                    # imported to check it is there
    make: Callable[[int, float], Any]     # (n, p) -> filter
    nbytes: Callable[[Any], int]          # the filter's own size, as it reports it
    nbytes_how: str
    batch_add: Callable[[Any, list], None] | None = None
    batch_test: Callable[[Any, list], list] | None = None
    batch_add_name: str = ""
    batch_test_name: str = ""
    slow: bool = False
    reference: bool = False               # not a filter: the bare loop
    kinds: tuple = ("str", "bytes")
    note: str = ""
    mod: Any = None


def _impls() -> list[Impl]:
    def ling_make(n, p):
        import ling_bloom
        return ling_bloom.MemoryFilter(n, p)

    def blocked_make(n, p):
        import ling_bloom
        return ling_bloom.BlockedFilter(n, p)

    def abloom_make(serializable):
        def make(n, p):
            import abloom
            return abloom.BloomFilter(n, p, serializable=serializable)
        return make

    def rbloom_make(n, p):
        import rbloom
        return rbloom.Bloom(n, p)

    def pbf_make(n, p):
        import pybloomfilter
        return pybloomfilter.BloomFilter(n, p)

    def fastbloom_make(n, p):
        import fastbloom_rs
        return fastbloom_rs.FilterBuilder(n, p).build_bloom_filter()

    def fastbloom_add(f, keys):
        if isinstance(keys[0], str):
            f.add_str_batch(keys)
        else:
            f.add_bytes_batch(keys)

    def fastbloom_test(f, keys):
        if isinstance(keys[0], str):
            return f.contains_str_batch(keys)
        return f.contains_bytes_batch(keys)

    def pbl_make(n, p):
        import pybloom_live
        return pybloom_live.BloomFilter(n, p)

    def probables_make(n, p):
        from probables import BloomFilter
        return BloomFilter(est_elements=n, false_positive_rate=p)

    def update(f, keys):
        f.update(keys)

    class BareLoop(tuple):
        """add(k) is tuple.count on an empty tuple, `k in f` tuple's own (empty) contains:
        C methods that do nothing with the key."""
        __slots__ = ()
        add = tuple.count

    return [
        Impl("ling_bloom", "ling_bloom", "ling_bloom", ling_make, lambda f: f.nbytes,
             "nbytes = ceil(m/8)", update, lambda f, ks: f.test_many(ks),
             "update", "test_many"),
        Impl("ling_bloom BlockedFilter", "ling_bloom", "ling_bloom", blocked_make,
             lambda f: f.nbytes, "nbytes = m/8", update, lambda f, ks: f.test_many(ks),
             "update", "test_many",
             note="split-block filter (1 cache line/key), XXH3-64, sized for its own FPR"),
        Impl("abloom", "abloom", "abloom", abloom_make(False), lambda f: f.byte_count,
             "byte_count", update, None, "update",
             note="split-block filter (1 cache line/key), Python hash()"),
        Impl("abloom (xxh64)", "abloom", "abloom", abloom_make(True), lambda f: f.byte_count,
             "byte_count", update, None, "update",
             note="serializable=True: XXH64 of the key's bytes"),
        Impl("rbloom", "rbloom", "rbloom", rbloom_make, lambda f: (f.size_in_bits + 7) // 8,
             "size_in_bits/8", update, None, "update", note="Python hash()"),
        Impl("pybloomfiltermmap3", "pybloomfiltermmap3", "pybloomfilter", pbf_make,
             lambda f: (f.num_bits + 7) // 8, "num_bits/8", update, None, "update"),
        Impl("fastbloom-rs", "fastbloom-rs", "fastbloom_rs", fastbloom_make,
             lambda f: len(f.get_bytes()), "len(get_bytes())", fastbloom_add, fastbloom_test,
             "add_{str,bytes}_batch", "contains_{str,bytes}_batch"),
        Impl("pybloom-live", "pybloom-live", "pybloom_live", pbl_make,
             lambda f: (f.num_bits + 7) // 8, "num_bits/8", slow=True),
        Impl("pyprobables", "pyprobables", "probables", probables_make,
             lambda f: f.bloom_length, "bloom_length", slow=True),
        Impl("set", None, None, lambda n, p: set(), sys.getsizeof,
             "sys.getsizeof (table only)", update, None, "update",
             note="exact; lower bound for membership"),
        Impl("bare loop", None, None, lambda n, p: BareLoop(), lambda f: 0, "-",
             reference=True,
             note="not a filter: the loops calling a C method that ignores the key"),
    ]


def resolve_impls(wanted: set | None) -> tuple[list[Impl], dict[str, str]]:
    """The implementations that import and work on a tiny filter; the others, with why."""
    ok, skipped = [], {}
    for impl in _impls():
        if wanted is not None and impl.name not in wanted and impl.name != "ling_bloom":
            continue
        try:
            if impl.module:
                impl.mod = importlib.import_module(impl.module)
            f = impl.make(1000, 0.01)
            f.add("probe")
            if "probe" not in f and not impl.reference:
                raise RuntimeError("a key just added tests absent")
        except Exception as e:  # any failure to import or to work: skip, say why
            skipped[impl.name] = f"{type(e).__name__}: {e}".splitlines()[0][:200]
            continue
        ok.append(impl)
    return ok, skipped


def version_of(dist: str | None) -> str:
    if dist is None:
        return platform.python_version()
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return "?"


def install_peers() -> None:
    """pip-install every peer on its own, so one that fails to build skips only itself."""
    for pkg in PEER_PACKAGES:
        r = subprocess.run([sys.executable, "-m", "pip", "install", "-q", pkg],
                           capture_output=True, text=True)
        if r.returncode != 0:
            lines = [l for l in (r.stderr or r.stdout).splitlines()
                     if l.strip() and not l.startswith("WARNING: Location")]
            print(f"  install {pkg}: FAILED ({lines[-1] if lines else 'pip exit ' + str(r.returncode)})"
                  " - it will be skipped")
        else:
            print(f"  install {pkg}: ok")


# ---------------------------------------------------------------------------------------
# the C floor

def build_floor(build_dir: str) -> tuple[str | None, str]:
    exe = os.path.join(build_dir, "floor")
    core = os.path.join(ROOT, "csrc", "core")
    srcs = [os.path.join(HERE, "floor.c"), os.path.join(core, "hash.c"),
            os.path.join(core, "bitarray.c"), os.path.join(core, "blocked.c")]
    cc = os.environ.get("CC", "gcc")
    if not shutil.which(cc):
        return None, f"no C compiler ({cc})"
    if os.path.exists(exe) and all(os.path.getmtime(exe) >= os.path.getmtime(s)
                                   for s in srcs + [os.path.join(core, h) for h in
                                                    ("hash.h", "bitarray.h", "blocked.h",
                                                     "common.h")]):
        return exe, ""
    os.makedirs(build_dir, exist_ok=True)
    # The extension's own flags (setup.py): -O3, no -march.
    cmd = [cc, "-O3", "-std=gnu11", "-I", core, "-o", exe, *srcs, "-lxxhash", "-lm"]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        return None, "build failed: " + (r.stderr.strip().splitlines() or ["?"])[-1][:200]
    return exe, ""


def run_floor(exe: str, present: list, sample: list, absent: list, m: int, k: int,
              repeat: int, tmp: str, layout: str = "standard") -> dict:
    files = [os.path.join(tmp, name) for name in ("present.keys", "sample.keys", "absent.keys")]
    for path, keys in zip(files, (present, sample, absent)):
        write_key_file(path, keys)
    try:
        r = subprocess.run([exe, *files, str(m), str(k), "xxh3-mix", str(min(repeat, 64)),
                            layout], capture_output=True, text=True, check=True)
    finally:
        for path in files:
            os.unlink(path)
    return json.loads(r.stdout)


# ---------------------------------------------------------------------------------------
# timing

def rss_bytes() -> int:
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError):
        return 0


def slices(keys: list, parts: int) -> list[list]:
    n = len(keys)
    return [keys[n * i // parts:n * (i + 1) // parts] for i in range(parts)]


def fill_timed(f, parts: list[tuple[list, list]], bulk) -> tuple[float, float | None]:
    """Fill f slice by slice: each slice's first part by `for k in part: f.add(k)`, the
    rest with bulk(f, rest) when the peer has a bulk insert (else the same loop, untimed).
    Returns the median ns per key of the per-key parts and of the bulk parts."""
    loop_t, bulk_t = [], []
    for part, rest in parts:
        t0 = time.perf_counter()
        for k in part:
            f.add(k)
        loop_t.append((time.perf_counter() - t0) / max(1, len(part)))
        if rest:
            if bulk is None:
                for k in rest:
                    f.add(k)
            else:
                t0 = time.perf_counter()
                bulk(f, rest)
                bulk_t.append((time.perf_counter() - t0) / len(rest))
    return (statistics.median(loop_t) * 1e9,
            statistics.median(bulk_t) * 1e9 if bulk_t else None)


def time_test_loop(f, keys: list, repeat: int) -> tuple[float, int]:
    times, hits = [], 0
    for _ in range(repeat):
        hits = 0
        t0 = time.perf_counter()
        for k in keys:
            if k in f:
                hits += 1
        times.append((time.perf_counter() - t0) / max(1, len(keys)))
    return statistics.median(times) * 1e9, hits


def fresh_source(keys: list) -> tuple[list, Callable]:
    """What a request handler starts from, and how it builds the key: a str key from the
    request's bytes (decode), a bytes key from a str (encode)."""
    if keys and isinstance(keys[0], str):
        return [k.encode() for k in keys], bytes.decode
    return [k.decode() for k in keys], str.encode


def time_test_fresh(f, keys: list, repeat: int) -> float:
    """test+ with each key built inside the timed loop: a new object per lookup."""
    src, build = fresh_source(keys)
    times = []
    for _ in range(repeat):
        hits = 0
        t0 = time.perf_counter()
        for s in src:
            if build(s) in f:
                hits += 1
        times.append((time.perf_counter() - t0) / max(1, len(src)))
    return statistics.median(times) * 1e9


def count_hits(f, keys: list) -> int:
    hits = 0
    for k in keys:
        if k in f:
            hits += 1
    return hits


def time_batch_add(f, fn, parts: list[list]) -> float:
    times = []
    for part in parts:
        t0 = time.perf_counter()
        fn(f, part)
        times.append((time.perf_counter() - t0) / max(1, len(part)))
    return statistics.median(times) * 1e9


def time_batch_test(f, fn, keys: list, repeat: int) -> tuple[float, int]:
    times, hits = [], 0
    for _ in range(repeat):
        t0 = time.perf_counter()
        r = fn(f, keys)
        times.append((time.perf_counter() - t0) / max(1, len(keys)))
        hits = sum(1 for x in r if x)
        del r  # freed here, not inside the next timed call
    return statistics.median(times) * 1e9, hits


COLUMNS = [
    ("add", "add"),
    ("test_present", "test+"),
    ("test_absent", "test-"),
    ("test_fresh", "test+ fresh"),
    ("batch_add", "batch add"),
    ("batch_test_present", "batch test+"),
    ("batch_test_absent", "batch test-"),
]


def bench_impl(impl: Impl, ks: KeySet, n: int, p: float, args, sample_present: list,
               sample_absent: list, kind: str) -> list[dict]:
    """Rows for one implementation on one (size, key set)."""
    row: dict[str, Any] = {"impl": impl.name, "note": impl.note}
    present = ks.present
    sp, sa = sample_present, sample_absent
    if impl.slow:
        cap = min(args.slow_keys, n)
        present = present[:cap]
        sp, sa = present[: max(1, cap // 4)], sample_absent[: max(1, cap // 4)]
        row["note"] = (f"pure Python: timed on {cap:,} keys into a filter sized for n; "
                       "FPR not measured")
    # One fill: each of the --repeat slices starts with a per-key part (at most
    # --add-sample keys over all slices, at most half of each slice when the peer has a
    # bulk insert) and goes on with the bulk insert over the rest of the slice.
    parts = []
    for sl in slices(present, args.repeat):
        cut = len(sl) if impl.slow else \
            min(len(sl) if impl.batch_add is None else (len(sl) + 1) // 2,
                max(1, int(args.add_sample) // args.repeat))
        parts.append((sl[:cut], sl[cut:]))
    gc.collect()
    rss0 = rss_bytes()
    f = impl.make(n, p)
    row["add"], batch_add = fill_timed(f, parts, impl.batch_add)
    row["rss_delta"] = rss_bytes() - rss0
    row["nbytes"] = impl.nbytes(f)
    row["nbytes_how"] = impl.nbytes_how
    if batch_add is not None:
        row["batch_add"] = batch_add
        row["batch_add_api"] = impl.batch_add_name
    row["test_present"], hp = time_test_loop(f, sp, args.repeat)
    row["test_absent"], _ = time_test_loop(f, sa, args.repeat)
    row["test_fresh"] = time_test_fresh(f, sp, args.repeat)
    if impl.reference:
        del f
        gc.collect()
        return [row]
    if hp != len(sp) and impl.name != "set":
        row["note"] = (row["note"] + "; " if row["note"] else "") + \
            f"FALSE NEGATIVES: {len(sp) - hp} of {len(sp)}"
    if impl.batch_test is not None:
        row["batch_test_present"], _ = time_batch_test(f, impl.batch_test, sp, args.repeat)
        row["batch_test_absent"], _ = time_batch_test(f, impl.batch_test, sa, args.repeat)
        row["batch_test_api"] = impl.batch_test_name
    if not impl.slow:
        fp = count_hits(f, ks.absent)
        row["fp"] = fp
        row["fpr"] = fp / max(1, len(ks.absent))
        row["absent_count"] = len(ks.absent)
    del f
    gc.collect()
    rows = [row]
    if impl.name == "ling_bloom":
        # add_many: the batch add that returns a list[bool], one per key.
        h = impl.make(n, p)
        extra = {"impl": "ling_bloom add_many", "note": "batch add returning list[bool]",
                 "batch_add": time_batch_add(h, lambda f, ks_: f.add_many(ks_),
                                             slices(present, args.repeat)),
                 "batch_add_api": "add_many"}
        del h
        gc.collect()
        rows.append(extra)
    return rows


TIMED = [c for c, _ in COLUMNS]


def merge_min(best: dict, order: list, row: dict) -> None:
    """Keep, for each implementation's row, the smallest time of each cell over the rounds
    (what the machine allows when nothing else interferes); the rest (memory, FPR, notes)
    is the same in every round and is taken from the first."""
    name = row["impl"]
    if name not in best:
        best[name] = dict(row)
        order.append(name)
        return
    kept = best[name]
    for c in TIMED:
        if row.get(c) is not None and (kept.get(c) is None or row[c] < kept[c]):
            kept[c] = row[c]


FLOOR_ROWS = ("C floor", "BlockedFilter C floor")


def floor_row(res: dict, n_absent: int) -> dict:
    blocked = res.get("layout") == "blocked"
    return {
        "impl": FLOOR_ROWS[blocked],
        "note": ("the split-block layout of csrc/core (BlockedFilter's m and k) via "
                 "benchmarks/floor.c, no Python" if blocked else
                 "csrc/core via benchmarks/floor.c, no Python"),
        "add": res["add"], "test_present": res["test_present"],
        "test_absent": res["test_absent"], "batch_add": res["batch_add"],
        "batch_test_present": res["batch_test_present"],
        "batch_test_absent": res["batch_test_absent"],
        "nbytes": res["nbytes"], "nbytes_how": "m/8",
        "fp": res["hits_absent"], "fpr": res["hits_absent"] / max(1, n_absent),
        "absent_count": n_absent,
    }


# ---------------------------------------------------------------------------------------
# output

def machine_info() -> dict:
    cpu = platform.processor() or "?"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    cc_version = "?"
    try:
        cc_version = subprocess.run([os.environ.get("CC", "gcc"), "--version"],
                                    capture_output=True, text=True).stdout.splitlines()[0]
    except (OSError, IndexError):
        pass
    commit = "?"
    try:
        commit = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"],
                                capture_output=True, text=True).stdout.strip() or "?"
    except OSError:
        pass
    mem = "?"
    try:
        with open("/proc/meminfo") as f:
            mem = f"{int(f.readline().split()[1]) / 2**20:.1f} GiB"
    except (OSError, ValueError, IndexError):
        pass
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "memory": mem,
        "python": f"{platform.python_implementation()} {platform.python_version()}",
        "platform": platform.platform(),
        "compiler": cc_version,
        "ling_bloom_commit": commit,
    }


def load_average() -> str:
    try:
        with open("/proc/loadavg") as f:
            return " ".join(f.read().split()[:3])
    except OSError:
        return "?"


def fmt_ns(v: float | None) -> str:
    if v is None:
        return "-"
    return f"{v:.0f}" if v >= 100 else f"{v:.1f}"


def fmt_cell(v, base) -> str:
    if v is None:
        return "-"
    if base is None or base <= 0:
        return fmt_ns(v)
    return f"{fmt_ns(v)} ({v / base:.2f})"


def fmt_bytes(b: int | None) -> str:
    if b is None:
        return "-"
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if b >= size:
            return f"{b / size:.2f} {unit}"
    return f"{b} B"


def section_table(sec: dict) -> list[list[str]]:
    rows = sec["rows"]
    base = next((r for r in rows if r["impl"] == "ling_bloom"), {})
    header = ["implementation"] + [c[1] for c in COLUMNS] + ["memory (bits/key)", "RSS +", "FPR"]
    out = [header]
    n, p = sec["n"], sec["p"]
    for r in rows:
        cells = [r["impl"]]
        for key, _ in COLUMNS:
            b = base.get(key)
            if r["impl"] == "ling_bloom add_many":
                b = base.get("batch_add")
            cells.append(fmt_ns(r.get(key)) if r["impl"] == "ling_bloom"
                         else fmt_cell(r.get(key), b))
        nb = r.get("nbytes")
        cells.append(f"{fmt_bytes(nb)} ({nb * 8 / n:.2f})" if nb else "-")
        rd = r.get("rss_delta")
        cells.append(fmt_bytes(rd) if rd is not None and rd > 0 else "-")
        if r["impl"] == "set":
            cells.append("0 (exact)")
        elif r["impl"] == "bare loop":
            cells.append("-")
        elif r.get("fpr") is not None:
            cells.append(f"{r['fpr']:.5f} ({(r['fpr'] / p - 1) * 100:+.1f}%)")
        else:
            cells.append("-")
        out.append(cells)
    return out


def render_text(table: list[list[str]]) -> str:
    widths = [max(len(row[i]) for row in table) for i in range(len(table[0]))]
    lines = []
    for j, row in enumerate(table):
        lines.append("  ".join(c.ljust(w) if i == 0 else c.rjust(w)
                               for i, (c, w) in enumerate(zip(row, widths))))
        if j == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)


def render_md(table: list[list[str]]) -> str:
    lines = ["| " + " | ".join(table[0]) + " |",
             "|" + "|".join(["---"] + ["---:"] * (len(table[0]) - 1)) + "|"]
    for row in table[1:]:
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines)


def section_title(sec: dict) -> str:
    return (f"n = {sec['n']:,}, p = {sec['p']}, keys: {sec['keys_label']} "
            f"(ling_bloom m = {sec['m']:,} bits, k = {sec['k']}; "
            f"{sec['absent']:,} absent keys, tests timed on {sec['sample']:,} keys)")


LEGEND = ("ns per key, median of the repetitions (with rounds > 1: the smallest of the rounds' "
          "medians); in parentheses the ratio peer / ling_bloom "
          "(> 1: ling_bloom is faster). batch add: ling_bloom update(), add_many() on its own "
          "row; abloom/rbloom/pybloomfiltermmap3/set update(); fastbloom-rs add_*_batch. "
          "batch test: ling_bloom test_many(), fastbloom-rs contains_*_batch (the others "
          "have none). memory: the filter's own size as it reports it, and bits per key; "
          "RSS +: resident memory growth while the filter was built and filled. FPR: "
          "measured over the absent keys, in parentheses its distance from p. test+ fresh: "
          "test+ with each key built in the loop (str decoded from bytes, bytes encoded "
          "from str), so no hash is cached on it. bare loop: the same loops calling a C "
          "method that ignores the key (what a call costs before any filter work).")


def section_notes(sec: dict) -> list[str]:
    """ling_bloom's batches against the C floor (the same core functions, no Python), and
    its per-key calls against the bare loop."""
    rows = {r["impl"]: r for r in sec["rows"]}
    bare = rows.get("bare loop")
    notes = []
    for name, floor_name in (("ling_bloom", "C floor"),
                             ("ling_bloom BlockedFilter", "BlockedFilter C floor")):
        lb_row, floor = rows.get(name), rows.get(floor_name)
        if lb_row and floor:
            parts = [f"{label} {floor[key] / lb_row[key]:.2f}x"
                     for key, label in (("batch_add", "update"),
                                        ("batch_test_present", "test_many+"),
                                        ("batch_test_absent", "test_many-"))
                     if lb_row.get(key) and floor.get(key)]
            notes.append(f"{name} batches at this fraction of the {floor_name}'s speed "
                         f"(floor time / {name} time): " + ", ".join(parts))
        if lb_row and bare:
            parts = [f"{label} {lb_row[key] - bare[key]:+.1f}"
                     for key, label in (("add", "add"), ("test_present", "test+"),
                                        ("test_absent", "test-"), ("test_fresh", "test+ fresh"))
                     if lb_row.get(key) is not None and bare.get(key) is not None]
            notes.append(f"{name} per key over the bare loop (ns): " + ", ".join(parts))
    return notes


def blocked_table(sections: list[dict]) -> list[str]:
    """The README's "BlockedFilter against abloom" table: per section, BlockedFilter's ns per
    key, then abloom's time / BlockedFilter's for abloom's default and for abloom (xxh64)
    (above 1: BlockedFilter is faster).  Empty when either filter did not run."""
    cols = [("add", "add"), ("test_present", "test (present)"), ("test_absent", "test (absent)"),
            ("test_fresh", "test (present, fresh key)"), ("batch_add", "batch add")]
    lines = []
    for sec in sections:
        rows = {r["impl"]: r for r in sec["rows"]}
        blk, abl, abx = (rows.get("ling_bloom BlockedFilter"), rows.get("abloom"),
                         rows.get("abloom (xxh64)"))
        if not blk or not abl:
            continue
        cells = []
        for key, _ in cols:
            mine = blk.get(key)
            if not mine:
                cells.append("-")
                continue
            ratios = [f"{peer[key] / mine:.2f}" if peer and peer.get(key) else "-"
                      for peer in (abl, abx)]
            cells.append(f"{fmt_ns(mine)}: {' / '.join(ratios)}")
        n, keys = sec["n"], {"short": "`user:N`", "uuid": "UUID",
                             "short-bytes": "`user:N` bytes"}.get(sec["keys"], sec["keys"])
        size = f"1e{len(str(n)) - 1}" if str(n).strip("0") == "1" else f"{n:,}"
        lines.append(f"| {size}, {sec['p'] * 100:g}%, {keys} | " + " | ".join(cells) + " |")
    if not lines:
        return []
    return (["| n, p, keys | " + " | ".join(label for _, label in cols) + " |",
             "|---|" + "---:|" * len(cols)] + lines)


def write_chart(path: str, sections: list[dict]) -> str:
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except Exception as e:
        return f"no chart: matplotlib: {e}"
    ops = [("add", "add"), ("test_present", "test+"), ("test_absent", "test-"),
           ("batch_add", "batch add"), ("batch_test_present", "batch test+")]
    cols = 2 if len(sections) > 1 else 1
    nrows = (len(sections) + cols - 1) // cols
    fig, axes = plt.subplots(nrows, cols, figsize=(8 * cols, 0.5 + 4.2 * nrows), squeeze=False)
    for ax in axes.flat[len(sections):]:
        ax.axis("off")
    for ax, sec in zip(axes.flat, sections):
        impls = [r for r in sec["rows"]]
        names = [r["impl"] for r in impls]
        height = 0.8 / len(ops)
        for j, (key, label) in enumerate(ops):
            ys = [i + (j - (len(ops) - 1) / 2) * height for i in range(len(impls))]
            xs = [r.get(key) or 0 for r in impls]
            ax.barh(ys, xs, height=height, label=label)
        ax.set_yticks(range(len(impls)))
        ax.set_yticklabels(names, fontsize=8)
        ax.invert_yaxis()
        ax.set_xscale("log")
        ax.set_xlabel("ns per key (log scale; shorter is faster)", fontsize=8)
        ax.set_title(f"n={sec['n']:,} p={sec['p']} {sec['keys']}", fontsize=9)
        ax.grid(axis="x", which="both", alpha=0.3)
        ax.tick_params(axis="x", labelsize=8)
    axes.flat[0].legend(fontsize=7, loc="lower right")
    fig.suptitle("ling_bloom.MemoryFilter vs peers", fontsize=11)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return ""


# ---------------------------------------------------------------------------------------
# main

def parse_sizes(text: str) -> list[tuple[int, float]]:
    sizes = []
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        n_s, _, p_s = part.partition(":")
        n = int(float(n_s))
        p = float(p_s) if p_s else 0.01
        if n <= 0 or not 0 < p < 1:
            raise argparse.ArgumentTypeError(f"bad size {part!r}: want N:P with N > 0, 0 < P < 1")
        sizes.append((n, p))
    if not sizes:
        raise argparse.ArgumentTypeError("no sizes")
    return sizes


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", type=parse_sizes, default=None,
                    help=f"comma-separated N:P (default {DEFAULT_SIZES})")
    ap.add_argument("--quick", action="store_true",
                    help=f"smoke run: sizes {QUICK_SIZES}, --repeat 3 (unless given)")
    ap.add_argument("--keys", default="short,uuid,short-bytes",
                    help="key sets, comma-separated, from: " + ", ".join(KEY_KINDS))
    ap.add_argument("--peers", default=None,
                    help="only these implementations (comma-separated names; ling_bloom "
                         "always runs)")
    ap.add_argument("--repeat", type=int, default=None,
                    help="slices per fill / repetitions per test; the median is reported "
                         "(default 3)")
    ap.add_argument("--rounds", type=int, default=1,
                    help="measure every implementation (and the C floor) this many times, "
                         "one after the other in turn, and report each cell's minimum over "
                         "the rounds (default 1)")
    ap.add_argument("--test-sample", type=float, default=5e5,
                    help="present and absent keys the tests are timed on (default 5e5)")
    ap.add_argument("--add-sample", type=float, default=1e6,
                    help="keys added one by one from the Python loop, spread over the "
                         "slices of the fill; the rest go in by the bulk insert (default 1e6)")
    ap.add_argument("--absent", type=float, default=None,
                    help="absent keys for the FPR (default: enough for 2000 expected false "
                         "positives, at least --test-sample, at most n)")
    ap.add_argument("--slow-keys", type=int, default=20_000,
                    help="keys the pure-Python peers add (a quarter of them is tested; "
                         "default 20000)")
    ap.add_argument("--no-floor", action="store_true", help="skip the C floor")
    ap.add_argument("--no-chart", action="store_true", help="skip the PNG chart")
    ap.add_argument("--install", action="store_true",
                    help="pip-install the peers (each on its own) before running")
    ap.add_argument("--out-dir", default=os.path.join(HERE, "results"),
                    help="where the tables and the chart go (default benchmarks/results)")
    ap.add_argument("--name", default="bench_memory", help="base name of the output files")
    ap.add_argument("--seed", type=int, default=20240601)
    args = ap.parse_args(argv)
    if args.sizes is None:
        args.sizes = parse_sizes(QUICK_SIZES if args.quick else DEFAULT_SIZES)
    if args.repeat is None:
        args.repeat = 3
    args.repeat = max(1, min(args.repeat, 64))
    args.rounds = max(1, args.rounds)
    kinds = [k.strip() for k in args.keys.split(",") if k.strip()]
    for k in kinds:
        if k not in KEY_KINDS:
            ap.error(f"unknown key set {k!r}; choose from {', '.join(KEY_KINDS)}")

    if args.install:
        print("installing peers:")
        install_peers()

    started = time.perf_counter()
    wanted = set(x.strip() for x in args.peers.split(",")) if args.peers else None
    impls, skipped = resolve_impls(wanted)
    if not any(i.name == "ling_bloom" for i in impls):
        print(f"ling_bloom does not import: {skipped.get('ling_bloom')}", file=sys.stderr)
        return 1
    import ling_bloom

    floor_exe, floor_why = (None, "--no-floor") if args.no_floor else \
        build_floor(os.path.join(HERE, ".build"))
    if floor_exe is None:
        skipped["C floor"] = floor_why

    info = machine_info()
    info["load_at_start"] = load_average()
    versions = {i.name: version_of(i.dist) for i in impls}
    print(f"machine: {info['cpu']}, {info['cores']} cores, {info['memory']}; "
          f"{info['python']}; {info['compiler']}")
    print("versions: " + ", ".join(f"{k} {v}" for k, v in versions.items()))
    for name, why in skipped.items():
        print(f"SKIPPED {name}: {why}")

    sections = []
    out_text: list[str] = []
    gc.collect()
    gc.freeze()
    gc.disable()
    try:
        for n, p in args.sizes:
            params = ling_bloom.estimate(n, p)
            sample_n = max(1, min(n, int(args.test_sample)))
            n_absent = int(args.absent) if args.absent else max(sample_n, int(2000 / p))
            n_absent = max(1, min(n, n_absent))
            for kind in kinds:
                t0 = time.perf_counter()
                ks = make_keys(kind, n, n_absent, args.seed + n)
                gc.collect()
                gc.freeze()
                step = max(1, n // sample_n)
                sample_present = ks.present[::step][:sample_n]
                sample_absent = ks.absent[:sample_n]
                sec = {"n": n, "p": p, "keys": kind, "keys_label": ks.label,
                       "m": params.m, "k": params.k, "absent": len(ks.absent),
                       "sample": len(sample_present), "rows": []}
                print(f"\n== {section_title(sec)}  [keys made in "
                      f"{time.perf_counter() - t0:.1f} s]", flush=True)
                best: dict[str, dict] = {}  # impl row name -> the row, each time its minimum
                order: list[str] = []
                for rnd in range(args.rounds):
                    if args.rounds > 1:
                        print(f"  round {rnd + 1} of {args.rounds}", flush=True)
                    for impl in impls:
                        if ("bytes" if kind.endswith("-bytes") else "str") not in impl.kinds:
                            continue
                        if impl.name in sec.get("failed", {}):
                            continue
                        t1 = time.perf_counter()
                        try:
                            rows = bench_impl(impl, ks, n, p, args, sample_present,
                                              sample_absent, kind)
                        except Exception as e:
                            why = f"{type(e).__name__}: {e}".splitlines()[0][:160]
                            print(f"  {impl.name}: FAILED on {kind} keys: {why}")
                            sec.setdefault("failed", {})[impl.name] = why
                            gc.collect()
                            continue
                        for row in rows:
                            merge_min(best, order, row)
                        print(f"  {impl.name}: {time.perf_counter() - t1:.1f} s", flush=True)
                    floors = [("standard", params.m, params.k)]
                    if any(i.name == "ling_bloom BlockedFilter" for i in impls):
                        floors.append(("blocked",) + tuple(ling_bloom.BlockedFilter.geometry(n, p)))
                    for layout, fm, fk in floors if floor_exe else ():
                        t1 = time.perf_counter()
                        name = FLOOR_ROWS[layout == "blocked"]
                        with tempfile.TemporaryDirectory(prefix="lb-floor-") as tmp:
                            try:
                                res = run_floor(floor_exe, ks.present, sample_present,
                                                ks.absent, fm, fk, args.repeat, tmp, layout)
                                merge_min(best, order, floor_row(res, len(ks.absent)))
                                print(f"  {name}: {time.perf_counter() - t1:.1f} s", flush=True)
                            except (subprocess.CalledProcessError, ValueError, OSError) as e:
                                print(f"  {name}: FAILED: {e}")
                # The floors go right after ling_bloom's own rows.
                sec["rows"] = [best[name] for name in order if name not in FLOOR_ROWS]
                idx = 0
                while idx < len(sec["rows"]) and sec["rows"][idx]["impl"].startswith("ling_bloom"):
                    idx += 1
                sec["rows"][idx:idx] = [best[name] for name in FLOOR_ROWS if name in best]
                table = section_table(sec)
                text = section_title(sec) + "\n" + render_text(table)
                notes = section_notes(sec)
                if notes:
                    text += "\n" + "\n".join(notes)
                print("\n" + text, flush=True)
                out_text.append(text)
                sections.append(sec)
                del ks, sample_present, sample_absent
                gc.unfreeze()
                gc.collect()
                gc.freeze()
    finally:
        gc.enable()
        gc.unfreeze()

    elapsed = time.perf_counter() - started
    info["load_at_end"] = load_average()
    os.makedirs(args.out_dir, exist_ok=True)
    base = os.path.join(args.out_dir, args.name)
    cmd = "python benchmarks/bench_memory.py" + (" " + " ".join(argv if argv is not None
                                                               else sys.argv[1:])).rstrip()
    head = [
        f"command: {cmd}",
        f"machine: {info['cpu']}, {info['cores']} cores, {info['memory']}, {info['platform']}",
        f"python: {info['python']}; compiler: {info['compiler']}; "
        f"ling_bloom commit {info['ling_bloom_commit']}",
        "versions: " + ", ".join(f"{k} {v}" for k, v in versions.items()),
        f"repeat: {args.repeat}; rounds: {args.rounds}; run time {elapsed:.0f} s; "
        f"load average (1/5/15 min) "
        f"{info['load_at_start']} at the start, {info['load_at_end']} at the end "
        f"(other work on the machine shows here)",
    ]
    head += [f"skipped {k}: {v}" for k, v in skipped.items()]
    with open(base + ".txt", "w") as f:
        f.write("\n".join(head) + "\n\n" + LEGEND + "\n\n" + "\n\n".join(out_text) + "\n")
    md = ["# ling_bloom.MemoryFilter against the peers", ""]
    md += [f"- {h}" for h in head]
    md += ["", LEGEND, ""]
    for sec in sections:
        md += [f"## {section_title(sec)}", "", render_md(section_table(sec)), ""]
        md += [f"- {line}" for line in section_notes(sec)]
        for name, why in sec.get("failed", {}).items():
            md += [f"- {name} failed: {why}"]
        notes = [f"- {r['impl']}: {r['note']}" for r in sec["rows"] if r.get("note")]
        md += notes + [""]
    table = blocked_table(sections)
    if table:
        md += ["## BlockedFilter against abloom", "",
               "BlockedFilter's ns per key: abloom's time / BlockedFilter's, for abloom's default "
               "(Python's cached `hash()`) / abloom (xxh64); above 1: BlockedFilter is faster.",
               ""] + table + [""]
    with open(base + ".md", "w") as f:
        f.write("\n".join(md))
    with open(base + ".json", "w") as f:
        json.dump({"machine": info, "versions": versions, "skipped": skipped,
                   "repeat": args.repeat, "rounds": args.rounds, "command": cmd, "elapsed_s": elapsed,
                   "sections": sections}, f, indent=1)
    chart_why = "--no-chart" if args.no_chart else write_chart(base + ".png", sections)
    print(f"\nwrote {base}.md, {base}.txt, {base}.json" +
          ("" if chart_why else f", {base}.png") + (f" ({chart_why})" if chart_why else ""))
    print(f"total {elapsed:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
