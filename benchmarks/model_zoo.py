"""Architectures users bring, exported as they export them, through verify on the host path.

``zoo_export.py`` runs under a Python with torch and transformers (``--python``, default this
one) and exports small configurations with random weights (BERT, DistilBERT, GPT-2, ViT, Swin,
MobileViT, a ShuffleNetV2 unit, a ResNet-style CNN, an FCN-style segmentation net) with dynamic
batch / token axes, so their shapes are computations in the graph. Each is then compiled for the
host at a fixed input shape and verified against onnxruntime on the model as exported, twice:
with the static shape folding (``onnx_fold``) and without it (what TVM's importer alone does),
and timed beside onnxruntime. The table records whether each imports and verifies, the folded
nodes, the largest relative error and the latency ratio.

Run: python benchmarks/model_zoo.py [--python /path/to/python-with-torch] [--no-record]
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("TVM_NUM_THREADS", "2")

import edgebyoc  # noqa: E402
from edgebyoc import frontend  # noqa: E402
from edgebyoc.errors import EdgebyocError  # noqa: E402
from edgebyoc.onnx_fold import FoldResult, fold_static_shapes  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from record import interleaved_medians, markdown_table, onnxruntime_session, record  # noqa: E402


def check(path: Path, shapes: dict, fold: bool):
    """(verdict text, folded nodes, max relative error, compiled model or None) of one model,
    folding on or off."""
    frontend.fold_static_shapes = fold_static_shapes if fold else \
        (lambda model, inputs: FoldResult(model))
    try:
        compiled = edgebyoc.compile(path, input_shapes=shapes)
        result, _ = edgebyoc.verify(compiled, seed=0)
    except EdgebyocError as err:
        return "fails: " + str(err).split(": ", 1)[-1][:90], None, None, None
    finally:
        frontend.fold_static_shapes = fold_static_shapes
    folded = (compiled.report["model"].get("folded") or {}).get("nodes", 0)
    rel = max(o.rel for o in result.outputs)
    return ("verifies" if result.passed else "mismatch"), folded, rel, compiled


def speed_ratio(compiled, path: Path, rounds: int = 30) -> float:
    """Our median latency over onnxruntime's on the model as exported: ``compiled.run`` and
    onnxruntime's ``run`` on the same inputs, 2 threads each spinning only within a run
    (``record.onnxruntime_session``), in interleaved rounds after a warm-up, each call after a
    short pause (``record.interleaved_medians``)."""
    import onnx

    inputs = frontend.random_inputs(compiled.inputs, seed=0)
    session = onnxruntime_session(onnx.load(path), spin_within_run=True)
    median = interleaved_medians({"ours": lambda: compiled.run(inputs),
                                  "ort": lambda: session.run(None, inputs)}, rounds)
    return median["ours"] / median["ort"]


def main(python: str, record_results: bool) -> None:
    with tempfile.TemporaryDirectory() as folder:
        exported = subprocess.run([python, str(Path(__file__).with_name("zoo_export.py")),
                                   folder], capture_output=True, text=True, check=True)
        rows = []
        for line in exported.stdout.split("\n"):
            if not line.strip():
                continue
            name, shape = line.split()
            input_name, dims = shape.split("=")
            shapes = {input_name: [int(d) for d in dims.split(",")]}
            path = Path(folder) / f"{name}.onnx"
            folded_verdict, nodes, rel, compiled = check(path, shapes, fold=True)
            ratio = speed_ratio(compiled, path) if compiled is not None else None
            plain, _, _, _ = check(path, shapes, fold=False)
            rows.append([name, dims, folded_verdict, str(nodes if nodes is not None else "-"),
                         f"{rel:.2g}" if rel is not None else "-",
                         f"{ratio:.2f}x" if ratio is not None else "-", plain])
            print(rows[-1], flush=True)
    versions = subprocess.run([python, "-c", "import torch, transformers; print(torch.__version__,"
                               " transformers.__version__)"], capture_output=True, text=True)
    torch_version, transformers_version = versions.stdout.split()
    table = markdown_table(["architecture", "input", "host path (folding)", "nodes folded",
                            "max rel. error", "latency vs onnxruntime",
                            "without folding (TVM's importer alone)"], rows)
    ratios = sorted(float(r[5][:-1]) for r in rows if r[5] != "-")
    text = (f"## Model zoo: exported architectures on the host path\n\n{table}\n\n"
            f"Exported by `benchmarks/zoo_export.py` (torch {torch_version}, transformers "
            f"{transformers_version}, opset 17, TorchScript exporter, dynamic batch / token "
            f"axes, random weights, small configurations), compiled for the host at the input "
            f"shape shown and verified against onnxruntime on the model as exported (rtol "
            f"1e-4). Folding: `core/edgebyoc/onnx_fold.py` (shape inference and ONNX's "
            f"reference evaluator on every value derived from a shape). Latency: our median "
            f"`compiled.run` over onnxruntime's median `run` on the exported model, same inputs, "
            f"2 threads each spinning only within a run, each call after a 0.5 ms pause, "
            f"30 interleaved rounds after a warm-up; "
            f"median ratio {statistics.median(ratios):.2f}x, largest {ratios[-1]:.2f}x. "
            f"The same models run in CI (tox environment `zoo`, `tests_zoo/`), verified on the "
            f"host and on the float targets sparse_cpu and tensorrt wherever they offload "
            f"something.")
    print(text)
    if record_results:
        record("model_zoo", text)


if __name__ == "__main__":
    args = sys.argv[1:]
    python = args[args.index("--python") + 1] if "--python" in args else sys.executable
    main(python, "--no-record" not in args)
