"""The cost of ``--safe`` (run-time bound checks in every host kernel, ``codegen.bounds``):
the default build and the safe build of the same model, run interleaved on 2 threads, medians.

Models: ResNet-18 and MobileNetV2 (224x224, random weights: every access is proven in range,
so no check is left), and an embedding model (a ``Gather`` of 128 token ids from a
32,000 x 256 table, then a 256 x 256 MatMul: the gather's reads depend on data, so they keep
their checks).

    python benchmarks/safe_build.py [--rounds 30] [--no-record]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

os.environ.setdefault("TVM_NUM_THREADS", "2")
os.environ.setdefault("TVM_THREAD_POOL_SPIN_COUNT", "0")
sys.path.insert(0, str(Path(__file__).resolve().parent))

import numpy as np  # noqa: E402
import onnx  # noqa: E402
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import edgebyoc  # noqa: E402
from edgebyoc.codegen import bounds  # noqa: E402
from edgebyoc.plugins import PluginRegistry  # noqa: E402
from edgebyoc.testing.models import mobilenet_v2, resnet18  # noqa: E402
from record import machine, markdown_table, record  # noqa: E402


def embedding(vocabulary: int = 32000, width: int = 256, tokens: int = 128) -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    table = rng.standard_normal((vocabulary, width)).astype(np.float32)
    weight = rng.standard_normal((width, width)).astype(np.float32) / 16
    graph = helper.make_graph(
        [helper.make_node("Gather", ["table", "ids"], ["rows"], axis=0),
         helper.make_node("MatMul", ["rows", "weight"], ["y"])], "embedding",
        [helper.make_tensor_value_info("ids", TensorProto.INT64, [1, tokens])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, tokens, width])],
        [numpy_helper.from_array(table, "table"), numpy_helper.from_array(weight, "weight")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


MODELS = {"ResNet-18": lambda: resnet18(224), "MobileNetV2": lambda: mobilenet_v2(224),
          "Embedding (Gather + MatMul)": embedding}


def checked_kernels(model, registry) -> tuple[object, int]:
    """The safe build and how many kernels kept a check."""
    counts = []
    original = bounds._instrument

    def counting(function, name):
        result = original(function, name)
        counts.append(result[1] > 0)
        return result

    bounds._instrument = counting
    try:
        compiled = edgebyoc.compile(model, registry=registry, safe=True, dfs=False)
    finally:
        bounds._instrument = original
    return compiled, sum(counts)


def measure(name: str, build, rounds: int, registry) -> list[str]:
    model = build()
    default = edgebyoc.compile(model, registry=registry, dfs=False)
    safe, checked = checked_kernels(model, registry)
    inputs = edgebyoc.frontend.random_inputs(default.inputs, seed=0)
    for compiled in (default, safe):
        assert edgebyoc.verify(compiled, inputs=inputs)[0].passed
        for _ in range(3):
            compiled.run(inputs)
    times = {"default": [], "safe": []}
    for _ in range(rounds):
        for label, compiled in (("default", default), ("safe", safe)):
            start = time.perf_counter()
            compiled.run(inputs)
            times[label].append(time.perf_counter() - start)
    median = {k: statistics.median(v) * 1e3 for k, v in times.items()}
    return [name, str(checked), f"{median['default']:.3f}", f"{median['safe']:.3f}",
            f"{median['safe'] / median['default']:.2f}x"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--no-record", action="store_true")
    args = parser.parse_args()
    registry = PluginRegistry(search_path=[])
    rows = [measure(name, build, args.rounds, registry) for name, build in MODELS.items()]
    table = markdown_table(["model", "kernels with checks", "default ms", "--safe ms",
                            "safe / default"], rows)
    print(machine())
    print(table)
    if not args.no_record:
        record("safe_build", "## `--safe`: run-time bound checks\n\n" + table + "\n\n"
               "Medians of interleaved runs (2 threads). A check stays only where the "
               "arithmetic analyzer cannot prove an access in range: none in the two CNNs, the "
               "gather's data-dependent reads in the embedding model.", per_cpu=True)


if __name__ == "__main__":
    main()
