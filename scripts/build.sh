#!/usr/bin/env bash
# Configures and builds Granary (Release) into ./build. Extra arguments go to CMake.
set -euo pipefail
cd "$(dirname "$0")/.."
JOBS=${JOBS:-$(nproc)}
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release "$@" >/dev/null
cmake --build build -j"$JOBS"
