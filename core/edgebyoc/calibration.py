"""Cost-model calibration: the constants a plugin declares (``Target.calibration``) fitted to
latencies measured on a board, and the calibration in force for a compile.

A calibration file (JSON, written by ``edgebyoc calibrate``) names its target, gives a value
for some or all of the target's ``CalibrationParameter`` s, and records how the fit went::

    {"format": "edgebyoc-calibration/1", "target": "gap9",
     "values": {"cluster_efficiency": 0.47, ...},
     "fit": {"points": 8, "r2": 0.98, "spearman": 0.95, "loo_max_error": 0.21,
             "test_max_error": 0.19, "error_band": 0.21, ...},
     "fitted_on": "MATCH Table IV, Cluster+CPU and NE16+CPU columns"}

Which calibration prices a compile: the option ``calibration`` (a file), else the plugin's
``Target.default_calibration``, else the parameters' defaults; ``uncalibrated`` forces the
defaults. Plugins read the values with ``calibrated_constants(target, options)``
(``edgebyoc.api``); the fit itself is ``edgebyoc.calibration_fit``.
"""

from __future__ import annotations

import contextlib
import contextvars
import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from .errors import CompileError
from .target import Target

FORMAT = "edgebyoc-calibration/1"
UNCALIBRATED = "uncalibrated"


@dataclass(frozen=True)
class Calibration:
    """Values for a target's calibration parameters, with the statistics of their fit.

    ``values`` maps parameter names to numbers (a parameter left out keeps its default);
    ``fit`` holds what ``edgebyoc calibrate`` measured (points, R^2, Spearman's rank
    correlation, leave-one-out and test errors, ``error_band``: the relative error to
    expect); ``fitted_on`` says on what; ``path`` is the file it was read from, if any.
    """

    target: str
    values: Mapping[str, float]
    fit: Mapping[str, Any] = field(default_factory=dict)
    fitted_on: str = ""
    path: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"format": FORMAT, "target": self.target,
                "values": {k: float(v) for k, v in self.values.items()},
                "fit": dict(self.fit), "fitted_on": self.fitted_on}

    def save(self, path: str | os.PathLike) -> Path:
        """Write the file (through a temporary file: never half-written)."""
        path = Path(path)
        temporary = path.with_name(path.name + ".partial")
        temporary.write_text(json.dumps(self.to_dict(), indent=1) + "\n")
        os.replace(temporary, path)
        return path

    @property
    def error_band(self) -> float | None:
        band = self.fit.get("error_band")
        return float(band) if band is not None else None

    def describe(self) -> dict[str, Any]:
        """What the report says about it."""
        return {"file": self.path or None, "fitted_on": self.fitted_on or None,
                "points": self.fit.get("points"), "error_band": self.error_band}


def check_values(target: Target, values: Mapping[str, Any], where: str) -> dict[str, float]:
    """``values`` checked against the target's parameters: unknown names and values out of
    bounds are a ``CompileError`` naming ``where``, the parameter and what is allowed."""
    known = {p.name: p for p in target.calibration}
    checked = {}
    for name, value in values.items():
        if name not in known:
            raise CompileError(f"{where}: target {target.name!r} has no calibration parameter "
                               f"{name!r} (parameters: {', '.join(known) or 'none'})")
        try:
            checked[name] = known[name].check(value)
        except ValueError as err:
            raise CompileError(f"{where}: {err}") from None
    return checked


def calibration_from_dict(target: Target, data: Any, where: str) -> Calibration:
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise CompileError(f"{where} is not an edgebyoc calibration file (expected "
                           f"\"format\": \"{FORMAT}\")")
    if data.get("target") != target.name:
        raise CompileError(f"{where} calibrates target {data.get('target')!r}, not "
                           f"{target.name!r}")
    values = data.get("values")
    if not isinstance(values, dict):
        raise CompileError(f"{where}: \"values\" must map parameter names to numbers")
    fit = data.get("fit") or {}
    return Calibration(target.name, check_values(target, values, where),
                       fit if isinstance(fit, dict) else {}, str(data.get("fitted_on", "")),
                       where)


_CACHE: dict[tuple[str, str, int, float], Calibration] = {}


def load_calibration(path: str | os.PathLike, target: Target) -> Calibration:
    """The calibration file at ``path`` for ``target`` (cached while the file is unchanged);
    a missing, malformed or foreign file is a ``CompileError`` naming it."""
    path = Path(path)
    try:
        stat = path.stat()
    except OSError as err:
        raise CompileError(f"calibration file {str(path)!r} cannot be read: "
                           f"{err.strerror or err}") from None
    key = (target.name, str(path.resolve()), stat.st_size, stat.st_mtime)
    if key not in _CACHE:
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError) as err:
            raise CompileError(f"calibration file {str(path)!r} is not valid JSON: "
                               f"{err}") from None
        _CACHE[key] = calibration_from_dict(target, data, str(path))
    return _CACHE[key]


def calibration_in_force(target: Target, options: Mapping[str, Any] | None
                         ) -> Calibration | None:
    """The calibration that prices a compile with ``options`` (see the module docstring);
    ``None``: the parameters' defaults."""
    if not target.calibration:
        return None
    given = (options or {}).get("calibration", "")
    if isinstance(given, Calibration):
        return given
    if given == UNCALIBRATED:
        return None
    if given:
        return load_calibration(given, target)
    default = target.default_calibration
    if callable(default):
        default = default(options or {})
    return load_calibration(default, target) if default else None


def calibrated_constants(target: Target, options: Mapping[str, Any] | None) -> dict[str, float]:
    """The values of ``target``'s calibration parameters for a compile with ``options``:
    each parameter's default, overlaid with the calibration in force (the option
    ``calibration``, else ``Target.default_calibration``). Call it from cost hooks.

    Example::

        @hookimpl
        def edgebyoc_cost(target, module, workload, schedule, options):
            k = calibrated_constants(target, options)
            cycles = workload.macs / k["macs_per_cycle"] + k["layer_cycles"]
            return Cost(latency_cycles=cycles)
    """
    memo = _CONSTANTS_MEMO.get()
    key = (target.name, id(target), tuple(sorted((k, str(v)) for k, v in (options or {}).items())))
    if memo is not None and key in memo:
        return dict(memo[key])
    values = {p.name: float(p.default) for p in target.calibration}
    calibration = calibration_in_force(target, options)
    if calibration is not None:
        values.update(calibration.values)
    if memo is not None:
        memo[key] = dict(values)
    return values


#: within one compile (``constants_memo``), ``calibrated_constants`` per target and options:
#: the cost hooks ask for them once per candidate schedule, and the calibration file does
#: not change in the middle of a compile
_CONSTANTS_MEMO: contextvars.ContextVar[dict | None] = contextvars.ContextVar(
    "edgebyoc_calibrated_constants", default=None)


@contextlib.contextmanager
def constants_memo():
    """Remember ``calibrated_constants`` for the duration of the block (one compile)."""
    token = _CONSTANTS_MEMO.set({})
    try:
        yield
    finally:
        _CONSTANTS_MEMO.reset(token)


def describe_calibration(target: Target, options: Mapping[str, Any] | None
                         ) -> dict[str, Any] | None:
    """The report's ``summary["calibration"]``: which calibration priced the compile and its
    expected error band; ``None`` for a target without calibration parameters."""
    if not target.calibration:
        return None
    calibration = calibration_in_force(target, options)
    if calibration is None:
        return {"file": None, "fitted_on": None, "points": None, "error_band": None,
                "uncalibrated": True}
    return {**calibration.describe(), "uncalibrated": False}


def relative_errors(predicted, measured) -> list[float]:
    return [p / m - 1.0 for p, m in zip(predicted, measured)]


def fit_statistics(predicted, measured) -> dict[str, float | None]:
    """R^2 of ``predicted`` against ``measured`` (plain, on the values), Spearman's rank
    correlation, and the median and largest absolute relative error."""
    import numpy as np
    from scipy.stats import spearmanr

    p = np.asarray(predicted, float)
    m = np.asarray(measured, float)
    errors = np.abs(p / m - 1.0)
    total = float(np.sum((m - m.mean()) ** 2))
    r2 = 1.0 - float(np.sum((p - m) ** 2)) / total if total > 0 else None
    rho = float(spearmanr(p, m).statistic) if len(m) > 2 and np.ptp(m) > 0 else None
    return {"r2": r2, "spearman": None if rho is None or math.isnan(rho) else rho,
            "median_error": float(np.median(errors)) if len(errors) else None,
            "max_error": float(errors.max()) if len(errors) else None}
