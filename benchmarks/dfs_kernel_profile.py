"""Where a forced depth-first build's extra time goes: each macro-kernel against the untiled
calls of the same convolutions.

The model is compiled twice (``dfs=False`` and ``dfs=True``, no tuning record: the lowest-peak
plan), both run with the Relax VM's instrument hook timing every kernel call (wall clock around
the call, 2 threads, the calling thread pinned to the first CPU, rounds interleaved, medians
per call). A macro-kernel of n convolutions replaces n convolution calls of the untiled build
(in execution order: the convolutions before it in the depth-first build are as many in the
untiled one); its untiled time is that of those calls and of the calls between them. What is
left (the calls outside the kernels) is shown for both builds: it should match.

    python benchmarks/dfs_kernel_profile.py [--size 224] [--rounds 15] [--no-record]
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import sys
import time
from pathlib import Path

os.environ.setdefault("TVM_NUM_THREADS", "2")
sys.path.insert(0, str(Path(__file__).resolve().parent))

import edgebyoc  # noqa: E402
from edgebyoc.frontend import random_inputs  # noqa: E402
from edgebyoc.plugins import PluginRegistry  # noqa: E402
from edgebyoc.testing.models import mobileone_s4  # noqa: E402
from record import PAUSE_SECONDS, markdown_table, pin_calling_thread, record  # noqa: E402

KERNEL = re.compile(r"edgebyoc_dfs\d+_(\d+)conv")


def is_convolution(name: str) -> bool:
    """Whether a call of the untiled build (or one outside the macro-kernels) computes a
    convolution: its fused function's name starts with one."""
    return name.startswith("fused_conv2d")


def timed_calls(compiled, sample) -> list[tuple[str, float]]:
    """Every kernel call of one run of ``compiled`` in order (name, seconds), the VM's own
    builtins left out."""
    vm = compiled.runner._vm  # the Relax VM behind compiled.run()
    calls: list[tuple[str, float]] = []
    started: list[float] = []

    def instrument(func, name, before, result, *args):
        if not name.startswith("vm.builtin"):
            if before:
                started.append(time.perf_counter())
            else:
                calls.append((name, time.perf_counter() - started.pop()))
        return 0

    vm.set_instrument(instrument)
    try:
        time.sleep(PAUSE_SECONDS)
        compiled.run(sample)
    finally:
        vm.set_instrument(None)
    return calls


def median_calls(runs: list[list[tuple[str, float]]]) -> list[tuple[str, float]]:
    """Each call's median seconds over ``runs`` (the same calls in each)."""
    names = [name for name, _ in runs[0]]
    if any([name for name, _ in run] != names for run in runs):
        raise RuntimeError("the calls differ from one run to the next")
    return [(name, statistics.median(run[i][1] for run in runs))
            for i, name in enumerate(names)]


def profile(untiled, tiled, sample, rounds: int) -> tuple[list[list[str]], dict[str, float]]:
    """Rows of (macro-kernel, its ms, the untiled calls' ms, ratio) and the totals."""
    runs = {"untiled": [], "tiled": []}
    for _ in range(rounds):  # interleaved: one run of each in turn
        runs["untiled"].append(timed_calls(untiled, sample))
        runs["tiled"].append(timed_calls(tiled, sample))
    medians = {build: median_calls(build_runs) for build, build_runs in runs.items()}
    plain = medians["untiled"]
    conv_at = [i for i, (name, _) in enumerate(plain) if is_convolution(name)]
    rows, done, kernels_ms, replaced_ms = [], 0, 0.0, 0.0
    for name, seconds in medians["tiled"]:
        match = KERNEL.match(name)
        if not match:
            done += is_convolution(name)
            continue
        count = int(match.group(1))
        if done + count > len(conv_at):
            raise RuntimeError(f"{name}: the untiled build has {len(conv_at)} convolution "
                               f"calls, fewer than the {done + count} this kernel ends at")
        first, last = conv_at[done], conv_at[done + count - 1]
        before = sum(s for _, s in plain[first:last + 1])
        done += count
        kernels_ms += seconds * 1e3
        replaced_ms += before * 1e3
        rows.append([name, str(count), f"{seconds * 1e3:.3f}", f"{before * 1e3:.3f}",
                     f"{seconds / before:.2f}x"])
    totals = {"tiled": sum(s for _, s in medians["tiled"]) * 1e3,
              "untiled": sum(s for _, s in plain) * 1e3}
    totals["tiled outside"] = totals["tiled"] - kernels_ms
    totals["untiled outside"] = totals["untiled"] - replaced_ms
    return rows, totals


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", type=int, default=224, help="MobileOne-S4's input size")
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--no-record", action="store_true")
    args = parser.parse_args()
    if args.rounds < 1:
        parser.error(f"--rounds must be at least 1, got {args.rounds}")
    registry = PluginRegistry(search_path=[])
    model = mobileone_s4(args.size)
    print(f"compiling MobileOne-S4 {args.size}x{args.size} untiled and with --dfs ...",
          flush=True)
    untiled = edgebyoc.compile(model, registry=registry, dfs=False, progress=False)
    tiled = edgebyoc.compile(model, registry=registry, dfs=True, progress=False)
    memory = tiled.report["memory"]
    sample = random_inputs(untiled.inputs, seed=0)
    for build in (untiled, tiled):
        build.run(sample)
    pin_calling_thread()
    rows, totals = profile(untiled, tiled, sample, args.rounds)
    table = markdown_table(["macro-kernel", "convolutions", "ms", "untiled calls ms", "ratio"],
                           rows)
    summary = (f"Whole run (sum of the calls): depth-first {totals['tiled']:.3f} ms, untiled "
               f"{totals['untiled']:.3f} ms ({totals['tiled'] / totals['untiled']:.2f}x); "
               f"outside the macro-kernels {totals['tiled outside']:.3f} ms against "
               f"{totals['untiled outside']:.3f} ms.")
    print(table)
    print(summary)
    if args.no_record:
        return
    body = (f"## Where a forced depth-first build's time goes\n\n"
            f"MobileOne-S4 {args.size}x{args.size}, `--dfs` without a tuning record (the "
            f"lowest-peak plan: {memory['peak_bytes'] / 1e6:.3f} MB against "
            f"{memory['baseline_peak_bytes'] / 1e6:.3f} MB untiled). Every kernel call timed "
            f"by the Relax VM's instrument hook (wall clock around the call; 2 threads, the "
            f"caller pinned to the first CPU), {args.rounds} interleaved runs of each build, "
            f"medians per call. A macro-kernel's untiled time is that of the convolution "
            f"calls it replaces and of the calls between them.\n\n{table}\n\n{summary}")
    record("dfs_kernel_profile", body, per_cpu=True)


if __name__ == "__main__":
    main()
