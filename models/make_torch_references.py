#!/usr/bin/python3
"""PyTorch references for ottr's whole-training-step tests, plus a model exported by PyTorch.

Run with Debian's Python and PyTorch (python3-torch, python3-onnx):

    /usr/bin/python3 models/make_torch_references.py

1. Exports models/torch_cnn_bn/model.onnx with torch.onnx.export (TorchScript exporter, opset 17,
   training=TrainingMode.TRAINING, do_constant_folding=False), a CNN with BatchNormalization and
   global average pooling. Exporting in training mode keeps BatchNormalization a separate, trainable
   op that updates its running statistics (exporting an eval-mode model, or with the opset-20
   dynamo exporter, folds it into the convolution's weights).
2. For models/mlp, models/cnn (Adam only, to keep the data small) and models/torch_cnn_bn, starting
   from the weights in the ONNX file and 3 fixed random batches, trains with
   torch.optim.Adam(lr=1e-3), SGD(lr=0.01, momentum=0.9) and AdamW(lr=1e-3, weight_decay=0.1) for
   3 steps (mean cross-entropy of the logits), and writes
   tests/data/models-reference/<model>/ in the layout of shared/torch-reference:
   batches/step_K/{input_0,labels}.pb, <optimizer>/grads_step0/<initializer>.pb,
   <optimizer>/params_after/<initializer>.pb (trainable parameters; BatchNorm's running statistics
   are buffers and follow ONNX's definition, which uses the biased batch variance where PyTorch
   uses the unbiased one, so they are not compared) and
   reference.json with the losses. model_path.txt names the model (relative to the repository).
"""
import json
import os

import numpy as np
import onnx
import torch
import torch.nn as nn
from onnx import numpy_helper

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "tests", "data", "models-reference")
torch.use_deterministic_algorithms(True)
torch.set_num_threads(1)

OPTIMIZERS = {
    "adam": lambda p: torch.optim.Adam(p, lr=1e-3),
    "sgd_momentum": lambda p: torch.optim.SGD(p, lr=0.01, momentum=0.9),
    "adamw": lambda p: torch.optim.AdamW(p, lr=1e-3, weight_decay=0.1),
}


class Mlp(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.fc2, self.fc3 = nn.Linear(784, 512), nn.Linear(512, 512), nn.Linear(512, 10)

    def forward(self, x):
        return self.fc3(torch.relu(self.fc2(torch.relu(self.fc1(x)))))


class Cnn(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1, self.conv2 = nn.Conv2d(1, 32, 3), nn.Conv2d(32, 64, 3)
        self.fc1, self.fc2 = nn.Linear(9216, 128), nn.Linear(128, 10)

    def forward(self, x):
        x = torch.relu(self.conv2(torch.relu(self.conv1(x))))
        x = torch.flatten(nn.functional.max_pool2d(x, 2), 1)
        return self.fc2(torch.relu(self.fc1(x)))


class CnnBn(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1, self.bn1 = nn.Conv2d(1, 8, 3), nn.BatchNorm2d(8)
        self.conv2, self.bn2 = nn.Conv2d(8, 16, 3), nn.BatchNorm2d(16)
        self.fc = nn.Linear(16, 10)

    def forward(self, x):
        x = nn.functional.max_pool2d(torch.relu(self.bn1(self.conv1(x))), 2)
        x = torch.relu(self.bn2(self.conv2(x)))
        return self.fc(torch.flatten(nn.functional.adaptive_avg_pool2d(x, 1), 1))


class Block(nn.Module):
    """Basic residual block: conv-BN-ReLU-conv-BN + shortcut (1x1 conv + BN when the shape changes), ReLU."""

    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1, self.bn1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False), nn.BatchNorm2d(cout)
        self.conv2, self.bn2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False), nn.BatchNorm2d(cout)
        self.down = None
        if stride != 1 or cin != cout:
            self.down = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        y = self.bn2(self.conv2(torch.relu(self.bn1(self.conv1(x)))))
        return torch.relu(y + (x if self.down is None else self.down(x)))


class ResNet(nn.Module):
    """A small ResNet for 28x28 images: stem conv 3x3 (16), blocks 16, 32/2, 64/2, global
    average pool, fc 64 -> 10 (about 175K parameters)."""

    def __init__(self):
        super().__init__()
        self.conv, self.bn = nn.Conv2d(1, 16, 3, 1, 1, bias=False), nn.BatchNorm2d(16)
        self.layer1, self.layer2, self.layer3 = Block(16, 16, 1), Block(16, 32, 2), Block(32, 64, 2)
        self.fc = nn.Linear(64, 10)

    def forward(self, x):
        x = torch.relu(self.bn(self.conv(x)))
        x = self.layer3(self.layer2(self.layer1(x)))
        return self.fc(torch.flatten(nn.functional.adaptive_avg_pool2d(x, 1), 1))


def export_training_model(module, path):
    module.train()
    os.makedirs(os.path.dirname(path), exist_ok=True)
    torch.onnx.export(module, (torch.randn(2, 1, 28, 28),), path, input_names=["x"], output_names=["logits"],
                      dynamic_axes={"x": {0: "N"}, "logits": {0: "N"}}, opset_version=17,
                      training=torch.onnx.TrainingMode.TRAINING, do_constant_folding=False)


def export_resnet(path):
    torch.manual_seed(0)
    export_training_model(ResNet(), path)


def export_cnn_bn(path):
    torch.manual_seed(0)
    m = CnnBn()
    with torch.no_grad():  # non-trivial BatchNorm affine parameters
        for bn in (m.bn1, m.bn2):
            bn.weight.uniform_(0.8, 1.2)
            bn.bias.uniform_(-0.1, 0.1)
    m.train()
    torch.onnx.export(m, (torch.randn(2, 1, 28, 28),), path, input_names=["x"], output_names=["logits"],
                      dynamic_axes={"x": {0: "N"}, "logits": {0: "N"}}, opset_version=17,
                      training=torch.onnx.TrainingMode.TRAINING, do_constant_folding=False)


def load_into(module, onnx_path):
    """Copies the ONNX initializers into the module's parameters and buffers by name."""
    inits = {i.name: numpy_helper.to_array(i) for i in onnx.load(onnx_path).graph.initializer}
    state = module.state_dict()
    for name in state:
        if name in inits:
            state[name] = torch.from_numpy(inits[name].copy())
    module.load_state_dict(state)
    return set(inits)


def save(array, name, path):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    onnx.save_tensor(numpy_helper.from_array(np.ascontiguousarray(array), name), path)


def reference(name, module_fn, model_rel, input_shape, batch=8, seed=0, optimizers=tuple(OPTIMIZERS)):
    model_path = os.path.join(ROOT, model_rel)
    out = os.path.join(OUT, name)
    rng = np.random.default_rng(seed)
    batches = [(rng.uniform(0, 1, (batch,) + input_shape).astype(np.float32),
                rng.integers(0, 10, (batch,)).astype(np.int64)) for _ in range(3)]
    for k, (x, y) in enumerate(batches):
        save(x, "x", os.path.join(out, "batches", f"step_{k}", "input_0.pb"))
        save(y, "labels", os.path.join(out, "batches", f"step_{k}", "labels.pb"))
    ref = {"model": name, "model_path": model_rel, "torch": torch.__version__,
           "loss": "softmax_cross_entropy(mean) of output 'logits' against int64 labels",
           "steps": 3, "optimizers": {}}
    for opt_name in optimizers:
        make_opt = OPTIMIZERS[opt_name]
        module = module_fn()
        names = load_into(module, model_path)
        module.train()
        opt = make_opt(module.parameters())
        losses = []
        for k, (x, y) in enumerate(batches):
            opt.zero_grad()
            loss = nn.functional.cross_entropy(module(torch.from_numpy(x)), torch.from_numpy(y))
            loss.backward()
            losses.append(loss.item())
            if k == 0:
                for pname, p in module.named_parameters():
                    if pname in names:
                        save(p.grad.numpy(), pname, os.path.join(out, opt_name, "grads_step0", pname + ".pb"))
            opt.step()
        for pname, p in module.named_parameters():
            if pname in names:
                save(p.detach().numpy(), pname, os.path.join(out, opt_name, "params_after", pname + ".pb"))
        ref["optimizers"][opt_name] = {"spec": str(opt.defaults), "losses": losses}
    with open(os.path.join(out, "reference.json"), "w") as f:
        json.dump(ref, f, indent=1)
    with open(os.path.join(out, "model_path.txt"), "w") as f:
        f.write(model_rel + "\n")


def main():
    export_cnn_bn(os.path.join(ROOT, "models", "torch_cnn_bn", "model.onnx"))
    export_resnet(os.path.join(ROOT, "models", "resnet", "model.onnx"))
    # The MLP holds 0.7M parameters: Adam alone keeps its reference at 5 MB. The CNN of models/
    # (1.2M parameters, 9 MB) is left out so the working tree stays small enough to travel to the
    # GPU machine with a data set; its ops are covered by torch_cnn_bn here and cnn_small in
    # tests/data/torch-reference. The small exported model covers all three optimizers.
    reference("mlp", Mlp, "models/mlp/model.onnx", (784,), optimizers=("adam",))
    reference("torch_cnn_bn", CnnBn, "models/torch_cnn_bn/model.onnx", (1, 28, 28))
    reference("resnet", ResNet, "models/resnet/model.onnx", (1, 28, 28), optimizers=("sgd_momentum",))


if __name__ == "__main__":
    main()
