#!/usr/bin/env bash
# One GPU-machine call for the small GEMM's split-K configurations: every GPU test and CUDA
# conformance first (SKIP_TESTS=1 leaves them out), then the bench MLPs and the CNN with and
# without split K (OTTR_SMALL_GEMM=nosplit) in alternating rounds, the GEMM choices logged, a
# kernel trace of the batch-128 step and Nsight Compute on its kernels (clocks and caches as the
# step runs them). Extra binaries in dev-bundle/bin named ottr_* are benched beside ottr at batch
# 128. Run from the repository root with the bundle unpacked in dev-bundle/; results in $OUT.
export LD_LIBRARY_PATH=dev-bundle/lib
out=${OUT:-/tmp/ottr-splitk}
mkdir -p "$out/d"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
t0=$SECONDS
if [ "${SKIP_TESTS:-0}" != 1 ]; then
  timeout 270 dev-bundle/bin/ottr_gpu_tests > "$out/d/gputests.log" 2>&1
  echo "gpu tests rc=$? ($((SECONDS - t0)) s)"
  grep -E "^\[  FAILED  \]|PASSED  \]" "$out/d/gputests.log" | sort -u | head -20
  timeout 120 dev-bundle/bin/ottr test-data --device cuda --no-tf32 \
    --expected-failures tests/conformance/expected_failures_cuda.txt tests/data/onnx-node-tests \
    > "$out/d/conformance_cuda.log" 2>&1
  echo "conformance rc=$?: $(tail -1 "$out/d/conformance_cuda.log") ($((SECONDS - t0)) s)"
fi
m=$out/m
python3 bench/make_bench_models.py "$m" > /dev/null
bench() {  # NAME BINARY MODEL BATCH [ENV=VALUE...]: prints NAME µs/step,launches,peak
  local name=$1 bin=$2 model=$3 batch=$4
  shift 4
  timeout 90 env "$@" "$bin" bench "$m/$model.onnx" --device cuda --batch "$batch" --optimizer adam --lr 1e-3 \
    --name "$name" > "$out/d/$name.log" 2>&1 || echo "$name failed: $(tail -2 "$out/d/$name.log")"
  echo "$name $(grep -E "^$name," "$out/d/$name.log" | cut -d, -f5,6,7)"
}
others=$(ls dev-bundle/bin | grep -E '^ottr_' | grep -v ottr_gpu_tests)
for round in 1 2 3; do
  bench "split_b128_r$round" dev-bundle/bin/ottr mlp_small 128 OTTR_LOG_GEMM_ALGOS=1
  bench "nosplit_b128_r$round" dev-bundle/bin/ottr mlp_small 128 OTTR_SMALL_GEMM=nosplit
  for o in $others; do bench "${o}_b128_r$round" "dev-bundle/bin/$o" mlp_small 128; done
done
for case in "mlp_small 256" "mlp_small 8192" "cnn 128" "mlp_big 4096"; do
  set -- $case
  bench "split_$1_$2" dev-bundle/bin/ottr "$1" "$2"
  bench "nosplit_$1_$2" dev-bundle/bin/ottr "$1" "$2" OTTR_SMALL_GEMM=nosplit
done
echo "benches done ($((SECONDS - t0)) s)"
grep -hE "^gemm |ottr config (8|9|10|11) " "$out/d/split_b128_r1.log" | head -40
# The step's kernels, traced (CUPTI), default and without split K.
CASES="tr_split mlp_small 128 tf32
tr_nosplit mlp_small 128 tf32 OTTR_SMALL_GEMM=nosplit" OUT="$out/trace" bash bench/gpu_trace.sh 2>&1 | tail -4
# Nsight Compute on two steps' kernels (the choices from an algorithm cache, so no autotuning
# launches come between), clocks and caches left as the step has them.
cache=$out/d/algo.cache
dev-bundle/bin/ottr bench "$m/mlp_small.onnx" --device cuda --batch 128 --optimizer adam --lr 1e-3 \
  --algo-cache "$cache" --steps 5 --windows 1 > /dev/null 2>&1
timeout $((590 - (SECONDS - t0))) ncu --clock-control none --cache-control none --launch-skip 300 --launch-count 28 \
  --section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats --section LaunchStats \
  --section Occupancy --section SchedulerStats \
  dev-bundle/bin/ottr bench "$m/mlp_small.onnx" --device cuda --batch 128 --optimizer adam --lr 1e-3 \
  --algo-cache "$cache" --steps 20 --windows 2 > "$out/d/ncu.txt" 2>&1
echo "ncu rc=$? ($((SECONDS - t0)) s)"
grep -E '^  [A-Za-z_<]|Duration|SM Frequency|Memory Throughput|L2 Hit|Warp Cycles Per Issued|Grid Size' \
  "$out/d/ncu.txt" | head -120
rm -rf "$m"
tar czf "$out/details.tgz" -C "$out" d && rm -rf "$out/d"
echo "total $((SECONDS - t0)) s"
