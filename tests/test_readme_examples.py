"""Every ```python block of README.md is a test.

A block marked ```python file=NAME is a file of the Django example: it must stand, to the
letter, in docs/integrations.md, whose test builds the project around it and runs it.  Every
other block runs as a script in a fresh interpreter (REDIS_URL points at a private
redis-server for the Redis example, REDIS_TLS_URL and REDIS_TLS_CA at a TLS one,
REDIS_SENTINEL_URL at a sentinel, REDIS_CLUSTER_URL at a real cluster).
"""
from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from redis_server import in_ci

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text(encoding="utf-8")
DOCS = (ROOT / "docs" / "integrations.md").read_text(encoding="utf-8")
_BLOCK = re.compile(r"^```python(?:[ \t]+file=(\S+))?[ \t]*\n(.*?)^```[ \t]*$", re.S | re.M)
BLOCKS = [(m.group(1), m.group(2), README.count("\n", 0, m.start()) + 1)
          for m in _BLOCK.finditer(README)]
OPTIONAL = {"flask": "flask", "starlette": "asgi"}


def test_the_readme_has_its_examples():
    names = [name for name, _, _ in BLOCKS]
    assert "settings_ling_bloom.py" in names
    scripts = [code for name, code, _ in BLOCKS if name is None]
    assert any("RedisFilter" in c for c in scripts)
    assert any("Guard(" in c for c in scripts)
    assert any("flask" in c for c in scripts) and any("starlette" in c for c in scripts)


@pytest.mark.parametrize("name,code", [(n, c) for n, c, _ in BLOCKS if n],
                         ids=[n for n, _, _ in BLOCKS if n])
def test_project_files_are_the_tested_ones(name, code):
    assert f"```python file={name}\n{code}```" in DOCS


@pytest.mark.parametrize("code", [c for n, c, _ in BLOCKS if n is None],
                         ids=[f"line{line}" for n, _, line in BLOCKS if n is None])
def test_script_runs(code, tmp_path, request):
    modules = set(re.findall(r"^\s*(?:from|import)\s+([A-Za-z_]\w*)", code, re.M))
    for mod, extra in OPTIONAL.items():
        if mod in modules and importlib.util.find_spec(mod) is None:
            if in_ci():
                pytest.fail(f"{mod} not installed: CI=true needs ling_bloom[{extra}]")
            pytest.skip(f"{mod} not installed (ling_bloom[{extra}])")
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    if "REDIS_URL" in code:
        server = request.getfixturevalue("clean_redis")
        env["REDIS_URL"] = server.url
    if "REDIS_TLS_URL" in code:  # the TLS example: a --tls-port server and its CA
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
    script = tmp_path / "example.py"
    script.write_text(code, encoding="utf-8")
    proc = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, f"exit {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
