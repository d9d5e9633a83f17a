#!/usr/bin/env bash
# One GPU-machine call for the MLP work: the GPU tests (GPU_FILTER, default all), then the bench
# MLPs (bench/make_bench_models.py) in TF32 and bf16 with each pass in DISABLE (comma-separated
# pass names) turned off and on, and the per-op breakdowns (each node launched alone) of the
# TF32 and bf16 steps. Run from the repository root with the bundle unpacked in dev-bundle/;
# results go to $OUT (logs.tgz), the summary (test counts, the bench table, the slowest ops) last.
export LD_LIBRARY_PATH=dev-bundle/lib
out=${OUT:-/tmp/ottr-mlp}
mkdir -p "$out/logs"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
timeout 300 dev-bundle/bin/ottr_gpu_tests --gtest_filter="${GPU_FILTER:-*}" > "$out/logs/gputests.log" 2>&1
echo "gpu tests rc=$?"
grep -E "^\[  FAILED  \]|PASSED  \]|tests ran" "$out/logs/gputests.log" | sort -u | head -30
python3 bench/make_bench_models.py "$out/models" > /dev/null 2>&1
models=${MODELS:-"mlp_small:128 mlp_small:8192 mlp_big:4096"}
for m in $models; do
  name=${m%%:*}; b=${m##*:}
  for p in tf32 bf16; do
    for d in "" ${DISABLE:+$DISABLE}; do
      tag=${name}_b${b}_$p${d:+_no-$d}
      timeout 90 dev-bundle/bin/ottr bench "$out/models/$name.onnx" --device cuda --batch $b --optimizer adam --lr 1e-3 \
        --precision $p ${d:+--disable-passes $d} --name "$tag" --csv "$out/bench.csv" > "$out/logs/bench_$tag.log" 2>&1 \
        || tail -3 "$out/logs/bench_$tag.log"
    done
    if [ "${PEROP:-1}" = 1 ]; then
      timeout 120 dev-bundle/bin/ottr bench "$out/models/$name.onnx" --device cuda --batch $b --optimizer adam --lr 1e-3 \
        --precision $p --per-op --per-op-csv "$out/logs/perop_${name}_b${b}_$p.csv" > "$out/logs/perop_${name}_b${b}_$p.log" 2>&1
      echo "== per-op ${name} b$b $p"
      grep -A16 "per-op" "$out/logs/perop_${name}_b${b}_$p.log" | cut -c1-160
    fi
  done
done
rm -rf "$out/models"
cat "$out/bench.csv"
tar czf "$out/logs.tgz" -C "$out" logs && rm -rf "$out/logs"
