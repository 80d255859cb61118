<%!
def fmt_macs(n):
    for unit, scale in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if n >= scale:
            return "%.2f %s" % (n / scale, unit)
    return str(n)
%>\
# Compile report: ${report["model"]["name"]} for ${report["target"]["name"]}

- model: `${report["model"]["source"]}` (${report["model"]["format"]}, sha256 `${report["model"]["sha256"][:12]}`)
% if (report["model"].get("folded") or {}).get("nodes"):
- static shapes folded before import: ${report["model"]["folded"]["nodes"]} node(s) (${", ".join("%s %d" % kv for kv in report["model"]["folded"]["by_op"].items())})${"; left as computations: " + "; ".join(report["model"]["folded"]["kept"]) if report["model"]["folded"]["kept"] else ""}
% endif
- target: **${report["target"]["name"]}**\
% if report["target"]["options"]:
 with ${", ".join("%s=%s" % (k, option_text(v)) for k, v in sorted(report["target"]["options"].items()))}\
% endif

- host CPU: `${report["host"]["cpu"]}`, CPU schedules: ${"on" if report["host"]["schedules"] else "off"}
- inputs: ${", ".join("`%s` %s %s" % (i["name"], i["dtype"], i["shape"]) for i in report["inputs"])}
- outputs: ${", ".join("`%s` %s %s" % (o["name"], o["dtype"], o["shape"]) for o in report["outputs"])}

${"##"} Summary

| | operators | MACs |
| --- | ---: | ---: |
| total | ${report["summary"]["operators"]} | ${fmt_macs(report["summary"]["macs"])} |
| offloaded | ${report["summary"]["offloaded_operators"]} | ${fmt_macs(report["summary"]["offloaded_macs"])} |
| offload ratio | ${"%.1f %%" % (100 * report["summary"]["node_offload_ratio"])} | ${"%.1f %%" % (100 * report["summary"]["mac_offload_ratio"])} |

${report["summary"]["note"]}
% if report["summary"].get("predicted_cycles") is not None:
Predicted latency of the whole network on the target: ${predicted_text(report["summary"])}: the offloaded regions by the modules' cost models, the ${sum(1 for op in report["operators"] if op["module"] == "host")} operators left on the target's host processor by its host model (${"%.0f" % report["summary"]["predicted_host_cycles"]} cycles).
% if report["summary"].get("calibration"):
Cost constants: ${calibration_text(report["summary"]["calibration"])}${"" if report["summary"]["calibration"]["uncalibrated"] else " (`edgebyoc calibrate`; fitted on %s)" % (report["summary"]["calibration"]["fitted_on"] or "measurements")}.
% endif
% endif
% if report.get("c_project") and report["c_project"]["generated"]:
Constants: ${human_bytes(report["c_project"]["weights_bytes"])} of weights in the C project's `weights.c`, each in the layout its module reads.
% else:
Constants: ${human_bytes(report["summary"]["constant_bytes"])}, owned once by the artifact's metadata.
% endif
<% memory = report.get("memory") or {}; timeline = memory.get("timeline") %>\
% if timeline and memory.get("kind") == "c_project":
Peak activation memory (the C project's static arena, tensors alive at once): ${human_bytes(timeline["peak_bytes"])} at `${timeline["peak_kernel"]}` (step ${timeline["peak_step"] + 1} of ${len(timeline["steps"])}).
% elif timeline:
Peak activation memory (host path, after TVM's static memory planning): ${human_bytes(timeline["peak_bytes"])} at kernel `${timeline["peak_kernel"]}` (step ${timeline["peak_step"]} of ${len(timeline["steps"])})${"; a run carves its planned tensors from one arena of %s" % human_bytes(memory["activation_arena_bytes"]) if memory.get("activation_arena_bytes") else ""}.
% endif
% if memory:
% if memory["enabled"] and memory["kind"] == "c_project":
Depth-first streaming of the C project (${memory["mode"]}; decided by ${memory["decision"]}): ${memory["reason"]}; 1.00x MACs (every row computed once).
% if memory.get("streamed_regions"):
<% part_names = sorted({name for r in memory["streamed_regions"] for name in r["parts"]}) %>
What streaming costs each offloaded region (its calls, one band of rows each, priced by its module's cost model, against the whole layer in one call; streamed / untiled):

| region | module | calls | predicted cycles | ${" | ".join(part_names)}${" | " if part_names else ""}weight bytes moved |
| --- | --- | ---: | ---: | ${"---: | " * len(part_names)}---: |
% for r in memory["streamed_regions"]:
| `${r["symbol"]}` | ${r["module"]} | ${r["calls"]} | ${"%.0f / %.0f" % (r["cycles"], r["untiled_cycles"])} | ${" | ".join("%.0f / %.0f" % tuple(r["parts"][name]) if name in r["parts"] else "-" for name in part_names)}${" | " if part_names else ""}${"%d / %d" % tuple(r["weight_bytes"])} |
% endfor
% endif
% elif memory["enabled"]:
Depth-first tiling (${memory["mode"]}; decided by ${memory["decision"]}): ${len(memory["macro_kernels"])} macro-kernels (${sum(1 for k in memory["macro_kernels"] if k["sliding"])} sliding), ${"%.3f" % memory["recompute_factor"]}x MACs, peak without it ${"%.3f" % (memory["baseline_peak_bytes"] / 1e6)} MB.
% elif memory["mode"] != "off":
No depth-first tiling (${memory["decision"]}): ${memory["reason"]}.
% endif
% endif
% if report["regions"]:

${"##"} Regions

Regions before fallback: ${report["summary"]["regions_before_fallback"]}, offloaded: ${report["summary"]["regions_offloaded"]}${"" if report["summary"]["predicted_offload_cycles"] is None else ", predicted offloaded latency: %.0f cycles" % report["summary"]["predicted_offload_cycles"]}.
<% planar = [r for r in report["regions"] if r["offloaded"] and r.get("activation_layout") == "NCHW"] %>\
% if planar:

Activation layout: ${len(planar)} regions (modules ${", ".join(sorted({r["module"] for r in planar}))}) take and return image activations as NCHW channel planes; ${report["summary"].get("layout_transforms", 0)} layout transforms (permute_dims) run on the host where they meet NHWC operators, none between two such regions${"" if not report["summary"].get("layout_transforms_removed") else "; %d of the model's own permutes became unnecessary" % report["summary"]["layout_transforms_removed"]}.
% endif

| region | module | operators | MACs | memory bytes | predicted cycles | offloaded | note |
| ---: | --- | ---: | ---: | ---: | ---: | --- | --- |
% for r in report["regions"]:
| ${r["index"]} | ${r["module"]} | ${r["operators"]} | ${fmt_macs(r["macs"])} | ${r["memory_bytes"]} | ${"-" if r["predicted_cycles"] is None else "%.0f" % r["predicted_cycles"]} | ${"yes" if r["offloaded"] else "no"} | ${r["reason"]} |
% endfor
% endif

<% scheduled = [(r, s, b) for r in report["regions"] for s, b in zip(r.get("schedules") or [], r.get("breakdown") or [None] * 99) if s] %>\
% if scheduled:
${"##"} Schedules (temporal mapping per layer)

| region | module | tiles K / OY / OX | loops (outer first) | buffering | L1 bytes | tile iterations | L_ops | L_mem | other terms |
| ---: | --- | --- | --- | --- | ---: | ---: | ---: | ---: | --- |
% for r, s, b in scheduled:
| ${r["index"]} | ${r["module"]} | ${s["tiles"]["K"]} / ${s["tiles"]["OY"]} / ${s["tiles"]["OX"]} | ${", ".join(s["order"]) or "-"} | ${"double" if s["double_buffer"] else "single"} | ${s["l1_bytes"]} | ${s["iterations"]} | ${"-" if not b else "%.0f" % b.get("L_ops", 0)} | ${"-" if not b else "%.0f" % b.get("L_mem", 0)} | ${", ".join("%s %.4g" % (k, v) for k, v in sorted((b or {}).items()) if k not in ("L_ops", "L_mem") and isinstance(v, (int, float))) or "-"} |
% endfor

L_ops: the cycles the module computes the layer's tiles in; L_mem: the cycles its data transfers between the memory levels take (DMA, with the per-chunk overhead), both as the plugin's cost model predicts them for this schedule; the predicted latency combines them as the module works (the larger of the two when transfers overlap compute, their sum otherwise). Other terms: the rest of the breakdown the plugin's cost model returns (for gap9 and diana, the kernels' efficiency against the model and the fixed cycles per layer and tile of the calibration in force).

% endif
% if report.get("rounding"):
Requantization: ${"; ".join("%s rounds %s (at most 1 LSB per layer from TFLite's rounding)" % (m, r.replace("_", " ")) for m, r in sorted(report["rounding"].items()))}; every other layer rounds as TFLite specifies.

% endif
% if report.get("c_project"):
${"##"} Deployable C project

% if report["c_project"]["generated"]:
`c_project/`: `${report["c_project"]["entry"]}(inputs, outputs)` in network.c (${report["c_project"]["steps"]} steps: ${report["c_project"]["region_steps"]} offloaded layers, ${report["c_project"]["host_steps"]} host kernels), static activation arena ${report["c_project"]["arena_bytes"]} bytes (lower bound ${report["c_project"]["lower_bound_bytes"]}, one buffer per tensor ${report["c_project"]["naive_bytes"]})${", inputs and outputs included" if report["c_project"].get("io_in_arena") else ", plus %d bytes of input and output buffers the caller holds" % report["c_project"]["io_bytes"] if report["c_project"].get("io_bytes") else ""}: ${report["c_project"].get("total_activation_bytes", report["c_project"]["arena_bytes"])} bytes of activation RAM in all; weights ${report["c_project"]["weights_bytes"]} bytes. The artifact runs this C (host binding); `make` in `c_project/` builds the same code with gcc.
% else:
Not generated: ${report["c_project"]["reason"]}. The artifact runs TVM's host build instead.
% endif
% if report.get("mcu_builds"):

Built bare-metal (`make TARGET=...` in `c_project/`) and run under QEMU, outputs compared with the artifact's; flash and RAM from the ELF's sections, the stack's high-water mark from a painted stack:

| MCU | QEMU board | outputs | flash (B) | RAM (B) | .data + .bss (B) | stack used (B) | accelerator L1, emulated (B) | instructions |
| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |
% for build in report["mcu_builds"]:
| ${build["target"]} | ${build["board"]} | ${"bit-exact" if build["bit_exact"] else ("match" if build["outputs_match"] else "DIFFER")} | ${build["flash_bytes"]} | ${build["ram_bytes"]} | ${build["static_ram_bytes"]} | ${build["stack_used"]} | ${build["l1_bytes"]} | ${"{:,}".format(build["instructions"]) if build.get("instructions") else "-"} |
% endfor

RAM is the main memory a run needs (arena, input and output buffers, libraries' state, stack); the emulated accelerator L1 is the chip's scratchpad, a memory of its own. Instructions: those `edgebyoc_network_run` executed under QEMU (`-icount`), the accelerators' layers as their host emulation.
% endif

% endif
${"##"} Stages

| stage | seconds |
| --- | ---: |
% for stage in report["stages"]:
| ${stage["name"]} | ${"%.2f" % stage["seconds"]} |
% endfor

${"##"} Operators

<% priced = any(op.get("predicted_cycles") is not None for op in report["operators"]) %>\
| # | operator | output shape | MACs | runs on | ${"host cycles | " if priced else ""}why |
| ---: | --- | --- | ---: | --- | ${"---: | " if priced else ""}--- |
% for op in report["operators"]:
| ${op["index"]} | `${op.get("callee") or op["op"]}` | ${op["shape"]} | ${fmt_macs(op["macs"])} | ${op["module"]} | ${("-" if op.get("predicted_cycles") is None else "%.0f" % op["predicted_cycles"]) + " | " if priced else ""}${op["reason"]} |
% endfor
