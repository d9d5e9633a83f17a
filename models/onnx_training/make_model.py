#!/usr/bin/python3
"""Writes a linear-regression model that carries its own training step as an ONNX
TrainingInfoProto (ai.onnx.preview.training Gradient + Momentum), batches for 20 steps, and the
parameters NumPy computes after those steps with the same update rule (expected/), so that
`ottr train model.onnx --data batches --steps 20` can be checked end to end.

Run with Debian's python3 (python3-onnx, python3-numpy): /usr/bin/python3 make_model.py
"""
import os

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

HERE = os.path.dirname(os.path.abspath(__file__))
rng = np.random.default_rng(7)
N, D, K, STEPS = 8, 3, 2, 20
LR, ALPHA, BETA = 0.05, 0.9, 1.0

w0 = np.zeros((D, K), np.float32)  # the initialization graph overwrites it
w_init = rng.uniform(-0.5, 0.5, (D, K)).astype(np.float32)
b0 = rng.uniform(-0.1, 0.1, (K,)).astype(np.float32)
w_true = rng.uniform(-1, 1, (D, K)).astype(np.float32)
b_true = rng.uniform(-1, 1, (K,)).astype(np.float32)

# Inference graph: Y = X·W + B.
inits = [numpy_helper.from_array(w0, "W"), numpy_helper.from_array(b0, "B"),
         numpy_helper.from_array(np.zeros((D, K), np.float32), "V_W"),
         numpy_helper.from_array(np.zeros((K,), np.float32), "V_B"),
         numpy_helper.from_array(np.array(0, np.int64), "T")]
graph = helper.make_graph(
    [helper.make_node("MatMul", ["X", "W"], ["XW"], name="matmul"),
     helper.make_node("Add", ["XW", "B"], ["Y"], name="add")],
    "linear", [helper.make_tensor_value_info("X", TensorProto.FLOAT, ["N", D])],
    [helper.make_tensor_value_info("Y", TensorProto.FLOAT, ["N", K])], inits)

# Training algorithm: MSE loss, its gradients via Gradient, a Momentum update, T += 1.
algorithm = helper.make_graph(
    [helper.make_node("MatMul", ["X", "W"], ["XW_t"], name="t_matmul"),
     helper.make_node("Add", ["XW_t", "B"], ["Y_t"], name="t_add"),
     helper.make_node("Sub", ["Y_t", "Y_true"], ["diff"], name="t_sub"),
     helper.make_node("Mul", ["diff", "diff"], ["sq"], name="t_sq"),
     helper.make_node("ReduceMean", ["sq"], ["loss"], keepdims=0, name="t_mean"),
     helper.make_node("Gradient", ["W", "B"], ["dW", "dB"], domain="ai.onnx.preview.training",
                      xs=["W", "B"], y="loss", name="t_grad"),
     helper.make_node("Momentum", ["R", "T", "W", "B", "dW", "dB", "V_W", "V_B"],
                      ["W_new", "B_new", "V_W_new", "V_B_new"], domain="ai.onnx.preview.training",
                      alpha=ALPHA, beta=BETA, mode="standard", norm_coefficient=0.0, name="t_momentum"),
     helper.make_node("Add", ["T", "one"], ["T_new"], name="t_count")],
    "algorithm",
    [helper.make_tensor_value_info("X", TensorProto.FLOAT, [N, D]),
     helper.make_tensor_value_info("Y_true", TensorProto.FLOAT, [N, K])],
    [helper.make_tensor_value_info("loss", TensorProto.FLOAT, []),
     helper.make_tensor_value_info("W_new", TensorProto.FLOAT, [D, K]),
     helper.make_tensor_value_info("B_new", TensorProto.FLOAT, [K]),
     helper.make_tensor_value_info("V_W_new", TensorProto.FLOAT, [D, K]),
     helper.make_tensor_value_info("V_B_new", TensorProto.FLOAT, [K]),
     helper.make_tensor_value_info("T_new", TensorProto.INT64, [])],
    [numpy_helper.from_array(np.array(LR, np.float32), "R"),
     numpy_helper.from_array(np.array(1, np.int64), "one")])

initialization = helper.make_graph(
    [helper.make_node("Constant", [], ["W_start"], value=numpy_helper.from_array(w_init), name="w_start")],
    "initialization", [], [helper.make_tensor_value_info("W_start", TensorProto.FLOAT, [D, K])])

info = onnx.TrainingInfoProto()
info.algorithm.CopyFrom(algorithm)
info.initialization.CopyFrom(initialization)
for k, v in [("W", "W_new"), ("B", "B_new"), ("V_W", "V_W_new"), ("V_B", "V_B_new"), ("T", "T_new")]:
    info.update_binding.add(key=k, value=v)
info.initialization_binding.add(key="W", value="W_start")

model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                helper.make_opsetid("ai.onnx.preview.training", 1)],
                          producer_name="ottr models/onnx_training/make_model.py")
model.training_info.append(info)
model.ir_version = 8
onnx.save(model, os.path.join(HERE, "model.onnx"))

# Batches and NumPy's replay of the same steps (float32 throughout).
w, b = w_init.copy(), b0.copy()
vw, vb = np.zeros_like(w), np.zeros_like(b)
losses = []
for t in range(STEPS):
    x = rng.uniform(-1, 1, (N, D)).astype(np.float32)
    y = (x @ w_true + b_true).astype(np.float32)
    d = os.path.join(HERE, "batches", f"step_{t}")
    os.makedirs(d, exist_ok=True)
    onnx.save_tensor(numpy_helper.from_array(x, "X"), os.path.join(d, "X.pb"))
    onnx.save_tensor(numpy_helper.from_array(y, "Y_true"), os.path.join(d, "Y_true.pb"))
    diff = (x @ w + b) - y
    losses.append(float(np.mean(diff * diff)))
    g = (2.0 / diff.size) * diff
    dw, db = (x.T @ g).astype(np.float32), g.sum(axis=0).astype(np.float32)
    beta = BETA if t > 0 else 1.0
    vw = np.float32(ALPHA) * vw + np.float32(beta) * dw
    vb = np.float32(ALPHA) * vb + np.float32(beta) * db
    w = w - np.float32(LR) * vw
    b = b - np.float32(LR) * vb
os.makedirs(os.path.join(HERE, "expected"), exist_ok=True)
onnx.save_tensor(numpy_helper.from_array(w.astype(np.float32), "W"), os.path.join(HERE, "expected", "W.pb"))
onnx.save_tensor(numpy_helper.from_array(b.astype(np.float32), "B"), os.path.join(HERE, "expected", "B.pb"))
print("losses", losses[0], "->", losses[-1])
