"""How the host build's activations are stored, beside onnxruntime: one arena per run (the
default, ``memory.storage.arena_storages``), the exact-size storages the timeline is recorded
on (the default before the arena), and TVM's own storage plan.

For each model and each of the three builds, one process compiles the model (the storage
passes switched off in ``edgebyoc.codegen.host`` for the two older builds) and times
``compiled.run()`` against onnxruntime's ``run`` in interleaved rounds (2 threads each, each
call after a pause, medians), so each build meets the same baseline and no build's pool or
allocator state reaches another's; the builds' processes alternate, ``--passes`` times. It
also gives the memory: the timeline's peak, the arena the run allocates, and the distinct
bytes the kernels read and write in one run (weights included: the union of the address
ranges of every kernel argument, through the Relax VM's instrument hook), which is what the
caches see.

    python benchmarks/host_storage.py [--rounds 200] [--passes 2] [--models a,b] [--no-record]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

os.environ.setdefault("TVM_NUM_THREADS", "2")
sys.path.insert(0, str(Path(__file__).resolve().parent))

from host_models import MODELS  # noqa: E402
from record import machine, markdown_table, record  # noqa: E402

#: build -> what it is
BUILDS = {"arena": "one arena per run (default)",
          "exact": "exact-size storages (no arena)",
          "tvm": "TVM's storage plan"}


def _touched_bytes(compiled, feed) -> int:
    """Distinct bytes the kernels' arguments span in one run of ``compiled``."""
    import numpy as np
    import tvm

    runner = compiled.runner  # the Relax VM behind compiled.run()
    spans = {}

    def instrument(func, name, before, result, *args):
        if before and not name.startswith("vm.builtin"):
            for value in args:
                if isinstance(value, tvm.runtime.Tensor):
                    array = np.from_dlpack(value)
                    spans[array.ctypes.data] = max(spans.get(array.ctypes.data, 0),
                                                   array.nbytes)
        return 0

    runner._vm.set_instrument(instrument)
    compiled.run(feed)
    runner._vm.set_instrument(None)
    total, start, end = 0, None, None
    for begin, size in sorted(spans.items()):
        if end is None or begin > end:
            total += 0 if end is None else end - start
            start, end = begin, begin + size
        else:
            end = max(end, begin + size)
    return total + (0 if end is None else end - start)


def one(key: str, build: str, rounds: int) -> dict:
    """Compile ``key`` as ``build`` and time it beside onnxruntime (run in its own process)."""
    import numpy as np
    import tvm

    import edgebyoc
    import edgebyoc.codegen.host as host
    from edgebyoc.plugins import PluginRegistry
    from record import interleaved_medians, onnxruntime_session

    def unchanged():
        return tvm.transform.module_pass(lambda mod, _ctx: mod, opt_level=0, name="unchanged")

    class NoArena:
        def __init__(self, *_):
            pass

        def pass_(self):
            return unchanged()

    if build in ("exact", "tvm"):
        host.ActivationArena = NoArena
    if build == "tvm":
        host.ExactSizeStorages = unchanged()
    _, builder, shape, _ = MODELS[key]
    model = builder()
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    compiled = edgebyoc.compile(model, registry=PluginRegistry(search_path=[]))
    result, _ = edgebyoc.verify(compiled, inputs={"input": x})
    session = onnxruntime_session(model, spin_within_run=True)
    median = interleaved_medians({"ours": lambda: compiled.run({"input": x}),
                                  "ort": lambda: session.run(None, {"input": x})}, rounds)
    memory = compiled.report["memory"]
    return {"ratio": median["ours"] / median["ort"], "ours": median["ours"] * 1e3,
            "ort": median["ort"] * 1e3, "peak": memory["peak_bytes"],
            "arena": memory.get("activation_arena_bytes") or 0,
            "touched": _touched_bytes(compiled, {"input": x}), "passed": result.passed}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=200)
    parser.add_argument("--passes", type=int, default=2)
    parser.add_argument("--models", default="resnet18,mobilenet_v2,efficientnet_b0,"
                                            "bert_encoder,vit_s16")
    parser.add_argument("--no-record", action="store_true")
    parser.add_argument("--one", nargs=2, metavar=("MODEL", "BUILD"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print("RESULT " + json.dumps(one(*args.one, args.rounds)), flush=True)
        return
    print(f"CPU: {machine()}")
    rows = []
    for key in args.models.split(","):
        runs: dict[str, list[dict]] = {build: [] for build in BUILDS}
        for _ in range(args.passes):
            for build in BUILDS:
                out = subprocess.run([sys.executable, __file__, "--one", key, build,
                                      "--rounds", str(args.rounds)], check=True,
                                     capture_output=True, text=True).stdout
                runs[build].append(json.loads(out.split("RESULT ", 1)[1]))
                print(key, build, runs[build][-1], flush=True)
        for build, results in runs.items():
            first = results[0]
            rows.append([MODELS[key][0], BUILDS[build],
                         ", ".join(f"{r['ratio']:.3f}x" for r in results),
                         f"{statistics.median(r['ours'] for r in results):.2f}",
                         f"{statistics.median(r['ort'] for r in results):.2f}",
                         f"{first['peak'] / 1e6:.2f}", f"{first['arena'] / 1e6:.2f}"
                         if first["arena"] else "-", f"{first['touched'] / 1e6:.1f}",
                         "yes" if all(r["passed"] for r in results) else "**no**"])
    table = markdown_table(["model", "build", "against onnxruntime (each pass)",
                            "edgebyoc ms", "onnxruntime ms", "timeline peak MB", "arena MB",
                            "MB the kernels touch a run", "verified"], rows)
    print(table)
    if not args.no_record:
        record("host_storage", f"## Host path: where the activations live ({machine()})\n\n"
               f"fp32, random weights, 2 threads each, {args.rounds} interleaved rounds of "
               f"`compiled.run()` and onnxruntime's `run` per process, each call after a "
               f"pause, medians; one process per build and pass, the builds alternating "
               f"({args.passes} passes). \"MB the kernels touch a run\": the union of the "
               f"address ranges of every kernel argument in one run, weights included.\n\n"
               f"{table}", per_cpu=True)


if __name__ == "__main__":
    main()
