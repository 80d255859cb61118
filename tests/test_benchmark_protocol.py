"""The benchmarks' one-thread-per-CPU protocol (benchmarks/record.py): PyTorch's OpenMP pool
asked to pin its threads, onnxruntime's workers pinned from the second CPU on, the caller on
the first. Correctness of the settings only; the timings are the benchmarks' own."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"
CPUS = sorted(os.sched_getaffinity(0))


def _run(code: str, env: dict[str, str] | None = None) -> str:
    """``code``'s printed output, run from benchmarks/ with the current environment minus
    ``GOMP_CPU_AFFINITY``, plus ``env``."""
    base = {k: v for k, v in os.environ.items() if k != "GOMP_CPU_AFFINITY"}
    result = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                            text=True, env={**base, **(env or {})}, cwd=BENCHMARKS,
                            check=True, timeout=120)
    return result.stdout.strip()


def test_openmp_affinity_lists_every_cpu_and_keeps_the_users_choice():
    script = """
        import os
        from record import one_thread_per_cpu_environment
        one_thread_per_cpu_environment()
        print(os.environ["GOMP_CPU_AFFINITY"])
    """
    assert _run(script) == " ".join(str(cpu) for cpu in CPUS)
    assert _run(script, {"GOMP_CPU_AFFINITY": "3"}) == "3"


@pytest.mark.skipif(len(CPUS) < 2, reason="pinning one thread per CPU needs two CPUs")
def test_onnxruntime_workers_and_the_caller_are_pinned_apart():
    script = """
        import os
        import numpy as np
        from onnx import TensorProto, helper
        from record import onnxruntime_session, pin_calling_thread

        def affinities():
            found = {}
            for task in os.listdir("/proc/self/task"):
                status = open(f"/proc/self/task/{task}/status").read()
                line = next(l for l in status.splitlines() if l.startswith("Cpus_allowed_list"))
                found[int(task)] = line.split()[1]
            return found

        x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [256, 256])
        y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [256, 256])
        graph = helper.make_graph([helper.make_node("MatMul", ["x", "x"], ["y"])], "g", [x], [y])
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
        model.ir_version = 8
        import time
        before = set(affinities())
        session = onnxruntime_session(model, threads=2, pin_workers=True)
        # a worker sets its own affinity when its thread starts running, which may come after
        # the first run returns: look again (and run again) for up to five seconds
        second = str(sorted(os.sched_getaffinity(0))[1])
        deadline = time.monotonic() + 5
        while True:
            session.run(None, {"x": np.ones((256, 256), np.float32)})
            workers = {t: cpus for t, cpus in affinities().items() if t not in before}
            if second in workers.values() or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        pin_calling_thread()
        print(sorted(set(workers.values())), affinities()[os.getpid()])
    """
    out = _run(script)
    assert f"'{CPUS[1]}'" in out.split("]")[0]  # a new thread pinned to the second CPU
    assert out.rsplit(" ", 1)[1] == str(CPUS[0])  # the caller on the first

