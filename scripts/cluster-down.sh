#!/usr/bin/env bash
# Stops the local cluster that scripts/cluster-up.sh started in $GRANARY_CLUSTER_DIR
# (default ./granary-cluster): SIGTERM to every process, SIGKILL to any still running
# after 10 s. The data stays; cluster-up.sh on the same directory starts it again.
set -euo pipefail
dir="${GRANARY_CLUSTER_DIR:-./granary-cluster}"
[[ -d "$dir/pids" ]] || { echo "cluster-down: no cluster in $dir"; exit 0; }
pids=()
for f in "$dir"/pids/*; do
  [[ -s "$f" ]] || continue
  pid="$(cat "$f")"
  # Only a process that is still a granary (a stale pid file may name another one now).
  if kill -0 "$pid" 2>/dev/null && tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -q granary; then
    kill -TERM "$pid" 2>/dev/null || true
    pids+=("$pid")
  fi
  rm -f "$f"
done
for _ in $(seq 1 100); do
  alive=0
  for pid in "${pids[@]}"; do kill -0 "$pid" 2>/dev/null && alive=1; done
  [[ $alive -eq 0 ]] && break
  sleep 0.1
done
for pid in "${pids[@]}"; do kill -KILL "$pid" 2>/dev/null || true; done
echo "Granary cluster in $dir stopped (${#pids[@]} processes)."
