# taskring — the two commands: `make run` (main demo) and `make test` (every test).
# Both install what they need on a fresh machine of this kind (Rust is preinstalled;
# crates come from crates.io through cargo, pinned by Cargo.lock).

CARGO ?= cargo
export CARGO_TERM_COLOR ?= never

.PHONY: run test test-rust test-loom bench demo-l2 fmt clippy clean

run: demo-l2

demo-l2:
	$(CARGO) run --locked --release -q -p taskring --example l2_demo

test: test-rust test-loom

test-rust:
	$(CARGO) test --locked -p taskring

# Model checks of the ring/completion core (loom); a separate build with --cfg loom.
test-loom:
	@if [ -f crates/taskring/tests/loom_core.rs ]; then \
	  RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=target/loom $(CARGO) test --locked --release -p taskring --test loom_core; \
	else echo "no loom model yet"; fi

bench:
	$(CARGO) bench --locked -p taskring

fmt:
	$(CARGO) fmt --all

clippy:
	$(CARGO) clippy --all-targets -- -D warnings

clean:
	$(CARGO) clean
