#!/usr/bin/env bash
# One GPU-machine call for fuse-gemm-adam's TF32 tensor-core kernel (kernels/gemm_adam.cu): its
# GPU tests, the small MLP and the CNN with the pass on and off (alternating rounds), the batch-128
# step's timeline both ways (bench/gpu_trace.sh) and the stream assignment (OTTR_LOG_STREAMS), then
# Nsight Compute on the kernels of NCU_KERNELS (a regex, default the fused kernel; NO_NCU=1 skips
# it). GPU_FILTER picks the GPU tests. Run from the repository root with the bundle in
# dev-bundle-xz/b.tar.xz; bench/RESULTS.md 2026-12-07 (4) has its calls.
set -u
tar xJf dev-bundle-xz/b.tar.xz
export LD_LIBRARY_PATH=dev-bundle/lib
out=${OUT:-/tmp/gemm-adam}
mkdir -p "$out"
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
t0=$SECONDS
timeout 200 dev-bundle/bin/ottr_gpu_tests \
  --gtest_filter="${GPU_FILTER:-*GemmAdam*:CudaTrainingTest.MlpStep*:LossScalingGpuTest.*}" > "$out/gputests.log" 2>&1
echo "gpu tests rc=$? ($((SECONDS - t0)) s)"
grep -E '^\[  FAILED  \]|PASSED  \]|tests ran|normwise from the cpu' "$out/gputests.log" | sort -u | head -40
python3 bench/make_bench_models.py /tmp/m > /dev/null
bench() {  # MODEL BATCH [flags]: the CSV row (µs per step, launches, peak bytes)
  timeout 120 dev-bundle/bin/ottr bench "/tmp/m/$1.onnx" --device cuda --batch "$2" --optimizer adam --lr 1e-3 \
    "${@:3}" 2>&1 | tail -1 | cut -d, -f5-7
}
for round in 1 2 3; do
  for cfg in off on; do echo "round $round mlp_small b128 fuse-gemm-adam $cfg: $(bench mlp_small 128 --fuse-gemm-adam $cfg)"; done
done
echo "mlp_small b8192 (fuse-gemm-adam declines k > 256): $(bench mlp_small 8192)"
for cfg in off on; do
  echo "mlp_small b256 fuse-gemm-adam $cfg: $(bench mlp_small 256 --fuse-gemm-adam $cfg)"
  echo "cnn b128 fuse-gemm-adam $cfg: $(bench cnn 128 --fuse-gemm-adam $cfg)"
done
echo "streams (fuse-gemm-adam on, batch 128):"
OTTR_LOG_STREAMS=1 timeout 60 dev-bundle/bin/ottr bench /tmp/m/mlp_small.onnx --device cuda --batch 128 --optimizer adam \
  --lr 1e-3 --fuse-gemm-adam on 2>&1 | grep '^launch' | sort -u | head -20
CASES="ga_on_128 mlp_small 128 tf32 -- --fuse-gemm-adam on
ga_off_128 mlp_small 128 tf32 -- --fuse-gemm-adam off" OUT="$out/trace" bash bench/gpu_trace.sh 2>&1 | tail -4
if [ -z "${NO_NCU:-}" ]; then
  timeout 150 ncu --kernel-name regex:'${NCU_KERNELS:-GemmAdamTf32Kernel}' --launch-skip 6 --launch-count 3 \
    --section SpeedOfLight --section LaunchStats --section Occupancy --section WarpStateStats \
    --section MemoryWorkloadAnalysis --section SchedulerStats \
    dev-bundle/bin/ottr bench /tmp/m/mlp_small.onnx --device cuda --batch 128 --optimizer adam --lr 1e-3 \
    --fuse-gemm-adam on --no-cuda-graph > "$out/ncu.txt" 2>&1
  echo "ncu rc=$?"
  grep -E '^  [A-Za-z]|Duration|Elapsed Cycles|Memory Throughput|DRAM Throughput|Achieved Occupancy|Registers Per|Grid Size|Block Size|Warp Cycles Per Issued|Issued Warp Per|No Eligible|L2 Hit|Dynamic Shared' "$out/ncu.txt" | head -90
fi
echo "total $((SECONDS - t0)) s"
