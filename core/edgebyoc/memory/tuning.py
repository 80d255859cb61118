"""Measured decisions, in a record the user keeps: how much slower a depth-first host build
runs than the untiled one.

A compile's output is a function of the model, the options and this record: nothing is
timed unless asked. The automatic mode (``MemoryMode.AUTO``) uses a depth-first plan of the
host build only when a tuning record says the tiled build runs within
``request.AUTO_MAX_SLOWDOWN`` of the untiled one; ``compile(..., tuning_record=FILE,
tune=True)`` (CLI ``--tuning-record FILE --tune``) times what the record lacks (both builds
run here in interleaved rounds: machine noise hits both alike; the ratio of the fastest runs
is kept) and writes it there; without ``tune`` the record is only read. The report says which
decision was taken and from what.

The record is a JSON file::

    {"format": 1, "measurements": {"<key>": {"slowdown": 1.03, "cpu": "znver4",
                                            "method": "...", "edgebyoc": "2.4.0"}}}

keyed by both builds' structural hashes, the plan (``memory_stage._recorded_plan``: with
the convolutions each macro-kernel tiles), the LLVM CPU, the thread count and the
versions (``measurement_key``): a record measured on another CPU or version is not used.
"""

from __future__ import annotations

import gc
import hashlib
import json
import time
from pathlib import Path
from typing import Any, Callable

from ..errors import CompileError

FORMAT = 1
#: at most this many interleaved rounds (a sub-millisecond model needs many: its run times
#: are noisy), and the wall time after which no new round starts
ROUNDS, SECONDS = 400, 4.0
#: how the ratio is measured: part of every key, so a change of method measures anew
METHOD = "interleaved, fastest run of each, gc off"


def measurement_key(*parts: object) -> str:
    """The key of a measurement of ``parts`` (the builds, the CPU, ...) by ``METHOD``."""
    text = "\n".join(str(p) for p in (METHOD, *parts))
    return hashlib.sha256(text.encode()).hexdigest()[:32]


class TuningRecord:
    """The measurements in ``path`` (an absent file is an empty record)."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.measurements: dict[str, dict[str, Any]] = {}
        if self.path.exists():
            try:
                data = json.loads(self.path.read_text())
            except (OSError, ValueError, UnicodeDecodeError) as err:
                raise CompileError(f"tuning record {self.path}: unreadable "
                                   f"({type(err).__name__})") from err
            if not isinstance(data, dict) or data.get("format") != FORMAT or \
                    not isinstance(data.get("measurements"), dict):
                raise CompileError(f"tuning record {self.path}: not an edgebyoc tuning record "
                                   f"(format {FORMAT})")
            self.measurements = {k: v for k, v in data["measurements"].items()
                                 if isinstance(v, dict)
                                 and isinstance(v.get("slowdown"), (int, float))}

    def slowdown(self, key: str) -> float | None:
        entry = self.measurements.get(key)
        return None if entry is None else float(entry["slowdown"])

    def store(self, key: str, slowdown: float, **detail: Any) -> None:
        """Add a measurement and write the record (atomically)."""
        from ..runtime.safe_output import write_file_atomically

        self.measurements[key] = {"slowdown": slowdown, "method": METHOD, **detail}
        text = json.dumps({"format": FORMAT, "measurements": self.measurements}, indent=1,
                          sort_keys=True) + "\n"
        self.path.parent.mkdir(parents=True, exist_ok=True)
        write_file_atomically(self.path, lambda file: file.write_text(text), "tuning record")


def measure_slowdown(run_untiled: Callable[[], object], run_tiled: Callable[[], object],
                     rounds: int = ROUNDS, seconds: float = SECONDS) -> float:
    """Fastest tiled run time / fastest untiled run time, rounded to 4 decimals (as stored).

    Each callable runs its build once. One warm-up run each, then up to ``rounds``
    interleaved rounds (at least 5), no new round after ``seconds``.

    Example::

        >>> import time
        >>> ratio = measure_slowdown(lambda: time.sleep(0.002), lambda: time.sleep(0.004),
        ...                          rounds=5)
        >>> 1.3 < ratio < 3.0
        True
    """
    run_untiled()
    run_tiled()
    times: dict[str, list[float]] = {"untiled": [], "tiled": []}
    # the compile's garbage would otherwise be collected during the runs (measured: up to
    # 1.5x slower sub-millisecond runs inside a compile than after it)
    gc.collect()
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        start = time.perf_counter()
        while len(times["tiled"]) < rounds and (len(times["tiled"]) < 5 or
                                                time.perf_counter() - start < seconds):
            for name, run in (("untiled", run_untiled), ("tiled", run_tiled)):
                t = time.perf_counter()
                run()
                times[name].append(time.perf_counter() - t)
    finally:
        if was_enabled:
            gc.enable()
    # the fastest run of each: what the build can do, the rest is the shared machine's noise
    return round(min(times["tiled"]) / max(min(times["untiled"]), 1e-9), 4)
