"""What the default compile's automatic depth-first choice does, model by model.

For each model: the default compile with a tuning record measured by this run (``--tune``: DFS
searched, used when it lowers the measured peak by at least 20 % and its build runs within 5 %
of the untiled one's time) against ``dfs=False``, against ``dfs=True`` (the lowest-peak plan
forced) and against ``dfs=True`` with the same record (``--dfs --tuning-record FILE --tune``:
of the plans tried, lowest peak first, the first measured within 5 %, else the lowest peak):
whether DFS was used and why not, the four peaks (10^6 bytes, timeline estimator) and run
times (medians of interleaved rounds, so the builds see the same machine load; small models
get more rounds), and the largest output difference. Recorded per CPU.

Models: the MLPerf Tiny float networks in ../shared/models (ONNX: NCHW; TFLite: NHWC, searched
in NCHW) and MobileOne-S4 at 224x224 and 500x500.

    python benchmarks/dfs_auto.py [--rounds 20] [--no-record]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import numpy as np  # noqa: E402

import edgebyoc  # noqa: E402
from edgebyoc.frontend import random_inputs  # noqa: E402
from edgebyoc.plugins import PluginRegistry  # noqa: E402
from edgebyoc.testing.models import mobileone_s4  # noqa: E402
from record import machine, markdown_table, record  # noqa: E402

MODELS = Path(__file__).resolve().parents[2] / "shared" / "models" / "mlperf_tiny"


def models() -> list[tuple[str, object]]:
    found = [(path.name, str(path)) for name in ("ad01_fp32.onnx", "pretrainedResnet.onnx",
                                                 "vww_96_float.onnx", "vww_96_float.tflite")
             if (path := MODELS / name).exists()]
    return found + [("MobileOne-S4 224x224", mobileone_s4(224)),
                    ("MobileOne-S4 500x500", mobileone_s4(500))]


def timed_compile(model, **options):
    start = time.perf_counter()
    compiled = edgebyoc.compile(model, registry=PluginRegistry(search_path=[]), **options)
    return compiled, time.perf_counter() - start


#: the run's tuning record (measured afresh by each run of the benchmark)
RECORD = Path(tempfile.mkdtemp(prefix="edgebyoc-dfs-auto-")) / "tuning.json"


#: Seconds of runs each build gets at least (small models: more rounds), and the most rounds.
RUN_SECONDS, MAX_ROUNDS = 0.5, 2000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--no-record", action="store_true")
    args = parser.parse_args()
    print(f"CPU: {machine()}")
    rows = []
    for name, model in models():
        default, default_s = timed_compile(model, tuning_record=RECORD, tune=True)
        untiled, _ = timed_compile(model, dfs=False)
        forced, _ = timed_compile(model, dfs=True)
        tuned, _ = timed_compile(model, dfs=True, tuning_record=RECORD, tune=True)
        builds = {"untiled": untiled, "default": default, "forced": forced, "tuned": tuned}
        inputs = random_inputs(untiled.inputs, 0)
        times: dict[str, list[float]] = {key: [] for key in builds}
        for build in builds.values():
            build.run(inputs)  # warm up
        start = time.perf_counter()
        untiled.run(inputs)
        once = time.perf_counter() - start
        # small models get more rounds (about RUN_SECONDS of runs per build): a 0.1 ms run
        # timed 20 times is at the mercy of the shared machine's noise
        rounds = args.rounds if "500" not in name else max(3, args.rounds // 4)
        rounds = max(rounds, min(MAX_ROUNDS, int(RUN_SECONDS / once)))
        keys = list(builds)
        for round_ in range(rounds):
            # the order rotated each round: a build timed right after another one finds the
            # caches holding the other one's data; rotating gives each build every place
            for key in keys[round_ % len(keys):] + keys[:round_ % len(keys)]:
                start = time.perf_counter()
                builds[key].run(inputs)
                times[key].append(time.perf_counter() - start)
        expected = untiled.run(inputs)
        error = max(float(np.abs(build.run(inputs)[k] - v).max() / max(np.abs(v).max(), 1e-30))
                    for build in (default, forced, tuned) for k, v in expected.items())
        dfs = default.report["memory"]
        kernels = forced.report["memory"]["macro_kernels"]
        chosen = (f"yes ({dfs['measured_slowdown']:.2f}x measured)" if dfs["enabled"] else
                  f"no: {dfs['reason']}").replace(str(RECORD), "the run's tuning.json")
        run = {k: 1000 * float(np.median(v)) for k, v in times.items()}
        peak = {k: b.report["summary"]["peak_activation_bytes"] / 1e6 for k, b in builds.items()}
        rows.append([name, chosen,
                     f"{len(kernels)} ({sum(k['sliding'] for k in kernels)} sliding)",
                     " / ".join(f"{peak[key]:.3f}" for key in keys),
                     " / ".join(f"{run[key]:.2f}" for key in keys),
                     f"{run['default'] / run['untiled']:.2f}x",
                     f"{run['forced'] / run['untiled']:.2f}x",
                     f"{run['tuned'] / run['untiled']:.2f}x", f"{default_s:.1f}",
                     f"{error:.1g}"])
        print(rows[-1], flush=True)
    table = markdown_table(["model", "DFS used by default", "macro-kernels (forced)",
                            "peak MB: untiled / default / forced / forced+record",
                            "run ms: untiled / default / forced / forced+record",
                            "default / untiled", "forced DFS / untiled",
                            "forced+record / untiled", "default compile s", "max rel diff"],
                           rows)
    text = (f"## Depth-first tiling by default ({machine()})\n\n"
            "The default compile with a tuning record (`--tuning-record FILE --tune`: the "
            "depth-first and the untiled build timed once, fastest run against fastest run, "
            "written to the record) uses a depth-first plan when it lowers the measured peak "
            "by at least 20 % and its build runs within 5 % of the untiled build's time; "
            "without a record nothing is timed and the host keeps the untiled build. "
            "When the lowest-peak plan runs slower, the record's decision tries the next "
            "plans that still save 20 %, lowest peak first (at most three). "
            "`dfs=False` is the untiled build, `dfs=True` forces the lowest-peak plan, and "
            "forced+record is `dfs=True` with the same record (of the plans tried, lowest peak "
            "first, the first measured within 5 %, else the lowest peak). "
            f"Run times are medians of at least {args.rounds} interleaved rounds, the four "
            "builds' order rotated each round (a quarter of "
            f"them at 500x500; more for small models, about {RUN_SECONDS} s of runs per build, "
            f"at most {MAX_ROUNDS}) on the shared 2-core machine.\n\n" + table)
    print(text)
    if not args.no_record:
        record("dfs_auto", text, per_cpu=True)


if __name__ == "__main__":
    main()
