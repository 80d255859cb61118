"""Host path speed: ResNet-18 (224x224, fp32, random weights) beside onnxruntime.

Both run with 2 threads in the same process, in interleaved rounds (one edgebyoc run, one
onnxruntime run, repeated), and the medians are compared, so machine noise hits both alike. TVM's
default build (no edgebyoc schedules) is timed too, with fewer rounds: it is ~50x slower.

    python benchmarks/host_resnet18.py [--rounds 30] [--no-record]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

os.environ["TVM_NUM_THREADS"] = "2"
# interleaved runs: neither thread pool may keep spinning on the cores after its run
os.environ["TVM_THREAD_POOL_SPIN_COUNT"] = "0"
sys.path.insert(0, str(Path(__file__).resolve().parent))

import numpy as np  # noqa: E402

import edgebyoc  # noqa: E402
from edgebyoc.plugins import PluginRegistry  # noqa: E402
from edgebyoc.testing.models import resnet18  # noqa: E402
from record import markdown_table, onnxruntime_session, record  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--default-rounds", type=int, default=3)
    parser.add_argument("--no-record", action="store_true")
    args = parser.parse_args()

    model = resnet18(224)
    registry = PluginRegistry(search_path=[])
    x = np.random.default_rng(0).standard_normal((1, 3, 224, 224)).astype(np.float32)
    start = time.perf_counter()
    ours = edgebyoc.compile(model, registry=registry)
    compile_seconds = time.perf_counter() - start
    default = edgebyoc.compile(model, registry=registry, schedules=False)
    session = onnxruntime_session(model)

    result, _ = edgebyoc.verify(ours, inputs={"input": x})
    for _ in range(3):  # warm-up
        ours.run({"input": x})
        session.run(None, {"input": x})
    times = {"edgebyoc": [], "onnxruntime": [], "tvm-default": []}
    for _ in range(args.rounds):
        t = time.perf_counter()
        ours.run({"input": x})
        times["edgebyoc"].append(time.perf_counter() - t)
        t = time.perf_counter()
        session.run(None, {"input": x})
        times["onnxruntime"].append(time.perf_counter() - t)
    for _ in range(args.default_rounds):
        t = time.perf_counter()
        default.run({"input": x})
        times["tvm-default"].append(time.perf_counter() - t)

    median = {k: statistics.median(v) * 1e3 for k, v in times.items()}
    ort_ms = median["onnxruntime"]
    rows = [[name, f"{median[name]:.1f}", f"{median[name] / ort_ms:.2f}x", str(len(times[name]))]
            for name in ("onnxruntime", "edgebyoc", "tvm-default")]
    table = markdown_table(["executor", "median ms", "vs onnxruntime", "runs"], rows)
    print(table)
    print(f"edgebyoc compile: {compile_seconds:.1f} s; max rel error vs onnxruntime "
          f"{result.max_rel:.2g}")
    verdict = "meets" if median["edgebyoc"] <= 3 * ort_ms else "MISSES"
    print(f"target: within 3x of onnxruntime -> {verdict} "
          f"({median['edgebyoc'] / ort_ms:.2f}x)")
    if not args.no_record:
        record("host_resnet18", "## Host path: ResNet-18 vs onnxruntime\n\n"
               "ResNet-18 (1x3x224x224 fp32, random weights, 1.81 G MACs), 2 threads each, "
               f"{args.rounds} interleaved rounds, medians.\n\n" + table + "\n\n"
               f"Target: within 3x of onnxruntime: **{verdict}** "
               f"({median['edgebyoc'] / ort_ms:.2f}x). Compile time {compile_seconds:.1f} s; "
               f"max relative error vs onnxruntime {result.max_rel:.2g}.")


if __name__ == "__main__":
    main()
