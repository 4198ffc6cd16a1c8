#!/usr/bin/env bash
# cpu_share.sh SECONDS PID...: each process's CPU (user + system, all its threads, as a
# percentage of one core) over the next SECONDS, and how idle the whole machine was
# (/proc/stat). Run it beside a benchmark phase: docs/benchmarks.md quotes it as
# "client CPU", "server CPU" and "machine idle".
set -euo pipefail
secs=$1; shift
ticks() { awk '{ print $14 + $15 }' "/proc/$1/stat"; }
declare -A before
for p in "$@"; do before[$p]=$(ticks "$p"); done
read -r _ u n s i w q sq st _ </proc/stat
total1=$((u + n + s + i + w + q + sq + st)); idle1=$i
sleep "$secs"
hz=$(getconf CLK_TCK)
for p in "$@"; do
  echo "$(cat "/proc/$p/comm")[$p] $(( ($(ticks "$p") - before[$p]) * 100 / hz / secs ))%"
done
read -r _ u n s i w q sq st _ </proc/stat
total2=$((u + n + s + i + w + q + sq + st))
echo "machine idle $(( 100 * (i - idle1) / (total2 - total1) ))%"
