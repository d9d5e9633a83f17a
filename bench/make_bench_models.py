#!/usr/bin/env python3
"""Writes the ONNX models of the peer benchmark (shared/bench/peers.py MODELS) into a folder:
mlp_small (784-512-512-10), mlp_big (4096 x4 hidden, 1000 out) and cnn (conv32-conv64-pool-fc128-fc10).
Weights are random (PyTorch-style uniform init): only the step time matters. Works with onnx 1.12+.
usage: make_bench_models.py OUT_DIR"""
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def linear(rng, o, i):
    b = 1.0 / np.sqrt(i)
    return (rng.uniform(-b, b, (o, i)).astype(np.float32), rng.uniform(-b, b, (o,)).astype(np.float32))


def mlp(dims, seed):
    rng = np.random.default_rng(seed)
    nodes, inits, x = [], [], "x"
    for li in range(len(dims) - 1):
        w, b = linear(rng, dims[li + 1], dims[li])
        inits += [numpy_helper.from_array(w, f"fc{li}.weight"), numpy_helper.from_array(b, f"fc{li}.bias")]
        out = "logits" if li == len(dims) - 2 else f"h{li}"
        nodes.append(helper.make_node("Gemm", [x, f"fc{li}.weight", f"fc{li}.bias"], [out], name=f"fc{li}", transB=1))
        x = out
        if li < len(dims) - 2:
            nodes.append(helper.make_node("Relu", [x], [f"a{li}"], name=f"relu{li}"))
            x = f"a{li}"
    g = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", dims[0]])],
                          [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", dims[-1]])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def cnn(seed):
    rng = np.random.default_rng(seed)
    def conv(o, i):
        b = 1.0 / np.sqrt(i * 9)
        return rng.uniform(-b, b, (o, i, 3, 3)).astype(np.float32), rng.uniform(-b, b, (o,)).astype(np.float32)
    c1w, c1b = conv(32, 1)
    c2w, c2b = conv(64, 32)
    f1w, f1b = linear(rng, 128, 9216)
    f2w, f2b = linear(rng, 10, 128)
    nodes = [helper.make_node("Conv", ["x", "c1.w", "c1.b"], ["c1"], kernel_shape=[3, 3], name="conv1"),
             helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
             helper.make_node("Conv", ["r1", "c2.w", "c2.b"], ["c2"], kernel_shape=[3, 3], name="conv2"),
             helper.make_node("Relu", ["c2"], ["r2"], name="relu2"),
             helper.make_node("MaxPool", ["r2"], ["p"], kernel_shape=[2, 2], strides=[2, 2], name="pool"),
             helper.make_node("Flatten", ["p"], ["f"], axis=1, name="flatten"),
             helper.make_node("Gemm", ["f", "f1.w", "f1.b"], ["h"], transB=1, name="fc1"),
             helper.make_node("Relu", ["h"], ["a"], name="relu3"),
             helper.make_node("Gemm", ["a", "f2.w", "f2.b"], ["logits"], transB=1, name="fc2")]
    inits = [numpy_helper.from_array(a, n) for n, a in
             [("c1.w", c1w), ("c1.b", c1b), ("c2.w", c2w), ("c2.b", c2b), ("f1.w", f1w), ("f1.b", f1b),
              ("f2.w", f2w), ("f2.b", f2b)]]
    g = helper.make_graph(nodes, "cnn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 1, 28, 28])],
                          [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", 10])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    onnx.save(mlp([784, 512, 512, 10], 1), os.path.join(out, "mlp_small.onnx"))
    onnx.save(mlp([4096, 4096, 4096, 4096, 4096, 1000], 2), os.path.join(out, "mlp_big.onnx"))
    onnx.save(cnn(3), os.path.join(out, "cnn.onnx"))


if __name__ == "__main__":
    main()
