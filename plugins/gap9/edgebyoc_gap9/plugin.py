"""The gap9 target: GAP9's 8-core cluster and NE16 accelerator with host fallback (MATCH).

Modules (MATCH, V-B): ``cluster`` (PULP-NN-like int8 kernels: convolution, depthwise,
pointwise, dense and add, all with requantization; spatial mapping OY=8, OX=2, K=4) and
``ne16`` (1x1 and 3x3 convolutions, depthwise 3x3, strides 1 and 2, fully connected when
``ne16_fc`` is on; hardware requantization rounds half up in one step). Both share the L1
(``l1_kb``, 128 kB in the paper) under a 1.5 MB L2 and move data with asynchronous DMA.

Network transformations (paper Table II): integerization at the ``import`` stage
(``edgebyoc.api.quant.Integerize``: int8 operators with f(x) = (x * M + B) >> S requantization);
the activations stay NHWC as TFLite gives them; each module's codegen stores the weights in its
layout (cluster: K-major OHWI; NE16: input channels padded to 16 per group).
"""

from __future__ import annotations

from pathlib import Path

from edgebyoc.api import (Cost, ExecModule, MemoryLevel, PatternEntry, Target, TargetOption,
                          calibrated_constants, hookimpl)
from edgebyoc.api.match import schedule_cost
from edgebyoc.api.quant import (add_pattern, avg_pool_check, avg_pool_pattern, conv2d_geometry,
                                conv2d_pattern, dense_pattern, int8_import_passes, matched_call)

from . import codegen, cost

L1 = MemoryLevel("L1", 128 * 1024, read_bytes_per_cycle=cost.DMA_BYTES_PER_CYCLE,
                 write_bytes_per_cycle=cost.DMA_BYTES_PER_CYCLE, double_buffering=True,
                 size_option="l1_kb")
L2 = MemoryLevel("L2", 1536 * 1024)

CLUSTER = ExecModule(
    name="cluster", description="8 RISC-V cores, PULP-NN-like int8 kernels",
    memory_levels=(L1, L2), spatial_mapping={"OY": 8, "OX": 2, "K": 4},
    max_region_composites=1, min_region_macs=0, priority=0, accumulator_bits=32,
    partial_sum_dims=("C", "FY", "FX"))
NE16 = ExecModule(
    name="ne16", description="NE16 convolution accelerator",
    memory_levels=(L1, L2), spatial_mapping={"OY": 3, "OX": 3, "K": 32, "C": 16},
    max_region_composites=1, min_region_macs=1, priority=1, requantize_rounding="half_up",
    accumulator_bits=32)

TARGET = Target(
    name="gap9",
    description="GreenWaves GAP9: 8-core cluster + NE16, tiled C with L2->L1 DMA (MATCH)",
    modules=(CLUSTER, NE16),
    c_project=True, clock_hz=cost.CLOCK_HZ, api_version="2.9",
    # cost constants fitted to MATCH's board figures (Table IV, benchmarks/gap9_table_iv.py)
    calibration=cost.PARAMETERS,
    default_calibration=str(Path(__file__).parent / "calibration" / "match_table_iv.json"),
    options=(
        TargetOption("l1_kb", float, 128.0, "shared L1 size in kB the layers may use",
                     minimum=0.5, maximum=128.0),
        TargetOption("modules", str, "cluster,ne16",
                     "execution modules to use (comma-separated; empty: host only)",
                     choices=("cluster", "ne16"), multiple=True),
        TargetOption("ne16_fc", bool, True, "offload fully connected layers to NE16 too"),
    ),
)


def _enabled(options, module) -> bool:
    modules = next(o for o in TARGET.options if o.name == "modules")
    return module.name in modules.items(options["modules"])


def _conv_check(module_name):
    def check(ctx):
        conv = conv2d_geometry(ctx)
        if conv["layout"] != "NHWC":
            return "activations are not NHWC"
        if conv["dilation"] != (1, 1):
            return "dilated convolutions are not supported"
        fy, fx = conv["filter"]
        if conv["groups"] > 1 and not conv["depthwise"]:
            return "grouped convolutions other than depthwise are not supported"
        if module_name == "ne16":
            if (fy, fx) not in ((1, 1), (3, 3)):
                return f"NE16 runs 1x1 and 3x3 filters, not {fy}x{fx}"
            if conv["depthwise"] and (fy, fx) != (3, 3):
                return "NE16 runs depthwise 3x3 only"
            if any(s not in (1, 2) for s in conv["strides"]):
                return "NE16 supports strides 1 and 2"
        return True
    return check


def _dense_check(module_name, options):
    def check(ctx):
        if module_name == "ne16" and not options.get("ne16_fc", True):
            return "fully connected on NE16 is switched off (ne16_fc)"
        call = matched_call(ctx, "relax.matmul")
        shape = [int(d) for d in call.args[0].ty.shape.values]
        if len(shape) != 2 or shape[0] != 1:
            return "dense layers take one row"
        return True
    return check


@hookimpl
def edgebyoc_targets():
    return [TARGET]


@hookimpl
def edgebyoc_patterns(target, module, options):
    if not _enabled(options, module):
        return []
    entries = [PatternEntry("conv2d", conv2d_pattern(), check=_conv_check(module.name)),
               PatternEntry("dense", dense_pattern(), check=_dense_check(module.name, options))]
    if module.name == "cluster":
        entries.append(PatternEntry("add", add_pattern()))
        entries.append(PatternEntry("avg_pool", avg_pool_pattern(), check=avg_pool_check))
    return entries


@hookimpl
def edgebyoc_transforms(target, stage):
    # NCHW models (ONNX) to NHWC, dequantize -> op -> quantize chains to int8 operators, float
    # models refused (paper Table II: quantized models, NHWC layout)
    return int8_import_passes(target.name) if stage == "import" else []


@hookimpl
def edgebyoc_cost(target, module, workload, schedule, options):
    constants = calibrated_constants(target, options)
    return schedule_cost(workload, schedule,
                         lambda nest, s: cost.price(module.name, nest, s, constants))


@hookimpl
def edgebyoc_host_cost(target, workload, options):
    # the operators left on the SoC's control core (fabric controller / RISC-V), for the
    # report's whole-network latency
    return Cost(latency_cycles=cost.host_cycles(workload, calibrated_constants(target, options)))


@hookimpl
def edgebyoc_codegen(target, module, region, schedule, context):
    return codegen.generate(module, region, schedule, context)


@hookimpl
def edgebyoc_runtime_apis(target, module, flavour):
    return codegen.binding(module.name, flavour)


@hookimpl
def edgebyoc_project_files(target, options, sources):
    return codegen.sdk_build_files(target, options, sources)
