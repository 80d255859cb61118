"""Running a sweep's points: the result cache, the local process pool and Ray.

Every finished point is written at once to ``OUTPUT/points/<key>.json``; a point whose file
exists is not computed again (unless it timed out under a shorter timeout than now, or
``retry_errors`` asks for its error to be retried). An interrupted sweep therefore resumes where
it stopped, and a second run of the same spec computes nothing.
"""

from __future__ import annotations

import json
import os
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from pathlib import Path
from typing import Any, Callable, Iterable

from ..errors import EdgebyocError, first_line
from .spec import Point
from .worker import RunningPoints, _blank_row, run_isolated

CACHE_FOLDER = "points"


class PointCache:
    """The rows of finished points under ``folder``, one JSON file per point key."""

    def __init__(self, folder: Path):
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)

    def path(self, point: Point) -> Path:
        return self.folder / f"{point.key}.json"

    def get(self, point: Point) -> dict[str, Any] | None:
        try:
            row = json.loads(self.path(point).read_text())
        except (OSError, ValueError):
            return None  # missing, or cut short by a kill: computed again
        return row if isinstance(row, dict) and row.get("key") == point.key else None

    def put(self, point: Point, row: dict[str, Any]) -> None:
        """Write atomically: a kill leaves the old file or the new one, never half of one."""
        target = self.path(point)
        temporary = target.with_suffix(f".{os.getpid()}.tmp")
        temporary.write_text(json.dumps(row, indent=1, default=str))
        os.replace(temporary, target)


def needs_run(row: dict[str, Any] | None, timeout: float, retry_errors: bool) -> bool:
    """Whether a cached row must be computed again."""
    if row is None:
        return True
    if row.get("status") == "timeout":
        return float(row.get("point_timeout") or 0) < timeout
    return retry_errors and row.get("status") in ("error", "failed")


def run_local(points: list[Point], timeout: float, jobs: int,
              done: Callable[[Point, dict[str, Any]], None]) -> None:
    """Each point in its own process, at most ``jobs`` at once."""
    running = RunningPoints()
    with ThreadPoolExecutor(max_workers=max(1, jobs), thread_name_prefix="sweep") as pool:
        pending = {pool.submit(run_isolated, point.to_dict(), None, timeout, True, running):
                   point for point in points}
        try:
            while pending:
                finished, _ = wait(pending, return_when=FIRST_COMPLETED)
                for future in finished:
                    point = pending.pop(future)
                    done(point, _row_of(point, future.result))
        except BaseException:
            for future in pending:
                future.cancel()
            running.stop()  # the running points end at once; their threads return
            raise


def _row_of(point: Point, get: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    try:
        return get()
    except Exception as err:  # noqa: BLE001 - the sweep records it and goes on
        row = _blank_row(point.to_dict())
        row.update(status="error", error=f"could not run the point: {type(err).__name__}: "
                                         f"{first_line(err)}")
        return row


def _ray_point(point: dict[str, Any], payload: bytes, timeout: float) -> dict[str, Any]:
    """The Ray task: the same isolated run as locally, the model from the object store."""
    return run_isolated(point, payload, timeout, inherit_environment=False)


def run_ray(points: list[Point], timeout: float, jobs: int | None, address: str | None,
            done: Callable[[Point, dict[str, Any]], None]) -> None:
    """Each point as a Ray task (one CPU each) on the cluster at ``address``, or on a local
    one of ``jobs`` CPUs; each model is put into the object store once."""
    try:
        import ray
    except ImportError as err:
        raise EdgebyocError("--ray needs Ray: pip install 'edgebyoc[ray]'") from err
    started_here = not ray.is_initialized()
    if started_here:
        try:
            ray.init(address=address, num_cpus=None if address else jobs,
                     include_dashboard=False, log_to_driver=False,
                     configure_logging=False)
        except (ConnectionError, RuntimeError, ValueError) as err:
            raise EdgebyocError(f"cannot start or reach a Ray cluster"
                                f"{f' at {address}' if address else ''}: "
                                f"{first_line(err)}") from err
    try:
        task = ray.remote(num_cpus=1, max_retries=0)(_ray_point)
        payloads = {model: ray.put(Path(model).read_bytes())
                    for model in dict.fromkeys(p.model for p in points)}
        pending = {task.remote(point.to_dict(), payloads[point.model], timeout): point
                   for point in points}
        while pending:
            finished, _ = ray.wait(list(pending), num_returns=1)
            for ref in finished:
                point = pending.pop(ref)
                done(point, _row_of(point, lambda: ray.get(ref)))
    finally:
        if started_here:
            ray.shutdown()


def execute(points: Iterable[Point], cache: PointCache, timeout: float, jobs: int,
            use_ray: bool, ray_address: str | None, retry_errors: bool,
            on_row: Callable[[dict[str, Any], bool], None]) -> tuple[dict[str, dict], int]:
    """Rows by point key (cached ones read, the others computed); how many were computed.

    ``on_row(row, computed)`` is called as each row becomes known (for progress output).
    """
    rows: dict[str, dict[str, Any]] = {}
    todo = []
    for point in points:
        cached = cache.get(point)
        if needs_run(cached, timeout, retry_errors):
            todo.append(point)
        else:
            rows[point.key] = cached
            on_row(cached, False)

    def done(point: Point, row: dict[str, Any]) -> None:
        row.setdefault("point_timeout", timeout)
        cache.put(point, row)
        rows[point.key] = row
        on_row(row, True)

    todo = list(dict((p.key, p) for p in todo).values())  # a point listed twice runs once
    if todo and use_ray:
        run_ray(todo, timeout, jobs, ray_address, done)
    elif todo:
        run_local(todo, timeout, jobs, done)
    return rows, len(todo)
