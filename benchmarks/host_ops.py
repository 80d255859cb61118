"""Host path speed on single row-wise operators beside onnxruntime: softmax over the last axis
(attention rows of 197 and 1,500, one 1-D row), softmax over a leading axis (classes of an NCHW
segmentation head, a column-wise softmax) and layer norm, each a one-node ONNX model.

These are the shapes whose schedules went wrong in ways a whole-model table hides: a 1-D
softmax recomputed its row's maximum and sum per element, a softmax over a leading axis did so
per output row (TVM's dlight reduction rule), both hundreds to thousands of times slower than
onnxruntime. Timed as a user runs them: ``compiled.run`` against onnxruntime's ``run``, 2
threads each, interleaved rounds, each call after a pause, medians; the table also gives the
largest difference of each output from onnxruntime's (compared, not asserted).

    python benchmarks/host_ops.py [--rounds 30] [--no-record]
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

os.environ.setdefault("TVM_NUM_THREADS", "2")
sys.path.insert(0, str(Path(__file__).resolve().parent))

import numpy as np  # noqa: E402
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import edgebyoc  # noqa: E402
from edgebyoc.plugins import PluginRegistry  # noqa: E402
from record import (PAUSE_SECONDS, interleaved_medians, machine,  # noqa: E402
                    markdown_table, onnxruntime_session, record)

#: (what the operator is in a real model, ONNX operator, input shape, axis)
OPERATORS = [
    ("ViT-B/16 attention rows", "Softmax", [1, 12, 197, 197], -1),
    ("Whisper encoder attention rows", "Softmax", [6, 1500, 1500], -1),
    ("classifier scores, one 1-D row", "Softmax", [1000], -1),
    ("one 1-D row of 100,000", "Softmax", [100000], -1),
    ("segmentation head, 21 classes (NCHW, axis 1)", "Softmax", [1, 21, 256, 256], 1),
    ("1,000 classes over 49 positions (axis 1)", "Softmax", [1, 1000, 49], 1),
    ("column-wise (axis 0)", "Softmax", [5000, 4], 0),
    ("ViT-B/16 layer norm", "LayerNormalization", [1, 197, 768], -1),
]


def operator_model(op: str, shape: list[int], axis: int):
    inits = []
    if op == "LayerNormalization":
        rng = np.random.default_rng(1)
        inits = [numpy_helper.from_array(rng.standard_normal(shape[-1]).astype(np.float32), n)
                 for n in ("g", "b")]
        node = helper.make_node(op, ["input", "g", "b"], ["y"], axis=axis, epsilon=1e-5)
    else:
        node = helper.make_node(op, ["input"], ["y"], axis=axis)
    graph = helper.make_graph(
        [node], "op", [helper.make_tensor_value_info("input", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def measure(op: str, shape: list[int], axis: int, rounds: int, registry) -> dict:
    model = operator_model(op, shape, axis)
    x = (np.random.default_rng(0).standard_normal(shape) * 4).astype(np.float32)
    ours = edgebyoc.compile(model, registry=registry)
    session = onnxruntime_session(model)
    error = float(np.abs(ours.run({"input": x})["y"] - session.run(None, {"input": x})[0]).max())
    median = interleaved_medians({"edgebyoc": lambda: ours.run({"input": x}),
                                  "onnxruntime": lambda: session.run(None, {"input": x})},
                                 rounds)
    return {"ours": median["edgebyoc"] * 1e3, "ort": median["onnxruntime"] * 1e3,
            "error": error}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--no-record", action="store_true")
    args = parser.parse_args()
    registry = PluginRegistry(search_path=[])
    print(f"CPU: {machine()}")
    rows = []
    for name, op, shape, axis in OPERATORS:
        r = measure(op, shape, axis, args.rounds, registry)
        rows.append([name, op, "x".join(map(str, shape)), str(axis), f"{r['ours']:.3f}",
                     f"{r['ort']:.3f}", f"{r['ours'] / r['ort']:.2f}x", f"{r['error']:.1g}"])
        print(rows[-1], flush=True)
    table = markdown_table(["operator", "ONNX op", "shape", "axis", "edgebyoc ms",
                            "onnxruntime ms", "ratio", "max abs diff"], rows)
    print(table)
    if not args.no_record:
        record("host_ops", f"## Host path: single row-wise operators ({machine()})\n\n"
               f"One-node ONNX models, the default compile (target host) against "
               f"onnxruntime, 2 threads each, neither pool spinning between calls, each call "
               f"after a {PAUSE_SECONDS * 1e3:g} ms pause, {args.rounds} interleaved rounds, "
               f"medians; `max abs diff` against onnxruntime's output.\n\n{table}",
               per_cpu=True)


if __name__ == "__main__":
    main()
