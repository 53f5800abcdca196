# taskring — the two commands: `make run` (main demo) and `make test` (every test).
# Both install what they need on a fresh machine of this kind (Rust is preinstalled;
# crates come from crates.io through cargo, pinned by Cargo.lock).

CARGO ?= cargo
PYTHON ?= python3
VENV := .venv
VPY := $(VENV)/bin/python
export CARGO_TERM_COLOR ?= never

.PHONY: run test test-rust test-loom test-python py-dev venv bench demo-l2 demo-l3 fmt clippy lint clean
.PHONY: fuzz soak browser mpi demo-l4 bench-l4 test-cluster
.PHONY: tbb peers-build peers
.PHONY: clang test-headers demo-simpler

# The main demo: an L3 dispatch of heterogeneous L2 tasks, each with its own sizing.
run: demo-l3

demo-l3: py-dev
	$(VPY) examples/l3_demo.py

# Simpler's Python API on taskring: an L3 orchestration submits C++ programs (compiled by
# simpler_setup's KernelCompiler) to two chips, each L2 task with its own runtime_env.
demo-simpler: py-dev
	$(VPY) examples/simpler/per_task_runtime_env/main.py

demo-l2:
	$(CARGO) run --locked --release -q -p taskring --example l2_demo

# Lint, the PTO2 headers (seconds) and the Rust tests first; then the loom models beside pytest, which mostly waits
# (on chip processes, timeouts, subprocesses, mpirun: ~100 s of CPU in ~250-300 s) and
# leaves the cores to the loom build and models (measured on 2 shared cores: the two
# together 6 min, one after the other about 9-10); then the L4 tests across nodes. -j3:
# two targets, and a job slot more so that cargo, which takes its jobs from make's, builds
# on both cores. The later steps reuse the native module lint installed (PY_DEV_BUILD=:).
test: lint test-headers test-rust
	$(MAKE) --no-print-directory -j3 --output-sync=target test-loom test-python PY_DEV_BUILD=:
	$(MAKE) --no-print-directory test-cluster PY_DEV_BUILD=:

# Python package: a virtual environment with the pinned tools, the native module built
# by maturin into it (release mode), then pytest.
$(VENV)/.ready: python/requirements-dev.txt
	$(PYTHON) -m venv $(VENV)
	$(VPY) -m pip install -q -r python/requirements-dev.txt
	touch $@

venv: $(VENV)/.ready

# The native module, with L4 (MPI) when Open MPI and libclang are installed (`make mpi`).
PY_DEV_BUILD = VIRTUAL_ENV=$(abspath $(VENV)) PATH=$(abspath $(VENV))/bin:$$PATH $(VENV)/bin/maturin develop --release -q $$($(MPI_FEATURES))
py-dev: venv mpi
	$(PY_DEV_BUILD)

# L4 (docs/api.md §9) runs on Open MPI through the `mpi` crate, whose build needs libclang
# (bindgen). Installed from Debian's packages when missing and running as root; otherwise
# this says what to install, and everything but L4 builds and runs without them.
MPI_PACKAGES := openmpi-bin libopenmpi-dev libclang-dev
MPI_FEATURES = if command -v mpicc >/dev/null 2>&1 && command -v mpirun >/dev/null 2>&1 && ls /usr/lib/llvm-*/lib/libclang*.so* >/dev/null 2>&1; then echo --features mpi; fi
mpi:
	@if [ -n "$$($(MPI_FEATURES))" ]; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	  echo "make mpi: installing $(MPI_PACKAGES) (Debian packages) for L4"; \
	  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $(MPI_PACKAGES) >/dev/null) \
	    || echo "make mpi: could not install $(MPI_PACKAGES); L4 (Worker(level=4)) will be unavailable"; \
	else echo "make mpi: Open MPI or libclang not found; for L4 install them (as root: apt-get update && apt-get install -y $(MPI_PACKAGES)), then run make again"; fi

# L4 demo: 2 hosts x 2 chips on this machine (taskring launch = mpirun on shared memory
# and loopback), per-host ring sizes with a per-chip tweak; each chip task's resolved
# sizing and where each value came from.
demo-l4: py-dev
	$(VENV)/bin/taskring launch --hosts 2 examples/l4_demo.py

test-python: py-dev browser
	$(VPY) -m pytest -q python/tests
	$(VPY) -m pytest -q -p taskring.simpler.pytest_plugin examples/simpler --platform a2a3sim

# L4 across separate nodes (python/tests/cluster/run.sh): 4 nodes made of Linux namespaces
# on a bridge, mpirun starting the ranks of other nodes through an nsenter agent as it
# would through ssh; the L4 demo, B8 (small) and test_l4.py across them, then nothing may
# be left. Needs root, iproute2, util-linux and Open MPI (the first two installed here from
# Debian when missing and running as root); otherwise it says why and skips. About a minute.
CLUSTER_PACKAGES := iproute2 util-linux
test-cluster: py-dev
	@if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 && \
	  ! { command -v ip && command -v unshare && command -v nsenter; } >/dev/null 2>&1; then \
	  echo "make test-cluster: installing $(CLUSTER_PACKAGES) (Debian packages)"; \
	  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $(CLUSTER_PACKAGES) >/dev/null) \
	    || echo "make test-cluster: could not install $(CLUSTER_PACKAGES)"; fi
	timeout 600 python/tests/cluster/run.sh

# Headless Chromium for the report's browser test (python/tests/test_report.py): Debian's
# `chromium`, installed when missing and running as root; otherwise this says what to
# install (the test then skips, saying why).
browser:
	@if command -v chromium >/dev/null 2>&1; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null) \
	    || echo "make browser: could not install Debian's chromium; the report's browser test will skip"; \
	else echo "make browser: chromium not found; install Debian's chromium (as root: apt-get update && apt-get install -y chromium) for the report's browser test"; fi

test-rust: mpi
	$(CARGO) test --locked -p taskring -p taskring-bench $$($(MPI_FEATURES) | sed 's/mpi/taskring\/mpi/')

# Model checks (loom; a separate build with --cfg loom), inside the crate
# (crates/taskring/src/loom_models): the ring/completion core (ring), the chip's abort
# handshake (chip), the mailbox's wake-up elision (mailbox), idle cores parking and
# waking (park) and the orchestrator's own ready ring (queue). Optimized (the models
# explore ~2 million interleavings), without LTO or debug info: measured on 2 shared
# cores, ~125 s of CPU to build (~160 s with the release profile's line tables); a
# failing model still names its assertion and line.
test-loom:
	RUSTFLAGS="--cfg loom" CARGO_PROFILE_RELEASE_LTO=false CARGO_PROFILE_RELEASE_DEBUG=0 CARGO_TARGET_DIR=target/loom $(CARGO) test --locked --release -p taskring --lib loom_models::

# Fuzz tests of the frame decoders, PTO2_RING_* parsing and the scope-stats reader /
# sizing advisor (crates/taskring/tests/fuzz.rs) with the long budget: FUZZ_CASES per
# property, about 2.5 minutes on 2 cores (`make test` runs the same file with its small
# default budget, a few seconds). Bounded to 10 minutes; each property prints its cases
# and time. FUZZ_ARGS: more test-harness arguments (e.g. a test name filter).
FUZZ_CASES ?= 200000
FUZZ_ARGS ?=
fuzz:
	TASKRING_FUZZ_CASES=$(FUZZ_CASES) timeout 600 $(CARGO) test --locked -p taskring --test fuzz -- --nocapture $(FUZZ_ARGS)

# Soak (not part of `make test`): random L2/L3 programs, random per-task ring sizes and
# injected faults for SOAK_MINUTES (at most 10), checked against numpy, with RSS, fds,
# mappings and child processes back at their baseline at the end. SOAK_ARGS e.g.
# `--sigstop` (chip SIGSTOP fault) or `--seed 7`. Then soak/sub_soak.py for SOAK_SUB_MINUTES:
# random DAGs of SUB tasks (simpler.worker.Worker, L3 and L4 by composition) with SUB
# faults (a raising callable, SIGKILL, os._exit), checked the same way.
SOAK_MINUTES ?= 5
SOAK_ARGS ?=
SOAK_L4_MINUTES ?= 1
SOAK_SUB_MINUTES ?= 1
soak: py-dev
	$(VPY) soak/soak.py --minutes $(SOAK_MINUTES) $(SOAK_ARGS)
	$(VPY) soak/sub_soak.py --minutes $(SOAK_SUB_MINUTES)
	@if [ -n "$$($(MPI_FEATURES))" ]; then set -x; timeout 900 $(VPY) soak/l4_soak.py --minutes $(SOAK_L4_MINUTES); else echo "make soak: no Open MPI: the L4 part (soak/l4_soak.py) is skipped; see make mpi"; fi

# Benchmarks B2-B7 (docs/benchmarks.md, docs/performance.md): JSON results under
# bench-results/, one summary line each. B7 (Python) also re-measures B2 for its ratio.
$(VENV)/.bench-ready: benches/requirements.txt $(VENV)/.ready
	$(VPY) -m pip install -q -r benches/requirements.txt
	touch $@

# B2-B6, B7 and B10 (Python), B12 (the Simpler examples; B12_UPSTREAM=<Simpler checkout>,
# with PTO_ISA_ROOT set, adds upstream's vector example), B1 (METG sweeps of trivial and
# stencil_1d against OpenMP), the peers (oneTBB and OpenMP on the B3 patterns; skipped,
# saying why, without oneTBB), then the PNG plots; results and plots in bench-results/.
# About 5 minutes on 2 cores.
bench: py-dev $(VENV)/.bench-ready peers-build
	$(CARGO) run --locked --release -p taskring-bench -- all
	$(VPY) benches/b7_python.py
	$(VPY) benches/b10_python.py
	$(VPY) benches/b12_simpler.py $(if $(B12_UPSTREAM),--upstream $(B12_UPSTREAM))
	$(VPY) benches/b13_sub.py
	$(VPY) benches/taskbench/metg.py trivial stencil_1d
	@if [ -x $(PEERS_BIN) ]; then set -x; $(CARGO) run --locked --release -p taskring-bench -- peers; \
	else echo "make bench: $(PEERS_BIN) not built (no oneTBB, see make tbb): the peers benchmark is skipped"; fi
	$(VPY) benches/plots.py

# The peers benchmark (docs/benchmarks.md, `taskring-bench peers`): the B3 patterns run by
# oneTBB flow_graph and OpenMP task depend (benches/peers/peers.cpp, built here with g++
# -fopenmp -ltbb) beside taskring, in the same run. oneTBB is Debian's libtbb-dev,
# installed when missing and running as root; otherwise this says what to install.
PEERS_BIN := target/peers/peers
PEERS_CXX ?= g++
TBB_PACKAGES := libtbb-dev
TBB_HEADER := /usr/include/oneapi/tbb/flow_graph.h
tbb:
	@if [ -f $(TBB_HEADER) ]; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	  echo "make tbb: installing $(TBB_PACKAGES) (Debian package) for the peers benchmark"; \
	  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $(TBB_PACKAGES) >/dev/null) \
	    || echo "make tbb: could not install $(TBB_PACKAGES); the peers benchmark will be unavailable"; \
	else echo "make tbb: oneTBB not found; for the peers benchmark install it (as root: apt-get update && apt-get install -y $(TBB_PACKAGES)), then run make again"; fi

$(PEERS_BIN): benches/peers/peers.cpp
	@mkdir -p $(dir $@)
	$(PEERS_CXX) -O2 -std=c++17 -fopenmp -Wall -Wextra -o $@ $< -ltbb

peers-build: tbb
	@if [ -f $(TBB_HEADER) ]; then $(MAKE) --no-print-directory $(PEERS_BIN); \
	else echo "make peers-build: oneTBB not found (see make tbb): $(PEERS_BIN) not built"; fi

peers: peers-build
	$(CARGO) run --locked --release -p taskring-bench -- peers

# The PTO2 headers (include/pto2, upstream Simpler's orchestration and kernel names):
# tests/headers built as libraries with g++ and clang++-19, each as C++17 and C++23,
# warnings as errors; the orchestration library must export the two taskring_pto2_*
# entry points beside its own, and no GNU-unique symbol (which would pin it in memory);
# fake_chip runs the wrappers against a recording function table. clang-19 is Debian's
# package, installed when missing and running as root (make clang); without it the
# g++ half runs. clang-19 with compiler-rt's builtins (libclang-rt-19-dev: the bf16
# conversions) is also what taskring.simpler_setup.KernelCompiler builds PTO-ISA kernels
# with on Debian 12, whose g++ 12 cannot.
HEADERS_OUT := target/headers
HEADERS_FLAGS := -O2 -Wall -Wextra -Werror -I include/pto2
CLANG_PACKAGES := clang-19 libclang-rt-19-dev
CLANG_FOUND = command -v clang++-19 >/dev/null 2>&1 && ls /usr/lib/llvm-19/lib/clang/19/lib/linux/libclang_rt.builtins-*.a >/dev/null 2>&1
clang:
	@if $(CLANG_FOUND); then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	  echo "make clang: installing $(CLANG_PACKAGES) (Debian packages) for make test-headers and PTO-ISA kernels"; \
	  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $(CLANG_PACKAGES) >/dev/null) \
	    || echo "make clang: could not install $(CLANG_PACKAGES); make test-headers will use g++ only and PTO-ISA kernels need g++ >= 13"; \
	else echo "make clang: clang++-19 or compiler-rt's builtins not found; for make test-headers with clang and for PTO-ISA kernels install them (as root: apt-get update && apt-get install -y $(CLANG_PACKAGES)), then run make again"; fi

test-headers: clang
	@set -e; for cxx in g++ clang++-19; do \
	  if ! command -v $$cxx >/dev/null 2>&1; then echo "make test-headers: $$cxx not found, skipped"; continue; fi; \
	  for std in c++17 c++23; do \
	    out=$(HEADERS_OUT)/$$cxx-$$std; mkdir -p $$out; \
	    $$cxx -std=$$std $(HEADERS_FLAGS) -shared -fPIC -o $$out/all_names.so tests/headers/all_names.cpp; \
	    $$cxx -std=$$std $(HEADERS_FLAGS) -shared -fPIC -o $$out/kernel_names.so tests/headers/kernel_names.cpp; \
	    $$cxx -std=$$std $(HEADERS_FLAGS) -o $$out/fake_chip tests/headers/fake_chip.cpp; \
	    nm -D --defined-only $$out/all_names.so > $$out/all_names.syms; \
	    nm -D --defined-only $$out/kernel_names.so > $$out/kernel_names.syms; \
	    for sym in taskring_pto2_config taskring_pto2_enter aicpu_orchestration_config aicpu_orchestration_entry; do \
	      grep -qw $$sym $$out/all_names.syms || { echo "make test-headers: $$cxx -std=$$std: all_names.so does not export $$sym"; exit 1; }; \
	    done; \
	    grep -qw kernel_entry $$out/kernel_names.syms || { echo "make test-headers: $$cxx -std=$$std: kernel_names.so does not export kernel_entry"; exit 1; }; \
	    if awk '$$2 == "u"' $$out/all_names.syms $$out/kernel_names.syms | grep .; then \
	      echo "make test-headers: $$cxx -std=$$std: GNU-unique symbols above"; exit 1; fi; \
	    $$out/fake_chip >/dev/null; \
	    echo "make test-headers: $$cxx -std=$$std ok"; \
	  done; \
	done

fmt:
	$(CARGO) fmt --all

clippy:
	$(CARGO) clippy --locked --workspace --all-targets $$($(MPI_FEATURES) | sed 's/mpi/taskring\/mpi,taskring-py\/mpi/') -- -D warnings

# Style enforced by tools: rustfmt (rustfmt.toml), clippy with warnings as errors, rustdoc
# with warnings as errors (broken links), mypy on the Python package and stubtest (the
# hand-written _native.pyi must match the built module).
lint: py-dev
	$(CARGO) fmt --all --check
	$(CARGO) clippy --locked --workspace --all-targets $$($(MPI_FEATURES) | sed 's/mpi/taskring\/mpi,taskring-py\/mpi/') -- -D warnings
	$(CARGO) clippy --locked -p taskring-py --lib -- -D warnings  # the build without MPI
	RUSTDOCFLAGS="-D warnings" $(CARGO) doc --locked --no-deps -p taskring --lib
	$(VPY) -m mypy
	$(VPY) -m mypy.stubtest taskring._native --allowlist python/stubtest-allowlist.txt --ignore-unused-allowlist

clean:
	$(CARGO) clean
