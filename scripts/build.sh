#!/usr/bin/env bash
# Configures and builds Granary (Release) into ./build. Extra arguments go to CMake.
# TARGETS="granary" builds only those targets (the quickstart needs nothing else).
set -euo pipefail
cd "$(dirname "$0")/.."
JOBS=${JOBS:-$(nproc)}
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release "$@" >/dev/null
if [[ -n "${TARGETS:-}" ]]; then
  # shellcheck disable=SC2086  # a list of target names
  cmake --build build -j"$JOBS" --target $TARGETS
else
  cmake --build build -j"$JOBS"
fi
