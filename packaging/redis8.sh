#!/usr/bin/env bash
# packaging/redis8.sh [--start | --path | --dir]: Redis 8.0's redis-server and redis-cli, the third
# server of the tests of each deployment (tests/support/redis_server.py, server "redis8").
#
# Built from the upstream tarball of Debian 13's redis source package, which
# packaging/sources.lock pins by SHA-256 (the mirror no longer serves that revision's .dsc
# and Debian changes, so the tarball is built as upstream builds it: `make BUILD_TLS=yes`
# against the system's OpenSSL (libssl-dev), on every core, without the modules; the
# build takes about 3 minutes on two cores).  Cached in $CACHE/redis/redis-VERSION-KEY/bin,
# KEY = the tarball's SHA-256 (12 hex digits) + this build's flags' sum, so it is built
# once per pin; the cache survives `make clean`.
#
#   packaging/redis8.sh          build when not cached (waiting for a build under way);
#                                print the bin directory
#   packaging/redis8.sh --start  the same, detached, its output in $CACHE/redis/start.log:
#                                make test starts it before it installs the venv and builds
#                                the extension, and waits for it before pytest
#   packaging/redis8.sh --path   print the bin directory if built, else exit 1 (no build)
#   packaging/redis8.sh --dir    print the bin directory, built or not
#
# LING_BLOOM_REDIS8_SERVER names a redis-server 8 of your own instead (read by the tests,
# not here).
#
# Not common.sh: --path also runs in the copy of the suite without the package that
# packaging/check_wheel.sh tests a wheel from.  ROOT and CACHE as common.sh sets them.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CACHE="${LING_BLOOM_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/ling_bloom}"
source "$ROOT/packaging/sources.sh"

REDIS8_MAKE_FLAGS="BUILD_TLS=yes USE_SYSTEMD=no"
redis8_upstream() { lock_version redis | sed -e 's/^[0-9]*://' -e 's/-[^-]*$//'; }
redis8_bin() {
  local sum
  sum="$(awk '$1 == "redis" && $4 ~ /\.orig\.tar\./ { print $3; exit }' "$LOCK")"
  [ -n "$sum" ] || { echo "redis is not in $LOCK" >&2; return 1; }
  echo "$CACHE/redis/redis-$(redis8_upstream)-${sum:0:12}-$(printf '%s' "$REDIS8_MAKE_FLAGS" | sha256sum | cut -c1-8)/bin"
}

# build: under a lock, so that a second call waits for the build under way and then finds it.
redis8_build() {
  local bin dir src tarball log start
  bin="$(redis8_bin)"
  dir="$(dirname "$bin")"
  mkdir -p "$CACHE/redis"
  exec 9>"$CACHE/redis/.lock"
  if ! flock -n 9; then
    echo "== waiting for the Redis $(redis8_upstream) build under way (another make redis8, or make test's in the background: $CACHE/redis/start.log)" >&2
    flock 9
  fi
  if [ ! -f "$dir/.ok" ]; then
    for tool in gcc make pkg-config; do
      command -v "$tool" >/dev/null || { echo "$tool is missing (make deps installs it)" >&2; return 1; }
    done
    tarball="$(orig_tarball redis 9>&-)"
    # the trees of builds killed midway (this lock is free: none of them runs on; a make
    # orphaned by a kill -9 of this script stops when its tree goes)
    rm -rf "$dir" "$CACHE/redis"/.build-*
    src="$(mktemp -d "$CACHE/redis/.build-XXXXXX")"
    log="$src/build.log"
    start=$SECONDS
    echo "== Redis $(redis8_upstream) (make $REDIS8_MAKE_FLAGS), for the tests: $bin" >&2
    # shellcheck disable=SC2086
    # 9>&-: the lock is this script's alone, so that a make orphaned by a kill -9 of it does
    # not hold it (the next build would wait for that make, then build anew)
    (tar -xzf "$tarball" -C "$src" --strip-components=1 \
       && make -C "$src" -j"$(nproc)" $REDIS8_MAKE_FLAGS) > "$log" 2>&1 9>&- \
      || { tail -40 "$log" >&2; echo "the Redis $(redis8_upstream) build failed: $log" >&2; return 1; }
    mkdir -p "$bin"
    cp "$src/src/redis-server" "$src/src/redis-cli" "$bin/"
    "$bin/redis-server" --version >&2
    touch "$dir/.ok"
    echo "   Redis $(redis8_upstream) built in $((SECONDS - start)) s" >&2
    rm -rf "$src"
  fi
  flock -u 9
  echo "$bin"
}

# One compound command, then exit: bash reads a script as it runs it, and a build running
# while the script is edited must not read on into the new text.
{
case "${1:-}" in
  --path)
    bin="$(redis8_bin)"
    [ -f "$(dirname "$bin")/.ok" ] || exit 1
    echo "$bin" ;;
  --dir) redis8_bin ;;
  --start)
    bin="$(redis8_bin)"
    if [ ! -f "$(dirname "$bin")/.ok" ]; then
      mkdir -p "$CACHE/redis"
      echo "== Redis $(redis8_upstream) for the tests: building in the background ($CACHE/redis/start.log)"
      setsid nohup bash "$ROOT/packaging/redis8.sh" > "$CACHE/redis/start.log" 2>&1 < /dev/null &
    fi ;;
  "") redis8_build ;;
  *) echo "usage: packaging/redis8.sh [--start | --path | --dir]" >&2; exit 2 ;;
esac
exit
}
