#!/usr/bin/env bash
# Coverage-guided fuzzing of the parsers that hostile input reaches (Range, S3 XML bodies,
# aws-chunked, SigV4/URIs, POST Object forms, tar/WARC containers) with libFuzzer, ASan and
# UBSan.
#   bash scripts/fuzz.sh [SECONDS]   # per target; default 10 (the CI run). Longer by hand:
#   bash scripts/fuzz.sh 3600
# Each target starts from its seeds (tests/fuzz/seeds/<target>, or the test data for the
# container parser) in a scratch corpus under build-fuzz/corpus; a crash, a leak, a
# sanitizer report or a failed property check stops the run with the reproducer's path.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
SECONDS_PER_TARGET=${1:-10}
CXX_FUZZ=${CXX_FUZZ:-clang++-19}
if ! command -v "$CXX_FUZZ" >/dev/null; then
  echo "fuzz.sh: $CXX_FUZZ not found; scripts/install-deps.sh installs clang-19" >&2
  exit 1
fi
cmake -S tests/fuzz/libfuzzer -B build-fuzz -G Ninja -DCMAKE_CXX_COMPILER="$CXX_FUZZ" \
  -DCMAKE_BUILD_TYPE=None >/dev/null
cmake --build build-fuzz -j"$(nproc)"

declare -A SEEDS=(
  [http_range]=tests/fuzz/seeds/http_range
  [s3_xml]=tests/fuzz/seeds/s3_xml
  [aws_chunked]=tests/fuzz/seeds/aws_chunked
  [sigv4]=tests/fuzz/seeds/sigv4
  [post_form]=tests/fuzz/seeds/post_form
  [bucket_policy]=tests/fuzz/seeds/bucket_policy
  [container_parser]="tests/testdata tests/unit/index_kv/testdata"
)
for target in http_range s3_xml aws_chunked sigv4 post_form bucket_policy container_parser; do
  corpus=build-fuzz/corpus/$target
  mkdir -p "$corpus" build-fuzz/crashes
  echo "== $target: ${SECONDS_PER_TARGET}s"
  log=build-fuzz/$target.log
  # shellcheck disable=SC2086  # several seed directories
  if ! build-fuzz/${target}_fuzz -max_total_time="$SECONDS_PER_TARGET" -max_len=262144 \
      -rss_limit_mb=4096 -print_final_stats=1 -artifact_prefix=build-fuzz/crashes/$target- \
      "$corpus" ${SEEDS[$target]} >"$log" 2>&1; then
    tail -40 "$log" >&2
    echo "fuzz.sh: $target failed (log $log); reproduce with build-fuzz/${target}_fuzz <crash file>" >&2
    exit 1
  fi
  grep -E "^Done|stat::new_units_added|stat::number_of_executed_units" "$log" || true
done
echo "fuzz.sh: all targets ran ${SECONDS_PER_TARGET}s without a failure"
