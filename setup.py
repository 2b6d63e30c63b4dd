"""Build of the C extension ling_bloom._core (the metadata lives in pyproject.toml).

Every C file under csrc/ (the core, the Redis client, the binding) compiles into one
extension module, with every directory there that holds a header on the include path.
It needs three C libraries; where each comes from is decided at build time, by compiling
a test file with the compiler that builds the extension (so a cross compiler, which does
not look in /usr/include, is asked about its own target):

  xxhash, hiredis  the system's (pkg-config, or the headers on the compiler's own path:
                   Debian's libxxhash-dev, libhiredis-dev); else their sources in vendor/,
                   which the sdist carries (the pinned Debian sources of
                   packaging/sources.lock), compiled into the extension.
                   LING_BLOOM_VENDORED=1 takes vendor/ even where the system has them.
  OpenSSL          TLS for rediss://.  LING_BLOOM_OPENSSL_PREFIX=DIR: DIR/include and the
                   static DIR/lib/libssl.a, libcrypto.a, linked in with their symbols kept
                   private (the manylinux wheels: packaging/wheels.sh); else the system's
                   (pkg-config openssl; Debian: libssl-dev); else none: the build goes on
                   and says that rediss:// is unavailable, and a rediss:// connection then
                   raises an error saying why.

LING_BLOOM_LIBS_REPORT=FILE writes what was chosen (one line a library) to FILE, and the
choice is compiled in (LB_BUILD_HIREDIS, LB_BUILD_XXHASH, LB_BUILD_OPENSSL: "system",
"vendored", "static", "none"), for ling_bloom.build_info() to say.

The C files compile in parallel, one compiler process per core (LING_BLOOM_BUILD_JOBS=N
sets how many).  LING_BLOOM_NO_EXTENSION=1 declares no extension at all: the Makefile's
editable installs set it, since they only put the source tree on the venv's path and
install the extras, and `make build` then compiles the extension once, in place.
"""
import glob
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext as _build_ext

HERE = os.path.dirname(os.path.abspath(__file__))
VENDOR = "vendor"

# library -> (pkg-config name, a test file it must compile, the libraries to link without
# pkg-config, the Debian package that has it)
LIBS = {
    "xxhash": ("libxxhash", "#include <xxhash.h>\nint lb_probe(void) { return XXH_VERSION_NUMBER; }\n",
               ["xxhash"], "libxxhash-dev"),
    "hiredis": ("hiredis", "#include <hiredis/hiredis.h>\nint lb_probe(void) { return HIREDIS_MAJOR; }\n",
                ["hiredis"], "libhiredis-dev"),
    "openssl": ("openssl", "#include <openssl/ssl.h>\n#include <openssl/x509v3.h>\n"
                "#if OPENSSL_VERSION_NUMBER < 0x10101000L\n#error OpenSSL 1.1.1 or newer\n#endif\n"
                "int lb_probe(void) { return SSL_ERROR_WANT_READ; }\n",
                ["ssl", "crypto"], "libssl-dev"),
}
# The vendored sources compiled in when the system lacks the library (the sdist has them).
VENDORED_SOURCES = {
    "xxhash": ["vendor/xxhash/xxhash.c"],
    # hiredis 1.x's context points at its async reader and writer, so async.c (which
    # includes dict.c) comes along though ling_bloom never calls it
    "hiredis": ["vendor/hiredis/" + f for f in ("hiredis.c", "net.c", "read.c", "sds.c", "alloc.c",
                                                  "sockcompat.c", "async.c")],
}
VENDORED_INCLUDES = {"xxhash": ["vendor/xxhash"], "hiredis": ["vendor"]}  # <hiredis/hiredis.h>

NO_TLS_MESSAGE = (
    "ling_bloom: building WITHOUT TLS: rediss:// will be unavailable (a rediss:// URL raises "
    "an error at connect) because OpenSSL's headers (openssl/ssl.h, 1.1.1 or newer) were not "
    "found by the compiler. To have TLS, install them (Debian/Ubuntu: libssl-dev; "
    "RHEL/Fedora: openssl-devel; Alpine: openssl-dev) and reinstall ling_bloom."
)


def pkg_config(*args):
    if not shutil.which("pkg-config"):
        return None
    try:
        out = subprocess.run(["pkg-config", *args], check=True, capture_output=True, text=True)
    except subprocess.CalledProcessError:
        return None
    return out.stdout.split()


def compiles(compiler, source, include_dirs):
    """True when `source` compiles with the extension's own compiler and flags."""
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "lb_probe.c")
        with open(path, "w") as f:
            f.write(source)
        # The compiler's complaint about a missing header is the expected answer here,
        # not a build error: it goes to a file, not to the build's output.
        saved = os.dup(2)
        with open(os.path.join(tmp, "probe.log"), "w") as log:
            os.dup2(log.fileno(), 2)
            try:
                compiler.compile([path], output_dir=tmp, include_dirs=include_dirs)
            except Exception:  # CompileError
                return False
            finally:
                os.dup2(saved, 2)
                os.close(saved)
    return True


def built_from(ext, name, how):
    """Compile in where library name came from (build_info() reports it)."""
    ext.define_macros.append((f"LB_BUILD_{name.upper()}", f'"{how}"'))


def csrc_sources():
    """Every C file under csrc/ (sorted, so builds are reproducible) and its header dirs."""
    sources = sorted(glob.glob("csrc/**/*.c", recursive=True))
    headers = sorted(glob.glob("csrc/**/*.h", recursive=True))
    include_dirs = sorted({os.path.dirname(h) for h in headers})
    return sources, headers, include_dirs


def build_jobs():
    """How many compiler processes at once: LING_BLOOM_BUILD_JOBS, else this process's cores."""
    jobs = os.environ.get("LING_BLOOM_BUILD_JOBS", "").strip()
    if jobs:
        if not (jobs.isdigit() and int(jobs) > 0):
            sys.exit(f"LING_BLOOM_BUILD_JOBS={jobs!r}: give a whole number of compiler "
                     f"processes, 1 or more (unset, it is this machine's cores)")
        return int(jobs)
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def compile_in_parallel(compiler, jobs):
    """Make compiler.compile() run its sources `jobs` at a time.  distutils compiles one
    extension's sources one after another; each is a compiler process of its own, so
    threads that wait on them are enough.  The first failure is raised, as before."""
    if jobs <= 1 or not all(hasattr(compiler, name)
                            for name in ("_setup_compile", "_get_cc_args", "_compile")):
        return  # one at a time, as distutils does (a compiler class without these parts)
    from concurrent.futures import ThreadPoolExecutor

    def compile(sources, output_dir=None, macros=None, include_dirs=None, debug=0,
                extra_preargs=None, extra_postargs=None, depends=None):
        macros, objects, extra_postargs, pp_opts, build = compiler._setup_compile(
            output_dir, macros, include_dirs, sources, depends, extra_postargs)
        cc_args = compiler._get_cc_args(pp_opts, debug, extra_preargs)

        def one(obj):
            src, ext = build[obj]
            compiler._compile(obj, src, ext, cc_args, extra_postargs, pp_opts)

        with ThreadPoolExecutor(jobs) as pool:
            for _ in pool.map(one, [o for o in objects if o in build]):
                pass
        return objects

    compiler.compile = compile


class build_ext(_build_ext):
    """Chooses each library's source (the module docstring) before compiling."""

    def build_extensions(self):
        compile_in_parallel(self.compiler, build_jobs())
        for ext in self.extensions:
            self.configure_libraries(ext)
        super().build_extensions()

    def configure_libraries(self, ext):
        report, missing = [], []
        force_vendored = os.environ.get("LING_BLOOM_VENDORED") == "1"
        for name in ("xxhash", "hiredis"):
            pc, probe, fallback, debian = LIBS[name]
            if not force_vendored:
                cflags, libs = pkg_config("--cflags", pc), pkg_config("--libs", pc)
                if cflags is None or libs is None:
                    cflags, libs = [], ["-l" + lib for lib in fallback]
                dirs = [f[2:] for f in cflags if f.startswith("-I")]
                if compiles(self.compiler, probe, dirs):
                    ext.include_dirs += dirs
                    ext.library_dirs += [f[2:] for f in libs if f.startswith("-L")]
                    ext.libraries += [f[2:] for f in libs if f.startswith("-l")]
                    report.append(f"{name}: system")
                    built_from(ext, name, "system")
                    continue
            if all(os.path.exists(os.path.join(HERE, s)) for s in VENDORED_SOURCES[name]):
                # Compiled apart, with their own flags: third-party code, without the
                # project's warnings (hiredis 0.14.1, which an older vendor/ may hold,
                # declares createArray with an int in read.h and defines it with a size_t in
                # hiredis.c, which clang 16 and GCC 14 refuse by default; ling_bloom gives
                # the reader its own functions, so that default one is never called).
                ext.extra_objects += self.compiler.compile(
                    VENDORED_SOURCES[name], output_dir=self.build_temp,
                    include_dirs=VENDORED_INCLUDES[name],
                    extra_postargs=["-O3", "-fvisibility=hidden", "-w",
                                    "-Wno-incompatible-pointer-types"])
                ext.include_dirs += VENDORED_INCLUDES[name]
                report.append(f"{name}: vendored ({VENDOR}/)")
                built_from(ext, name, "vendored")
            else:
                missing.append(f"{name}: no usable system headers (Debian: apt-get install "
                               f"{debian}) and no {VENDOR}/ sources (an sdist has them; in a "
                               f"git checkout: bash packaging/sources.sh --vendor)")
        report.append(self.configure_openssl(ext))
        if missing and not os.environ.get("LING_BLOOM_SKIP_LIB_CHECK"):
            sys.exit("ling_bloom cannot be built:\n  " + "\n  ".join(missing))
        for line in report:
            print("ling_bloom: " + line)
        out = os.environ.get("LING_BLOOM_LIBS_REPORT")
        if out:
            with open(out, "w") as f:
                f.write("\n".join(report) + "\n")

    def configure_openssl(self, ext):
        pc, probe, fallback, _ = LIBS["openssl"]
        prefix = os.environ.get("LING_BLOOM_OPENSSL_PREFIX")
        if prefix:
            static = [os.path.join(prefix, "lib", a) for a in ("libssl.a", "libcrypto.a")]
            inc = os.path.join(prefix, "include")
            if not all(os.path.exists(a) for a in static) or not compiles(self.compiler, probe, [inc]):
                sys.exit(f"ling_bloom: LING_BLOOM_OPENSSL_PREFIX={prefix} has no usable "
                         "include/openssl/ssl.h, lib/libssl.a and lib/libcrypto.a")
            ext.include_dirs.append(inc)
            ext.extra_objects += static
            # Keep the static OpenSSL private to the module: it exports PyInit__core only
            # (a version script: zig cc has no --exclude-libs), so no other libssl in the
            # process (Python's ssl module's, a host program's) binds to it or it to them.
            # glibc 2.17 keeps pthread and dlopen in libraries of their own.
            os.makedirs(self.build_temp, exist_ok=True)
            script = os.path.join(self.build_temp, "ling_bloom_core.map")
            with open(script, "w") as f:
                f.write("{ global: PyInit__core; local: *; };\n")
            ext.extra_link_args += ["-Wl,--version-script=" + script]
            ext.libraries += ["pthread", "dl"]
            built_from(ext, "openssl", "static")
            return f"openssl: static from {prefix}"
        cflags, libs = pkg_config("--cflags", pc), pkg_config("--libs", pc)
        if cflags is None or libs is None:
            cflags, libs = [], ["-l" + lib for lib in fallback]
        dirs = [f[2:] for f in cflags if f.startswith("-I")]
        if compiles(self.compiler, probe, dirs):
            ext.include_dirs += dirs
            ext.library_dirs += [f[2:] for f in libs if f.startswith("-L")]
            ext.libraries += [f[2:] for f in libs if f.startswith("-l")]
            built_from(ext, "openssl", "system")
            return "openssl: system"
        ext.define_macros.append(("LB_NO_TLS", "1"))
        built_from(ext, "openssl", "none")
        print("\n" + "*" * 78 + "\n" + NO_TLS_MESSAGE + "\n" + "*" * 78 + "\n", file=sys.stderr)
        return "openssl: none: " + NO_TLS_MESSAGE


debug = os.environ.get("LING_BLOOM_DEBUG") == "1"
sources, headers, csrc_include_dirs = csrc_sources()

core = Extension(
    "ling_bloom._core",
    sources=sources,
    depends=headers,
    include_dirs=list(csrc_include_dirs),
    extra_compile_args=(["-O0", "-g", "-UNDEBUG"] if debug else ["-O3"])
    # Hidden visibility: the module exports only PyInit__core (PyMODINIT_FUNC marks it),
    # so calls between its own files go direct instead of through the PLT.
    + ["-std=gnu11", "-fvisibility=hidden", "-Wall", "-Wextra", "-Wno-unused-parameter",
       "-Wno-missing-field-initializers", "-Wno-cast-function-type"],
    # A free-threaded CPython (3.13t): threads run the filters truly in parallel, so the
    # core sets bits and counters with atomic operations (csrc/core/common.h).
    define_macros=[("LB_ATOMIC_STORAGE", "1")] if sysconfig.get_config_var("Py_GIL_DISABLED") else [],
)

no_extension = os.environ.get("LING_BLOOM_NO_EXTENSION") == "1"
setup(ext_modules=[] if no_extension else [core], cmdclass={"build_ext": build_ext})
