"""The mcu target's cost model fitted to QEMU's instruction counts, and checked on the four
int8 MLPerf Tiny networks.

Calibration (fit): seeded int8 networks built here, none of the MLPerf Tiny ones: 13
one-layer networks (standard convolutions 1x1 to 5x5, depthwise 3x3, dense layers of several
shapes: the kernels one at a time), the conformance suite's residual convolution net at 8 and
16 pixels and MobileNetV1s (16 pixels x0.25, 32 pixels x0.5). Each is compiled for the mcu target, its
C project built for the ISA and run under QEMU with ``-icount shift=0`` (the harness counts the
instructions of ``edgebyoc_network_run``: minstret on RISC-V, SysTick on Cortex-M); the
features of every operator (``edgebyoc_mcu.cost.features``, recorded as the plugin prices
them) summed per network give one equation per network, and the constants come from
non-negative least squares on relative error. They are written to
``plugins/mcu/edgebyoc_mcu/icount.json`` (with the date, QEMU's version and the fit's errors).

Test: the four MLPerf Tiny networks (untiled), predicted by the report against QEMU's count;
recorded in docs/performance.md.

Run: python benchmarks/mcu_icount.py [--no-record] [--no-fit]   (--no-fit: test the shipped
constants only)
"""

from __future__ import annotations

import datetime
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
from scipy.optimize import nnls

import edgebyoc
import edgebyoc_mcu.cost as mcu_cost
from edgebyoc.frontend import random_inputs
from edgebyoc.testing.conformance import int8_convnet, int8_mobilenet_v1

sys.path.insert(0, str(Path(__file__).resolve().parent))
from record import markdown_table, record  # noqa: E402

MODELS = Path(__file__).resolve().parents[2] / "shared" / "models" / "mlperf_tiny"
NETWORKS = [("ResNet-8", "pretrainedResnet_quant"), ("MobileNetV1-0.25 VWW", "vww_96_int8"),
            ("DS-CNN", "kws_ref_model"), ("AutoEncoder", "ad01_int8")]
ISAS = ("cortex-m4", "cortex-m55", "rv32imc")
ICOUNT_JSON = Path(mcu_cost.__file__).with_name("icount.json")


#: One-kernel calibration networks: (name, input shape NCHW, layers); a layer is ("conv",
#: cin, cout, kernel, stride), ("dw", channels, kernel, stride) or ("dense", cin, cout).
LAYERS = [
    ("conv 3x3 8->16 @16", [1, 8, 16, 16], [("conv", 8, 16, 3, 1)]),
    ("conv 3x3 16->16 @8", [1, 16, 8, 8], [("conv", 16, 16, 3, 1)]),
    ("conv 3x3 32->32 @8", [1, 32, 8, 8], [("conv", 32, 32, 3, 1)]),
    ("conv 3x3 3->16 /2 @32", [1, 3, 32, 32], [("conv", 3, 16, 3, 2)]),
    ("conv 1x1 16->32 @16", [1, 16, 16, 16], [("conv", 16, 32, 1, 1)]),
    ("conv 1x1 64->64 @6", [1, 64, 6, 6], [("conv", 64, 64, 1, 1)]),
    ("conv 5x5 8->8 @12", [1, 8, 12, 12], [("conv", 8, 8, 5, 1)]),
    ("dw 3x3 16 @16", [1, 16, 16, 16], [("dw", 16, 3, 1)]),
    ("dw 3x3 64 @8", [1, 64, 8, 8], [("dw", 64, 3, 1)]),
    ("dw 3x3 32 /2 @16", [1, 32, 16, 16], [("dw", 32, 3, 2)]),
    ("dense 64->12", [1, 64], [("dense", 64, 12)]),
    ("dense 640->128", [1, 640], [("dense", 640, 128)]),
    ("dense 256->256", [1, 256], [("dense", 256, 256)]),
]


def layer_model(name, shape, layers, per_channel=False):
    """A float model of ``layers`` quantized to QDQ int8 with int8 input and output."""
    from edgebyoc.testing.conformance import int8_io, qdq_int8
    from edgebyoc.testing.models import GraphBuilder

    g = GraphBuilder(0)
    x, out = "input", list(shape)
    for layer in layers:
        if layer[0] == "conv":
            _, cin, cout, kernel, stride = layer
            x = g.conv(x, cin, cout, kernel, stride=stride)
            out = [1, cout, -(-out[2] // stride), -(-out[3] // stride)]
        elif layer[0] == "dw":
            _, channels, kernel, stride = layer
            x = g.conv(x, channels, channels, kernel, stride=stride, groups=channels)
            out = [1, channels, -(-out[2] // stride), -(-out[3] // stride)]
        else:
            _, cin, cout = layer
            x = g.dense(x, cin, cout)
            out = [1, cout]
    return int8_io(qdq_int8(g.model("input", list(shape), x, out, name.replace(" ", "_")),
                            per_channel=per_channel))


def calibration_models():
    models = [(name, layer_model(name, shape, layers)) for name, shape, layers in LAYERS]
    models += [(f"int8_convnet {size}", int8_convnet(size)) for size in (8, 16)]
    models += [(f"int8_mobilenet_v1 {size} x{width}", int8_mobilenet_v1(size, width))
               for size, width in ((16, 0.25), (32, 0.5))]
    return models


def measure(model, isas, isa_option: str = "cortex-m4") -> tuple[np.ndarray, dict, float]:
    """(the network's summed features, QEMU's instruction count on each of ``isas``, the
    report's prediction for ``isa_option``): one compile, one QEMU run per ISA (the C project
    is the same for every ISA; the option only selects the constants that price it)."""
    recorded = []
    original = mcu_cost.features

    def spy(workload):
        values = original(workload)
        recorded.append(values)
        return values

    mcu_cost.features = spy
    try:
        compiled = edgebyoc.compile(model, target="mcu", options={"isa": isa_option},
                                    dfs=False)
    finally:
        mcu_cost.features = original
    counts = {}
    for isa in isas:
        run, _ = compiled.check_on_qemu(isa, inputs=random_inputs(compiled.inputs, seed=0),
                                        record=False)
        counts[isa] = run.instructions
    totals = np.array([sum(r[f] for r in recorded) for f in mcu_cost.FEATURES])
    return totals, counts, compiled.report["summary"]["predicted_cycles"]


def fit(rows: list[tuple[np.ndarray, int]]) -> tuple[np.ndarray, list[float]]:
    """Non-negative constants minimising the relative errors; the errors of the fit."""
    a = np.array([f / count for f, count in rows])
    b = np.ones(len(rows))
    scale = a.max(axis=0)
    scale[scale == 0] = 1.0
    theta, _ = nnls(a / scale, b)
    theta = theta / scale
    return theta, [float(f @ theta / count - 1) for f, count in rows]


def qemu_version() -> str:
    return subprocess.run(["qemu-system-arm", "--version"], capture_output=True,
                          text=True).stdout.splitlines()[0]


def main(record_results: bool = True, refit: bool = True) -> None:
    if refit:
        data = {"source": "benchmarks/mcu_icount.py", "date": datetime.date.today().isoformat(),
                "qemu": qemu_version(), "features": list(mcu_cost.FEATURES), "isas": {}}
        models = calibration_models()
        measured = []
        for name, model in models:
            totals, counts, _ = measure(model, ISAS)
            measured.append((totals, counts))
            print(f"{name}: {counts}", flush=True)
        for isa in ISAS:
            rows = [(totals, counts[isa]) for totals, counts in measured]
            theta, errors = fit(rows)
            data["isas"][isa] = {
                "constants": {f: round(float(t), 4) for f, t in zip(mcu_cost.FEATURES, theta)},
                "calibration": [{"network": name, "instructions": count,
                                 "fit_error": round(err, 4)}
                                for (name, _), (_, count), err in zip(models, rows, errors)]}
            print(isa, data["isas"][isa]["constants"], flush=True)
        ICOUNT_JSON.write_text(json.dumps(data, indent=1) + "\n")
        mcu_cost.calibration.cache_clear()
    data = json.loads(ICOUNT_JSON.read_text())
    rows, worst = [], 0.0
    for label, file in NETWORKS:
        for isa in ISAS:
            _, counts, predicted = measure(str(MODELS / f"{file}.tflite"), [isa], isa)
            count = counts[isa]
            error = predicted / count - 1
            worst = max(worst, abs(error))
            rows.append([label, isa, f"{count:,}", f"{predicted:,.0f}", f"{error:+.1%}"])
            print(" | ".join(rows[-1]), flush=True)
    table = markdown_table(["network", "ISA", "QEMU instructions", "predicted", "error"], rows)
    constants = markdown_table(
        ["ISA", *mcu_cost.FEATURES, "worst calibration error"],
        [[isa, *(f"{v:g}" for v in entry["constants"].values()),
          f"{max(abs(c['fit_error']) for c in entry['calibration']):.1%}"]
         for isa, entry in data["isas"].items()])
    notes = (f"The mcu target's predicted instructions (the report's predicted cycles: the "
             f"cost model of `plugins/mcu/edgebyoc_mcu/cost.py`, instructions per convolution "
             f"MAC, per filter tap of an output, per convolution output, per dense MAC, per "
             f"element of the other operators, per operator) against the instructions QEMU counts "
             f"(`-icount shift=0`) while `edgebyoc_network_run` runs the C project built for "
             f"each ISA (untiled; -O2). The constants were fitted on {len(calibration_models())} "
             f"calibration networks built here (none of these four) by non-negative least "
             f"squares on relative error ({data['date']}, {data['qemu']}): worst error on "
             f"the four networks {worst:.1%}.")
    print(table)
    print(constants)
    if record_results:
        record("mcu_icount", "## mcu: predicted instructions against QEMU's count\n\n" + table
               + "\n\nConstants (instructions per feature):\n\n" + constants + "\n\n" + notes)


if __name__ == "__main__":
    main(record_results="--no-record" not in sys.argv, refit="--no-fit" not in sys.argv)
