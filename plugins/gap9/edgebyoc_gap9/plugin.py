"""The gap9 target: GAP9's 8-core cluster and NE16 accelerator with host fallback (MATCH).

Modules (MATCH, V-B): ``cluster`` (PULP-NN-like int8 kernels: convolution, depthwise,
pointwise, dense and add, all with requantization; spatial mapping OY=8, OX=2, K=4) and
``ne16`` (1x1 and 3x3 convolutions, depthwise 3x3, strides 1 and 2, fully connected when
``ne16_fc`` is on; hardware requantization rounds half up in one step). Both share the L1
(``l1_kb``, 128 kB in the paper) under a 1.5 MB L2 and move data with asynchronous DMA.

Network transformations (paper Table II): integerization at the ``import`` stage
(``edgebyoc.quant.integerize``: int8 operators with f(x) = (x * M + B) >> S requantization);
the activations stay NHWC as TFLite gives them; each module's codegen stores the weights in its
layout (cluster: K-major OHWI; NE16: input channels padded to 16 per group).
"""

from __future__ import annotations

from importlib import resources

import edgebyoc
from edgebyoc.dse import extract
from edgebyoc.quant.integerize import QADD, REQUANTIZE, Integerize
from edgebyoc.target import Cost, ExecModule, MemoryLevel, PatternEntry, Target, TargetOption
import tvm
from tvm import relax
from tvm.relax.dpl import is_call_tir, is_const, is_op, wildcard

from . import codegen, cost

L1 = MemoryLevel("L1", 128 * 1024, read_bytes_per_cycle=cost.DMA_BYTES_PER_CYCLE,
                 write_bytes_per_cycle=cost.DMA_BYTES_PER_CYCLE, double_buffering=True,
                 size_option="l1_kb")
L2 = MemoryLevel("L2", 1536 * 1024)

CLUSTER = ExecModule(
    name="cluster", description="8 RISC-V cores, PULP-NN-like int8 kernels",
    memory_levels=(L1, L2), spatial_mapping={"OY": 8, "OX": 2, "K": 4},
    max_region_composites=1, min_region_macs=0, priority=0)
NE16 = ExecModule(
    name="ne16", description="NE16 convolution accelerator",
    memory_levels=(L1, L2), spatial_mapping={"OY": 3, "OX": 3, "K": 32},
    max_region_composites=1, min_region_macs=1, priority=1, requantize_rounding="half_up")

TARGET = Target(
    name="gap9",
    description="GreenWaves GAP9: 8-core cluster + NE16, tiled C with L2->L1 DMA (MATCH)",
    modules=(CLUSTER, NE16),
    c_project=True,
    options=(
        TargetOption("l1_kb", float, 128.0, "shared L1 size in kB the layers may use"),
        TargetOption("modules", str, "cluster,ne16",
                     "execution modules to use (comma-separated; empty: host only)"),
        TargetOption("ne16_fc", bool, True, "offload fully connected layers to NE16 too"),
    ),
)


def _enabled(options, module) -> bool:
    names = [n.strip() for n in str((options or {}).get("modules", "cluster,ne16")).split(",")]
    return module.name in names


def _requantized(mac):
    return is_call_tir(REQUANTIZE, [mac, is_const(), is_const(), is_const(), is_const()])


def _int8_input():
    widened = is_op("relax.astype")(wildcard())
    return is_op("relax.subtract")(widened, is_const()) | widened


def _conv_pattern():
    return _requantized(is_op("relax.nn.conv2d")(_int8_input(), is_const()))


def _dense_pattern():
    return _requantized(is_op("relax.matmul")(_int8_input(), is_const()))


def _avg_pool_pattern():
    """TVM's import of an int8 average pooling: int32 sums, truncating division, back to int8."""
    pool = is_op("relax.nn.avg_pool2d")(is_op("relax.astype")(wildcard()))
    return is_op("relax.astype")(pool)


def _avg_pool_check(ctx):
    call = _anchor(ctx, "relax.nn.avg_pool2d")
    attrs = call.attrs
    if str(attrs.layout) != "NHWC":
        return "activations are not NHWC"
    if any(int(p) for p in attrs.padding) or bool(attrs.ceil_mode) \
            or any(int(d) != 1 for d in attrs.dilation):
        return "padded, dilated or ceil-mode pooling is not supported"
    widened = ctx.matched_bindings.get(call.args[0]) if isinstance(call.args[0], relax.Var) \
        else call.args[0]
    source = widened.args[0] if isinstance(widened, relax.Call) else None
    if source is None or str(source.ty.dtype) != "int8" \
            or str(ctx.matched_expr.ty.dtype) != "int8":
        return "not an int8 pooling"
    return True


def _anchor(ctx, op_name):
    for call in ctx.matched_bindings.values():
        if getattr(getattr(call, "op", None), "name", "") == op_name:
            return call
    return None


def _conv_check(module_name):
    def check(ctx):
        call = _anchor(ctx, "relax.nn.conv2d")
        attrs = call.attrs
        if str(attrs.data_layout) != "NHWC":
            return "activations are not NHWC"
        if any(int(d) != 1 for d in attrs.dilation):
            return "dilated convolutions are not supported"
        weight = [int(d) for d in call.args[1].ty.shape.values]
        layout = str(attrs.kernel_layout)
        fy, fx = weight[layout.index("H")], weight[layout.index("W")]
        groups = int(attrs.groups)
        channels = int(call.ty.shape.values[-1])
        depthwise = groups > 1
        if depthwise and groups != channels:
            return "grouped convolutions other than depthwise are not supported"
        if module_name == "ne16":
            if (fy, fx) not in ((1, 1), (3, 3)):
                return f"NE16 runs 1x1 and 3x3 filters, not {fy}x{fx}"
            if depthwise and (fy, fx) != (3, 3):
                return "NE16 runs depthwise 3x3 only"
            if any(int(s) not in (1, 2) for s in attrs.strides):
                return "NE16 supports strides 1 and 2"
        return True
    return check


def _dense_check(module_name, options):
    def check(ctx):
        if module_name == "ne16" and not options.get("ne16_fc", True):
            return "fully connected on NE16 is switched off (ne16_fc)"
        call = _anchor(ctx, "relax.matmul")
        shape = [int(d) for d in call.args[0].ty.shape.values]
        if len(shape) != 2 or shape[0] != 1:
            return "dense layers take one row"
        return True
    return check


@edgebyoc.hookimpl
def edgebyoc_targets():
    return [TARGET]


@edgebyoc.hookimpl
def edgebyoc_patterns(target, module, options):
    if not _enabled(options, module):
        return []
    entries = [PatternEntry("conv2d", _conv_pattern(), check=_conv_check(module.name)),
               PatternEntry("dense", _dense_pattern(), check=_dense_check(module.name, options))]
    if module.name == "cluster":
        entries.append(PatternEntry("add", is_call_tir(QADD, [wildcard(), wildcard(),
                                                              is_const()])))
        entries.append(PatternEntry("avg_pool", _avg_pool_pattern(), check=_avg_pool_check))
    return entries


@tvm.transform.module_pass(opt_level=0, name="gap9.RequireInteger")
def require_integer(mod, _ctx):
    """Refuse float models: gap9's modules run int8 only (paper Table II: quantized models).

    A model with float convolutions or matmuls and no quantized layer at all would run entirely
    on the fabric controller; say so instead of compiling it silently.
    """
    found = {"float": 0, "integer": 0}

    def visit(node):
        if isinstance(node, relax.Call) and isinstance(node.op, tvm.ir.Op):
            if node.op.name == "relax.call_tir" and \
                    node.args[0].name_hint.startswith((REQUANTIZE, QADD)):
                found["integer"] += 1
            elif node.op.name in ("relax.nn.conv2d", "relax.matmul") and \
                    str(getattr(node.ty, "dtype", "")).startswith("float"):
                found["float"] += 1

    for func in mod.functions.values():
        if isinstance(func, relax.Function):
            relax.analysis.post_order_visit(func.body, visit)
    if found["float"] and not found["integer"]:
        raise ValueError(f"gap9 runs int8 models: this one has {found['float']} float "
                         f"convolution / matmul layers and no quantized layer; give a "
                         f"full-integer TFLite model or a QDQ-quantized ONNX model")
    return mod


#: channels-last layouts the modules compute in (paper Table II: NHWC layout)
NHWC_LAYOUTS = {"relax.nn.conv2d": ["NHWC", "OHWI"]}


@tvm.transform.module_pass(opt_level=0, name="gap9.ChannelsLast")
def channels_last(mod, _ctx):
    """NCHW models (ONNX) to NHWC before integerization; channels-last models are unchanged.

    The permutations ConvertLayout leaves between the dequantize / quantize pairs move onto the
    int8 tensors in ``Integerize``, where consecutive ones cancel."""
    layouts = []

    def visit(node):
        if isinstance(node, relax.Call) and isinstance(node.op, tvm.ir.Op) \
                and node.op.name == "relax.nn.conv2d":
            layouts.append(str(node.attrs.data_layout))

    relax.analysis.post_order_visit(mod["main"].body, visit)
    if "NCHW" not in layouts:
        return mod
    return relax.transform.ConvertLayout(NHWC_LAYOUTS)(mod)


@edgebyoc.hookimpl
def edgebyoc_transforms(target, stage):
    return [channels_last, Integerize(), require_integer] if stage == "import" else []


@edgebyoc.hookimpl
def edgebyoc_cost(target, module, workload, schedule, options):
    nest = extract(workload)
    if nest is None:
        return None
    if schedule is None:  # the whole layer in one tile (for callers without a search)
        from edgebyoc.dse import search
        return search(nest, 1 << 40, lambda s: cost.price(module.name, nest, s)).cost
    return cost.price(module.name, nest, schedule)


@edgebyoc.hookimpl
def edgebyoc_codegen(target, module, region, schedule, context):
    return codegen.generate(module, region, schedule, context)


@edgebyoc.hookimpl
def edgebyoc_runtime_apis(target, module, flavour):
    return codegen.binding(module.name, flavour)


@edgebyoc.hookimpl
def edgebyoc_project_files(target, options, sources):
    return codegen.sdk_build_files(target, options, sources)


def host_cost(workload) -> Cost:
    """Predicted cycles of a layer left on the fabric controller (see ``cost.host_cycles``)."""
    cycles = cost.host_cycles(workload)
    return Cost(latency_cycles=cycles, breakdown={"L_ops": cycles, "L_mem": 0.0})


def template_dir():
    return resources.files("edgebyoc_gap9.templates")
