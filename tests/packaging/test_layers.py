"""The layers of csrc/ call one way: py -> redis -> core, and never up into the package.

Read from the source tree (skipped where it is absent, as against an installed wheel):

- no file of csrc/ imports ling_bloom (the package hands the binding what it needs at
  import, ``_core._set_hooks``);
- every ``#include "..."`` resolves to one file of csrc/ (every header folder is on the
  include path, so a name must be unique) and never reaches up a layer (core includes
  neither redis nor py; redis does not include py);
- no include cycle: between headers, nor between modules.  A module is a file's stem; a
  file named ``<module>_<part>`` beside a ``<module>.c`` or ``<module>.h`` is one of that
  module's parts (bitmap_bulk.c and bitmap_op.h are bitmap's, resp_reader.c resp's).
  A module whose file includes another's header calls it, so a cycle of modules is a
  cycle of calls.
"""
from __future__ import annotations

import re
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Dict, List, Set

import pytest

import ling_bloom

ROOT = Path(__file__).resolve().parents[2]
CSRC = ROOT / "csrc"
LAYERS = ("core", "redis", "py")  # bottom up: a layer includes only its own and those below

pytestmark = pytest.mark.skipif(not (CSRC / "core").is_dir(), reason="no source tree")

INCLUDE = re.compile(r'^[ \t]*#[ \t]*include[ \t]*"([^"]+)"', re.M)

# Cycles between modules that are known and left (none: the factory that makes nodes and
# clusters is factory.c, apart from the client interface; a cycle found is a failure).
KNOWN_CYCLES: List[Set[str]] = []


def c_files() -> Dict[str, Path]:
    files: Dict[str, Path] = {}
    for layer in LAYERS:
        for p in sorted((CSRC / layer).iterdir()):
            if p.suffix in (".c", ".h"):
                files.setdefault(p.name, p)
    return files


def includes(path: Path) -> List[str]:
    return INCLUDE.findall(path.read_text(encoding="utf-8", errors="replace"))


def layer_of(path: Path) -> str:
    return path.parent.name


def module_of(path: Path) -> str:
    stem = path.stem
    head = stem.split("_", 1)[0]
    if head != stem and any((path.parent / (head + ext)).exists() for ext in (".c", ".h")):
        stem = head
    return f"{layer_of(path)}/{stem}"


def cycles(edges: Dict[str, Set[str]]) -> List[Set[str]]:
    """The strongly connected components of more than one node (Tarjan, iterative)."""
    index: Dict[str, int] = {}
    low: Dict[str, int] = {}
    stack: List[str] = []
    on_stack: Set[str] = set()
    found: List[Set[str]] = []
    nodes = sorted(set(edges) | {w for ws in edges.values() for w in ws})
    for root in nodes:
        if root in index:
            continue
        work = [(root, iter(sorted(edges.get(root, ()))))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(edges.get(w, ())))))
                elif w in on_stack:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = set()
                while True:
                    x = stack.pop()
                    on_stack.discard(x)
                    comp.add(x)
                    if x == v:
                        break
                if len(comp) > 1:
                    found.append(comp)
    return found


def module_edges() -> Dict[str, Set[str]]:
    files = c_files()
    edges: Dict[str, Set[str]] = {}
    for path in files.values():
        a = module_of(path)
        for name in includes(path):
            if name in files:
                b = module_of(files[name])
                if a != b:
                    edges.setdefault(a, set()).add(b)
    return edges


# ---- the binding never imports the package ---------------------------------------------

IMPORT_CALL = re.compile(r"PyImport_\w+\s*\(([^;]*)", re.S)


def test_no_file_of_csrc_imports_ling_bloom():
    offenders = []
    for path in c_files().values():
        text = path.read_text(encoding="utf-8", errors="replace")
        for m in IMPORT_CALL.finditer(text):
            if "ling_bloom" in m.group(1):
                line = text.count("\n", 0, m.start()) + 1
                offenders.append(f"{path.relative_to(ROOT)}:{line}: {m.group(0).strip()}")
    assert not offenders, ("the binding imports the package that wraps it; hand it the "
                           "callable at import instead (_core._set_hooks):\n"
                           + "\n".join(offenders))


def test_the_import_check_sees_an_import():
    text = 'static PyObject *f(void) { return PyImport_ImportModule("ling_bloom._io"); }'
    assert IMPORT_CALL.search(text) and "ling_bloom" in IMPORT_CALL.search(text).group(1)


def test_the_core_module_without_its_package_says_so():
    """_core loaded on its own (not through ling_bloom, which hands the hooks over), in a
    process of its own: what needs a hook raises RuntimeError naming it, never a crash."""
    script = textwrap.dedent("""
        import importlib.machinery, importlib.util, os, sys
        import pytest
        loader = importlib.machinery.ExtensionFileLoader("_core", sys.argv[1])
        spec = importlib.util.spec_from_file_location("_core", sys.argv[1], loader=loader)
        bare = importlib.util.module_from_spec(spec)
        loader.exec_module(bare)
        assert "ling_bloom" not in sys.modules
        f = bare.MemoryFilter(100, 0.01)
        with pytest.raises(RuntimeError, match="html hook"):
            f._repr_html_()
        with pytest.raises(RuntimeError, match="atomic_write hook"):
            f.save(os.devnull)
        with pytest.raises(RuntimeError, match="read_file hook"):
            bare.MemoryFilter.load(os.devnull)
        with pytest.raises(TypeError, match="unknown hook"):
            bare._set_hooks(nonsense=print)
        with pytest.raises(TypeError, match="callable"):
            bare._set_hooks(html=1)
        bare._set_hooks(html=lambda f: "shown")
        assert f._repr_html_() == "shown"
        print("ok")
    """)
    out = subprocess.run([sys.executable, "-c", script, ling_bloom._core.__file__],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr


# ---- includes ----------------------------------------------------------------------------

def test_every_header_name_is_unique_across_csrc():
    seen: Dict[str, Path] = {}
    dupes = []
    for layer in LAYERS:
        for p in (CSRC / layer).iterdir():
            if p.name in seen:
                dupes.append(f"{seen[p.name].relative_to(ROOT)} and {p.relative_to(ROOT)}")
            seen[p.name] = p
    assert not dupes, "every header folder is on the include path: " + "; ".join(dupes)


def test_no_include_reaches_up_a_layer():
    files = c_files()
    up = []
    for path in files.values():
        for name in includes(path):
            target = files.get(name)
            if target and LAYERS.index(layer_of(target)) > LAYERS.index(layer_of(path)):
                up.append(f"{path.relative_to(ROOT)} includes {target.relative_to(ROOT)}")
    assert not up, "an include reaches up a layer:\n" + "\n".join(up)


def test_no_header_include_cycle():
    files = c_files()
    edges = {name: {n for n in includes(p) if n in files and n != name}
             for name, p in files.items() if p.suffix == ".h"}
    assert cycles(edges) == []


def test_no_module_cycle_but_the_known_one():
    found = cycles(module_edges())
    new = [c for c in found if c not in KNOWN_CYCLES]
    assert not new, f"a cycle of calls between modules of csrc/: {new}"
    gone = [c for c in KNOWN_CYCLES if c not in found]
    assert not gone, f"no longer a cycle (remove it from KNOWN_CYCLES): {gone}"


def test_no_module_cycle_at_all():
    assert cycles(module_edges()) == []


def test_the_cycle_finder_finds_a_cycle_and_the_layer_rule_names_parts():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [{"a", "b", "c"}]
    assert cycles({"a": {"b"}, "b": set()}) == []
    assert module_of(CSRC / "redis" / "bitmap_op.h") == "redis/bitmap"
    assert module_of(CSRC / "redis" / "resp_reader.c") == "redis/resp"
    assert module_of(CSRC / "py" / "redis_common.c") == "py/redis_common"


# ---- the saved file's header is read in one place ----------------------------------------

HEADER_INDEX = re.compile(r"\b(?:head|base|data|view)\s*\[\s*(?:[4-7]|20)\s*(?::\s*\d+\s*)?\]")


def test_only_format_c_reads_the_header_layout():
    """format.c reads the saved header (lb_format_peek, _core.peek_header for Python); no
    other file spells its magic or indexes its kind, version or flags bytes."""
    offenders = []
    sources = [p for p in c_files().values()  # the Redis client has no saved files
               if layer_of(p) != "redis" and p.name not in ("format.c", "format.h")]
    sources += sorted((ROOT / "ling_bloom").rglob("*.py"))
    for path in sources:
        text = path.read_text(encoding="utf-8", errors="replace")
        for n, line in enumerate(text.splitlines(), 1):
            if "LBLM" in line or HEADER_INDEX.search(line):
                offenders.append(f"{path.relative_to(ROOT)}:{n}: {line.strip()}")
    assert not offenders, "the header read outside format.c:\n" + "\n".join(offenders)


# ---- comments name what exists ------------------------------------------------------------

COMMENT = re.compile(r"/\*.*?\*/|//[^\n]*", re.S)
STRING = re.compile(r'"(?:\\.|[^"\\\n])*"')
FILE_NAME = re.compile(r"\b([A-Za-z_][\w/]*\.(?:c|h|py|pyi|inc))\b")
C_NAME = re.compile(r"\b((?:lb|LB)_[A-Za-z0-9_]*[A-Za-z0-9])\b(?!\*)")
# Files of the libraries csrc/ builds on, named where their code is used or copied.
ELSEWHERE = {"Python.h", "hiredis.h", "read.c", "net.c", "ssl.h"}


def comments() -> List[tuple]:
    out = []
    for path in c_files().values():
        text = path.read_text(encoding="utf-8", errors="replace")
        for m in COMMENT.finditer(text):
            out.append((path, text.count("\n", 0, m.start()) + 1, m.group(0)))
    return out


def test_the_files_csrc_comments_name_exist():
    repo = {p.name for p in ROOT.rglob("*") if p.is_file() and ".git" not in p.parts}
    gone = [f"{p.relative_to(ROOT)}:{n}: {name}" for p, n, text in comments()
            for name in FILE_NAME.findall(text)
            if Path(name).name not in repo and Path(name).name not in ELSEWHERE]
    assert not gone, "comments name files that do not exist:\n" + "\n".join(gone)


def test_the_c_names_csrc_comments_give_exist():
    code = set()
    for path in c_files().values():
        text = path.read_text(encoding="utf-8", errors="replace")
        code |= set(re.findall(r"\b\w+\b", STRING.sub(" ", COMMENT.sub(" ", text))))
    gone = [f"{p.relative_to(ROOT)}:{n}: {name}" for p, n, text in comments()
            for name in C_NAME.findall(text) if name not in code]
    assert not gone, "comments name functions or constants that do not exist:\n" + "\n".join(gone)
