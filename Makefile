# ling_bloom: the two commands of the README, and the steps they need.
#
#   make demo    the filters at work, and the guard in front of a web app (the main job)
#   make test    every test: pytest (on every core), and the C tests of the core's Redis layer
#   make redis8  Redis 8.0's redis-server, the tests' third server, built once from the
#                pinned source (packaging/redis8.sh; make test and the suites need it)
#   make soak    the deployment tests SOAK_N times (default 20), failures per test
#   make docs    the documentation site (MkDocs, Material), built strict into site/
#   make bench   the benchmarks against the peers
#   make sanitize every test (the stress runs included) and the C tests, on builds with
#                AddressSanitizer and UndefinedBehaviorSanitizer (clang 19); CI runs it
#   make dist    dist/: the sdist, and the manylinux2014 wheels (glibc 2.17+) for x86_64
#                and aarch64 of every CPython 3.9-3.13, cross-built with zig cc, with
#                hiredis, xxhash and OpenSSL inside (packaging/wheels.sh)
#   make dist-check   the same, then this Python's x86_64 wheel in a fresh venv with no
#                compiler on PATH and the suite (not its slow tests) run against it; the sdist built
#                with only a C compiler; the aarch64 wheel under qemu-user
#   make every-python the x86_64 wheel of every CPython 3.9-3.13 that pyenv has, each
#                with the suite but its slow tests (make test runs those); make aarch64-check: the aarch64 smoke test
#   make fuzz    the libFuzzer targets of the core's parsers (fuzz/README.md), FUZZ_SECONDS
#                each (default 60); make fuzz-brief: 20 s each, as CI runs them
#   make python-ft    a free-threaded CPython 3.13 built from Debian's source (cached);
#                make test-ft: the in-memory filters' tests on it with the GIL off
#   make ci      what CI runs (.ci/run): test, docs, sanitize, every-python, aarch64-check,
#                fuzz-brief
#
# Each target installs what it needs (Debian packages with apt-get, a .venv with the
# package and its extras from PyPI) and is quick when everything is already there.

SHELL  := /bin/bash
PYTHON ?= python3
VENV   := .venv
VPY    := $(VENV)/bin/python
SUDO   := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

# Build: a C compiler, pkg-config, the two C libraries.  Tests and demo: a redis-server.
APT_PACKAGES := gcc make pkg-config libxxhash-dev libhiredis-dev libssl-dev openssl redis-server

.PHONY: demo docs test test-python test-c redis8 redis8-start soak bench build deps venv venv-test venv-bench venv-demo \
        venv-docs clean sanitize sdist dist dist-check every-python ci fuzz fuzz-brief fuzz-deps \
        sanitize-deps dist-deps aarch64-check python-ft python-ft-deps test-ft

demo: build venv-demo
	$(VPY) -m ling_bloom demo

# The site: strict (a warning, or a link to a page or heading that is not there, fails;
# not with --quiet, which hides the warnings from the count that --strict fails on),
# NO_MKDOCS_2_WARNING quiets a notice the Material theme prints about its future.  Then
# check_site.py: every public class of ling_bloom has each public method and property in
# the API reference.
docs: build venv-docs
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict
	$(VPY) docs/_ext/check_site.py site

test: test-python test-c

# pytest on every core (pytest-xdist): PYTEST_WORKERS processes (default: the cores; 0 runs
# them in this one process, as plain `pytest` does), each with its own redis-servers on ports
# of its own (tests/support/redis_server.py).  --dist loadgroup: a test goes to whichever
# worker is free, except that the tests on the session's cluster go to one worker together
# (conftest.py), which builds the cluster once.  Then the tests marked `serial` (they must
# not share the cores: tests/README.md), alone; exit status 5 is "none selected".
PYTEST_WORKERS ?= $(shell nproc 2>/dev/null || echo 0)
PYTEST_XDIST   := -n $(PYTEST_WORKERS) --dist loadgroup

test-python: redis8-start build venv-test redis8
	$(VPY) -m pytest $(PYTEST_XDIST) -m "not serial" $(PYTEST_ARGS)
	$(VPY) -m pytest -m serial $(PYTEST_ARGS) || [ $$? = 5 ]

# The deployment tests (Cluster, Sentinel, asyncio on a cluster, real web servers) SOAK_N
# times, a fresh pytest process each round, as make test runs them (on every core); then a
# table of the tests that failed, failures/N (tests/support/soak.py).
SOAK_N     ?= 20
SOAK_FILES := tests/redis/test_redis_cluster.py tests/redis/test_redis_sentinel.py \
              tests/redis/test_aio_cluster.py tests/integrations/test_live_servers.py

soak: build venv-test redis8
	$(VPY) tests/support/soak.py $(SOAK_N) $(PYTEST_XDIST) $(PYTEST_ARGS) -- $(SOAK_FILES)

test-c: deps
	$(MAKE) -C tests/c test

# Redis 8.0 (redis-server, redis-cli) for the tests marked `servers`, which run on it beside
# Redis 7.0 and Valkey 8.1: built from the upstream tarball of Debian 13's redis that
# packaging/sources.lock pins, with TLS against libssl-dev, once per pin (cached in
# ~/.cache/ling_bloom; about 3 minutes on two cores).  redis8-start starts that build in
# the background: make test does so before it installs the venv and builds the extension
# (much of that waits on the network), and `redis8` waits for it (or builds) before pytest.
# A build that fails (no deb-src entry and not root, say) leaves its tests to skip, saying
# why, or under CI=true to fail.
redis8-start: deps
	@bash packaging/redis8.sh --start \
	  || echo "make: the Redis 8.0 build did not start (see above): make redis8 tries again"

redis8: deps
	@bash packaging/redis8.sh > /dev/null \
	  || echo "make: Redis 8.0 was not built (see above): the tests on it skip (under CI=true they fail)"

bench: build venv-bench
	$(VPY) benchmarks/run.py

# Debian packages, installed only when one is missing: $(call apt_install,PACKAGES).
apt_install = @missing=""; \
	for p in $(1); do \
	  dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q "ok installed" || missing="$$missing $$p"; \
	done; \
	if [ -n "$$missing" ]; then \
	  echo "apt-get install:$$missing"; \
	  $(SUDO) apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq --no-install-recommends $$missing; \
	fi

deps:
	$(call apt_install,$(APT_PACKAGES))

# The venv holds the package as an editable install of the source tree, with an extra's
# requirements; the extension itself is left to `make build`, which compiles it once, in
# place (LING_BLOOM_NO_EXTENSION=1: setup.py declares none for these installs, so none of
# them compiles it again in a build directory of its own).
EDITABLE := LING_BLOOM_NO_EXTENSION=1 $(VPY) -m pip install -q --disable-pip-version-check \
            --no-build-isolation -e

$(VENV)/.stamp-base: pyproject.toml setup.py | deps
	test -x $(VPY) || $(PYTHON) -m venv $(VENV)
	$(VPY) -m pip install -q --disable-pip-version-check 'setuptools>=77' wheel
	$(EDITABLE) .
	touch $@

$(VENV)/.stamp-%: pyproject.toml $(VENV)/.stamp-base
	$(EDITABLE) '.[$*]'
	touch $@

venv: $(VENV)/.stamp-base
venv-test: $(VENV)/.stamp-test
venv-bench: $(VENV)/.stamp-bench
venv-demo: $(VENV)/.stamp-demo
venv-docs: $(VENV)/.stamp-docs

# The extension, rebuilt in place when a C file changed (a no-op otherwise).
build: venv
	@$(VPY) setup.py build_ext --inplace > $(VENV)/build.log 2>&1 || { cat $(VENV)/build.log; exit 1; }
	@grep -E 'warning:|error:' $(VENV)/build.log || true

# ---- sanitizers -----------------------------------------------------------------------
# The extension is built apart, in $(SAN_DIR)/lib (next to links to the package's Python
# files), so the normal in-place build stays as it is; Python itself is not instrumented,
# so the ASan runtime is preloaded into it (PYTHONSAFEPATH, Python 3.11+: the working
# directory's in-place build must not come first on sys.path; the check below fails
# otherwise), with leak detection off (the interpreter keeps memory until exit on purpose;
# allocator_may_return_null: the tests of filters too large to allocate expect MemoryError,
# not an abort), libstdc++ preloaded too (ASan must see it at start, or the first C++
# exception of another extension, matplotlib's, aborts) and PYTHONMALLOC=malloc (so ASan
# sees the binding's PyMem_* buffers).  Any report aborts the process, which fails its
# test.  The C tests are built with the same compiler and flags (added to theirs:
# tests/c/Makefile) and removed afterwards.  pytest runs on every core as for make test
# (the xdist workers inherit the preloaded runtime and the sanitizer build's PYTHONPATH);
# PYTEST_WORKERS=0 runs them in the one pytest process.
#
# Compiler and runtime: clang 19 and its compiler-rt, not gcc's libasan.  The stress tests
# and the fork tests fork a process while other threads run batches and Redis
# round trips, and the child then allocates.  GCC 12's libasan (Debian 12) takes no lock
# around fork(): a child forked while another thread held one of its allocator's locks
# waits forever (gdb: FutexWait <- SizeClassAllocator64::GetFromAllocator <- asan_malloc
# <- lb_redis_new, in the child of the test of a fork during RedisFilter round trips).
# compiler-rt since LLVM 18 holds its allocator, stack depot and thread registry across
# fork (pthread_atfork), as glibc's malloc does for a normal build.  llvm-19 brings llvm-symbolizer, for readable reports.
SAN_DIR   := .sanitize
SAN_CC    := clang-19
SAN_APT   := clang-19 libclang-rt-19-dev llvm-19
SAN_SYMBOLIZER := /usr/lib/llvm-19/bin/llvm-symbolizer
SAN_FLAGS := -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=all
SAN_ENV   := PYTHONPATH=$(CURDIR)/$(SAN_DIR)/lib PYTHONSAFEPATH=1 \
             LD_PRELOAD="$$($(SAN_CC) -print-file-name=libclang_rt.asan-x86_64.so) $$($(CC) -print-file-name=libstdc++.so)" \
             ASAN_OPTIONS=detect_leaks=0:abort_on_error=1:allocator_may_return_null=1:detect_stack_use_after_return=0 \
             UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
             ASAN_SYMBOLIZER_PATH=$(SAN_SYMBOLIZER) PYTHONMALLOC=malloc

sanitize-deps: deps
	$(call apt_install,$(SAN_APT))

sanitize: sanitize-deps venv-test redis8
	rm -rf $(SAN_DIR) && mkdir -p $(SAN_DIR)/lib/ling_bloom
	@LING_BLOOM_DEBUG=1 CC=$(SAN_CC) CFLAGS="$(SAN_FLAGS)" LDFLAGS="$(SAN_FLAGS)" \
	  $(VPY) setup.py build_ext --build-lib $(SAN_DIR)/lib --build-temp $(SAN_DIR)/tmp \
	  > $(SAN_DIR)/build.log 2>&1 || { cat $(SAN_DIR)/build.log; exit 1; }
	@grep -E 'warning:|error:' $(SAN_DIR)/build.log || true
	@for f in ling_bloom/*; do \
	  case "$$f" in *.so|*/__pycache__) ;; *) ln -sfn "$(CURDIR)/$$f" "$(SAN_DIR)/lib/$$f";; esac; \
	done
	$(SAN_ENV) $(VPY) -c "import ling_bloom._core as c, sys; \
	  sys.exit(0 if '/$(SAN_DIR)/lib/' in c.__file__ else 'not the sanitizer build: ' + c.__file__)"
	$(MAKE) -C tests/c clean
	ASAN_SYMBOLIZER_PATH=$(SAN_SYMBOLIZER) \
	  $(MAKE) -C tests/c test CC=$(SAN_CC) CFLAGS="-O1 -g $(SAN_FLAGS)" LDFLAGS="$(SAN_FLAGS)"
	$(MAKE) -C tests/c clean
	$(SAN_ENV) $(VPY) -m pytest -p no:cacheprovider $(PYTEST_XDIST) -m "not serial" $(PYTEST_ARGS)
	$(SAN_ENV) $(VPY) -m pytest -p no:cacheprovider -m serial $(PYTEST_ARGS) || [ $$? = 5 ]

# ---- packaging (packaging/*.sh say what each step checks) ----------------------------
# The wheels: manylinux2014 (glibc 2.17 and newer), x86_64 and aarch64, one per CPython
# 3.9-3.13 (pyenv's), cross-built with zig cc (PyPI's ziglang) from the sdist, with
# hiredis, xxhash and a static OpenSSL inside, built from the Debian sources that
# packaging/sources.lock pins (cached in ~/.cache/ling_bloom).  dpkg-dev: apt-get source;
# qemu-user-static and debootstrap: the aarch64 wheel's test in an arm64 Debian root.
PACKAGING_APT := dpkg-dev qemu-user-static debootstrap
dist-deps: deps
	$(call apt_install,$(PACKAGING_APT))

sdist: dist-deps
	bash packaging/sdist.sh

# Every wheel into dist/, each checked by auditwheel show (manylinux_2_17) and for the
# libraries it needs (glibc's only).
dist: sdist
	bash packaging/wheels.sh

# make dist, then: this Python's x86_64 wheel in a clean venv with the suite (not its slow tests); the
# sdist built with only a C compiler (no hiredis, xxhash or OpenSSL headers); the aarch64
# wheel of CPython 3.11 under qemu-user (packaging/check_aarch64.sh says what runs there).
dist-check: dist
	bash packaging/check_wheel.sh "$$(command -v $(PYTHON))"
	bash packaging/check_sdist.sh
	bash packaging/check_aarch64.sh

# The x86_64 wheel of every CPython 3.9-3.13, each with the suite (not its slow tests) in a clean venv.
every-python: sdist
	bash packaging/every_python.sh $(PYTHONS)

# The aarch64 smoke test as CI runs it: the CPython 3.11 aarch64 wheel (and the x86_64
# one it is read back with) built, then run under qemu-user; and the sdist's bare build.
aarch64-check: sdist
	PYTHONS=3.11 bash packaging/wheels.sh aarch64
	[ -n "$$(ls dist/ling_bloom-*-cp311-cp311-manylinux2014_x86_64.*.whl 2>/dev/null)" ] || PYTHONS=3.11 bash packaging/wheels.sh x86_64
	bash packaging/check_aarch64.sh
	bash packaging/check_sdist.sh

# ---- free-threaded CPython (3.13t) ------------------------------------------------------
# make python-ft: a free-threaded CPython 3.13 (--disable-gil) built from Debian 13's
# python3.13 source package, pinned by SHA-256 in packaging/sources.lock
# (packaging/python_ft.sh; cached in ~/.cache/ling_bloom, so built once per machine).
# make test-ft: the package installed editable in the venv .venv-ft (the stress tests' workers
# import it), the extension built on it in place (a _core.cpython-313t-*.so beside this
# Python's), and the in-memory filters' tests (tests/filters, not
# those that need a redis-server) run there with the GIL off (polars has no wheel for a
# free-threaded CPython: its two column tests skip).  The extension does not
# declare yet that it runs without the GIL (the Redis types are not made safe for it),
# so importing it would turn the GIL back on: PYTHON_GIL=0 keeps it off, and the target
# checks that it is off after the import.
FT_VENV := .venv-ft
FT_VPY  := $(FT_VENV)/bin/python

# dpkg-dev: apt-get source (packaging/python_ft.sh installs the headers it builds with)
python-ft-deps: deps
	$(call apt_install,dpkg-dev)

python-ft: python-ft-deps
	bash packaging/python_ft.sh

test-ft: python-ft-deps
	@py="$$(bash packaging/python_ft.sh)" && { [ -x $(FT_VPY) ] || "$$py" -m venv $(FT_VENV); }
	$(FT_VPY) -m pip install -q --disable-pip-version-check pytest 'setuptools>=77' wheel xxhash numpy pyarrow pandas
	LING_BLOOM_NO_EXTENSION=1 $(FT_VPY) -m pip install -q --disable-pip-version-check --no-build-isolation -e .
	@$(FT_VPY) setup.py build_ext --inplace > $(FT_VENV)/build.log 2>&1 || { cat $(FT_VENV)/build.log; exit 1; }
	PYTHON_GIL=0 $(FT_VPY) -c "import sys, ling_bloom; sys.exit('the GIL is on' if sys._is_gil_enabled() else 0)"
	PYTHON_GIL=0 $(FT_VPY) -m pytest -p no:cacheprovider -m "not redis" tests/filters $(PYTEST_ARGS)

# ---- fuzzing (fuzz/Makefile builds and runs the targets; findings go to build/fuzz) ----
FUZZ_APT := clang libclang-rt-14-dev
fuzz-deps: deps
	$(call apt_install,$(FUZZ_APT))

fuzz: fuzz-deps
	$(MAKE) -C fuzz run FUZZ_SECONDS=$${FUZZ_SECONDS:-60}

fuzz-brief: fuzz-deps
	$(MAKE) -C fuzz run FUZZ_SECONDS=20

ci: test docs sanitize every-python aarch64-check fuzz-brief

clean:
	rm -rf build dist site ling_bloom/*.so $(VENV) $(VENV)-* $(SAN_DIR)
	$(MAKE) -C tests/c clean
