#!/usr/bin/env bash
# packaging/check_wheel.sh PYTHON: the manylinux2014 x86_64 wheel of one CPython (made by
# packaging/wheels.sh, in dist/), tested as a user gets it.
#
#   1. the wheel of PYTHON's version in dist/ (`make dist` builds them all);
#      `auditwheel show` must find it consistent with manylinux_2_17_x86_64 and needing
#      no shared library outside it (hiredis, xxhash and OpenSSL are linked in);
#   2. (nothing: the wheel was built by wheels.sh, from the sdist, with zig cc for glibc 2.17)
#   3. a fresh venv .venv-3.X; the wheel and its test extra installed from binaries
#      only, with nothing on PATH but the venv (no compiler, no pkg-config);
#   4. checks: ling_bloom imports from the venv with that PATH; ldd resolves every
#      library of the extension, and each one is glibc's (nothing else from outside);
#      (the suite's TLS tests then run on the wheel's own OpenSSL);
#   5. the pytest suite against the installed wheel, from a copy of the repository
#      without the ling_bloom/ source package (so only the installed one can be
#      imported), with LING_BLOOM_EXPECT_PREFIX set so a test asserts it.  The tests
#      marked slow (failovers, fork and stress runs, live web servers: minutes of
#      waiting on servers, not on the binding) are left out here (WHEEL_PYTEST_MARKS);
#      `make test` and `make sanitize` run them.  So are the runs of the tests marked
#      servers on Redis 8.0 (LING_BLOOM_TEST_SERVERS, default redis,valkey here): the
#      same C client against another server, which make test and make sanitize run once,
#      not once per CPython (88 cases, 31 s of test time in one run on two cores).
source "$(dirname "$0")/common.sh"

PY="${1:?usage: check_wheel.sh PYTHON}"
MINOR="$("$PY" -c 'import sys; print("%d.%d" % sys.version_info[:2])')"
TAG="cp${MINOR/./}"
ARCH="$(uname -m)"
VENV="$ROOT/.venv-$MINOR"
W="$WORK/$MINOR"
echo "== CPython $MINOR ($PY): the manylinux2014 wheel, installed in a clean venv, suite against it"
tools
rm -rf "$W"; mkdir -p "$W"

# 1. the wheel, and what auditwheel says of it.
WHEEL="$(ls "$DIST"/ling_bloom-"$VERSION"-"$TAG"-"$TAG"-manylinux2014_"$ARCH".*.whl 2>/dev/null || true)"
[ -n "$WHEEL" ] || { echo "FAIL: no manylinux2014 wheel of CPython $MINOR in $DIST (make dist)" >&2; exit 1; }
echo "   $WHEEL"
"$TOOLS/bin/auditwheel" show "$WHEEL" > "$W/show.txt" 2>&1
tr -s ' \n' ' ' < "$W/show.txt" > "$W/show.flat"
if ! grep -q "is consistent with the following platform tag: \"manylinux_2_17_$ARCH\"" "$W/show.flat" \
   || grep -q "following external shared libraries" "$W/show.flat"; then
  echo "FAIL: auditwheel show:" >&2; cat "$W/show.txt" >&2; exit 1
fi
echo "   auditwheel show: $(grep -o 'consistent with the following platform tag: "[^"]*"' "$W/show.flat")"

[ "${BUILD_ONLY:-}" = 1 ] && exit 0

# 3. a fresh venv; install with PATH = the venv only (no gcc, cc, pkg-config there).
rm -rf "$VENV"
"$PY" -m venv "$VENV"
# The pip a venv is born with (23.0 on 3.9) backtracks for many minutes over the test
# extra; a current one resolves it at once.
quiet_pip "$VENV/bin/python" -m pip install -q -U pip
for tool in gcc cc pkg-config; do
  if PATH="$VENV/bin" command -v "$tool" >/dev/null 2>&1; then
    echo "FAIL: $tool is on the restricted PATH" >&2; exit 1
  fi
done
quiet_pip /usr/bin/env PATH="$VENV/bin" "$VENV/bin/python" -m pip install -q --only-binary=:all: "$WHEEL[test]"

# 4. import with that PATH, from the venv (run in $W: the source tree is not on
# sys.path); the libraries it loads.
(cd "$W" && PATH="$VENV/bin" "$VENV/bin/python" - "$VENV" "$VERSION") <<'PYEOF'
import os, subprocess, sys, sysconfig
venv, version = os.path.realpath(sys.argv[1]), sys.argv[2]
import ling_bloom, ling_bloom._core as core
here = os.path.realpath(ling_bloom.__file__)
assert here.startswith(venv + os.sep), f"ling_bloom imported from {here}, not from {venv}"
assert ling_bloom.__version__ == version, (ling_bloom.__version__, version)
f = ling_bloom.MemoryFilter(1000, 0.01); f.add("x"); assert "x" in f and "y" not in f
so = os.path.realpath(core.__file__)
# ldd is the dynamic loader's own answer; glibc's libraries (the manylinux policy
# allows them) may come from the system, anything else must be in the wheel.
out = subprocess.run(["/usr/bin/ldd", so], capture_output=True, text=True, check=True).stdout
glibc = ("linux-vdso", "libc.so", "libm.so", "libpthread.so", "libdl.so", "librt.so",
         "ld-linux", "libgcc_s.so")
bad = []
for line in out.splitlines():
    line = line.strip()
    name = line.split(" => ")[0].split(" (")[0]
    if "not found" in line or not (name.startswith(glibc) or name.startswith("/lib64/ld-linux")
                                   or name.startswith("/lib/ld-linux")):
        bad.append(line)
print("   ldd _core:", "; ".join(l.strip().split(" (")[0] for l in out.splitlines()))
assert not bad, "libraries from outside glibc:\n" + "\n".join(bad)
print(f"   imported {here} (version {ling_bloom.__version__}); nothing from outside but glibc")
print("   build_info:", ling_bloom.build_info())
PYEOF

# 5. the suite against the installed wheel, from a copy without the source package.
SUITE="$W/suite"
mkdir -p "$SUITE"
if git -C "$ROOT" rev-parse --git-dir >/dev/null 2>&1; then
  git -C "$ROOT" ls-files -z --cached --others --exclude-standard \
    | grep -z -v -E '^(ling_bloom/|\.ci/)' | xargs -0 cp --parents -t "$SUITE"
else
  cp -r tests docs examples benchmarks fuzz packaging README.md CHANGELOG.md Makefile mkdocs.yml \
    pyproject.toml setup.py LICENSE "$SUITE"/
fi
[ ! -e "$SUITE/ling_bloom" ]
echo "== CPython $MINOR: pytest against the installed wheel (in $SUITE)"
# On every core, as make test runs the suite (pytest-xdist, servers per worker), then the
# tests marked serial alone (exit status 5: none selected).
WORKERS="${PYTEST_WORKERS:-$(nproc 2>/dev/null || echo 0)}"
MARKS="${WHEEL_PYTEST_MARKS:-not slow}"
export LING_BLOOM_TEST_SERVERS="${LING_BLOOM_TEST_SERVERS:-redis,valkey}"
(cd "$SUITE" && LING_BLOOM_EXPECT_PREFIX="$VENV" "$VENV/bin/python" -m pytest -q -p no:cacheprovider \
   -n "$WORKERS" --dist loadgroup -m "($MARKS) and not serial")
(cd "$SUITE" && LING_BLOOM_EXPECT_PREFIX="$VENV" "$VENV/bin/python" -m pytest -q -p no:cacheprovider \
   -m "($MARKS) and serial") || [ $? = 5 ]
