#!/usr/bin/env bash
# Final check of a session on the GPU machine: every GPU test, the CLI's CUDA paths (NaN policy,
# checkpoint/resume) and the benchmark models without peers. Bundle unpacked in dev-bundle/.
# (Written at the end of the 2026-11-30 session and not yet run: the session's GPU time was spent.)
export LD_LIBRARY_PATH=dev-bundle/lib
out=${OUT:-/tmp/ottr-final}
mkdir -p "$out"
timeout 200 dev-bundle/bin/ottr_gpu_tests > "$out/gputests.log" 2>&1
echo "gpu tests rc=$?"; grep -E "^\[  FAILED  \]|PASSED  \]" "$out/gputests.log" | sort -u | head -20
b=tests/data/models-reference/mlp/batches
dev-bundle/bin/ottr train models/mlp/model.onnx --data $b --optimizer sgd --lr 1e30 --steps 3 --device cuda \
  --nan-policy skip 2>&1 | grep -v "^step [0-9]*/" | tail -4; echo "skip rc=${PIPESTATUS[0]}"
dev-bundle/bin/ottr train models/mlp/model.onnx --data $b --optimizer sgd --lr 1e30 --steps 3 --device cuda \
  --nan-policy stop 2>&1 | tail -1; echo "stop rc=${PIPESTATUS[0]}"
cache=$out/algo.cache
dev-bundle/bin/ottr train models/mlp/model.onnx --data $b --steps 6 --epochs 2 --device cuda --algo-cache $cache --out $out/full.onnx > /dev/null 2>&1
dev-bundle/bin/ottr train models/mlp/model.onnx --data $b --steps 6 --epochs 2 --device cuda --algo-cache $cache --checkpoint $out/ck --stop-after 3 > /dev/null 2>&1
dev-bundle/bin/ottr train models/mlp/model.onnx --data $b --steps 6 --epochs 2 --device cuda --algo-cache $cache --checkpoint $out/ck --resume $out/ck --out $out/resumed.onnx 2>&1 | tail -1
cmp $out/full.onnx $out/resumed.onnx && echo "resume on CUDA: bit-identical to the uninterrupted run"
python3 bench/make_bench_models.py $out/m > /dev/null
for m in "mlp_small 128" "mlp_small 8192" "mlp_big 4096" "cnn 128" "cnn 1024"; do
  set -- $m
  timeout 60 dev-bundle/bin/ottr bench $out/m/$1.onnx --device cuda --batch $2 --name ${1}_b$2 --csv $out/bench.csv > /dev/null 2>&1
done
cat $out/bench.csv
rm -rf $out/m $out/*.onnx $out/ck*
