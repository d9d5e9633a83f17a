#!/usr/bin/env bash
# One GPU-machine call for fuse-mlp-step (passes/fuse_mlp_step.cc): the MlpStep GPU test, the small
# MLP with `--fuse-mlp-step on` and without at the batches in BATCHES (an ottr built with
# -DOTTR_MLP_STEP_TRACE also prints the kernel's phases), then, unless QUICK=1, the whole GPU suite
# and bench/compare (TF32 and unfused) beside the peers. Run from the repository root with the
# bundle unpacked in dev-bundle/; logs go to $OUT. NCU=1 adds Nsight Compute on one launch.
export LD_LIBRARY_PATH=dev-bundle/lib
out=${OUT:-/tmp/ottr-mlp-step}
mkdir -p "$out"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
timeout 60 dev-bundle/bin/ottr_gpu_tests --gtest_filter='*MlpStep*' > "$out/mlp_step_tests.log" 2>&1
echo "MlpStep tests rc=$?"
grep -aE "^  |OK \]|FAILED \]|Failure" "$out/mlp_step_tests.log" | head -60
python3 bench/make_bench_models.py /tmp/mlp-step-models > /dev/null
for b in ${BATCHES:-128 256 512}; do
  for f in on off; do
    timeout 60 dev-bundle/bin/ottr bench /tmp/mlp-step-models/mlp_small.onnx --device cuda --batch $b --optimizer adam \
      --lr 1e-3 --fuse-mlp-step $f --name "mlp_small_b${b}_fuse-mlp-step_$f" --csv "$out/ab.csv" > "$out/ab_b${b}_$f.log" 2>&1 \
      || tail -3 "$out/ab_b${b}_$f.log"
    grep -a "mlp-step phase" "$out/ab_b${b}_$f.log" | head -12
  done
done
cat "$out/ab.csv"
# NCU=1: Nsight Compute on one MlpStep launch at batch 128 (every section; the SASS lines with their
# stall samples as CSV) into $OUT.
if [ "${NCU:-0}" = 1 ]; then
  timeout 150 ncu --kernel-name regex:MlpStep --launch-skip 20 --launch-count 1 --set full --import-source no \
    -f -o "$out/mlp_step" dev-bundle/bin/ottr bench /tmp/mlp-step-models/mlp_small.onnx --device cuda --batch 128 \
    --optimizer adam --lr 1e-3 --fuse-mlp-step on --no-cuda-graph > "$out/ncu.log" 2>&1
  echo "ncu rc=$?"
  tail -3 "$out/ncu.log"
  ncu -i "$out/mlp_step.ncu-rep" --page details > "$out/ncu_details.txt" 2>&1
  ncu -i "$out/mlp_step.ncu-rep" --page source --csv --print-source sass > "$out/ncu_sass.csv" 2>&1
  grep -aE "Duration|Registers|Achieved Occupancy|Local|L2 Hit|DRAM Throughput|Memory Throughput|Stall" \
    "$out/ncu_details.txt" | head -40
  (cd "$out" && tar czf ncu.tar.gz ncu.log ncu_details.txt ncu_sass.csv mlp_step_tests.log && rm -f ncu.log ncu_details.txt ncu_sass.csv)
fi
[ "${QUICK:-0}" = 1 ] && exit 0
timeout 240 dev-bundle/bin/ottr_gpu_tests > "$out/gputests.log" 2>&1
echo "gpu tests rc=$?"
grep -aE "^\[  FAILED  \]|PASSED  \]|tests ran" "$out/gputests.log" | sort -u | head -20
COMPARE_PRECISIONS="tf32 unfused" BUNDLE=dev-bundle timeout 200 bench/compare "$out/cmp" 2>&1 | tail -30
