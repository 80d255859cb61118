"""``edgebyoc calibrate``: fit a target's calibration parameters to measured latencies.

Measurements are a CSV file, one row per measured run::

    name,model,options,dfs,split,latency_ms
    resnet cluster,models/resnet8.tflite,modules=cluster,false,fit,5.48
    resnet full,models/resnet8.tflite,modules=cluster;ne16,false,test,2.15

``model`` (a path, relative to the CSV's folder) and ``latency_ms`` (measured on the board)
are required. ``options`` are the target options the run was compiled with
(``name=value`` pairs separated by ``;``), ``dfs`` whether it was streamed depth-first
(default ``false``), ``split`` ``fit`` (default) or ``test``: test rows are predicted with the
fitted constants and never fitted on. A measurement of one layer is a row whose model is that
layer alone (MATCH's micro-benchmarks are such networks).

The fit minimises the relative error of the whole-network predictions of the fit rows (bounded
least squares, ``scipy.optimize.least_squares``, within each ``CalibrationParameter``'s
bounds). The schedule search and the choice of module depend on the constants, so it
alternates: compile every row with the current constants, fit the constants on what those
compiles chose (re-pricing each offloaded layer and host operator through the plugin's cost
hooks), recompile with the fitted constants, until the predictions of a recompile agree with
the re-pricing (or ``rounds`` is reached). Every figure reported comes from a real compile
with the final constants; the leave-one-out error refits without each fit row in turn (on the
final compiles' choices) and predicts it.
"""

from __future__ import annotations

import csv
import math
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

from .calibration import Calibration, check_values, fit_statistics
from .errors import CompileError
from .target import Target

SPLITS = ("fit", "test")
REQUIRED_COLUMNS = ("model", "latency_ms")
AGREEMENT = 1e-3  # recompile vs re-pricing, relative: the fit has converged


@dataclass(frozen=True)
class Measurement:
    """One measured run: a model compiled with ``options`` (and ``dfs``), its latency."""

    name: str
    model: str
    latency_ms: float
    options: dict[str, str] = field(default_factory=dict)
    dfs: bool = False
    split: str = "fit"


def _parse_options(text: str, where: str) -> dict[str, str]:
    options = {}
    for item in filter(None, (part.strip() for part in text.split(";"))):
        name, sep, value = item.partition("=")
        if not sep or not name.strip():
            raise CompileError(f"{where}: option {item!r} is not NAME=VALUE (separate options "
                               f"with ';')")
        options[name.strip()] = value.strip().replace(" ", "")
    return options


def _parse_bool(text: str, where: str) -> bool:
    value = text.strip().lower()
    if value in ("", "0", "false", "no", "off"):
        return False
    if value in ("1", "true", "yes", "on"):
        return True
    raise CompileError(f"{where}: dfs {text!r} is not true or false")


def read_measurements(path: str | Path) -> list[Measurement]:
    """The rows of a measurements CSV (see the module docstring); a missing column, model
    file or a bad value is a ``CompileError`` naming the line."""
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as err:
        raise CompileError(f"measurements {str(path)!r} cannot be read: "
                           f"{err.strerror or err}") from None
    reader = csv.DictReader(text.splitlines())
    missing = [c for c in REQUIRED_COLUMNS if c not in (reader.fieldnames or [])]
    if missing:
        raise CompileError(f"measurements {str(path)!r}: missing column(s) "
                           f"{', '.join(missing)} (columns: name, model, options, dfs, split, "
                           f"latency_ms)")
    rows = []
    for line, row in enumerate(reader, start=2):
        where = f"{path.name} line {line}"
        model = (path.parent / row["model"].strip()).resolve()
        if not model.is_file():
            raise CompileError(f"{where}: model {row['model']!r} not found (at {model})")
        try:
            latency = float(row["latency_ms"])
        except (TypeError, ValueError):
            raise CompileError(f"{where}: latency_ms {row['latency_ms']!r} is not a "
                               f"number") from None
        if not (math.isfinite(latency) and latency > 0):
            raise CompileError(f"{where}: latency_ms must be positive, not {latency}")
        split = (row.get("split") or "fit").strip() or "fit"
        if split not in SPLITS:
            raise CompileError(f"{where}: split {split!r} is not fit or test")
        rows.append(Measurement(
            name=(row.get("name") or "").strip() or f"line {line}", model=str(model),
            latency_ms=latency, options=_parse_options(row.get("options") or "", where),
            dfs=_parse_bool(row.get("dfs") or "", where), split=split))
    if not any(m.split == "fit" for m in rows):
        raise CompileError(f"measurements {str(path)!r} have no fit rows")
    return rows


@dataclass
class _Trace:
    """One row compiled with constants ``values``: what the compile chose, its prediction."""

    measurement: Measurement
    options: dict[str, Any]
    parts: list[tuple[Any, Any, Any]]
    cycles: float  # the compile's whole-network prediction
    part_cycles: list[float]  # each part priced with ``values``

    def predict(self, part_cycles: Sequence[float]) -> float:
        """The whole network's cycles with the parts priced anew (what else the compile
        added, e.g. depth-first streaming, kept)."""
        return self.cycles - sum(self.part_cycles) + sum(part_cycles)


@dataclass
class FitResult:
    """The fitted calibration and, per row, measured and predicted latency (ms)."""

    calibration: Calibration
    rows: list[dict[str, Any]]
    rounds: int


class Fitter:
    """Fits ``target``'s calibration parameters to ``measurements`` (see the module
    docstring). ``progress(message)`` is called as the work goes."""

    def __init__(self, target: Target, registry, measurements: Sequence[Measurement],
                 progress: Callable[[str], None] | None = None,
                 free: Sequence[str] | None = None):
        if not target.calibration:
            raise CompileError(f"target {target.name!r} declares no calibration parameters "
                               f"(Target.calibration): nothing to fit")
        if not target.clock_hz:
            raise CompileError(f"target {target.name!r} has no clock_hz: its cycles cannot "
                               f"be compared with measured milliseconds")
        self.target, self.registry = target, registry
        self.measurements = list(measurements)
        self.params = target.calibration
        names = [p.name for p in self.params]
        unknown = sorted(set(free or ()) - set(names))
        if unknown:
            raise CompileError(f"target {target.name!r} has no calibration parameter "
                               f"{', '.join(map(repr, unknown))} (parameters: "
                               f"{', '.join(names)})")
        #: indices of the parameters fitted; the others keep their starting values
        self.free = [i for i, n in enumerate(names) if free is None or n in free]
        self.progress = progress or (lambda message: None)
        fit_rows = sum(1 for m in self.measurements if m.split == "fit")
        if fit_rows < len(self.free):
            self.progress(f"note: {len(self.free)} parameters fitted on {fit_rows} rows: "
                          f"the fit is not determined by the data alone")
        self._scratch = tempfile.TemporaryDirectory(prefix="edgebyoc-calibrate-")
        self._files = 0

    # compiling and pricing ----------------------------------------------------------------

    def _calibration(self, values: Sequence[float]) -> Calibration:
        return Calibration(self.target.name, {p.name: float(v) for p, v in
                                              zip(self.params, values)})

    def trace(self, measurement: Measurement, values: Sequence[float]) -> _Trace:
        """Compile ``measurement``'s row with the constants ``values``."""
        from .pipeline import compile as compile_model

        self._files += 1
        path = self._calibration(values).save(Path(self._scratch.name) / f"{self._files}.json")
        options = dict(measurement.options, calibration=str(path))
        try:
            compiled = compile_model(measurement.model, self.target.name, options,
                                     registry=self.registry, dfs=measurement.dfs)
        except CompileError as err:
            raise CompileError(f"measurement {measurement.name!r}: {err}") from None
        cycles = compiled.report["summary"]["predicted_cycles"]
        if cycles is None:
            raise CompileError(f"measurement {measurement.name!r}: target "
                               f"{self.target.name!r} gives no whole-network prediction for "
                               f"{Path(measurement.model).name} (an operator without a cost "
                               f"model); it cannot be calibrated on")
        resolved = dict(compiled.report["target"]["options"])
        trace = _Trace(measurement, resolved, compiled.pricing, float(cycles), [])
        trace.part_cycles = self.price(trace, values)
        return trace

    def price(self, trace: _Trace, values: Sequence[float]) -> list[float]:
        """Each part of ``trace`` priced by the plugin's hooks with the constants ``values``."""
        options = dict(trace.options, calibration=self._calibration(values))
        cycles = []
        for module, workload, schedule in trace.parts:
            if module is None:
                cost = self.registry.call(self.target.name, "edgebyoc_host_cost",
                                          target=self.target, workload=workload,
                                          options=options)
            else:
                cost = self.registry.call(self.target.name, "edgebyoc_cost",
                                          target=self.target, module=module,
                                          workload=workload, schedule=schedule,
                                          options=options)
            cycles.append(float(cost.latency_cycles) if cost is not None else 0.0)
        return cycles

    def predicted_ms(self, trace: _Trace, values: Sequence[float]) -> float:
        return trace.predict(self.price(trace, values)) / self.target.clock_hz * 1e3

    # fitting -------------------------------------------------------------------------------

    def _least_squares(self, traces: Sequence[_Trace], start: Sequence[float]) -> list[float]:
        import numpy as np
        from scipy.optimize import least_squares

        free = self.free
        lower = np.array([self.params[i].lower for i in free], float)
        upper = np.array([self.params[i].upper for i in free], float)
        span = upper - lower
        # start strictly inside the bounds (the trust-region method needs it)
        x0 = np.clip(np.asarray([start[i] for i in free], float), lower + 1e-6 * span,
                     upper - 1e-6 * span)

        def full(unit):
            values = list(start)
            for i, v in zip(free, lower + unit * span):
                values[i] = float(v)
            return values

        def residuals(unit):
            values = full(unit)
            return [self.predicted_ms(t, values) / t.measurement.latency_ms - 1.0
                    for t in traces]

        # fitted in units of each parameter's range: constants of very different magnitude
        # (an efficiency near 1, an overhead in thousands of cycles) step alike
        result = least_squares(residuals, (x0 - lower) / span, bounds=(0.0, 1.0),
                               method="trf", xtol=1e-10, ftol=1e-10, max_nfev=400)
        return full(result.x)

    def fit(self, start: Sequence[float] | None = None, rounds: int = 4) -> FitResult:
        values = list(start) if start is not None else [p.default for p in self.params]
        self.initial = list(values)
        fit_rows = [m for m in self.measurements if m.split == "fit"]
        done = 0
        traces = self._compile_all(fit_rows, values, "compiling the fit rows")
        for done in range(1, rounds + 1):
            values = self._least_squares(traces, values)
            expected = [self.predicted_ms(t, values) for t in traces]
            traces = self._compile_all(fit_rows, values, f"round {done}: recompiling")
            actual = [t.cycles / self.target.clock_hz * 1e3 for t in traces]
            drift = max(abs(a / e - 1.0) for a, e in zip(actual, expected))
            self.progress(f"round {done}: recompiled predictions within {drift * 100:.2f} % "
                          f"of the fit's")
            if drift <= AGREEMENT:
                break
        return self._result(traces, values, done)

    def _compile_all(self, rows, values, what: str) -> list[_Trace]:
        traces = []
        for i, row in enumerate(rows, start=1):
            self.progress(f"{what}: {i}/{len(rows)} {row.name}")
            traces.append(self.trace(row, values))
        return traces

    def _result(self, traces: list[_Trace], values: list[float], rounds: int) -> FitResult:
        clock = self.target.clock_hz
        rows = []
        for trace in traces:
            rows.append(self._row(trace.measurement, trace.cycles / clock * 1e3))
        if len(traces) > 1:
            for i, row in enumerate(rows):
                self.progress(f"leave-one-out: {i + 1}/{len(traces)}")
                others = traces[:i] + traces[i + 1:]
                # from the starting values: a parameter only the left-out row determines must
                # not keep the value that row gave it
                loo = self._least_squares(others, self.initial)
                row["loo_ms"] = self.predicted_ms(traces[i], loo)
                row["loo_error"] = row["loo_ms"] / row["measured_ms"] - 1.0
        tests = [m for m in self.measurements if m.split == "test"]
        for i, m in enumerate(tests, start=1):
            self.progress(f"predicting the test rows: {i}/{len(tests)} {m.name}")
            rows.append(self._row(m, self.trace(m, values).cycles / clock * 1e3))
        fitted = self._calibration(values)
        stats = self.statistics(rows)
        return FitResult(Calibration(self.target.name, check_values(
            self.target, fitted.values, "the fit"), stats), rows, rounds)

    @staticmethod
    def _row(m: Measurement, predicted: float) -> dict[str, Any]:
        return {"name": m.name, "split": m.split, "model": Path(m.model).name,
                "options": m.options, "dfs": m.dfs, "measured_ms": m.latency_ms,
                "predicted_ms": predicted, "error": predicted / m.latency_ms - 1.0}

    @staticmethod
    def statistics(rows: list[dict[str, Any]]) -> dict[str, Any]:
        """R^2, Spearman and errors of the fit rows, the test rows and all; leave-one-out
        errors; ``error_band``: the largest error of the fit and test rows when there are test
        rows, else the largest leave-one-out error (a single fit row: its own error)."""
        stats: dict[str, Any] = {}
        for split in ("fit", "test"):
            part = [r for r in rows if r["split"] == split]
            stats[split] = fit_statistics([r["predicted_ms"] for r in part],
                                          [r["measured_ms"] for r in part]) if part else None
        stats["all"] = fit_statistics([r["predicted_ms"] for r in rows],
                                      [r["measured_ms"] for r in rows])
        loo = [abs(r["loo_error"]) for r in rows if "loo_error" in r]
        stats["loo_max_error"] = max(loo) if loo else None
        stats["loo_median_error"] = sorted(loo)[len(loo) // 2] if loo else None
        stats["points"] = sum(1 for r in rows if r["split"] == "fit")
        stats["test_points"] = sum(1 for r in rows if r["split"] == "test")
        if stats["test"]:
            stats["error_band"] = max(stats["test"]["max_error"], stats["fit"]["max_error"])
            stats["error_band_from"] = "the largest error of the fit and test rows"
        elif stats["loo_max_error"] is not None:
            stats["error_band"] = stats["loo_max_error"]
            stats["error_band_from"] = "the largest leave-one-out error"
        else:
            stats["error_band"] = stats["fit"]["max_error"]
            stats["error_band_from"] = "the fit row's error"
        return stats


def calibrate(target_name: str, measurements: Sequence[Measurement], registry=None,
              start: Calibration | None = None, rounds: int = 4, fitted_on: str = "",
              progress: Callable[[str], None] | None = None,
              parameters: Sequence[str] | None = None) -> FitResult:
    """Fit ``target_name``'s calibration parameters to ``measurements``; ``start`` (a
    calibration) gives the starting values, else each parameter's default; ``parameters``
    names the ones to fit (default: all), the others keep their starting values."""
    from .plugins import default_registry

    registry = registry or default_registry()
    target = registry.target(target_name)
    fitter = Fitter(target, registry, measurements, progress, parameters)
    initial = None
    if start is not None:
        merged = {p.name: p.default for p in target.calibration}
        merged.update(start.values)
        initial = [merged[p.name] for p in target.calibration]
    result = fitter.fit(initial, rounds)
    result.calibration = Calibration(target.name, result.calibration.values,
                                     result.calibration.fit, fitted_on)
    return result
