#!/bin/sh
# An L4 round trip hop by hop (docs/performance.md, "Seventh session"): builds an
# instrumented `_native` module from HEAD in a scratch worktree (the product is not
# changed), runs `prof.py` under `taskring launch --hosts 2` with it first on the
# Python path, prints the median of each hop, removes the worktree. The patch is against
# commit c2cb4af (re-cut it if HEAD moved under it). Needs `make py-dev` (the venv, MPI).
# Usage: benches/l4_hops/run.sh [N]   (TR_PIN="0:0,1:1,2:1" pins ranks to CPUs, see prof.py)
set -eu
N=${1:-2000}
ROOT=$(git rev-parse --show-toplevel)
WT=${WT:-/tmp/l4_hops_wt}
OUT=${HOPS_OUT:-/tmp/l4_hops_out}
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-/tmp/l4_hops_target}
PY="$ROOT/.venv/bin/python"
git -C "$ROOT" worktree add --detach "$WT" HEAD >/dev/null
trap 'git -C "$ROOT" worktree remove --force "$WT"' EXIT
git -C "$WT" apply "$ROOT/benches/l4_hops/instrument.patch"
(cd "$WT" && PYO3_PYTHON="$PY" cargo build --release -p taskring-py --features mpi)
SUFFIX=$("$PY" -c "import sysconfig; print(sysconfig.get_config_var('EXT_SUFFIX'))")
cp "$CARGO_TARGET_DIR/release/libtaskring_native.so" "$WT/python/taskring/_native$SUFFIX"
rm -rf "$OUT"
mkdir -p "$OUT"
PYTHONPATH="$WT/python" TR_HOPS="$OUT/h" HOPS_OUT="$OUT" "$ROOT/.venv/bin/taskring" launch --hosts 2 "$ROOT/benches/l4_hops/prof.py" "$N"
"$PY" "$ROOT/benches/l4_hops/aggregate.py" "$OUT"
