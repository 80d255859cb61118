"""End to end: a ResNet-50 with 85 % unstructured weight sparsity on sparse_cpu.

The same ONNX model (bottleneck blocks, BN folded, random weights pruned with a seeded mask) run
by edgebyoc for ``sparse_cpu``, by edgebyoc's dense host path, by onnxruntime and by PyTorch (the
ONNX graph replayed with torch.nn.functional), 2 threads each, interleaved rounds, medians;
every pool passive and every runtime's threads pinned one per CPU, the calling thread on the
first (``record.one_thread_per_cpu_environment``).

    python benchmarks/sparse_resnet50.py [--rounds 10] [--sparsity 0.85] [--no-record]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

os.environ["TVM_NUM_THREADS"] = "2"
os.environ["TVM_THREAD_POOL_SPIN_COUNT"] = "0"
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
sys.path.insert(0, str(Path(__file__).resolve().parent))
from record import one_thread_per_cpu_environment  # noqa: E402

one_thread_per_cpu_environment()  # before PyTorch starts its OpenMP pool

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from onnx import numpy_helper  # noqa: E402

import edgebyoc  # noqa: E402
from edgebyoc.plugins import PluginRegistry  # noqa: E402
from edgebyoc.testing.models import resnet50  # noqa: E402
from record import (machine, markdown_table, onnxruntime_session, pin_calling_thread,  # noqa: E402
                    record)

torch.set_num_threads(2)


def torch_replay(model):
    """A function running the ONNX graph with torch.nn.functional (the ops resnet50 uses)."""
    weights = {t.name: torch.from_numpy(numpy_helper.to_array(t).copy())
               for t in model.graph.initializer}
    nodes = list(model.graph.node)

    def attr(node, name, default=None):
        for a in node.attribute:
            if a.name == name:
                return list(a.ints) if a.ints else a.i
        return default

    def run(x):
        values = {"input": x, **weights}
        for node in nodes:
            args = [values[i] for i in node.input]
            if node.op_type == "Conv":
                out = F.conv2d(args[0], args[1], args[2], stride=attr(node, "strides"),
                               padding=attr(node, "pads")[:2])
            elif node.op_type == "Relu":
                out = F.relu(args[0])
            elif node.op_type == "Add":
                out = args[0] + args[1]
            elif node.op_type == "MaxPool":
                out = F.max_pool2d(args[0], attr(node, "kernel_shape"), attr(node, "strides"),
                                   attr(node, "pads")[:2])
            elif node.op_type == "GlobalAveragePool":
                out = args[0].mean(dim=(2, 3), keepdim=True)
            elif node.op_type == "Flatten":
                out = args[0].flatten(1)
            elif node.op_type == "Gemm":
                out = args[0] @ args[1] + args[2]
            else:
                raise NotImplementedError(node.op_type)
            values[node.output[0]] = out
        return values[model.graph.output[0].name]

    return run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--sparsity", type=float, default=0.85)
    parser.add_argument("--no-record", action="store_true")
    args = parser.parse_args()
    model = resnet50(224, sparsity=args.sparsity)
    registry = PluginRegistry()
    start = time.perf_counter()
    sparse = edgebyoc.compile(model, target="sparse_cpu", registry=registry)
    compile_seconds = time.perf_counter() - start
    dense = edgebyoc.compile(model, target="host", registry=registry)
    result, _ = edgebyoc.verify(sparse)
    session = onnxruntime_session(model, pin_workers=True)
    replay = torch_replay(model)
    x = np.random.default_rng(0).standard_normal((1, 3, 224, 224)).astype(np.float32)
    xt = torch.from_numpy(x)
    with torch.no_grad():
        torch_error = float((replay(xt).numpy() - session.run(None, {"input": x})[0]).__abs__()
                            .max())
    runs = {"edgebyoc sparse_cpu": lambda: sparse.run({"input": x}),
            "edgebyoc dense host": lambda: dense.run({"input": x}),
            "onnxruntime": lambda: session.run(None, {"input": x}),
            "PyTorch (dense, oneDNN)": lambda: replay(xt)}
    times = {name: [] for name in runs}
    with torch.no_grad():
        for _ in range(2):
            for function in runs.values():
                function()
        pin_calling_thread()  # every pool has started
        for _ in range(args.rounds):
            for name, function in runs.items():
                time.sleep(0.005)  # the previous contender's pool falls asleep first
                start = time.perf_counter()
                function()
                times[name].append(time.perf_counter() - start)
    median = {name: statistics.median(v) * 1e3 for name, v in times.items()}
    base = median["edgebyoc sparse_cpu"]
    rows = [[name, f"{ms:.1f}", f"{ms / base:.2f}x"] for name, ms in median.items()]
    table = markdown_table(["executor", "median ms", "vs sparse_cpu"], rows)
    summary = sparse.report["summary"]
    text = (f"ResNet-50, 224x224, {args.sparsity:.0%} unstructured sparsity in every conv but the "
            f"stem; {summary['offloaded_operators']} of {summary['operators']} operators and "
            f"{summary['mac_offload_ratio']:.1%} of MACs offloaded by the cost model; "
            f"`verify` against onnxruntime: max rel error {result.max_rel:.2g} "
            f"({'passed' if result.passed else 'FAILED'}); compile {compile_seconds:.0f} s.")
    print(table)
    print(text)
    print(f"(PyTorch replay vs onnxruntime max abs difference {torch_error:.2g})")
    if not args.no_record:
        ort = median["onnxruntime"]
        verdict = (f"sparse_cpu is {ort / base:.2f}x faster than onnxruntime's dense run end to "
                   f"end (goal of issue #30: at least 1.5x)" if base < ort else
                   f"onnxruntime's dense run is still {base / ort:.2f}x faster end to end (goal "
                   f"of issue #30: sparse_cpu at least 1.5x faster)")
        how = ("Where the time went (profiled with the Relax VM's instrument hook): the "
               "blocks' shortcut adds and ReLUs ran on the host between regions, each region "
               "made two thread-pool launches, and 1x1 convolutions copied their whole input "
               "into the reconstruction buffer. Now a region computes the convolution, its "
               "bias, the block's shortcut add and the ReLU in one launch (a barrier between "
               "reconstruction and kernel), and a 1x1 stride-1 convolution reads its input in "
               "place; the 1x1 reductions share their plane between the tasks, not their "
               "channels, so that each core reads the part of the input it wrote; and a "
               "region chains a bottleneck block's layers in one launch (barriers between "
               "them), 17 launches instead of 52.")
        record("sparse_resnet50", f"## SparDR end to end: sparse ResNet-50 ({machine()})\n\n"
               + text + f" 2 threads each, {args.rounds} interleaved rounds, medians; each "
               "contender timed by the wall clock around the call a user makes "
               "(`compiled.run()`, onnxruntime's `run`, the replay), after a 5 ms pause, every "
               "pool passive and every runtime's threads pinned one per CPU, the calling thread "
               "on the first (unpinned, this VM's scheduler often woke a pool thread on the "
               "caller's vCPU); PyTorch replays the ONNX graph op by op with "
               "torch.nn.functional (no graph fusion).\n\n" + table + "\n\n" + verdict + ". " + how,
               per_cpu=True)


if __name__ == "__main__":
    main()
