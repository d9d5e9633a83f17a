#!/usr/bin/env bash
# The closing GPU-machine call of a session: every GPU test, CUDA conformance, training runs on
# Fashion-MNIST (fp32/TF32, bf16, fp16 with loss scaling), CUDA resume bit-identity, the per-op
# breakdown of the CNN steps, and bench/compare (ottr beside PyTorch and JAX, TF32 and bf16) last.
# Run from the repository root with the bundle unpacked in dev-bundle/; training runs when
# gpu-data/fm.tar.xz (the raw Fashion-MNIST files) is there. ONLY_TRAIN=1 runs just the training
# (a second call when the bundle and the data together exceed what one call carries). Results go
# to $OUT (details.tgz).
export LD_LIBRARY_PATH=dev-bundle/lib
out=${OUT:-/tmp/ottr-final}
mkdir -p "$out/d"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
t0=$SECONDS
if [ "${ONLY_TRAIN:-0}" != 1 ]; then
timeout 240 dev-bundle/bin/ottr_gpu_tests > "$out/d/gputests.log" 2>&1
echo "gpu tests rc=$? ($((SECONDS - t0)) s)"
grep -E "^\[  FAILED  \]|PASSED  \]" "$out/d/gputests.log" | sort -u | head -20
timeout 120 dev-bundle/bin/ottr test-data --device cuda --no-tf32 \
  --expected-failures tests/conformance/expected_failures_cuda.txt tests/data/onnx-node-tests \
  > "$out/d/conformance_cuda.log" 2>&1
echo "conformance rc=$?: $(tail -1 "$out/d/conformance_cuda.log")"
fi
# Training (bench/gpu_train.sh: mlp, cnn, resnet; with BF16=1 also mlp and cnn in bf16).
if [ -f gpu-data/fm.tar.xz ]; then
  tar xJf gpu-data/fm.tar.xz -C gpu-data
  BF16=1 OUT="$out/d/train" bash bench/gpu_train.sh
  timeout 120 dev-bundle/bin/ottr train models/cnn/model.onnx --data gpu-data/fm --device cuda --epochs 10 \
    --batch 128 --optimizer adam --lr 1e-3 --precision fp16 --out "$out/d/train/cnn_fp16.onnx" \
    > "$out/d/train/cnn_fp16.log" 2>&1
  echo "cnn_fp16: rc=$? $(grep -E 'epoch|error' "$out/d/train/cnn_fp16.log" | tail -1)"
  rm -f "$out"/d/train/*.onnx
fi
if [ "${ONLY_TRAIN:-0}" != 1 ]; then
# Resume on CUDA: 6 steps in one run against 3 + checkpoint + resume + 3.
b=tests/data/models-reference/mlp/batches
cache=$out/d/algo.cache
dev-bundle/bin/ottr train models/mlp/model.onnx --data $b --steps 6 --epochs 2 --device cuda --algo-cache "$cache" \
  --out "$out/full.onnx" > /dev/null 2>&1
dev-bundle/bin/ottr train models/mlp/model.onnx --data $b --steps 6 --epochs 2 --device cuda --algo-cache "$cache" \
  --checkpoint "$out/ck" --stop-after 3 > /dev/null 2>&1
dev-bundle/bin/ottr train models/mlp/model.onnx --data $b --steps 6 --epochs 2 --device cuda --algo-cache "$cache" \
  --checkpoint "$out/ck" --resume "$out/ck" --out "$out/resumed.onnx" > "$out/d/resume.log" 2>&1
cmp "$out/full.onnx" "$out/resumed.onnx" && echo "resume on CUDA: bit-identical to the uninterrupted run" \
  || echo "resume on CUDA: differs ($(tail -1 "$out/d/resume.log"))"
rm -f "$out"/*.onnx "$out"/ck*
# Per-op breakdown of the CNN steps (each node launched alone).
python3 bench/make_bench_models.py "$out/m" > /dev/null 2>&1
for m in "cnn 1024 tf32" "cnn 1024 bf16" "cnn 128 tf32" "mlp_big 4096 bf16" "mlp_big 4096 tf32" "mlp_small 128 tf32"; do
  set -- $m
  timeout 90 dev-bundle/bin/ottr bench "$out/m/$1.onnx" --device cuda --batch $2 --optimizer adam --lr 1e-3 \
    --precision $3 --per-op --per-op-csv "$out/d/perop_$1_$2_$3.csv" > "$out/d/perop_$1_$2_$3.log" 2>&1
done
rm -rf "$out/m"
echo "before compare: $((SECONDS - t0)) s"
BUNDLE=dev-bundle timeout $((560 - (SECONDS - t0))) bench/compare "$out/d/compare" > "$out/d/compare.log" 2>&1
echo "compare rc=$?"
sed -n '/^tf32:/,$p' "$out/d/compare.log"
rm -rf "$out/d/compare/models"
fi
tar czf "$out/details.tgz" -C "$out" d && rm -rf "$out/d"
echo "total $((SECONDS - t0)) s"
