"""sparse_cpu's cost model against measured layer times: the sparse kernel and the dense host
path on Table II's 13 layers and ResNet-50's convolution shapes (85 % sparsity), each compiled
alone and timed as a user runs it (``compiled.run``, wall clock, 2 threads, medians; the
calling thread pinned to the first CPU, TVM's worker on the second: the one-thread-per-CPU
protocol of ``record.pin_calling_thread``), then the model's constants fitted by least squares
on relative error:

    sparse = launch + nnz * (per_vector * vectors + per_chunk * chunks) + recon * reconstructed
             (per_aligned_vector instead of per_vector for runs read from 64-byte
              boundaries: cost.aligned_runs)
    dense  = launch + MACs / dense_rate   (dense_winograd on the layers the host computes as
                                           Winograd F(2x2, 3x3): cost.winograd)

(``vectors``: 16-float vectors of one non-zero's run over the plane; ``chunks``: the register
chunks it is cut in). Prints each layer's measured and predicted times, the fitted constants
(paste them into ``CONSTANTS`` of ``plugins/sparse_cpu/edgebyoc_sparse_cpu/cost.py``,
under this CPU's vector ISA) and how often the model's
choice between the two is the faster one.

Run: python benchmarks/sparse_cost_fit.py [--rounds 15]
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
sys.path.insert(0, str(Path(__file__).resolve().parent))

import numpy as np  # noqa: E402
from scipy.optimize import least_squares  # noqa: E402

import edgebyoc  # noqa: E402
from edgebyoc.plugins import PluginRegistry  # noqa: E402
from edgebyoc_sparse_cpu import cost  # noqa: E402
from edgebyoc_sparse_cpu.layers import TABLE_II, conv_layer  # noqa: E402
from record import machine, markdown_table, pin_calling_thread  # noqa: E402

#: ResNet-50's convolutions (input channels, size, output channels, kernel, pad, stride)
RESNET50 = {"R1 1x1 64": (64, 56, 64, 1, 0, 1), "R1 3x3 64": (64, 56, 64, 3, 1, 1),
            "R1 1x1 256": (64, 56, 256, 1, 0, 1), "R1 256>64": (256, 56, 64, 1, 0, 1),
            "R2 3x3 s2": (128, 56, 128, 3, 1, 2), "R2 3x3": (128, 28, 128, 3, 1, 1),
            "R2 1x1 512": (128, 28, 512, 1, 0, 1), "R3 3x3": (256, 14, 256, 3, 1, 1),
            "R3 1024>256": (1024, 14, 256, 1, 0, 1), "R4 3x3": (512, 7, 512, 3, 1, 1),
            "R4 1x1 2048": (512, 7, 2048, 1, 0, 1), "R4 2048>512": (2048, 7, 512, 1, 0, 1)}


def layers():
    for name, (c_in, h, w, c_out, k, pad, stride, sparsity) in TABLE_II.items():
        yield name, (c_in, h, w, c_out, k, pad, stride, sparsity)
    for name, (c_in, size, c_out, k, pad, stride) in RESNET50.items():
        yield name, (c_in, size, size, c_out, k, pad, stride, 0.85)


def median_run(compiled, x, rounds: int) -> float:
    for _ in range(3):
        compiled.run({"x": x})
    pin_calling_thread()  # TVM's pool has started
    times = []
    for _ in range(rounds):
        time.sleep(0.003)
        start = time.perf_counter()
        compiled.run({"x": x})
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def features(model):
    """(geometry, non-zeros) of the layer's convolution, as the plugin's cost hook sees it."""
    from onnx import numpy_helper

    from edgebyoc_sparse_cpu.csr import Geometry

    weight = numpy_helper.to_array(model.graph.initializer[0])
    node = model.graph.node[0]
    attrs = {a.name: list(a.ints) for a in node.attribute}
    (_, c, h, w) = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
    k_out, _, kh, kw = weight.shape
    pad, stride = attrs["pads"], attrs["strides"]
    oh = (h + pad[0] + pad[2] - kh) // stride[0] + 1
    ow = (w + pad[1] + pad[3] - kw) // stride[1] + 1
    g = Geometry(c, h, w, k_out, kh, kw, oh, ow, stride[0], stride[1], pad[0], pad[1], 1, 1)
    return g, int(np.count_nonzero(weight))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15)
    args = parser.parse_args()
    registry = PluginRegistry()
    rows = []
    for name, (c_in, h, w, c_out, k, pad, stride, sparsity) in layers():
        model = conv_layer(c_in, h, w, c_out, k, pad, stride, sparsity, seed=0)
        x = np.random.default_rng(1).standard_normal((1, c_in, h, w)).astype(np.float32)
        sparse = edgebyoc.compile(model, target="sparse_cpu", registry=registry,
                                  options={"min_speedup": 0})
        dense = edgebyoc.compile(model, target="host", registry=registry)
        g, nnz = features(model)
        rows.append((name, g, nnz, median_run(sparse, x, args.rounds),
                     median_run(dense, x, args.rounds)))
        print(f"{name}: sparse {rows[-1][3] * 1e3:.3f} ms, dense {rows[-1][4] * 1e3:.3f} ms",
              flush=True)

    def terms(g, nnz):
        aligned = cost.aligned_runs(g, nnz)
        vectors, chunks = cost.run_shape(g, aligned)
        recon = 0 if g.in_place else \
            g.channels * g.phases * g.phase_size
        macs = g.out_channels * g.out_h * g.out_w * g.channels * g.kernel_h * g.kernel_w
        return nnz * vectors * (not aligned), nnz * vectors * aligned, nnz * chunks, recon, \
            macs, cost.winograd(g)

    data = [(terms(g, nnz), s, d) for _, g, nnz, s, d in rows]

    def residuals(p):
        launch, per_vector, per_aligned, per_chunk, recon, dense_rate, winograd_rate = np.exp(p)
        out = []
        for (v, va, c, r, macs, wino), s, d in data:
            out.append((launch + per_vector * v + per_aligned * va + per_chunk * c + recon * r)
                       / s - 1)
            out.append((launch + macs / (winograd_rate if wino else dense_rate)) / d - 1)
        return out

    start = np.log([10e-6, 1e-10, 1e-10, 1e-9, 1e-9, 100e9, 100e9])
    fit = least_squares(residuals, start)
    launch, per_vector, per_aligned, per_chunk, recon, dense_rate, winograd_rate = \
        np.exp(fit.x)
    if not any(va for (_, va, *_), _, _ in data):  # no layer read so: nothing to fit
        per_aligned = per_vector
    table, right = [], 0
    for (name, g, nnz, s, d), ((v, va, c, r, macs, wino), _, _) in zip(rows, data):
        ps = launch + per_vector * v + per_aligned * va + per_chunk * c + recon * r
        pd = launch + macs / (winograd_rate if wino else dense_rate)
        right += (ps < pd) == (s < d)
        table.append([name, f"{s * 1e3:.3f}", f"{ps * 1e3:.3f}", f"{d * 1e3:.3f}",
                      f"{pd * 1e3:.3f}", "sparse" if ps < pd else "dense",
                      "sparse" if s < d else "dense"])
    print(markdown_table(["layer", "sparse ms", "model", "dense ms", "model", "model picks",
                          "faster"], table))
    print(f"\n{machine()} ({cost.ISA}): {{\"launch\": {launch:.3g}, \"per_vector\": "
          f"{per_vector:.3g}, \"per_aligned_vector\": {per_aligned:.3g}, \"per_chunk\": "
          f"{per_chunk:.3g}, \"reconstruct\": {recon:.3g}, "
          f"\"dense\": {dense_rate:.3g}, \"dense_winograd\": {winograd_rate:.3g}}}; the model "
          f"picks the faster of the two on {right} of {len(rows)} layers")


if __name__ == "__main__":
    main()
