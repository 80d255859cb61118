"""adreno: TMModel's picks against the texture-cache simulator's exhaustive best (TMModel
Fig. 10 / section 6.4), its tuning time (Table 5), and the calibration harness.

For every shape of TMModel's Table 3 ranges (MatMul and the row reductions 2^4..2^12 square,
the convolutions 2^4..2^9 square inputs with 3/5/7 kernels, 16 channels in and out: the paper
gives no channel counts), the cost model ranks every configuration (patterns per input, thread
tile, work group, warp shape) and the simulator, configured from the same device file, runs
all of them. A pick counts as right when its simulated time is within 2 % of the simulated
best. **The simulator stands in for a GPU: no Adreno or Mali device was measured.** The
calibration the model uses is the shipped one, fitted on the simulator's micro-benchmarks
(`edgebyoc-adreno calibrate --simulate`), not on the kernels below.

Run: python benchmarks/adreno_tmmodel.py [--device adreno740] [--jobs 2] [--quick]
         [--no-record] [--results FILE]
Each shape's outcome is saved to FILE (default /tmp/adreno_tmmodel.json) as it is measured;
``--from-results FILE`` renders and records a saved run without simulating again.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np

from edgebyoc_adreno import calibrate as cal
from edgebyoc_adreno.kernels import Conv2D, MatMul, RowReduction, configurations
from edgebyoc_adreno.simulator import simulate
from edgebyoc_adreno.tmmodel import TMModel, histogram, load_calibration, load_device

sys.path.insert(0, str(Path(__file__).resolve().parent))
from record import markdown_table, record  # noqa: E402

CHANNELS = 16
PAPER_ACCURACY = "94.1 % (four kernels, Adreno 740)"


def _conv(kind, size, kernel, stride):
    pad = kernel // 2
    if kind == "deconv":
        out = (size - 1) * stride - 2 * pad + kernel + (stride - 1)
        return Conv2D(kind, CHANNELS, size, size, CHANNELS, out, out, (kernel, kernel),
                      (stride, stride), padding=(pad,) * 4)
    out = (size + 2 * pad - kernel) // stride + 1
    return Conv2D(kind, CHANNELS, size, size, CHANNELS, out, out, (kernel, kernel),
                  (stride, stride), padding=(pad,) * 4)


def table3_shapes(quick: bool = False) -> dict[str, list]:
    """Table 3's kernels over its shape ranges (``quick``: every other size)."""
    conv_sizes = [2 ** i for i in range(4, 10)][:: 2 if quick else 1]
    square = [2 ** i for i in range(4, 13)][:: 2 if quick else 1]
    convs = {"Conv2Ds1": ("conv", 1), "Conv2Ds2": ("conv", 2), "DwConv2D": ("depthwise", 1),
             "DeConv2Ds1": ("deconv", 1), "DeConv2Ds2": ("deconv", 2)}
    shapes = {"MatMul": [MatMul(n, n, n) for n in square]}
    for name, (kind, stride) in convs.items():
        shapes[name] = [_conv(kind, s, k, stride) for s in conv_sizes for k in (3, 5, 7)]
    shapes["SoftMax"] = [RowReduction("softmax", n, n) for n in square]
    shapes["LayerNorm"] = [RowReduction("layernorm", n, n) for n in square]
    return shapes


_DEVICE = None


def _simulate(job):
    kernel, config = job
    return simulate(kernel, config, _DEVICE, max_steps=2048)


def _init(device_name):
    global _DEVICE
    _DEVICE = load_device(device_name)


def describe(kernel) -> str:
    if kernel.op == "conv2d":
        return f"{kernel.height}x{kernel.width} k{kernel.kernel[0]}"
    if kernel.op == "matmul":
        return f"{kernel.rows}^3"
    return f"{kernel.rows}x{kernel.cols}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--device", default="adreno740")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--quick", action="store_true", help="every other size")
    parser.add_argument("--no-record", action="store_true")
    parser.add_argument("--results", default="/tmp/adreno_tmmodel.json",
                        help="where each shape's outcome is saved as it is measured")
    parser.add_argument("--from-results", help="render a saved run instead of simulating")
    args = parser.parse_args()
    device = load_device(args.device)
    calibration = load_calibration(args.device)
    shapes = table3_shapes(args.quick)
    print(f"{device.name} (simulated): {device.cache_lines} cache lines of "
          f"{device.cache_line_texels} texels, warp {device.warp_size}, "
          f"{device.shader_processors} SPs; calibration fit R^2 {calibration.fit.get('r2')} "
          f"(cross-validated {calibration.fit.get('r2_cv')})")

    # Table 5: tuning every Conv2Ds1 shape, a fresh model (no cached histograms)
    start = time.perf_counter()
    fresh = TMModel(device, calibration)
    for kernel in shapes["Conv2Ds1"]:
        fresh.best(kernel)
    tuning = time.perf_counter() - start
    configs_per_conv = len(configurations(shapes["Conv2Ds1"][0], device.warp_size,
                                          device.max_image))
    print(f"tuning {len(shapes['Conv2Ds1'])} Conv2Ds1 shapes x {configs_per_conv} "
          f"configurations: {tuning:.2f} s")

    if args.from_results:
        saved = json.loads(Path(args.from_results).read_text())
    else:
        saved = {"shapes": [], "simulation_seconds": 0.0}
        model = TMModel(device, calibration)
        with ProcessPoolExecutor(args.jobs, initializer=_init,
                                 initargs=(args.device,)) as pool:
            for name, kernels in shapes.items():
                for kernel in kernels:
                    configs = configurations(kernel, device.warp_size, device.max_image)
                    start = time.perf_counter()
                    simulated = list(pool.map(_simulate, [(kernel, c) for c in configs],
                                              chunksize=32))
                    saved["simulation_seconds"] += time.perf_counter() - start
                    pick = model.best(kernel, configs)
                    ratio = simulated[configs.index(pick.config)] / min(simulated)
                    saved["shapes"].append({
                        "kernel": name, "shape": describe(kernel), "configs": len(configs),
                        "ratio": ratio, "pick": pick.config.label,
                        "best": configs[int(np.argmin(simulated))].label})
                    Path(args.results).write_text(json.dumps(saved, indent=1))
                    print(f"  {name:10s} {describe(kernel):>12s}: {len(configs):5d} configs, "
                          f"pick / best {ratio:.3f}  ({pick.config.label})", flush=True)
    rows, hits_total, count_total = [], 0, 0
    sim_seconds = saved["simulation_seconds"]
    for name in shapes:
        ratios = [r["ratio"] for r in saved["shapes"] if r["kernel"] == name]
        if ratios:
            within = sum(r <= 1.02 for r in ratios)
            hits_total += within
            count_total += len(ratios)
            rows.append([name, str(len(ratios)),
                         f"{within} ({100 * within / len(ratios):.0f} %)",
                         f"{np.exp(np.mean(np.log(ratios))):.3f}", f"{max(ratios):.3f}"])
    share = 100 * hits_total / count_total
    rows.append(["**all**", str(count_total), f"**{hits_total} ({share:.1f} %)**", "", ""])
    table = markdown_table(["kernel", "shapes", "pick within 2 % of the simulated best",
                            "geomean pick / best", "worst"], rows)
    print(table)
    print(f"simulation: {sim_seconds:.0f} s for {count_total} shapes")

    # calibration: a known model's beta recovered; the harness end to end on PoCL
    runs = cal.stride_runs(40, 512, seed=1)
    features = np.array([histogram(r.x, r.y, cal.BLOCK_SHAPES) for r in runs])
    truth = np.linspace(3.0, 0.5, features.shape[1])
    beta, _, _ = cal.fit_beta(features, features @ truth)
    recovered = float(np.max(np.abs(beta - truth) / truth))
    pocl = "not run (no OpenCL device)"
    from edgebyoc_adreno.runtime import opencl_missing

    if opencl_missing() is None:
        start = time.perf_counter()
        fitted = cal.calibrate(cal.OpenCLDevice(), load_device("pocl"), runs=30, steps=1024)
        pocl = (f"{time.perf_counter() - start:.1f} s, R^2 {fitted.fit['r2']:.2f}, "
                f"cross-validated R^2 {fitted.fit['r2_cv']:.2f} on {fitted.fit['measured_on']} "
                f"(software image reads: no accuracy claimed)")
    print(f"calibration: known beta recovered to {recovered:.1e} relative; PoCL: {pocl}")

    if args.no_record:
        return
    body = f"""## adreno: TMModel against the texture-cache simulator

**No Adreno or Mali GPU was measured.** The {device.name} is *simulated*
(`edgebyoc_adreno/simulator.py`: 2-D blocks of {device.cache_line_texels[0]}x{device.cache_line_texels[1]}
texels per line, {device.cache_lines} LRU lines, warps of {device.warp_size} issuing in lock-step,
occupancy groups serial, {device.shader_processors} shader processors in parallel), configured
from `devices/{args.device}.json`. TMModel (`tmmodel.py`, eqs. 1-7) uses the shipped calibration,
fitted on the simulator's micro-benchmarks (random-stride chase R^2 {calibration.fit.get('r2')},
cross-validated {calibration.fit.get('r2_cv')}; D = {calibration.D:.3f}). Each shape's whole
configuration space (five patterns per texture input, tiles 1/2/4 x 1/2/4, four work groups and
their warp shapes: {configs_per_conv} configurations for a convolution) is simulated; the model's
pick is right when its simulated time is within 2 % of the simulated best. Convolutions have
{CHANNELS} input and output channels (Table 3 gives spatial sizes only).

{table}

The paper reports {PAPER_ACCURACY}. What this agreement shows and does not: the simulator and
the model share the device file's assumptions (line shape, cache size, occupancy, round-robin
dispatch), so it shows that eqs. 1-7 (with our readings of eq. 3 for tiles and concurrent warps)
rank configurations the way a cache with those properties does, not that either describes a
real Adreno. The stride-2 transposed convolutions are where the model misses: their threads
skip three of four input reads in a pattern that depends on the output position, which the
representative thread's histogram does not capture for the whole warp.

Tuning all {len(shapes['Conv2Ds1'])} Conv2Ds1 shapes of Table 3 with TMModel took
**{tuning:.2f} s** here ({configs_per_conv} configurations each; paper, Table 5: TMModel 1.92 s,
TVM 234 s, on their machine).

Calibration harness: fitted on data generated by a known model, `beta` comes back to
{recovered:.0e} relative error (test `test_calibrate_end_to_end_on_a_known_model`); end to end on
PoCL: {pocl}.

What measuring a real device would need: an Android phone with the Adreno 740 and its OpenCL
driver, `pyopencl` (or the C runtime) on it, `edgebyoc-adreno calibrate -o adreno740.json` run
there (the micro-benchmarks are OpenCL kernels), and the kernels' run times in place of the
simulator's in this benchmark."""
    record("adreno_tmmodel", body)


if __name__ == "__main__":
    main()
