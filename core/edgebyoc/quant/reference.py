"""A plain numpy executor of integerized models: the reference int8 code is checked against.

``run_reference(mod, inputs, rounding)`` evaluates ``mod["main"]`` operator by operator in numpy
(int64 accumulation, ``arith`` requantization). ``rounding`` maps the index of a requantize
call (program order) to the rounding mode its target hardware uses (default TFLite's), so a
layer placed on an accelerator that rounds half up is reproduced exactly.
"""

from __future__ import annotations

from typing import Mapping

import numpy as np
import tvm
from tvm import relax

from ..errors import EdgebyocError
from . import arith
from .integerize import QADD, REQUANTIZE


def _conv2d(x, w, attrs):
    layout = str(attrs.kernel_layout)
    w = np.transpose(w, [layout.index(a) for a in "HWIO"])  # HWIO, I per group
    fy, fx, cin_g, cout = w.shape
    groups = int(attrs.groups)
    pt, pl, pb, pr = (int(p) for p in attrs.padding)
    sy, sx = (int(s) for s in attrs.strides)
    dy, dx = (int(d) for d in attrs.dilation)
    x = np.pad(x, [(0, 0), (pt, pb), (pl, pr), (0, 0)])
    n, h, wd, c = x.shape
    oy = (h - (fy - 1) * dy - 1) // sy + 1
    ox = (wd - (fx - 1) * dx - 1) // sx + 1
    out = np.zeros((n, oy, ox, cout), dtype=np.int64)
    per_group = cout // groups
    for g in range(groups):
        xs = x[..., g * cin_g:(g + 1) * cin_g]
        ws = w[..., g * per_group:(g + 1) * per_group]
        for i in range(fy):
            for j in range(fx):
                patch = xs[:, i * dy:i * dy + sy * (oy - 1) + 1:sy,
                           j * dx:j * dx + sx * (ox - 1) + 1:sx, :]
                out[..., g * per_group:(g + 1) * per_group] += patch @ ws[i, j]
    return out


def _avg_pool2d(x, attrs):
    layout = str(attrs.layout)
    if layout not in ("NHWC", "NCHW"):
        raise NotImplementedError(f"reference: avg_pool2d in layout {layout}")
    (fy, fx), (sy, sx) = [int(v) for v in attrs.pool_size], [int(v) for v in attrs.strides]
    if any(int(p) for p in attrs.padding):
        raise NotImplementedError("padded average pooling")
    if layout == "NCHW":  # pooled channels last, then back
        x = np.transpose(x, (0, 2, 3, 1))
    out = _avg_pool2d_nhwc(x, fy, fx, sy, sx)
    return np.transpose(out, (0, 3, 1, 2)) if layout == "NCHW" else out


def _avg_pool2d_nhwc(x, fy: int, fx: int, sy: int, sx: int):
    _, h, w, _ = x.shape
    oy, ox = (h - fy) // sy + 1, (w - fx) // sx + 1
    floating = x.dtype.kind == "f"
    out = np.zeros((x.shape[0], oy, ox, x.shape[3]), dtype=x.dtype if floating else np.int64)
    for i in range(oy):
        for j in range(ox):
            out[:, i, j] = x[:, i * sy:i * sy + fy, j * sx:j * sx + fx].sum(axis=(1, 2))
    count = fy * fx
    if floating:
        return out / x.dtype.type(count)
    # integer sums divide rounding half away from zero, as TFLite does (codegen.host builds
    # integer average pooling so too; TVM's own legalization truncates)
    return np.sign(out) * ((np.abs(out) + count // 2) // count)


def _max_pool2d(x, attrs):
    """Max pooling (NHWC or NCHW), padding never chosen: padded with the dtype's minimum."""
    layout = str(attrs.layout)
    if layout not in ("NHWC", "NCHW") or bool(attrs.ceil_mode):
        raise ReferenceUnsupported(f"max_pool2d in layout {layout}"
                                   f"{' with ceil_mode' if bool(attrs.ceil_mode) else ''}")
    if layout == "NCHW":
        x = np.transpose(x, (0, 2, 3, 1))
    (fy, fx), (sy, sx) = [int(v) for v in attrs.pool_size], [int(v) for v in attrs.strides]
    dy, dx = (int(v) for v in attrs.dilation)
    pt, pl, pb, pr = (int(v) for v in attrs.padding)
    low = np.finfo(x.dtype).min if x.dtype.kind == "f" else np.iinfo(x.dtype).min
    x = np.pad(x, [(0, 0), (pt, pb), (pl, pr), (0, 0)], constant_values=low)
    _, h, w, _ = x.shape
    oy, ox = (h - (fy - 1) * dy - 1) // sy + 1, (w - (fx - 1) * dx - 1) // sx + 1
    out = np.full((x.shape[0], oy, ox, x.shape[3]), low, dtype=x.dtype)
    for i in range(fy):
        for j in range(fx):
            window = x[:, i * dy:i * dy + sy * (oy - 1) + 1:sy,
                       j * dx:j * dx + sx * (ox - 1) + 1:sx]
            np.maximum(out, window, out=out)
    return np.transpose(out, (0, 3, 1, 2)) if layout == "NCHW" else out


class ReferenceUnsupported(EdgebyocError):
    """The integer graph holds something the numpy reference does not evaluate."""

    def __init__(self, what: str):
        super().__init__(f"the numpy integer reference cannot evaluate {what} of this "
                         f"integerized graph; verify against --target host instead")


def run_reference(mod: tvm.IRModule, inputs: list[np.ndarray],
                  rounding: Mapping[int, int] | None = None,
                  deviation: dict[int, int] | None = None) -> list[np.ndarray]:
    """Evaluate ``mod["main"]`` on ``inputs`` (in parameter order); outputs as a list.

    ``deviation``, when given, receives for every requantize whose rounding is not TFLite's
    the largest difference (LSBs) between its output and TFLite's rounding of the same
    accumulators: the per-layer error the hardware's rounding adds."""
    main = mod["main"]
    env = {p: np.asarray(v) for p, v in zip(main.params, inputs)}
    requant_index = 0
    rounding = dict(rounding or {})

    def val(expr):
        if isinstance(expr, (tvm.tirx.IntImm, tvm.tirx.FloatImm)):  # scalars (Constants too)
            return np.asarray(expr.value)
        if isinstance(expr, tvm.ir.expr.Constant):
            return expr.value.numpy()
        if isinstance(expr, relax.Var):
            return env[expr]
        if isinstance(expr, relax.ShapeExpr):
            return [int(v) for v in expr.values]
        if isinstance(expr, relax.Tuple):
            return [val(f) for f in expr.fields]
        raise ReferenceUnsupported(f"an operand of type {type(expr).__name__}")

    for block in main.body.blocks:
        for binding in block.bindings:
            call = binding.value
            if isinstance(call, relax.TupleGetItem):
                env[binding.var] = val(call.tuple_value)[call.index]
                continue
            if isinstance(call, relax.Var):
                env[binding.var] = env[call]
                continue
            name = call.op.name
            dtype = str(getattr(binding.var.ty, "dtype", ""))
            if name == "relax.call_tir":
                callee = call.args[0].name_hint
                args = [val(a) for a in call.args[1].fields]
                if callee.startswith(REQUANTIZE):
                    acc, bias, mult, shift, params = args
                    mode = rounding.get(requant_index, int(params[3]))
                    requant_index += 1
                    out = arith.requantize(acc, bias, mult, shift, int(params[0]),
                                           int(params[1]), int(params[2]), mode)
                    if deviation is not None and mode != arith.ROUND_TFLITE:
                        tflite = arith.requantize(acc, bias, mult, shift, int(params[0]),
                                                  int(params[1]), int(params[2]))
                        deviation[requant_index - 1] = int(np.abs(
                            out.astype(np.int64) - tflite).max(initial=0))
                elif callee.startswith(QADD):
                    out = arith.quantized_add(*args)
                else:
                    raise ReferenceUnsupported(f"the kernel {callee}")
            else:
                args = [val(a) for a in call.args]
                attrs = call.attrs
                if name == "relax.astype":
                    out = args[0].astype(dtype)
                elif name == "relax.subtract":
                    out = (args[0].astype(np.int64) - args[1]).astype(dtype)
                elif name == "relax.nn.conv2d":
                    out = _conv2d(args[0].astype(np.int64), args[1].astype(np.int64), attrs)
                elif name == "relax.matmul":
                    out = args[0].astype(np.int64) @ args[1].astype(np.int64) \
                        if dtype.startswith("int") else args[0] @ args[1]
                elif name == "relax.nn.avg_pool2d":
                    x = args[0] if args[0].dtype.kind == "f" else args[0].astype(np.int64)
                    out = _avg_pool2d(x, attrs)
                elif name == "relax.nn.max_pool2d":
                    out = _max_pool2d(args[0], attrs)
                elif name == "relax.mean" and args[0].dtype.kind == "f":
                    axes = tuple(range(args[0].ndim)) if attrs.axis is None else tuple(
                        int(a) for a in attrs.axis)
                    count = int(np.prod([args[0].shape[a] for a in axes]))
                    out = args[0].sum(axis=axes, keepdims=bool(attrs.keepdims),
                                      dtype=args[0].dtype) / args[0].dtype.type(count)
                elif name == "relax.reshape":
                    out = args[0].reshape(args[1])
                elif name == "relax.permute_dims":
                    axes = None if attrs.axes is None else [int(a) for a in attrs.axes]
                    out = np.transpose(args[0], axes)
                elif name in ("relax.add", "relax.multiply") and not dtype.startswith("int"):
                    out = args[0] + args[1] if name == "relax.add" else args[0] * args[1]
                elif name == "relax.dequantize":
                    out = ((args[0].astype(np.float32) - np.float32(args[2]))
                           * np.float32(args[1])).astype(np.float32)
                elif name == "relax.quantize":
                    info = np.iinfo(dtype)
                    q = np.round(args[0] / np.float32(args[1])) + args[2]
                    out = np.clip(q, info.min, info.max)
                elif name == "relax.nn.softmax":
                    x = args[0] - args[0].max(axis=int(attrs.axis), keepdims=True)
                    e = np.exp(x)
                    out = e / e.sum(axis=int(attrs.axis), keepdims=True)
                elif name == "relax.clip":
                    out = np.clip(args[0], float(call.args[1].value), float(call.args[2].value))
                else:
                    raise ReferenceUnsupported(f"the operator {name}")
            env[binding.var] = np.asarray(out).astype(dtype) if dtype else out
    result = val(main.body.body)
    return result if isinstance(result, list) else [result]
