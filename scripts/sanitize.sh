#!/usr/bin/env bash
# The unit tests (and ctest's fuzz replays) built with AddressSanitizer and
# UndefinedBehaviorSanitizer into ./build-asan. Run it before resolving a change that
# touches memory or concurrency. Not part of scripts/test.sh: on CI's 2 cores this build
# and run take ~17 minutes, which would take the test command past its 30-minute budget
# (docs/operations.md, "Test suite time"); the libFuzzer step of scripts/test.sh does run
# the parsers under both sanitizers. Extra arguments go to ctest (e.g. -R listing).
set -euo pipefail
cd "$(dirname "$0")/.."
JOBS=${JOBS:-$(nproc)}

bash scripts/install-deps.sh

echo "== build (ASan + UBSan)"
# -Og -g1 rather than Debug's -O0 -g: the sanitizers' reports keep function, file and line,
# the build takes less CPU and the tests run about 1.3x faster.
cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_FLAGS_DEBUG="-Og -g1" \
  -DGRANARY_SANITIZE=ON -DGRANARY_BUILD_BENCH=OFF >/dev/null
cmake --build build-asan -j"$JOBS"

echo "== unit tests (ASan + UBSan)"
# A test that hangs fails after 600 s (the slowest takes ~70 s here).
ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
  ctest --test-dir build-asan --output-on-failure --timeout 600 -j"$JOBS" "$@"
