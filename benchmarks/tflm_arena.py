"""Activation RAM of the deployable C projects beside TensorFlow Lite Micro's arena.

For the four int8 MLPerf Tiny networks on gap9 and diana: the C project's static arena, the
input / output buffers the caller holds beside it, their total, and the total with
``--io-in-arena`` (inputs and outputs in the arena, as TFLite Micro keeps them), beside TFLite
Micro's activation arena ("Arena allocation head", inputs and outputs included) measured by its
Python interpreter (``pip install tflite-micro``; without it, the figures measured on this
machine in ../shared/notes/facts.md), untiled and streamed depth-first (``--dfs``: row bands
through ring buffers, 1.00x MACs), with the report's predicted latency of each and a bit-exact
check of the streamed project against the untiled one; then the same for a 224x224 int8
MobileNetV1-0.25 built here. TFLite Micro's outputs are compared with edgebyoc's gap9 build
whose layers all round as TFLite does (cluster only).

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


def _outputs(compiled, seed: int) -> list[np.ndarray]:
    return [np.asarray(v) for v in compiled.run(random_inputs(compiled.inputs, seed=seed))
            .values()]


def _ms(report) -> str:
    value = report["summary"].get("predicted_latency_ms")
    return "n/a" if value is None else f"{value:.3g}"


def main(record_results: bool = True) -> None:
    import tempfile

    rows, agreement, exact = [], [], []
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
                apart = edgebyoc.compile(path, target=target, dfs=False)
                inside = edgebyoc.compile(path, target=target, dfs=False, io_in_arena=True)
                streamed = edgebyoc.compile(path, target=target, dfs=True, io_in_arena=True)
                default = edgebyoc.compile(path, target=target, io_in_arena=True)
                a, b = apart.report["c_project"], inside.report["c_project"]
                total = streamed.project.total_activation_bytes
                same = all(all(np.array_equal(u, v) for u, v in
                               zip(_outputs(inside, seed), _outputs(streamed, seed)))
                           for seed in SEEDS)
                exact.append(same)
                info = default.report["memory"]
                rows.append([name, target, f"{a['arena_bytes']:,}", f"{a['io_bytes']:,}",
                             f"{a['total_activation_bytes']:,}",
                             f"{b['total_activation_bytes']:,}", f"{total:,}",
                             f"{default.project.total_activation_bytes:,}"
                             + (f" (bands of {info['band_rows']})"
                                if info["enabled"] else ""),
                             f"{head:,}", f"{total / head:.2f}x", "1.00x",
                             f"{_ms(inside.report)} / {_ms(streamed.report)}",
                             "yes" if same else "NO"])
                print(rows[-1], flush=True)
    headers = ["network", "target", "arena (B)", "caller's I/O (B)", "total (B)",
               "total, --io-in-arena (B)", "streamed --dfs (B)", "default (B)",
               "TFLite Micro arena (B)", "--dfs / TFLM", "MACs", "predicted ms untiled / --dfs",
               "bit-exact"]
    source = "measured by its Python interpreter" if agreement else \
        "as measured on this machine (../shared/notes/facts.md; tflite-micro not installed)"
    text = ("## C projects: activation RAM beside TensorFlow Lite Micro\n\n"
            + markdown_table(headers, rows)
            + f"\n\nTotal activation RAM of a C project = its static arena + the input and "
              f"output buffers the caller holds while the network runs; with `--io-in-arena` "
              f"the arena holds them and reuses the input's bytes once it is dead. TFLite "
              f"Micro's arena head (inputs and outputs included) {source}. \"streamed --dfs\" "
              f"is `--dfs --io-in-arena`: chains of layers run depth-first in row bands "
              f"through ring buffers (`memory.streaming`), every row computed once (1.00x MACs); "
              f"its predicted latency prices every call with the plugin's cost model (each "
              f"call loads its layer's weights again). \"default\" is the automatic mode with "
              f"`--io-in-arena`: it streams only where that saves 20 % of the RAM at a "
              f"predicted latency within 1.05x (in wider bands, fewer calls). Bit-exact: the "
              f"streamed project's outputs equal the untiled project's over {len(SEEDS)} seeded "
              f"inputs. diana's digital array reads channel planes cut in rows (NHCW, rows "
              f"outermost): its regions stream in it, and a chain's output is written over "
              f"its input's dead rows as in NHWC (with whole planes, NCHW, an output touches "
              f"every plane from its first row on: VWW needed 41,568 bytes).")
    if agreement:
        text += ("\n\nTFLite Micro's int8 outputs against edgebyoc's gap9 build with every "
                 f"layer rounding as TFLite does (cluster only), over {len(SEEDS)} seeded "
                 f"random inputs: "
                 + "; ".join(agreement) + ". Integer average pooling rounds half away from "
                 "zero as TFLite does (TVM's importer alone truncates: 2 of these networks then "
                 "differ by up to tens of LSBs).")
    text += "\n\n" + high_resolution()
    print(text)
    if record_results:
        record("tflm_arena", text)
    if not all(exact):
        raise SystemExit("a streamed project differs from its untiled build")


def high_resolution() -> str:
    """MobileNetV1-0.25 at 224x224 (QDQ int8 by onnxruntime, int8 input and output)."""
    from edgebyoc.testing.conformance import int8_mobilenet_v1

    model = int8_mobilenet_v1(224)
    rows = []
    for target in ("gap9", "diana"):
        runs = {(dfs, io): edgebyoc.compile(model, target=target, dfs=dfs, io_in_arena=io)
                for dfs in (False, True) for io in (False, True)}
        same = all(np.array_equal(u, v) for u, v in zip(_outputs(runs[False, False], 0),
                                                        _outputs(runs[True, False], 0)))
        arena = [runs[d, False].project.arena.size_bytes for d in (False, True)]
        inside = [runs[d, True].project.total_activation_bytes for d in (False, True)]
        total = [runs[d, False].project.total_activation_bytes for d in (False, True)]
        rows.append([target, f"{arena[0]:,}", f"{arena[1]:,}", f"{arena[0] / arena[1]:.1f}x",
                     f"{total[0]:,}", f"{total[1]:,}", f"{total[0] / total[1]:.2f}x",
                     f"{inside[0]:,}", f"{inside[1]:,}", "1.00x",
                     f"{_ms(runs[False, False].report)} / {_ms(runs[True, False].report)}",
                     "yes" if same else "NO"])
        print(rows[-1], flush=True)
    headers = ["target", "arena untiled (B)", "arena --dfs (B)", "reduction",
               "total untiled (B)", "total --dfs (B)", "reduction",
               "--io-in-arena untiled (B)", "--io-in-arena --dfs (B)", "MACs",
               "predicted ms untiled / --dfs", "bit-exact"]
    return ("### A high-resolution int8 network: MobileNetV1-0.25 at 224x224\n\n"
            + markdown_table(headers, rows)
            + "\n\n`edgebyoc.testing.conformance.int8_mobilenet_v1(224)`: seeded random "
              "weights quantized by onnxruntime (QDQ), taking and giving int8 tensors. Its "
              "112x112 layers dominate the arena, which streaming cuts several-fold; the "
              "caller's 150,528-byte int8 input bounds the total from below (with "
              "`--io-in-arena` the first chain's output is written over the input's rows "
              "already read). The average pooling runs in float here (onnxruntime's QDQ "
              "leaves it unquantized), and its float copy is the streamed arena's peak.")


if __name__ == "__main__":
    main(record_results="--no-record" not in sys.argv)
