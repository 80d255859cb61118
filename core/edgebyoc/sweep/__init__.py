"""``edgebyoc sweep``: design-space exploration over models x targets x option grids.

Each point (one model, one target, one value per swept option) compiles, and verifies when the
spec says so, in a process of its own; a point that fails becomes a row with its error and one
that exceeds the point timeout is ended and recorded, while the rest go on. Points run in a
local process pool (``jobs`` at once) or as Ray tasks on a cluster. Results are cached per
point (model content, target, options, versions), so a second run computes only new or changed
points and an interrupted sweep resumes.

Python API::

    from edgebyoc.sweep import SweepSpec, load_spec, run_sweep
    result = run_sweep(load_spec("fig10.toml"), "results/")
    result.rows          # one dict per point, the columns of results.csv
    result.computed      # points computed by this run (the others came from the cache)

The output folder holds ``results.csv`` (and ``results.parquet`` with pyarrow), ``summary.md``,
``plots/<target>_<option>.png`` (MACs per cycle against each numeric swept option) and the
per-point cache ``points/``.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .execute import CACHE_FOLDER, PointCache, execute
from ..runtime.safe_output import write_file_atomically
from .results import NO_MATPLOTLIB, plot, plots_wanted, summary_markdown, table, write_table
from .spec import Point, SweepSpec, SweepSpecError, load_spec
from .worker import COLUMNS, TIMING_COLUMNS

__all__ = ["COLUMNS", "TIMING_COLUMNS", "Point", "SweepResult", "SweepSpec", "SweepSpecError",
           "load_spec", "run_sweep"]


@dataclass
class SweepResult:
    """What ``run_sweep`` produced: rows in the spec's order, how many points this run
    computed, and the files it wrote."""

    columns: list[str]
    rows: list[dict[str, Any]]
    computed: int
    files: list[Path] = field(default_factory=list)
    #: what the user should know about the outputs (e.g. plots skipped, and why)
    notes: list[str] = field(default_factory=list)

    @property
    def errors(self) -> list[dict[str, Any]]:
        return [row for row in self.rows if row["status"] != "ok"]

    @property
    def succeeded(self) -> int:
        """Points that compiled (and verified, when asked)."""
        return sum(row["status"] == "ok" for row in self.rows)


def run_sweep(spec: SweepSpec, output: str | Path, jobs: int | None = None,
              use_ray: bool = False, ray_address: str | None = None,
              point_timeout: float | None = None, retry_errors: bool = False,
              progress: bool = True, registry=None) -> SweepResult:
    """Run every point of ``spec`` not already in ``output``'s cache; write the table, the
    plots and the summary into ``output``.

    ``jobs``: points at once (default: the CPU count; with Ray and no ``ray_address`` the CPUs
    of the local cluster); ``point_timeout`` overrides the spec's; ``retry_errors`` computes
    again the points that ended in an error or a failed verify.
    """
    from ..errors import EdgebyocError

    if jobs is not None and (isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 1):
        raise EdgebyocError(f"jobs: {jobs!r} is not a positive number of processes")
    timeout = spec.point_timeout if point_timeout is None else point_timeout
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or \
            not math.isfinite(timeout) or timeout <= 0:
        raise EdgebyocError(f"point timeout: {timeout!r} is not a positive number of seconds")
    jobs = jobs or os.cpu_count() or 1
    folder = Path(output)
    if folder.exists() and not folder.is_dir():
        raise EdgebyocError(f"sweep output {folder} is a file, not a folder")
    points = spec.points(registry)
    try:
        cache = PointCache(folder / CACHE_FOLDER)
    except OSError as err:
        raise EdgebyocError(f"cannot write the sweep's results into {folder}: "
                            f"{err.strerror or err}") from err
    with _Progress(len(points), enabled=progress) as bar:
        rows, computed = execute(points, cache, timeout, jobs, use_ray, ray_address,
                                 retry_errors, bar.advance)
    columns, ordered = table(points, rows)
    files = write_table(folder, columns, ordered)
    plots = plot(folder, points, rows)
    notes = [NO_MATPLOTLIB] if plots_wanted(points) and not plots and not _has_matplotlib() \
        else []
    files += plots
    summary = write_file_atomically(folder / "summary.md", lambda path: path.write_text(
        summary_markdown(columns, ordered, computed, plots, folder, notes)), "the summary")
    files.append(summary)
    return SweepResult(columns, ordered, computed, files, notes)


def _has_matplotlib() -> bool:
    import importlib.util

    return importlib.util.find_spec("matplotlib") is not None


class _Progress:
    """A progress bar over the points on stderr (rich), with the last point's outcome."""

    def __init__(self, total: int, enabled: bool):
        self.total, self.enabled, self.bar, self.task = total, enabled, None, None

    def __enter__(self) -> "_Progress":
        if self.enabled:
            from rich.console import Console
            from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TextColumn,
                                       TimeElapsedColumn, TimeRemainingColumn)

            self.bar = Progress(TextColumn("sweep"), BarColumn(), MofNCompleteColumn(),
                                TimeElapsedColumn(), TimeRemainingColumn(),
                                TextColumn("{task.description}"),
                                console=Console(stderr=True), transient=False)
            self.bar.start()
            self.task = self.bar.add_task("", total=self.total)
        return self

    def advance(self, row: dict[str, Any], computed: bool) -> None:
        if self.bar is not None:
            note = f"{row['model']} {row['target']} {row['options']}: {row['status']}"
            self.bar.update(self.task, advance=1,
                            description=note if computed else "(cached) " + note)

    def __exit__(self, *exc) -> None:
        if self.bar is not None:
            self.bar.stop()
