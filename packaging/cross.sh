#!/usr/bin/env bash
# Cross toolchain for the manylinux2014 wheels (sourced by packaging/wheels.sh).
#
# zig cc (PyPI's ziglang, pinned in common.sh's tools venv) compiles for a target triple
# with a glibc version: x86_64-linux-gnu.2.17 / aarch64-linux-gnu.2.17 link against
# glibc 2.17's symbol versions, the manylinux2014 floor, from any host, with no docker and
# no sysroot.  OpenSSL is built static (libssl.a, libcrypto.a, position independent) per
# target from the pinned Debian source (packaging/sources.lock) and cached under
# $CACHE/cross/ARCH/openssl-KEY, KEY = the lock's .dsc sum + zig's version + this
# configuration's sum, so a rebuild takes nothing when nothing changed.
[ -n "${ROOT:-}" ] || source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
source "$ROOT/packaging/sources.sh"

GLIBC=2.17
ARCHES=(x86_64 aarch64)

zig_bin() { "$TOOLS/bin/python" -c 'import ziglang, os; print(os.path.join(os.path.dirname(ziglang.__file__), "zig"))'; }

# toolchain ARCH: writes $WORK/cross-bin/ARCH-{cc,ar,ranlib} (zig cc for ARCH, glibc
# 2.17) and prints the directory.  Wrappers, not "zig cc -target ..." in CC: OpenSSL's
# Configure and setuptools each split CC their own way.
toolchain() {
  local arch="$1" zig bin="$WORK/cross-bin"
  tools
  zig="$(zig_bin)"
  mkdir -p "$bin"
  printf '#!/bin/sh\nexec "%s" cc -target %s-linux-gnu.%s "$@"\n' "$zig" "$arch" "$GLIBC" > "$bin/$arch-cc"
  printf '#!/bin/sh\nexec "%s" ar "$@"\n' "$zig" > "$bin/$arch-ar"
  printf '#!/bin/sh\nexec "%s" ranlib "$@"\n' "$zig" > "$bin/$arch-ranlib"
  chmod +x "$bin/$arch-cc" "$bin/$arch-ar" "$bin/$arch-ranlib"
  echo "$bin"
}

# OpenSSL's configuration for the wheel: static, PIC, no tests (only the libraries are built: make build_libs), no QUIC (a Redis connection is TLS over TCP), no
# engines or loadable modules (nothing is loaded from the disk at run time but the CA
# certificates), the assembly kept (AES-NI / ARMv8 crypto: constant time, and what
# Debian's own build uses).  OPENSSLDIR /etc/ssl: where Debian, Ubuntu and Alpine keep
# their CAs (SSL_CERT_FILE / SSL_CERT_DIR, read by OpenSSL itself, point elsewhere).
OPENSSL_CONFIG="no-shared no-tests no-engine no-dso no-module no-legacy no-comp no-ui-console no-quic -fPIC --openssldir=/etc/ssl --libdir=lib"

# openssl_prefix ARCH: the install prefix (include/, lib/libssl.a, lib/libcrypto.a) of
# OpenSSL for ARCH, built once per key.
openssl_prefix() {
  local arch="$1" src bin key prefix b target log start
  src="$(source_dir openssl)"
  bin="$(toolchain "$arch")"
  key="$(lock_dsc_sum openssl | cut -c1-12)-zig$("$(zig_bin)" version)-$(printf '%s' "$OPENSSL_CONFIG $GLIBC" | sha256sum | cut -c1-8)"
  prefix="$CACHE/cross/$arch/openssl-$key"
  if [ ! -f "$prefix/.ok" ]; then
    case "$arch" in x86_64) target=linux-x86_64 ;; aarch64) target=linux-aarch64 ;; esac
    b="$CACHE/cross/$arch/build-openssl"
    rm -rf "$b" "$prefix"; mkdir -p "$b"
    log="$b/build.log"
    start=$SECONDS
    echo "== OpenSSL $(lock_version openssl) for $arch (glibc $GLIBC), static: $prefix" >&2
    # shellcheck disable=SC2086
    (cd "$b" && CC="$bin/$arch-cc" AR="$bin/$arch-ar" RANLIB="$bin/$arch-ranlib" \
       perl "$src/Configure" "$target" $OPENSSL_CONFIG --prefix="$prefix" \
       && make -j"$(nproc)" build_libs && make install_dev) > "$log" 2>&1 \
      || { tail -40 "$log" >&2; echo "OpenSSL build for $arch failed: $log" >&2; return 1; }
    touch "$prefix/.ok"
    echo "   OpenSSL for $arch built in $((SECONDS - start)) s" >&2
    rm -rf "$b"
  fi
  echo "$prefix"
}
