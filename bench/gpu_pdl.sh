#!/usr/bin/env bash
# One GPU-machine call for programmatic dependent launch (CudaExecutorOptions::programmatic_launch,
# runtime/cuda/kernels/pdl.cuh), most important first: the GPU test that compares programmatic
# with ordinary launches bit for bit; `ottr bench` of the small MLP at batch 128 and 8192 with
# OTTR_PDL=0 and 1, ROUNDS (2) rounds; unless QUICK=1 the GPU suite (SUITE_FILTER: a gtest filter); then the CNN and the MLP 4096x4 both ways,
# the autotuner's choices and a kernel trace at batch 128 both ways. Run from the repository root
# with the bundle unpacked in dev-bundle/; logs and the CSV go to $OUT.
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
  grep -a "programmatic edges" "$out/$name.log" | sed "s/^/$name: /"
}
ab() {  # model batch: OTTR_PDL=0 and 1
  local model=$1 batch=$2
  local r
  r=$(ls "$out" | grep -c "^${model}_b${batch}_pdl0")
  run "${model}_b${batch}_pdl0_r$r" "$model" "$batch" OTTR_PDL=0
  run "${model}_b${batch}_pdl1_r$r" "$model" "$batch" OTTR_PDL=1
}
for round in $(seq 1 "${ROUNDS:-2}"); do
  ab mlp_small 128
  ab mlp_small 8192
done
cat "$out/ab.csv"
if [ "${QUICK:-0}" != 1 ]; then
  # Every other GPU test with programmatic launches (whatever the default; the test above sets
  # its own, which the variable would override).
  OTTR_PDL=1 timeout 240 dev-bundle/bin/ottr_gpu_tests --gtest_filter="${SUITE_FILTER:-*}-*Programmatic*" \
    > "$out/gputests.log" 2>&1
  echo "gpu tests rc=$?"
  grep -aE "^\[  FAILED  \]|PASSED  \]|tests ran" "$out/gputests.log" | sort -u | head -20
fi
ab cnn 128
ab mlp_big 4096
tail -4 "$out/ab.csv"
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
