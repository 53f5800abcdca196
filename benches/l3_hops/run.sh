#!/bin/sh
# The L3 round trip hop by hop (issue 16 baseline; docs/performance.md, "L3 round trip,
# hop by hop"). Builds a temporary instrumented copy of HEAD in a scratch worktree (the
# product is not changed), runs it REPS times (N L3 runs of one tiny L2 task each, the
# bare ping-pong, N bare ChipWorker runs), prints the median of each hop over the runs,
# and removes the worktree. The patch is against commit 12e7313 (re-cut it if HEAD moved
# under it). Usage: benches/l3_hops/run.sh [REPS] [N]
set -eu
REPS=${1:-6}
N=${2:-5000}
ROOT=$(git rev-parse --show-toplevel)
WT=${WT:-/tmp/l3_hops_wt}
OUT=${OUT:-/tmp/l3_hops_out}
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-/tmp/l3_hops_target}
git -C "$ROOT" worktree add --detach "$WT" HEAD >/dev/null
trap 'git -C "$ROOT" worktree remove --force "$WT"' EXIT
git -C "$WT" apply "$ROOT/benches/l3_hops/instrument.patch"
(cd "$WT" && cargo build --release --example prof_l3 -p taskring)
mkdir -p "$OUT"
for i in $(seq "$REPS"); do
    echo "rep $i: load $(cut -d' ' -f1-3 /proc/loadavg)"
    PROF=1 "$CARGO_TARGET_DIR/release/examples/prof_l3" "$N" >"$OUT/prof_$i.txt" 2>&1
    # The same binary without stamps (PROF unset: each stamp is one null check).
    "$CARGO_TARGET_DIR/release/examples/prof_l3" "$N" >"$OUT/off_$i.txt" 2>&1
    grep -h "node_rt\|chipworker\|pingpong_us" "$OUT/prof_$i.txt" "$OUT/off_$i.txt"
done
python3 "$ROOT/benches/l3_hops/aggregate.py" "$OUT/prof_*.txt"
