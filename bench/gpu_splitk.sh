#!/usr/bin/env bash
# One GPU-machine call for the small GEMM's cluster configurations (K split over a thread-block
# cluster, runtime/cuda/kernels/small_gemm.cu), inside the 10-minute limit of one call: their GPU
# tests, the small MLP at batch 128 and 256 and the CNN at 128 traced with and without them
# (OTTR_SMALL_GEMM=warps; the GEMM choices logged at 128), the side-by-side with the peers
# (bench/compare, TF32 and unfused; ottr alone with QUICK=1), then the whole GPU suite in the time
# left of LIMIT seconds (default 570). Run from the repository root with the bundle unpacked in
# dev-bundle/; everything lands in $OUT.
export LD_LIBRARY_PATH=dev-bundle/lib
out=${OUT:-/tmp/ottr-splitk}
mkdir -p "$out"
t0=$SECONDS
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
timeout 150 dev-bundle/bin/ottr_gpu_tests --gtest_filter='SmallGemm*:CudaTrainingTest.*Mlp*' > "$out/targeted.log" 2>&1
echo "targeted tests rc=$? ($((SECONDS - t0)) s)"
grep -E "^\[  FAILED  \]|PASSED  \]|tests ran" "$out/targeted.log" | sort -u | head -20
CASES="
s128 mlp_small 128 tf32 OTTR_LOG_GEMM_ALGOS=1
s128_warps mlp_small 128 tf32 OTTR_SMALL_GEMM=warps
s128b mlp_small 128 tf32
s128b_warps mlp_small 128 tf32 OTTR_SMALL_GEMM=warps
s256 mlp_small 256 tf32
s256_warps mlp_small 256 tf32 OTTR_SMALL_GEMM=warps
cnn128 cnn 128 tf32
cnn128_warps cnn 128 tf32 OTTR_SMALL_GEMM=warps
" OUT="$out/trace" bash bench/gpu_trace.sh
quick=""
if [ -n "${QUICK:-}" ]; then quick=--quick; fi
COMPARE_PRECISIONS="tf32 unfused" BUNDLE=dev-bundle timeout 330 bench/compare "$out/cmp" $quick > "$out/compare.log" 2>&1
echo "compare rc=$? ($((SECONDS - t0)) s)"
tail -30 "$out/compare.log"
tar czf "$out/cmp.tgz" -C "$out" cmp && rm -rf "$out/cmp"
left=$((${LIMIT:-570} - (SECONDS - t0)))
if [ "$left" -gt 30 ]; then
  timeout "$left" dev-bundle/bin/ottr_gpu_tests > "$out/gputests.log" 2>&1
  echo "whole GPU suite rc=$? ($((SECONDS - t0)) s)"
  grep -E "^\[  FAILED  \]|PASSED  \]|tests ran" "$out/gputests.log" | sort -u | head -20
  tail -3 "$out/gputests.log"
fi
