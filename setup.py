"""Build of the C extension ling_bloom._core (the metadata lives in pyproject.toml).

The filters (csrc/core), the Redis client (csrc/redis) and the binding
(csrc/py) compile into one extension module.  It links two system C libraries, found through pkg-config:
libxxhash (the default hash), hiredis (the Redis filters) and OpenSSL
(TLS for rediss://).
"""
import glob
import os
import shutil
import subprocess
import sys

from setuptools import Extension, setup

# library (pkg-config name) -> (a header it must provide, the Debian package that has it)
SYSTEM_LIBS = {
    "libxxhash": ("xxhash.h", "libxxhash-dev"),
    "hiredis": ("hiredis/hiredis.h", "libhiredis-dev"),
    "openssl": ("openssl/ssl.h", "libssl-dev"),  # TLS for rediss:// (csrc/redis/tls.c)
}
FALLBACK_LIBS = {"libxxhash": ["-lxxhash"], "hiredis": ["-lhiredis"], "openssl": ["-lssl", "-lcrypto"]}


def pkg_config(*args):
    if not shutil.which("pkg-config"):
        return None
    try:
        out = subprocess.run(["pkg-config", *args], check=True, capture_output=True, text=True)
    except subprocess.CalledProcessError:
        return None
    return out.stdout.split()


def header_exists(header, include_dirs):
    for d in [*include_dirs, "/usr/include", "/usr/local/include"]:
        if os.path.exists(os.path.join(d, header)):
            return True
    return False


def system_libraries():
    include_dirs, library_dirs, libraries, missing = [], [], [], []
    for name, (header, debian) in SYSTEM_LIBS.items():
        cflags = pkg_config("--cflags", name)
        libs = pkg_config("--libs", name)
        if cflags is None or libs is None:
            cflags, libs = [], FALLBACK_LIBS[name]
        dirs = [f[2:] for f in cflags if f.startswith("-I")]
        if not header_exists(header, dirs):
            missing.append(f"{header} (Debian: apt-get install {debian})")
            continue
        include_dirs += dirs
        library_dirs += [f[2:] for f in libs if f.startswith("-L")]
        libraries += [f[2:] for f in libs if f.startswith("-l")]
    if missing and not os.environ.get("LING_BLOOM_SKIP_LIB_CHECK"):
        sys.exit("ling_bloom needs C headers that are not installed:\n  "
                 + "\n  ".join(missing))
    return include_dirs, library_dirs, libraries


include_dirs, library_dirs, libraries = system_libraries()
debug = os.environ.get("LING_BLOOM_DEBUG") == "1"

core = Extension(
    "ling_bloom._core",
    sources=sorted(glob.glob("csrc/core/*.c")) + sorted(glob.glob("csrc/redis/*.c"))
    + sorted(glob.glob("csrc/py/*.c")),
    depends=sorted(glob.glob("csrc/core/*.h")) + sorted(glob.glob("csrc/redis/*.h"))
    + sorted(glob.glob("csrc/py/*.h")),
    include_dirs=["csrc/core", "csrc/redis", "csrc/py", *include_dirs],
    library_dirs=library_dirs,
    libraries=libraries,
    extra_compile_args=(["-O0", "-g", "-UNDEBUG"] if debug else ["-O3"])
    # Hidden visibility: the module exports only PyInit__core (PyMODINIT_FUNC marks it),
    # so calls between its own files go direct instead of through the PLT.
    + ["-std=gnu11", "-fvisibility=hidden", "-Wall", "-Wextra", "-Wno-unused-parameter",
       "-Wno-missing-field-initializers", "-Wno-cast-function-type"],
)

setup(ext_modules=[core])
