#!/usr/bin/env bash
# rss_get.sh [BUFFER_MIB...]: peak resident memory of `granary serve` under 256 concurrent
# 64 MiB GET streams (issue 6's memory target), once per --buffer-memory value (default:
# 256 and 100000, i.e. the default budget and practically none). Per run: a fresh server
# (data under ./bench-data/rss, removed after), granary-bench for 20 s, VmRSS (and its
# RssAnon and RssFile parts) sampled every 0.2 s and the kernel's VmHWM, then the server's
# buffer-budget metrics. Fails if the server does not start or dies during a run. $GRANARY picks the binary (default build/src/granary), $WORKLOAD other
# granary-bench arguments (e.g. 256 concurrent 64 MiB PUTs: "--duration 10s --op put
# --size 64MiB --concurrency 256 --objects 256").
# Build first: bash scripts/build.sh
set -euo pipefail
cd "$(dirname "$0")/.."
granary=${GRANARY:-build/src/granary}
bench=build/bench/granary-bench
root=bench-data/rss
export GRANARY_ROOT_USER=s3bench GRANARY_ROOT_PASSWORD=s3bench-secret-key
export AWS_ACCESS_KEY_ID=$GRANARY_ROOT_USER AWS_SECRET_ACCESS_KEY=$GRANARY_ROOT_PASSWORD
gpid=
trap '[[ -n $gpid ]] && kill "$gpid" 2>/dev/null; rm -rf "$root"' EXIT
workload=${WORKLOAD:---duration 20s --op get --size 64MiB --concurrency 256 --objects 8}
budgets=("$@")
((${#budgets[@]})) || budgets=(256 100000)
for m in "${budgets[@]}"; do
  rm -rf "$root"; mkdir -p "$root"
  "$granary" serve --data "$root/data" --listen 127.0.0.1:9410 --scrub-rate 0 \
    --buffer-memory "$m" >"$root/log" 2>&1 &
  gpid=$!
  for _ in $(seq 100); do grep -q "serving S3" "$root/log" && break; sleep 0.1; done
  grep -q "serving S3" "$root/log" || { cat "$root/log"; echo "granary did not start" >&2; exit 1; }
  # shellcheck disable=SC2086 # WORKLOAD is a list of arguments
  "$bench" --endpoint http://127.0.0.1:9410 --quiet $workload >"$root/bench.out" 2>&1 &
  bpid=$!
  peak=0 peak_anon=0 peak_file=0
  while kill -0 $bpid 2>/dev/null; do
    read -r rss anon file < <(awk '/^VmRSS/ {r=$2} /^RssAnon/ {a=$2} /^RssFile/ {f=$2}
                                   END {print r, a, f}' /proc/$gpid/status)
    ((rss > peak)) && peak=$rss
    ((anon > peak_anon)) && peak_anon=$anon
    ((file > peak_file)) && peak_file=$file
    sleep 0.2
  done
  # Failed operations (e.g. uploads answered 503 after --buffer-wait) are reported in the
  # output below, not fatal.
  wait $bpid || true
  # A server that died under the load would leave low figures behind: fail instead.
  kill -0 "$gpid" 2>/dev/null || { tail "$root/log"; echo "granary died during the run" >&2; exit 1; }
  # The kernel's own peak (VmHWM), which sampling can miss; it includes the preparation.
  hwm=$(awk '/^VmHWM/ {print $2}' /proc/$gpid/status)
  # RssFile: mapped file pages, the binary's and the page-cache pages of blobs kept mapped
  # as verified (--verified-cache), which are the kernel's page cache, not allocations.
  echo "== --buffer-memory $m: peak VmRSS $((peak / 1024)) MiB (peak RssAnon $((peak_anon / 1024)) MiB, RssFile $((peak_file / 1024)) MiB; sampled every 0.2 s), VmHWM $((hwm / 1024)) MiB (the kernel's peak, preparation included)"
  sed -n '/^workload/,$p' "$root/bench.out"
  curl -s http://127.0.0.1:9410/_granary/metrics | grep '^granary_buffer_budget'
  kill "$gpid"; wait "$gpid" 2>/dev/null || true; gpid=
done
