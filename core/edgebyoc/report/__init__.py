"""The compile report: per-operator placement, MAC counts, offload ratios, stage times.

``report.json`` is the machine-readable form; ``report.md`` is rendered from the core template
``report.md.mako``. The node and MAC offload ratios follow the BYOC paper's Tables 1 and 3: the
share of operators, and of multiply-accumulates, that run on an accelerator module.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..calibration import describe_calibration
from ..codegen.render import render_core_template


def build_report(imported, target, options: dict[str, Any], operators: list[dict[str, Any]],
                 stages: list[dict[str, Any]], host: dict[str, Any], regions=(),
                 constant_bytes: int = 0, memory=None,
                 project_info: dict[str, Any] | None = None, search_seconds: float = 0.0,
                 layout_transforms: tuple[int, int] = (0, 0)) -> dict[str, Any]:
    """Assemble the report dictionary (the content of ``report.json``).

    ``memory`` is the memory stage's plan (``memory_stage.MemoryPlan``): its entry is the
    report's ``memory`` (one schema for the host build and a C project: the decision, the
    activation timeline of what is built and, when depth-first planning changed it, the
    untiled one), and its peak the summary's; ``project_info`` the deployable C project's
    entry; ``layout_transforms`` the ``permute_dims`` the partitioner put on the host at NCHW
    region boundaries and those of the model it made unnecessary there.
    """
    report = _base_report(imported, target, options, operators, stages, host, regions,
                          constant_bytes, memory)
    report["c_project"] = project_info
    used = {r["module"] for r in report["regions"] if r["offloaded"]}
    report["rounding"] = {m.name: m.requantize_rounding for m in target.modules
                          if m.name in used and m.requantize_rounding != "tflite"}
    if memory is not None and memory.kind == "c_project" and memory.enabled:
        _streamed_prediction(report["summary"], memory.extra_cycles)
    report["summary"]["schedule_search_seconds"] = search_seconds
    report["summary"]["layout_transforms"] = layout_transforms[0]
    report["summary"]["layout_transforms_removed"] = layout_transforms[1]
    # which calibration of the cost constants priced it, and the error to expect
    report["summary"]["calibration"] = describe_calibration(target, options)
    return report


def _streamed_prediction(summary: dict[str, Any], extra: float | None) -> None:
    """With a C project streamed depth-first, the summary's predicted cycles and latency
    are the streamed build's (each region's calls priced band by band,
    ``memory.streaming.band_layer``); the ``*_untiled`` keys keep the whole-layer figures."""
    whole = summary.get("predicted_cycles")
    if whole is None or extra is None:
        return
    summary["predicted_cycles_untiled"] = whole
    summary["predicted_latency_ms_untiled"] = summary.get("predicted_latency_ms")
    summary["predicted_cycles"] = whole + extra
    if summary.get("predicted_offload_cycles") is not None:
        summary["predicted_offload_cycles"] += extra
    clock = summary.get("clock_hz")
    if clock:
        summary["predicted_latency_ms"] = (whole + extra) / clock * 1e3
    summary["macs_per_cycle"] = summary["macs"] / (whole + extra) if whole + extra else None


def predicted_cycles(target, regions, operators) -> tuple[float | None, ...]:
    """(offloaded regions', host operators', whole network's) predicted cycles as the target's
    cost models see them; ``None`` where a part has no prediction (the whole network needs
    both parts; the built-in host target has none)."""
    kept = [r for r in regions if r.offloaded]
    predicted = [r.predicted_cycles for r in kept]
    offload_cycles = sum(predicted) if predicted and None not in predicted else None
    host_rows = [op.get("predicted_cycles") for op in operators if op["module"] == "host"]
    host_cycles = sum(host_rows) if None not in host_rows else None
    whole = None
    if host_cycles is not None and (offload_cycles is not None or not kept):
        whole = host_cycles + (offload_cycles or 0.0)
    return offload_cycles, host_cycles, whole


def _base_report(imported, target, options, operators, stages, host, regions, constant_bytes,
                 memory) -> dict[str, Any]:
    total_macs = sum(op["macs"] for op in operators)
    offloaded = [op for op in operators if op["module"] != "host"]
    offloaded_macs = sum(op["macs"] for op in offloaded)
    regions = list(regions)
    kept = [r for r in regions if r.offloaded]
    if not target.modules and target.name != "host":
        note = (f"Target {target.name!r} has no execution modules: every operator runs on its "
                f"processor, " + ("as the C project's kernels." if target.c_project else
                                  "through TVM."))
    elif not target.modules:
        note = "The host target runs every operator on the CPU through TVM."
    elif not regions and any(op["reason"] and not op["reason"].startswith("no pattern of")
                             for op in operators):
        note = (f"Target {target.name!r} has modules "
                f"{', '.join(m.name for m in target.modules)}; their checks or cost models "
                f"refused every match (the reason is in each operator's row), so the whole "
                f"model runs on the host CPU.")
    elif not regions:
        note = (f"Target {target.name!r} has modules "
                f"{', '.join(m.name for m in target.modules)}; no operator matched their "
                f"patterns, so the whole model runs on the host CPU.")
    else:
        note = (f"{len(regions)} region(s) formed by merging, {len(kept)} offloaded after the "
                f"fallback of regions not worth offloading.")
    offload_cycles, host_cycles, whole = predicted_cycles(target, regions, operators)
    clock = target.clock_hz
    return {
        "model": {"name": imported.name, "format": imported.format, "source": imported.source,
                  "sha256": imported.sha256,
                  # ONNX: shape computations folded into values before the importer
                  "folded": getattr(imported, "folded", None)},
        "target": {"name": target.name, "options": options},
        "host": host,
        "inputs": [s.to_dict() for s in imported.inputs],
        "outputs": [s.to_dict() for s in imported.outputs],
        "stages": stages,
        "summary": {
            "operators": len(operators), "offloaded_operators": len(offloaded),
            "macs": total_macs, "offloaded_macs": offloaded_macs,
            "node_offload_ratio": len(offloaded) / len(operators) if operators else 0.0,
            "mac_offload_ratio": offloaded_macs / total_macs if total_macs else 0.0,
            "regions_before_fallback": len(regions), "regions_offloaded": len(kept),
            "predicted_offload_cycles": offload_cycles,
            # the whole network as the target's cost models see it: offloaded regions plus the
            # operators left on the target's host processor (edgebyoc_host_cost)
            "predicted_host_cycles": host_cycles,
            "predicted_cycles": whole,
            "clock_hz": clock,
            "predicted_latency_ms": whole / clock * 1e3 if whole is not None and clock else None,
            "macs_per_cycle": total_macs / whole if whole else None,
            "constant_bytes": constant_bytes,
            "peak_activation_bytes": memory.peak_bytes if memory is not None else None,
            "note": note,
        },
        "memory": memory.to_dict() if memory is not None else None,
        "regions": [r.to_dict() for r in regions],
        "operators": operators,
    }


def render_markdown(report: dict[str, Any]) -> str:
    return render_core_template("report.md.mako", report=report, human_bytes=human_bytes,
                                option_text=option_text, predicted_text=predicted_text,
                                calibration_text=calibration_text)


def human_bytes(count: float) -> str:
    """A byte count for people: ``272 B``, ``55.3 kB``, ``7.69 MB`` (kB = 10^3 bytes)."""
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if count >= scale:
            return f"{count / scale:.3g} {unit}" if count < 100 * scale else \
                f"{count / scale:.0f} {unit}"
    return f"{int(count)} B"


def option_text(value: Any) -> str:
    """An option value as the user wrote it: ``128``, not ``128.0``."""
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def summary_line(report: dict[str, Any]) -> str:
    """The short summary ``edgebyoc compile`` prints."""
    s = report["summary"]
    line = (f"{report['model']['name']} -> {report['target']['name']}: {s['operators']} "
            f"operators, {s['macs'] / 1e6:.1f} M MACs, offloaded {s['offloaded_operators']} "
            f"operators ({100 * s['node_offload_ratio']:.0f} %) and "
            f"{100 * s['mac_offload_ratio']:.0f} % of MACs")
    if s.get("peak_activation_bytes") is not None:
        line += f"\npeak activation memory: {human_bytes(s['peak_activation_bytes'])}"
        memory = report.get("memory") or {}
        timeline = memory.get("timeline") or {}
        if timeline.get("peak_kernel"):
            line += f" (at {timeline['peak_kernel']})"
        if memory.get("enabled") and memory["kind"] == "c_project":
            line += f"; depth-first streaming: {memory['reason']}"
        elif memory.get("enabled"):
            line += (f"; depth-first: {len(memory['macro_kernels'])} macro-kernels, "
                     f"{memory['recompute_factor']:.2f}x MACs, untiled peak "
                     f"{memory['baseline_peak_bytes'] / 1e6:.3f} MB")
        elif memory.get("reason") and memory.get("mode") != "off":
            line += f"; no depth-first tiling: {memory['reason']}"
    project = report.get("c_project")
    if project:
        io = (" (inputs and outputs in it)" if project.get("io_in_arena") else
              f" + {project.get('io_bytes', 0)} bytes of inputs and outputs = "
              f"{project.get('total_activation_bytes')} bytes of activation RAM")
        line += (f"\nC project: {project['steps']} steps, static arena {project['arena_bytes']} "
                 f"bytes{io}, weights {project['weights_bytes']} bytes" if project["generated"]
                 else f"\nno C project: {project['reason']}")
    if report.get("rounding"):
        line += "\nrequantization: " + ", ".join(f"{m} rounds {r.replace('_', ' ')}" for m, r
                                                in sorted(report["rounding"].items()))
    if s.get("regions_before_fallback"):
        line += (f"\nregions: {s['regions_before_fallback']} formed, {s['regions_offloaded']} "
                 f"offloaded")
        if s.get("predicted_offload_cycles") is not None:
            line += f", predicted {s['predicted_offload_cycles']:.0f} cycles on the modules"
    if s.get("predicted_cycles") is not None:
        line += f"\npredicted latency: {predicted_text(s)}"
        if s.get("calibration"):
            line += f" [{calibration_text(s['calibration'])}]"
    return line


def calibration_text(calibration: dict[str, Any]) -> str:
    """``calibrated by gap9_table_iv.json (8 points), expected error within 21 %``."""
    if calibration.get("uncalibrated"):
        return "uncalibrated cost constants"
    name = Path(calibration["file"]).name if calibration.get("file") else "a calibration"
    text = f"calibrated by {name}"
    if calibration.get("points"):
        text += f" ({calibration['points']} points)"
    if calibration.get("error_band") is not None:
        text += f", expected error within {calibration['error_band'] * 100:.0f} %"
    return text


def predicted_text(summary: dict[str, Any]) -> str:
    """``1.23 ms (320,000 cycles at 260 MHz, 2.6 MACs/cycle)``, or the cycles alone."""
    cycles = f"{summary['predicted_cycles']:,.0f} cycles"
    rate = f"{summary['macs_per_cycle']:.2f} MACs/cycle" if summary.get("macs_per_cycle") \
        else ""
    if summary.get("predicted_latency_ms") is not None:
        return (f"{summary['predicted_latency_ms']:.3g} ms ({cycles} at "
                f"{summary['clock_hz'] / 1e6:g} MHz" + (f", {rate})" if rate else ")"))
    return cycles + (f" ({rate})" if rate else "")
