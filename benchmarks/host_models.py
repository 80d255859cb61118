"""Host path speed: ResNet-18, MobileNetV2 and EfficientNet-B0 (224x224), a BERT-base-shaped
transformer encoder (4 layers, 128 tokens) and ViT-S/16 (224x224, 197 tokens), fp32, random
weights, beside onnxruntime, on this machine's CPU (issue #30's goals: at most 1.0x
onnxruntime's latency on the three CNNs, 1.3x on the two transformers).

Each model is compiled by the default ``edgebyoc.compile`` (target ``host``: edgebyoc's CPU
schedules, depth-first tiling where the default uses it) and run with 2 threads, as
onnxruntime is, in interleaved rounds (one edgebyoc run, one onnxruntime run, repeated); the
medians are compared, so machine noise hits both alike. The table names the CPU model and the
vector ISA the schedules target; docs/performance.md keeps one table per CPU.

    python benchmarks/host_models.py [--rounds 20] [--models resnet18,mobilenet_v2,...]
                                     [--no-record]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("TVM_NUM_THREADS", "2")  # the pool's spin count: edgebyoc's default
sys.path.insert(0, str(Path(__file__).resolve().parent))

import numpy as np  # noqa: E402

import edgebyoc  # noqa: E402
from edgebyoc.plugins import PluginRegistry  # noqa: E402
from edgebyoc.testing.models import (efficientnet_b0, mobilenet_v2, resnet18,  # noqa: E402
                                     transformer_encoder, vit)
from record import (PAUSE_SECONDS, interleaved_medians, machine,  # noqa: E402
                    markdown_table, onnxruntime_session, record)

IMAGE = (1, 3, 224, 224)
#: key -> (name, builder, input shape, goal: the largest ratio to onnxruntime, issue #30)
MODELS = {"resnet18": ("ResNet-18", resnet18, IMAGE, 1.0),
          "mobilenet_v2": ("MobileNetV2", mobilenet_v2, IMAGE, 1.0),
          "efficientnet_b0": ("EfficientNet-B0", efficientnet_b0, IMAGE, 1.0),
          "bert_encoder": ("BERT-base encoder, 4 layers, 128 tokens", transformer_encoder,
                           (1, 128, 768), 1.3),
          "vit_s16": ("ViT-S/16", vit, IMAGE, 1.3)}


def measure(name: str, build, shape, rounds: int, registry) -> dict:
    model = build()
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    start = time.perf_counter()
    ours = edgebyoc.compile(model, registry=registry)
    compile_seconds = time.perf_counter() - start
    session = onnxruntime_session(model, spin_within_run=True)
    result, _ = edgebyoc.verify(ours, inputs={"input": x})
    median = {name: seconds * 1e3 for name, seconds in interleaved_medians(
        {"edgebyoc": lambda: ours.run({"input": x}),
         "onnxruntime": lambda: session.run(None, {"input": x})}, rounds).items()}
    dfs = ours.report.get("memory") or {}
    return {"name": name, "ours": median["edgebyoc"], "ort": median["onnxruntime"],
            "ratio": median["edgebyoc"] / median["onnxruntime"],
            "macs": sum(op["macs"] for op in ours.report["operators"]),
            "compile": compile_seconds, "rel": result.max_rel,
            "dfs": "yes" if dfs.get("enabled") else "no"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--no-record", action="store_true")
    args = parser.parse_args()
    registry = PluginRegistry(search_path=[])
    print(f"CPU: {machine()}")
    rows, results = [], []
    for key in args.models.split(","):
        name, build, shape, goal = MODELS[key]
        r = measure(name, build, shape, args.rounds, registry)
        results.append(r)
        rows.append([name, f"{r['macs'] / 1e9:.2f}", f"{r['ours']:.1f}", f"{r['ort']:.1f}",
                     f"{r['ratio']:.2f}x", f"{goal}x: " + ("yes" if r["ratio"] <= goal
                                                           else "**no**"),
                     r["dfs"], f"{r['compile']:.1f} s", f"{r['rel']:.1g}"])
        print(rows[-1], flush=True)
    table = markdown_table(["model", "G MACs", "edgebyoc ms", "onnxruntime ms", "ratio",
                            "goal met", "DFS used", "compile", "max rel err"], rows)
    print(table)
    if not args.no_record:
        record("host_models", f"## Host path: edgebyoc beside onnxruntime ({machine()})\n\n"
               f"fp32, random weights (CNNs and ViT-S/16 at 224x224, the encoder over 128 "
               f"embedded tokens), 2 threads each, both runtimes' threads spinning between the "
               f"kernels of a run and asleep between runs (edgebyoc's default thread-pool spin "
               f"count, onnxruntime's `session.force_spinning_stop`), each call after a "
               f"{PAUSE_SECONDS * 1e3:g} ms pause, {args.rounds} interleaved rounds, medians; "
               f"the default compile (target host).\n\n{table}", per_cpu=True)


if __name__ == "__main__":
    main()
