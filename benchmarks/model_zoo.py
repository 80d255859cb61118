"""Architectures users bring, exported as they export them, through verify on the host path.

``zoo_export.py`` runs under a Python with torch and transformers (``--python``, default this
one) and exports small configurations with random weights (BERT, DistilBERT, GPT-2, ViT,
Swin, MobileViT, a ShuffleNetV2 unit) with dynamic batch / token axes, so their shapes are
computations in the graph. Each is then compiled for the host at a fixed input shape and
verified against onnxruntime on the model as exported, twice: with the static shape folding
(``onnx_fold``) and without it (what TVM's importer alone does). The table records whether
each imports and verifies, the folded nodes and the largest relative error.

Run: python benchmarks/model_zoo.py [--python /path/to/python-with-torch] [--no-record]
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

import edgebyoc
from edgebyoc import frontend
from edgebyoc.errors import EdgebyocError
from edgebyoc.onnx_fold import FoldResult, fold_static_shapes

sys.path.insert(0, str(Path(__file__).resolve().parent))
from record import markdown_table, record  # noqa: E402


def check(path: Path, shapes: dict, fold: bool):
    """(verdict text, folded nodes, max relative error) of one model, folding on or off."""
    frontend.fold_static_shapes = fold_static_shapes if fold else \
        (lambda model, inputs: FoldResult(model))
    try:
        compiled = edgebyoc.compile(path, input_shapes=shapes)
        result, _ = edgebyoc.verify(compiled, seed=0)
    except EdgebyocError as err:
        return "fails: " + str(err).split(": ", 1)[-1][:90], None, None
    finally:
        frontend.fold_static_shapes = fold_static_shapes
    folded = (compiled.report["model"].get("folded") or {}).get("nodes", 0)
    rel = max(o.rel for o in result.outputs)
    return ("verifies" if result.passed else "mismatch"), folded, rel


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
            folded_verdict, nodes, rel = check(path, shapes, fold=True)
            plain, _, _ = check(path, shapes, fold=False)
            rows.append([name, dims, folded_verdict, str(nodes if nodes is not None else "-"),
                         f"{rel:.2g}" if rel is not None else "-", plain])
            print(rows[-1], flush=True)
    versions = subprocess.run([python, "-c", "import torch, transformers; print(torch.__version__,"
                               " transformers.__version__)"], capture_output=True, text=True)
    torch_version, transformers_version = versions.stdout.split()
    table = markdown_table(["architecture", "input", "host path (folding)", "nodes folded",
                            "max rel. error", "without folding (TVM's importer alone)"], rows)
    text = (f"## Model zoo: exported architectures on the host path\n\n{table}\n\n"
            f"Exported by `benchmarks/zoo_export.py` (torch {torch_version}, transformers "
            f"{transformers_version}, opset 17, TorchScript exporter, dynamic batch / token "
            f"axes, random weights, small configurations), compiled for the host at the input "
            f"shape shown and verified against onnxruntime on the model as exported (rtol "
            f"1e-4). Folding: `core/edgebyoc/onnx_fold.py` (shape inference and ONNX's "
            f"reference evaluator on every value derived from a shape).")
    print(text)
    if record_results:
        record("model_zoo", text)


if __name__ == "__main__":
    args = sys.argv[1:]
    python = args[args.index("--python") + 1] if "--python" in args else sys.executable
    main(python, "--no-record" not in args)
