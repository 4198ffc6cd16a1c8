#!/usr/bin/env bash
# list_ab.sh ROUNDS BIN [BIN...]: LIST over KEYS keys (default 1,000,000), 1,000 a page,
# one connection, of several `granary` binaries alternated round by round on one data
# directory (docs/benchmarks.md, "LIST and the allocator"). The keys are prepared once, by
# the first binary: give the oldest first, since newer binaries read older index values
# and not the reverse. Per binary and round: a fresh `granary serve --scrub-rate 0` on
# that directory (./bench-data/list-ab), a 4 s listing to warm its caches, then an 8 s
# listing whose row is printed.
set -euo pipefail
cd "$(dirname "$0")/.."
[[ $# -ge 2 ]] || { echo "usage: $0 ROUNDS BIN [BIN...]"; exit 2; }
rounds=$1
shift
keys=${KEYS:-1000000}
bench=build/bench/granary-bench
root=$(pwd)/bench-data/list-ab
ep=http://127.0.0.1:9193
export GRANARY_ROOT_USER=listab GRANARY_ROOT_PASSWORD=listab-secret-key
export AWS_ACCESS_KEY_ID=$GRANARY_ROOT_USER AWS_SECRET_ACCESS_KEY=$GRANARY_ROOT_PASSWORD
w="name=list,op=list,objects=$keys,concurrency=1,prefix=list-ab/,cleanup=no"
pid=
stop() {
  if [[ -n $pid ]]; then kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; fi
  pid=
}
trap 'stop; rm -rf "$root"' EXIT
start() {  # start BIN: a server on the shared data directory
  "$1" serve --data "$root/data" --listen 127.0.0.1:9193 --scrub-rate 0 >"$root/log" 2>&1 &
  pid=$!
  for _ in $(seq 100); do grep -q "serving S3" "$root/log" && return; sleep 0.1; done
  echo "list_ab: $1 did not start"; cat "$root/log"; exit 1
}
list() {  # list SECONDS [ARGS...]
  local secs=$1
  shift
  "$bench" --endpoint "$ep" --quiet --threads 1 --duration "${secs}s" "$@"
}
rm -rf "$root" && mkdir -p "$root"
start "$1"
list 1 --workload "$w" | grep '^prepared'
stop
echo "workload     op           ops  errors      ops/s      MB/s     keys/s   p50 ms   p90 ms   p99 ms p99.9 ms   max ms"
for round in $(seq "$rounds"); do
  for bin in "$@"; do
    start "$bin"
    list 4 --workload "$w,prepare=skip" >/dev/null
    echo "== round $round: $bin"
    list 8 --workload "$w,prepare=skip" | grep '^list '
    stop
  done
done
