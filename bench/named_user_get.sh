#!/usr/bin/env bash
# named_user_get.sh [GRANARY] [ROUNDS] [SECONDS]: 4 KiB GETs (32 connections, one client
# thread) as the root user and as a named user, alternated on one fresh `granary serve`
# (data under ./bench-data/named-user). A named user's requests check the bucket's owner
# on every request, the root's do not: the ratio of the two rates is what that check costs
# (docs/benchmarks.md, "Commits without a worker thread").
set -euo pipefail
cd "$(dirname "$0")/.."
granary=${1:-build/src/granary}
rounds=${2:-3}
secs=${3:-8}
root=$(pwd)/bench-data/named-user
port=9194
rm -rf "$root" && mkdir -p "$root"
export GRANARY_ROOT_USER=namedbench GRANARY_ROOT_PASSWORD=namedbench-secret-key
"$granary" serve --data "$root/data" --listen 127.0.0.1:$port --scrub-rate 0 >"$root/log" 2>&1 &
pid=$!
trap 'kill $pid 2>/dev/null; wait 2>/dev/null || true; [[ -n ${KEEP_DATA:-} ]] || rm -rf "$root"' EXIT
for _ in $(seq 100); do grep -q "serving S3" "$root/log" && break; sleep 0.1; done
AWS_ACCESS_KEY_ID=$GRANARY_ROOT_USER AWS_SECRET_ACCESS_KEY=$GRANARY_ROOT_PASSWORD \
  "$granary" admin user add alice --endpoint "http://127.0.0.1:$port" \
  --user-access-key ALICEBENCH000000 --user-secret-key alice-bench-secret-key >/dev/null
echo "user   op           ops  errors      ops/s      MB/s     keys/s   p50 ms   p90 ms   p99 ms p99.9 ms   max ms"
for _ in $(seq "$rounds"); do
  for who in root alice; do
    ak=$GRANARY_ROOT_USER sk=$GRANARY_ROOT_PASSWORD
    [[ $who == alice ]] && ak=ALICEBENCH000000 sk=alice-bench-secret-key
    printf "%-7s" "$who"
    build/bench/granary-bench --endpoint "http://127.0.0.1:$port" --access-key "$ak" \
      --secret-key "$sk" --bucket "bench-$who" --quiet --threads 1 --op get --size 4KiB \
      --concurrency 32 --objects 1000 --duration "${secs}s" | grep "^get " | cut -c14-
  done
done
