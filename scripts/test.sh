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
ctest --test-dir build --output-on-failure --timeout 600 --no-tests=error -j"$JOBS"

stage "unit tests (ASan + UBSan): not in this command; bash scripts/sanitize.sh runs them"

stage "fuzzing (libFuzzer + ASan + UBSan, 10 s per target)"
bash scripts/fuzz.sh 10

stage "integration tests (real granary, boto3, aws-cli, s3cmd, JavaScript SDK)"
# The tests' data (~13 GB a run: servers' drives, uploads) goes under a directory of this
# run's own, removed when they pass and kept (its path printed) when they fail. pytest's
# default keeps the last three runs under /tmp, which filled a developer's disk.
basetemp=$(mktemp -d -t granary-tests.XXXXXX)
# Whatever ends the tests, no local cluster they started goes on running (its processes
# are detached: scripts/cluster-up.sh); granary serve and Prometheus die with pytest
# (tests/integration/conftest.py).
stop_clusters() {
  [[ -d $basetemp ]] || return 0
  local pids
  while read -r pids; do
    GRANARY_CLUSTER_DIR="$(dirname "$pids")" bash scripts/cluster-down.sh >/dev/null || true
  done < <(find "$basetemp" -maxdepth 6 -type d -name pids 2>/dev/null || true)
}
# Keeps the command's own exit status (a trap's last command would set it otherwise).
trap 'status=$?; stop_clusters; exit "$status"' EXIT
# A hung test fails after 15 minutes (pytest-timeout), and the whole run after 45: CI then
# reports a failure well inside its limit instead of being killed at it. -rs lists every
# skipped test with its reason.
rc=0
GRANARY_BIN="$PWD/build/src/granary" timeout -k 60 2700 /usr/bin/python3 -m pytest -q -rs \
  -p no:cacheprovider --timeout 900 --basetemp="$basetemp" tests/integration "$@" || rc=$?
if ((rc != 0)); then
  stop_clusters
  # The servers' drives and uploads are most of the 13 GB; the logs are what tells.
  find "$basetemp" -type f ! -name '*.log' -delete 2>/dev/null || true
  echo "integration tests failed (exit $rc; 124: the 45-minute limit); their logs are in $basetemp"
  exit "$rc"
fi
rm -rf "$basetemp"
stage "all passed"
