#!/usr/bin/env bash
# packaging/sources.sh NAME...: the pinned Debian source packages of packaging/sources.lock
# (hiredis, xxhash, openssl; and redis's upstream tarball alone: orig_tarball), fetched with `apt-get source`, checked against the lock's
# SHA-256 sums, unpacked with Debian's patches; prints the source directory of each NAME.
#
# Sourced by the other packaging scripts for source_dir().  Cached in
# $CACHE/src/NAME-VERSION-SUM (SUM: the first 12 hex digits of the .dsc's SHA-256), so a
# second run fetches nothing; the cache survives `make clean` (it lives outside the tree,
# in ${LING_BLOOM_CACHE:-~/.cache/ling_bloom}).
[ -n "${ROOT:-}" ] || source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
LOCK="$ROOT/packaging/sources.lock"

lock_version() { awk -v n="$1" '$1 == n { print $2; exit }' "$LOCK"; }
lock_dsc_sum() { awk -v n="$1" '$1 == n && $4 ~ /\.dsc$/ { print $3; exit }' "$LOCK"; }

# A deb-src entry for trixie (Debian 13, and its updates and security suites), added once,
# as root, when apt cannot find the locked sources: `apt-get source` needs one, and
# Debian's images ship only the binary entries.  Only sources come from it: this
# machine's packages stay bookworm's (trixie's binaries need a newer glibc).
ensure_deb_src() {
  if apt-get source --print-uris -qq "hiredis=$(lock_version hiredis)" >/dev/null 2>&1; then
    return 0
  fi
  local f=/etc/apt/sources.list.d/ling-bloom-deb-src-trixie.sources
  if [ "$(id -u)" != 0 ]; then
    echo "apt has no deb-src entry for trixie: as root, write $f (see packaging/sources.sh) and apt-get update" >&2
    return 1
  fi
  echo "== adding $f (deb-src for trixie, for apt-get source) and apt-get update"
  cat > "$f" <<'SRC'
Types: deb-src
URIs: http://deb.debian.org/debian
Suites: trixie trixie-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb-src
URIs: http://deb.debian.org/debian-security
Suites: trixie-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SRC
  apt-get update -qq
}

# source_dir NAME: the unpacked, patched source tree of NAME at its locked version.
source_dir() {
  local name="$1" version sum dir tmp
  version="$(lock_version "$name")"
  sum="$(lock_dsc_sum "$name")"
  [ -n "$version" ] && [ -n "$sum" ] || { echo "$name is not in $LOCK" >&2; return 1; }
  dir="$CACHE/src/$name-$version-${sum:0:12}"
  if [ ! -f "$dir/.ok" ]; then
    command -v dpkg-source >/dev/null || { echo "dpkg-source is missing (Debian: apt-get install dpkg-dev)" >&2; return 1; }
    ensure_deb_src >&2 || return 1
    rm -rf "$dir"; mkdir -p "$CACHE/src"
    tmp="$(mktemp -d "$CACHE/src/.fetch-XXXXXX")"; chmod 755 "$tmp"  # apt's _apt user writes there
    (cd "$tmp" && apt-get source --download-only -qq "$name=$version") >&2 \
      || { echo "apt-get source $name=$version failed (is the version still served? see $LOCK)" >&2; rm -rf "$tmp"; return 1; }
    # Every file the lock names for NAME, with its sum; and nothing else was fetched for it.
    awk -v n="$name" '$1 == n { print $3 "  " $4 }' "$LOCK" > "$tmp/SHA256SUMS"
    (cd "$tmp" && sha256sum --quiet -c SHA256SUMS) >&2 \
      || { echo "checksum mismatch for $name $version: not the sources $LOCK pins" >&2; rm -rf "$tmp"; return 1; }
    (cd "$tmp" && dpkg-source --no-check -x "$(awk -v n="$name" '$1 == n && $4 ~ /\.dsc$/ { print $4; exit }' "$LOCK")" tree) > "$tmp/unpack.log" 2>&1 \
      || { cat "$tmp/unpack.log" >&2; rm -rf "$tmp"; return 1; }
    mv "$tmp/tree" "$dir"
    touch "$dir/.ok"
    rm -rf "$tmp"
  fi
  echo "$dir"
}

# orig_tarball NAME: the upstream tarball alone (the lock's NAME_VERSION.orig.tar.* line) of
# NAME's locked source package, checked against the lock's SHA-256; its path, in $CACHE/src.
# For a package whose .dsc and Debian changes the mirror no longer serves (redis 8.0): apt-get
# source fetches the tarball, then fails on those, and the tarball's checksum decides.
orig_tarball() {
  local name="$1" version sum file dst tmp
  version="$(lock_version "$name")"
  read -r sum file < <(awk -v n="$name" '$1 == n && $4 ~ /\.orig\.tar\./ { print $3, $4; exit }' "$LOCK") || true
  [ -n "$version" ] && [ -n "${sum:-}" ] || { echo "$name has no upstream tarball in $LOCK" >&2; return 1; }
  dst="$CACHE/src/$file"
  if [ ! -f "$dst" ] || ! echo "$sum  $dst" | sha256sum --quiet -c - >/dev/null 2>&1; then
    ensure_deb_src >&2 || return 1
    mkdir -p "$CACHE/src"
    tmp="$(mktemp -d "$CACHE/src/.fetch-XXXXXX")"; chmod 755 "$tmp"  # apt's _apt user writes there
    (cd "$tmp" && apt-get source --download-only -qq "$name=$version") > "$tmp/apt.log" 2>&1 || true
    [ -f "$tmp/$file" ] \
      || { cat "$tmp/apt.log" >&2; echo "apt-get source $name=$version fetched no $file (is the version still served? see $LOCK)" >&2; rm -rf "$tmp"; return 1; }
    (cd "$tmp" && echo "$sum  $file" | sha256sum --quiet -c -) >&2 \
      || { echo "checksum mismatch for $file: not the sources $LOCK pins" >&2; rm -rf "$tmp"; return 1; }
    mv "$tmp/$file" "$dst"
    rm -rf "$tmp"
  fi
  echo "$dst"
}

# vendor: $ROOT/vendor/ (git ignores it) with the C sources of hiredis and xxhash and
# their licences, which the sdist carries so that it builds with only a C compiler where
# the system lacks libhiredis-dev and libxxhash-dev (setup.py falls back to them).
vendor() {
  local h x
  h="$(source_dir hiredis)"; x="$(source_dir xxhash)"
  rm -rf "$ROOT/vendor"; mkdir -p "$ROOT/vendor/hiredis" "$ROOT/vendor/xxhash"
  (cd "$h" && cp hiredis.c hiredis.h net.c net.h read.c read.h sds.c sds.h sdsalloc.h \
     alloc.c alloc.h sockcompat.c sockcompat.h async.c async.h async_private.h dict.c dict.h \
     fmacros.h win32.h COPYING \
     "$ROOT/vendor/hiredis/")
  (cd "$x" && cp xxhash.c xxhash.h LICENSE "$ROOT/vendor/xxhash/")
  cat > "$ROOT/vendor/README.md" <<README
The C sources of hiredis $(lock_version hiredis) and xxhash $(lock_version xxhash), as Debian 13
packages them (source packages, Debian's patches applied), copied here by
packaging/sources.sh from the sources that packaging/sources.lock pins by SHA-256.
setup.py compiles them into the extension where the system has no libhiredis-dev or
libxxhash-dev.  Their licences: hiredis/COPYING (BSD-3-Clause), xxhash/LICENSE
(BSD-2-Clause).
README
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
  if [ "${1:-}" = --vendor ]; then vendor; exit; fi
  for n in "$@"; do source_dir "$n"; done
fi
