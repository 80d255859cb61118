"""Compile time of representative models, this checkout beside another one.

Each point is compiled in a process of its own (one per checkout, the two alternating), after
a warm-up compile of a small network that loads TVM and LLVM: the median wall-clock time of
``--repeats`` calls of ``edgebyoc.compile`` (the way a user compiles). ``--baseline DIR`` is
another checkout of edgebyoc (e.g. a ``git worktree`` of an older commit): its ``core/`` is put
first on ``PYTHONPATH``, the plugins stay this checkout's, so the two columns differ only in
the core. Without ``--baseline`` only this checkout is timed.

Points: the host path's default compile and its forced depth-first compile (``--dfs``:
the untiled build and each candidate plan lowered and measured) of MobileNetV2 at 96x96
(width 0.5) and the float MLPerf Tiny VWW network; the int8 VWW network's C project for gap9
(default, and ``--dfs``: row streaming planned) and diana.

Run: python benchmarks/compile_time.py [--baseline DIR] [--repeats N] [--no-record]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from record import markdown_table, record  # noqa: E402

MODELS = Path(__file__).resolve().parents[2] / "shared" / "models" / "mlperf_tiny"
#: (label, model, target, dfs): ``model`` names a file in ``MODELS`` or a builder of
#: ``edgebyoc.testing.models`` with its arguments
POINTS = [
    ("MobileNetV2 96 w0.5, host", "mobilenet_v2:96:0.5", "host", None),
    ("MobileNetV2 96 w0.5, host --dfs", "mobilenet_v2:96:0.5", "host", True),
    ("VWW float, host", "vww_96_float.tflite", "host", None),
    ("VWW int8, gap9", "vww_96_int8.tflite", "gap9", None),
    ("VWW int8, gap9 --dfs", "vww_96_int8.tflite", "gap9", True),
    ("VWW int8, diana", "vww_96_int8.tflite", "diana", None),
]

#: what each timing process runs: argv = model, target, dfs, repeats; prints the seconds
CHILD = r"""
import json, statistics, sys, time
import edgebyoc
from edgebyoc.testing import models
model, target, dfs, repeats = sys.argv[1], sys.argv[2], json.loads(sys.argv[3]), int(sys.argv[4])
if ":" in model:
    name, size, width = model.split(":")
    model = getattr(models, name)(int(size), width=float(width))
edgebyoc.compile(models.small_convnet(), target="host", progress=False)  # warm-up
times = []
for _ in range(repeats):
    start = time.perf_counter()
    edgebyoc.compile(model, target=target, dfs=dfs, progress=False)
    times.append(time.perf_counter() - start)
print(json.dumps(statistics.median(times)))
"""


def compile_seconds(model: str, target: str, dfs, repeats: int, core: Path | None) -> float:
    path = model if ":" in model else str(MODELS / model)
    env = dict(os.environ, TVM_NUM_THREADS=os.environ.get("TVM_NUM_THREADS", "2"))
    if core is not None:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(core), env.get("PYTHONPATH")]))
    done = subprocess.run([sys.executable, "-c", CHILD, path, target, json.dumps(dfs),
                           str(repeats)], env=env, capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def _commit(checkout: Path) -> str:
    done = subprocess.run(["git", "-C", str(checkout), "rev-parse", "--short", "HEAD"],
                          capture_output=True, text=True)
    return done.stdout.strip() or str(checkout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", type=Path, help="another checkout of edgebyoc")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--no-record", action="store_true")
    args = parser.parse_args()
    baseline = args.baseline.resolve() / "core" if args.baseline else None
    if baseline is not None and not (baseline / "edgebyoc").is_dir():
        parser.error(f"--baseline {args.baseline}: no core/edgebyoc there")
    rows = []
    for label, model, target, dfs in POINTS:
        ours = compile_seconds(model, target, dfs, args.repeats, None)
        row = [label, f"{ours:.1f}"]
        if baseline is not None:
            theirs = compile_seconds(model, target, dfs, args.repeats, baseline)
            row += [f"{theirs:.1f}", f"{theirs / ours:.2f}x"]
        rows.append(row)
        print(" | ".join(row), flush=True)
    headers = ["model, target", f"{_commit(Path(__file__).parents[1])}, s"]
    if baseline is not None:
        headers += [f"baseline {_commit(args.baseline)}, s", "speed-up"]
    text = ("## Compile time\n\n"
            f"Wall-clock seconds of `edgebyoc.compile`, median of {args.repeats} compiles in "
            f"one process after a warm-up compile of a small network, TVM_NUM_THREADS="
            f"{os.environ.get('TVM_NUM_THREADS', '2')}"
            + (", the baseline checkout's core in a process of its own beside each point"
               if baseline is not None else "") + ".\n\n"
            + markdown_table(headers, rows))
    print(text)
    if not args.no_record:
        record("compile_time", text)


if __name__ == "__main__":
    main()
