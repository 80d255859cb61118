"""One point of a sweep, run in a process of its own.

``run_isolated`` (called by the local pool's threads, or inside a Ray task) starts a child
process for the point, waits at most the point's timeout for its row and ends it otherwise: a
point that hangs, crashes the interpreter or exhausts memory becomes a row with its error, and
the sweep goes on. Children come from a fork server that has already imported edgebyoc and TVM,
so a point does not pay the import again.

``run_point`` (in the child) compiles the model, verifies it when asked, and returns the row:
the report's figures (see ``COLUMNS``), or the error on one line.
"""

from __future__ import annotations

import multiprocessing
import os
import resource
import signal
import sys
import threading
import tempfile
import time
from pathlib import Path
from typing import Any

#: the columns of a sweep's table, in order (``option.<name>`` columns follow ``options``)
COLUMNS = (
    "model", "target", "options", "status", "error",
    "operators", "macs", "offloaded_operators", "node_offload_ratio", "mac_offload_ratio",
    "regions_offloaded", "predicted_cycles", "predicted_latency_ms", "macs_per_cycle",
    "calibration", "calibration_error_band", "peak_activation_bytes", "arena_bytes",
    "total_activation_bytes", "constant_bytes",
    "verify_passed", "verify_reference", "verify_max_abs", "integer_identical_share",
    "integer_max_lsb", "compile_seconds", "verify_seconds", "peak_rss_mb",
    "edgebyoc_version", "plugin_version", "model_sha256", "key",
)
#: columns that measure the machine (time, and the point process's peak resident memory): the
#: only ones two runs of a point may differ in
TIMING_COLUMNS = ("compile_seconds", "verify_seconds", "peak_rss_mb")
STATUSES = ("ok", "failed", "error", "timeout")


def run_point(point: dict[str, Any], payload: bytes | None = None) -> dict[str, Any]:
    """Compile (and verify) one point; the row of its figures, or of its error.

    ``payload`` is the model's content when the model travelled through Ray's object store
    (the file is then written to a temporary folder under its own name); ``None`` reads
    ``point["model"]``.
    """
    row = _blank_row(point)
    if payload is None:
        return _contained(point, point["model"], row)
    with tempfile.TemporaryDirectory(prefix="edgebyoc-sweep-") as folder:
        path = Path(folder) / Path(point["model"]).name
        path.write_bytes(payload)
        row = _contained(point, str(path), row)
    if row["error"]:  # name the model as the spec does, not by its temporary copy
        row["error"] = row["error"].replace(str(path), point["model"])
    return row


def _contained(point: dict[str, Any], model: str, row: dict[str, Any]) -> dict[str, Any]:
    from ..errors import EdgebyocError, first_line

    try:
        return _compile_and_verify(point, model, row)
    except EdgebyocError as err:
        row.update(status="error", error=first_line(err))
    except Exception as err:  # noqa: BLE001 - an internal failure is still one row
        row.update(status="error", error=f"internal error: {type(err).__name__}: "
                                         f"{first_line(err)}")
    return row


def _blank_row(point: dict[str, Any]) -> dict[str, Any]:
    from .. import version

    row: dict[str, Any] = {column: None for column in COLUMNS}
    row.update(model=Path(point["model"]).name, target=point["target"],
               options=",".join(f"{k}={v}" for k, v in {**point["options"],
                                                          **point.get("compile", {})}.items())
               or "-",
               model_sha256=point["model_sha256"], key=point["key"],
               edgebyoc_version=version.__version__)
    return row


def _compile_and_verify(point: dict[str, Any], model: str, row: dict[str, Any]):
    import edgebyoc
    from ..plugins import default_registry
    from ..verify import verify

    registry = default_registry()
    started = time.perf_counter()
    compiled = edgebyoc.compile(model, target=point["target"], options=point["options"],
                                registry=registry, **point.get("compile", {}))
    row["compile_seconds"] = round(time.perf_counter() - started, 3)
    owner = registry.owner(point["target"])
    row["plugin_version"] = registry.info(owner).version if owner else ""
    summary, project = compiled.report["summary"], compiled.report.get("c_project") or {}
    for column in ("operators", "macs", "offloaded_operators", "node_offload_ratio",
                   "mac_offload_ratio", "regions_offloaded", "predicted_cycles",
                   "predicted_latency_ms", "macs_per_cycle", "peak_activation_bytes",
                   "constant_bytes"):
        row[column] = summary.get(column)
    # which calibration of the cost constants priced predicted_latency_ms
    calibration = summary.get("calibration") or {}
    row["calibration"] = ("uncalibrated" if calibration.get("uncalibrated") else
                          Path(calibration["file"]).name if calibration.get("file") else None)
    row["calibration_error_band"] = calibration.get("error_band")
    row["arena_bytes"] = project.get("arena_bytes") if project.get("generated") else None
    row["total_activation_bytes"] = project.get("total_activation_bytes") \
        if project.get("generated") else None
    if project.get("generated"):
        row["constant_bytes"] = project.get("weights_bytes")
    row["status"] = "ok"
    if point["action"] == "verify":
        started = time.perf_counter()
        result, _ = verify(compiled, seed=point["seed"])
        row["verify_seconds"] = round(time.perf_counter() - started, 3)
        row.update(verify_passed=result.passed, verify_reference=result.reference,
                   verify_max_abs=float(result.max_abs))
        if result.integer is not None and len(result.integer.agreements) > 1:
            model_ref = result.integer.agreements[1]
            row.update(integer_identical_share=model_ref.identical_share,
                       integer_max_lsb=model_ref.max_lsb)
        if not result.passed:
            row.update(status="failed", error=f"verify failed against {result.reference} "
                                              f"(max abs {result.max_abs:.3g})")
    return row


# -- isolation ------------------------------------------------------------------------------

_CONTEXT = None


def _context():
    """The fork server (started once per process), preloaded with edgebyoc and TVM."""
    global _CONTEXT
    if _CONTEXT is None:
        _CONTEXT = multiprocessing.get_context("forkserver")
        _CONTEXT.set_forkserver_preload(["edgebyoc.sweep.worker", "edgebyoc.verify"])
    return _CONTEXT


def _child(connection, point, payload, environment, path) -> None:
    # Ctrl-C reaches the whole process group: the parent ends the points (``stop_points``)
    # and reports once, instead of every point printing its own KeyboardInterrupt
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if environment is not None:  # the caller's environment now, not the fork server's
        os.environ.clear()
        os.environ.update(environment)
        sys.path[:] = path
    from ..plugins import reset_default_registry

    reset_default_registry()
    try:
        row = run_point(point, payload)
        row["peak_rss_mb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)
        connection.send(row)
    finally:
        connection.close()


def run_isolated(point: dict[str, Any], payload: bytes | None, timeout: float,
                 inherit_environment: bool = True,
                 running: "RunningPoints | None" = None) -> dict[str, Any]:
    """Run ``point`` in a child process; its row, or a row saying it timed out or died.

    ``inherit_environment``: the child sees this process's environment variables and
    ``sys.path`` as they are now (plugin switches, test plugins); Ray tasks run with the
    node's own. ``running``: the sweep's ``RunningPoints``, which can end the process.
    """
    context = _context()
    receiver, sender = context.Pipe(duplex=False)
    process = context.Process(
        target=_child, daemon=True,
        args=(sender, point, payload, dict(os.environ) if inherit_environment else None,
              list(sys.path)))
    started = time.perf_counter()
    running = running if running is not None else RunningPoints()
    running.start(process)
    sender.close()
    row = None
    try:
        if receiver.poll(timeout):
            try:
                row = receiver.recv()
            except (EOFError, OSError):
                row = None
        elapsed = time.perf_counter() - started
        if row is None:
            process.join(1.0)
            blank = _blank_row(point)
            if process.exitcode is None:  # still running: the timeout
                blank.update(status="timeout", error=f"ended after the point timeout of "
                                                     f"{timeout:g} s")
                blank["compile_seconds"] = round(elapsed, 3)
            else:
                code = process.exitcode
                how = f"signal {-code}" if code < 0 else f"exit status {code}"
                blank.update(status="error", error=f"the point's process died ({how}) "
                                                   f"without a result")
            row = blank
    finally:
        if process.is_alive():
            process.kill()
        process.join()
        receiver.close()
        running.discard(process)
    row["point_timeout"] = timeout
    return row


class RunningPoints:
    """The point processes of one sweep run: ``stop()`` (on Ctrl-C) ends them at once and
    starts no new one."""

    def __init__(self):
        self._processes: set = set()
        self._lock = threading.Lock()
        self._stopped = False

    def start(self, process) -> None:
        with self._lock:
            if self._stopped:
                raise KeyboardInterrupt
            process.start()
            self._processes.add(process)

    def discard(self, process) -> None:
        with self._lock:
            self._processes.discard(process)

    def stop(self) -> None:
        with self._lock:
            self._stopped = True
            for process in self._processes:
                if process.is_alive():
                    process.kill()
