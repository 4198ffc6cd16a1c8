#!/usr/bin/env bash
# The README's first command: install dependencies, build, and start a single-node store
# (data under ./granary-data, S3 on 127.0.0.1:9000; credentials are printed).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh --build
TARGETS=granary bash scripts/build.sh  # the tests and benchmarks: scripts/test.sh
exec ./build/src/granary serve "$@"
