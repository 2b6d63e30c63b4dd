#!/usr/bin/env bash
# packaging/wheels.sh [ARCH...]: the manylinux2014 wheels (glibc 2.17 and newer) of every
# supported CPython, for x86_64 and aarch64 (default: both), into dist/, from the sdist.
#
# For each ARCH: OpenSSL built static for it (packaging/cross.sh, cached); then for each
# CPython 3.9-3.13 that pyenv has (its headers: x86_64 and aarch64 Linux share the same
# CPython ABI, LP64 and little-endian), `pip wheel` of the sdist in a clean venv with:
#   CC/LDSHARED   zig cc -target ARCH-linux-gnu.2.17 (links against glibc 2.17's symbols;
#                 sees no /usr/include, so setup.py compiles the sdist's own hiredis and
#                 xxhash: the fallback a system without libhiredis-dev gets)
#   LING_BLOOM_OPENSSL_PREFIX   the static OpenSSL, linked in with its symbols hidden
#   _PYTHON_HOST_PLATFORM, SETUPTOOLS_EXT_SUFFIX   the target's platform tag and module
#                 suffix (_core.cpython-3XY-ARCH-linux-gnu.so), not the host's
# then `auditwheel repair --plat auto` (tags the wheel with the oldest policy its glibc
# symbols allow; a named --plat only offers the host's architecture) and `auditwheel
# show` (kept in build/packaging/wheels/*.show): the wheel must be consistent with
# manylinux_2_17 (one symbol newer than glibc 2.17 fails here) and need no library
# outside it.
# Timings of each step go to build/packaging/wheels/timings.txt.
source "$(dirname "$0")/common.sh"
source "$ROOT/packaging/cross.sh"

PYTHON_VERSIONS=(${PYTHONS:-3.9 3.10 3.11 3.12 3.13})
TARGETS=("$@")
[ ${#TARGETS[@]} -gt 0 ] || TARGETS=("${ARCHES[@]}")
OUT="$WORK/wheels"
mkdir -p "$OUT"
[ -f "$SDIST" ] || { echo "no $SDIST: run make sdist first" >&2; exit 1; }
tools
: > "$OUT/timings.txt"
timing() { echo "$1 $2 s" | tee -a "$OUT/timings.txt"; }

for arch in "${TARGETS[@]}"; do
  start=$SECONDS
  prefix="$(openssl_prefix "$arch")"
  bin="$(toolchain "$arch")"
  timing "openssl-$arch" $((SECONDS - start))
  for v in "${PYTHON_VERSIONS[@]}"; do
    py="$(find_python "$v")"
    if [ -z "$py" ]; then
      echo "FAIL: CPython $v not found (pyenv install $v): its wheels cannot be built" >&2; exit 1
    fi
    start=$SECONDS
    tag="cp${v/./}"
    w="$OUT/$arch-$v"
    rm -rf "$w"; mkdir -p "$w"
    echo "== wheel: CPython $v, $arch, manylinux2014"
    "$py" -m venv "$w/venv"
    CC="$bin/$arch-cc" LDSHARED="$bin/$arch-cc -shared -s" \
      LING_BLOOM_OPENSSL_PREFIX="$prefix" LING_BLOOM_LIBS_REPORT="$w/libs.txt" \
      _PYTHON_HOST_PLATFORM="linux-$arch" SETUPTOOLS_EXT_SUFFIX=".cpython-${tag#cp}-$arch-linux-gnu.so" \
      "$w/venv/bin/python" -m pip wheel --disable-pip-version-check --no-cache-dir -q --no-deps -w "$w/raw" "$SDIST" \
      > "$w/build.log" 2>&1 || { cat "$w/build.log"; echo "FAIL: wheel of CPython $v for $arch" >&2; exit 1; }
    raw="$(ls "$w"/raw/ling_bloom-"$VERSION"-"$tag"-"$tag"-linux_"$arch".whl)"
    # Each library must come from where the wheel says: hiredis and xxhash compiled in
    # from the sdist's sources, OpenSSL static from the cross build.
    grep -qx "xxhash: vendored (vendor/)" "$w/libs.txt" && grep -qx "hiredis: vendored (vendor/)" "$w/libs.txt" \
      && grep -qx "openssl: static from $prefix" "$w/libs.txt" \
      || { cat "$w/libs.txt"; echo "FAIL: libraries not as expected for $arch $v" >&2; exit 1; }
    rm -f "$DIST"/ling_bloom-"$VERSION"-"$tag"-"$tag"-*"$arch".whl
    PATH="$TOOLS/bin:$PATH" "$TOOLS/bin/auditwheel" repair --plat auto -w "$DIST" "$raw" > "$w/repair.log" 2>&1 \
      || { cat "$w/repair.log"; echo "FAIL: auditwheel repair ($arch, CPython $v)" >&2; exit 1; }
    wheel="$(ls "$DIST"/ling_bloom-"$VERSION"-"$tag"-"$tag"-manylinux*"$arch".whl)"
    show="$OUT/$(basename "$wheel" .whl).show"
    "$TOOLS/bin/auditwheel" show "$wheel" > "$show" 2>&1
    flat="$(tr -s ' \n' ' ' < "$show")"
    if ! grep -q 'consistent with the following platform tag: "manylinux_2_17_'"$arch"'"' <<<"$flat" \
       || grep -q "following external shared libraries" <<<"$flat"; then
      echo "FAIL: auditwheel show $wheel:" >&2; cat "$show" >&2; exit 1
    fi
    # What the loader will look for outside the wheel: glibc's libraries only (ldd of an
    # x86_64 wheel, run here, says the same: packaging/check_wheel.sh; the aarch64 one's
    # emulated loader too: packaging/check_aarch64.sh).
    "$TOOLS/bin/python" -m zipfile -e "$wheel" "$w/unpacked"
    readelf -d "$w"/unpacked/ling_bloom/_core.*.so | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p' > "$w/needed.txt"
    if grep -v -E '^(libc|libm|libpthread|libdl|librt)\.so\.[0-9]+$|^ld-linux' "$w/needed.txt" | grep -q .; then
      echo "FAIL: $wheel needs libraries outside glibc:" >&2; cat "$w/needed.txt" >&2; exit 1
    fi
    echo "   $(basename "$wheel") ($(du -k "$wheel" | cut -f1) KiB, needs only $(tr '\n' ' ' < "$w/needed.txt")): $(grep -o 'consistent with the following platform tag: "[^"]*"' <<<"$flat")"
    timing "wheel-$arch-$v" $((SECONDS - start))
  done
done
