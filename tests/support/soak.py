"""make soak: run the deployment tests N times, each round a fresh pytest process, and print
how often each test failed.

    python tests/support/soak.py N [pytest args...] -- FILE...

A round's results are read from its JUnit XML report (a test that failed in its setup or
teardown counts as failed); the table lists every test that failed at least once, with
failures/N, then the number of rounds whose pytest run did not complete (it hung, crashed,
or reported an error outside any test).  Exit status 1 when anything failed.
"""
from __future__ import annotations

import collections
import os
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET


def round_failures(xml_path: str) -> tuple:
    """(ids of the tests that failed or errored, number of tests run) from a JUnit report."""
    failed, total = set(), 0
    for case in ET.parse(xml_path).getroot().iter("testcase"):
        total += 1
        cls, name = case.get("classname", ""), case.get("name", "")
        test_id = f"{cls.replace('.', '/')}.py::{name}" if cls else name
        if case.find("failure") is not None or case.find("error") is not None:
            failed.add(test_id)
    return failed, total


def main(argv: list) -> int:
    n = int(argv[0])
    rest = argv[1:]
    if "--" in rest:
        i = rest.index("--")
        pytest_args, files = rest[:i], rest[i + 1:]
    else:
        pytest_args, files = [], rest
    fails: collections.Counter = collections.Counter()
    broken = 0
    with tempfile.TemporaryDirectory(prefix="lb-soak-") as d:
        for r in range(1, n + 1):
            xml = os.path.join(d, f"round{r}.xml")
            start = time.monotonic()
            p = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                                f"--junitxml={xml}", *pytest_args, *files],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            tail = (p.stdout.strip().splitlines() or ["(no output)"])[-1]
            if not os.path.exists(xml):
                broken += 1
                print(f"round {r}/{n}: no report (exit {p.returncode}): {tail}", flush=True)
                print(p.stdout[-3000:], flush=True)
                continue
            failed, total = round_failures(xml)
            fails.update(failed)
            if p.returncode not in (0, 1) or (p.returncode == 1 and not failed):
                broken += 1
            print(f"round {r}/{n}: {total} tests, {len(failed)} failed, exit {p.returncode}, "
                  f"{time.monotonic() - start:.0f} s: {tail}", flush=True)
            for t in sorted(failed):
                print(f"    failed: {t}", flush=True)
    print()
    print(f"soak: {n} rounds of {' '.join(files)}")
    if fails:
        width = max(len(t) for t in fails)
        print(f"{'test':<{width}}  failures/N")
        for t, c in sorted(fails.items(), key=lambda kv: (-kv[1], kv[0])):
            print(f"{t:<{width}}  {c}/{n}")
    else:
        print("no test failed")
    print(f"rounds that did not complete normally: {broken}/{n}")
    return 1 if fails or broken else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
