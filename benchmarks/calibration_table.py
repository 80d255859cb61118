"""Shared by gap9_table_iv.py and diana_table_iii.py: published board latencies as an
``edgebyoc calibrate`` measurements file, the fit that writes a plugin's shipped calibration,
and the table of predicted against board latency with the fit / test split."""

from __future__ import annotations

import csv
import time
from pathlib import Path

import edgebyoc
from edgebyoc.calibration import Calibration, load_calibration
from edgebyoc.calibration_fit import calibrate, read_measurements
from edgebyoc.plugins import default_registry

HERE = Path(__file__).resolve().parent


def fit(target: str, measurements: Path, output: str, parameters, start: dict, fitted_on: str):
    """Fit ``parameters`` (the others at ``start`` or their defaults) on the fit rows of
    ``measurements`` and write the calibration to ``output``."""
    registry = default_registry()
    initial = Calibration(target, start)
    began = time.perf_counter()
    result = calibrate(target, read_measurements(measurements), registry, start=initial,
                       fitted_on=fitted_on, parameters=parameters,
                       progress=lambda message: print("  " + message, flush=True))
    result.calibration.save(output)
    print(f"fitted in {time.perf_counter() - began:.0f} s ({result.rounds} round(s)); "
          f"wrote {output}")
    return result


def predictions(target: str, measurements: Path, calibration: str = ""):
    """Per row of ``measurements``: (row, predicted ms with ``calibration`` (empty: the
    plugin's shipped one), the compiled model)."""
    out = []
    for row in read_measurements(measurements):
        options = dict(row.options)
        if calibration:
            options["calibration"] = calibration
        compiled = edgebyoc.compile(row.model, target=target, options=options, dfs=row.dfs)
        out.append((row, compiled.report["summary"]["predicted_latency_ms"], compiled))
    return out


def shipped(target: str):
    registry = default_registry()
    the_target = registry.target(target)
    return load_calibration(the_target.default_calibration, the_target)


def write_measurements(path: Path, rows) -> None:
    """``rows``: (name, model path relative to ``path``'s folder, options, split, ms)."""
    with open(path, "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["name", "model", "options", "dfs", "split", "latency_ms"])
        for name, model, options, split, ms in rows:
            writer.writerow([name, model, options, "false", split, ms])
