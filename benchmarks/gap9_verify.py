"""gap9: the four int8 MLPerf Tiny networks verified at every L1 size, with their C projects.

For each network and L1 size (128, 64, 32, 16, 8 kB) the network is compiled for gap9, its
deployable C project (which the artifact runs) executed on 3 seeded random inputs, and compared
(``edgebyoc verify``'s integer checks):

- numpy-integer: the numpy executor of the same integer graph with each layer's hardware
  rounding (must be bit-exact: proves tiling, offsets, DMA and buffering);
- tvm-integer-host: TVM's host build of that graph with TFLite's requantization everywhere
  (the model's int8 reference): share of identical outputs, largest difference in LSBs;
- TensorFlow Lite Micro (``pip install tflite-micro``) on the original .tflite: what MCU users
  deploy today; identical wherever every layer rounds as TFLite does.

Also printed: the layers offloaded / left on the host, the static activation arena of the
project against its lower bound, and the modules whose rounding differs from TFLite's.

Run: python benchmarks/gap9_verify.py [--no-record]
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

import edgebyoc
from edgebyoc.frontend import random_inputs
from edgebyoc.verify import verify

sys.path.insert(0, str(Path(__file__).resolve().parent))
from record import markdown_table, record  # noqa: E402

MODELS = Path(__file__).resolve().parents[2] / "shared" / "models" / "mlperf_tiny"
NETWORKS = [("MobileNet", "vww_96_int8"), ("ResNet", "pretrainedResnet_quant"),
            ("DSCNN", "kws_ref_model"), ("DAE", "ad01_int8")]
L1_SIZES = (128, 64, 32, 16, 8)
SEEDS = (0, 1, 2)


def tflite_micro_outputs(path: str, inputs: dict) -> list[np.ndarray] | None:
    try:
        from tflite_micro.python.tflite_micro import runtime
    except ImportError:
        return None
    interpreter = runtime.Interpreter.from_file(path)
    for index, value in enumerate(inputs.values()):
        interpreter.set_input(value, index)
    interpreter.invoke()
    return [interpreter.get_output(0)]


def main(record_results: bool = True) -> None:
    rows = []
    for name, stem in NETWORKS:
        path = str(MODELS / f"{stem}.tflite")
        for l1_kb in L1_SIZES:
            compiled = edgebyoc.compile(path, target="gap9", options={"l1_kb": l1_kb})
            regions = compiled.report["regions"]
            offloaded = sum(r["offloaded"] for r in regions)
            host_layers = sum(1 for row in compiled.report["operators"]
                              if row["module"] == "host" and row["macs"])
            stats = {"numpy": [0, 0, 0], "tvm": [0, 0, 0], "tflm": [0, 0, 0]}
            passed, note, layer_lsb = True, "", 0
            for seed in SEEDS:
                x = random_inputs(compiled.inputs, seed=seed)
                result, outputs = verify(compiled, inputs=x)
                passed &= result.passed
                note = ", ".join(f"{m}: {r}" for m, r in result.integer.rounding.items()) or "-"
                layer_lsb = max(layer_lsb, result.integer.max_layer_lsb)
                for key, row in zip(("numpy", "tvm"), result.integer.agreements):
                    total = sum(np.asarray(v).size for v in outputs.values())
                    stats[key][0] += round(row.identical_share * total)
                    stats[key][1] += total
                    stats[key][2] = max(stats[key][2], row.max_lsb)
                lite = tflite_micro_outputs(path, x)
                if lite is not None:
                    out = np.asarray(list(outputs.values())[0]).astype(int)
                    diff = np.abs(out - lite[0].astype(int).reshape(out.shape))
                    stats["tflm"][0] += int((diff == 0).sum())
                    stats["tflm"][1] += diff.size
                    stats["tflm"][2] = max(stats["tflm"][2], int(diff.max()))
            project = compiled.report["c_project"]

            def cell(key):
                same, total, worst = stats[key]
                return f"{100 * same / total:.1f} % / {worst}" if total else "n/a"

            rows.append([name, l1_kb, f"{offloaded} / {host_layers}",
                         "yes" if passed else "NO", cell("numpy"), cell("tvm"), cell("tflm"),
                         note, layer_lsb,
                         f"{project['arena_bytes']} ({project['lower_bound_bytes']})"])
            print(rows[-1], flush=True)
    headers = ["network", "L1 kB", "layers offloaded / on host", "verify",
               "numpy-integer: identical / max LSB", "tvm-integer-host: identical / max LSB",
               "TFLite Micro: identical / max LSB", "rounding otherwise", "max LSB per layer",
               "C arena bytes (lower bound)"]
    table = markdown_table(headers, rows)
    text = (f"## gap9 (MATCH): verification at every L1 size\n\n{table}\n\n"
            f"{len(SEEDS)} seeded random inputs per row; the outputs are those of "
            f"the deployable C project (host binding) the artifact runs. numpy-integer uses each "
            f"layer's hardware rounding; tvm-integer-host is TFLite's requantization everywhere; "
            f"'max LSB per layer' is the largest difference NE16's half-up rounding makes on one "
            f"layer's output for the same accumulators. TensorFlow Lite Micro runs the original "
            f".tflite: identical wherever every layer rounds as TFLite does (integer average "
            f"pooling included, which edgebyoc rounds half away from zero as TFLite does).")
    print(text)
    if record_results:
        record("gap9_verify", text)


if __name__ == "__main__":
    main(record_results="--no-record" not in sys.argv)
