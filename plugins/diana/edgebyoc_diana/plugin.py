"""The diana target: DIANA's digital 16x16 PE accelerator and analog in-memory-computing array,
with host fallback (MATCH, Hamdi et al., section V-A; the analog array as HTVM runs it).

Modules:

* ``digital``: int8 convolutions (filters 1x1, 3x3, 5x5, 7x7, strides 1 and 2, groups 1 or
  depthwise), fully connected layers and element-wise adds, each with requantization; 256 kB
  activation L1 (``l1_kb``) beside a private 64 kB weight memory, 512 kB L2, blocking DMA;
  activations in the accelerator's NCHW-derived layout (channel planes), weights K-blocked.
* ``analog``: convolutions (groups 1) and fully connected layers whose weights are ternary
  (-1 / 0 / +1), in a 1152-row x 512-column array; weights live in the array, activations in
  the same L1, channels-last (one C * FY * FX column per output pixel).

A ternary layer is offered to both modules and the cost hook decides (``analog=auto``);
``analog=force`` gives every ternary layer to the analog array, ``analog=off`` never uses it.
The report names the module of each layer and why. Everything else (DS-CNN's 10x4 filter,
pooling, softmax) runs on the host CPU with the reason in the report.

Network transformations: integerization (``edgebyoc.api.quant.Integerize``, int8 operators
with TFLite's requantization) and channels-last at the ``import`` stage; float models are
refused. Both accelerators requantize like TFLite here (see README: DIANA's real digital
accelerator requantizes by shifts).
"""

from __future__ import annotations

import math
from importlib import resources
from pathlib import Path

import numpy as np

from edgebyoc.api import (ApiBinding, Cost, ExecModule, MemoryLevel, PatternEntry, Target,
                          TargetOption, calibrated_constants, hookimpl)
from edgebyoc.api.match import host_binding, layer_codegen, schedule_cost
from edgebyoc.api.quant import (add_pattern, conv2d_geometry, conv2d_pattern, dense_pattern,
                                int8_import_passes, matched_call)

from . import cost

L1 = MemoryLevel("L1", 256 * 1024, read_bytes_per_cycle=64, write_bytes_per_cycle=64,
                 operands=("I", "O"), size_option="l1_kb")
WEIGHT_MEMORY = MemoryLevel("WMEM", 64 * 1024, operands=("W",))
AIMC_ARRAY = MemoryLevel("AIMC", cost.AIMC_ROWS * cost.AIMC_COLUMNS, operands=("W",))
L2 = MemoryLevel("L2", 512 * 1024, read_bytes_per_cycle=cost.L2_BYTES_PER_CYCLE,
                 write_bytes_per_cycle=cost.L2_BYTES_PER_CYCLE)

DIGITAL = ExecModule(
    "digital", "16x16 PE array, int8 (K and OX unrolled)",
    memory_levels=(L1, WEIGHT_MEMORY, L2), spatial_mapping={"K": cost.PE_K, "OX": cost.PE_OX},
    max_region_composites=1, min_region_macs=0,
    # MATCH V-A: "a custom NCHW-derived data layout": channel planes, here cut in rows (NHCW,
    # rows outermost) so that a depth-first streamed C project can write a layer's output over
    # its input's dead rows; the core permutes only at host boundaries
    activation_layout="NHCW",
    # the private weight memory keeps what it holds between layer calls: a depth-first C
    # project loads a streamed chain's weights there once, not once per band of rows
    weight_memory="WMEM")
ANALOG = ExecModule(
    "analog", "1152 x 512 ternary in-memory-computing array",
    memory_levels=(L1, AIMC_ARRAY, L2), spatial_mapping={"K": cost.AIMC_COLUMNS},
    max_region_composites=1, priority=1)

TARGET = Target(
    name="diana",
    description="DIANA: digital 16x16 PE accelerator + analog in-memory array, tiled C with "
                "blocking L2->L1 DMA (MATCH)",
    modules=(DIGITAL, ANALOG), c_project=True, clock_hz=cost.CLOCK_HZ, api_version="2.10",
    # cost constants fitted to MATCH's board figures (Table III, benchmarks/diana_table_iii.py)
    calibration=cost.PARAMETERS,
    default_calibration=str(Path(__file__).parent / "calibration" / "match_table_iii.json"),
    options=(
        TargetOption("l1_kb", int, 256, "activation L1 size in kB the layers may use",
                     minimum=8, maximum=256),
        TargetOption("modules", str, "digital,analog", "execution modules to use "
                     "(comma-separated; empty: host only)", choices=("digital", "analog"),
                     multiple=True),
        TargetOption("analog", str, "auto", "ternary layers: offered to both modules (auto), "
                     "always on the analog array (force), never (off)",
                     choices=("auto", "force", "off")),
    ),
)

#: the filters the digital array's convolution primitive takes
DIGITAL_FILTERS = ((1, 1), (3, 3), (5, 5), (7, 7))
SOC_HEADER, ANALOG_HOST_HEADER = "diana_soc.h", "diana_analog_host.h"


def _header(name: str) -> str:
    return resources.files("edgebyoc_diana.templates").joinpath(name).read_text()


def _option_items(options, name):
    option = next(o for o in TARGET.options if o.name == name)
    return option.items(options[name])


def _ternary(call) -> bool:
    weight = call.args[1].value.numpy()
    return bool(np.isin(weight, (-1, 0, 1)).all())


def _conv_check(module_name, options):
    def check(ctx):
        conv = conv2d_geometry(ctx)
        if conv["layout"] != "NHWC" or conv["dilation"] != (1, 1):
            return "the accelerators run undilated NHWC convolutions"
        if module_name == "analog":
            if conv["groups"] != 1:
                return "the analog array runs convolutions with groups 1"
            return _analog_check(matched_call(ctx, "relax.nn.conv2d"), options)
        if conv["groups"] > 1 and not conv["depthwise"]:
            return "grouped convolutions other than depthwise are not supported"
        if conv["filter"] not in DIGITAL_FILTERS:
            return f"the digital array runs 1x1, 3x3, 5x5 and 7x7 filters, not " \
                   f"{conv['filter'][0]}x{conv['filter'][1]}"
        if any(s not in (1, 2) for s in conv["strides"]):
            return "the digital array supports strides 1 and 2"
        return _digital_check(matched_call(ctx, "relax.nn.conv2d"), options)
    return check


def _dense_check(module_name, options):
    def check(ctx):
        call = matched_call(ctx, "relax.matmul")
        shape = [int(d) for d in call.args[0].ty.shape.values]
        if len(shape) != 2 or shape[0] != 1:
            return "dense layers take one row"
        if module_name == "analog":
            return _analog_check(call, options)
        return _digital_check(call, options)
    return check


def _analog_check(call, options):
    if not _ternary(call):
        return "the weights are not ternary (-1 / 0 / +1)"
    return True


def _digital_check(call, options):
    if options["analog"] == "force" and "analog" in _option_items(options, "modules") \
            and _ternary(call):
        return "ternary weights go to the analog array (analog=force)"
    return True


@hookimpl
def edgebyoc_targets():
    return [TARGET]


@hookimpl
def edgebyoc_patterns(target, module, options):
    if module.name not in _option_items(options, "modules") or \
            (module.name == "analog" and options["analog"] == "off"):
        return []
    entries = [PatternEntry("conv2d", conv2d_pattern(), check=_conv_check(module.name, options)),
               PatternEntry("dense", dense_pattern(), check=_dense_check(module.name, options))]
    if module.name == "digital":
        entries.append(PatternEntry("add", add_pattern()))
    return entries


@hookimpl
def edgebyoc_transforms(target, stage):
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
    elements = math.prod(workload.output[0]) if workload.output[0] else 0
    return Cost(latency_cycles=cost.host_cycles(workload.macs, elements,
                                                calibrated_constants(target, options)))


@hookimpl
def edgebyoc_runtime_apis(target, module, flavour):
    if flavour == "host":
        if module.name == "digital":
            return host_binding()
        core = host_binding()
        return ApiBinding("host", platform=core.platform, memory=core.memory,
                          synchronization=core.synchronization,
                          computation={"kernel": "diana_host_analog_kernel"},
                          headers=(ANALOG_HOST_HEADER,))
    if flavour != "soc":
        return None
    # blocking DMA and one active accelerator: no synchronization family (MATCH, V-A)
    return ApiBinding(
        "soc", platform={"setup": f"diana_{module.name}_init",
                         "shutdown": f"diana_{module.name}_deinit"},
        memory={"l1_alloc": "diana_l1_malloc", "l1_free": "diana_l1_free",
                "dma_in_3d": "diana_dma_l2_to_l1", "dma_out_3d": "diana_dma_l1_to_l2"},
        computation={"kernel": f"diana_{module.name}_layer_tile"}, headers=(SOC_HEADER,))


@hookimpl
def edgebyoc_codegen(target, module, region, schedule, context):
    files = {f"include/{SOC_HEADER}": _header(SOC_HEADER)}
    if module.name == "analog":
        files[f"include/{ANALOG_HOST_HEADER}"] = _header(ANALOG_HOST_HEADER)
    # the digital array reads the weights of 16 output channels at once (its K unrolling):
    # they are stored K-padded to a multiple of 16 and interleaved by 16, reshaped once here
    block = cost.PE_K if module.name == "digital" else 1
    return layer_codegen(module, region, schedule, context, platform_files=files,
                         weight_block=block, description=f"on diana {module.name}")


@hookimpl
def edgebyoc_project_files(target, options, sources):
    listed = " ".join(sources)
    return {"diana.mk": (
        "# diana: the deployable network with the DIANA runtime (soc binding); not built\n"
        "# here (no SDK): the host-emulation build of the same sources is the Makefile.\n"
        "# Include from the DIANA SDK's application Makefile.\n"
        f"DIANA_NETWORK_SRCS = {listed}\n"
        "DIANA_NETWORK_INCLUDES = -I. -Iinclude -Ibindings/soc\n")}
