"""What the default compile's automatic depth-first choice does, model by model.

For each model: the default compile (DFS searched, used when it lowers the measured peak by at
least 20 %) against ``dfs=False``: whether DFS was used and why not, both peaks (10^6 bytes,
timeline estimator), both compile times and both run times (median of interleaved rounds, so
both builds see the same machine load), and the largest output difference.

Models: the MLPerf Tiny float networks in ../shared/models (ONNX: NCHW; TFLite: NHWC, which
has no NCHW chain to tile) and MobileOne-S4 at 224x224.

    python benchmarks/dfs_auto.py [--rounds 20] [--no-record]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import numpy as np  # noqa: E402

import edgebyoc  # noqa: E402
from edgebyoc.frontend import random_inputs  # noqa: E402
from edgebyoc.plugins import PluginRegistry  # noqa: E402
from edgebyoc.testing.models import mobileone_s4  # noqa: E402
from record import markdown_table, record  # noqa: E402

MODELS = Path(__file__).resolve().parents[2] / "shared" / "models" / "mlperf_tiny"


def models() -> list[tuple[str, object]]:
    found = [(path.name, str(path)) for name in ("ad01_fp32.onnx", "pretrainedResnet.onnx",
                                                 "vww_96_float.onnx", "vww_96_float.tflite")
             if (path := MODELS / name).exists()]
    return found + [("MobileOne-S4 224x224", mobileone_s4(224))]


def timed_compile(model, **options):
    start = time.perf_counter()
    compiled = edgebyoc.compile(model, registry=PluginRegistry(search_path=[]), **options)
    return compiled, time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--no-record", action="store_true")
    args = parser.parse_args()
    rows = []
    for name, model in models():
        default, default_s = timed_compile(model)
        untiled, untiled_s = timed_compile(model, dfs=False)
        inputs = random_inputs(untiled.inputs, 0)
        times = {"default": [], "untiled": []}
        for build in (default, untiled):
            build.run(inputs)  # warm up
        for _ in range(args.rounds):
            for key, build in (("default", default), ("untiled", untiled)):
                start = time.perf_counter()
                build.run(inputs)
                times[key].append(time.perf_counter() - start)
        expected, got = untiled.run(inputs), default.run(inputs)
        error = max(float(np.abs(got[k] - v).max() / max(np.abs(v).max(), 1e-30))
                    for k, v in expected.items())
        dfs = default.report["dfs"]
        chosen = (f"yes: {len(dfs['macro_kernels'])} macro-kernels "
                  f"({sum(k['sliding'] for k in dfs['macro_kernels'])} sliding), "
                  f"{dfs['recompute_factor']:.2f}x MACs" if dfs["enabled"] else
                  f"no: {dfs['reason']}")
        run = {k: 1000 * float(np.median(v)) for k, v in times.items()}
        rows.append([name, chosen,
                     f"{untiled.report['summary']['peak_activation_bytes'] / 1e6:.3f}",
                     f"{default.report['summary']['peak_activation_bytes'] / 1e6:.3f}",
                     f"{untiled_s:.1f} / {default_s:.1f}",
                     f"{run['untiled']:.2f} / {run['default']:.2f}",
                     f"{run['default'] / run['untiled']:.2f}x", f"{error:.1g}"])
        print(rows[-1], flush=True)
    table = markdown_table(["model", "DFS used by default", "peak MB, no DFS",
                            "peak MB, default", "compile s (no DFS / default)",
                            "run ms (no DFS / default)", "run ratio", "max rel diff"], rows)
    text = ("## Depth-first tiling by default\n\n"
            "The default compile searches a depth-first plan and uses it when it lowers the "
            "measured peak by at least 20 %; `dfs=False` is the untiled build. Run times are "
            f"medians of {args.rounds} interleaved rounds on the shared 2-core machine.\n\n"
            + table)
    print(text)
    if not args.no_record:
        record("dfs_auto", text)


if __name__ == "__main__":
    main()
