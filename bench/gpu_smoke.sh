#!/usr/bin/env bash
# One batched GPU-machine call: GPU tests, CUDA conformance, a training run and benchmarks.
# Run from the repository root with the bundle unpacked in dev-bundle/ and Fashion-MNIST in
# gpu-data/fashion-mnist; logs go to $OUT.
export LD_LIBRARY_PATH=dev-bundle/lib
out=${OUT:-/tmp/ottr-gpu}
mkdir -p "$out"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
timeout 300 dev-bundle/bin/ottr_gpu_tests > "$out/gputests.log" 2>&1
echo "gpu tests rc=$?"
grep -E "^\[  FAILED  \]|PASSED  \]" "$out/gputests.log" | sort -u | head -60
timeout 150 dev-bundle/bin/ottr test-data --device cuda --no-tf32 \
  --expected-failures tests/conformance/expected_failures_cuda.txt tests/data/onnx-node-tests \
  > "$out/conformance_cuda.log" 2>&1
echo "conformance rc=$?"; tail -1 "$out/conformance_cuda.log"
[ -d gpu-data/fashion-mnist ] && timeout 120 dev-bundle/bin/ottr train models/mlp/model.onnx --data gpu-data/fashion-mnist --epochs 3 \
  --batch 128 --optimizer adam --lr 1e-3 --device cuda --out "$out/mlp-trained.onnx" > "$out/train_mlp.log" 2>&1
echo "train rc=$?"; grep -E "epoch|accuracy|error" "$out/train_mlp.log" | tail -5
timeout 60 dev-bundle/bin/ottr train models/mlp/model.onnx --data tests/data/models-reference/mlp/batches \
  --loss softmax_cross_entropy --logits logits --optimizer adam --lr 0.001 --steps 3 --device cuda \
  --out "$out/mlp-3steps.onnx" 2>&1 | tail -3
if [ "${COMPARE:-0}" = 1 ]; then
  BUNDLE=dev-bundle timeout 420 bench/compare "$out/compare" > "$out/compare.log" 2>&1
  echo "compare rc=$?"; tail -12 "$out/compare.log"
  # Fusion on (default) against off, every model: µs, launches, peak bytes.
  for m in "mlp_small.onnx 128" "mlp_small.onnx 8192" "mlp_big.onnx 4096" "cnn.onnx 128" "cnn.onnx 1024"; do
    set -- $m
    timeout 60 dev-bundle/bin/ottr bench "$out/compare/models/$1" --device cuda --batch $2 --optimizer adam --lr 1e-3 \
      --fuse-epilogues off --name "${1%.onnx}_b$2_nofusion" --csv "$out/fusion_off.csv" > /dev/null 2>&1
  done
  cat "$out/fusion_off.csv"
  # Mixed precision rows.
  for m in "mlp_small.onnx 8192" "mlp_big.onnx 4096" "cnn.onnx 1024" "cnn.onnx 128"; do
    set -- $m
    timeout 60 dev-bundle/bin/ottr bench "$out/compare/models/$1" --device cuda --batch $2 --optimizer adam --lr 1e-3 \
      --precision bf16 --name "${1%.onnx}_b$2_bf16" --csv "$out/bf16.csv" > "$out/bf16_${1%.onnx}_$2.log" 2>&1 || tail -2 "$out/bf16_${1%.onnx}_$2.log"
  done
  for m in "mlp_big.onnx 4096" "cnn.onnx 1024"; do
    set -- $m
    timeout 60 dev-bundle/bin/ottr bench "$out/compare/models/$1" --device cuda --batch $2 --optimizer adam --lr 1e-3 \
      --precision bf16 --disable-passes fold-gemm-casts --name "${1%.onnx}_b$2_bf16_nofold" --csv "$out/bf16.csv" \
      > "$out/bf16nofold_${1%.onnx}_$2.log" 2>&1 || tail -2 "$out/bf16nofold_${1%.onnx}_$2.log"
  done
  cat "$out/bf16.csv"
  mkdir -p "$out/perop"
  for m in "mlp_small.onnx 128 on" "mlp_small.onnx 8192 on" "mlp_big.onnx 4096 on"; do
    set -- $m
    timeout 60 dev-bundle/bin/ottr bench "$out/compare/models/$1" --device cuda --batch $2 --optimizer adam --lr 1e-3 \
      --fuse-epilogues $3 --per-op --per-op-csv "$out/perop/${1%.onnx}_$2_$3.csv" > /dev/null 2>&1
  done
  mv "$out"/bf16_*.log "$out"/bf16nofold_*.log "$out/perop/" 2>/dev/null
  tar czf "$out/details.tgz" --exclude=models -C "$out" compare perop && rm -rf "$out/compare" "$out/perop"
else
  for m in "mlp 128" "mlp 8192" "cnn 128" "cnn 1024"; do
    set -- $m
    timeout 60 dev-bundle/bin/ottr bench models/$1/model.onnx --device cuda --batch $2 --optimizer adam --lr 1e-3 \
      --csv "$out/bench.csv" 2>&1 | tail -1
  done
fi
