#!/usr/bin/env bash
# packaging/sdist.sh: dist/ling_bloom-VERSION.tar.gz from the working tree (python -m build
# --sdist in the tools venv), with vendor/ (hiredis and xxhash, packaging/sources.sh).  MANIFEST.in says what goes in beyond the package itself.
source "$(dirname "$0")/common.sh"
source "$ROOT/packaging/sources.sh"
vendor   # vendor/: hiredis's and xxhash's sources, which the sdist carries
sdist
# The sdist must carry them: a system without libhiredis-dev builds from these.
tar -tzf "$SDIST" > "$WORK/sdist.files"
for f in vendor/hiredis/hiredis.c vendor/hiredis/COPYING vendor/xxhash/xxhash.h vendor/xxhash/LICENSE; do
  grep -q "^ling_bloom-$VERSION/$f\$" "$WORK/sdist.files" || { echo "FAIL: the sdist lacks $f" >&2; exit 1; }
done
