"""Shared by the benchmarks: the onnxruntime baseline session, and a table recorded in
docs/performance.md.

Each benchmark owns one section of docs/performance.md, between
``<!-- benchmark:NAME -->`` and ``<!-- /benchmark:NAME -->``; re-running replaces that section.
Speed benchmarks keep one section per CPU (``benchmark:NAME@<LLVM CPU>``), so the figures of
every CPU they ran on stay, each with its date, CPU model and vector ISA (``machine``).
"""

from __future__ import annotations

import datetime
import os
import platform
import re
import statistics
import time
from pathlib import Path

PERFORMANCE_MD = Path(__file__).resolve().parents[1] / "docs" / "performance.md"


def markdown_table(headers: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(headers) + " |",
             "| " + " | ".join("---" if i == 0 else "---:" for i in range(len(headers))) + " |"]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def cpu_model() -> str:
    """The CPU's model name (``/proc/cpuinfo``)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def isa() -> str:
    """The vector ISA the host build targets and LLVM's name for the CPU, e.g. ``AVX-512
    (LLVM znver4)``: what the host schedules derive vector widths from."""
    from tvm.target import codegen

    from edgebyoc.codegen.host import host_cpu, host_target

    target = host_target()
    widest = next((name for feature, name in (("avx512f", "AVX-512"), ("avx2", "AVX2"),
                                               ("sse4.2", "SSE4.2"), ("neon", "NEON"))
                   if codegen.target_has_features(feature, target)), "scalar")
    return f"{widest} (LLVM {host_cpu()})"


def machine() -> str:
    import os
    return f"{cpu_model()}, {isa()}, {os.cpu_count()} logical CPUs, " \
        f"Python {platform.python_version()}"


def cpu_slug() -> str:
    """A short key of this CPU for per-CPU sections: LLVM's CPU name."""
    from edgebyoc.codegen.host import host_cpu

    return re.sub(r"[^a-z0-9_-]+", "-", host_cpu().lower())


def record(name: str, body: str, per_cpu: bool = False) -> None:
    """Replace (or append) the section of benchmark ``name`` in docs/performance.md; with
    ``per_cpu`` the section is this CPU's (``benchmark:NAME@<LLVM CPU>``): speed figures of
    other CPUs stay beside it, each with its date."""
    stamp = datetime.date.today().isoformat()
    key = f"{name}@{cpu_slug()}" if per_cpu else name
    section = (f"<!-- benchmark:{key} -->\n{body.strip()}\n\n"
               f"_Recorded {stamp} on {machine()} by `benchmarks/{name}.py`._\n"
               f"<!-- /benchmark:{key} -->")
    text = PERFORMANCE_MD.read_text() if PERFORMANCE_MD.exists() else "# Performance\n"
    pattern = re.compile(rf"<!-- benchmark:{re.escape(key)} -->.*?"
                         rf"<!-- /benchmark:{re.escape(key)} -->", re.S)
    if pattern.search(text):
        text = pattern.sub(lambda _: section, text)
    else:  # after the last section of the same benchmark (another CPU's), else at the end
        others = list(re.finditer(rf"<!-- /benchmark:{re.escape(name)}(@[^ ]+)? -->", text))
        if others:
            end = others[-1].end()
            text = text[:end] + "\n\n" + section + text[end:]
        else:
            text = text.rstrip() + "\n\n" + section + "\n"
    PERFORMANCE_MD.write_text(text)


#: seconds each contender of interleaved rounds waits before its timed call: longer than a
#: pool spins after a run (edgebyoc's ``resources.THREAD_POOL_SPIN_COUNT``: about 0.1 ms), so
#: that no pool spins while another runs
PAUSE_SECONDS = 0.0005


def interleaved_medians(calls: dict, rounds: int, warmup: int = 3) -> dict[str, float]:
    """Median seconds of each of ``calls`` (name -> a call as a user makes it), timed in
    interleaved rounds, each call after a pause of ``PAUSE_SECONDS``; the first ``warmup``
    rounds are not counted."""
    times: dict[str, list[float]] = {name: [] for name in calls}
    for round_ in range(warmup + rounds):
        for name, call in calls.items():
            time.sleep(PAUSE_SECONDS)
            start = time.perf_counter()
            call()
            if round_ >= warmup:
                times[name].append(time.perf_counter() - start)
    return {name: statistics.median(values) for name, values in times.items()}


def _cpus() -> list[int]:
    return sorted(os.sched_getaffinity(0))


def one_thread_per_cpu_environment() -> None:
    """The one-thread-per-CPU protocol, first half: called before PyTorch starts, it asks its
    OpenMP pool to pin its threads one per CPU (``GOMP_CPU_AFFINITY``), the calling thread on
    the first. TVM pins its own workers the same way (worker i on the i-th CPU, the caller
    free); onnxruntime's are pinned by ``onnxruntime_session(pin_workers=True)``.

    Why: on the 2-vCPU VM of docs/performance.md a pool thread woken from sleep is often placed
    on the calling thread's vCPU while the other one idles, and the two then share one core
    until the run ends. PyTorch's conv of Table II's CV12 measured 1.55 or 2.65 ms from one
    run to the next; sparse_cpu's kernel 0.9 or 1.7 ms (its two tasks timed inside the kernel:
    both on one vCPU in the slow runs)."""
    os.environ.setdefault("GOMP_CPU_AFFINITY", " ".join(str(cpu) for cpu in _cpus()))


def pin_calling_thread() -> None:
    """The one-thread-per-CPU protocol, second half: the calling thread on the first CPU, off
    the CPUs of every pool's workers. Called after every contender ran once: TVM gives the
    thread that starts its pool every CPU again, so pinning earlier would not last."""
    os.sched_setaffinity(0, {_cpus()[0]})


def onnxruntime_session(model, threads: int = 2, spin_within_run: bool = False,
                        pin_workers: bool = False):
    """onnxruntime on ``threads`` threads that sleep between runs: in interleaved rounds no
    runtime may keep spinning on the cores the next one needs. ``spin_within_run``: its
    threads spin between the operators of a run and stop when the run returns
    (``session.force_spinning_stop``), as edgebyoc's pool does with its default spin count
    (``resources.THREAD_POOL_SPIN_COUNT``, over ``PAUSE_SECONDS`` before the next call);
    otherwise they never spin, for contenders whose pools never spin either. ``pin_workers``:
    its worker threads pinned one per CPU from the second on (the one-thread-per-CPU
    protocol, ``one_thread_per_cpu_environment``), when there are CPUs enough for them."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads, options.inter_op_num_threads = threads, 1
    if spin_within_run:
        options.add_session_config_entry("session.intra_op.allow_spinning", "1")
        options.add_session_config_entry("session.force_spinning_stop", "1")
    else:
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    cpus = _cpus()
    if pin_workers and len(cpus) >= threads:  # onnxruntime numbers processors from 1
        options.add_session_config_entry("session.intra_op_thread_affinities", ";".join(
            str(cpu + 1) for cpu in cpus[1:threads]))
    return ort.InferenceSession(model.SerializeToString(), options,
                                providers=["CPUExecutionProvider"])
