#!/usr/bin/env bash
# Runs the importer fuzzer (tests/fuzz/importer_fuzzer.cc) for a bounded time.
#
#   scripts/run-fuzzer.sh BUILD_DIR [SECONDS]
#
# Seeds: the bundled models (models/*/model.onnx) and the model of every ONNX backend test
# (tests/data/onnx-node-tests/*/model.onnx). New inputs go to BUILD_DIR/fuzz-corpus, kept between
# runs; a crash leaves its input in BUILD_DIR/fuzz-artifacts and fails the script.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
build=${1:?usage: run-fuzzer.sh BUILD_DIR [SECONDS]}
seconds=${2:-60}

fuzzer="$build/tests/fuzz/importer_fuzzer"
[[ -x "$fuzzer" ]] || { echo "run-fuzzer.sh: $fuzzer not built (make fuzz)" >&2; exit 1; }

seeds="$build/fuzz-seeds"
rm -rf "$seeds"
mkdir -p "$seeds" "$build/fuzz-corpus" "$build/fuzz-artifacts"
for m in models/*/model.onnx; do
  cp "$m" "$seeds/model-$(basename "$(dirname "$m")").onnx"
done
for m in tests/data/onnx-node-tests/*/model.onnx; do
  cp "$m" "$seeds/$(basename "$(dirname "$m")").onnx"
done

# -max_len: large enough for the small models whole; larger seeds are read truncated, which is
# itself a useful bad input. -rss_limit_mb bounds what a hostile size field may make us allocate.
echo "run-fuzzer.sh: fuzzing the importer for ${seconds}s with $(ls "$seeds" | wc -l) seeds"
ASAN_OPTIONS=detect_leaks=1:allocator_may_return_null=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  "$fuzzer" "$build/fuzz-corpus" "$seeds" \
  -max_total_time="$seconds" -max_len=262144 -timeout=20 -rss_limit_mb=3072 \
  -artifact_prefix="$build/fuzz-artifacts/" -print_final_stats=1
