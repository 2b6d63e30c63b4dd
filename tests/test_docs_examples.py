"""Every ```python block of docs/integrations.md runs, as written, in a fresh interpreter.

Plain blocks run as scripts.  Blocks marked ```python file=NAME are the files of the Django
example: they are written into a project (settings_ling_bloom.py is appended to a base
settings module) and check.py runs in it against a SQLite database.

A block that needs an optional framework skips when it is not installed -- except under
CI=true, where the test extra must have installed it.
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from redis_server import in_ci

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "integrations.md"

_BLOCK = re.compile(r"^```python(?:[ \t]+file=(\S+))?[ \t]*\n(.*?)^```[ \t]*$", re.S | re.M)
_OPTIONAL = {"flask": "flask", "starlette": "asgi", "prometheus_client": "prometheus",
             "django": "django", "httpx2": "asgi", "fastapi": "test"}


def blocks():
    text = DOC.read_text(encoding="utf-8")
    out = []
    for m in _BLOCK.finditer(text):
        heading = [h for h in re.findall(r"^## (.+)$", text[: m.start()], re.M)][-1:]
        out.append((m.group(1), m.group(2), heading[0] if heading else "top",
                    text.count("\n", 0, m.start()) + 1))
    return out


def _needs(code):
    mods = set(re.findall(r"^\s*(?:from|import)\s+([A-Za-z_]\w*)", code, re.M))
    if "starlette" in mods:
        mods.add("httpx2")
    return sorted(m for m in mods if m in _OPTIONAL)


def _require(modules):
    import importlib.util

    missing = [m for m in modules if importlib.util.find_spec(m) is None]
    if "httpx2" in missing and importlib.util.find_spec("httpx") is not None:
        missing.remove("httpx2")
    if missing:
        extras = sorted({_OPTIONAL[m] for m in missing})
        reason = f"{', '.join(missing)} not installed (ling_bloom[{','.join(extras)}])"
        if in_ci():
            pytest.fail(f"{reason} -- CI=true: the test extra must install it")
        pytest.skip(reason)


def _run(args, cwd, env_extra=None):
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), str(cwd), env.get("PYTHONPATH")]))
    env.update(env_extra or {})
    proc = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=300,
                          stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, f"exit {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    return proc


SCRIPTS = [(code, heading, line) for name, code, heading, line in blocks() if name is None]
FILES = {name: code for name, code, _, _ in blocks() if name is not None}


def test_the_doc_has_examples():
    assert len(SCRIPTS) >= 5
    assert {"settings_ling_bloom.py", "shop/models.py", "shop/views.py", "urls.py",
            "check.py"} <= set(FILES)


@pytest.mark.parametrize("code,heading,line", SCRIPTS,
                         ids=[f"line{line}-{re.sub(r'[^a-z]+', '-', h.lower()).strip('-')}"
                              for _, h, line in SCRIPTS])
def test_example_runs(code, heading, line, tmp_path, request):
    _require(_needs(code))
    script = tmp_path / "example.py"
    script.write_text(code, encoding="utf-8")
    env = {}
    if "REDIS_URL" in code:  # a private redis-server for the Redis examples
        env["REDIS_URL"] = request.getfixturevalue("clean_redis").url
    _run([sys.executable, str(script)], tmp_path, env)


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
    proc = _run([sys.executable, "run.py"], tmp_path)
    assert "django example ok" in proc.stdout
    assert (tmp_path / "products.bloom").exists()  # the warm-up saved the filter to FILE
