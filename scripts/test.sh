#!/usr/bin/env bash
# The README's second command: install dependencies, build, and run every test:
#   1. unit tests (Catch2 via ctest) on the Release build,
#   2. the same unit tests built with AddressSanitizer + UndefinedBehaviorSanitizer,
#   3. a short coverage-guided libFuzzer run of every parser fuzz target (scripts/fuzz.sh),
#   4. integration tests (pytest) that start the real granary binary on loopback and
#      drive it with boto3, aws-cli, s3cmd and the AWS SDK for JavaScript.
set -euo pipefail
cd "$(dirname "$0")/.."
JOBS=${JOBS:-$(nproc)}

bash scripts/install-deps.sh

echo "== build (Release)"
bash scripts/build.sh

# A test that hangs fails after 600 s instead of holding CI until its limit (the slowest,
# under ASan, takes ~110 s).
echo "== unit tests (Release)"
ctest --test-dir build --output-on-failure --timeout 600 -j"$JOBS"

if [[ "${GRANARY_SKIP_SANITIZERS:-0}" != 1 ]]; then
  echo "== unit tests (ASan + UBSan)"
  cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=Debug -DGRANARY_SANITIZE=ON \
    -DGRANARY_BUILD_BENCH=OFF >/dev/null
  cmake --build build-asan -j"$JOBS"
  ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
    ctest --test-dir build-asan --output-on-failure --timeout 600 -j"$JOBS"
else
  echo "== unit tests (ASan + UBSan): SKIPPED because GRANARY_SKIP_SANITIZERS=1"
fi

echo "== fuzzing (libFuzzer + ASan + UBSan, 10 s per target)"
bash scripts/fuzz.sh 10

echo "== integration tests (real granary, boto3, aws-cli, s3cmd, JavaScript SDK)"
# The tests' data (~13 GB a run: servers' drives, uploads) goes under a directory of this
# run's own, removed when they pass and kept (its path printed) when they fail. pytest's
# default keeps the last three runs under /tmp, which filled a developer's disk.
basetemp=$(mktemp -d -t granary-tests.XXXXXX)
GRANARY_BIN="$PWD/build/src/granary" /usr/bin/python3 -m pytest -q -p no:cacheprovider \
  --basetemp="$basetemp" tests/integration "$@" ||
  { rc=$?; echo "integration tests failed; their data is in $basetemp"; exit "$rc"; }
rm -rf "$basetemp"
