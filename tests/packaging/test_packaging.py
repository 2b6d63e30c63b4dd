"""Packaging: the version the package reports, its metadata, and where it is imported from.

The version is written once (ling_bloom/_version.py); the installed metadata, the
CHANGELOG's newest heading and ``ling_bloom.__version__`` must all say the same.
packaging/check_wheel.sh runs the whole suite against an installed wheel with
LING_BLOOM_EXPECT_PREFIX set to that venv: then the package must come from there,
never from the source tree.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest

import ling_bloom

ROOT = Path(__file__).resolve().parents[2]


def test_version_is_a_release_number():
    assert re.fullmatch(r"\d+\.\d+\.\d+(?:(?:a|b|rc)\d+)?", ling_bloom.__version__)


def test_installed_metadata_has_the_packages_version():
    assert metadata.version("ling_bloom") == ling_bloom.__version__


def test_changelog_names_the_version_first():
    text = (ROOT / "CHANGELOG.md").read_text("utf-8")
    first = re.search(r"^## (\S+)", text, re.M)
    assert first is not None, "CHANGELOG.md has no release heading"
    assert first.group(1) == ling_bloom.__version__


def test_license_metadata_is_the_spdx_expression_of_the_license_file():
    meta = metadata.metadata("ling_bloom")
    assert meta["License-Expression"] == "MIT"
    assert "LICENSE" in meta.get_all("License-File", [])
    assert (ROOT / "LICENSE").read_text("utf-8").startswith("MIT License")


def test_imported_from_the_expected_place():
    prefix = os.environ.get("LING_BLOOM_EXPECT_PREFIX")
    here = Path(ling_bloom.__file__).resolve()
    if not prefix:
        # the source tree's own run (make test): the package is the one beside tests/
        if (ROOT / "ling_bloom" / "__init__.py").exists():
            assert here == (ROOT / "ling_bloom" / "__init__.py").resolve()
            return
        pytest.skip("LING_BLOOM_EXPECT_PREFIX not set and no source package beside tests/")
    assert here.is_relative_to(Path(prefix).resolve()), (here, prefix)
    assert not (ROOT / "ling_bloom").exists(), "the source package is beside the tests"


def test_the_asgi_extra_installs_what_starlettes_testclient_imports():
    # Before: `pip install 'ling_bloom[asgi]'` then the README's ASGI example failed at
    # `from starlette.testclient import TestClient` (httpx missing; Starlette does not require it).
    reqs = metadata.requires("ling_bloom") or []
    asgi = [r for r in reqs if re.search(r"extra\s*==\s*['\"]asgi['\"]", r)]
    names = {re.match(r"[A-Za-z0-9_.-]+", r).group(0).lower() for r in asgi}
    assert {"starlette", "httpx2", "httpx"} <= names, asgi


def test_importing_the_package_loads_neither_asyncio_nor_ssl(tmp_path):
    # A script or a WSGI worker that imports ling_bloom for its filters pays for nothing
    # else: the asyncio filters (ling_bloom.aio: asyncio, ssl) and the guard load on first
    # use.  A fresh interpreter, importing the same package as this one.
    pkg_parent = str(Path(ling_bloom.__file__).parent.parent)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (pkg_parent, env.get("PYTHONPATH")) if p)
    code = (
        "import sys, ling_bloom\n"
        "print(ling_bloom.__file__)\n"
        "print(sorted(m for m in ('asyncio', 'ssl', 'ling_bloom.aio', 'ling_bloom.guard') "
        "if m in sys.modules))\n"
        "from ling_bloom import AsyncRedisFilter, AsyncRedisBloomFilter, Guard\n"
        "print(AsyncRedisFilter.__module__, AsyncRedisBloomFilter.__module__, Guard.__module__)\n"
        "print(ling_bloom.aio.AsyncRedisFilter is AsyncRedisFilter)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    where, loaded, modules, same = out.stdout.splitlines()
    assert where == ling_bloom.__file__
    assert loaded == "[]", f"import ling_bloom loaded {loaded}"
    assert modules == "ling_bloom.aio ling_bloom.aio ling_bloom.guard"
    assert same == "True"


def test_dir_lists_the_names_loaded_on_first_use_without_loading_them(tmp_path):
    # dir() (what tab completion and help() read) names every public name, the lazy
    # ones too, and listing them imports nothing.
    pkg_parent = str(Path(ling_bloom.__file__).parent.parent)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (pkg_parent, env.get("PYTHONPATH")) if p)
    code = (
        "import rlcompleter, sys, ling_bloom\n"
        "names = dir(ling_bloom)\n"
        "print(sorted(set(ling_bloom.__all__) - set(names)), 'aio' in names)\n"
        "print(sorted(m for m in ('asyncio', 'ssl', 'ling_bloom.aio', 'ling_bloom.guard') "
        "if m in sys.modules))\n"
        "c = rlcompleter.Completer({'ling_bloom': ling_bloom})\n"
        "print(sorted(c.attr_matches('ling_bloom.AsyncRedis')))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    missing, loaded, completed = out.stdout.splitlines()
    assert missing == "[] True", f"not in dir(ling_bloom): {missing}"
    assert loaded == "[]", f"dir(ling_bloom) loaded {loaded}"
    assert "ling_bloom.AsyncRedisFilter(" in completed, completed
    assert "ling_bloom.AsyncRedisBloomFilter(" in completed, completed


def _setup_py_extension():
    """The Extension that setup.py declares, read without building anything."""
    import runpy

    # setup.py is the source tree's; a venv of CPython 3.12+ has no setuptools of its
    # own, so the test extra brings it (make every-python installs only the wheel's extra)
    import setuptools

    seen = {}
    real = setuptools.setup
    setuptools.setup = lambda **kw: seen.update(kw)
    cwd = os.getcwd()
    try:
        os.chdir(ROOT)
        runpy.run_path(str(ROOT / "setup.py"), run_name="setup_probe")
    finally:
        os.chdir(cwd)
        setuptools.setup = real
    (ext,) = seen["ext_modules"]
    return ext


@pytest.mark.skipif(not (ROOT / "setup.py").exists() or not (ROOT / "csrc").is_dir(),
                    reason="no setup.py and csrc/ beside tests/")
def test_setup_py_compiles_every_c_file_under_csrc():
    # Sources are found, not listed: a file moved into a new folder of csrc/ is still built,
    # and every folder there holding a header is on the include path.
    ext = _setup_py_extension()
    on_disk = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "csrc").rglob("*.c"))
    assert sorted(ext.sources) == on_disk
    header_dirs = {str(p.parent.relative_to(ROOT)) for p in (ROOT / "csrc").rglob("*.h")}
    assert header_dirs <= set(ext.include_dirs)


@pytest.mark.skipif(not (ROOT / "setup.py").exists() or not (ROOT / "csrc").is_dir(),
                    reason="no setup.py and csrc/ beside tests/")
@pytest.mark.parametrize("value, expected", [("3", 3), (" 2 ", 2), ("abc", None), ("0", None),
                                             ("-1", None), ("1.5", None)])
def test_setup_py_build_jobs_is_a_whole_number_or_a_clear_error(monkeypatch, value, expected):
    import runpy

    import setuptools

    monkeypatch.setattr(setuptools, "setup", lambda **kw: None)
    monkeypatch.chdir(ROOT)
    jobs = runpy.run_path(str(ROOT / "setup.py"), run_name="setup_probe")["build_jobs"]
    monkeypatch.setenv("LING_BLOOM_BUILD_JOBS", value)
    if expected is not None:
        assert jobs() == expected
    else:
        with pytest.raises(SystemExit, match="LING_BLOOM_BUILD_JOBS=.*whole number"):
            jobs()
    monkeypatch.delenv("LING_BLOOM_BUILD_JOBS")
    assert jobs() >= 1


@pytest.mark.skipif(not (ROOT / "packaging" / "sources.lock").exists(), reason="no packaging/")
def test_sources_lock_pins_every_file_of_each_library_by_sha256():
    # The wheels' and the sdist's C libraries come from these Debian source packages only,
    # and so does the free-threaded CPython of make python-ft (python3.13): each one's
    # .dsc, upstream tarball (and its upstream signature, where Debian carries one:
    # OpenSSL's and CPython's .asc) and Debian changes, each with its SHA-256.  Redis 8.0,
    # a server of the tests and in no wheel, by its upstream tarball alone
    # (packaging/redis8.sh).
    rows = [line.split() for line in (ROOT / "packaging" / "sources.lock").read_text().splitlines()
            if line.strip() and not line.startswith("#")]
    libs = {}
    for name, version, digest, filename in rows:
        assert re.fullmatch(r"[0-9a-f]{64}", digest), (name, digest)
        libs.setdefault(name, {"versions": set(), "files": []})
        libs[name]["versions"].add(version)
        libs[name]["files"].append(filename)
    assert set(libs) == {"hiredis", "xxhash", "openssl", "redis", "python3.13"}
    redis = libs.pop("redis")
    assert len(redis["versions"]) == 1 and re.fullmatch(r"redis_8\.0\.\d+\.orig\.tar\.gz",
                                                         "".join(redis["files"])), redis
    for name, lib in libs.items():
        assert len(lib["versions"]) == 1, (name, lib["versions"])
        files = lib["files"]
        signatures = [f for f in files if ".orig.tar." in f and f.endswith(".asc")]
        assert len(files) - len(signatures) == 3 and len(signatures) <= 1, files
        assert any(f.endswith(".dsc") for f in files), files
        assert any(".orig.tar." in f for f in files) and any(".debian.tar." in f for f in files), files


@pytest.mark.skipif(not (ROOT / "setup.py").exists(), reason="no setup.py beside tests/")
def test_parallel_compile_leaves_a_compiler_without_distutils_parts_as_it_is():
    # The parallel compile drives a compiler through distutils' own steps; a compiler class
    # that lacks them (another setuptools, a custom one) keeps its compile(), one at a time.
    import runpy

    import setuptools

    real = setuptools.setup
    setuptools.setup = lambda **kw: None
    cwd = os.getcwd()
    try:
        os.chdir(ROOT)
        g = runpy.run_path(str(ROOT / "setup.py"), run_name="setup_probe")
    finally:
        os.chdir(cwd)
        setuptools.setup = real

    class Bare:
        def compile(self, sources, **kw):
            return ["one.o"]

    bare = Bare()
    g["compile_in_parallel"](bare, 4)
    assert "compile" not in vars(bare) and bare.compile(["a.c"]) == ["one.o"]

    class Full(Bare):
        def _setup_compile(self, *a):
            return None, ["a.o"], None, None, {"a.o": ("a.c", ".c")}

        def _get_cc_args(self, *a):
            return []

        def _compile(self, obj, *a):
            built.append(obj)

    built = []
    full = Full()
    g["compile_in_parallel"](full, 4)
    assert full.compile(["a.c"]) == ["a.o"] and built == ["a.o"]


def _redis8_script(*args: str, cache: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, LING_BLOOM_CACHE=str(cache))
    return subprocess.run(["bash", str(ROOT / "packaging" / "redis8.sh"), *args], env=env,
                          capture_output=True, text=True, timeout=60)


@pytest.mark.skipif(not (ROOT / "packaging" / "redis8.sh").exists(), reason="no packaging/")
def test_the_tests_find_redis8_where_its_build_keyed_by_the_pin_put_it(tmp_path, monkeypatch):
    # Redis 8.0 for the tests is cached by the SHA-256 of the tarball the lock pins (a new
    # pin builds anew), counts as built only once its build finished (.ok), and the tests
    # find it there without being told (LING_BLOOM_REDIS8_SERVER overrides).
    pin = next(line.split() for line in (ROOT / "packaging" / "sources.lock").read_text()
               .splitlines() if line.startswith("redis "))
    bin_dir = Path(_redis8_script("--dir", cache=tmp_path).stdout.strip())
    assert bin_dir.parent.parent == tmp_path / "redis"
    assert bin_dir.parent.name.startswith(f"redis-8.0.2-{pin[2][:12]}-")
    assert _redis8_script("--path", cache=tmp_path).returncode == 1  # not built
    bin_dir.mkdir(parents=True)
    server = bin_dir / "redis-server"
    server.write_text("#!/bin/sh\necho 'Redis server v=8.0.2'\n")
    server.chmod(0o755)
    assert _redis8_script("--path", cache=tmp_path).returncode == 1  # a build under way
    (bin_dir.parent / ".ok").touch()
    assert _redis8_script("--path", cache=tmp_path).stdout.strip() == str(bin_dir)

    import redis_server  # tests/support, on sys.path by conftest.py

    monkeypatch.setenv("LING_BLOOM_CACHE", str(tmp_path))
    monkeypatch.delenv(redis_server.REDIS8_ENV, raising=False)
    monkeypatch.setattr(redis_server, "_redis8_built", None)
    assert redis_server.server_path("redis8") == str(server)
    assert redis_server.cli_path("redis8") == shutil.which("redis-cli")  # none beside it
    monkeypatch.setenv(redis_server.REDIS8_ENV, "/bin/true")
    assert redis_server.server_path("redis8") == "/bin/true"


@pytest.mark.skipif(not (ROOT / "Makefile").exists(), reason="no Makefile beside tests/")
def test_make_test_has_redis8_built_before_pytest():
    # A fresh machine (CI) has no Redis 8.0: make test starts its build first, in the
    # background, and waits for it before pytest runs the tests marked servers on it.
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    prereqs = re.search(r"^test-python:(.*)$", makefile, re.M).group(1).split()
    assert prereqs[0] == "redis8-start" and prereqs[-1] == "redis8", prereqs
    assert "packaging/redis8.sh --start" in makefile.split("\nredis8-start:", 1)[1].split("\n\n")[0]
    assert "packaging/redis8.sh" in makefile.split("\nredis8:", 1)[1].split("\n\n")[0]


def _fake_redis8_tree(tmp_path: Path) -> Path:
    """A copy of packaging/redis8.sh whose lock pins a tiny tarball: its Makefile writes
    src/redis-server and src/redis-cli, or, when the file `hang` is in the cache, waits
    until its tree is removed (a build to kill midway)."""
    tree = tmp_path / "tree"
    (tree / "packaging").mkdir(parents=True)
    for name in ("redis8.sh", "sources.sh"):
        shutil.copy(ROOT / "packaging" / name, tree / "packaging" / name)
    src = tmp_path / "redis-8.0.2"
    src.mkdir()
    (src / "Makefile").write_text(
        "all:\n"
        "\techo $$$$ $$PPID > ../../making\n"
        "\tif [ -f ../../hang ]; then while [ -e Makefile ]; do sleep 0.05; done; exit 1; fi\n"
        "\tmkdir -p src\n"
        "\tprintf '#!/bin/sh\\necho Redis server v=8.0.2\\n' > src/redis-server\n"
        "\tcp src/redis-server src/redis-cli && chmod +x src/redis-server src/redis-cli\n")
    cache = tmp_path / "cache"
    (cache / "src").mkdir(parents=True)
    tarball = cache / "src" / "redis_8.0.2.orig.tar.gz"
    subprocess.run(["tar", "-czf", str(tarball), "-C", str(tmp_path), "redis-8.0.2"], check=True)
    import hashlib

    sum_ = hashlib.sha256(tarball.read_bytes()).hexdigest()
    (tree / "packaging" / "sources.lock").write_text(
        f"redis 5:8.0.2-3+deb13u3 {sum_} redis_8.0.2.orig.tar.gz\n")
    return tree


def _wait_for(path: Path, proc: subprocess.Popen, deadline: float = 60.0) -> None:
    import time

    end = time.monotonic() + deadline
    while not path.exists():
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < end, f"no {path}"
        time.sleep(0.05)


@pytest.mark.skipif(not (ROOT / "packaging" / "redis8.sh").exists(), reason="no packaging/")
@pytest.mark.skipif(shutil.which("make") is None or shutil.which("flock") is None,
                    reason="no make or flock")
def test_a_redis8_build_killed_midway_neither_blocks_nor_litters_the_next(tmp_path):
    # kill -9 of packaging/redis8.sh while make runs: make lives on, orphaned; it must not
    # hold the build's lock (the next build would wait for it, then build again), and the
    # next build removes its half-built tree and builds from scratch.
    tree = _fake_redis8_tree(tmp_path)
    cache = tmp_path / "cache"
    env = dict(os.environ, LING_BLOOM_CACHE=str(cache))
    script = ["bash", str(tree / "packaging" / "redis8.sh")]
    (cache / "hang").touch()
    first = subprocess.Popen(script, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    orphan = None
    try:
        _wait_for(tmp_path / "cache" / "making", first)
        orphan = [int(p) for p in (cache / "making").read_text().split()]  # recipe, make
        first.kill()
        first.communicate()
        (cache / "making").unlink()
        half = list((cache / "redis").glob(".build-*"))
        assert len(half) == 1
        (cache / "hang").unlink()  # the next build's make finishes
        second = subprocess.run(script, env=env, capture_output=True, text=True, timeout=60)
        assert second.returncode == 0, second.stderr
        bin_dir = Path(second.stdout.strip())
        assert (bin_dir.parent / ".ok").exists() and (bin_dir / "redis-server").exists()
        assert not half[0].exists()
        assert not list((cache / "redis").glob(".build-*"))
    finally:
        if first.poll() is None:
            first.kill()
        for pid in orphan or ():
            try:
                os.kill(pid, 9)
            except ProcessLookupError:
                pass


@pytest.mark.skipif(not (ROOT / "Makefile").exists() or shutil.which("make") is None,
                    reason="no Makefile beside tests/, or no make")
def test_make_test_goes_on_when_the_background_redis8_build_cannot_start(tmp_path):
    # redis8-start runs first in make test: when it cannot even start the build (a cache
    # it cannot write), make test goes on; the redis8 target before pytest says why, and
    # the tests on Redis 8.0 skip (under CI=true fail), as for any build that failed.
    blocked = tmp_path / "file"
    blocked.write_text("")
    env = dict(os.environ, LING_BLOOM_CACHE=str(blocked / "cache"))
    out = subprocess.run(["make", "-s", "-o", "deps", "redis8-start"], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "redis8" in out.stdout + out.stderr


@pytest.mark.skipif(not (ROOT / "packaging" / "redis8.sh").exists(), reason="no packaging/")
@pytest.mark.skipif(shutil.which("make") is None or shutil.which("flock") is None,
                    reason="no make or flock")
def test_a_redis8_build_waiting_for_another_says_so_then_finds_or_makes_the_build(tmp_path):
    # make test's `redis8` waits for the build that redis8-start began in the background
    # (minutes, on a fresh machine): it says whose build it waits for, not a silent make.
    tree = _fake_redis8_tree(tmp_path)
    cache = tmp_path / "cache"
    env = dict(os.environ, LING_BLOOM_CACHE=str(cache))
    script = ["bash", str(tree / "packaging" / "redis8.sh")]
    (cache / "hang").touch()
    first = subprocess.Popen(script, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    second = None
    orphan = []
    try:
        _wait_for(cache / "making", first)
        orphan = [int(p) for p in (cache / "making").read_text().split()]
        with open(tmp_path / "second.err", "w") as err:
            second = subprocess.Popen(script, env=env, stdout=subprocess.PIPE, stderr=err,
                                      text=True)
        import time

        end = time.monotonic() + 60
        while "waiting for the Redis" not in (tmp_path / "second.err").read_text():
            assert second.poll() is None and time.monotonic() < end, \
                (tmp_path / "second.err").read_text()
            time.sleep(0.05)
        (cache / "hang").unlink()
        first.kill()  # the first build dies: the second takes over and builds
        first.communicate()
        out, _ = second.communicate(timeout=60)
        assert second.returncode == 0, (tmp_path / "second.err").read_text()
        assert (Path(out.strip()).parent / ".ok").exists()
        assert str(cache / "redis" / "start.log") in (tmp_path / "second.err").read_text()
    finally:
        for p in (first, second):
            if p is not None and p.poll() is None:
                p.kill()
        for pid in orphan:
            try:
                os.kill(pid, 9)
            except ProcessLookupError:
                pass
