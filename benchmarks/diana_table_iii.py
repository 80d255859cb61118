"""diana: predicted latency of the four int8 MLPerf Tiny networks beside MATCH's Table III, and
MACs per cycle against the L1 size like its Fig. 9.

For each network the model is compiled for diana and its latency predicted at 260 MHz: the
offloaded layers by the plugin's cost models (digital array: L_ops + L_mem with 23 cycles per
output pass and 70 cycles per DMA chunk) under the schedule the search found, the layers left
on the RISC-V core by the host model, with the calibration diana ships
(``edgebyoc_diana/calibration/match_table_iii.json``). ``--fit`` fits it again on
``calibration/diana_table_iii.csv``: the TVM column (host only: ResNet, DS-CNN, autoencoder)
and MATCH's MobileNet and autoencoder figures; MATCH's ResNet and DS-CNN figures are the test
points. Fitted: the depthwise efficiency, the weight memory's bandwidth and the host's two
constants; the convolution efficiency stays at the paper's 95 % (VI-A). The L1 sweep
(256 ... 8 kB) gives MACs per cycle of the whole network (host layers included) and is
plotted to docs/diana_fig9.png.

Run: python benchmarks/diana_table_iii.py [--fit] [--no-record]
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

import edgebyoc
from edgebyoc.calibration import UNCALIBRATED
from edgebyoc_diana import cost

sys.path.insert(0, str(Path(__file__).resolve().parent))
from calibration_table import HERE, fit, predictions, shipped, write_measurements  # noqa: E402
from record import markdown_table, record  # noqa: E402

MODELS = Path(__file__).resolve().parents[2] / "shared" / "models" / "mlperf_tiny"
NETWORKS = [("MobileNet", "vww_96_int8"), ("ResNet", "pretrainedResnet_quant"),
            ("DSCNN", "kws_ref_model"), ("DAE", "ad01_int8")]
#: MATCH, Table III, DIANA columns: TVM, HTVM, MATCH (ms, board measurements; None: OoM)
PAPER = {"MobileNet": (None, 6.17, 6.08), "ResNet": (133.1, 1.27, 0.79),
         "DSCNN": (49.16, 7.26, 7.3), "DAE": (2.58, 0.36, 0.4)}
L1_SIZES = [256, 128, 64, 32, 16, 8]
PLOT = Path(__file__).resolve().parents[1] / "docs" / "diana_fig9.png"
MEASUREMENTS = HERE / "calibration" / "diana_table_iii.csv"
FIT_NETWORKS = ("MobileNet", "DAE")  # MATCH column rows fitted on; the others are tests
FREE = ["digital_dw_efficiency", "weight_bytes_per_cycle", "host_cycles_per_mac",
        "host_cycles_per_element"]
START = {"digital_efficiency": 0.95}
SHIPPED = Path(cost.__file__).parent / "calibration" / "match_table_iii.json"
FITTED_ON = ("MATCH Table III: DIANA's TVM column (3 figures) and MATCH's MobileNet and "
             "autoencoder figures")


def measurements(fit_networks=FIT_NETWORKS, path=MEASUREMENTS) -> None:
    rows = []
    for name, file in NETWORKS:
        model = f"../../../shared/models/mlperf_tiny/{file}.tflite"
        tvm, _, match = PAPER[name]
        if tvm:
            rows.append((f"{name} TVM", model, "modules=", "fit", tvm))
        rows.append((f"{name} MATCH", model, "modules=digital",
                     "fit" if name in fit_networks else "test", match))
    write_measurements(path, rows)


def calibration_table(fit_again: bool):
    """The fit / test table of the 4 MATCH points (and the 3 TVM ones), and a robustness
    check: the other split (DS-CNN and the autoencoder fitted, MobileNet and ResNet tested)."""
    measurements()
    if fit_again:
        fit("diana", MEASUREMENTS, str(SHIPPED), FREE, START, FITTED_ON)
    calibration = shipped("diana")
    uncalibrated = {row.name: ms for row, ms, _ in
                    predictions("diana", MEASUREMENTS, UNCALIBRATED)}
    rows, worst = [], {"fit": 0.0, "test": 0.0}
    for row, ms, _ in predictions("diana", MEASUREMENTS):
        error = ms / row.latency_ms - 1.0
        worst[row.split] = max(worst[row.split], abs(error))
        rows.append([row.name, row.split, f"{row.latency_ms:.2f}", f"{ms:.2f}",
                     f"{100 * error:+.1f} %", f"{uncalibrated[row.name]:.2f}"])
    other = HERE / "calibration" / "diana_table_iii_other_split.csv"
    measurements(("DSCNN", "DAE"), other)
    with tempfile.TemporaryDirectory() as scratch:
        result = fit("diana", other, str(Path(scratch) / "other.json"), FREE, START, "")
    other.unlink()
    check = ", ".join(f"{r['name']} {100 * r['error']:+.1f} %" for r in result.rows
                      if r["split"] == "test")
    table = markdown_table(["measurement", "split", "board, ms", "predicted (calibrated), ms",
                            "error", "uncalibrated, ms"], rows)
    values = ", ".join(f"{k} = {v:.4g}" for k, v in calibration.values.items())
    return (f"{table}\n\nBoard: MATCH's Table III (260 MHz); predicted with the calibration "
            f"diana ships, untiled. Fitted on the `fit` rows only (largest error "
            f"{100 * worst['fit']:.1f} %); test rows: largest error "
            f"{100 * worst['test']:.1f} %. The other split (DS-CNN and autoencoder fitted, "
            f"MobileNet and ResNet tested) gives {check}. Constants: {values} (sources in "
            f"`edgebyoc_diana/cost.py`).")


def network(file: str, **options):
    # untiled (no depth-first streaming of the C project): the latency MATCH measures
    compiled = edgebyoc.compile(str(MODELS / f"{file}.tflite"), target="diana", options=options,
                                dfs=False)
    macs = sum(row["macs"] for row in compiled.report["operators"])
    return compiled.report, compiled.report["summary"]["predicted_cycles"], macs


def main(fit_again: bool = False, record_results: bool = True) -> None:
    calibrated = calibration_table(fit_again)
    rows, sweep = [], {}
    for name, file in NETWORKS:
        start = time.perf_counter()
        report, cycles, macs = network(file)
        elapsed = time.perf_counter() - start
        _, host_only, _ = network(file, modules="")
        tvm, htvm, match = PAPER[name]
        on_host = [r for r in report["operators"] if r["module"] == "host" and r["macs"]]
        rows.append([name, f"{macs / 1e6:.2f}",
                     f"{host_only / cost.CLOCK_HZ * 1e3:.2f} / "
                     + (f"{tvm:.2f}" if tvm else "OoM"),
                     f"{cycles / cost.CLOCK_HZ * 1e3:.2f}", f"{htvm:.2f}", f"{match:.2f}",
                     f"{macs / cycles:.1f}",
                     f"{sum(r['offloaded'] for r in report['regions'])} / {len(on_host)}",
                     f"{elapsed:.1f} s"])
        sweep[name] = []
        for l1_kb in L1_SIZES:
            _, cycles_at, _ = network(file, l1_kb=l1_kb) if l1_kb >= 8 else (None, 0, 0)
            sweep[name].append(macs / cycles_at)
        print(name, rows[-1], [f"{v:.1f}" for v in sweep[name]], flush=True)
    headers = ["network", "M MACs", "host only: ours / paper TVM, ms", "diana (ours), ms",
               "HTVM (paper), ms", "MATCH (paper), ms", "MACs/cycle (ours)",
               "layers offloaded / MAC layers on host", "compile"]
    table = markdown_table(headers, rows)
    fig9 = markdown_table(["network"] + [f"L1 {kb} kB" for kb in L1_SIZES],
                          [[name] + [f"{v:.1f}" for v in values]
                           for name, values in sweep.items()])
    plot(sweep)
    text = (f"## diana (MATCH): predicted latency beside Table III, MACs/cycle against L1\n\n"
            f"{calibrated}\n\n{table}\n\nOurs: the cost model's prediction at 260 MHz with the "
            f"shipped calibration (digital accelerator; the "
            f"MLPerf Tiny weights are not ternary, so the analog array takes no layer), "
            f"untiled (`--no-dfs`: the C project is not streamed depth-first); paper: "
            f"board measurements (Table III).\n\nMACs per cycle of the whole network against the "
            f"activation L1 size (Fig. 9; the 64 kB weight memory is fixed), predicted:\n\n"
            f"{fig9}\n\nThe digital array's activations are channel planes cut in rows "
            f"(DIANA's NCHW-derived layout, here NHCW: row y of channel c at (y * C + c) * W): "
            f"a tile narrower than the output needs a DMA chunk (70 cycles) per row of each "
            f"channel, so the layers that must be tiled by columns at small L1 pay for it, "
            f"which the curve shows.\n\n"
            f"![MACs/cycle against L1]({PLOT.name})")
    print(text)
    if record_results:
        record("diana_table_iii", text)


def plot(sweep) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(figsize=(6, 3.5))
    for name, values in sweep.items():
        axes.plot(L1_SIZES, values, marker="o", label=name)
    axes.set_xscale("log", base=2)
    axes.set_xticks(L1_SIZES, [str(v) for v in L1_SIZES])
    axes.set_xlabel("activation L1 (kB)")
    axes.set_ylabel("MACs / cycle (predicted)")
    axes.set_title("diana: MACs per cycle against L1 size (cf. MATCH Fig. 9)")
    axes.legend()
    figure.tight_layout()
    figure.savefig(PLOT, dpi=110)


if __name__ == "__main__":
    main(fit_again="--fit" in sys.argv, record_results="--no-record" not in sys.argv)
