"""Typing: the stubs match the built module, the filters satisfy the Protocols at run time and
for mypy, and `mypy --strict` passes on tests/support/typing_example.py."""
from __future__ import annotations

import ast
import importlib.util
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import ling_bloom as lb
from ling_bloom import _core

ROOT = Path(__file__).resolve().parents[2]
# The package as imported: the source tree, or an installed wheel (packaging/check_wheel.sh
# runs the suite against one), whose stubs and py.typed are what users get.
PKG = Path(lb.__file__).resolve().parent
STUB = PKG / "_core.pyi"


def _stub_tree() -> ast.Module:
    return ast.parse(STUB.read_text("utf-8"))


def _stub_classes() -> dict[str, ast.ClassDef]:
    return {n.name: n for n in _stub_tree().body if isinstance(n, ast.ClassDef)}


def _stub_members(name: str, classes: dict[str, ast.ClassDef]) -> set[str]:
    """Names a stub class declares, with those of its bases declared in the stub."""
    cls = classes[name]
    out: set[str] = set()
    for node in cls.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            out.add(node.name)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            out.add(node.target.id)
    for base in cls.bases:
        if isinstance(base, ast.Name) and base.id in classes:
            out |= _stub_members(base.id, classes)
    return out


def _runtime_public(obj: object) -> set[str]:
    return {a for a in dir(obj) if not a.startswith("_")}


def test_stub_declares_every_public_name_of_the_module():
    top: set[str] = set()
    for node in _stub_tree().body:
        if isinstance(node, (ast.ClassDef, ast.FunctionDef)):
            top.add(node.name)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            top.add(node.target.id)
    runtime = _runtime_public(_core)
    assert runtime - top == set(), "in the module but not in _core.pyi"
    public_stub = {n for n in top if not n.startswith("_")}
    assert public_stub - runtime == set(), "in _core.pyi but not in the module"


@pytest.mark.parametrize(
    "name", ["MemoryFilter", "BlockedFilter", "CountingFilter", "ScalableFilter", "RedisFilter",
             "RedisBloomFilter"]
)
def test_stub_class_matches_the_type(name):
    classes = _stub_classes()
    declared = _stub_members(name, classes)
    runtime_type = getattr(_core, name)
    runtime = _runtime_public(runtime_type)
    assert runtime - declared == set(), f"{name}: in the type but not in the stub"
    assert {n for n in declared if not n.startswith("_")} - runtime == set(), (
        f"{name}: in the stub but not in the type")
    for dunder in ("__enter__", "__exit__", "__contains__"):
        assert dunder in declared and hasattr(runtime_type, dunder)


def test_stub_exceptions_have_the_runtime_bases():
    classes = _stub_classes()
    for name, node in classes.items():
        runtime = getattr(_core, name, None)
        if not (isinstance(runtime, type) and issubclass(runtime, BaseException)):
            continue
        stub_bases = [b.id for b in node.bases if isinstance(b, ast.Name)]
        assert stub_bases == [b.__name__ for b in runtime.__bases__], name


def test_package_exports_resolve():
    for name in lb.__all__:
        assert hasattr(lb, name), name
    assert (PKG / "py.typed").exists()


def test_filters_satisfy_the_protocols_at_run_time():
    mf = lb.MemoryFilter(100)
    cf = lb.CountingFilter(100)
    sf = lb.ScalableFilter(100)
    bf = lb.BlockedFilter(100)
    for f in (mf, cf, sf, bf):
        assert isinstance(f, lb.Filter)
        assert isinstance(f, lb.Batcher)
    assert isinstance(cf, lb.Remover)
    assert not isinstance(mf, lb.Remover)
    assert not isinstance(sf, lb.Remover)
    assert not isinstance(bf, lb.Remover)
    assert not isinstance(object(), lb.Filter)
    for f in (mf, cf, sf, bf):
        f.close()


def test_typing_example_runs():
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    r = subprocess.run([sys.executable, str(ROOT / "tests" / "support" / "typing_example.py")],
                       capture_output=True, text=True, env=env, timeout=60)
    assert r.returncode == 0, r.stderr


def _mypy(tmp_path: Path, *files: str, cwd: Path = ROOT,
          mypypath: Path | None = ROOT) -> subprocess.CompletedProcess[str]:
    if importlib.util.find_spec("mypy") is None:
        pytest.skip("mypy is not installed (pip install mypy, or the package's test extra)")
    env = dict(os.environ)
    env.pop("MYPYPATH", None)
    if mypypath is not None:
        env["MYPYPATH"] = str(mypypath)
    return subprocess.run(
        # silent: check the files named here; the package's own modules are followed for their
        # types (as for an installed package) but their errors are not this test's subject
        [sys.executable, "-m", "mypy", "--strict", "--follow-imports=silent",
         "--cache-dir", str(tmp_path / "cache"), *files],
        capture_output=True, text=True, cwd=cwd, env=env, timeout=300,
    )


def test_mypy_strict_passes_on_the_example(tmp_path):
    r = _mypy(tmp_path, "tests/support/typing_example.py")
    assert r.returncode == 0, r.stdout + r.stderr


def test_mypy_strict_passes_on_the_core_package_modules(tmp_path):
    """The modules that sit on the stubs (the public names, Protocols, theory, file helpers)
    type-check strictly against them."""
    # A copy of the package as imported (source tree or installed wheel), checked where
    # nothing else named ling_bloom is on mypy's path.
    src = tmp_path / "src"
    shutil.copytree(PKG, src / "ling_bloom", ignore=shutil.ignore_patterns("*.so", "__pycache__"))
    r = _mypy(tmp_path, "ling_bloom/__init__.py", "ling_bloom/_protocols.py",
              "ling_bloom/theory.py", "ling_bloom/_io.py", cwd=src, mypypath=None)
    assert r.returncode == 0, r.stdout + r.stderr


def test_mypy_sees_through_the_stubs(tmp_path):
    """The stubs are really used: wrong uses are mypy errors (so the passing example means
    something), and the Protocol assignments hold or fail as they should."""
    bad = tmp_path / "bad_example.py"
    bad.write_text(textwrap.dedent(
        """
        import ling_bloom as lb
        from ling_bloom import Remover, Filter

        mf = lb.MemoryFilter(100)
        r: Remover = mf                      # line 6: MemoryFilter cannot remove
        f: Filter = lb.CountingFilter(10)    # fine
        s: str = mf.add("x")                 # line 8: add returns bool
        mf.add(5.0)                          # line 9: not a key (an int is)
        lb.ScalableFilter(10).remove("x")    # line 10: ScalableFilter cannot remove
        c: lb.CountingFilter = lb.CountingFilter.from_bytes(b"")
        m: lb.MemoryFilter = lb.CountingFilter.from_bytes(b"")  # line 12
        """
    ))
    r = _mypy(tmp_path, str(bad))
    out = r.stdout
    assert r.returncode == 1, out
    lines = {int(part.split(":")[1]) for part in out.splitlines() if part.startswith(str(bad))
             and ": error:" in part}
    assert lines == {6, 8, 9, 10, 12}, out
