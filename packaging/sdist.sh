#!/usr/bin/env bash
# packaging/sdist.sh: dist/ling_bloom-VERSION.tar.gz from the working tree (python -m build
# --sdist in the tools venv).  MANIFEST.in says what goes in beyond the package itself.
source "$(dirname "$0")/common.sh"
sdist
