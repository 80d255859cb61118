"""33 real architectures as users bring them, through the host path: do they import, verify,
and how fast do they run beside onnxruntime?

``real_models_export.py`` (run with a Python that has torch, torchvision, timm and
transformers: ``--python``) exports torchvision classification, segmentation and detection
models, Hugging Face transformers from their default configurations and timm models, full
size, random weights, opset 17, dynamic batch / token axes. Each is then compiled for the host
at batch 1 (128 tokens for text) in a process of its own (a crash or a hang is one row, not
the end of the run), verified against onnxruntime on the model as exported (``verify``'s
default tolerance) and timed beside it: our median ``compiled.run`` over onnxruntime's median
``run``, 2 threads each, both spinning only within a run, each call after a short
pause (``model_zoo.speed_ratio``), interleaved rounds.

Issue #32's goal: at least 32 of the 33 verify (Faster R-CNN may end in one line naming what it
lacks); #30's: a median latency ratio of at most 1.0x and none above 1.5x.

Run: python benchmarks/real_models.py [--python PY] [--models DIR] [--rounds 15] [--no-record]
     [NAME ...]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

os.environ.setdefault("TVM_NUM_THREADS", "2")
sys.path.insert(0, str(Path(__file__).resolve().parent))

from record import machine, markdown_table, record  # noqa: E402

#: seconds one model may take to compile, verify and be timed
MODEL_TIMEOUT = 1800


def one(path: Path, rounds: int) -> dict:
    """Compile, verify and time one exported model (the child process's work)."""
    import edgebyoc
    from edgebyoc.errors import EdgebyocError
    from model_zoo import speed_ratio

    meta = json.loads(path.with_suffix(".json").read_text())
    shape = meta["input_shape"]
    row = {"family": meta["family"], "input": "x".join(map(str, shape))}
    start = time.perf_counter()
    try:
        compiled = edgebyoc.compile(path, input_shapes={"input": shape})
    except EdgebyocError as err:
        return {**row, "verdict": "compile: " + str(err).split(": ", 1)[-1][:160]}
    row["compile_s"] = time.perf_counter() - start
    try:
        result, _ = edgebyoc.verify(compiled, seed=0)
    except EdgebyocError as err:
        return {**row, "verdict": "verify: " + str(err).split(": ", 1)[-1][:160]}
    row["rel"] = max(o.rel for o in result.outputs)
    row["verdict"] = "verifies" if result.passed else "MISMATCH"
    if result.passed:
        row["ratio"] = speed_ratio(compiled, path, rounds)
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--python", default=sys.executable)
    parser.add_argument("--models", default=str(Path.home() / ".cache" / "edgebyoc" /
                                                "real_models"))
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--no-record", action="store_true")
    parser.add_argument("--one", help=argparse.SUPPRESS)
    parser.add_argument("names", nargs="*")
    args = parser.parse_args()
    if args.one:
        print("RESULT " + json.dumps(one(Path(args.one), args.rounds)), flush=True)
        return
    directory = Path(args.models)
    subprocess.run([args.python, str(Path(__file__).with_name("real_models_export.py")),
                    str(directory), *args.names], check=True)
    names = args.names or sorted(p.stem for p in directory.glob("*.json"))
    names += sorted(p.stem for p in directory.glob("*.error") if p.stem not in names)
    rows, results = [], {}
    for name in names:
        path = directory / f"{name}.onnx"
        if not path.exists():
            error = (directory / f"{name}.error").read_text().strip().splitlines()[-1]
            results[name] = {"family": "?", "input": "-", "verdict": "export: " + error[:160]}
        else:
            try:
                child = subprocess.run([sys.executable, __file__, "--one", str(path),
                                        "--rounds", str(args.rounds)], capture_output=True,
                                       text=True, timeout=MODEL_TIMEOUT)
                found = [line for line in child.stdout.splitlines()
                         if line.startswith("RESULT ")]
                results[name] = json.loads(found[-1][7:]) if found else {
                    "family": "", "input": "-",
                    "verdict": f"crashed (exit {child.returncode}): "
                               + (child.stderr.strip().splitlines() or [""])[-1][:160]}
            except subprocess.TimeoutExpired:
                results[name] = {"family": "", "input": "-",
                                 "verdict": f"over {MODEL_TIMEOUT} s"}
        r = results[name]
        rows.append([name, r["family"], r["input"], r["verdict"],
                     f"{r['rel']:.2g}" if "rel" in r else "-",
                     f"{r['ratio']:.2f}x" if "ratio" in r else "-",
                     f"{r['compile_s']:.0f} s" if "compile_s" in r else "-"])
        print(rows[-1], flush=True)
    verified = [r for r in results.values() if r["verdict"] == "verifies"]
    ratios = sorted(r["ratio"] for r in verified)
    table = markdown_table(["architecture", "family", "input", "host path", "max rel. error",
                            "latency vs onnxruntime", "compile"], rows)
    versions = subprocess.run(
        [args.python, "-c", "import torch, torchvision, timm, transformers; print(torch."
         "__version__, torchvision.__version__, timm.__version__, transformers.__version__)"],
        capture_output=True, text=True).stdout.split()
    summary = (f"{len(verified)} of {len(results)} verify; latency against onnxruntime: "
               f"median {statistics.median(ratios):.2f}x, largest {ratios[-1]:.2f}x "
               f"({sum(r <= 1.5 for r in ratios)} of {len(ratios)} within 1.5x)." if ratios
               else f"{len(verified)} of {len(results)} verify.")
    text = (f"## Real architectures on the host path ({machine()})\n\n{table}\n\n{summary} "
            f"Exported by `benchmarks/real_models_export.py` (torch, torchvision, timm, "
            f"transformers {' / '.join(versions)}; full size, random weights with calibrated "
            f"batch-norm statistics, opset 17, TorchScript exporter, dynamic batch / token "
            f"axes), compiled for the host at the input shown, verified against onnxruntime "
            f"on the model as exported (verify's default tolerance), timed as `compiled.run` "
            f"against onnxruntime's `run`, 2 threads each spinning only within a run "
            f"(edgebyoc's default thread-pool spin count, onnxruntime's "
            f"`session.force_spinning_stop`), each call after a 0.5 ms pause, "
            f"{args.rounds} interleaved rounds, medians.")
    print(text)
    if not args.no_record:
        record("real_models", text, per_cpu=True)


if __name__ == "__main__":
    main()
