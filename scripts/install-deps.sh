#!/usr/bin/env bash
# Installs every Debian 12 package Granary needs to build, test and benchmark.
# Idempotent and non-interactive: packages already present are skipped by apt.
set -euo pipefail

BUILD_PKGS=(
  g++ cmake ninja-build pkg-config
  libboost-dev libboost-program-options-dev
  liburing-dev libisal-dev librocksdb-dev libssl-dev
  nlohmann-json3-dev prometheus-cpp-dev libpugixml-dev libfmt-dev
  catch2
)
TEST_PKGS=(
  python3 python3-pytest python3-boto3 python3-requests
  awscli s3cmd curl procps prometheus fio python3-torch
)

want=()
for p in "${BUILD_PKGS[@]}" "${TEST_PKGS[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    want+=("$p")
  fi
done

if ((${#want[@]})); then
  SUDO=""
  if [[ $(id -u) -ne 0 ]]; then SUDO="sudo"; fi
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${want[@]}"
fi
echo "install-deps: all packages present"
