#!/usr/bin/env bash
# packaging/check_wheel.sh PYTHON: the wheel of one CPython, built and tested as a user
# gets it.
#
# BUILD_ONLY=1 stops after step 2 (make dist).
#
#   1. a wheel built from the sdist alone (dist/ling_bloom-V.tar.gz, made by `make
#      sdist`), by pip in a clean venv of PYTHON: proves the sdist is complete;
#   2. auditwheel repair: hiredis copied into the wheel (ling_bloom.libs/), tagged
#      manylinux for this machine's glibc; the repaired wheel goes to dist/;
#   3. a fresh venv .venv-3.X; the wheel and its test extra installed from binaries
#      only, with nothing on PATH but the venv (no compiler, no pkg-config);
#   4. checks: ling_bloom imports from the venv with that PATH; `auditwheel show`
#      names the manylinux tag; ldd resolves every library of the extension, and
#      each one that is not glibc's lies inside the wheel;
#   5. the whole pytest suite against the installed wheel, from a copy of the
#      repository without the ling_bloom/ source package (so only the installed one
#      can be imported), with LING_BLOOM_EXPECT_PREFIX set so a test asserts it.
source "$(dirname "$0")/common.sh"

PY="${1:?usage: check_wheel.sh PYTHON}"
MINOR="$("$PY" -c 'import sys; print("%d.%d" % sys.version_info[:2])')"
TAG="cp${MINOR/./}"
PLAT="$(plat_tag)"
VENV="$ROOT/.venv-$MINOR"
W="$WORK/$MINOR"
echo "== CPython $MINOR ($PY): wheel from the sdist, repaired for $PLAT, suite against it"
[ -f "$SDIST" ] || { echo "no $SDIST: run make sdist first" >&2; exit 1; }
tools
rm -rf "$W"; mkdir -p "$W"

# 1. wheel from the sdist alone, in a clean venv (pip builds in an isolated env).
"$PY" -m venv "$W/build-venv"
quiet_pip "$W/build-venv/bin/python" -m pip wheel -q --no-deps -w "$W/raw" "$SDIST"
RAW="$(ls "$W"/raw/ling_bloom-"$VERSION"-"$TAG"-*.whl)"

# 2. repair: graft the shared libraries, tag for this glibc only.
rm -f "$DIST"/ling_bloom-"$VERSION"-"$TAG"-*.whl
PATH="$TOOLS/bin:$PATH" "$TOOLS/bin/auditwheel" repair --plat "$PLAT" --only-plat \
  -w "$DIST" "$RAW" > "$W/repair.log" 2>&1 || { cat "$W/repair.log"; exit 1; }
WHEEL="$(ls "$DIST"/ling_bloom-"$VERSION"-"$TAG"-"$TAG"-"$PLAT".whl)"
echo "   $WHEEL"
"$TOOLS/bin/auditwheel" show "$WHEEL" > "$W/show.txt" 2>&1
# After the repair, auditwheel must find the wheel consistent with a manylinux policy
# and name no external shared library the wheel still requires.
tr -s ' \n' ' ' < "$W/show.txt" > "$W/show.flat"
if ! grep -q "is consistent with the following platform tag" "$W/show.flat" \
   || grep -q "external shared libraries" "$W/show.flat"; then
  echo "FAIL: auditwheel show:" >&2; cat "$W/show.txt" >&2; exit 1
fi
echo "   auditwheel show: $(grep -o 'consistent with the following platform tag: "[^"]*"' "$W/show.flat") (tagged $PLAT, this glibc)"
# The listing goes to a file first: `grep -q` stops reading at its first match, and under
# pipefail the lister's broken pipe would fail the check at random.
"$TOOLS/bin/python" -m zipfile -l "$WHEEL" > "$W/files.txt"
grep -q "ling_bloom.libs/libhiredis" "$W/files.txt" \
  || { echo "FAIL: hiredis is not inside the wheel" >&2; cat "$W/files.txt"; exit 1; }

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
libs = os.path.join(os.path.dirname(os.path.dirname(so)), "ling_bloom.libs")
glibc = ("linux-vdso", "libc.so", "libm.so", "libpthread.so", "libdl.so", "librt.so",
         "ld-linux", "libgcc_s.so")
bad = []
for line in out.splitlines():
    line = line.strip()
    if "not found" in line:
        bad.append(line)
    name, _, target = line.partition(" => ")
    if name.startswith(glibc) or name.startswith("/lib64/ld-linux"):
        continue
    path = os.path.realpath(target.split(" (")[0]) if target else ""
    if not path.startswith(libs + os.sep):
        bad.append(line)
print("   ldd _core:", "; ".join(l.strip().split(" (")[0] for l in out.splitlines()))
assert not bad, "libraries from outside the wheel:\n" + "\n".join(bad)
print(f"   imported {here} (version {ling_bloom.__version__}); nothing outside the wheel but glibc")
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
(cd "$SUITE" && LING_BLOOM_EXPECT_PREFIX="$VENV" "$VENV/bin/python" -m pytest -q -p no:cacheprovider)
