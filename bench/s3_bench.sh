#!/usr/bin/env bash
# s3_bench.sh [SECONDS]: the S3 figures of docs/benchmarks.md, measured on this machine in
# one run, next to its raw limits: fio on the same disk, loopback TCP (iperf3), and nginx
# serving the same bytes from files, driven by the same client (granary-bench).
# Starts its own `granary serve` (data under ./bench-data/s3) and nginx, and stops both.
# Needs a build (build/) and `bash scripts/install-deps.sh --bench` (nginx, iperf3).
# SECONDS: the length of each measured phase (default 10). STEPS (default all of
# "get put sweep mix nginx memory list") picks which figures to measure; the raw limits
# always run. sweep: PUT and GET of each size at four connection counts, one line each.
# ROUNDS (default 3): the figures that are ratios of two phases (the loader with and
# without the checkpoint class; Granary against nginx on the same bytes) alternate their
# phases in that many rounds and print each round's ratio and the median, because this
# VM's disk and CPU drift by tens of percent within minutes. Each phase also prints how
# busy the machine's CPUs were (/proc/stat over the phase, load generator included).
# POOL_NICE=N: renice the server's worker pool (MD5, erasure coding, write submission)
# after start, as the loader/checkpoint priority experiment in docs/benchmarks.md did.
# GRANARY_ARGS: more `granary serve` options (e.g. --no-sendfile, to compare).
# PACE (default 0.5): the mix step also runs the loader paced (granary-bench's rate=), at
# this fraction of the ops/s its closed loop reached alone in the same round, as a trainer
# reads: alone, then beside the checkpoint class.
# SERVER_CPUS, CLIENT_CPUS (taskset lists, e.g. 0-1 and 8-15): pin the server and the load
# generator to CPUs of their own, on a machine with more cores than the one measured here,
# to see a figure without the load generator's share of the CPUs (docs/benchmarks.md,
# "Scaling with cores"). GRANARY, BENCH, PYTHON: the binaries and python3 to use. RAW=no skips the raw limits (for a machine without fio and
# iperf3: then only the ratios of two Granary phases mean anything).
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-10}
# shellcheck source=bench/nginx_files.sh
source bench/nginx_files.sh
steps=" ${STEPS:-get put sweep mix nginx memory list} "
rounds=${ROUNDS:-3}
want() { [[ $steps == *" $1 "* ]]; }
bench=${BENCH:-build/bench/granary-bench}
granary=${GRANARY:-build/src/granary}
py=${PYTHON:-/usr/bin/python3}  # the system's, which has boto3 (the nginx step)
root=$(pwd)/bench-data/s3
for tool in "$bench" "$granary"; do
  [[ -x $tool ]] || { echo "s3_bench: build first ($tool missing)"; exit 1; }
done
raw=${RAW:-yes}
needed="iperf3 fio"; [[ $raw == no ]] && needed=""
want nginx && needed="$needed nginx"
# taskset prefixes, empty when not pinned
server_pin=() client_pin=()
[[ -n ${SERVER_CPUS:-} ]] && server_pin=(taskset -c "$SERVER_CPUS")
[[ -n ${CLIENT_CPUS:-} ]] && client_pin=(taskset -c "$CLIENT_CPUS")
for tool in $needed; do
  command -v "$tool" >/dev/null || PATH=$PATH:/usr/sbin
  command -v "$tool" >/dev/null || { echo "s3_bench: $tool missing: bash scripts/install-deps.sh --bench"; exit 1; }
done

rm -rf "$root" && mkdir -p "$root"
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  [[ -f $root/nginx.pid ]] && kill "$(cat "$root/nginx.pid")" 2>/dev/null || true
  wait 2>/dev/null || true
  # The data (tens of GB after the PUT phases) goes too, unless KEEP_DATA is set.
  [[ -n ${KEEP_DATA:-} ]] || rm -rf "$root"
}
trap cleanup EXIT

export GRANARY_ROOT_USER=s3bench GRANARY_ROOT_PASSWORD=s3bench-secret-key
export AWS_ACCESS_KEY_ID=$GRANARY_ROOT_USER AWS_SECRET_ACCESS_KEY=$GRANARY_ROOT_PASSWORD
# --gc-grace 5: the PUT phases overwrite their keys; replaced versions are freed within
# seconds instead of a minute, or they fill a disk with less than ~30 GB free.
# shellcheck disable=SC2086 # GRANARY_ARGS: more server options, e.g. --no-sendfile
"${server_pin[@]}" "$granary" serve --data "$root/granary-data" --listen 127.0.0.1:9190 --scrub-rate 0 --gc-grace 5 \
  ${GRANARY_ARGS:-} >"$root/granary.log" 2>&1 &
pids+=($!)
gpid=$!
for _ in $(seq 100); do grep -q "serving S3" "$root/granary.log" && break; sleep 0.1; done
grep -q "serving S3" "$root/granary.log" || { cat "$root/granary.log"; echo "s3_bench: granary did not start" >&2; exit 1; }
ep=http://127.0.0.1:9190
if [[ -n ${POOL_NICE:-} ]]; then
  for task in /proc/$gpid/task/*; do
    [[ $(cat "$task/comm") == granary-io* ]] && renice -n "$POOL_NICE" -p "${task##*/}" >/dev/null
  done
  echo "== the server's worker pool reniced to $POOL_NICE"
fi

echo "== machine: $(nproc) cores, $(uname -r), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2)"
[[ ${#server_pin[@]} -gt 0 || ${#client_pin[@]} -gt 0 ]] &&
  echo "== server on CPUs ${SERVER_CPUS:-all}, granary-bench on CPUs ${CLIENT_CPUS:-all}"
if [[ $raw != no ]]; then
echo "== raw limits"
# One stream, and 16 (the GET phases use up to 16 connections): a GET's ratio is to the
# one with as many streams.
for streams in 1 16; do
  iperf3 -s -p 5299 -1 >/dev/null 2>&1 &
  pids+=($!)
  sleep 0.5
  iperf3 -c 127.0.0.1 -p 5299 -t 5 -P "$streams" -J | python3 -c '
import json, sys; j = json.load(sys.stdin)
print("loopback TCP (iperf3, %s streams): %.0f MB/s" % (sys.argv[1], j["end"]["sum_received"]["bits_per_second"] / 8e6))' "$streams"
done
fio_one() {  # fio_one LABEL ARGS...: MB/s or IOPS
  local label=$1; shift
  fio --output-format=json --directory="$root" --size=1g --runtime="$secs" --time_based \
    --ioengine=io_uring --direct=1 "$@" 2>/dev/null | python3 -c '
import json, sys; j = json.load(sys.stdin)["jobs"][0]
rw = j["write"] if j["write"]["io_bytes"] else j["read"]
print("%-52s %8.0f MB/s %8.0f IOPS" % (sys.argv[1], rw["bw_bytes"] / 1e6, rw["iops"]))' "$label"
}
fio_one "fio 1 MiB write, qd 32, fdatasync every 32" --name=w --rw=write --bs=1m --iodepth=32 --fdatasync=32
fio_one "fio 1 MiB read, qd 32" --name=r --rw=read --bs=1m --iodepth=32
fio_one "fio 4 KiB write+fdatasync, qd 1" --name=s --rw=write --bs=4k --iodepth=1 --fdatasync=1
rm -f "$root"/w.* "$root"/r.* "$root"/s.*
fi

cpu_ticks() {  # busy, total and stolen ticks of all CPUs so far (iowait counts as idle)
  awk '/^cpu / { print $2 + $3 + $4 + $7 + $8 + $9, $2 + $3 + $4 + $5 + $6 + $7 + $8 + $9, $9 }' /proc/stat
}
cpu_share() {  # cpu_share BEFORE AFTER (cpu_ticks of each): busy and stolen % between them
  echo "$1 $2" | awk '{ printf "%.0f %.0f\n", 100 * ($4 - $1) / ($5 - $2), 100 * ($6 - $3) / ($5 - $2) }'
}
run() {  # run LABEL granary-bench-args...
  echo "== $1"; shift
  local before after
  before=$(cpu_ticks)
  "${client_pin[@]}" "$bench" --endpoint "${EP:-$ep}" --quiet --duration "${secs}s" "$@" | sed -n '/^workload/,$p'
  after=$(cpu_ticks)
  # Steal: time the hypervisor ran something else on our CPUs (counted as busy above).
  # Figures of a phase with more than a few percent are the neighbours', not ours.
  local busy stolen
  read -r busy stolen < <(cpu_share "$before" "$after")
  echo "   CPUs busy $busy% of the phase (preparation included), stolen $stolen%"
}
# ratios KIND JSON...: each round's ratio and the median, from the runs' JSON files, which
# come in rounds of the phases KIND compares (see the callers).
ratios() {
  "$py" - "$@" <<'EOF'
import json, statistics, sys
kind, files = sys.argv[1], sys.argv[2:]
def op(path, workload, name):
    for w in json.load(open(path))["workloads"]:
        if w["name"] == workload:
            return w["ops"][name]
    raise SystemExit(f"s3_bench: no {workload} in {path}")
def show(label, values, goal):
    each = ", ".join(f"{v:.2f}" for v in values)
    print(f"== {label}: median {statistics.median(values):.2f} (rounds {each}; goal {goal})")
if kind in ("mix", "paced"):  # per round: the loader alone, the checkpoint alone, both
    loader = "loader" if kind == "mix" else "paced loader"
    p99, share, kept = [], [], []
    for i in range(0, len(files), 3):
        alone, ckpt, both = files[i:i + 3]
        ranged = [op(f, "loader", "range") for f in (alone, both)]
        p99.append(ranged[1]["latency_ms"]["p99"] / ranged[0]["latency_ms"]["p99"])
        kept.append(ranged[1]["ops_per_s"] / ranged[0]["ops_per_s"])
        share.append(op(both, "checkpoint", "put")["mb_per_s"] /
                     op(ckpt, "checkpoint", "put")["mb_per_s"])
    show(f"{loader} p99 with the checkpoint class / alone", p99, "<= 1.5")
    show(f"checkpoint MB/s with the {loader} / alone", share, ">= 0.5")
    if kind == "paced":
        show("paced loader ops/s with the checkpoint class / alone", kept, "1.00: it kept its pace")
else:  # per round: Granary, then nginx, on the same objects
    show(f"{kind} GET, Granary / nginx MB/s",
         [op(files[i], "granary", "get")["mb_per_s"] / op(files[i + 1], "nginx", "get")["mb_per_s"]
          for i in range(0, len(files), 2)], ">= 0.8")
EOF
}
if want get; then
  # The client's default threads (one per core, at most 4). With one client thread, this
  # 2-core machine sits ~14% idle, each side waiting on the other; the figure is kept, as
  # the one measured before 2026-11-25.
  run "4 KiB GET, 32 connections" --op get --size 4KiB --concurrency 32 --objects 1000
  run "4 KiB GET, 32 connections, one client thread" --threads 1 --op get --size 4KiB \
    --concurrency 32 --objects 1000
  run "1 MiB GET, 16 connections" --op get --size 1MiB --concurrency 16 --objects 64
  run "64 MiB GET, 4 connections" --op get --size 64MiB --concurrency 4 --objects 8
fi
if want put; then
  run "4 KiB PUT, 32 connections" --threads 1 --op put --size 4KiB --concurrency 32 --objects 10000
  run "1 MiB PUT, 16 connections" --op put --size 1MiB --concurrency 16 --objects 256
  run "64 MiB PUT, 4 connections" --op put --size 64MiB --concurrency 4 --objects 8
fi
if want sweep; then
  # Each size's PUTs, then its GETs, at four connection counts (each GET phase writes its
  # own objects first, then reads them), one line a phase, from granary-bench's JSON.
  echo "== concurrency sweep: PUT and GET at four connection counts ($secs s a phase)"
  printf '%-6s %-4s %6s %10s %9s %9s %9s %6s\n' size op conns ops/s MB/s "p50 ms" "p99 ms" CPUs
  for spec in "4KiB 1000 1 8 32 128" "1MiB 64 1 4 16 64" "64MiB 8 1 2 4 8"; do
    read -r size objects concs <<<"$spec"
    for op in put get; do
      for c in $concs; do
        before=$(cpu_ticks)
        "${client_pin[@]}" "$bench" --endpoint "$ep" --quiet --duration "${secs}s" --op "$op" \
          --size "$size" --concurrency "$c" --objects "$objects" --json "$root/sweep.json" >/dev/null
        after=$(cpu_ticks)
        # shellcheck disable=SC2046 # busy and stolen: two arguments
        "$py" bench/sweep_line.py "$root/sweep.json" "$size" "$op" "$c" \
          $(cpu_share "$before" "$after")
      done
    done
  done
fi
if want mix; then
  loader=name=loader,op=range,size=64MiB,range=64KiB-4MiB,objects=8,concurrency=8,prefix=shards/
  checkpoint=name=checkpoint,op=put,size=256MiB,objects=2,concurrency=2
  mix=() paced=()
  for r in $(seq "$rounds"); do
    # The loader's shards are written in the first round and kept.
    alone="$loader,cleanup=no"; [[ $r != 1 ]] && alone="$alone,prepare=skip"
    run "round $r: loader alone: 64 KiB-4 MiB ranged GETs of 64 MiB shards" \
      --workload "$alone" --json "$root/mix-$r-a.json"
    run "round $r: checkpoint alone: 256 MiB PUTs" --workload "$checkpoint" \
      --json "$root/mix-$r-b.json"
    run "round $r: loader while checkpointing" --workload "$loader,prepare=skip,cleanup=no" \
      --workload "$checkpoint" --json "$root/mix-$r-c.json"
    mix+=("$root/mix-$r-a.json" "$root/mix-$r-b.json" "$root/mix-$r-c.json")
    rate=$("$py" -c '
import json, sys
w = json.load(open(sys.argv[1]))["workloads"][0]
print("%.1f" % (float(sys.argv[2]) * w["ops"]["range"]["ops_per_s"]))' "$root/mix-$r-a.json" "${PACE:-0.5}")
    run "round $r: loader alone, paced at $rate ops/s (${PACE:-0.5} of its closed loop's)" \
      --workload "$loader,prepare=skip,cleanup=no,rate=$rate" --json "$root/mix-$r-pa.json"
    run "round $r: loader paced at $rate ops/s while checkpointing" \
      --workload "$loader,prepare=skip,cleanup=no,rate=$rate" --workload "$checkpoint" \
      --json "$root/mix-$r-pc.json"
    paced+=("$root/mix-$r-pa.json" "$root/mix-$r-b.json" "$root/mix-$r-pc.json")
  done
  ratios mix "${mix[@]}"
  ratios paced "${paced[@]}"
fi

# nginx serving the same bytes from files, read by the same client.
if want nginx; then
run "files for nginx (1 MiB and 64 MiB objects, kept)" \
  --workload name=n1,op=put,size=1MiB,objects=64,count=64,prefix=nginx1m/,cleanup=no,concurrency=8 \
  --workload name=n64,op=put,size=64MiB,objects=8,count=8,prefix=nginx64m/,cleanup=no,concurrency=4 >/dev/null
nginx_fetch "$py" "$ep" "$root" nginx1m/ nginx64m/
nginx_start "$root" 9191 "$(nproc)"
# Granary and nginx alternate on the same objects, Granary first in odd rounds.
for size in 1MiB 64MiB; do
  if [[ $size == 1MiB ]]; then prefix=nginx1m/ objects=64 conc=16; else prefix=nginx64m/ objects=8 conc=4; fi
  files=()
  for r in $(seq "$rounds"); do
    order="granary nginx"; [[ $((r % 2)) == 0 ]] && order="nginx granary"
    for who in $order; do
      url=$ep; [[ $who == nginx ]] && url=http://127.0.0.1:9191
      EP=$url run "round $r: $who: $size GET, $conc connections" --no-create-bucket \
        --workload name=$who,op=get,size=$size,objects=$objects,prefix=$prefix,prepare=skip,cleanup=no,concurrency=$conc \
        --json "$root/ng-$size-$r-$who.json"
    done
    files+=("$root/ng-$size-$r-granary.json" "$root/ng-$size-$r-nginx.json")
  done
  ratios "$size" "${files[@]}"
done
fi

# Resident memory of granary serve under 256 concurrent 64 MiB GET streams, on a fresh
# server with the default buffer budget.
if want memory; then
  echo "== 256 concurrent 64 MiB GET streams: granary serve resident memory"
  bash bench/rss_get.sh 256
fi

if want list; then
  run "LIST, 1,000 keys a page (${LIST_KEYS:=1000000} keys)" --op list --concurrency 1 \
    --threads 1 --objects "$LIST_KEYS"
fi
