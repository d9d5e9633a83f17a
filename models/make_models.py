#!/usr/bin/python3
"""Writes the small ONNX models under models/ that ottr's tests, demos and benchmarks use.

Run with Debian's Python (python3-onnx 1.12 and python3-numpy), from anywhere:

    /usr/bin/python3 models/make_models.py

The output is deterministic: every model draws its weights from its own seeded generator, so
re-running the script rewrites byte-identical files (tests/golden compares them with ONNX Runtime).

Weights follow PyTorch's default initialisation, so activations stay O(1) through the layers:
Linear and Conv weights and biases are uniform in [-1/sqrt(fan_in), 1/sqrt(fan_in)] (that is
kaiming_uniform_(a=sqrt(5)) for the weights). LayerNorm scale and shift are not PyTorch's 1 and 0
but 1 + U(-0.2, 0.2) and U(-0.1, 0.1), so that a kernel that ignored them would fail the goldens.

Models:
  mlp/model.onnx          MLP 784-512-512-10: Gemm(transB=1)+Relu twice, then Gemm.
                          x f32[N,784] -> logits f32[N,10]; ai.onnx opset 17.
  cnn/model.onnx          conv3x3(1->32)+ReLU, conv3x3(32->64)+ReLU, maxpool 2, flatten,
                          fc 9216->128 + ReLU, fc 128->10 (the CNN of shared/DEVICE.md).
                          x f32[N,1,28,28] -> logits f32[N,10]; ai.onnx opset 17.
  transformer/model.onnx  one pre-LN transformer block, D=64, 4 heads of 16, T=16, MLP 64-256-64:
                          h = x + Wo·Attn(LN1(x)), y = h + W2·Gelu(W1·LN2(h)), causal softmax
                          attention with heads split by Reshape/Transpose.
                          x f32[N,16,64] -> y f32[N,16,64]; ai.onnx opset 20 (for Gelu).
"""

import math
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

HERE = os.path.dirname(os.path.abspath(__file__))
PRODUCER = "ottr models/make_models.py"


def uniform(rng, shape, bound):
    return rng.uniform(-bound, bound, size=shape).astype(np.float32)


def linear(rng, out_features, in_features):
    """PyTorch nn.Linear defaults: W [out, in] and b [out], both U(-1/sqrt(in), 1/sqrt(in))."""
    bound = 1.0 / math.sqrt(in_features)
    return uniform(rng, (out_features, in_features), bound), uniform(rng, (out_features,), bound)


def conv(rng, out_ch, in_ch, k):
    """PyTorch nn.Conv2d defaults: fan_in = in_ch * k * k."""
    bound = 1.0 / math.sqrt(in_ch * k * k)
    return uniform(rng, (out_ch, in_ch, k, k), bound), uniform(rng, (out_ch,), bound)


def init(name, array):
    return numpy_helper.from_array(np.ascontiguousarray(array), name)


def make_model(graph, opset, ir_version, doc):
    model = helper.make_model(graph, producer_name=PRODUCER,
                              opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = ir_version
    model.doc_string = doc
    return model


def mlp():
    rng = np.random.default_rng(1)
    w1, b1 = linear(rng, 512, 784)
    w2, b2 = linear(rng, 512, 512)
    w3, b3 = linear(rng, 10, 512)
    nodes = [
        helper.make_node("Gemm", ["x", "fc1.weight", "fc1.bias"], ["h1"], name="fc1", transB=1),
        helper.make_node("Relu", ["h1"], ["a1"], name="relu1"),
        helper.make_node("Gemm", ["a1", "fc2.weight", "fc2.bias"], ["h2"], name="fc2", transB=1),
        helper.make_node("Relu", ["h2"], ["a2"], name="relu2"),
        helper.make_node("Gemm", ["a2", "fc3.weight", "fc3.bias"], ["logits"], name="fc3", transB=1),
    ]
    graph = helper.make_graph(
        nodes, "mlp",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 784])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", 10])],
        [init("fc1.weight", w1), init("fc1.bias", b1), init("fc2.weight", w2),
         init("fc2.bias", b2), init("fc3.weight", w3), init("fc3.bias", b3)])
    return make_model(graph, 17, 8, "MLP 784-512-512-10 with ReLU (Gemm transB=1, PyTorch layout)")


def cnn():
    rng = np.random.default_rng(2)
    c1w, c1b = conv(rng, 32, 1, 3)
    c2w, c2b = conv(rng, 64, 32, 3)
    f1w, f1b = linear(rng, 128, 9216)
    f2w, f2b = linear(rng, 10, 128)
    nodes = [
        helper.make_node("Conv", ["x", "conv1.weight", "conv1.bias"], ["c1"], name="conv1",
                         kernel_shape=[3, 3]),
        helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
        helper.make_node("Conv", ["r1", "conv2.weight", "conv2.bias"], ["c2"], name="conv2",
                         kernel_shape=[3, 3]),
        helper.make_node("Relu", ["c2"], ["r2"], name="relu2"),
        helper.make_node("MaxPool", ["r2"], ["p"], name="pool", kernel_shape=[2, 2],
                         strides=[2, 2]),
        helper.make_node("Flatten", ["p"], ["flat"], name="flatten", axis=1),
        helper.make_node("Gemm", ["flat", "fc1.weight", "fc1.bias"], ["h"], name="fc1", transB=1),
        helper.make_node("Relu", ["h"], ["a"], name="relu3"),
        helper.make_node("Gemm", ["a", "fc2.weight", "fc2.bias"], ["logits"], name="fc2",
                         transB=1),
    ]
    graph = helper.make_graph(
        nodes, "cnn",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 1, 28, 28])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", 10])],
        [init("conv1.weight", c1w), init("conv1.bias", c1b), init("conv2.weight", c2w),
         init("conv2.bias", c2b), init("fc1.weight", f1w), init("fc1.bias", f1b),
         init("fc2.weight", f2w), init("fc2.bias", f2b)])
    return make_model(graph, 17, 8,
                      "CNN conv3x3(1->32)+ReLU, conv3x3(32->64)+ReLU, maxpool 2, flatten, "
                      "fc 9216->128 + ReLU, fc 128->10")


def transformer(t=16, d=64, heads=4, hidden=256):
    rng = np.random.default_rng(3)
    dh = d // heads
    inits = []

    def add_linear(prefix, out_f, in_f):
        # MatMul form y = x·W + b, so W is stored [in, out] (the transpose of PyTorch's layout).
        w, b = linear(rng, out_f, in_f)
        inits.extend([init(prefix + ".weight", w.T), init(prefix + ".bias", b)])

    def add_layernorm(prefix):
        inits.extend([init(prefix + ".weight", 1.0 + uniform(rng, (d,), 0.2)),
                      init(prefix + ".bias", uniform(rng, (d,), 0.1))])

    add_layernorm("ln1")
    for p in ("q", "k", "v", "o"):
        add_linear("attn." + p, d, d)
    add_layernorm("ln2")
    add_linear("mlp.fc1", hidden, d)
    add_linear("mlp.fc2", d, hidden)
    inits.append(init("heads_shape", np.array([0, 0, heads, dh], dtype=np.int64)))
    inits.append(init("merge_shape", np.array([0, 0, d], dtype=np.int64)))
    inits.append(init("scale", np.array(1.0 / math.sqrt(dh), dtype=np.float32)))
    # Causal mask added to the scores: 0 on and below the diagonal, -1e9 above (a large finite
    # value, so rows stay free of NaN in any implementation).
    mask = np.triu(np.full((t, t), -1e9, dtype=np.float32), k=1)
    inits.append(init("causal_mask", mask))

    nodes = []

    def node(op, ins, outs, name, **attrs):
        nodes.append(helper.make_node(op, ins, outs, name=name, **attrs))

    def linear_node(x, prefix, out):
        node("MatMul", [x, prefix + ".weight"], [prefix + ".mm"], prefix + ".matmul")
        node("Add", [prefix + ".mm", prefix + ".bias"], [out], prefix + ".add")

    node("LayerNormalization", ["x", "ln1.weight", "ln1.bias"], ["ln1.out"], "ln1", axis=-1,
         epsilon=1e-5)
    for p in ("q", "k", "v"):
        linear_node("ln1.out", "attn." + p, p)
        node("Reshape", [p, "heads_shape"], [p + ".heads"], "attn." + p + ".split_heads")
    node("Transpose", ["q.heads"], ["qh"], "attn.q.transpose", perm=[0, 2, 1, 3])  # [N,H,T,dh]
    node("Transpose", ["k.heads"], ["kht"], "attn.k.transpose", perm=[0, 2, 3, 1])  # [N,H,dh,T]
    node("Transpose", ["v.heads"], ["vh"], "attn.v.transpose", perm=[0, 2, 1, 3])  # [N,H,T,dh]
    node("MatMul", ["qh", "kht"], ["scores"], "attn.scores")  # [N,H,T,T]
    node("Mul", ["scores", "scale"], ["scaled"], "attn.scale")
    node("Add", ["scaled", "causal_mask"], ["masked"], "attn.mask")
    node("Softmax", ["masked"], ["probs"], "attn.softmax", axis=-1)
    node("MatMul", ["probs", "vh"], ["ctx"], "attn.context")  # [N,H,T,dh]
    node("Transpose", ["ctx"], ["ctx.t"], "attn.merge.transpose", perm=[0, 2, 1, 3])
    node("Reshape", ["ctx.t", "merge_shape"], ["ctx.merged"], "attn.merge_heads")  # [N,T,D]
    linear_node("ctx.merged", "attn.o", "attn.out")
    node("Add", ["x", "attn.out"], ["h"], "residual1")
    node("LayerNormalization", ["h", "ln2.weight", "ln2.bias"], ["ln2.out"], "ln2", axis=-1,
         epsilon=1e-5)
    linear_node("ln2.out", "mlp.fc1", "mlp.h")
    node("Gelu", ["mlp.h"], ["mlp.a"], "mlp.gelu")  # exact (erf) Gelu, approximate="none"
    linear_node("mlp.a", "mlp.fc2", "mlp.out")
    node("Add", ["h", "mlp.out"], ["y"], "residual2")

    graph = helper.make_graph(
        nodes, "transformer_block",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", t, d])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", t, d])], inits)
    # Opset 20 needs IR version 9; onnx 1.12 does not know either, so its checker is not run on
    # this model (ONNX Runtime validates it in tests/golden instead).
    return make_model(graph, 20, 9,
                      f"pre-LN transformer block: D={d}, {heads} heads, T={t}, MLP {d}-{hidden}-{d}, "
                      "causal attention, Gelu")


def main():
    models = {"mlp": (mlp, True), "cnn": (cnn, True), "transformer": (transformer, False)}
    only = sys.argv[1:] or list(models)
    for name in only:
        build, check = models[name]
        model = build()
        if check:
            onnx.checker.check_model(model, full_check=True)
        folder = os.path.join(HERE, name)
        os.makedirs(folder, exist_ok=True)
        path = os.path.join(folder, "model.onnx")
        data = model.SerializeToString()
        with open(path + ".tmp", "wb") as f:
            f.write(data)
        os.replace(path + ".tmp", path)
        print(f"{os.path.relpath(path, os.path.dirname(HERE))}: {len(data)} bytes")


if __name__ == "__main__":
    main()
