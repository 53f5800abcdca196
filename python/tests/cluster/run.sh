#!/usr/bin/env bash
# The L4 job across separate nodes (`make test-cluster`): a cluster of NODES nodes made of
# Linux namespaces, each with its own network stack, hostname, IPC, /tmp and /dev/shm,
# joined by a bridge that lives in a namespace of its own. The hosts' nodes n1.. have
# pids of their own too; n0, where rank 0 and mpirun run, keeps the machine's (a process
# can enter only its own pid namespace's descendants, and mpirun starts the other
# nodes' ranks from there, through an nsenter agent that behaves as ssh does: a clean
# environment, the command as one shell string). The L4 demo, B8 (small) and
# python/tests/test_l4.py run across it (`taskring launch --hostfile`); then no process,
# no shared-memory file and nothing in /tmp may be left on any node. Every namespace, mount, veth and
# process is removed on the way out, whatever happened (trap). Addresses exist only
# inside the namespaces made here (10.77.0.0/24); the root namespace gains nothing.
#
# Skips (status 0, saying why) unless root with ip (iproute2), unshare and nsenter
# (util-linux), mpirun (Open MPI) and a build with MPI.
set -euo pipefail

REPO=$(cd "$(dirname "$0")/../../.." && pwd)
# The checkout's first directory under /tmp, when it is there (the nodes cover /tmp).
TMP_TOP=$(case "$REPO" in /tmp/?*) echo "${REPO#/tmp/}" | cut -d/ -f1 ;; esac)
PY=${TASKRING_CLUSTER_PYTHON:-$REPO/.venv/bin/python}
NODES=${TASKRING_CLUSTER_NODES:-4}   # rank 0 and up to 3 hosts, one rank per node
PYTEST_ARGS=${TASKRING_CLUSTER_PYTEST_ARGS:-}

skip() { echo "test-cluster: skipped: $*"; exit 0; }
[ "$(id -u)" = 0 ] || skip "needs root (it makes network, mount, UTS, IPC and pid namespaces)"
for t in ip unshare nsenter mpirun; do
  command -v "$t" >/dev/null 2>&1 || skip "needs $t (ip: iproute2; unshare, nsenter: util-linux; mpirun: Open MPI, see make mpi)"
done
[ -x "$PY" ] || skip "no $PY (make py-dev)"
"$PY" -c 'import sys, taskring._native as n; sys.exit(0 if n.mpi_built() else 1)' || skip "this build has no MPI (make mpi, then make py-dev)"
ip netns add "trc-probe-$$" 2>/dev/null && ip netns del "trc-probe-$$" || skip "cannot make a network namespace here (ip netns add failed)"
unshare --mount --uts --ipc --pid --fork true 2>/dev/null || skip "cannot make mount, UTS, IPC and pid namespaces here (unshare failed)"

ID=trc$$                                    # namespaces: $ID-sw (the bridge), $ID-n0..
RUN=$(mktemp -d /var/tmp/taskring-cluster.XXXXXX)   # seen by every node (not /tmp)
HOLDERS=()                                  # per node: the process holding its namespaces
LINKS_BEFORE=$(ip -o link show | awk -F': ' '{print $2}' | sort)   # the root namespace's
STARTERS=()

cleanup() {
  local status=$?
  set +e
  trap - EXIT INT TERM HUP
  # Every process in a node's namespaces (n0 shares the machine's pids: found by its
  # mount namespace), then the holders: killing a pid namespace's init kills every
  # process in it, and a mount namespace, with its tmpfs and bind mounts, goes with
  # its last process.
  if [ "${#HOLDERS[@]}" -gt 0 ]; then
    local m0; m0=$(readlink "/proc/${HOLDERS[0]}/ns/mnt")
    for p in /proc/[0-9]*; do [ "$(readlink "$p/ns/mnt" 2>/dev/null)" = "$m0" ] && kill -KILL "${p#/proc/}" 2>/dev/null; done
  fi
  for h in "${HOLDERS[@]}"; do kill -KILL "$h" 2>/dev/null; done
  for s in "${STARTERS[@]}"; do kill -KILL "$s" 2>/dev/null; done
  for ns in $(ip netns list | awk '{print $1}' | grep "^$ID-"); do ip netns del "$ns"; done
  if grep -q " $RUN" /proc/self/mounts; then echo "test-cluster: a mount under $RUN is left" >&2; status=1; fi
  rm -rf "$RUN"
  if ip netns list | grep -q "^$ID-"; then echo "test-cluster: a namespace is left" >&2; status=1; fi
  if [ "$(ip -o link show | awk -F': ' '{print $2}' | sort)" != "$LINKS_BEFORE" ]; then
    echo "test-cluster: the root namespace's interfaces changed" >&2; status=1
  fi
  echo "test-cluster: cluster removed (namespaces $ID-*, $RUN)"
  exit "$status"
}
trap cleanup EXIT
trap 'echo "test-cluster: failed at line $LINENO: $BASH_COMMAND" >&2' ERR
trap 'exit 130' INT
trap 'exit 143' TERM
trap 'exit 129' HUP

addr() { echo "10.77.0.$(( $1 + 1 ))"; }

# The bridge, in a namespace of its own.
ip netns add "$ID-sw"
ip -n "$ID-sw" link add br0 type bridge
ip -n "$ID-sw" link set br0 up

{ echo "127.0.0.1 localhost"; for i in $(seq 0 $((NODES - 1))); do echo "$(addr "$i") n$i"; done; } > "$RUN/hosts"
: > "$RUN/hostfile"

# A node's init: reaps the orphans of its pid namespace until it is killed.
cat > "$RUN/init.py" <<'PYEOF'
import os, signal, sys
def reap(*_):
    try:
        while os.waitpid(-1, os.WNOHANG)[0] > 0:
            pass
    except ChildProcessError:
        pass
signal.signal(signal.SIGCHLD, reap)
open(sys.argv[1], "w").close()
while True:
    signal.pause()
PYEOF

for i in $(seq 0 $((NODES - 1))); do
  n=n$i h=
  ip netns add "$ID-$n"
  ip -n "$ID-sw" link add "e$i" type veth peer name eth0 netns "$ID-$n"
  ip -n "$ID-sw" link set "e$i" master br0 up
  ip -n "$ID-$n" addr add "$(addr "$i")/24" dev eth0
  ip -n "$ID-$n" link set eth0 up
  ip -n "$ID-$n" link set lo up
  echo "$n slots=1" >> "$RUN/hostfile"
  pids="--pid --fork --kill-child" proc="mount -t proc proc /proc &&"
  [ "$i" = 0 ] && pids="" proc=""
  # A checkout under /tmp (a clean clone may be there) stays visible on the node: held
  # under $RUN while the node's own /tmp covers the machine's, then bound back in place.
  keep="" restore=""
  if [ -n "$TMP_TOP" ]; then
    mkdir -p "$RUN/repo.$n"
    keep="mount --bind $REPO $RUN/repo.$n &&"
    restore="mkdir -p $REPO && mount --bind $RUN/repo.$n $REPO &&"
  fi
  # shellcheck disable=SC2086
  ip netns exec "$ID-$n" unshare --mount --uts --ipc $pids --propagation private sh -c "
    cd / &&
    hostname $n &&
    $keep
    mount -t tmpfs -o mode=1777 tmpfs /tmp &&
    $restore
    mount -t tmpfs -o mode=1777 tmpfs /dev/shm &&
    mount --bind $RUN/hosts /etc/hosts &&
    $proc
    exec python3 $RUN/init.py $RUN/ready.$n" 2>>"$RUN/nodes.log" &
  STARTERS+=($!)
  disown $!
  for _ in $(seq 100); do [ -e "$RUN/ready.$n" ] && break; sleep 0.05; done
  [ -e "$RUN/ready.$n" ] || { echo "test-cluster: node $n did not start" >&2; exit 1; }
  h=${STARTERS[-1]}   # n0: the starter itself, exec'd into init.py; n1..: its child
  [ "$i" = 0 ] || read -r h _ < "/proc/$h/task/$h/children" || [ -n "$h" ]
  HOLDERS+=("$h")
  echo "$h" > "$RUN/pid.$n"
done

# Open MPI's rsh launcher runs "$agent [options] node command..." on n0, as it would ssh.
cat > "$RUN/agent" <<AGENTEOF
#!/bin/sh
while [ \$# -gt 0 ]; do case "\$1" in -*) shift ;; *) break ;; esac; done
node=\$1; shift
exec nsenter -t "\$(cat $RUN/pid.\$node)" --mount --uts --ipc --net --pid --wd=/ -- \\
  env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/root sh -c "\$*"
AGENTEOF
chmod +x "$RUN/agent"

# On n0 (rank 0's node), from the repository, with the launch's extra settings.
LAUNCH_ARGS="--iface 10.77.0.0/24 --mca plm_rsh_agent $RUN/agent --mca plm_rsh_no_tree_spawn 1"
on_n0() {
  nsenter -t "${HOLDERS[0]}" --mount --uts --ipc --net --wd="$REPO" -- \
    env TASKRING_TEST_HOSTFILE="$RUN/hostfile" TASKRING_TEST_LAUNCH_ARGS="$LAUNCH_ARGS" "$@"
}
launch() { on_n0 "$PY" -m taskring launch --hostfile "$RUN/hostfile" $LAUNCH_ARGS "$@"; }

echo "test-cluster: $NODES nodes (n0..n$((NODES - 1)): own network, hostname, IPC, /tmp, /dev/shm; pids but on n0) on a bridge; rank 0 on n0"
t0=$(date +%s)
echo "test-cluster: the L4 demo (2 hosts on n1, n2)"
launch --hosts 2 examples/l4_demo.py
echo "test-cluster: B8, small (2 hosts)"
launch --hosts 2 benches/b8_l4.py --reps 60 --tasks 400 --out "$RUN/b8_l4.json"
echo "test-cluster: python/tests/test_l4.py across the nodes"
# shellcheck disable=SC2086
on_n0 "$PY" -m pytest -q -p no:cacheprovider --basetemp="$RUN/pytest" python/tests/test_l4.py $PYTEST_ARGS

# Nothing may be left on any node: no process but its init, no shared-memory file, no
# file in /tmp.
left=0
for i in $(seq 0 $((NODES - 1))); do
  h=${HOLDERS[$i]}
  mine=$(readlink "/proc/$h/ns/mnt")
  procs=$(for p in /proc/[0-9]*; do [ "$(readlink "$p/ns/mnt" 2>/dev/null)" = "$mine" ] && [ "${p#/proc/}" != "$h" ] && [ "${p#/proc/}" != "${STARTERS[$i]}" ] && echo "${p#/proc/}: $(tr '\0' ' ' < "$p/cmdline" 2>/dev/null)"; done || true)
  shm=$(nsenter --mount="/proc/$h/ns/mnt" ls -A /dev/shm)
  # /tmp: Open MPI's session directories and the like; the output a test asked a host
  # to leave on its node is expected.
  tmp=$(nsenter --mount="/proc/$h/ns/mnt" ls -A /tmp | grep -v '^taskring-local-prefix-' | { if [ -n "$TMP_TOP" ]; then grep -vx "$TMP_TOP"; else cat; fi; } || true)
  if [ -n "$procs" ] || [ -n "$shm" ] || [ -n "$tmp" ]; then
    echo "test-cluster: left on n$i: processes [$procs] /dev/shm [$shm] /tmp [$tmp]" >&2
    left=1
  fi
done
[ "$left" = 0 ] || exit 1
echo "test-cluster: passed in $(( $(date +%s) - t0 )) s; nothing left on any node"
