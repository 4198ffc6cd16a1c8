#!/usr/bin/env bash
# Installs every Debian 12 package Granary needs to build, test and benchmark.
# Idempotent and non-interactive: packages already present are skipped by apt.
# --bench adds what bench/s3_bench.sh compares against (nginx, iperf3); the test suite
# does not need them.
set -euo pipefail

BUILD_PKGS=(
  g++ cmake ninja-build pkg-config
  libboost-dev libboost-program-options-dev
  liburing-dev libisal-dev librocksdb-dev libssl-dev
  nlohmann-json3-dev prometheus-cpp-dev libpugixml-dev libfmt-dev libjemalloc-dev
  catch2
)
TEST_PKGS=(
  python3 python3-pytest python3-boto3 python3-requests
  awscli s3cmd curl procps prometheus fio python3-torch openssl
  clang-19 libclang-rt-19-dev
)

BENCH_PKGS=()
if [[ ${1:-} == --bench ]]; then BENCH_PKGS=(nginx-light iperf3); fi

SUDO=""
if [[ $(id -u) -ne 0 ]]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive

want=()
for p in "${BUILD_PKGS[@]}" "${TEST_PKGS[@]}" "${BENCH_PKGS[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    want+=("$p")
  fi
done

if ((${#want[@]})); then
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${want[@]}"
  # Debian starts nginx as a service on install; the benchmark runs its own.
  if [[ " ${want[*]} " == *" nginx-light "* ]]; then
    $SUDO service nginx stop >/dev/null 2>&1 || $SUDO pkill -x nginx || true
  fi
fi

# The AWS SDK for JavaScript v3 that tests/integration/test_js_sdk.py drives, pinned in
# tests/integration/js/package-lock.json: `npm ci` there when node_modules is missing or the
# lockfile changed since the last install (its hash is kept in node_modules).
JS_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/tests/integration/js"
if [[ -f $JS_DIR/package-lock.json ]]; then
  if ! command -v npm >/dev/null 2>&1; then
    # Debian 12's own Node.js is 18; the pinned SDK wants >= 20 (test_js_sdk.py says so
    # clearly if that is what is installed).
    $SUDO apt-get update -qq
    $SUDO apt-get install -y -qq --no-install-recommends nodejs npm
  fi
  lock_sum=$(sha256sum "$JS_DIR/package-lock.json" | cut -d' ' -f1)
  stamp="$JS_DIR/node_modules/.granary-lock.sha256"
  if [[ ! -f $stamp || $(<"$stamp") != "$lock_sum" ]]; then
    (cd "$JS_DIR" && npm ci --no-audit --no-fund --loglevel=error >/dev/null)
    echo "$lock_sum" >"$stamp"
  fi
fi
echo "install-deps: all packages present"
