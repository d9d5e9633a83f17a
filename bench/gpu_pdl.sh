#!/usr/bin/env bash
# One GPU-machine call for programmatic dependent launch (CudaExecutorOptions::programmatic_launch,
# runtime/cuda/kernels/pdl.cuh): the GPU test that compares programmatic with ordinary launches bit
# for bit, then `ottr bench` of the benchmark models with OTTR_PDL=0 and 1 (and 1 without the
# prefetch before the wait, and 1 with cooperative kernels too), the small MLP twice, a kernel
# trace of the small MLP at batch 128 both ways, and unless QUICK=1 the whole GPU suite. Run from the
# repository root with the bundle unpacked in dev-bundle/; logs and the CSV go to $OUT.
export LD_LIBRARY_PATH=dev-bundle/lib
out=${OUT:-/tmp/ottr-pdl}
mkdir -p "$out"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
timeout 90 dev-bundle/bin/ottr_gpu_tests --gtest_filter='*Programmatic*' > "$out/pdl_tests.log" 2>&1
echo "programmatic tests rc=$?"
grep -aE "^  |OK \]|FAILED \]|Failure|Expected|Which is" "$out/pdl_tests.log" | head -40
m=/tmp/pdl-models
python3 bench/make_bench_models.py $m > /dev/null
run() {  # name, model, batch, env...
  local name=$1 model=$2 batch=$3
  shift 3
  env "$@" timeout 120 dev-bundle/bin/ottr bench $m/$model.onnx --device cuda --batch "$batch" --optimizer adam \
    --lr 1e-3 --name "$name" --csv "$out/ab.csv" > "$out/$name.log" 2>&1 || tail -3 "$out/$name.log"
  grep -a "programmatic edges" "$out/$name.log"
}
# OTTR_PDL_PREFETCH=0: programmatic launches that copy nothing before their wait.
for spec in "mlp_small 128" "mlp_small 8192" "mlp_small 128" "mlp_small 8192" "cnn 128" "mlp_big 4096"; do
  set -- $spec
  r=$(ls "$out" | grep -c "^${1}_b${2}_pdl0")
  run "${1}_b${2}_pdl0_r$r" "$1" "$2" OTTR_PDL=0
  run "${1}_b${2}_pdl1_r$r" "$1" "$2" OTTR_PDL=1
  run "${1}_b${2}_pdl1nopre_r$r" "$1" "$2" OTTR_PDL=1 OTTR_PDL_PREFETCH=0
  run "${1}_b${2}_pdl1coop_r$r" "$1" "$2" OTTR_PDL=1 OTTR_PDL_COOP=1
done
cat "$out/ab.csv"
for p in 0 1; do  # the autotuner's choices at batch 128 both ways
  OTTR_PDL=$p OTTR_LOG_GEMM_ALGOS=1 timeout 60 dev-bundle/bin/ottr bench $m/mlp_small.onnx --device cuda --batch 128 \
    --optimizer adam --lr 1e-3 > "$out/algos_b128_pdl$p.log" 2>&1
  grep -aE "^gemm|ottr config" "$out/algos_b128_pdl$p.log" | head -40
done
for p in 0 1; do
  OTTR_PDL=$p timeout 60 dev-bundle/bin/ottr bench $m/mlp_small.onnx --device cuda --batch 128 --optimizer adam \
    --lr 1e-3 --trace "$out/trace_b128_pdl$p.txt" > "$out/trace_b128_pdl$p.log" 2>&1 || tail -3 "$out/trace_b128_pdl$p.log"
  grep -a "^trace:" "$out/trace_b128_pdl$p.log"
done
[ "${QUICK:-0}" = 1 ] && exit 0
timeout 240 dev-bundle/bin/ottr_gpu_tests > "$out/gputests.log" 2>&1
echo "gpu tests rc=$?"
grep -aE "^\[  FAILED  \]|PASSED  \]|tests ran" "$out/gputests.log" | sort -u | head -20
