"""The C project's reference kernels for operators left on the host, as data.

Each ``lower_*`` function checks that the C project can express an operator (``Unsupported``
naming what it cannot) and returns a ``Kernel``: the template that writes its body
(``templates/cproject/<template>.c.mako``), the values the template fills in, its
parameters, and for a kernel that can compute a band of output rows the ``RowWindow`` of each
parameter it reads in rows. ``render_kernel`` writes the body, for the whole tensor or (with
``rows``: parameter name -> rows its buffer holds, 0 = whole) for the band ``y0..y1 - 1``.

Covered: NHWC convolution (with its requantization fused, and the zero point of a widened
int8 input), matmul, average pooling (integer sums rounded half away from zero, as TFLite
does), element-wise arithmetic with broadcasting, casts, clip / ReLU, transpose, (de)quantize,
softmax, and the integer requantize / quantized-add kernels of ``edgebyoc.quant``.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Callable, Mapping

import numpy as np
import tvm

from ..target import RowWindow
from .render import render_core_template

CTYPES = {"int8": "int8_t", "uint8": "uint8_t", "int16": "int16_t", "uint16": "uint16_t",
          "int32": "int32_t", "uint32": "uint32_t", "int64": "int64_t", "float32": "float",
          "bool": "uint8_t"}


class Unsupported(Exception):
    """The C project cannot express an operator (the message says what)."""


@dataclass
class Kernel:
    """A host step's kernel as data (see the module docstring). ``params``: (name, tensor,
    written) in the order of the C function's parameters; ``windows``: parameter name ->
    ``RowWindow`` (positions into ``params``), empty when the kernel computes only whole
    tensors; ``output_axis``: the axis of the output's rows when it differs from the
    inputs' (a layout transpose)."""

    template: str
    fields: dict[str, Any]
    params: list[tuple[str, Any, bool]]
    windows: dict[str, RowWindow] = field(default_factory=dict)
    output_axis: int | None = None


def _windows(params, windows: Mapping[str, RowWindow]) -> dict[str, RowWindow]:
    names = [p for p, _, _ in params]
    return {name: replace(w, position=names.index(name)) for name, w in windows.items()}


def row(var: str, ring: int) -> str:
    """The buffer row of tensor row ``var`` in a buffer of ``ring`` rows (0: the whole
    tensor; fewer: a ring buffer, ``memory.streaming``)."""
    return f"({var} % {ring})" if ring else var


def literal(value, dtype: str) -> str:
    """``value`` as a C literal of ``dtype``."""
    if dtype == "float32":
        v = float(np.float32(value))
        if not np.isfinite(v):
            return {True: "INFINITY", False: "-INFINITY"}[v > 0] if not np.isnan(v) else "NAN"
        return f"{v:.9e}f"
    v = int(value)
    if dtype == "int64":
        return f"INT64_C({v})"
    if v == -2 ** 31:
        return "(-2147483647 - 1)"
    return str(v)


def strides(shape) -> list[int]:
    out, running = [], 1
    for extent in reversed(shape):
        out.append(running)
        running *= extent
    return out[::-1]


LOOP_VARS = tuple(f"i{d}" for d in range(8))


def loop_nest(shape, body: str, indent: str = "  ", names=LOOP_VARS) -> str:
    lines = [f"{indent}{'  ' * depth}for (int {names[depth]} = 0; {names[depth]} < {extent}; "
             f"++{names[depth]})" for depth, extent in enumerate(shape)]
    lines.append(f"{indent}{'  ' * len(shape)}{body}")
    return "\n".join(lines) + "\n"


def broadcast_index(shape_in, shape_out, names=LOOP_VARS) -> str:
    """The flat index of an operand of ``shape_in`` broadcast to ``shape_out``."""
    offset = len(shape_out) - len(shape_in)
    terms = [f"{names[offset + i]} * {s}" if s != 1 else names[offset + i]
             for i, (extent, s) in enumerate(zip(shape_in, strides(tuple(shape_in))))
             if extent != 1]
    return " + ".join(terms) or "0"


def render_kernel(kernel: Kernel, rows: Mapping[str, int] | None = None) -> str:
    """The C body of ``kernel``: whole tensors, or with ``rows`` the band ``y0..y1 - 1``."""
    return render_core_template(f"cproject/{kernel.template}.c.mako", f=kernel.fields,
                                rows=None if rows is None else dict(rows), row=row,
                                loop_nest=loop_nest)


# -- lowering -----------------------------------------------------------------------------------
# Each takes (lowering, out tensor, call, args) and returns a Kernel; ``lowering`` gives
# ``tensor(expr)`` and ``const(array)`` (``codegen.cgraph``).

def _elementwise(op: str) -> Callable:
    def lower(lw, out, call, args) -> Kernel:
        a, b = (lw.tensor(x) for x in args[:2])
        if len(out.shape) > 8:
            raise Unsupported(f"{op} of rank {len(out.shape)}")
        return Kernel("elementwise", {
            "op": op, "ctype": out.ctype, "floating": out.dtype == "float32",
            "shape": out.shape, "a": broadcast_index(a.shape, out.shape),
            "b": broadcast_index(b.shape, out.shape),
            "y": broadcast_index(out.shape, out.shape)},
            [("a", a, False), ("b", b, False), ("y", out, True)])
    return lower


def _astype(lw, out, call, args) -> Kernel:
    x = lw.tensor(args[0])
    if x.dtype == "float32" and out.dtype != "float32":
        raise Unsupported("astype from float to integer (use quantize)")
    return Kernel("astype", {"size": out.size, "ctype": out.ctype},
                  [("x", x, False), ("y", out, True)])


def _pointwise_rows(out, operands) -> bool:
    """Whether a point-wise kernel over ``operands`` can run in row bands: NHWC, batch 1,
    every operand of the output's shape."""
    if any(t.shape != out.shape for t in operands):
        raise Unsupported("an element-wise kernel of operands of different shapes")
    return len(out.shape) == 4 and out.shape[0] == 1


def _pointwise(out, operands: list[tuple[str, Any]], statement: str, channel: bool = False):
    """The fields of the ``pointwise`` template: ``statement`` with ``{name}`` standing for
    each operand's flat index and ``{y}`` for the output's (``k``: the channel)."""
    return {"size": out.size, "row": out.size // out.shape[1] if len(out.shape) > 1 else 1,
            "channels": out.shape[-1], "channel": channel, "statement": statement,
            "names": [n for n, _ in operands] + ["y"]}


def _clip(lw, out, call, args) -> Kernel:
    x = lw.tensor(args[0])
    low, high = (float(a.value) for a in args[1:3])
    if out.dtype != "float32":
        info = np.iinfo(out.dtype)
        low, high = max(low, info.min), min(high, info.max)
    lo, hi = literal(low, out.dtype), literal(high, out.dtype)
    rows_ok = _pointwise_rows(out, [x])
    params = [("x", x, False), ("y", out, True)]
    return Kernel("pointwise", _pointwise(out, [("x", x)], f"{out.ctype} v = x[{{x}}];\n"
                  f"    y[{{y}}] = v < {lo} ? {lo} : (v > {hi} ? {hi} : v);"), params,
                  _windows(params, {"x": RowWindow(0)}) if rows_ok else {})


def _relu(lw, out, call, args) -> Kernel:
    x = lw.tensor(args[0])
    zero = literal(0, out.dtype)
    rows_ok = _pointwise_rows(out, [x])
    params = [("x", x, False), ("y", out, True)]
    return Kernel("pointwise", _pointwise(
        out, [("x", x)], f"y[{{y}}] = x[{{x}}] > {zero} ? x[{{x}}] : {zero};"), params,
        _windows(params, {"x": RowWindow(0)}) if rows_ok else {})


def _permute(lw, out, call, args) -> Kernel:
    """A transpose; in row bands only NHWC <-> NCHW (a row ``y`` reads the input's row ``y``,
    axes 1 and 2 swap roles) and NHWC <-> NHCW (rows on axis 1 on both sides)."""
    x = lw.tensor(args[0])
    axes = [int(a) for a in call.attrs.axes] if call.attrs.axes is not None \
        else list(range(len(x.shape)))[::-1]
    params = [("x", x, False), ("y", out, True)]
    index = " + ".join(f"{LOOP_VARS[i]} * {strides(x.shape)[axis]}"
                       for i, axis in enumerate(axes))
    fields = {"shape": out.shape, "index": index or "0",
              "y": broadcast_index(out.shape, out.shape), "mode": "whole"}
    batch_one = len(x.shape) == 4 and x.shape[0] == 1
    if batch_one and axes == [0, 1, 3, 2]:  # (1, H, A, B) -> (1, H, B, A)
        fields.update(mode="rows_outer", inner=x.shape[2], last=x.shape[3])
        return Kernel("permute", fields, params, _windows(
            params, {"x": RowWindow(0, axis=1), "y": RowWindow(1, axis=1)}), output_axis=1)
    if batch_one and axes in ([0, 3, 1, 2], [0, 2, 3, 1]):
        planar_out = axes == [0, 3, 1, 2]
        fields.update(mode="planes", planar_out=planar_out,
                      height=x.shape[1] if planar_out else x.shape[2],
                      width=x.shape[2] if planar_out else x.shape[3],
                      channels=x.shape[3] if planar_out else x.shape[1])
        return Kernel("permute", fields, params, _windows(
            params, {"x": RowWindow(0, axis=1 if planar_out else 2),
                     "y": RowWindow(1, axis=2 if planar_out else 1)}),
            output_axis=2 if planar_out else 1)
    return Kernel("permute", fields, params)


def _scalar(expr, what: str):
    if not isinstance(expr, tvm.ir.expr.Constant):
        raise Unsupported(f"a non-constant {what}")
    value = expr.value.numpy()
    if value.size != 1:
        raise Unsupported(f"a per-channel {what} (scalars only)")
    return value.reshape(())


def _dequantize(lw, out, call, args) -> Kernel:
    x = lw.tensor(args[0])
    scale, zp = _scalar(args[1], "dequantize scale"), _scalar(args[2], "dequantize zero point")
    return Kernel("dequantize", {"size": out.size, "scale": literal(scale, "float32"),
                                 "zero_point": literal(zp, "float32")},
                  [("x", x, False), ("y", out, True)])


def _quantize(lw, out, call, args) -> Kernel:
    x = lw.tensor(args[0])
    scale, zp = _scalar(args[1], "quantize scale"), _scalar(args[2], "quantize zero point")
    info = np.iinfo(out.dtype)
    return Kernel("quantize", {"size": out.size, "scale": literal(scale, "float32"),
                               "zero_point": literal(zp, "float32"), "low": info.min,
                               "high": info.max, "ctype": out.ctype},
                  [("x", x, False), ("y", out, True)])


def _softmax(lw, out, call, args) -> Kernel:
    x = lw.tensor(args[0])
    if out.dtype != "float32":
        raise Unsupported("softmax on integers")
    axis = int(call.attrs.axis) % len(x.shape)
    return Kernel("softmax", {"outer": int(np.prod(x.shape[:axis], dtype=np.int64)),
                              "n": x.shape[axis],
                              "inner": int(np.prod(x.shape[axis + 1:], dtype=np.int64))},
                  [("x", x, False), ("y", out, True)])


def weights_const(lw, value: np.ndarray):
    """The constant of a kernel's weights, integer ones in the narrowest of int8 / int16
    that holds every value: an int8 model's weights arrive widened to int32 by
    integerization (4x the flash), and C promotes them back in the arithmetic."""
    if np.issubdtype(value.dtype, np.signedinteger) and value.size:
        for narrow in ("int8", "int16"):
            info = np.iinfo(narrow)
            if np.dtype(narrow).itemsize < value.dtype.itemsize and \
                    info.min <= value.min() and value.max() <= info.max:
                return lw.const(value, narrow)
    return lw.const(value)


def _matmul(lw, out, call, args) -> Kernel:
    a = lw.tensor(args[0])
    b = weights_const(lw, args[1].value.numpy()) if isinstance(args[1], tvm.ir.expr.Constant) \
        else lw.tensor(args[1])
    if len(b.shape) != 2 or any(d != 1 for d in a.shape[:-2]):
        raise Unsupported(f"matmul of shapes {list(a.shape)} x {list(b.shape)}")
    return Kernel("matmul", {"m": a.shape[-2] if len(a.shape) > 1 else 1, "k": a.shape[-1],
                             "n": b.shape[1], "ctype": out.ctype,
                             "acc": "float" if out.dtype == "float32" else "int64_t"},
                  [("a", a, False), ("b", b, False), ("y", out, True)])


def channel_vector(lw, expr, channels: int, what: str):
    """A per-channel int32 constant (or a scalar broadcast): its tensor and C index."""
    if not isinstance(expr, tvm.ir.expr.Constant):
        raise Unsupported(f"a non-constant requantization {what}")
    value = expr.value.numpy().astype(np.int32).reshape(-1)
    if value.size not in (1, channels):
        raise Unsupported(f"a requantization {what} of {value.size} values for {channels} "
                          f"channels")
    return lw.const(value), ("k" if value.size > 1 else "0")


def _requantize_fields(lw, fields, channels: int, out) -> tuple[list, dict[str, Any]]:
    """The (bias, multiplier, shift) parameters of a requantization and its constants."""
    (bias, bi), (mult, mi), (shift, si) = (
        channel_vector(lw, f, channels, w) for f, w in zip(fields[1:4],
                                                           ("bias", "multiplier", "shift")))
    zp, low, high, rounding = (int(v) for v in fields[4].value.numpy())
    if out.dtype != "int8":
        raise Unsupported(f"requantize to {out.dtype}")
    return [("bias", bias, False), ("mult", mult, False), ("shift", shift, False)], {
        "bi": bi, "mi": mi, "si": si, "zp": zp, "low": low, "high": high,
        "rounding": rounding}


def accumulator(x, weights, terms: int, zero_point: int, out) -> str:
    """The C type of a MAC kernel's accumulator: ``float`` for float layers; ``int32_t`` when
    int8 activations (less their zero point: at most 255 in magnitude) times int8 weights (at
    most 128) summed over ``terms`` products cannot leave int32's range, the single-cycle
    multiply-accumulate of a 32-bit MCU; ``int64_t`` otherwise. The sums are the same."""
    if out.dtype == "float32":
        return "float"
    if x.dtype == "int8" == weights.dtype and -128 <= zero_point <= 127 and \
            terms * 255 * 128 < 2 ** 31:
        return "int32_t"
    return "int64_t"


def lower_conv2d(lw, out, call, args, requantize=None, zero_point: int = 0) -> Kernel:
    """NHWC convolution; with ``requantize`` (the fields of the requantize call that reads its
    int32 result) each accumulator is requantized to int8 in place of being stored;
    ``zero_point`` is subtracted from each input value read (padding stays 0)."""
    attrs = call.attrs
    if str(attrs.data_layout) != "NHWC" or str(attrs.out_layout) not in ("NHWC", ""):
        raise Unsupported(f"conv2d in layout {attrs.data_layout} (NHWC only)")
    if not isinstance(args[1], tvm.ir.expr.Constant):
        raise Unsupported("conv2d with non-constant weights")
    x = lw.tensor(args[0])
    layout = str(attrs.kernel_layout)
    w = np.transpose(args[1].value.numpy(), [layout.index(a) for a in "OHWI"])
    weights = weights_const(lw, w)
    n, iy, ix, c = x.shape
    _, oy, ox, k = out.shape
    ko, fy, fx, cg = w.shape
    if ko != k:
        raise Unsupported("conv2d weights that do not match the output channels")
    groups = int(attrs.groups)
    pt, pl, _, _ = (int(p) for p in attrs.padding)
    sy, sx = (int(s) for s in attrs.strides)
    dy, dx = (int(d) for d in attrs.dilation)
    acc = accumulator(x, weights, cg * fy * fx, zero_point, out)
    fields = {"n": n, "iy": iy, "ix": ix, "c": c, "oy": oy, "ox": ox, "k": k, "fy": fy,
              "fx": fx, "cg": cg, "kg": k // groups, "pt": pt, "pl": pl, "sy": sy, "sx": sx,
              "dy": dy, "dx": dx, "acc": acc, "zero_point": zero_point, "xtype": x.ctype,
              "wtype": weights.ctype, "ctype": out.ctype, "requantize": None}
    params = [("x", x, False), ("w", weights, False)]
    if requantize is not None:
        extra, fields["requantize"] = _requantize_fields(lw, requantize, k, out)
        params += extra
    params.append(("y", out, True))
    windows = {"x": RowWindow(0, kernel=(fy - 1) * dy + 1, stride=sy, pad_top=pt)}
    return Kernel("conv2d", fields, params, _windows(params, windows) if n == 1 else {})


def lower_dense_requantize(lw, out, call, args, requantize, zero_point: int = 0) -> Kernel:
    """A dense layer ((1 x K) by constant (K x N)) with its requantization fused, as the 1x1
    convolution of a 1x1 image with K channels: each accumulator requantized to int8 as
    it is computed, the int8 input read with ``zero_point`` subtracted (no int32 tensor
    stored, as for convolutions)."""
    if not isinstance(args[1], tvm.ir.expr.Constant):
        raise Unsupported("a dense layer with non-constant weights")
    x = lw.tensor(args[0])
    w = args[1].value.numpy()
    if len(x.shape) != 2 or x.shape[0] != 1 or w.ndim != 2 or w.shape[0] != x.shape[1]:
        raise Unsupported(f"dense of shapes {list(x.shape)} x {list(w.shape)}")
    k, n = w.shape
    weights = weights_const(lw, np.ascontiguousarray(w.T).reshape(n, 1, 1, k))
    fields = {"n": 1, "iy": 1, "ix": 1, "c": k, "oy": 1, "ox": 1, "k": n, "fy": 1, "fx": 1,
              "cg": k, "kg": n, "pt": 0, "pl": 0, "sy": 1, "sx": 1, "dy": 1, "dx": 1,
              "acc": accumulator(x, weights, k, zero_point, out), "zero_point": zero_point,
              "xtype": x.ctype,
              "wtype": weights.ctype, "ctype": out.ctype, "requantize": None}
    extra, fields["requantize"] = _requantize_fields(lw, requantize, n, out)
    return Kernel("conv2d", fields, [("x", x, False), ("w", weights, False), *extra,
                                     ("y", out, True)], {})


def lower_avg_pool2d(lw, out, call, args) -> Kernel:
    attrs = call.attrs
    layout = str(attrs.layout)
    if layout not in ("NHWC", "NCHW") or str(attrs.out_layout) not in (layout, "") \
            or any(int(p) for p in attrs.padding) \
            or any(int(d) != 1 for d in attrs.dilation) or bool(attrs.ceil_mode):
        raise Unsupported("avg_pool2d other than NHWC / NCHW, unpadded, undilated, floor mode")
    x = lw.tensor(args[0])
    dims = {axis: x.shape[layout.index(axis)] for axis in "NHWC"}
    odims = {axis: out.shape[layout.index(axis)] for axis in "NHWC"}
    fy, fx = (int(v) for v in attrs.pool_size)
    sy, sx = (int(v) for v in attrs.strides)
    fields = {"layout": layout, "n": dims["N"], "iy": dims["H"], "ix": dims["W"],
              "c": dims["C"], "oy": odims["H"], "ox": odims["W"], "fy": fy, "fx": fx,
              "sy": sy, "sx": sx, "acc": "float" if out.dtype == "float32" else "int64_t",
              "ctype": out.ctype}
    params = [("x", x, False), ("y", out, True)]
    rows_ok = layout == "NHWC" and dims["N"] == 1
    return Kernel("avg_pool2d", fields, params,
                  _windows(params, {"x": RowWindow(0, kernel=fy, stride=sy)}) if rows_ok
                  else {})


def lower_requantize(lw, out, call, fields) -> Kernel:
    acc = lw.tensor(fields[0])
    if acc.shape != out.shape:
        raise Unsupported("a requantize that changes the shape")
    extra, q = _requantize_fields(lw, fields, acc.shape[-1], out)
    rows_ok = _pointwise_rows(out, [acc])
    params = [("x", acc, False), *extra, ("y", out, True)]
    statement = (f"int64_t v = edgebyoc_mbqm((int64_t)x[{{x}}] + bias[{q['bi']}], "
                 f"mult[{q['mi']}], shift[{q['si']}], {q['rounding']}) + {q['zp']};\n"
                 f"    y[{{y}}] = (int8_t)(v < {q['low']} ? {q['low']} : "
                 f"(v > {q['high']} ? {q['high']} : v));")
    return Kernel("pointwise", _pointwise(out, [("x", acc)], statement, channel=True), params,
                  _windows(params, {"x": RowWindow(0)}) if rows_ok else {})


def lower_qadd(lw, out, call, fields) -> Kernel:
    a, b = lw.tensor(fields[0]), lw.tensor(fields[1])
    if a.shape != b.shape or a.dtype != "int8" or b.dtype != "int8":
        raise Unsupported("a quantized add of different shapes or non-int8 operands")
    p = lw.const(fields[2].value.numpy().astype(np.int32).reshape(-1))
    rows_ok = _pointwise_rows(out, [a, b])
    params = [("a", a, False), ("b", b, False), ("p", p, False), ("y", out, True)]
    return Kernel("pointwise", _pointwise(out, [("a", a), ("b", b)],
                                          "y[{y}] = edgebyoc_quantized_add(a[{a}], b[{b}], p);"),
                  params, _windows(params, {"a": RowWindow(0), "b": RowWindow(0)})
                  if rows_ok else {})


#: operator -> its kernel's lowering
KERNELS: dict[str, Callable] = {
    "relax.nn.conv2d": lower_conv2d, "relax.matmul": _matmul,
    "relax.nn.avg_pool2d": lower_avg_pool2d, "relax.astype": _astype, "relax.clip": _clip,
    "relax.nn.relu": _relu, "relax.permute_dims": _permute, "relax.dequantize": _dequantize,
    "relax.quantize": _quantize, "relax.nn.softmax": _softmax,
    **{f"relax.{op}": _elementwise(op) for op in ("add", "subtract", "multiply", "maximum",
                                                  "minimum")},
}
