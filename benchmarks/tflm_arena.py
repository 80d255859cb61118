"""Activation RAM of the deployable C projects beside TensorFlow Lite Micro's arena.

For the four int8 MLPerf Tiny networks on gap9 and diana: the C project's static arena, the
input / output buffers the caller holds beside it, their total, and the total with
``--io-in-arena`` (inputs and outputs in the arena, as TFLite Micro keeps them), beside TFLite
Micro's activation arena ("Arena allocation head", inputs and outputs included) measured by its
Python interpreter (``pip install tflite-micro``; without it, the figures measured on this
machine in ../shared/notes/facts.md). No depth-first tiling yet (1.00x MACs); the predicted
latency is the report's. TFLite Micro's outputs are compared with edgebyoc's gap9 build whose
layers all round as TFLite does (cluster only).

Run: python benchmarks/tflm_arena.py [--no-record]
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import numpy as np

import edgebyoc
from edgebyoc.frontend import random_inputs

sys.path.insert(0, str(Path(__file__).resolve().parent))
from record import markdown_table, record  # noqa: E402

MODELS = Path(__file__).resolve().parents[2] / "shared" / "models" / "mlperf_tiny"
NETWORKS = [("ResNet-8", "pretrainedResnet_quant"), ("MobileNetV1-0.25 VWW", "vww_96_int8"),
            ("DS-CNN", "kws_ref_model"), ("AutoEncoder", "ad01_int8")]
#: TFLite Micro's arena head measured here (../shared/notes/facts.md), when it is not installed
TFLM_FACTS = {"pretrainedResnet_quant": 49_152, "vww_96_int8": 73_728, "kws_ref_model": 16_000,
              "ad01_int8": 768}
SEEDS = range(5)
SCRIPT = """
import sys, numpy as np
from tflite_micro.python.tflite_micro import runtime
it = runtime.Interpreter.from_file(sys.argv[1])
x = np.load(sys.argv[2])
it.set_input(x, 0); it.invoke(); np.save(sys.argv[3], it.get_output(0))
it.print_allocations()
"""


def tflite_micro(file: str, x: np.ndarray, scratch: Path):
    """(arena head bytes, output) from TFLite Micro's interpreter, or (facts figure, None)."""
    import importlib.util

    if importlib.util.find_spec("tflite_micro") is None:
        return TFLM_FACTS[file], None
    np.save(scratch / "x.npy", x)
    done = subprocess.run([sys.executable, "-c", SCRIPT, str(MODELS / f"{file}.tflite"),
                           str(scratch / "x.npy"), str(scratch / "y.npy")],
                          capture_output=True, text=True, check=True)
    head = re.search(r"Arena allocation head (\d+) bytes", done.stdout + done.stderr)
    return int(head.group(1)), np.load(scratch / "y.npy")


def main(record_results: bool = True) -> None:
    import tempfile

    rows, agreement = [], []
    with tempfile.TemporaryDirectory() as folder:
        for name, file in NETWORKS:
            path = str(MODELS / f"{file}.tflite")
            cluster = edgebyoc.compile(path, target="gap9", options={"modules": "cluster"})
            diffs = []
            for seed in SEEDS:
                x = random_inputs(cluster.inputs, seed=seed)
                head, reference = tflite_micro(file, list(x.values())[0], Path(folder))
                if reference is not None:
                    ours = list(cluster.run(x).values())[0].reshape(reference.shape)
                    diffs.append(np.abs(ours.astype(np.int32) - reference.astype(np.int32)))
            if diffs:
                diff = np.concatenate([d.ravel() for d in diffs])
                agreement.append(f"{name} {100 * float(np.mean(diff == 0)):.1f} % identical "
                                 f"(max {int(diff.max())} LSB)")
            for target in ("gap9", "diana"):
                apart = edgebyoc.compile(path, target=target).report
                inside = edgebyoc.compile(path, target=target, io_in_arena=True).report
                a, b = apart["c_project"], inside["c_project"]
                rows.append([name, target, f"{a['arena_bytes']:,}", f"{a['io_bytes']:,}",
                             f"{a['total_activation_bytes']:,}",
                             f"{b['total_activation_bytes']:,}", f"{head:,}",
                             f"{b['total_activation_bytes'] / head:.2f}x", "1.00x",
                             f"{apart['summary']['predicted_latency_ms']:.3g}"])
                print(rows[-1], flush=True)
    headers = ["network", "target", "arena (B)", "caller's I/O (B)", "total (B)",
               "total, --io-in-arena (B)", "TFLite Micro arena (B)", "ours / TFLM",
               "MACs", "predicted ms"]
    source = "measured by its Python interpreter" if agreement else \
        "as measured on this machine (../shared/notes/facts.md; tflite-micro not installed)"
    text = ("## C projects: activation RAM beside TensorFlow Lite Micro\n\n"
            + markdown_table(headers, rows)
            + f"\n\nTotal activation RAM of a C project = its static arena + the input and "
              f"output buffers the caller holds while the network runs; with `--io-in-arena` "
              f"the arena holds them and reuses the input's bytes once it is dead. TFLite "
              f"Micro's arena head (inputs and outputs included) {source}. No depth-first "
              f"tiling in C projects yet (issue #18): MACs are the model's. diana's digital "
              f"array reads channel planes: the NCHW copy of an NHWC network input is an "
              f"arena tensor beside the caller's input, unless the arena holds the input too "
              f"(--io-in-arena), whose bytes the copy then reuses.")
    if agreement:
        text += ("\n\nTFLite Micro's int8 outputs against edgebyoc's gap9 build with every "
                 f"layer rounding as TFLite does (cluster only), over {len(SEEDS)} seeded "
                 f"random inputs: "
                 + "; ".join(agreement) + ". Integer average pooling rounds half away from "
                 "zero as TFLite does (TVM's importer alone truncates: 2 of these networks then "
                 "differ by up to tens of LSBs).")
    print(text)
    if record_results:
        record("tflm_arena", text)


if __name__ == "__main__":
    main(record_results="--no-record" not in sys.argv)
