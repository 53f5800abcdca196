# taskring — the two commands: `make run` (main demo) and `make test` (every test).
# Both install what they need on a fresh machine of this kind (Rust is preinstalled;
# crates come from crates.io through cargo, pinned by Cargo.lock).

CARGO ?= cargo
PYTHON ?= python3
VENV := .venv
VPY := $(VENV)/bin/python
export CARGO_TERM_COLOR ?= never

.PHONY: run test test-rust test-loom test-python py-dev venv bench demo-l2 demo-l3 fmt clippy clean

# The main demo: an L3 dispatch of heterogeneous L2 tasks, each with its own sizing.
run: demo-l3

demo-l3: py-dev
	$(VPY) examples/l3_demo.py

demo-l2:
	$(CARGO) run --locked --release -q -p taskring --example l2_demo

test: test-rust test-loom test-python

# Python package: a virtual environment with the pinned tools, the native module built
# by maturin into it (release mode), then pytest.
$(VENV)/.ready: python/requirements-dev.txt
	$(PYTHON) -m venv $(VENV)
	$(VPY) -m pip install -q -r python/requirements-dev.txt
	touch $@

venv: $(VENV)/.ready

py-dev: venv
	VIRTUAL_ENV=$(abspath $(VENV)) PATH=$(abspath $(VENV))/bin:$$PATH $(VENV)/bin/maturin develop --release -q

test-python: py-dev
	$(VPY) -m pytest -q python/tests

test-rust:
	$(CARGO) test --locked -p taskring -p taskring-cli

# Model checks of the ring/completion core (loom); a separate build with --cfg loom.
test-loom:
	@if [ -f crates/taskring/tests/loom_core.rs ]; then \
	  RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=target/loom $(CARGO) test --locked --release -p taskring --test loom_core; \
	else echo "no loom model yet"; fi

# Benchmarks B2-B7 of BENCHMARKS.md (docs/performance.md): JSON results under
# bench-results/, one summary line each. B7 (Python) also re-measures B2 for its ratio.
$(VENV)/.bench-ready: benches/requirements.txt $(VENV)/.ready
	$(VPY) -m pip install -q -r benches/requirements.txt
	touch $@

# B2-B6, B7 (Python), B1 (METG sweeps of trivial and stencil_1d against OpenMP), then
# the PNG plots; results and plots in bench-results/. About 4 minutes on 2 cores.
bench: py-dev $(VENV)/.bench-ready
	$(CARGO) run --locked --release -p taskring-cli -- bench all
	$(VPY) benches/b7_python.py
	$(VPY) benches/taskbench/metg.py trivial stencil_1d
	$(VPY) benches/plots.py

fmt:
	$(CARGO) fmt --all

clippy:
	$(CARGO) clippy --all-targets -- -D warnings

clean:
	$(CARGO) clean
