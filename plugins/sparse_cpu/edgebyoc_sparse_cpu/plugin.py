"""The sparse_cpu plugin's hooks: target, patterns, cost model, code generation.

A convolution is offloaded when its weights are constant, fp32, NCHW / OIHW (grouped and
depthwise included) and the cost model predicts the sparse kernel beats the dense host path for
its sparsity and shape; the others stay on the host, with the reason in the report. Each
offloaded convolution (with its bias, a residual tensor added after it, as a ResNet block's
shortcut, and its ReLU) is one layer; a region chains the layers the partitioner merges (up to
``MAX_REGION_OPS`` operators), run in one launch of the thread pool, a barrier between two.
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
from .chain import region_layers, workspace_layout
from .csr import SHIFTS, Geometry, rows_ascend, to_csr

#: The most operators of a region: a chain of convolutions up to a ResNet bottleneck block (three
#: convolutions with their biases and ReLUs, the shortcut added: 10 operators) and a projection
#: shortcut (2), run in one launch of the thread pool, a barrier between two layers
#: (``chain.region_layers``). Measured on ResNet-50 at 85 % (2 threads, passive pools): 52
#: regions 22.70 ms, 17 regions of at most 12 operators 21.80 ms, 5 regions without a limit
#: 22.24 ms.
MAX_REGION_OPS = 12

MODULE = ExecModule("spardr", "SparDR sparse convolution (feature reconstruction + CSR kernel)",
                    output_kind=OutputKind.C_SOURCE, max_region_ops=MAX_REGION_OPS)
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


def _template(name: str) -> Template:
    return Template(resources.files("edgebyoc_sparse_cpu.templates").joinpath(name).read_text(),
                    strict_undefined=True)


_PRELUDE, _LAYER, _CHAIN = (_template(f"spardr_{part}.c.mako")
                            for part in ("prelude", "conv", "chain"))


def reconstruction_floats(g: Geometry, span: int) -> int:
    """Floats of a layer's reconstruction buffer: its phase planes, then a tail that the runs
    of the dropped columns read past the last plane (a chunk's span, a row, the filter's
    width) and a vector more for the aligned runs."""
    return g.planes_floats + span + g.phase_cols + g.kernel_w * g.dilation_w + 16


def _layer_code(symbol: str, layer, region) -> tuple[str, tuple, dict]:
    """(C source, CSR arrays, the geometry's facts the chain needs) of one layer."""
    composite = layer.composite
    geometry = _workload_geometry(composite.workload)
    weight = region.constants[layer.sources["weight"][1]]
    groups = int(composite.workload.attrs["groups"])
    expected = (geometry.out_channels, geometry.channels // groups, geometry.kernel_h,
                geometry.kernel_w)
    if tuple(weight.shape) != expected:  # the layer's workload and its call must agree
        raise ValueError(f"region {region.symbol}: {composite.name}'s weight is "
                         f"{tuple(weight.shape)}, its workload's {expected}")
    aligned = aligned_runs(geometry, int(np.count_nonzero(weight)))
    csr = to_csr(weight, geometry, groups, aligned)
    plane = geometry.out_h * geometry.phase_cols
    spatial = spatial_chunk_size(geometry, aligned)  # tasks share the plane, not channels
    chunk = spatial or chunk_size(geometry, aligned)  # a small plane needs no more than itself
    span = -(-plane // chunk) * chunk
    direct = geometry.in_place
    if direct and not rows_ascend(csr[1], csr[2]):
        raise ValueError(f"region {region.symbol}: the offsets of a 1x1 convolution's rows "
                         "do not ascend")
    recon = 0 if direct else reconstruction_floats(geometry, span)
    source = _LAYER.render(symbol=symbol, g=geometry, bias="bias" in layer.sources,
                           residual="residual" in layer.sources,
                           relu=composite.pattern.endswith("relu"), chunk=chunk, span=span,
                           direct=direct, plane=plane, recon_floats=recon,
                           paired_max=PAIRED_MAX_VECTORS, aligned=aligned, shifts=SHIFTS,
                           spatial=spatial is not None)
    output_bytes = 4 * geometry.out_channels * geometry.out_h * geometry.out_w
    return source, csr, {"recon_bytes": 4 * recon, "output_bytes": output_bytes}


@hookimpl
def edgebyoc_codegen(target, module, region, schedule, context):
    layers = region_layers(region)
    sources, replaced, facts = [], {}, []
    for i, layer in enumerate(layers):
        source, csr, fact = _layer_code(f"{region.symbol}_l{i}", layer, region)
        sources.append(source)
        replaced[layer.sources["weight"][1]] = csr
        facts.append(fact)
    layout = argument_layout(region, replaced)  # each weight as 4 CSR arrays
    offsets, recon_offset, workspace = workspace_layout(
        [None if layer.output is not None else fact["output_bytes"]
         for layer, fact in zip(layers, facts)], max(f["recon_bytes"] for f in facts))
    outputs = {a.part: a.position for a in layout.outputs}

    def tensor(i: int) -> str:  # where layer i writes its output
        if layers[i].output is not None:
            return f"EB_DATA(t[{outputs[layers[i].output]}], float)"
        return f"(float*)(base + {offsets[i]})"

    def operand(source, part: int = 0, ctype: str = "float") -> str:
        kind, index = source
        if kind == "layer":
            return tensor(index)
        return f"EB_DATA(t[{layout.position(index, part)}], {ctype})"

    fields = []
    for i, (layer, fact) in enumerate(zip(layers, facts)):
        weight = layer.sources["weight"]
        fields.append({
            "symbol": f"{region.symbol}_l{i}", "x": operand(layer.sources["data"]),
            "values": operand(weight, 0), "offsets": operand(weight, 1, "int"),
            "row_ptr": operand(weight, 2, "int"), "order": operand(weight, 3, "int"),
            "bias": operand(layer.sources["bias"]) if "bias" in layer.sources else "NULL",
            "residual": operand(layer.sources["residual"]) if "residual" in layer.sources
            else "NULL",
            "y": tensor(i),
            "recon": f"(float*)(base + {recon_offset})" if fact["recon_bytes"] else "NULL"})
    source = _PRELUDE.render() + "".join(sources) + _CHAIN.render(
        symbol=region.symbol, layers=fields, workspace_bytes=workspace)
    source += packed_wrapper(region.symbol, f"{region.symbol}_kernel", layout.count)
    return CodegenOutput(OutputKind.C_SOURCE, region.symbol, c_source=source,
                         replaced_constants=replaced)
