#!/usr/bin/env bash
# cpu_share.sh SECONDS PID...: each process's CPU (user + system, all its threads, as a
# percentage of one core) over the next SECONDS, and how idle the whole machine was
# (/proc/stat). Run it beside a benchmark phase: docs/benchmarks.md quotes it as
# "client CPU", "server CPU" and "machine idle".
# THREADS=1 also splits each process's CPU by thread name (granary's "granary-io" pool,
# granary-bench's "gb-<workload>" threads, ...), busiest first.
set -euo pipefail
shopt -s extglob
secs=$1; shift
ticks() { awk '{ print $14 + $15 }' "/proc/$1/stat"; }
# "name ticks" for every thread of process $1 (a thread that ends meanwhile is skipped).
thread_ticks() {
  for t in /proc/"$1"/task/*; do
    # Numbered threads of one kind ("granary-io3", "iou-wrk-1080") count as one name.
    { read -r name <"$t/comm" && name=${name// /_} &&
      echo "${name%%+([0-9])} $(awk '{ print $14 + $15 }' "$t/stat")"; } 2>/dev/null || true
  done
}
declare -A before threads_before
for p in "$@"; do
  before[$p]=$(ticks "$p")
  [[ ${THREADS:-0} == 1 ]] && threads_before[$p]=$(thread_ticks "$p")
done
read -r _ u n s i w q sq st _ </proc/stat
total1=$((u + n + s + i + w + q + sq + st)); idle1=$i; steal1=$st
sleep "$secs"
hz=$(getconf CLK_TCK)
for p in "$@"; do
  echo "$(cat "/proc/$p/comm")[$p] $(( ($(ticks "$p") - before[$p]) * 100 / hz / secs ))%"
  if [[ ${THREADS:-0} == 1 ]]; then
    # Per name: ticks now minus ticks before, summed over that name's threads.
    { echo "${threads_before[$p]}" | sed 's/^/- /'; thread_ticks "$p" | sed 's/^/+ /'; } |
      awk -v hz="$hz" -v secs="$secs" '
        $1 == "-" { d[$2] -= $3; n[$2] += 0 } $1 == "+" { d[$2] += $3; n[$2]++ }
        END { for (k in d) if (d[k] > 0) printf "  %-16s %3d thread(s) %4.0f%%\n", k, n[k], 100 * d[k] / hz / secs }' |
      sort -k4 -rn
  fi
done
read -r _ u n s i w q sq st _ </proc/stat
total2=$((u + n + s + i + w + q + sq + st))
echo "machine idle $(( 100 * (i - idle1) / (total2 - total1) ))%, stolen $(( 100 * (st - steal1) / (total2 - total1) ))%"
