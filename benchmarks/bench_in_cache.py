"""Per-key cost with the filter in cache: what a call costs when memory is not the limit.

    python benchmarks/bench_in_cache.py

A filter of 1,000 keys (about 1.2 KB; a BlockedFilter too) is tested 1,000,000 times from a
Python loop; the peers that are installed (abloom, rbloom) and a Python set do the same.  ns per call, best
of 5.  For reference, the same loops calling C that ignores the key: `key in ()` (an empty
tuple's contains) for `in`, `e.count(key)` on an empty tuple for a method call like
`f.add(key)`, and the loop alone.

    python benchmarks/bench_in_cache.py --perf

Where the time of one call goes: each loop (MemoryFilter and BlockedFilter, `key in f` for
present and absent keys and `f.add(key)`, and the bare loops) runs in a child process under
`perf record` (Linux perf, when installed), and every symbol's share of the samples is
turned into ns per call: the interpreter (libpython), hashing (XXH3), probing (the bit and
block walks), the binding's glue (key conversion, entering the filter, the result) and
the rest.  The child times its own loop, so the shares add up to the time measured there.
"""
from __future__ import annotations

import argparse
import importlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable, Dict, List

import ling_bloom as lb


def best(fn: Callable[[], object], calls: int) -> float:
    times = []
    for _ in range(5):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times) / calls * 1e9


def main() -> None:
    base = [f"user:{i}" for i in range(1000)]
    keys: List[str] = base * 1000
    rows = []
    f = lb.MemoryFilter(1000, 0.01)
    f.update(base)
    rows.append(("ling_bloom: key in f", best(lambda: [k in f for k in keys], len(keys))))
    rows.append(("ling_bloom: f.add(key)", best(lambda: [f.add(k) for k in keys], len(keys))))
    bf = lb.BlockedFilter(1000, 0.01)
    bf.update(base)
    rows.append(("BlockedFilter: key in f", best(lambda: [k in bf for k in keys], len(keys))))
    rows.append(("BlockedFilter: f.add(key)", best(lambda: [bf.add(k) for k in keys], len(keys))))
    for module, make in (("abloom", lambda m: m.BloomFilter(1000, 0.01)),
                         ("rbloom", lambda m: m.Bloom(1000, 0.01))):
        try:
            peer = make(importlib.import_module(module))
        except ImportError:
            print(f"{module}: not installed (pip install '.[bench]'), skipped")
            continue
        peer.update(base)
        rows.append((f"{module}: key in f", best(lambda: [k in peer for k in keys], len(keys))))
    s = set(base)
    rows.append(("set: key in s", best(lambda: [k in s for k in keys], len(keys))))
    e = ()
    rows.append(("bare: key in ()", best(lambda: [k in e for k in keys], len(keys))))
    rows.append(("bare: e.count(key)", best(lambda: [e.count(k) for k in keys], len(keys))))
    rows.append(("the loop alone", best(lambda: [k for k in keys], len(keys))))
    for name, ns in rows:
        print(f"{name:26s} {ns:6.1f} ns")


# --perf ------------------------------------------------------------------------------

# (label, filter type or None, operation); the child builds the keys and the filter.
PERF_LOOPS = [
    ("MemoryFilter: key in f (present)", "MemoryFilter", "in+"),
    ("MemoryFilter: key in f (absent)", "MemoryFilter", "in-"),
    ("MemoryFilter: f.add(key)", "MemoryFilter", "add"),
    ("BlockedFilter: key in f (present)", "BlockedFilter", "in+"),
    ("BlockedFilter: key in f (absent)", "BlockedFilter", "in-"),
    ("BlockedFilter: f.add(key)", "BlockedFilter", "add"),
    ("bare: key in ()", None, "in+"),
    ("bare: e.count(key)", None, "add"),
]

CHILD = r"""
import sys, time
import ling_bloom as lb
kind, op, rounds = sys.argv[1], sys.argv[2], int(sys.argv[3])
base = [f"user:{i}" for i in range(1000)]
absent = [f"user:{i}" for i in range(1000, 2000)]
keys = (absent if op == "in-" else base) * 1000
f = getattr(lb, kind)(1000, 0.01) if kind != "-" else ()
if kind != "-":
    f.update(base)
def run_in(keys=keys, f=f):
    for k in keys:
        if k in f:
            pass
def run_add(keys=keys, f=f):
    if isinstance(f, tuple):
        for k in keys:
            f.count(k)
    else:
        for k in keys:
            f.add(k)
run = run_add if op == "add" else run_in
t0 = time.perf_counter()
for _ in range(rounds):
    run()
print((time.perf_counter() - t0) / (rounds * len(keys)) * 1e9)
"""

# Symbol -> part of the call, by name (the first match wins); anything else: "other".
PARTS = [
    ("hashing", ("XXH", "lb_hash", "hash_and_key")),
    # BlockedFilter's per-key functions (add_key_avx2, ...) hash the key's short part inline:
    # what they take is counted as probing.
    ("probing", ("test_pair", "add_pair", "lb_bits_", "blocked", "_avx2", "_portable",
                 "add_key", "test_key", "add_one", "test_one")),
    ("glue", ("MemoryFilter_", "BlockedFilter_", "lb_key", "lb_enter", "lb_leave", "lb_base")),
]


def classify(dso: str, symbol: str) -> str:
    if "_core" in dso:
        for part, prefixes in PARTS:
            if any(symbol.startswith(p) or p in symbol for p in prefixes):
                return part
        return "glue"
    if "libpython" in dso or dso.startswith("python"):
        return "interpreter"
    if "kernel" in dso:
        return "kernel"
    return "other"


def perf_breakdown(rounds: int) -> int:
    if not shutil.which("perf"):
        print("perf is not installed (Debian: apt-get install linux-perf): no breakdown")
        return 1
    child_env = dict(os.environ)
    child_env["PYTHONPATH"] = os.pathsep.join(
        [str(Path(__file__).resolve().parent.parent), child_env.get("PYTHONPATH", "")])
    print(f"ns per call, split by where perf's samples fell ({rounds} x 1,000,000 calls each)")
    print(f"{'loop':36s} {'total':>6s} {'interp':>7s} {'hash':>6s} {'probe':>6s} "
          f"{'glue':>6s} {'kernel+other':>12s}")
    with tempfile.TemporaryDirectory() as tmp:
        data = os.path.join(tmp, "perf.data")
        for label, kind, op in PERF_LOOPS:
            rec = subprocess.run(
                ["perf", "record", "-q", "-o", data, "--", sys.executable, "-c", CHILD,
                 kind or "-", op, str(rounds)],
                capture_output=True, text=True, env=child_env)
            if rec.returncode != 0:
                print(f"{label}: perf record failed: {rec.stderr.strip()[:200]}")
                return 1
            total = float(rec.stdout.split()[-1])
            rep = subprocess.run(
                ["perf", "report", "-i", data, "--stdio", "--sort", "dso,symbol",
                 "--percent-limit", "0", "-F", "overhead,dso,symbol"],
                capture_output=True, text=True)
            shares: Dict[str, float] = {}
            for line in rep.stdout.splitlines():
                if not line.strip() or line.lstrip().startswith("#"):
                    continue
                # "  12.34%  dso  [.] symbol  ..." ([k] for the kernel)
                parts = line.split()
                if len(parts) < 4 or not parts[0].endswith("%") or parts[2] not in ("[.]", "[k]"):
                    continue
                pct = float(parts[0].rstrip("%"))
                dso, symbol = parts[1], parts[3]
                part = classify(dso, symbol)
                shares[part] = shares.get(part, 0.0) + pct
            ns = {part: total * pct / 100 for part, pct in shares.items()}
            rest = ns.get("kernel", 0.0) + ns.get("other", 0.0)
            print(f"{label:36s} {total:6.1f} {ns.get('interpreter', 0):7.1f} "
                  f"{ns.get('hashing', 0):6.1f} {ns.get('probing', 0):6.1f} "
                  f"{ns.get('glue', 0):6.1f} {rest:12.1f}")
    print("(setup -- building the keys and the filter -- is in the samples too: a few percent,"
          " mostly interpreter and kernel)")
    return 0


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--perf", action="store_true",
                    help="split each call's time by where perf's samples fell")
    ap.add_argument("--rounds", type=int, default=10, help="--perf: rounds of 1,000,000 calls")
    a = ap.parse_args()
    if a.perf:
        sys.exit(perf_breakdown(a.rounds))
    main()
