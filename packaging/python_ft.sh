#!/usr/bin/env bash
# packaging/python_ft.sh: a free-threaded CPython 3.13 (the "3.13t" build, no GIL), built
# from Debian 13's python3.13 source package that packaging/sources.lock pins by SHA-256
# (packaging/sources.sh fetches, checks and unpacks it, Debian's patches applied); prints
# the path of its python3.13t.
#
#   ./configure --disable-gil --prefix=$CACHE/python-ft/VERSION-SUM --without-ensurepip
#   make -j$(nproc); make install      (no PGO, no LTO: a test interpreter, built quickly)
#
# Cached in ${LING_BLOOM_CACHE:-~/.cache/ling_bloom}/python-ft/VERSION-SUM (SUM: the first
# 12 hex digits of the .dsc's SHA-256, as for the sources), so a second run builds
# nothing; a new line in the lock builds a new one beside it.  --without-ensurepip: Debian's
# patch refuses ensurepip outside a virtual environment (make install would fail on it);
# a venv made with this interpreter gets its pip from ensurepip as usual.  The build runs
# under nice -n 10 (NICE=0 to change it), on $(nproc) jobs (JOBS=N).
source "$(dirname "$0")/common.sh"
source "$ROOT/packaging/sources.sh"

NAME=python3.13
version="$(lock_version "$NAME")"
sum="$(lock_dsc_sum "$NAME")"
[ -n "$version" ] && [ -n "$sum" ] || { echo "$NAME is not in $LOCK" >&2; exit 1; }
PREFIX="$CACHE/python-ft/$version-${sum:0:12}"
PY="$PREFIX/bin/python3.13t"

# Debian's patch of site.py names a virtual environment's site-packages lib/python3.13,
# without the "t" that sysconfig, venv and pip use on a free-threaded build
# (lib/python3.13t): in a venv of the interpreter so built, nothing pip installs is
# importable.  The build's copy of the sources gets the "t" (abi_thread, as the lines
# after it spell it) before configure: site is frozen into the interpreter, so the
# installed site.py is not what runs.  Checked by making a venv below.
fix_site() {
  python3 - "$1" <<'FIX'
import sys
path = sys.argv[1]
text = open(path).read()
old = """                sitepackages.append(os.path.join(prefix, "lib",
                                                 "python%d.%d" % sys.version_info[:2],
                                                 "site-packages"))"""
new = """                sitepackages.append(os.path.join(prefix, "lib",
                                                 "python%d.%d%s" % (*sys.version_info[:2], abi_thread),
                                                 "site-packages"))"""
if new not in text:
    if text.count(old) != 1:
        sys.exit(f"{path}: the venv branch of getsitepackages is not Debian's as expected")
    open(path, "w").write(text.replace(old, new))
FIX
}

if [ ! -f "$PREFIX/.ok" ]; then
  if [ ! -f "$PREFIX/.built" ]; then
    # The headers of the modules pip and the tests need (zlib, ssl, ffi, ...): Debian's
    # packages, installed only when missing (as the Makefile's apt_install does).
    missing=""
    for p in gcc make zlib1g-dev libffi-dev libssl-dev libbz2-dev liblzma-dev libsqlite3-dev uuid-dev libexpat1-dev; do
      dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing="$missing $p"
    done
    if [ -n "$missing" ]; then
      sudo_=""; [ "$(id -u)" = 0 ] || sudo_=sudo
      echo "== apt-get install:$missing" >&2
      $sudo_ apt-get update -qq >&2 && DEBIAN_FRONTEND=noninteractive $sudo_ apt-get install -y -qq --no-install-recommends $missing >&2
    fi
    src="$(source_dir "$NAME")"
    build="$(mktemp -d "${TMPDIR:-/tmp}/ling-bloom-python-ft-XXXXXX")"
    log="$build/build.log"
    echo "== free-threaded CPython $version: building in $build (log: $log), installing into $PREFIX" >&2
    start=$SECONDS
    rm -rf "$PREFIX"
    # A copy of the sources, so the cached ones stay as unpacked.
    cp -a "$src" "$build/src"
    fix_site "$build/src/Lib/site.py"
    if ! (cd "$build/src" && nice -n "${NICE:-10}" ./configure --disable-gil --prefix="$PREFIX" \
            --without-ensurepip > "$log" 2>&1 \
          && nice -n "${NICE:-10}" make -j"${JOBS:-$(nproc)}" >> "$log" 2>&1 \
          && nice -n "${NICE:-10}" make install >> "$log" 2>&1); then
      tail -40 "$log" >&2
      echo "the free-threaded CPython build failed: $log" >&2
      exit 1
    fi
    touch "$PREFIX/.built"
    rm -rf "$build"
    echo "== free-threaded CPython built in $((SECONDS - start)) s" >&2
  fi
  # It must be what it says: free-threaded, the GIL off, the modules pip needs, and a
  # venv whose site-packages is on its path (pip installs there).
  "$PY" -c "import sys, sysconfig, zlib, ssl, ctypes, hashlib
assert sysconfig.get_config_var('Py_GIL_DISABLED') == 1, 'not a free-threaded build'
assert not sys._is_gil_enabled(), 'the GIL is on'" >&2
  check="$(mktemp -d "${TMPDIR:-/tmp}/ling-bloom-python-ft-venv-XXXXXX")"
  "$PY" -m venv --without-pip "$check/venv" >&2
  "$check/venv/bin/python" -c "import sys, sysconfig
assert sysconfig.get_path('purelib') in sys.path, 'a venv site-packages is not on sys.path'" >&2
  rm -rf "$check"
  touch "$PREFIX/.ok"
fi
echo "$PY"
