# ling_bloom: the two commands of the README, and the steps they need.
#
#   make demo    the filters at work (the main job)
#   make test    every test: pytest, and the C tests of the core's Redis layer
#   make bench   the benchmarks against the peers
#
# Each target installs what it needs (Debian packages with apt-get, a .venv with the
# package and its extras from PyPI) and is quick when everything is already there.

SHELL  := /bin/bash
PYTHON ?= python3
VENV   := .venv
VPY    := $(VENV)/bin/python
SUDO   := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

# Build: a C compiler, pkg-config, the two C libraries.  Tests and demo: a redis-server.
APT_PACKAGES := gcc make pkg-config libxxhash-dev libhiredis-dev redis-server

.PHONY: demo test test-python test-c bench build deps venv venv-test venv-bench clean

demo: build
	$(VPY) -m ling_bloom demo

test: test-python test-c

test-python: build venv-test
	$(VPY) -m pytest

test-c: deps
	$(MAKE) -C tests/c test

bench: build venv-bench
	$(VPY) benchmarks/run.py

# Debian packages, installed only when one is missing.
deps:
	@missing=""; \
	for p in $(APT_PACKAGES); do \
	  dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q "ok installed" || missing="$$missing $$p"; \
	done; \
	if [ -n "$$missing" ]; then \
	  echo "apt-get install:$$missing"; \
	  $(SUDO) apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq --no-install-recommends $$missing; \
	fi

$(VENV)/.stamp-base: pyproject.toml setup.py | deps
	test -x $(VPY) || $(PYTHON) -m venv $(VENV)
	$(VPY) -m pip install -q --disable-pip-version-check 'setuptools>=77' wheel
	$(VPY) -m pip install -q --disable-pip-version-check -e .
	touch $@

$(VENV)/.stamp-%: pyproject.toml $(VENV)/.stamp-base
	$(VPY) -m pip install -q --disable-pip-version-check -e '.[$*]'
	touch $@

venv: $(VENV)/.stamp-base
venv-test: $(VENV)/.stamp-test
venv-bench: $(VENV)/.stamp-bench

# The extension, rebuilt in place when a C file changed (a no-op otherwise).
build: venv
	@$(VPY) setup.py build_ext --inplace > $(VENV)/build.log 2>&1 || { cat $(VENV)/build.log; exit 1; }
	@grep -E 'warning:|error:' $(VENV)/build.log || true

clean:
	rm -rf build ling_bloom/*.so $(VENV)
	$(MAKE) -C tests/c clean
