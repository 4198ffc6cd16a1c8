#!/usr/bin/env bash
# compare_builds.sh OLD_GRANARY NEW_GRANARY [ROUNDS] [SECONDS]: the S3 figures of two
# `granary` binaries, alternated round by round (and which goes first, too) on this machine
# so that both see the same disk and the same noise (docs/benchmarks.md, "PUTs, asynchronous fragment writes" and
# "GETs, asynchronous fragment reads"). Each phase starts a fresh
# `granary serve --scrub-rate 0` (data under ./bench-data/compare) and stops it; the client
# is this checkout's granary-bench. PHASES (default "put get mix") picks the groups:
#   put: 1 MiB PUT (16 conns) with the blob puts per group commit (fragments made durable
#        by one fdatasync and one index sync; until 2026-11-25 the script printed
#        fdatasyncs per extent write instead, which counts write calls); 64 MiB PUT
#        (4 conns); each with the server's CPU time per PUT (user + system), a figure
#        this VM's disk noise moves less than throughput, its context switches, and the
#        disk's write requests and MB written per PUT (/proc/diskstats, the device under
#        bench-data)
#   get: 4 KiB GET (32 conns, one client thread, as s3_bench.sh); 1 MiB GET (16 conns);
#        64 MiB GET (4 conns)
#   mix: the loader alone, the checkpoint alone, and both at once (as s3_bench.sh)
#   paced: the same, with the loader paced at PACED_RATE ops/s (default 500; granary-bench's
#        rate=), the same rate for both binaries (not in the default)
#   list: LIST of 20,000 keys, 1,000 a page, one connection (not in the default)
#   small: 4 KiB PUT, acknowledged durable (32 conns, one client thread, as s3_bench.sh),
#        and the time its clean-up by DeleteObjects took; 4 KiB DELETE (32 conns) of
#        20,000 objects (not in the default)
#
# To build the old binary next to this checkout:
#   git worktree add /tmp/old <commit> && cd /tmp/old && \
#     cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release && cmake --build build --target granary
set -euo pipefail
cd "$(dirname "$0")/.."
[[ $# -ge 2 ]] || { echo "usage: $0 OLD_GRANARY NEW_GRANARY [ROUNDS] [SECONDS]"; exit 2; }
old=$1 new=$2 rounds=${3:-2} secs=${4:-10}
phases=" ${PHASES:-put get mix} "
bench=build/bench/granary-bench
for tool in "$old" "$new" "$bench"; do
  [[ -x $tool ]] || { echo "compare_builds: $tool is missing (build first)"; exit 1; }
done
root=$(pwd)/bench-data/compare
port=9290
ep=http://127.0.0.1:$port
export GRANARY_ROOT_USER=compare GRANARY_ROOT_PASSWORD=compare-secret-key
export AWS_ACCESS_KEY_ID=$GRANARY_ROOT_USER AWS_SECRET_ACCESS_KEY=$GRANARY_ROOT_PASSWORD

pid=
stop() {
  if [[ -n $pid ]]; then kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; fi
  pid=
}
# The data goes with the last server, unless KEEP_DATA is set.
trap 'stop; [[ -n ${KEEP_DATA:-} ]] || rm -rf "$root"' EXIT
start() {  # start BIN: a fresh server on an empty data directory
  stop
  rm -rf "$root" && mkdir -p "$root"
  "$1" serve --data "$root/data" --listen "127.0.0.1:$port" --scrub-rate 0 >"$root/log" 2>&1 &
  pid=$!
  for _ in $(seq 100); do grep -q "serving S3" "$root/log" && return; sleep 0.1; done
  echo "compare_builds: $1 did not start"; cat "$root/log"; exit 1
}
run() {  # run granary-bench-args...: the table's rows, without the header (nor the phases)
  "$bench" --endpoint "$ep" --quiet --duration "${secs}s" "$@" | sed -n '/^workload/,/^phases/p' |
    grep -v -e '^workload' -e '^phases' -e '^$'
}
metric_sum() {  # metric_sum NAME: the server's NAME summed over its labels (all drives)
  curl -s "$ep/_granary/metrics" |
    awk -v name="$1" 'index($0, name "{") == 1 || index($0, name " ") == 1 { s += $NF } END { print s + 0 }'
}

cpu_ms() {  # the server's user + system CPU time so far, in ms
  awk -v hz="$(getconf CLK_TCK)" '{ print int(($14 + $15) * 1000 / hz) }' "/proc/$pid/stat"
}
mkdir -p "$root"
# The block device under the data directory, as /proc/diskstats names it (empty when it is
# not a block device: then no disk figures are printed).
disk=$(basename "$(df --output=source "$root" | tail -1)")
grep -q " $disk " /proc/diskstats || disk=
disk_writes() {  # write requests completed, and sectors written, on $disk so far
  if [[ -n $disk ]]; then awk -v d="$disk" '$3 == d { print $8, $10 }' /proc/diskstats; else echo 0 0; fi
}
minor_faults() {  # the server's minor page faults so far (all threads)
  awk '{ print $10 }' "/proc/$pid/stat"
}
ctx_switches() {  # voluntary + involuntary context switches of all the server's threads
  cat /proc/"$pid"/task/*/status 2>/dev/null |
    awk '/^(non)?voluntary_ctxt_switches/ { s += $2 } END { print s + 0 }'
}
run_cpu() {  # run_cpu NAME granary-bench-args...: run, named NAME, then the server's
  # CPU time and context switches per op, and the disk's write requests and bytes per op
  # (the whole device's: anything else writing to it counts too)
  local name=$1 before switches faults rows writes sectors w2 s2 ops
  shift
  before=$(cpu_ms)
  switches=$(ctx_switches)
  faults=$(minor_faults)
  read -r writes sectors < <(disk_writes)
  rows=$(run "$@" | sed "s/^put /$name/")
  read -r w2 s2 < <(disk_writes)
  echo "$rows"
  ops=$(echo "$rows" | awk '{ print $3; exit }')
  awk -v ms="$(($(cpu_ms) - before))" -v cs="$(($(ctx_switches) - switches))" -v ops="$ops" \
    -v pf="$(($(minor_faults) - faults))" \
    'BEGIN { printf "   server CPU per op: %.3f ms (%d ms / %d ops); context switches per op: %.1f; minor page faults per op: %.1f\n",
             ops ? ms / ops : 0, ms, ops, ops ? cs / ops : 0, ops ? pf / ops : 0 }'
  [[ -z $disk ]] || awk -v w="$((w2 - writes))" -v s="$((s2 - sectors))" -v ops="$ops" -v d="$disk" \
    'BEGIN { printf "   %s write requests per op: %.1f; MB written per op: %.2f\n",
             d, ops ? w / ops : 0, ops ? s * 512 / 1e6 / ops : 0 }'
}

echo "== machine: $(nproc) cores, $(uname -r); ${secs} s a phase, $rounds rounds"
echo "workload     op           ops  errors      ops/s      MB/s     keys/s   p50 ms   p90 ms   p99 ms p99.9 ms   max ms"
for round in $(seq "$rounds"); do
  # Odd rounds run OLD first, even rounds NEW first: whichever runs second in a round
  # inherits the first one's disk state (the loader/checkpoint phases showed it).
  order="old new"
  ((round % 2 == 0)) && order="new old"
  for which in $order; do
    bin=$old; [[ $which == new ]] && bin=$new
    echo "== round $round, $which ($bin)"
    if [[ $phases == *" put "* ]]; then
      start "$bin"
      run_cpu put-1MiB --op put --size 1MiB --concurrency 16 --objects 256
      awk -v p="$(metric_sum granary_drive_committed_puts_total)" \
        -v c="$(metric_sum granary_drive_group_commits_total)" \
        'BEGIN { printf "   blob puts per group commit: %.1f (%d / %d)\n", c ? p / c : 0, p, c }'
      start "$bin"
      run_cpu put-64MiB --op put --size 64MiB --concurrency 4 --objects 8
    fi
    if [[ $phases == *" get "* ]]; then
      start "$bin"
      run --threads 1 --op get --size 4KiB --concurrency 32 --objects 1000 | sed 's/^get /get-4KiB/'
      run --op get --size 1MiB --concurrency 16 --objects 64 | sed 's/^get /get-1MiB/'
      run --op get --size 64MiB --concurrency 4 --objects 8 | sed 's/^get /get-64MiB/'
    fi
    if [[ $phases == *" small "* ]]; then
      start "$bin"
      t0=$(date +%s.%N)
      run_cpu put-4KiB --threads 1 --op put --size 4KiB --concurrency 32 --objects 10000
      # granary-bench then removes what it put with DeleteObjects, 1,000 keys a request and
      # 8 requests at a time: the time past the phase's duration is mostly that.
      awk -v t1="$(date +%s.%N)" -v t0="$t0" -v s="$secs" \
        'BEGIN { printf "   clean-up (DeleteObjects) after the phase: %.1f s\n", t1 - t0 - s }'
      start "$bin"
      run --threads 1 --op delete --size 4KiB --concurrency 32 --objects 20000 |
        sed 's/^delete /delete-4KiB/'
    fi
    if [[ $phases == *" list "* ]]; then
      start "$bin"
      run --threads 1 --op list --objects 20000 --concurrency 1
    fi
    for group in mix paced; do
      [[ $phases == *" $group "* ]] || continue
      loader=name=loader,op=range,size=64MiB,range=64KiB-4MiB,objects=8,concurrency=8,prefix=shards/
      [[ $group == paced ]] && loader="$loader,rate=${PACED_RATE:-500}"
      start "$bin"
      run --workload "$loader,cleanup=no" | sed "s/^loader /$group-alone/"
      run --workload name=checkpoint,op=put,size=256MiB,objects=2,concurrency=2 |
        sed 's/^checkpoint /ckpt-alone/'
      run --workload "$loader,prepare=skip" \
        --workload name=checkpoint,op=put,size=256MiB,objects=2,concurrency=2
    done
  done
done
stop
