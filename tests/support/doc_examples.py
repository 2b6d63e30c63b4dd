"""The code blocks of README.md and docs/*.md, and how the tests run each kind.

Every fenced block has a language, and each language has one treatment:

    ```python              runs as a script in a fresh interpreter (cwd: an empty temporary
                           directory).  REDIS_URL in the code gets a private redis-server,
                           REDIS_BLOOM_URL one with the RedisBloom module, REDIS_TLS_URL and
                           REDIS_TLS_CA a TLS one and its CA, REDIS_SENTINEL_URL a primary and a
                           sentinel, REDIS_CLUSTER_URL a real cluster of 3 primaries.
    ```python file=NAME    a file of the Django example project (docs/integrations.md), built
                           and run by tests/docs/test_docs_examples.py::test_django_example.
    ```console             a shell session: each "$ command" runs (bash, in a temporary
                           directory, `python` being this interpreter) and the lines after it
                           are its output; "..." alone on a line stands for any lines, and
                           "..." inside a line for any text.
    ```bash                commands a reader types that install packages or run for minutes
                           (make, pip, apt-get, the benchmarks): each line is checked, not run:
                           a make target must exist in the Makefile, a pip extra in
                           pyproject.toml, a script's path in the repository, a
                           `python manage.py` command one that ling_bloom's Django app
                           ships, and `python -m ling_bloom ...` must parse with the command
                           line's own parser.
    ```text                output or a picture (a file tree), not code: nothing to run.

Any other block, or a block without a language, fails the tests.
"""
from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"

_FENCE = re.compile(r"^(?P<indent>[ \t]*)```(?P<info>[^\n`]*)\n(?P<body>.*?)^(?P=indent)```[ \t]*$",
                    re.S | re.M)
KINDS = {"python", "console", "bash", "text"}
OPTIONAL = {"flask": "flask", "starlette": "asgi", "prometheus_client": "prometheus",
            "django": "django", "httpx2": "asgi", "fastapi": "test", "redis": "redis",
            "numpy": "columns", "pyarrow": "columns", "pandas": "columns", "polars": "columns"}


@dataclass
class Block:
    page: str          # "README.md" or "docs/filters.md"
    line: int          # 1-based line of the opening fence
    lang: str          # "python", "console", "bash", "text" (or what the page wrote)
    file: Optional[str]  # NAME of ```python file=NAME
    code: str
    heading: str

    @property
    def id(self) -> str:
        slug = re.sub(r"[^a-z0-9]+", "-", self.heading.lower()).strip("-")[:40]
        return f"{self.page}:{self.line}-{slug}"


def pages() -> List[Path]:
    return [ROOT / "README.md"] + sorted(p for p in DOCS.rglob("*.md") if "_ext" not in p.parts)


def blocks(path: Path) -> List[Block]:
    text = path.read_text(encoding="utf-8")
    out = []
    for m in _FENCE.finditer(text):
        info = m.group("info").strip().split()
        lang = info[0] if info else ""
        file = None
        for opt in info[1:]:
            if opt.startswith("file="):
                file = opt[5:]
        body = m.group("body")
        indent = m.group("indent")
        if indent:
            body = "\n".join(l[len(indent):] if l.startswith(indent) else l
                             for l in body.split("\n"))
        before = text[: m.start()]
        heads = re.findall(r"^#{1,4} (.+)$", before, re.M)
        out.append(Block(str(path.relative_to(ROOT)), before.count("\n") + 1, lang, file, body,
                         heads[-1] if heads else "top"))
    return out


def blocks_of_text(text: str, page: str = "?") -> List[Block]:
    """The blocks of a piece of Markdown (a section of a page)."""
    out = []
    for m in _FENCE.finditer(text):
        info = m.group("info").strip().split()
        out.append(Block(page, text.count("\n", 0, m.start()) + 1, info[0] if info else "",
                         None, m.group("body"), "?"))
    return out


def all_blocks() -> List[Block]:
    return [b for p in pages() for b in blocks(p)]


def needs(code: str) -> List[str]:
    mods = set(re.findall(r"^\s*(?:from|import)\s+([A-Za-z_]\w*)", code, re.M))
    if "starlette" in mods:
        mods.add("httpx2")
    return sorted(m for m in mods if m in OPTIONAL)


def missing_modules(modules: List[str]) -> List[str]:
    import importlib.util

    missing = [m for m in modules if importlib.util.find_spec(m) is None]
    if "httpx2" in missing and importlib.util.find_spec("httpx") is not None:
        missing.remove("httpx2")
    return missing


# The names in a block's code that make python_env start servers for it.
SERVER_NAMES = ("REDIS_URL", "REDIS_BLOOM_URL", "REDIS_TLS_URL", "REDIS_SENTINEL_URL",
                "REDIS_CLUSTER_URL")


def python_env(code: str, request, tmp_path: Path) -> Dict[str, str]:
    """The environment a ```python block runs in: PYTHONPATH to this checkout, and the
    servers its REDIS_* names ask for, started through the tests' fixtures."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    env.pop("MPLBACKEND", None)
    env["MPLBACKEND"] = "Agg"
    if "REDIS_URL" in code:
        env["REDIS_URL"] = request.getfixturevalue("clean_redis").url
    if "REDIS_BLOOM_URL" in code:
        server = request.getfixturevalue("bf_server_factory")()
        env["REDIS_BLOOM_URL"] = server.url
    if "REDIS_TLS_URL" in code:  # a --tls-port server and its CA
        from tls_certs import make_certs, server_args

        certs = make_certs(str(tmp_path))
        server = request.getfixturevalue("redis_server_factory")(server_args(certs), tls=True)
        env["REDIS_TLS_URL"] = server.url
        env["REDIS_TLS_CA"] = certs["ca"]
    if "REDIS_SENTINEL_URL" in code:  # a primary (with RedisBloom) and a sentinel
        from redis_server import SentinelServer

        module = request.getfixturevalue("redisbloom_module")
        primary = request.getfixturevalue("redis_server_factory")(["--loadmodule", module])
        sentinel = SentinelServer("mymaster", primary.port)
        sentinel.start()
        request.addfinalizer(sentinel.stop)
        env["REDIS_SENTINEL_URL"] = f"redis+sentinel://{sentinel.host}:{sentinel.port}/mymaster"
    if "REDIS_CLUSTER_URL" in code:  # 3 primaries with a replica each, RedisBloom loaded
        from redis_server import RedisClusterServers

        module = request.getfixturevalue("redisbloom_module")
        cluster = RedisClusterServers(3, 1, extra_args=["--loadmodule", module]).start()
        request.addfinalizer(cluster.stop)
        env["REDIS_CLUSTER_URL"] = cluster.url
    return env


def markers(block: Block) -> List[str]:
    """The pytest markers of a block's test (tests/conftest.py adds them): ``redis`` for a
    ```python block that asks python_env for any server, ``cluster`` for a cluster."""
    if block.lang != "python":
        return []
    out = []
    if any(name in block.code for name in SERVER_NAMES):
        out.append("redis")
    if "REDIS_CLUSTER_URL" in block.code:
        out.append("cluster")
    return out


def run_python(code: str, cwd: Path, env: Dict[str, str]) -> subprocess.CompletedProcess:
    script = cwd / "example.py"
    script.write_text(code, encoding="utf-8")
    return subprocess.run([sys.executable, str(script)], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=300, stdin=subprocess.DEVNULL)


# ---- ```console ---------------------------------------------------------------------------

def console_steps(code: str) -> List["tuple[str, List[str]]"]:
    """[(command, expected output lines)] of a console block."""
    steps: List[tuple] = []
    for line in code.rstrip("\n").split("\n"):
        if line.startswith("$ "):
            steps.append((line[2:], []))
        elif steps:
            steps[-1][1].append(line)
        elif line.strip():
            raise AssertionError(f"a console block starts with output, not '$ ': {line!r}")
    return steps


def output_matches(expected: List[str], actual: List[str]) -> bool:
    """Lines match with "..." alone standing for any lines and "..." in a line for any text."""
    def line_re(pattern: str) -> "re.Pattern[str]":
        return re.compile("^" + ".*".join(re.escape(p) for p in pattern.split("...")) + "$")

    def match(i: int, j: int) -> bool:
        if i == len(expected):
            return j == len(actual)
        if expected[i].strip() == "...":
            return any(match(i + 1, jj) for jj in range(j, len(actual) + 1))
        return j < len(actual) and bool(line_re(expected[i].rstrip()).match(actual[j].rstrip())) \
            and match(i + 1, j + 1)

    return match(0, 0)


def console_env(cwd: Path) -> Dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    bindir = cwd / ".bin"
    bindir.mkdir(exist_ok=True)
    # `python` (and `ling-bloom`) in a block mean this interpreter and this checkout.
    # A script, not a symlink: a venv's python found through a symlink elsewhere does not
    # see its pyvenv.cfg, so it would run without the venv's site-packages (the installed
    # wheel, when the suite runs against one).
    (bindir / "python").write_text(f"#!/bin/sh\nexec {shlex.quote(sys.executable)} \"$@\"\n")
    (bindir / "python").chmod(0o755)
    (bindir / "ling-bloom").write_text(f"#!/bin/sh\nexec {shlex.quote(sys.executable)} -m ling_bloom \"$@\"\n")
    (bindir / "ling-bloom").chmod(0o755)
    env["PATH"] = f"{bindir}{os.pathsep}{env.get('PATH', '')}"
    env["COLUMNS"] = "100"
    return env


# ---- ```bash ------------------------------------------------------------------------------

def makefile_targets() -> set:
    text = (ROOT / "Makefile").read_text(encoding="utf-8")
    return set(re.findall(r"^([A-Za-z][\w.-]*)\s*:(?!=)", text, re.M))


def pyproject_extras() -> set:
    text = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    section = text.split("[project.optional-dependencies]", 1)[1].split("\n[", 1)[0]
    return set(re.findall(r"^([A-Za-z][\w-]*)\s*=", section, re.M))


def check_bash_line(line: str) -> Optional[str]:
    """None when the command is one the repository has; else what is wrong."""
    line = line.split(" #", 1)[0].strip()
    if not line or line.startswith("#"):
        return None
    words = shlex.split(line)
    while words and (re.match(r"^[A-Z_]+=", words[0]) or words[0] in ("sudo", "cd")):
        if words[0] == "cd":
            words = words[2:] if len(words) > 2 and words[2] == "&&" else words[2:]
            if words and words[0] == "&&":
                words = words[1:]
            continue
        words = words[1:]
    if not words:
        return None
    cmd = words[0]
    if cmd.endswith("/python"):  # .venv/bin/python
        cmd = words[0] = "python"
    if cmd == "make":
        missing = [t for t in words[1:] if "=" not in t and t not in makefile_targets()]
        return f"no make target {missing}" if missing else None
    if cmd in ("pip", "python", "python3") and "install" in words:
        extras = set()
        for w in words[words.index("install") + 1:]:
            m = re.search(r"\[([\w,-]+)\]", w)
            if m:
                extras |= set(m.group(1).split(","))
        unknown = extras - pyproject_extras()
        return f"no extra {sorted(unknown)} in pyproject.toml" if unknown else None
    if cmd in ("python", "python3"):
        if words[1:3] == ["-m", "ling_bloom"]:
            from ling_bloom.__main__ import build_parser

            try:
                build_parser().parse_args(words[3:])
            except SystemExit as e:
                return f"the command line refuses it (exit {e.code})"
            return None
        if words[1] == "-m":
            return None
        if words[1] == "manage.py":  # a Django project's: the command must be one we ship
            # the command module of the ling_bloom that is imported (a checkout or a wheel)
            import importlib.util

            pkg = "ling_bloom.contrib.django_app.management.commands"
            ok = len(words) > 2 and (
                words[2] in ("check", "migrate", "runserver", "shell")
                or importlib.util.find_spec(f"{pkg}.{words[2]}") is not None)
            return None if ok else f"no management command {words[2:3]}"
        path = ROOT / words[1]
        return None if path.exists() else f"no file {words[1]}"
    if cmd in ("git", "apt-get", "redis-server", "gunicorn", "uvicorn", "flask", "jupyter",
               "open", "xdg-open", "ling-bloom"):
        if cmd == "ling-bloom":
            from ling_bloom.__main__ import build_parser

            try:
                build_parser().parse_args(words[1:])
            except SystemExit as e:
                return f"the command line refuses it (exit {e.code})"
        return None
    return f"unknown command {cmd!r}: say in tests/support/doc_examples.py how to check it"
