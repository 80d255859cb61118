"""Per-call cost of ``compiled.run()`` on small models, beside onnxruntime's ``session.run``.

For the small models edge users call in loops, the per-call overhead is the latency. Each
contender is timed as a user calls it from Python: ``compiled.run({"x": x})`` (input checks,
outputs as numpy) against ``session.run(None, {"x": x})``, both on 1 thread, in interleaved
blocks of ``--calls`` calls (one block of each per round), medians over ``--rounds``. The
"VM call" column is the compiled function alone on preallocated TVM tensors: the floor the
Python layer adds to. Goal (#30): at most 10 us per call on the 16x16 MatMul.

    python benchmarks/run_overhead.py [--rounds 15] [--calls 2000] [--no-record]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("TVM_NUM_THREADS", "1")
os.environ.setdefault("TVM_THREAD_POOL_SPIN_COUNT", "0")
sys.path.insert(0, str(Path(__file__).resolve().parent))

import numpy as np  # noqa: E402
import onnx  # noqa: E402
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import edgebyoc  # noqa: E402
from edgebyoc.plugins import PluginRegistry  # noqa: E402
from edgebyoc.testing.models import small_convnet  # noqa: E402
from record import machine, markdown_table, onnxruntime_session, record  # noqa: E402

GOAL_US = 10.0


def matmul_16() -> onnx.ModelProto:
    weight = np.random.default_rng(0).standard_normal((16, 16)).astype(np.float32)
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "matmul16",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [16, 16])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [16, 16])],
                              [numpy_helper.from_array(weight, "w")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def per_call_us(call, calls: int) -> float:
    start = time.perf_counter()
    for _ in range(calls):
        call()
    return (time.perf_counter() - start) / calls * 1e6


def measure(name: str, model: onnx.ModelProto, rounds: int, calls: int,
            goal: bool = False) -> list[str]:
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "model.onnx"
        onnx.save(model, path)
        compiled = edgebyoc.compile(path, registry=PluginRegistry(search_path=[]))
    spec = compiled.inputs[0]
    x = np.random.default_rng(1).random(spec.shape).astype(spec.dtype)
    feed = {spec.name: x}
    session = onnxruntime_session(model, threads=1)
    ours, theirs = compiled.run(feed), session.run(None, feed)
    error = max(float(np.max(np.abs(a - b))) for a, b in zip(ours.values(), theirs))
    runner = compiled.runner
    vm_main = runner._vm["main"]
    tensors = [runner._tvm.runtime.tensor(a) for a in runner.check_inputs(feed)]
    contenders = {"edgebyoc": lambda: compiled.run(feed),
                  "onnxruntime": lambda: session.run(None, feed),
                  "vm": lambda: vm_main(*tensors, *runner._constants)}
    for call in contenders.values():  # warm-up
        per_call_us(call, calls // 10)
    samples: dict[str, list[float]] = {k: [] for k in contenders}
    for _ in range(rounds):
        for key, call in contenders.items():
            samples[key].append(per_call_us(call, calls))
    median = {k: statistics.median(v) for k, v in samples.items()}
    name = f"{name} {'x'.join(map(str, spec.shape))}"
    row = [name, f"{median['edgebyoc']:.1f}", f"{median['onnxruntime']:.1f}",
           f"{median['edgebyoc'] / median['onnxruntime']:.2f}x", f"{median['vm']:.1f}",
           ("yes" if median["edgebyoc"] <= GOAL_US else "**no**") if goal else "-",
           f"{error:.1g}"]
    print(row, flush=True)
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--no-record", action="store_true")
    args = parser.parse_args()
    print(f"CPU: {machine()}")
    rows = [measure("MatMul (fp32)", matmul_16(), args.rounds, args.calls, goal=True),
            measure("small conv net", small_convnet(), args.rounds, args.calls)]
    table = markdown_table(["model", "compiled.run() us", "onnxruntime run us", "ratio",
                            "VM call alone us", f"goal: run() <= {GOAL_US:.0f} us",
                            "max abs diff"], rows)
    print(table)
    if not args.no_record:
        record("run_overhead", "## Per-call cost of `compiled.run()`\n\n"
               f"1 thread each, {args.rounds} interleaved rounds of {args.calls} calls, medians "
               "of the per-call time; both called from Python with a dict of numpy inputs, "
               "outputs as numpy. \"VM call alone\" is the compiled function on preallocated "
               f"TVM tensors (the floor under `run()`).\n\n{table}", per_cpu=True)


if __name__ == "__main__":
    main()
