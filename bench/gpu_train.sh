#!/usr/bin/env bash
# Training runs on the GPU machine: the bundled models on Fashion-MNIST (carried in
# gpu-data/fashion-mnist), each with its final test accuracy and wall time. Run from the
# repository root with the bundle unpacked in dev-bundle/; logs go to $OUT.
export LD_LIBRARY_PATH=dev-bundle/lib
out=${OUT:-/tmp/ottr-train}
mkdir -p "$out"
data=gpu-data/fm
ottr=dev-bundle/bin/ottr
train() {  # name model [flags...]
  local name=$1 model=$2; shift 2
  local t0=$SECONDS
  timeout 200 "$ottr" train "$model" --data "$data" --device cuda --out "$out/$name.onnx" "$@" > "$out/$name.log" 2>&1
  echo "$name: rc=$? $((SECONDS - t0)) s: $(grep -E 'epoch|error' "$out/$name.log" | tail -1)"
}
train mlp models/mlp/model.onnx --epochs 3 --batch 128 --optimizer adam --lr 1e-3 ${PRECISION_FLAGS:-}
train cnn models/cnn/model.onnx --epochs 10 --batch 128 --optimizer adam --lr 1e-3 ${PRECISION_FLAGS:-}
train resnet models/resnet/model.onnx --epochs 8 --batch 128 --optimizer adam --lr 2e-3 ${PRECISION_FLAGS:-}
if [ -n "${BF16:-}" ]; then
  train mlp_bf16 models/mlp/model.onnx --epochs 3 --batch 128 --optimizer adam --lr 1e-3 --precision bf16
  train cnn_bf16 models/cnn/model.onnx --epochs 10 --batch 128 --optimizer adam --lr 1e-3 --precision bf16
fi
