"""ling_bloom.build_info(): what the extension was built with, checked against what the build
really used.

A library compiled in from vendor/ (the wheels, the sdist) must be the version that
packaging/sources.lock pins; the system's (``make test``) must be the version of the headers
the compiler found (and, at run time, of the shared library the extension loaded).  OpenSSL
at run time is compared with Python's ``ssl.OPENSSL_VERSION`` only where both load the same
libcrypto; a static OpenSSL (the wheels) must be the version its headers say.
"""
from __future__ import annotations

import ctypes
import platform
import re
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path
from typing import Dict, List, Optional

import ling_bloom

ROOT = Path(__file__).resolve().parents[2]
SO = Path(ling_bloom._core.__file__).resolve()

KEYS = {"hiredis", "hiredis_source", "xxhash", "xxhash_headers", "xxhash_source", "openssl",
        "openssl_headers", "openssl_source", "tls", "avx2", "simd", "compiler", "python",
        "free_threaded"}
VERSION = re.compile(r"\d+\.\d+\.\d+")


def info() -> dict:
    return ling_bloom.build_info()


def locked_versions() -> Dict[str, str]:
    """{library: upstream version} of packaging/sources.lock ("0.14.1-3" -> "0.14.1")."""
    out = {}
    for line in (ROOT / "packaging" / "sources.lock").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            name, version = line.split()[:2]
            out[name] = re.sub(r"-[^-]*$", "", version)
    return out


def include_dirs(pc_name: str) -> List[Path]:
    """Where the compiler finds a system library's headers: pkg-config's -I, then
    /usr/include (setup.py asks the same)."""
    dirs: List[Path] = []
    if shutil.which("pkg-config"):
        r = subprocess.run(["pkg-config", "--cflags", pc_name], capture_output=True, text=True)
        dirs += [Path(f[2:]) for f in r.stdout.split() if f.startswith("-I")]
    return dirs + [Path("/usr/include"), Path("/usr/local/include")]


def header(pc_name: str, rel: str) -> Path:
    for d in include_dirs(pc_name):
        for cand in (d / rel, d / Path(rel).name):
            if cand.is_file():
                return cand
    raise AssertionError(f"the build used the system's {rel}, which is not on this machine")


def macro(text: str, name: str) -> str:
    m = re.search(r"#\s*define\s+" + name + r"\s+(\S+)", text)
    assert m, name
    return m.group(1).strip('"')


def loaded_library(so: str, stem: str) -> Optional[str]:
    """The file ldd resolves a library of so to (None: not linked dynamically)."""
    out = subprocess.run(["ldd", so], capture_output=True, text=True).stdout
    for line in out.splitlines():
        if line.strip().startswith(stem) and "=>" in line:
            return str(Path(line.split("=>")[1].split("(")[0].strip()).resolve())
    return None


def test_build_info_has_every_key_with_its_type():
    d = info()
    assert isinstance(d, dict) and set(d) == KEYS
    for k in ("tls", "avx2", "free_threaded"):
        assert type(d[k]) is bool, k
    for k in KEYS - {"tls", "avx2", "free_threaded", "openssl", "openssl_headers"}:
        assert isinstance(d[k], str) and d[k], k
    assert info() is not info() and info() == info()  # a fresh dict: changing it changes nothing


def test_build_info_describes_this_build():
    d = info()
    for k in ("hiredis", "xxhash", "xxhash_headers"):
        assert VERSION.fullmatch(d[k]), (k, d[k])
    assert d["hiredis_source"] in ("system", "vendored")
    assert d["xxhash_source"] in ("system", "vendored")
    assert d["openssl_source"] in ("static", "system", "none")
    assert d["tls"] is (d["openssl_source"] != "none")
    if d["tls"]:
        for k in ("openssl", "openssl_headers"):
            assert re.match(r"OpenSSL \d+\.\d+\.\d+", d[k]), (k, d[k])
    else:
        assert d["openssl"] is None and d["openssl_headers"] is None
    assert re.fullmatch(r"(GCC|clang) \d+\.\d+.*", d["compiler"]), d["compiler"]
    # built for this CPython (a wheel built with 3.12.0's headers runs on 3.12.5: same minor)
    assert d["python"].split(".")[:2] == [str(v) for v in sys.version_info[:2]]
    assert d["free_threaded"] is bool(sysconfig.get_config_var("Py_GIL_DISABLED"))
    assert d["avx2"] is (platform.machine().lower() in ("x86_64", "amd64"))
    assert d["simd"] == ling_bloom.BlockedFilter._simd()
    if not d["avx2"]:
        assert d["simd"] == "portable"


def test_hiredis_and_xxhash_versions_are_those_the_build_used():
    d = info()
    lock = locked_versions()
    if d["hiredis_source"] == "vendored":
        assert d["hiredis"] == lock["hiredis"]
    else:
        text = header("hiredis", "hiredis/hiredis.h").read_text()
        want = ".".join(macro(text, f"HIREDIS_{p}") for p in ("MAJOR", "MINOR", "PATCH"))
        assert d["hiredis"] == want
    if d["xxhash_source"] == "vendored":
        assert d["xxhash"] == d["xxhash_headers"] == lock["xxhash"]
    else:
        text = header("libxxhash", "xxhash.h").read_text()
        want = ".".join(macro(text, f"XXH_VERSION_{p}") for p in ("MAJOR", "MINOR", "RELEASE"))
        assert d["xxhash_headers"] == want
        # the run-time version is the shared library's own answer
        lib = loaded_library(str(SO), "libxxhash")
        assert lib, "a system xxhash is linked dynamically"
        v = ctypes.CDLL(lib).XXH_versionNumber()
        assert d["xxhash"] == f"{v // 10000}.{v // 100 % 100}.{v % 100}"


def test_openssl_versions_are_those_the_build_used():
    import ssl

    d = info()
    if d["openssl_source"] == "none":
        return
    if d["openssl_source"] == "static":
        # linked in: the library is the headers' own build, of the pinned sources
        assert d["openssl"] == d["openssl_headers"]
        assert d["openssl"].startswith(f"OpenSSL {locked_versions()['openssl']} ")
        return
    text = header("openssl", "openssl/opensslv.h").read_text()
    assert d["openssl_headers"] == macro_text(text)
    # the system's libssl at run time: the same major.minor as the headers (its ABI)
    assert d["openssl"].split()[1].split(".")[:2] == d["openssl_headers"].split()[1].split(".")[:2]
    ssl_so = getattr(sys.modules.get("_ssl"), "__file__", None)
    ours = loaded_library(str(SO), "libcrypto")
    if ssl_so and ours and loaded_library(ssl_so, "libcrypto") == ours:
        assert d["openssl"] == ssl.OPENSSL_VERSION  # one libcrypto in the process


def macro_text(text: str) -> str:
    """OPENSSL_VERSION_TEXT of an opensslv.h (a literal, or built from its parts as in 3.x)."""
    m = re.search(r'#\s*define\s+OPENSSL_VERSION_TEXT\s+"([^"]*)"', text)
    assert m, "OPENSSL_VERSION_TEXT"
    return m.group(1)
