#!/usr/bin/env bash
# core_scaling.sh [SECONDS]: how Granary's S3 figures grow with the server's cores.
# For each N in CORES, starts a fresh `granary serve --scrub-rate 0` pinned by taskset to
# CPUs 0..N-1 (its event loops and thread pools size themselves from that affinity), drives
# it with granary-bench pinned to the CPUs in CLIENT_CPUS (default: the machine's upper
# half, one client thread each), and runs the same four phases at the same connection
# counts for every N: 4 KiB GET (128 connections), 1 MiB GET (64), 4 KiB PUT acknowledged
# durable (128), 1 MiB PUT (32). Prints each phase's table, the server's CPU (cores busy
# over the whole phase, preparation included), and a summary with each figure's speed-up
# over the smallest N. On a 2-core machine there is nothing to scale: it needs >= 4 CPUs.
#   SECONDS (default 8): each phase's measured length.
#   CORES (default: 1 2 4 ... up to the CPUs left of CLIENT_CPUS): the server's core counts.
#   GRANARY, BENCH: the binaries (default build/src/granary, build/bench/granary-bench).
#   DATA (default ./bench-data/scaling): the server's data directory, emptied per N.
# docs/benchmarks.md, "Scaling with cores", records a run and its command.
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-8}
granary=${GRANARY:-build/src/granary}
bench=${BENCH:-build/bench/granary-bench}
root=${DATA:-$(pwd)/bench-data/scaling}
cpus=$(nproc --all)
(( cpus >= 4 )) || { echo "core_scaling: $cpus CPUs; needs at least 4 (server and client apart)"; exit 1; }
client_cpus=${CLIENT_CPUS:-$((cpus / 2))-$((cpus - 1))}
client_n=$(taskset -c "$client_cpus" nproc)
if [[ -z ${CORES:-} ]]; then
  CORES=""
  for ((n = 1; n <= cpus - client_n; n *= 2)); do CORES="$CORES $n"; done
fi
for tool in "$granary" "$bench"; do
  [[ -x $tool ]] || { echo "core_scaling: $tool missing (build first)"; exit 1; }
done

export GRANARY_ROOT_USER=scaling GRANARY_ROOT_PASSWORD=scaling-secret-key
export AWS_ACCESS_KEY_ID=$GRANARY_ROOT_USER AWS_SECRET_ACCESS_KEY=$GRANARY_ROOT_PASSWORD
port=9390
ep=http://127.0.0.1:$port
pid=
stop() {
  if [[ -n $pid ]]; then kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; fi
  pid=
}
# The server's data goes at the end (the JSON figures beside it stay), unless KEEP_DATA.
trap 'stop; [[ -n ${KEEP_DATA:-} ]] || rm -rf "$root"' EXIT
server_ticks() { awk '{ print $14 + $15 }' "/proc/$pid/stat"; }

echo "== machine: $cpus CPUs, $(uname -r),$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2)"
echo "== client: granary-bench on CPUs $client_cpus ($client_n threads); server cores:$CORES"
jsons=()
for n in $CORES; do
  stop
  rm -rf "$root" && mkdir -p "$root"
  # --gc-grace 5: the PUT phases overwrite their keys; free the old versions quickly.
  taskset -c "0-$((n - 1))" "$granary" serve --data "$root/data" --listen "127.0.0.1:$port" \
    --scrub-rate 0 --gc-grace 5 >"$root/log" 2>&1 &
  pid=$!
  for _ in $(seq 100); do grep -q "serving S3" "$root/log" && break; sleep 0.1; done
  grep -q "serving S3" "$root/log" || { echo "core_scaling: the server did not start"; cat "$root/log"; exit 1; }
  for phase in "get 4KiB 128 1000" "get 1MiB 64 128" "put 4KiB 128 10000" "put 1MiB 32 256"; do
    read -r op size conns objects <<<"$phase"
    json=$root/../scaling-$n-$op-$size.json
    echo "== $n server cores: $size ${op^^}, $conns connections"
    before=$(server_ticks) t0=$(date +%s.%N)
    taskset -c "$client_cpus" "$bench" --endpoint "$ep" --quiet --duration "${secs}s" \
      --threads "$client_n" --op "$op" --size "$size" --concurrency "$conns" \
      --objects "$objects" --json "$json" | sed -n '/^workload/,$p'
    after=$(server_ticks) t1=$(date +%s.%N)
    awk -v a="$before" -v b="$after" -v t0="$t0" -v t1="$t1" -v hz="$(getconf CLK_TCK)" \
      'BEGIN { printf "   server: %.2f cores busy\n", (b - a) / hz / (t1 - t0) }'
    jsons+=("$n:$json")
  done
done
stop

/usr/bin/env python3 - "${jsons[@]}" <<'EOF'
import json, sys
rows, base = [], {}
for arg in sys.argv[1:]:
    n, path = arg.split(":", 1)
    w = json.load(open(path))["workloads"][0]
    op = w["ops"][w["name"]]
    label = f'{w["name"].upper()} {path.rsplit("-", 1)[1][:-5]}'
    rows.append((int(n), label, op["ops_per_s"], op["mb_per_s"], op["latency_ms"]["p99"]))
    base.setdefault(label, op["ops_per_s"])
print("== summary: speed-up is ops/s over the smallest server's")
print(f'{"cores":>5}  {"figure":<10} {"ops/s":>10} {"MB/s":>8} {"p99 ms":>8} {"speed-up":>8}')
for n, label, ops, mbs, p99 in sorted(rows, key=lambda r: (r[1], r[0])):
    print(f"{n:>5}  {label:<10} {ops:>10.0f} {mbs:>8.0f} {p99:>8.1f} {ops / base[label]:>8.2f}")
EOF
