#!/usr/bin/env bash
# One GPU-machine call that proves and times the two passes written without a device (session of
# 2026-12-01, fourth): fuse-relu-grad-bgrad (ottr::ReluGradBiasGrad's CUDA kernel) and
# pad-gemm-dims. Both are off by default until this has run; the numbers decide whether to turn
# them on. Run from the repository root with the bundle unpacked in dev-bundle/ (README, "The GPU
# workflow"); logs and CSVs go to $OUT.
#   1. the new kernel's GPU tests and the suites around it (fused GEMMs, training, bf16);
#   2. ottr bench with each pass off and on, in the same call, on the models it applies to:
#      the MLP 4096x4 (bf16, TF32) and the small MLP at batch 8192 (TF32, bf16) for
#      fuse-relu-grad-bgrad; an MLP 4100-4096-1001 (k and n misaligned) in bf16 for pad-gemm-dims;
#   3. the per-op breakdown of the MLP 4096x4 bf16 step with fuse-relu-grad-bgrad on.
export LD_LIBRARY_PATH=dev-bundle/lib
out=${OUT:-/tmp/ottr-new-passes}
mkdir -p "$out"
t0=$SECONDS
timeout 240 dev-bundle/bin/ottr_gpu_tests \
  --gtest_filter='CudaReluGradBiasGradTest.*:CudaFusedGemmTest.*:CudaTrainingTest.*:MixedPrecisionGpuTest.*' \
  > "$out/gputests.log" 2>&1
echo "gpu tests rc=$? ($((SECONDS - t0)) s)"
grep -E "^\[  FAILED  \]|PASSED  \]" "$out/gputests.log" | sort -u | head -20
python3 bench/make_bench_models.py "$out/m" > /dev/null
python3 - "$out/m/pad.onnx" <<'PY'
import sys
sys.path.insert(0, "bench")
import onnx
import make_bench_models
onnx.save(make_bench_models.mlp([4100, 4096, 1001], 0), sys.argv[1])
PY
bench() {  # NAME MODEL BATCH PRECISION FLAGS...
  local name=$1 model=$2 batch=$3 precision=$4
  shift 4
  timeout 90 dev-bundle/bin/ottr bench "$model" --device cuda --batch "$batch" --optimizer adam --lr 1e-3 \
    --precision "$precision" --name "$name" --csv "$out/bench.csv" "$@" > "$out/$name.log" 2>&1 \
    || echo "$name failed: $(tail -1 "$out/$name.log")"
}
for m in "mlp_big 4096 bf16" "mlp_big 4096 tf32" "mlp_small 8192 tf32" "mlp_small 8192 bf16"; do
  set -- $m
  for f in off on; do bench "$1_b$2_$3_relu_bgrad_$f" "$out/m/$1.onnx" "$2" "$3" --fuse-relu-grad-bgrad "$f"; done
done
for f in off on; do bench "pad_b4096_bf16_pad_$f" "$out/m/pad.onnx" 4096 bf16 --pad-gemm-dims "$f"; done
timeout 90 dev-bundle/bin/ottr bench "$out/m/mlp_big.onnx" --device cuda --batch 4096 --optimizer adam --lr 1e-3 \
  --precision bf16 --fuse-relu-grad-bgrad on --per-op --per-op-csv "$out/perop_mlp_big_bf16_relu_bgrad.csv" \
  > "$out/perop_mlp_big_bf16_relu_bgrad.log" 2>&1
rm -rf "$out/m"
cat "$out/bench.csv"
echo "total $((SECONDS - t0)) s"
