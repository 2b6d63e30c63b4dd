#!/usr/bin/env bash
# packaging/check_sdist.sh [PYTHON]: the sdist builds with only a C compiler on a system
# without libhiredis-dev, libxxhash-dev and OpenSSL's headers, and says what it left out.
#
# The compiler is zig cc (for this machine's architecture): it looks in no /usr/include,
# so to it this machine has none of the three -dev packages, as a bare system with gcc
# alone.  pip builds the wheel from dist/ling_bloom-V.tar.gz in a clean venv; then:
#   - the build chose the sdist's own hiredis and xxhash (vendor/), and no OpenSSL;
#   - its output said that rediss:// is unavailable and why;
#   - installed, the filters work, a RedisFilter round trip on 127.0.0.1 works, and a
#     rediss:// URL raises RedisConnectionError saying rediss:// is unavailable.
source "$(dirname "$0")/common.sh"
source "$ROOT/packaging/cross.sh"
PY="${1:-$(command -v "${PYTHON:-python3}")}"
W="$WORK/sdist-check"
arch="$(uname -m)"
[ -f "$SDIST" ] || { echo "no $SDIST: run make sdist first" >&2; exit 1; }
echo "== the sdist with only a C compiler (zig cc: no system headers), no OpenSSL ($PY)"
bin="$(toolchain "$arch")"
rm -rf "$W"; mkdir -p "$W"
"$PY" -m venv "$W/venv"
CC="$bin/$arch-cc" LDSHARED="$bin/$arch-cc -shared" LING_BLOOM_LIBS_REPORT="$W/libs.txt" \
  "$W/venv/bin/python" -m pip wheel --disable-pip-version-check --no-cache-dir -v --no-deps \
  -w "$W/raw" "$SDIST" > "$W/build.log" 2>&1 \
  || { tail -40 "$W/build.log"; echo "FAIL: the sdist did not build with zig cc alone" >&2; exit 1; }
grep -qx "xxhash: vendored (vendor/)" "$W/libs.txt" && grep -qx "hiredis: vendored (vendor/)" "$W/libs.txt" \
  && grep -q "^openssl: none" "$W/libs.txt" \
  || { cat "$W/libs.txt"; echo "FAIL: not the vendored hiredis/xxhash and no OpenSSL" >&2; exit 1; }
grep -q "building WITHOUT TLS: rediss:// will be unavailable" "$W/build.log" \
  || { echo "FAIL: the build did not say that rediss:// is unavailable" >&2; exit 1; }
echo "   built: $(tr '\n' ';' < "$W/libs.txt" | cut -c1-160)..."
quiet_pip "$W/venv/bin/python" -m pip install -q --no-deps "$W"/raw/*.whl
(cd "$W" && "$W/venv/bin/python" - "$ROOT/tests/support") <<'PYEOF'
import sys
sys.path.insert(0, sys.argv[1])
import ling_bloom
from redis_server import RedisServer
f = ling_bloom.MemoryFilter(1000, 0.01); f.add("a"); assert "a" in f and "b" not in f
with RedisServer() as srv:
    r = ling_bloom.RedisFilter("k", 1000, 0.01, url=srv.url); r.add("x"); assert "x" in r
    try:
        ling_bloom.RedisFilter("k", 1000, 0.01, url=srv.url.replace("redis://", "rediss://")).add("x")
    except ling_bloom.RedisConnectionError as e:
        assert "rediss:// is unavailable" in str(e) and "without OpenSSL" in str(e), e
        print("   rediss:// raises:", e)
    else:
        raise AssertionError("rediss:// worked in a build without OpenSSL")
print("   installed: filters and a plain RedisFilter work")
PYEOF
