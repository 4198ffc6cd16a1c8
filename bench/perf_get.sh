#!/usr/bin/env bash
# perf_get.sh [SECONDS [GRANARY-BENCH-ARGS...]]: where a request's time goes
# (docs/benchmarks.md, "Where the time goes"). Starts its own `granary serve` ($GRANARY,
# default build/src/granary; data under ./bench-data/perf), drives it with granary-bench
# (by default 4 KiB GETs, 32 connections, one client thread; other arguments replace that
# workload, e.g. `--op put --size 1MiB --concurrency 16 --objects 256`), records the server
# with perf and DWARF call graphs for SECONDS (default 2) once the objects are prepared, and
# prints the inclusive share of the server's samples for the functions the docs cite.
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-2}
shift $(( $# > 0 ? 1 : 0 ))
workload=("$@")
[[ ${#workload[@]} -gt 0 ]] ||
  workload=(--threads 1 --op get --size 4KiB --concurrency 32 --objects 1000)
granary=${GRANARY:-build/src/granary}
root=$(pwd)/bench-data/perf
rm -rf "$root" && mkdir -p "$root"
export GRANARY_ROOT_USER=perfbench GRANARY_ROOT_PASSWORD=perfbench-secret-key
export AWS_ACCESS_KEY_ID=$GRANARY_ROOT_USER AWS_SECRET_ACCESS_KEY=$GRANARY_ROOT_PASSWORD
"$granary" serve --data "$root/data" --listen 127.0.0.1:9192 --scrub-rate 0 \
  >"$root/granary.log" 2>&1 &
gpid=$!
bpid=
trap 'kill $gpid ${bpid:-} 2>/dev/null; wait 2>/dev/null || true; [[ -n ${KEEP_DATA:-} ]] || rm -rf "$root"' EXIT
for _ in $(seq 100); do grep -q "serving S3" "$root/granary.log" && break; sleep 0.1; done
build/bench/granary-bench --endpoint http://127.0.0.1:9192 --quiet "${workload[@]}" \
  --duration $((secs + 8))s >"$root/bench.txt" &
bpid=$!
# Record once the objects are prepared (a million keys take a minute or more), then 2 s in.
# PUT-only workloads prepare nothing and print no "prepared" line.
for _ in $(seq 100); do grep -q "workload name=" "$root/bench.txt" && break; sleep 0.1; done
if grep -qE "workload name=.*op=(get|range|head|list|delete|mix)" "$root/bench.txt"; then
  for _ in $(seq 1200); do grep -q "^prepared" "$root/bench.txt" && break; sleep 0.5; done
fi
sleep 2
perf record --call-graph dwarf,16384 -F 2000 -p "$gpid" -o "$root/perf.data" -- sleep "$secs" \
  >/dev/null 2>&1
wait $bpid
sed -n '/^workload/,$p' "$root/bench.txt"
echo "server samples, inclusive (bench/perf_share.py):"
python3 bench/perf_share.py --callers 0 "$root/perf.data" readManifest DBImpl::GetImpl \
  parseCbor decodeManifest decodeSummary "gateway::(anonymous namespace)::authenticate" \
  "::writeHead" "operator new" tcp_sendmsg tcp_recvmsg __memset_avx512_unaligned_erms \
  exc_page_fault | tail -n +2
