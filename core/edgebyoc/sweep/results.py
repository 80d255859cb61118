"""A sweep's results: the table (CSV, and Parquet when pyarrow is installed), the plots of
MACs per cycle against each swept option, and a markdown summary."""

from __future__ import annotations

import csv
import statistics
from collections import defaultdict
from pathlib import Path
from typing import Any

from .spec import Point, _text
from .worker import COLUMNS

PLOT_METRIC = "macs_per_cycle"


def table(points: list[Point], rows: dict[str, dict[str, Any]]) -> tuple[list[str], list[dict]]:
    """(columns, one row per point in the spec's order): ``COLUMNS`` with one
    ``option.<name>`` column per swept target option and one ``compile.<name>`` column per
    swept compile option after ``options``."""
    option_names = list(dict.fromkeys(name for p in points for name, _ in p.options))
    compile_names = list(dict.fromkeys(name for p in points for name, _ in p.compile_options))
    columns = list(COLUMNS)
    at = columns.index("options") + 1
    columns[at:at] = [f"option.{name}" for name in option_names] + \
        [f"compile.{name}" for name in compile_names]
    result = []
    for point in points:
        row = {column: rows[point.key].get(column) for column in COLUMNS}
        row["options"] = point.options_text
        for name in option_names:
            row[f"option.{name}"] = dict(point.options).get(name)
        for name in compile_names:
            row[f"compile.{name}"] = dict(point.compile_options).get(name)
        result.append({column: row.get(column) for column in columns})
    return columns, result


def write_table(folder: Path, columns: list[str], rows: list[dict]) -> list[Path]:
    """``results.csv``, and ``results.parquet`` when pyarrow is installed (each written
    atomically)."""
    from ..runtime.safe_output import write_file_atomically

    def csv_file(path: Path) -> None:
        with open(path, "w", newline="") as handle:
            writer = csv.DictWriter(handle, fieldnames=columns)
            writer.writeheader()
            for row in rows:
                writer.writerow({k: "" if v is None else v for k, v in row.items()})

    written = [write_file_atomically(folder / "results.csv", csv_file, "the sweep's table")]
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        return written
    data = {column: [_parquet_value(row[column]) for row in rows] for column in columns}
    written.append(write_file_atomically(
        folder / "results.parquet", lambda path: pq.write_table(pa.table(data), path),
        "the sweep's table"))
    return written


def _parquet_value(value: Any) -> Any:
    return value if value is None or isinstance(value, (bool, int, float)) else str(value)


def swept_numeric_options(points: list[Point], target: str) -> list[str]:
    """The options of ``target`` swept over more than one numeric value."""
    values: dict[str, set] = defaultdict(set)
    for point in points:
        if point.target == target:
            for name, value in point.options:
                values[name].add(value)
    return [name for name, seen in values.items() if len(seen) > 1 and all(
        isinstance(v, (int, float)) and not isinstance(v, bool) for v in seen)]


#: why a sweep writes no plots when matplotlib is missing (printed and in summary.md)
NO_MATPLOTLIB = ("plots skipped: matplotlib is not installed (pip install 'edgebyoc[plot]' "
                 "adds it)")


def plots_wanted(points: list[Point]) -> bool:
    """Whether the sweep has something to plot: a numeric option swept over several values."""
    return any(swept_numeric_options(points, t) for t in dict.fromkeys(p.target for p in points))


def plot(folder: Path, points: list[Point], rows: dict[str, dict[str, Any]]) -> list[Path]:
    """One plot per target and numeric swept option: MACs/cycle against it, a line per model
    (and per value of the other options). Nothing without matplotlib (``NO_MATPLOTLIB`` says
    so)."""
    from ..runtime.safe_output import write_file_atomically

    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return []
    written = []
    for target in dict.fromkeys(p.target for p in points):
        for option in swept_numeric_options(points, target):
            lines: dict[str, list[tuple[float, float]]] = defaultdict(list)
            for point in points:
                value = rows[point.key].get(PLOT_METRIC)
                if point.target != target or value is None:
                    continue
                others = ",".join(f"{k}={_text(v)}" for k, v in
                                  point.options + point.compile_options if k != option)
                label = Path(point.model).stem + (f" ({others})" if others else "")
                lines[label].append((dict(point.options)[option], value))
            if not lines:
                continue
            figure, axes = plt.subplots(figsize=(6.4, 3.8))
            ticks = sorted({x for line in lines.values() for x, _ in line})
            for label, line in lines.items():
                line.sort()
                axes.plot([x for x, _ in line], [y for _, y in line], marker="o", label=label)
            if min(ticks) > 0 and max(ticks) / min(ticks) >= 8:
                axes.set_xscale("log", base=2)
            axes.set_xticks(ticks, [_text(t) for t in ticks])
            axes.set_xlabel(option)
            axes.set_ylabel("MACs / cycle (predicted)")
            axes.set_title(f"{target}: MACs per cycle against {option}")
            axes.legend(fontsize="small")
            figure.tight_layout()
            path = folder / "plots" / f"{target}_{option}.png"
            path.parent.mkdir(exist_ok=True)
            try:
                write_file_atomically(path, lambda file: figure.savefig(file, dpi=110,
                                                                       format="png"), "a plot")
            finally:
                plt.close(figure)
            written.append(path)
    return written


def summary_markdown(columns: list[str], rows: list[dict], computed: int, plots: list[Path],
                     folder: Path, notes: list[str] = ()) -> str:
    """The sweep in a page: counts, per-point times, the figures table, the errors, plots."""
    by_status = defaultdict(int)
    for row in rows:
        by_status[row["status"]] += 1
    times = [row["compile_seconds"] + (row["verify_seconds"] or 0) for row in rows
             if row["status"] in ("ok", "failed") and row["compile_seconds"] is not None]
    lines = ["# Sweep results", "",
             f"{len(rows)} points: " + ", ".join(f"{by_status[s]} {s}" for s in
                                                ("ok", "failed", "error", "timeout")
                                                if by_status[s])
             + f"; {computed} computed in this run, {len(rows) - computed} from the cache."]
    if times:
        what = "compile + verify" if any(r["verify_seconds"] for r in rows) else "compile"
        lines.append(f"Time per point ({what}): "
                     f"median {statistics.median(times):.1f} s, max {max(times):.1f} s, "
                     f"total {sum(times):.0f} s.")
    lines += ["", "| model | target | options | status | MACs/cycle | predicted ms | "
                  "peak activations (B) | offloaded MACs | verify |",
              "| --- | --- | --- | --- | ---: | ---: | ---: | ---: | --- |"]
    for row in rows:
        verify = "-" if row["verify_passed"] is None else \
            ("passed" if row["verify_passed"] else "FAILED") + f" vs {row['verify_reference']}"
        lines.append(f"| {row['model']} | {row['target']} | {row['options']} | "
                     f"{row['status']} | {_figure(row['macs_per_cycle'], '.2f')} | "
                     f"{_figure(row['predicted_latency_ms'], '.3g')} | "
                     f"{_figure(row['arena_bytes'] or row['peak_activation_bytes'], ',.0f')} | "
                     f"{_figure(row['mac_offload_ratio'], '.0%')} | {verify} |")
    failures = [row for row in rows if row["error"]]
    if failures:
        lines += ["", "## Errors", ""]
        lines += [f"- {row['model']} on {row['target']} ({row['options']}): {row['status']}: "
                  f"{row['error']}" for row in failures]
    if plots:
        lines += ["", "## Plots", ""]
        lines += [f"![{p.stem}]({p.relative_to(folder).as_posix()})" for p in plots]
    if notes:
        lines += [""] + [f"Note: {note}." for note in notes]
    return "\n".join(lines) + "\n"


def _figure(value: Any, spec: str) -> str:
    return "-" if value is None else format(value, spec)
