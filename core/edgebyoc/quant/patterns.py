"""Patterns and passes for int8 targets on integerized models (public through
``edgebyoc.api.quant``).

After ``Integerize`` a quantized layer reads::

    x32 = astype(x, "int32")               # the int8 activation widened
    xc  = subtract(x32, zp_in)             # optional: a non-zero input zero point
    acc = conv2d(xc, W) | matmul(xc, W)    # int32 accumulation, W a constant
    y   = call_tir(edgebyoc_requantize, [acc, bias, multiplier, shift, params])

and an int8 add is one ``call_tir(edgebyoc_qadd, [a, b, params])``. The functions below build
the Relax patterns of those forms for a plugin's pattern table, read the matched operators in a
check, and give the ``import``-stage passes an int8 MATCH target usually runs.
"""

from __future__ import annotations

import tvm
from tvm import relax
from tvm.relax.dpl import is_call_tir, is_const, is_op, wildcard

from .integerize import QADD, REQUANTIZE


def int8_input():
    """An int8 activation entering an integer layer: widened, minus its zero point if any."""
    widened = is_op("relax.astype")(wildcard())
    return is_op("relax.subtract")(widened, is_const()) | widened


def requantized(accumulation):
    """``accumulation`` (an int32 pattern) followed by the core's requantization."""
    return is_call_tir(REQUANTIZE, [accumulation, is_const(), is_const(), is_const(),
                                    is_const()])


def conv2d_pattern():
    """An integer conv2d (any groups, layout checked by the plugin) with requantization.

    Example::

        >>> from edgebyoc.api import PatternEntry
        >>> entry = PatternEntry("conv2d", conv2d_pattern())
        >>> entry.name
        'conv2d'
    """
    return requantized(is_op("relax.nn.conv2d")(int8_input(), is_const()))


def dense_pattern():
    """An integer dense layer (``matmul`` with constant weights) with requantization."""
    return requantized(is_op("relax.matmul")(int8_input(), is_const()))


def add_pattern():
    """TFLite's int8 ADD (``call_tir(edgebyoc_qadd, [a, b, params])``)."""
    return is_call_tir(QADD, [wildcard(), wildcard(), is_const()])


def avg_pool_pattern():
    """TVM's import of an int8 average pooling: int32 sums, truncating division, back to int8
    (check it with ``avg_pool_check``)."""
    pool = is_op("relax.nn.avg_pool2d")(is_op("relax.astype")(wildcard()))
    return is_op("relax.astype")(pool)


def matched_call(ctx, op_name: str):
    """The call of operator ``op_name`` inside a match (a ``PatternCheckContext``), or
    ``None``: what a check reads attributes and shapes from."""
    for call in ctx.matched_bindings.values():
        if getattr(getattr(call, "op", None), "name", "") == op_name:
            return call
    return None


def avg_pool_check(ctx) -> bool | str:
    """Accept an ``avg_pool_pattern`` match the core's layer template runs: NHWC, int8, no
    padding, dilation or ceil mode; otherwise the reason."""
    call = matched_call(ctx, "relax.nn.avg_pool2d")
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


def conv2d_geometry(ctx) -> dict:
    """The matched conv2d of a ``conv2d_pattern`` match as plain values: ``layout``,
    ``filter`` (fy, fx), ``strides``, ``dilation``, ``groups``, ``channels`` (output),
    ``depthwise`` (groups equal to the channels)."""
    call = matched_call(ctx, "relax.nn.conv2d")
    attrs = call.attrs
    weight = [int(d) for d in call.args[1].ty.shape.values]
    kernel_layout = str(attrs.kernel_layout)
    groups = int(attrs.groups)
    channels = int(call.ty.shape.values[str(attrs.out_layout or attrs.data_layout).index("C")])
    return {"layout": str(attrs.data_layout),
            "filter": (weight[kernel_layout.index("H")], weight[kernel_layout.index("W")]),
            "strides": tuple(int(s) for s in attrs.strides),
            "dilation": tuple(int(d) for d in attrs.dilation), "groups": groups,
            "channels": channels, "depthwise": groups > 1 and groups == channels}


def require_integer(target_name: str):
    """An ``import``-stage pass refusing float models: a target whose modules run int8 only
    would otherwise compile a float model silently onto the host."""

    @tvm.transform.module_pass(opt_level=0, name=f"{target_name}.RequireInteger")
    def check(mod, _ctx):
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
            raise ValueError(f"{target_name} runs int8 models: this one has {found['float']} "
                             f"float convolution / matmul layers and no quantized layer; give "
                             f"a full-integer TFLite model or a QDQ-quantized ONNX model")
        return mod

    return check


#: channels-last layouts of MATCH-style modules (activations NHWC, weights OHWI)
NHWC_LAYOUTS = {"relax.nn.conv2d": ["NHWC", "OHWI"]}


@tvm.transform.module_pass(opt_level=0, name="edgebyoc.ChannelsLast")
def channels_last(mod, _ctx):
    """NCHW models (ONNX) to NHWC before ``Integerize``; channels-last models are unchanged.

    The permutations ``ConvertLayout`` leaves between the dequantize / quantize pairs move onto
    the int8 tensors in ``Integerize``, where consecutive ones cancel."""
    layouts = []

    def visit(node):
        if isinstance(node, relax.Call) and isinstance(node.op, tvm.ir.Op) \
                and node.op.name == "relax.nn.conv2d":
            layouts.append(str(node.attrs.data_layout))

    relax.analysis.post_order_visit(mod["main"].body, visit)
    if "NCHW" not in layouts:
        return mod
    return relax.transform.ConvertLayout(NHWC_LAYOUTS)(mod)


def int8_import_passes(target_name: str) -> list:
    """The ``import``-stage passes of an int8 MATCH target: NCHW models to NHWC
    (``channels_last``), dequantize -> op -> quantize chains to int8 operators (``Integerize``),
    float models refused (``require_integer``)."""
    from .integerize import Integerize

    return [channels_last, Integerize(), require_integer(target_name)]
