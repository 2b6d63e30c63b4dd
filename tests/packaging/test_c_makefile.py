"""tests/c/Makefile: flags given on the command line add to what the C tests need.

`make -C tests/c test CFLAGS=...` (a sanitizer build, say) used to replace the Makefile's
own flags, dropping what the tests need (then -DLB_TEST_BITMAP, and with it every bitmap
test), silently.  A dry run (make -n, nothing is built) shows the compile command of the
bitmap tests.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess

import pytest

C_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "c")


def compile_command(*make_args: str) -> str:
    if not shutil.which("make") or not shutil.which("pkg-config"):
        pytest.skip("make and pkg-config are needed")
    out = subprocess.run(["make", "-B", "-n", "-C", C_DIR, "test_bitmap", *make_args],
                         capture_output=True, text=True, check=True).stdout
    lines = [ln for ln in out.splitlines() if "-o test_bitmap" in ln]
    assert len(lines) == 1, out
    return lines[0]


@pytest.mark.parametrize("make_args", [
    (),
    ("CFLAGS=-O0 -g -fsanitize=address,undefined",),
    ("CFLAGS=-O1", "LDLIBS=-lpthread", "LDFLAGS=-fsanitize=address"),
])
def test_user_flags_add_to_the_test_flags(make_args):
    cmd = compile_command(*make_args)
    for needed in ("test_bitmap.c", "-std=c99", "-I../../csrc/redis", "-I../../csrc/core",
                   "-lhiredis", "-lm", "csrc/redis/bitmap.c"):
        assert needed in cmd, (needed, cmd)
    for arg in make_args:
        for flag in arg.split("=", 1)[1].split():
            assert flag in cmd, (flag, cmd)


def makefile_programs() -> set:
    text = open(os.path.join(C_DIR, "Makefile"), encoding="utf-8").read()
    m = re.search(r"^PROGRAMS\s*:=\s*((?:.*\\\n)*.*)$", text, re.M)
    assert m, "no PROGRAMS in tests/c/Makefile"
    return set(m.group(1).replace("\\\n", " ").split())


def test_the_sdist_and_git_leave_out_exactly_the_c_test_programs():
    """MANIFEST.in's excludes and .gitignore name the programs tests/c/Makefile builds,
    and no program it no longer builds."""
    root = os.path.dirname(os.path.dirname(C_DIR))
    programs = {f"tests/c/{p}" for p in makefile_programs()}
    manifest = open(os.path.join(root, "MANIFEST.in"), encoding="utf-8").read()
    excluded = {w for line in manifest.splitlines() if line.startswith("exclude ")
                for w in line.split()[1:] if w.startswith("tests/c/")}
    assert excluded == programs
    ignored = {line.strip().lstrip("/") for line in
               open(os.path.join(root, ".gitignore"), encoding="utf-8")
               if line.strip().lstrip("/").startswith("tests/c/test_")}
    assert ignored == programs


def test_make_test_builds_and_runs_every_c_test_program_once():
    """`make -C tests/c test` (a dry run: nothing is built or run) compiles each
    tests/c/test_*.c into its program once and runs each program once."""
    if not shutil.which("make") or not shutil.which("pkg-config"):
        pytest.skip("make and pkg-config are needed")
    out = subprocess.run(["make", "-B", "-n", "-C", C_DIR, "test"],
                         capture_output=True, text=True, check=True).stdout
    sources = sorted(f[:-2] for f in os.listdir(C_DIR)
                     if f.startswith("test_") and f.endswith(".c"))
    built = sorted(m.group(1) for m in re.finditer(r"-o (test_\w+) ", out))
    assert built == sources, out
    loop = [ln for ln in out.splitlines() if ln.startswith("for p in ")]
    assert len(loop) == 1, out
    ran = loop[0].split(" in ", 1)[1].split(";", 1)[0].split()
    assert sorted(ran) == sources, loop[0]
