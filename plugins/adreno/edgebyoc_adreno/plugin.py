"""The adreno target's hooks: patterns, the TMModel cost hook, codegen into blobs, the loader.

A layer goes to the ``texture`` module when its kernel exists (``describe``: fp32 NCHW
Conv2D with groups 1 or depthwise, DeConv2D with groups 1, MatMul with a 2-D right operand,
SoftMax and LayerNorm over the last axis), its textures fit the device's image limits, and, with
``offload=cost`` (the default), TMModel's predicted time of its best configuration plus the
launch overhead is below the host CPU's time for it (``2 * MACs / host_gflops``, or one pass
over its elements for SoftMax / LayerNorm). The refusal's reason names the figures.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np
import tvm
from tvm.relax.dpl import is_const, is_op, wildcard

from edgebyoc.api import (Availability, CodegenOutput, Cost, ExecModule, OutputKind,
                          PatternEntry, RuntimeLoader, Target, TargetOption,
                          calibrated_constants, hookimpl)
from edgebyoc.api.regions import argument_layout, region_graph
from edgebyoc.api.transforms import scalar_min_max

from .kernels import Conv2D, Epilogue, MatMul, RowReduction, render
from .runtime import Argument, blob_payload, load_region, opencl_missing
from .tmmodel import (CALIBRATION_PARAMETERS, DEVICES, Calibration, TMModel, load_device,
                      shipped_calibration_path)

MODULE = ExecModule("texture", "OpenCL image2d kernels chosen by TMModel",
                    output_kind=OutputKind.BLOB, max_region_composites=1, min_region_macs=0)
_DEFAULT_DEVICE = load_device("adreno740")
TARGET = Target(
    "adreno", "mobile GPUs through OpenCL image2d kernels, TMModel texture-memory cost model",
    modules=(MODULE,), clock_hz=_DEFAULT_DEVICE.clock_hz, api_version="2.6",
    # TMModel's beta and D: fitted by `edgebyoc-adreno calibrate` to micro-benchmarks, or by
    # `edgebyoc calibrate adreno` to measured latencies; the device's shipped file by default
    calibration=CALIBRATION_PARAMETERS,
    default_calibration=lambda options: (
        str(shipped_calibration_path(options.get("device", "adreno740")) or "") or None),
    options=(
        TargetOption("device", str, "adreno740", "the GPU the cost model describes "
                     "(a shipped device file)", choices=DEVICES),
        TargetOption("calibration", str, "", "a calibration file from `edgebyoc-adreno "
                     "calibrate` or `edgebyoc calibrate adreno` (default: the one shipped "
                     "for the device; 'uncalibrated': adreno740's)"),
        TargetOption("offload", str, "cost", "which supported layers run on the GPU: "
                     "'cost' (TMModel against the host CPU) or 'all'",
                     choices=("cost", "all")),
        TargetOption("fp16", bool, False, "also emit each kernel's half-precision variant "
                     "(compile-checked where the device has cl_khr_fp16)"),
    ))
LOADER = "adreno.opencl"


@hookimpl
def edgebyoc_targets():
    return [TARGET]


@hookimpl
def edgebyoc_availability():
    reason = opencl_missing()
    return Availability(False, reason) if reason else Availability(True)


@hookimpl
def edgebyoc_transforms(target, stage):
    return [scalar_min_max] if stage == "pre_partition" else []


# ------------------------------------------------------------------ reading a matched layer

@dataclass(frozen=True)
class Layer:
    """A matched layer as a kernel: the ``Kernel`` and, per argument of the anchor and the
    epilogue, its role (``texture`` i / ``buffer`` i) keyed by the Relax expression."""

    kernel: Any
    roles: tuple[tuple[Any, str, int], ...]


def _shape(expr) -> tuple[int, ...]:
    return tuple(int(d) for d in expr.ty.shape.values)


def _scalar(expr) -> float | None:
    if isinstance(expr, tvm.ir.expr.Constant) and hasattr(expr, "data"):
        value = expr.data.numpy()
        return float(value.reshape(-1)[0]) if value.size == 1 else None
    return None


def _epilogue(calls: Sequence[Any], per_channel) -> tuple[Epilogue, Any] | str:
    """The bias / activation of the calls after the anchor (or why the kernel cannot fuse
    them); returns the epilogue and the bias expression. ``per_channel(shape)`` says whether a
    bias of that shape adds one value per output channel."""
    bias, activation, low, high = None, "none", 0.0, 0.0
    for call in calls:
        name = call.op.name
        if name == "relax.add" and bias is None and activation == "none":
            shape = _shape(call.args[1])
            if not per_channel(shape):
                return f"a bias of shape {list(shape)} is not per output channel"
            bias = call.args[1]
        elif name == "relax.nn.relu" and activation == "none":
            activation = "relu"
        elif name == "relax.maximum" and activation == "none":
            low = _scalar(call.args[1])
            if low is None:
                return "maximum with a non-scalar bound"
            activation, high = "clip", float("inf")
        elif name == "relax.minimum" and activation == "clip" and high == float("inf"):
            high = _scalar(call.args[1])
            if high is None:
                return "minimum with a non-scalar bound"
        else:
            return f"{name} after the anchor"
    if activation == "clip" and high == float("inf"):
        activation = "relu" if low == 0.0 else "clip"
        if activation == "clip":
            return "a lower bound without an upper one"
    return Epilogue(bias is not None, activation, low, high), bias


def describe(calls: Sequence[Any]) -> Layer | str:
    """The kernel of a matched layer (``calls``: the anchor, then its epilogue operators), or
    why no adreno kernel computes it."""
    anchor, rest = calls[0], calls[1:]
    name = anchor.op.name
    dtypes = {str(a.ty.dtype) for a in anchor.args if hasattr(a.ty, "dtype")}
    if dtypes != {"float32"}:
        return f"dtype {'/'.join(sorted(dtypes))}; the kernels are fp32"
    if name in ("relax.nn.conv2d", "relax.nn.conv2d_transpose"):
        attrs = anchor.attrs
        layouts = (str(attrs.data_layout), str(attrs.kernel_layout), str(attrs.out_layout))
        expected = ("NCHW", "OIHW" if name == "relax.nn.conv2d" else "IOHW", "NCHW")
        if layouts != expected:
            return f"layout {'/'.join(layouts)} (the kernels take {'/'.join(expected)})"
        n, c, h, w = _shape(anchor.args[0])
        _, k, oh, ow = _shape(anchor)
        fy, fx = _shape(anchor.args[1])[2:]
        groups = int(attrs.groups)
        if n != 1:
            return f"batch {n} (the kernels take batch 1)"
        if name == "relax.nn.conv2d_transpose":
            if groups != 1:
                return f"a grouped transposed convolution (groups {groups})"
            kind = "deconv"
        elif groups == 1:
            kind = "conv"
        elif groups == c == k:
            kind = "depthwise"
        else:
            return f"a grouped convolution (groups {groups}) that is not depthwise"
        epilogue = _epilogue(rest, lambda s: s in ((1, k, 1, 1), (k, 1, 1)))
        if isinstance(epilogue, str):
            return epilogue
        epilogue, bias = epilogue
        padding = tuple(int(p) for p in attrs.padding)
        kernel = Conv2D(kind, c, h, w, k, oh, ow, (fy, fx),
                        tuple(int(s) for s in attrs.strides),
                        tuple(int(d) for d in attrs.dilation),
                        padding if len(padding) == 4 else padding * 2, epilogue)
        if kind == "deconv" and kernel.dilation != (1, 1):
            return "a dilated transposed convolution"
        roles = [(anchor.args[0], "texture", 0), (anchor.args[1], "texture", 1)]
        return Layer(kernel, tuple(roles + ([(bias, "buffer", 0)] if bias is not None else [])))
    if name == "relax.matmul":
        a, b = _shape(anchor.args[0]), _shape(anchor.args[1])
        if len(b) != 2 or len(a) < 1:
            return f"a batched right operand {list(b)} (the kernel takes a 2-D one)"
        epilogue = _epilogue(rest, lambda s: s in ((b[1],), (1, b[1])))
        if isinstance(epilogue, str):
            return epilogue
        epilogue, bias = epilogue
        kernel = MatMul(int(np.prod(a[:-1])), a[-1], b[1], _shape(anchor), epilogue)
        roles = [(anchor.args[0], "texture", 0), (anchor.args[1], "texture", 1)]
        return Layer(kernel, tuple(roles + ([(bias, "buffer", 0)] if bias is not None else [])))
    if name in ("relax.nn.softmax", "relax.nn.layer_norm"):
        shape = _shape(anchor)
        if rest:
            return f"{rest[0].op.name} after {name}"
        if name == "relax.nn.softmax":
            if int(anchor.attrs.axis) not in (-1, len(shape) - 1):
                return f"softmax over axis {int(anchor.attrs.axis)} (the kernel: the last)"
            kernel = RowReduction("softmax", int(np.prod(shape[:-1])), shape[-1], shape)
            return Layer(kernel, ((anchor.args[0], "texture", 0),))
        axes = [int(x) for x in anchor.attrs.axes]
        if axes not in ([-1], [len(shape) - 1]) or not (anchor.attrs.center and
                                                        anchor.attrs.scale):
            return f"layer_norm over axes {axes} (the kernel: the last, with gamma and beta)"
        kernel = RowReduction("layernorm", int(np.prod(shape[:-1])), shape[-1], shape,
                              float(anchor.attrs.epsilon))
        return Layer(kernel, ((anchor.args[0], "texture", 0), (anchor.args[1], "buffer", 0),
                              (anchor.args[2], "buffer", 1)))
    return f"no adreno kernel for {name}"


# ------------------------------------------------------------------ patterns and the decision

_ANCHORS = {"conv2d": "relax.nn.conv2d", "deconv2d": "relax.nn.conv2d_transpose",
            "matmul": "relax.matmul"}


def _patterns():
    """(name, pattern, annotations) of every supported layer, longest first."""
    out = []
    for short, op in _ANCHORS.items():
        anchor = is_op(op)(wildcard(), wildcard())
        bias = is_op("relax.add")(anchor, is_const())
        for base, base_name, parts in ((bias, f"{short}_bias", {"anchor": anchor, "bias": bias}),
                                       (anchor, short, {"anchor": anchor})):
            relu = is_op("relax.nn.relu")(base)
            low = is_op("relax.maximum")(base, is_const())
            clip = is_op("relax.minimum")(low, is_const())
            out += [(f"{base_name}_clip", clip, {**parts, "low": low, "clip": clip}),
                    (f"{base_name}_relu", relu, {**parts, "act": relu}),
                    (base_name, base, parts)]
    softmax = is_op("relax.nn.softmax")(wildcard())
    norm = is_op("relax.nn.layer_norm")(wildcard(), wildcard(), wildcard())
    out += [("softmax", softmax, {"anchor": softmax}), ("layernorm", norm, {"anchor": norm})]
    return out


def _model(options: Mapping[str, Any]) -> TMModel:
    device = load_device(options["device"])
    calibration = Calibration.from_values(calibrated_constants(TARGET, options), device.name)
    return _model_for(device, calibration)


@functools.lru_cache(maxsize=None)
def _model_for(device, calibration) -> TMModel:
    """One model per (device, calibration): its histogram and best-configuration caches serve
    every compile of the process."""
    return TMModel(device, calibration)


def host_seconds(kernel, device) -> float:
    """The host CPU's time for a layer: 2 flops per MAC (or 8 per element for the row
    reductions) at the device file's ``host_gflops``."""
    work = 2 * kernel.macs if kernel.macs else 8 * kernel.rows * kernel.cols
    return work / (device.host_gflops * 1e9)


def _check(options):
    offload_all = options["offload"] == "all"

    def check(ctx) -> bool | str:
        calls = [ctx.annotated_expr[k] for k in ("anchor", "bias", "act", "low", "clip")
                 if k in ctx.annotated_expr]
        layer = describe(calls)
        if isinstance(layer, str):
            return layer
        model = _model(options)
        try:
            prediction = model.best(layer.kernel)
        except ValueError as err:
            return str(err)
        if offload_all:
            return True
        gpu, host = model.seconds(prediction), host_seconds(layer.kernel, model.device)
        if gpu >= host:
            return (f"TMModel predicts {gpu * 1e3:.3f} ms on the {model.device.name} "
                    f"({prediction.config.label}, launch included) against "
                    f"{host * 1e3:.3f} ms on the host CPU")
        return True

    return check


@hookimpl
def edgebyoc_patterns(target, module, options):
    check = _check(options)
    return [PatternEntry(name, pattern, annotations, check)
            for name, pattern, annotations in _patterns()]


def _workload_kernel(workload):
    """The kernel of a workload (shapes and attributes only: no epilogue) for the cost hook."""
    op = workload.op
    shapes = [shape for shape, _ in workload.inputs]
    shape, wshape = shapes[0], shapes[1] if len(shapes) > 1 else ()
    out = workload.output[0]
    attrs = workload.attrs
    if op in ("relax.nn.conv2d", "relax.nn.conv2d_transpose"):
        groups = int(attrs["groups"])
        kind = "deconv" if op.endswith("transpose") else ("conv" if groups == 1 else "depthwise")
        padding = tuple(attrs["padding"])
        return Conv2D(kind, shape[1], shape[2], shape[3], out[1], out[2], out[3],
                      tuple(wshape[2:]), tuple(attrs["strides"]), tuple(attrs["dilation"]),
                      padding if len(padding) == 4 else padding * 2)
    if op == "relax.matmul":
        return MatMul(int(np.prod(shape[:-1])), shape[-1], wshape[-1], tuple(out))
    if op == "relax.nn.softmax":
        return RowReduction("softmax", int(np.prod(out[:-1])), out[-1], tuple(out))
    if op == "relax.nn.layer_norm":
        return RowReduction("layernorm", int(np.prod(out[:-1])), out[-1], tuple(out))
    return None


@hookimpl
def edgebyoc_cost(target, module, workload, schedule, options):  # noqa: ARG001
    kernel = _workload_kernel(workload)
    if kernel is None:
        return None
    model = _model(options)
    prediction = model.best(kernel)
    # L is in cycles of the device's clock; the report counts cycles of the target's
    return Cost(latency_cycles=prediction.latency * target.clock_hz / model.device.clock_hz,
                breakdown={"L": prediction.latency, "L_t": prediction.thread,
                           "L_w": prediction.warp,
                           "L_g": float(prediction.waves),
                           "occupancy": float(prediction.occupancy)})


@hookimpl
def edgebyoc_host_cost(target, workload, options):
    device = load_device(options["device"])
    elements = int(np.prod(workload.output[0])) if workload.output[0] else 1
    work = 2 * workload.macs if workload.macs else elements
    return Cost(latency_cycles=work / (device.host_gflops * 1e9) * target.clock_hz)


# ------------------------------------------------------------------ code generation

def _composite_calls(function) -> list:
    return [b.value for block in function.body.blocks for b in block.bindings
            if isinstance(b.value, tvm.relax.Call)]


@hookimpl
def edgebyoc_codegen(target, module, region, schedule, context):
    (composite,) = region.composites
    layer = describe(_composite_calls(composite.function))
    if isinstance(layer, str):  # the check accepted it: describe must agree
        raise ValueError(f"region {region.symbol}: {layer}")
    model = _model(context.options)
    prediction = model.best(layer.kernel)
    config = prediction.config
    name = f"{region.symbol}_kernel"
    source = render(layer.kernel, config, name=name, warp_size=model.device.warp_size)
    # composite parameter i is the kernel node's input i, which names a region parameter
    (node,) = [n for n in region_graph(region)["nodes"] if "body" in n["attrs"]]
    params = list(composite.function.params)
    region_param = {params[i]: ref[0] for i, ref in enumerate(node["inputs"])}
    roles = {region_param[expr]: (role, index) for expr, role, index in layer.roles
             if expr in region_param}
    replaced = {}
    for param, (role, index) in roles.items():
        if role == "texture" and param in region.constant_params:
            item = layer.kernel.inputs[index]
            replaced[param] = (item.layout(config.patterns[index]).image(
                item.texels(region.constants[param])),)
    arguments = []
    for argument in argument_layout(region, replaced).arguments:
        if argument.kind == "output":
            continue
        role, index = roles[argument.param]
        if argument.kind == "replacement":
            role = "image"
        arguments.append(Argument(role, index, argument.kind != "input"))
    extra = {"prediction": prediction.to_dict(), "device": model.device.name}
    if context.options["fp16"]:
        extra["fp16_source"] = render(layer.kernel, config, name=name,
                                      warp_size=model.device.warp_size, fp16=True)
    blob = blob_payload(layer.kernel, config, source, name, arguments, extra)
    return CodegenOutput(OutputKind.BLOB, region.symbol, blob=blob, loader_kind=LOADER,
                         replaced_constants=replaced)


@hookimpl
def edgebyoc_runtime_loaders():
    return [RuntimeLoader(LOADER, load_region)]
