#!/usr/bin/env bash
# paced_loader.sh: where a paced loader's time goes beside a checkpoint (docs/benchmarks.md,
# "Where the paced loader's time goes"). Starts a fresh `granary serve` pinned to
# SERVER_CPUS (default 0) with its access log, drives it with granary-bench pinned to
# CLIENT_CPUS (default 1), and runs three phases of the s3_bench.sh loader (64 KiB-4 MiB
# ranged GETs of 64 MiB shards, 8 connections): a closed loop, to find its rate; paced at
# PACE (default 0.3) of that rate alone; the same beside the checkpoint class (256 MiB PUTs,
# 2 connections). Prints granary-bench's tables (with each operation's latency phases), and
# for each paced phase the server's own latency of the ranged GETs (access log), its
# event-loop lag (granary_event_loop_lag_seconds: the first bucket bound at or above each
# quantile) and the kernel's TCP retransmission counters (nstat, when present).
# CONTROL=nginx adds the control: nginx (one worker, pinned to SERVER_CPUS) serving the
# same shards from files to the loader at the same pace, alone and with Granary's
# checkpoint (a second granary-bench, also on CLIENT_CPUS) writing to the server beside it.
#   SECONDS_PER_PHASE (env, default 8): each phase's length. GRANARY_ARGS: more server
#   options. The control needs nginx and boto3 (`bash scripts/install-deps.sh --bench`).
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=bench/nginx_files.sh
source bench/nginx_files.sh
granary=${GRANARY:-build/src/granary}
bench=${BENCH:-build/bench/granary-bench}
root=$(pwd)/bench-data/paced
secs=${SECONDS_PER_PHASE:-8}
rm -rf "$root" && mkdir -p "$root"
export GRANARY_ROOT_USER=paced GRANARY_ROOT_PASSWORD=paced-secret-key
export AWS_ACCESS_KEY_ID=$GRANARY_ROOT_USER AWS_SECRET_ACCESS_KEY=$GRANARY_ROOT_PASSWORD
# shellcheck disable=SC2086 # GRANARY_ARGS: more server options
taskset -c "${SERVER_CPUS:-0}" "$granary" serve --data "$root/data" --listen 127.0.0.1:9490 \
  --scrub-rate 0 --gc-grace 5 --access-log "$root/access.log" ${GRANARY_ARGS:-} >"$root/log" 2>&1 &
pid=$!
trap 'kill $pid 2>/dev/null; [[ -f $root/nginx.pid ]] && kill "$(cat "$root/nginx.pid")"; wait 2>/dev/null; [[ -n ${KEEP_DATA:-} ]] || rm -rf "$root"' EXIT
for _ in $(seq 100); do grep -q "serving S3" "$root/log" && break; sleep 0.1; done
ep=http://127.0.0.1:9490
loader=name=loader,op=range,size=64MiB,range=64KiB-4MiB,objects=8,concurrency=8,prefix=shards/
checkpoint=name=checkpoint,op=put,size=256MiB,objects=2,concurrency=2
metrics_to() {  # metrics_to FILE: the server's metrics now
  python3 -c 'import sys, urllib.request; open(sys.argv[2], "wb").write(urllib.request.urlopen(sys.argv[1]).read())' \
    "$ep/_granary/metrics" "$1"
}
run() {  # run NAME granary-bench-args...: the tables; the server's figures over the phase
  local name=$1; shift
  echo "== $name"
  metrics_to "$root/before.prom"
  local lines; lines=$(wc -l <"$root/access.log")
  { nstat -n >/dev/null 2>&1 || true; }
  taskset -c "${CLIENT_CPUS:-1}" "$bench" --endpoint "$ep" --quiet --duration "${secs}s" \
    --json "$root/$name.json" "$@" | sed -n '/^workload/,$p'
  metrics_to "$root/after.prom"
  tail -n +"$((lines + 1))" "$root/access.log" >"$root/$name.access"
  python3 - "$root/before.prom" "$root/after.prom" "$root/$name.access" <<'EOF'
import json, math, re, sys
def buckets(path):
    return {m.group(1): float(m.group(2)) for m in
            (re.match(r'granary_event_loop_lag_seconds_bucket\{le="([^"]+)"\} (\S+)', l)
             for l in open(path)) if m}
a, b = buckets(sys.argv[1]), buckets(sys.argv[2])
les = sorted(a, key=lambda le: math.inf if le == "+Inf" else float(le))
delta = [(le, b[le] - a[le]) for le in les]
n = delta[-1][1]
bound = lambda q: next(le for le, c in delta if c >= q * n)
print(f"   event-loop lag over {n:.0f} probes: p50 <= {bound(.5)} s, p99 <= {bound(.99)} s")
ms = sorted(j["latency_ms"] for j in map(json.loads, open(sys.argv[3]))
            if j["op"].startswith("GetObject"))
if ms:
    at = lambda q: ms[min(len(ms) - 1, int(q * len(ms)))]
    print(f"   server's ranged GETs (access log): p50 {at(.5):.2f} ms, p99 {at(.99):.2f} ms")
EOF
  nstat 2>/dev/null | grep -E "^(TcpRetransSegs|TcpExtTCPLossProbes|TcpExtTCPDSACKRecv) " |
    awk '{ printf "   %s %s\n", $1, $2 }' || true
}
run closed --workload "$loader,cleanup=no"
rate=$(python3 -c 'import json, sys
w = json.load(open(sys.argv[1]))["workloads"][0]
print("%.1f" % (float(sys.argv[2]) * w["ops"]["range"]["ops_per_s"]))' "$root/closed.json" "${PACE:-0.3}")
run "paced-alone" --workload "$loader,prepare=skip,cleanup=no,rate=$rate"
run "paced-with-checkpoint" --workload "$loader,prepare=skip,cleanup=no,rate=$rate" \
  --workload "$checkpoint"

[[ ${CONTROL:-} == nginx ]] || exit 0
# The control: the same shards as files, served by nginx on the server's CPUs.
nginx_fetch "${PYTHON:-/usr/bin/python3}" "$ep" "$root" shards/
nginx_start "$root" 9491 1 "${SERVER_CPUS:-0}"
nginx_loader() {  # the loader against nginx, at the same pace: its table
  taskset -c "${CLIENT_CPUS:-1}" "$bench" --endpoint http://127.0.0.1:9491 --quiet \
    --no-create-bucket --duration "${secs}s" --json "$root/$1.json" \
    --workload "$loader,prepare=skip,cleanup=no,rate=$rate" | sed -n '/^workload/,$p'
}
echo "== nginx-paced-alone"
nginx_loader nginx-paced-alone
echo "== nginx-paced-with-checkpoint (the checkpoint writes to Granary, from a second client)"
taskset -c "${CLIENT_CPUS:-1}" "$bench" --endpoint "$ep" --quiet --duration "$((secs + 2))s" \
  --json "$root/nginx-checkpoint.json" --workload "$checkpoint" >"$root/nginx-checkpoint.out" &
ck=$!
sleep 1  # the checkpoint under way before the loader starts
nginx_loader nginx-paced-with-checkpoint
wait $ck
sed -n '/^workload/,$p' "$root/nginx-checkpoint.out"
