#!/usr/bin/env bash
# The short form of bench/gpu_splitk.sh for a call with little device time: the cluster
# configurations' GPU tests and the small MLP at batch 128 (then 256 and the CNN at 128) with and
# without them (OTTR_SMALL_GEMM=warps), each step's trace and log in $OUT.
export LD_LIBRARY_PATH=dev-bundle/lib
out=${OUT:-/tmp/ottr-splitk}
mkdir -p "$out"
t0=$SECONDS
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
timeout 120 dev-bundle/bin/ottr_gpu_tests --gtest_filter='SmallGemm*:CudaTrainingTest.MlpStep*' > "$out/targeted.log" 2>&1
echo "targeted tests rc=$? ($((SECONDS - t0)) s)"
grep -E "^\[  FAILED  \]|PASSED  \]|tests ran" "$out/targeted.log" | sort -u | head -20
python3 bench/make_bench_models.py /tmp/m > /dev/null
mkdir -p /tmp/logs
bench() {  # name model batch OTTR_SMALL_GEMM [env...]
  local name=$1 model=$2 batch=$3 v=$4; shift 4
  timeout 60 env OTTR_SMALL_GEMM="$v" "$@" dev-bundle/bin/ottr bench /tmp/m/$model.onnx --device cuda --batch "$batch" \
    --optimizer adam --lr 1e-3 --name "$name" --trace "/tmp/logs/$name.trace" > "/tmp/logs/$name.log" 2>&1
  echo "$name: $(grep -E "^$name," "/tmp/logs/$name.log" | cut -d, -f5,6,7) | $(grep '^trace:' "/tmp/logs/$name.log" | cut -c8-90)"
}
bench s128 mlp_small 128 "" OTTR_LOG_GEMM_ALGOS=1
bench s128_warps mlp_small 128 warps
bench s128b mlp_small 128 ""
bench s128b_warps mlp_small 128 warps
bench cnn128 cnn 128 ""
bench cnn128_warps cnn 128 warps
bench s256 mlp_small 256 ""
bench s256_warps mlp_small 256 warps
tar czf "$out/logs.tgz" -C /tmp logs
echo "total $((SECONDS - t0)) s"
