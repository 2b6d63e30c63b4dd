#!/usr/bin/env bash
# What the penetration benchmark needs, installed only when missing:
#   Debian: postgresql (server and client), wrk, redis-server
#   Python (into the interpreter given as $1, default .venv/bin/python): flask, gunicorn,
#   psycopg (binary), redis
set -euo pipefail
PY="${1:-.venv/bin/python}"
SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo

missing=""
for p in postgresql wrk redis-server; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing="$missing $p"
done
if [ -n "$missing" ]; then
  echo "apt-get install:$missing" >&2
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends $missing >&2
fi

if ! "$PY" -c "import flask, gunicorn, psycopg, redis" 2>/dev/null; then
  echo "pip install: flask gunicorn psycopg[binary] redis" >&2
  "$PY" -m pip install -q --disable-pip-version-check flask gunicorn 'psycopg[binary]' redis >&2
fi
