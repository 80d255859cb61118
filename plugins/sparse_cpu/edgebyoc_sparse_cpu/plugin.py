"""The sparse_cpu plugin's hooks: target, patterns, cost model, code generation.

A convolution is offloaded when its weights are constant, fp32, NCHW / OIHW (grouped and
depthwise included) and the cost model predicts the sparse kernel beats the dense host path for
its sparsity and shape; the others stay on the host, with the reason in the report. Each
offloaded convolution (with its bias, a residual tensor added after it, as a ResNet block's
shortcut, and its ReLU) is one region.
"""

from __future__ import annotations

from importlib import resources

import numpy as np
from mako.template import Template
import tvm
from tvm import relax
from tvm.relax.dpl import is_const, is_op, wildcard

from edgebyoc.api import (CodegenOutput, Cost, ExecModule, OutputKind, PatternEntry, Target,
                          TargetOption, hookimpl)
from edgebyoc.api.regions import argument_layout, packed_wrapper

from .cost import (PAIRED_MAX_VECTORS, aligned_runs, chunk_size, dense_host_seconds,
                   sparse_seconds, spatial_chunk_size)
from .csr import SHIFTS, Geometry, rows_ascend, to_csr

MODULE = ExecModule("spardr", "SparDR sparse convolution (feature reconstruction + CSR kernel)",
                    output_kind=OutputKind.C_SOURCE, max_region_ops=3)
TARGET = Target("sparse_cpu", "unstructured-sparse convolutions on the host CPU (SparDR)",
                modules=(MODULE,), api_version="2.4",
                options=(TargetOption("min_speedup", float, 1.0,
                                      "offload a conv when the cost model predicts at least "
                                      "this speed-up over the dense host path (0: every "
                                      "supported conv)"),))


@hookimpl
def edgebyoc_targets():
    return [TARGET]


def unsupported_reason(conv) -> str | None:
    """Why the sparse kernel cannot run ``conv`` (``None`` when it can)."""
    attrs = conv.attrs
    if not isinstance(conv.args[1], tvm.ir.expr.Constant):
        return "the weights are not constant"
    dtypes = {str(conv.args[0].ty.dtype), str(conv.args[1].ty.dtype)}
    if dtypes != {"float32"}:
        return f"dtype {'/'.join(sorted(dtypes))}, the kernel is fp32"
    layouts = (str(attrs.data_layout), str(attrs.kernel_layout), str(attrs.out_layout))
    if layouts != ("NCHW", "OIHW", "NCHW"):
        return f"layout {'/'.join(layouts)}, the kernel takes NCHW/OIHW"
    return None


def geometry_of(conv) -> Geometry:
    """The geometry of a Relax conv2d call (or the same fields from a workload)."""
    _, c, h, w = (int(d) for d in conv.args[0].ty.shape.values)
    k, _, kh, kw = (int(d) for d in conv.args[1].ty.shape.values)
    _, _, oh, ow = (int(d) for d in conv.ty.shape.values)
    attrs = conv.attrs
    return Geometry(c, h, w, k, kh, kw, oh, ow, int(attrs.strides[0]), int(attrs.strides[1]),
                    int(attrs.padding[0]), int(attrs.padding[1]), int(attrs.dilation[0]),
                    int(attrs.dilation[1]))


def _residual_reason(add) -> str | None:
    """Why the kernel cannot add ``add``'s residual operand in its epilogue (``None``: it can):
    both operands must have the output's shape and dtype (no broadcasting)."""
    out = add.ty
    for operand in add.args:
        ty = operand.ty
        if not isinstance(ty, relax.TensorType) or str(ty.dtype) != "float32" or \
                not hasattr(ty.shape, "values") or \
                [int(d) for d in ty.shape.values] != [int(d) for d in out.shape.values]:
            return "the residual add broadcasts or is not fp32"
    return None


def _offload_check(min_speedup: float):
    """The pattern check: a supported conv the model predicts ``min_speedup`` times faster."""

    def check(ctx) -> bool | str:
        conv = ctx.annotated_expr["conv"]
        reason = unsupported_reason(conv)
        if reason:
            return reason
        if "residual" in ctx.annotated_expr:
            reason = _residual_reason(ctx.annotated_expr["residual"])
            if reason:
                return reason
        geometry = geometry_of(conv)
        weight = conv.args[1].value.numpy()
        nnz = int(np.count_nonzero(weight))
        groups = int(conv.attrs.groups)
        dense, sparse = dense_host_seconds(geometry, groups), sparse_seconds(geometry, nnz)
        if dense < min_speedup * sparse:
            return (f"{1 - nnz / weight.size:.0%} sparse: predicted {dense / sparse:.2f}x of "
                    f"the dense host path, below min_speedup {min_speedup:g}")
        return True

    return check


@hookimpl
def edgebyoc_patterns(target, module, options):
    conv = is_op("relax.nn.conv2d")(wildcard(), wildcard())  # checked: constant weights
    bias = is_op("relax.add")(conv, is_const())
    relu = is_op("relax.nn.relu")(bias)
    # a ResNet block's end: the shortcut added to the convolution, then the ReLU
    shortcut = is_op("relax.add")(bias, wildcard()) | is_op("relax.add")(wildcard(), bias)
    residual_relu = is_op("relax.nn.relu")(shortcut)
    annotations = {"conv": conv}
    check = _offload_check(float(options["min_speedup"]))
    return [PatternEntry("conv2d_bias_residual_relu", residual_relu,
                         {"conv": conv, "residual": shortcut}, check),
            PatternEntry("conv2d_bias_relu", relu, annotations, check),
            PatternEntry("conv2d_bias", bias, annotations, check),
            PatternEntry("conv2d", conv, annotations, check)]


def _workload_geometry(workload) -> Geometry:
    (_, c, h, w), _ = workload.inputs[0]
    (k, _, kh, kw), _ = workload.inputs[1]
    (_, _, oh, ow), _ = workload.output
    attrs = workload.attrs
    return Geometry(c, h, w, k, kh, kw, oh, ow, attrs["strides"][0], attrs["strides"][1],
                    attrs["padding"][0], attrs["padding"][1], attrs["dilation"][0],
                    attrs["dilation"][1])


@hookimpl
def edgebyoc_cost(target, module, workload, schedule):  # noqa: ARG001 - the spec's arguments
    if workload.op != "relax.nn.conv2d" or len(workload.inputs) < 2:
        return None
    geometry = _workload_geometry(workload)
    # without the weights the model assumes the paper's typical 85 % sparsity
    nnz = int(workload.macs * 0.15 / (geometry.out_h * geometry.out_w))
    seconds = sparse_seconds(geometry, nnz)
    return Cost(latency_cycles=seconds * 2.1e9,
                breakdown={"dense_host_s": dense_host_seconds(geometry,
                                                              int(workload.attrs["groups"])),
                           "sparse_s": seconds})


_TEMPLATE = Template(resources.files("edgebyoc_sparse_cpu.templates")
                     .joinpath("spardr_conv.c.mako").read_text(), strict_undefined=True)


def _operand_params(region) -> dict[str, int | None]:
    """The region parameters (indices) that the convolution reads as its data, weight and bias
    and the residual added after it (``None`` where the pattern has none), found through the
    composite function the region calls."""
    params = list(region.function.params)
    bound = {b.var: b.value for block in region.function.body.blocks for b in block.bindings}
    for call in bound.values():
        composite = bound.get(call.op, call.op) if isinstance(call, relax.Call) else None
        if isinstance(composite, relax.Function) and composite.attrs and \
                "Composite" in composite.attrs:
            break
    else:
        raise ValueError(f"region {region.symbol} calls no composite function")
    to_region = {inner: params.index(arg) if arg in params else None
                 for inner, arg in zip(composite.params, call.args)}
    ops = [(b.var, b.value) for block in composite.body.blocks for b in block.bindings
           if isinstance(b.value, relax.Call) and isinstance(b.value.op, tvm.ir.Op)]
    found = {"data": None, "weight": None, "bias": None, "residual": None}
    chain = set()  # the convolution and what adds to it
    for var, value in ops:
        if value.op.name == "relax.nn.conv2d":
            found["data"], found["weight"] = (to_region.get(a) for a in value.args[:2])
            chain.add(var)
        elif value.op.name == "relax.add" and any(a in chain for a in value.args):
            other = next(a for a in value.args if a not in chain)
            found["bias" if found["bias"] is None else "residual"] = to_region.get(other)
            chain.add(var)
    return found


@hookimpl
def edgebyoc_codegen(target, module, region, schedule, context):
    (composite,) = region.composites
    geometry = _workload_geometry(composite.workload)
    operands = _operand_params(region)
    weight = region.constants[operands["weight"]]
    groups = int(composite.workload.attrs["groups"])
    aligned = aligned_runs(geometry, int(np.count_nonzero(weight)))
    values, offsets, row_ptr, order = to_csr(weight, geometry, groups, aligned)
    relu = composite.pattern.endswith("relu")
    plane = geometry.out_h * geometry.phase_cols
    spatial = spatial_chunk_size(geometry, aligned)  # tasks share the plane, not channels
    chunk = spatial or chunk_size(geometry, aligned)  # a small plane needs no more than itself
    span = -(-plane // chunk) * chunk
    direct = geometry.in_place
    if direct and not rows_ascend(offsets, row_ptr):
        raise ValueError(f"region {region.symbol}: the offsets of a 1x1 convolution's rows "
                         "do not ascend")
    replaced = {operands["weight"]: (values, offsets, row_ptr, order)}
    layout = argument_layout(region, replaced)  # the weights as 4 CSR arrays
    position = {}  # one argument may be two operands (a block's input and its shortcut)
    for argument in layout.arguments:
        if argument.kind == "output":
            position["y"] = argument.position
        elif argument.param == operands["weight"]:
            position[("values", "offsets", "row_ptr", "order")[argument.part]] = \
                argument.position
        for name, key in (("data", "x"), ("bias", "bias"), ("residual", "residual")):
            if argument.kind != "output" and argument.param == operands[name]:
                position[key] = argument.position
    source = _TEMPLATE.render(symbol=region.symbol, g=geometry, bias="bias" in position,
                              residual="residual" in position, relu=relu, chunk=chunk,
                              span=span, direct=direct, plane=plane, position=position,
                              paired_max=PAIRED_MAX_VECTORS, aligned=aligned,
                              shifts=SHIFTS, spatial=spatial is not None)
    source += packed_wrapper(region.symbol, f"{region.symbol}_kernel", layout.count)
    return CodegenOutput(OutputKind.C_SOURCE, region.symbol, c_source=source,
                         replaced_constants=replaced)
