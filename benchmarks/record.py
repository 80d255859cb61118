"""Shared by the benchmarks: the onnxruntime baseline session, and a table recorded in
docs/performance.md.

Each benchmark owns one section of docs/performance.md, between
``<!-- benchmark:NAME -->`` and ``<!-- /benchmark:NAME -->``; re-running replaces that section.
"""

from __future__ import annotations

import datetime
import platform
import re
from pathlib import Path

PERFORMANCE_MD = Path(__file__).resolve().parents[1] / "docs" / "performance.md"


def markdown_table(headers: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(headers) + " |",
             "| " + " | ".join("---" if i == 0 else "---:" for i in range(len(headers))) + " |"]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def machine() -> str:
    cpu = "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    import os
    return f"{cpu}, {os.cpu_count()} logical CPUs, Python {platform.python_version()}"


def record(name: str, body: str) -> None:
    """Replace (or append) the section of benchmark ``name`` in docs/performance.md."""
    stamp = datetime.date.today().isoformat()
    section = (f"<!-- benchmark:{name} -->\n{body.strip()}\n\n"
               f"_Recorded {stamp} on {machine()} by `benchmarks/{name}.py`._\n"
               f"<!-- /benchmark:{name} -->")
    text = PERFORMANCE_MD.read_text() if PERFORMANCE_MD.exists() else "# Performance\n"
    pattern = re.compile(rf"<!-- benchmark:{name} -->.*?<!-- /benchmark:{name} -->", re.S)
    text = pattern.sub(lambda _: section, text) if pattern.search(text) \
        else text.rstrip() + "\n\n" + section + "\n"
    PERFORMANCE_MD.write_text(text)


def onnxruntime_session(model, threads: int = 2):
    """onnxruntime on ``threads`` threads that sleep between runs: in interleaved rounds no
    runtime may keep spinning on the cores the next one needs."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads, options.inter_op_num_threads = threads, 1
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return ort.InferenceSession(model.SerializeToString(), options,
                                providers=["CPUExecutionProvider"])
