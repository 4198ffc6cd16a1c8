#!/usr/bin/env bash
# Starts a local Granary cluster on loopback (docs/operations.md, "Cluster mode"):
# one index service, 6 chunk servers in distinct failure domains (EC 4+2), 2 gateways.
# Everything lives under $GRANARY_CLUSTER_DIR (default ./granary-cluster): the cluster map
# (cluster.json), the secret, the root credentials, each process's data, log and pid.
# Run it again on the same directory to restart what is not running (same ports, same
# data). scripts/cluster-down.sh stops it.
#
# Environment: GRANARY_BIN (default ./build/src/granary; built if missing),
# GRANARY_CLUSTER_DIR, GRANARY_CHUNKSERVERS (6), GRANARY_GATEWAY_PORTS ("9001 9002"),
# GRANARY_EC ("4+2"). Extra options: GRANARY_GATEWAY_ARGS (gateways), GRANARY_INDEX_ARGS
# (the index, e.g. --checkpoint-interval 60).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
bin="${GRANARY_BIN:-$root/build/src/granary}"
dir="${GRANARY_CLUSTER_DIR:-./granary-cluster}"
servers="${GRANARY_CHUNKSERVERS:-6}"
gateway_ports="${GRANARY_GATEWAY_PORTS:-9001 9002}"
ec="${GRANARY_EC:-4+2}"
k="${ec%+*}"
m="${ec#*+}"

if [[ ! -x "$bin" ]]; then
  (cd "$root" && bash scripts/install-deps.sh && bash scripts/build.sh)
fi
# The logs hold the root secret key (each gateway prints it): readable by the owner only.
(umask 077 && mkdir -p "$dir"/{logs,pids})
chmod 700 "$dir/logs"  # one made by an older script was not
dir="$(cd "$dir" && pwd)"

# Shared secrets, made once: the cluster secret and the root user's key pair.
if [[ ! -s "$dir/cluster-secret" ]]; then
  (umask 077 && head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$dir/cluster-secret")
fi
if [[ ! -s "$dir/root-credentials.json" ]]; then
  ak="GR$(head -c 2048 /dev/urandom | tr -dc 'A-Z0-9' | head -c 18)"
  sk="$(head -c 2048 /dev/urandom | tr -dc 'A-Za-z0-9' | head -c 40)"
  (umask 077 && printf '{"access_key": "%s", "secret_key": "%s"}\n' "$ak" "$sk" \
    >"$dir/root-credentials.json")
fi
export GRANARY_CLUSTER_SECRET="$(cat "$dir/cluster-secret")"

# Whether NAME's recorded process is alive and still a granary (a pid file that outlived a
# reboot may name an unrelated process now).
running() {
  [[ -s "$dir/pids/$1" ]] || return 1
  local pid
  pid="$(cat "$dir/pids/$1")"
  kill -0 "$pid" 2>/dev/null && tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -q granary
}

# start NAME LISTEN ARGS...: runs `granary ARGS --listen LISTEN` in the background and
# waits for its "listening at http://HOST:PORT" line; records the port in ports/NAME.
start() {
  local name="$1" listen="$2"
  shift 2
  if running "$name"; then return 0; fi
  mkdir -p "$dir/ports"
  local log="$dir/logs/$name.log"
  : >"$log"
  setsid "$bin" "$@" --listen "$listen" >>"$log" 2>&1 </dev/null &
  echo $! >"$dir/pids/$name"
  for _ in $(seq 1 200); do
    local url
    url="$(grep -m1 -oE '(listening|serving S3) at https?://[^ ]+' "$log" | grep -oE '[0-9]+$' || true)"
    if [[ -n "$url" ]]; then
      echo "$url" >"$dir/ports/$name"
      return 0
    fi
    if ! kill -0 "$(cat "$dir/pids/$name")" 2>/dev/null; then
      echo "cluster-up: $name failed to start; its log:" >&2
      cat "$log" >&2
      exit 1
    fi
    sleep 0.1
  done
  echo "cluster-up: $name did not start in 20 s (log: $log)" >&2
  exit 1
}

# The port a process had before (a restart keeps its address), or 0 for a free one.
port_of() { cat "$dir/ports/$1" 2>/dev/null || echo 0; }

# stop_proc NAME: SIGTERM, then SIGKILL if it is still running after 10 s.
stop_proc() {
  running "$1" || return 0
  local pid
  pid="$(cat "$dir/pids/$1")"
  kill "$pid" 2>/dev/null || true
  for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  kill -KILL "$pid" 2>/dev/null || true
  while kill -0 "$pid" 2>/dev/null; do sleep 0.1; done
  rm -f "$dir/pids/$1"
}

# The cluster map: one drive per chunk server, each server its own failure domain. Written
# once; an existing map (perhaps edited by hand) is kept. The map names the index, and the
# index copies its checkpoints onto the map's chunk servers: the first time, the index
# runs without the map just long enough to get its port.
if [[ ! -s "$dir/cluster.json" ]]; then
  start index "127.0.0.1:$(port_of index)" index --dir "$dir/index"
  for i in $(seq 0 $((servers - 1))); do
    start "cs$i" "127.0.0.1:$(port_of "cs$i")" chunkserver --dir "d$i=$dir/cs$i/d$i"
  done
  {
    printf '{\n  "epoch": 1,\n  "index": "127.0.0.1:%s",\n' "$(port_of index)"
    printf '  "ec": {"k": %s, "m": %s},\n  "drives": [\n' "$k" "$m"
    for i in $(seq 0 $((servers - 1))); do
      sep=","
      [[ $i -eq $((servers - 1)) ]] && sep=""
      printf '    {"id": "d%s", "server": "cs%s", "domain": "host%s", "weight": 1.0, "endpoint": "127.0.0.1:%s"}%s\n' \
        "$i" "$i" "$i" "$(port_of "cs$i")" "$sep"
    done
    printf '  ]\n}\n'
  } >"$dir/cluster.json.tmp"
  mv "$dir/cluster.json.tmp" "$dir/cluster.json"
  stop_proc index
fi

# shellcheck disable=SC2086
start index "127.0.0.1:$(port_of index)" index --dir "$dir/index" \
  --cluster "$dir/cluster.json" ${GRANARY_INDEX_ARGS:-}
for i in $(seq 0 $((servers - 1))); do
  start "cs$i" "127.0.0.1:$(port_of "cs$i")" chunkserver --dir "d$i=$dir/cs$i/d$i"
done

n=0
for port in $gateway_ports; do
  # shellcheck disable=SC2086
  start "gw$n" "127.0.0.1:$port" gateway --cluster "$dir/cluster.json" \
    --credentials "$dir/root-credentials.json" ${GRANARY_GATEWAY_ARGS:-}
  n=$((n + 1))
done

ak="$(sed -E 's/.*"access_key": "([^"]+)".*/\1/' "$dir/root-credentials.json")"
sk="$(sed -E 's/.*"secret_key": "([^"]+)".*/\1/' "$dir/root-credentials.json")"
echo "Granary cluster is up (directory $dir):"
echo "  index:         127.0.0.1:$(port_of index)"
for i in $(seq 0 $((servers - 1))); do echo "  chunk server:  cs$i at 127.0.0.1:$(port_of "cs$i") (drive d$i)"; done
for i in $(seq 0 $((n - 1))); do echo "  S3 gateway:    http://127.0.0.1:$(port_of "gw$i")"; done
echo "  access key:    $ak"
echo "  secret key:    $sk"
echo "Try: AWS_ACCESS_KEY_ID=$ak AWS_SECRET_ACCESS_KEY=$sk aws --endpoint-url http://127.0.0.1:$(port_of gw0) s3 ls"
echo "Stop it with: GRANARY_CLUSTER_DIR=$dir bash scripts/cluster-down.sh"
