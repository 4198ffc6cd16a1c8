#!/usr/bin/env bash
# The README's second command: install dependencies, build, and run every test:
#   1. unit tests (Catch2 via ctest) on the Release build,
#   2. a short coverage-guided libFuzzer run of every parser fuzz target under ASan and
#      UBSan (scripts/fuzz.sh),
#   3. integration tests (pytest) that start the real granary binary on loopback and
#      drive it with boto3, aws-cli, s3cmd and the AWS SDK for JavaScript.
# The unit tests under ASan + UBSan are scripts/sanitize.sh: CI has 2 cores and this command
# must stay well under 30 minutes (docs/operations.md, "Test suite time").
set -euo pipefail
cd "$(dirname "$0")/.."
JOBS=${JOBS:-$(nproc)}
# Each stage's heading says when it started (seconds since the command began).
stage() { echo "== $* (at ${SECONDS} s)"; }

bash scripts/install-deps.sh

stage "build (Release)"
bash scripts/build.sh

# A test that hangs fails after 600 s instead of holding CI until its limit.
stage "unit tests (Release)"
ctest --test-dir build --output-on-failure --timeout 600 -j"$JOBS"

stage "unit tests (ASan + UBSan): not in this command; bash scripts/sanitize.sh runs them"

stage "fuzzing (libFuzzer + ASan + UBSan, 10 s per target)"
bash scripts/fuzz.sh 10

stage "integration tests (real granary, boto3, aws-cli, s3cmd, JavaScript SDK)"
# The tests' data (~13 GB a run: servers' drives, uploads) goes under a directory of this
# run's own, removed when they pass and kept (its path printed) when they fail. pytest's
# default keeps the last three runs under /tmp, which filled a developer's disk.
basetemp=$(mktemp -d -t granary-tests.XXXXXX)
GRANARY_BIN="$PWD/build/src/granary" /usr/bin/python3 -m pytest -q -p no:cacheprovider \
  --basetemp="$basetemp" tests/integration "$@" ||
  { rc=$?; echo "integration tests failed; their data is in $basetemp"; exit "$rc"; }
rm -rf "$basetemp"
stage "all passed"
