#!/usr/bin/env bash
# One GPU-machine call for the convolution work: the GPU tests (GPU_FILTER, default all), then
# models/cnn benchmarked channels-last against channels-first (TF32 and bf16) with the per-op
# breakdown of the batch-1024 step and the convolution algorithm searches (OTTR_LOG_CONV_ALGOS).
# Run from the repository root with the bundle unpacked in dev-bundle/; results go to $OUT; the
# summary (test counts, the bench table) is printed last.
export LD_LIBRARY_PATH=dev-bundle/lib
out=${OUT:-/tmp/ottr-gpu}
mkdir -p "$out"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
timeout 300 dev-bundle/bin/ottr_gpu_tests --gtest_filter="${GPU_FILTER:-*}" > "$out/gputests.log" 2>&1
rc=$?
for p in tf32 bf16; do
  for b in 128 1024; do
    for l in nhwc nchw; do
      timeout 60 dev-bundle/bin/ottr bench models/cnn/model.onnx --device cuda --batch $b --optimizer adam --lr 1e-3 \
        --precision $p --layout $l --name "cnn_b${b}_${p}_$l" --csv "$out/bench.csv" > "$out/bench_${b}_${p}_$l.log" 2>&1 \
        || tail -3 "$out/bench_${b}_${p}_$l.log"
    done
  done
done
# The MLPs in bf16 (narrow-exact-ops keeps their activations bf16) and TF32.
python3 bench/make_bench_models.py "$out/models" > /dev/null 2>&1
for m in "mlp_big 4096 bf16" "mlp_big 4096 tf32" "mlp_small 8192 bf16" "mlp_small 128 tf32"; do
  set -- $m
  timeout 60 dev-bundle/bin/ottr bench "$out/models/$1.onnx" --device cuda --batch $2 --optimizer adam --lr 1e-3 \
    --precision $3 --name "${1}_b$2_$3" --csv "$out/bench.csv" > "$out/bench_$1_$2_$3.log" 2>&1 || tail -3 "$out/bench_$1_$2_$3.log"
done
rm -rf "$out/models"
for p in tf32 bf16; do
  OTTR_LOG_CONV_ALGOS=1 timeout 60 dev-bundle/bin/ottr bench models/cnn/model.onnx --device cuda --batch 1024 \
    --optimizer adam --lr 1e-3 --precision $p --per-op --per-op-csv "$out/perop_cnn1024_$p.csv" \
    > "$out/perop_cnn1024_$p.log" 2>&1
  grep -A14 "per-op" "$out/perop_cnn1024_$p.log" | cut -c1-150
done
grep -h "graph engine\|: algo" "$out"/perop_cnn1024_*.log | grep -v "status 3000" | sed -e 's/ pad\[.*stride\[1,1\] dil\[1,1\]//' \
  | cut -c1-140 | head -40
echo "gpu tests rc=$rc"
grep -E "^\[  FAILED  \]|PASSED  \]|tests ran" "$out/gputests.log" | sort -u | head -30
cat "$out/bench.csv"
mkdir -p "$out/logs" && mv "$out"/*.log "$out"/perop_*.csv "$out/logs/" && tar czf "$out/logs.tgz" -C "$out" logs && rm -rf "$out/logs"
# NCU=1: Nsight Compute's speed-of-light of the small-channel convolution kernels (conv1 of the
# batch-1024 step), to see what bounds them.
if [ "${NCU:-0}" = 1 ]; then
  timeout 120 ncu --kernel-name regex:SmallConv --launch-count 3 --section SpeedOfLight --section Occupancy \
    --section LaunchStats dev-bundle/bin/ottr bench models/cnn/model.onnx --device cuda --batch 1024 --optimizer adam \
    --lr 1e-3 --steps 2 --windows 1 2>&1 | grep -E "SmallConv|Duration|Throughput|Registers|Achieved Occupancy|Theoretical Occ|Block Size|Grid Size|Shared Memory Config|ERR|error" | head -60
fi
