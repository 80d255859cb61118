"""gap9: predicted latency of the four int8 MLPerf Tiny networks beside MATCH's Table IV, with
the calibration fitted to the board.

The 16 board figures of Table IV (CPU only, Cluster+CPU, NE16+CPU, Full; 260 MHz) are written
as an ``edgebyoc calibrate`` measurements file (``calibration/gap9_table_iv.csv``). The
calibration the plugin ships (``edgebyoc_gap9/calibration/match_table_iv.json``) is fitted on
the Cluster+CPU and NE16+CPU columns only (8 points) and tested on Full and CPU only (8 points):
``--fit`` fits it again (the free parameters below; NE16's efficiency stays at the paper's 80 %,
the mean of its measured 83 % and 77 %, and the per-tile costs at 0). The table gives, per point,
the prediction with the shipped calibration, the paper's cost model uncalibrated, and the board.
The NE16 library MATCH measured runs no fully connected layer (paper VI-C), so every row is
compiled with ``ne16_fc=false``. Also printed: Fig. 11's ResNet mapping (which module each
layer of the Full build takes), the schedule search time per network, and the search's
optimality gap against exhaustive enumeration on 24 random convolution workloads.

Run: python benchmarks/gap9_table_iv.py [--fit] [--no-record]
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

from edgebyoc.calibration import UNCALIBRATED
from edgebyoc.dse import LoopNest, exhaustive, search
from edgebyoc_gap9 import cost

sys.path.insert(0, str(Path(__file__).resolve().parent))
from calibration_table import HERE, fit, predictions, shipped, write_measurements  # noqa: E402
from record import markdown_table, record  # noqa: E402

NETWORKS = [("MobileNet", "vww_96_int8"), ("ResNet", "pretrainedResnet_quant"),
            ("DSCNN", "kws_ref_model"), ("DAE", "ad01_int8")]
# (column, modules, split)
CONFIGS = [("CPU only", "", "test"), ("Cluster+CPU", "cluster", "fit"),
           ("NE16+CPU", "ne16", "fit"), ("Full", "cluster,ne16", "test")]
PAPER = {"MobileNet": (236.22, 11.2, 5.02, 4.94), "ResNet": (342.72, 5.48, 2.9, 2.15),
         "DSCNN": (83.41, 4.25, 14.46, 1.57), "DAE": (6.12, 0.54, 6.12, 0.54)}
MEASUREMENTS = HERE / "calibration" / "gap9_table_iv.csv"
FREE = ["cluster_efficiency", "cluster_dw_efficiency", "cluster_layer_cycles",
        "ne16_layer_cycles", "host_cycles_per_mac", "host_cycles_per_element"]
START = {"ne16_efficiency": 0.80}
SHIPPED = Path(cost.__file__).parent / "calibration" / "match_table_iv.json"
FITTED_ON = "MATCH Table IV, Cluster+CPU and NE16+CPU columns (8 board figures)"


def measurements() -> None:
    rows = []
    for name, file in NETWORKS:
        for (label, modules, split), ms in zip(CONFIGS, PAPER[name]):
            model = f"../../../shared/models/mlperf_tiny/{file}.tflite"
            rows.append((f"{name} {label}", model, f"modules={modules};ne16_fc=false", split,
                         ms))
    write_measurements(MEASUREMENTS, rows)


def optimality_gap(constants, count: int = 24, seed: int = 11):
    rng = np.random.default_rng(seed)
    gaps, fast_s, full_s = [], 0.0, 0.0
    while len(gaps) < count:
        k, c = int(rng.choice([8, 16, 32, 64])), int(rng.choice([3, 8, 16, 32]))
        size, f = int(rng.choice([8, 12, 16, 24, 32])), int(rng.choice([1, 3]))
        stride = int(rng.choice([1, 2]))
        pad = f // 2
        out = (size + 2 * pad - f) // stride + 1
        nest = LoopNest("conv2d", K=k, C=c, OY=out, OX=out, FY=f, FX=f, IY=size, IX=size,
                        stride=(stride, stride), padding=(pad, pad, pad, pad))
        module = str(rng.choice(["cluster", "ne16"]))
        unroll = {"OY": 8, "OX": 2, "K": 4} if module == "cluster" else \
            {"OY": 3, "OX": 3, "K": 32}
        capacity = int(rng.choice([8, 16, 32])) * 1024

        def price(s):
            return cost.price(module, nest, s, constants)

        # each module's whole search space: C in slices on both, the filter too on the cluster
        dims = ("C", "FY", "FX") if module == "cluster" else ("C",)
        a = search(nest, capacity, price, unroll, True, 32, dims)
        b = exhaustive(nest, capacity, price, unroll, True, 32, dims)
        if b.schedule is None:
            continue
        fast_s += a.seconds
        full_s += b.seconds
        gaps.append(a.cost.latency_cycles / b.cost.latency_cycles - 1.0)
    return max(gaps), fast_s, full_s, count


def main(fit_again: bool = False, record_results: bool = True) -> None:
    measurements()
    if fit_again:
        fit("gap9", MEASUREMENTS, str(SHIPPED), FREE, START, FITTED_ON)
    calibration = shipped("gap9")
    calibrated = predictions("gap9", MEASUREMENTS)
    uncalibrated = {row.name: ms for row, ms, _ in
                    predictions("gap9", MEASUREMENTS, UNCALIBRATED)}
    rows, errors = [], {"fit": [], "test": []}
    for row, ms, compiled in calibrated:
        error = ms / row.latency_ms - 1.0
        errors[row.split].append(abs(error))
        rows.append([row.name, row.split, f"{row.latency_ms:.2f}", f"{ms:.2f}",
                     f"{100 * error:+.1f} %", f"{uncalibrated[row.name]:.2f}",
                     f"{compiled.report['summary']['schedule_search_seconds']:.2f} s"])
        if row.name == "ResNet Full":
            mapping = [(r["patterns"][0].split(".")[-1], r["module"], r["macs"])
                       for r in compiled.report["regions"] if r["offloaded"]]
            on_host = sorted({op["op"] for op in compiled.report["operators"]
                              if op["module"] == "host" and op["macs"]})
    table = markdown_table(["measurement", "split", "board, ms", "predicted (calibrated), ms",
                            "error", "paper's model uncalibrated, ms", "schedule search"],
                           rows)
    values = ", ".join(f"{k} = {v:.4g}" for k, v in calibration.values.items())
    kinds = {}
    for kind, module, macs in mapping:
        kinds.setdefault(kind, {}).setdefault(module, []).append(macs)
    fig11 = "; ".join(kind + ": " + ", ".join(
        f"{module} ({len(m)} layer(s) of {', '.join(sorted({f'{x:,}' for x in m}))} MACs)"
        for module, m in sorted(modules.items())) for kind, modules in kinds.items())
    gap, fast_s, full_s, count = optimality_gap(calibration.values)
    stats = calibration.fit
    text = (f"## gap9 (MATCH): predicted latency beside Table IV, calibrated\n\n{table}\n\n"
            f"Board: MATCH's measurement (Table IV, 260 MHz); predicted: the cost models at "
            f"260 MHz with the calibration gap9 ships (`edgebyoc_gap9/calibration/"
            f"match_table_iv.json`), untiled (`--no-dfs`), `ne16_fc=false` (MATCH's NE16 "
            f"library runs no fully connected layer). Fitted on the 8 `fit` rows "
            f"(Cluster+CPU, NE16+CPU) only: largest error {100 * max(errors['fit']):.1f} % "
            f"there, {100 * max(errors['test']):.1f} % on the 8 `test` rows (Full, CPU only); "
            f"R^2 {stats['fit']['r2']:.3f} / {stats['test']['r2']:.3f} and Spearman "
            f"{stats['fit']['spearman']:.3f} / {stats['test']['spearman']:.3f} (fit / test); "
            f"leave-one-out error median {100 * stats['loo_median_error']:.0f} %, largest "
            f"{100 * stats['loo_max_error']:.0f} % (6 constants on 8 points: a constant "
            f"that only one row pins down is free without it).\n\nConstants: {values} "
            f"(sources in `edgebyoc_gap9/cost.py`).\n\nFig. 11's ResNet mapping (Full): "
            f"{fig11}; MAC operators on the fabric controller: {', '.join(on_host) or 'none'}. "
            f"As in Fig. 11, NE16 takes the 3x3 convolutions and the cluster the additions "
            f"and the dense layer; the two 131,072-MAC layers on the cluster are the 1x1 "
            f"stride-2 projections (C = 16 and 32), which the paper says the cluster would "
            f"have run faster than the NE16 it chose (uncalibrated, they go to NE16 as in "
            f"the paper)."
            f"\n\nSchedule search against exhaustive enumeration on {count} random "
            f"convolution workloads (cluster or NE16, L1 8-32 kB, calibrated constants, "
            f"each module's whole space: C cut with partial sums, the filter too on the "
            f"cluster): "
            f"largest optimality gap {100 * gap:.2f} %, search {fast_s:.2f} s against "
            f"{full_s:.2f} s exhaustive.")
    print(text)
    if record_results:
        record("gap9_table_iv", text)


if __name__ == "__main__":
    main(fit_again="--fit" in sys.argv, record_results="--no-record" not in sys.argv)
