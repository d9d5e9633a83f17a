#!/usr/bin/python3
"""Writes seeded random inputs for a model as ONNX TensorProto files (input_0.pb, ...), the form
`ottr run --inputs DIR` reads. Symbolic or unknown dimensions get --batch.

    /usr/bin/python3 scripts/random_inputs.py MODEL OUT_DIR [--batch N] [--seed S]

Float inputs are uniform in [-1, 1); integer inputs uniform in [0, 10); bool inputs random.
Uses Debian's python3-onnx and python3-numpy (scripts/install-deps.sh installs them).
"""

import argparse
import os

import numpy as np
import onnx
from onnx import numpy_helper


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model")
    parser.add_argument("out_dir")
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    model = onnx.load(args.model, load_external_data=False)
    initializers = {t.name for t in model.graph.initializer}
    rng = np.random.default_rng(args.seed)
    os.makedirs(args.out_dir, exist_ok=True)
    k = 0
    for vi in model.graph.input:
        if vi.name in initializers:
            continue
        tt = vi.type.tensor_type
        dims = [d.dim_value if d.HasField("dim_value") else args.batch for d in tt.shape.dim]
        dtype = onnx.mapping.TENSOR_TYPE_TO_NP_TYPE[tt.elem_type]  # onnx 1.12
        if np.issubdtype(dtype, np.floating):
            value = rng.uniform(-1.0, 1.0, size=dims).astype(dtype)
        elif dtype == np.bool_:
            value = rng.integers(0, 2, size=dims).astype(np.bool_)
        else:
            value = rng.integers(0, 10, size=dims).astype(dtype)
        tensor = numpy_helper.from_array(value, vi.name)
        path = os.path.join(args.out_dir, f"input_{k}.pb")
        with open(path, "wb") as f:
            f.write(tensor.SerializeToString())
        print(f"{path}: {vi.name} {value.dtype}{list(value.shape)}")
        k += 1


if __name__ == "__main__":
    main()
