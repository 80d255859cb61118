"""The integerization pass (MATCH, Table II): dequantize -> op -> quantize chains to int8 ops.

int8 TFLite files and QDQ ONNX models import as float operators between ``R.dequantize`` and
``R.quantize``. ``integerize`` rewrites every chain it recognises into integer operators that
compute what TFLite's int8 kernels compute:

* convolution / depthwise / dense (``conv2d`` or ``matmul`` on dequantized int8 activations and
  symmetric int8 weights, with an optional bias and ReLU)::

      acc = conv2d(astype(x, int32) - zp_in, W, out_dtype=int32)
      y   = call_tir(edgebyoc_requantize, [acc, bias, multiplier, shift, params])

  ``params`` is ``[zp_out, low, high, rounding]`` (``arith.ROUND_*``); ``multiplier`` and
  ``shift`` are per output channel (TFLite's ``QuantizeMultiplier`` of
  ``scale_in * scale_w[k] / scale_out``); a ``clip`` after the ``quantize`` and a ReLU before it
  become ``low`` / ``high``.
* element-wise add of two int8 tensors (with an optional ReLU)::

      y = call_tir(edgebyoc_qadd, [a, b, params])    # arith.add_parameters

Everything else (pooling on int32, reshapes, the softmax between dequantize and quantize) is left
as it is. It runs before constant folding (the ``"import"`` transform stage) because folding
would turn the int8 weights into float constants.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import tvm
from tvm import relax, te

from . import arith

REQUANTIZE = "edgebyoc_requantize"
QADD = "edgebyoc_qadd"


def _constant_value(expr) -> np.ndarray | None:
    if isinstance(expr, tvm.ir.expr.Constant):
        value = expr.value
        return value.numpy() if hasattr(value, "numpy") else np.asarray(value)
    return None


def _op_name(value) -> str | None:
    if isinstance(value, relax.Call) and isinstance(value.op, tvm.ir.Op):
        return value.op.name
    return None


# -- the TE kernels of the integer operators ---------------------------------------------------

def _mbqm(x, multiplier, shift, rounding):
    """``arith.multiply_by_quantized_multiplier`` as a TE expression (int64)."""
    i64 = "int64"
    left = te.max(shift, tvm.tirx.const(0, i64))
    right = te.max(-shift, tvm.tirx.const(0, i64))
    product = (x << left) * multiplier
    total = right + tvm.tirx.const(31, i64)
    half = tvm.tirx.const(1, i64) << (total - tvm.tirx.const(1, i64))
    two30 = tvm.tirx.const(1 << 30, i64)
    tflite = tvm.tirx.Select(right > tvm.tirx.const(0, i64),
                             tvm.tirx.Select(product >= tvm.tirx.const(0, i64),
                                             half + two30, half - two30), two30)
    term = tvm.tirx.Select(rounding == tvm.tirx.const(arith.ROUND_HALF_UP, i64), half, tflite)
    return (product + term) >> total


def requantize_te(acc, bias, multiplier, shift, params):
    """int32 accumulators (channels last) -> int8, see ``arith.requantize``."""
    def body(*index):
        k = index[-1]
        x = acc(*index).astype("int64") + bias[k].astype("int64")
        y = _mbqm(x, multiplier[k].astype("int64"), shift[k].astype("int64"),
                  params[3].astype("int64")) + params[0].astype("int64")
        y = te.min(te.max(y, params[1].astype("int64")), params[2].astype("int64"))
        return y.astype("int8")
    return te.compute(acc.shape, body, name="requantize")


def qadd_te(a, b, params):
    """TFLite's int8 ADD, see ``arith.quantized_add``."""
    def body(*index):
        p = [params[i].astype("int64") for i in range(11)]
        shift = tvm.tirx.const(arith.ADD_LEFT_SHIFT, "int64")
        zero = tvm.tirx.const(arith.ROUND_TFLITE, "int64")
        x = (a(*index).astype("int64") - p[6]) << shift
        y = (b(*index).astype("int64") - p[7]) << shift
        total = _mbqm(x, p[0], p[1], zero) + _mbqm(y, p[2], p[3], zero)
        out = _mbqm(total, p[4], p[5], zero) + p[8]
        return te.min(te.max(out, p[9]), p[10]).astype("int8")
    return te.compute(a.shape, body, name="qadd")


# -- the pass -----------------------------------------------------------------------------------

class _Integerizer:
    def __init__(self, mod: tvm.IRModule):
        self.mod = mod
        self.main = mod["main"]
        self.bindings = [(b.var, b.value) for block in self.main.body.blocks
                         for b in block.bindings]
        self.value = dict(self.bindings)
        self.consumers: dict[Any, list] = {}
        for var, value in self.bindings:
            for used in _vars_of(value):
                self.consumers.setdefault(used, []).append(var)
        for used in _vars_of(self.main.body.body):
            self.consumers.setdefault(used, []).append(None)
        self.env: dict[Any, Any] = {}  # original var -> expression in the new function
        self.consts: dict[Any, np.ndarray] = {}
        self.sym: dict[Any, tuple] = {}  # float values kept symbolic until a quantize
        self.skip: set = set()
        self.permuted_from: dict[Any, tuple] = {}  # new var -> (int8 source, axes)
        self.rewritten = 0

    # helpers
    def const_of(self, expr) -> np.ndarray | None:
        value = _constant_value(expr)
        if value is None and isinstance(expr, relax.Var):
            value = self.consts.get(expr)
        return value

    def materialize(self, expr):
        if isinstance(expr, relax.Var):
            if expr in self.env:
                return self.env[expr]
            if expr in self.consts:
                self.env[expr] = relax.const(self.consts[expr])
                return self.env[expr]
            if expr in self.value:  # a symbolic float value someone needs after all
                self.env[expr] = self.bb.emit(self.rebuild(self.value[expr]), expr.name)
                return self.env[expr]
            return expr  # a parameter
        return expr

    def rebuild(self, value):
        if isinstance(value, relax.Call):
            return relax.Call(value.op, [self.rebuild_arg(a) for a in value.args], value.attrs,
                              value.ty_args)
        if isinstance(value, relax.Tuple):
            return relax.Tuple([self.rebuild_arg(f) for f in value.fields])
        if isinstance(value, relax.TupleGetItem):
            return relax.TupleGetItem(self.rebuild_arg(value.tuple_value), value.index)
        return self.rebuild_arg(value)

    def rebuild_arg(self, arg):
        if isinstance(arg, relax.Tuple):
            return relax.Tuple([self.rebuild_arg(f) for f in arg.fields])
        return self.materialize(arg) if isinstance(arg, relax.Var) else arg

    # the walk
    def run(self) -> tvm.IRModule:
        self.bb = relax.BlockBuilder()
        params = list(self.main.params)
        with self.bb.function("main", params):
            with self.bb.dataflow():
                for var, value in self.bindings:
                    if var in self.skip:
                        continue
                    if not self.visit(var, value):
                        self.env[var] = self.bb.emit(self.rebuild(value), var.name)
                out = self.bb.emit_output(self.rebuild(self.main.body.body))
            self.bb.emit_func_output(out)
        mod = self.bb.get()
        for gv, other in self.mod.functions.items():
            if gv.name_hint != "main":
                mod[gv] = other
        func = mod["main"]
        if self.main.attrs and "num_input" in self.main.attrs:
            func = func.with_attr("num_input", self.main.attrs["num_input"])
        mod["main"] = func
        return relax.transform.DeadCodeElimination(["main"])(mod)

    def visit(self, var, value) -> bool:
        """Record ``var`` symbolically or emit its integer form; False: emit it as it is."""
        name = _op_name(value)
        if name is None:
            return False
        args = list(value.args)
        if name == "relax.permute_dims":
            rank = len(_shape(args[0]))
            axes = [int(a) for a in value.attrs.axes] if value.attrs.axes is not None \
                else list(range(rank))[::-1]
            if self.const_of(args[0]) is not None:
                self.consts[var] = np.ascontiguousarray(np.transpose(self.const_of(args[0]),
                                                                     axes))
                return True
            inner = self.sym.get(args[0])
            if inner and inner[0] == "qconst":  # a dequantized weight in another layout
                _, data, scale, zp, axis = inner
                self.sym[var] = ("qconst", np.ascontiguousarray(np.transpose(data, axes)),
                                 scale, zp, axes.index(axis) if np.size(scale) > 1 else 0)
                return True
            if inner and inner[0] == "qact":  # layouts change on the int8 tensor instead
                _, x, scale, zp = inner
                self.sym[var] = ("qact", self.permute(x, axes), scale, zp)
                return True
            if inner and inner[0] in ("mac", "add", "relu"):  # permuted before its quantize
                self.sym[var] = ("permuted", args[0], axes)
                return True
            return False
        if name == "relax.reshape" and self.sym.get(args[0], ("",))[0] == "qconst":
            moved = _reshape_qconst(self.sym[args[0]], _shape(var))
            if moved is not None:
                self.sym[var] = moved
                return True
            return False
        if name == "relax.dequantize":
            scale, zp = self.const_of(args[1]), self.const_of(args[2])
            if scale is None or zp is None:
                return False
            data = self.const_of(args[0])
            if data is not None:
                self.sym[var] = ("qconst", data, scale, zp, int(value.attrs.axis))
                return True
            if str(args[0].ty.dtype) == "int8" and scale.size == 1 and zp.size == 1:
                self.sym[var] = ("qact", args[0], float(scale.reshape(())),
                                 int(zp.reshape(())))
                return True
            return False
        if name in ("relax.nn.conv2d", "relax.matmul"):
            a, w = (self.sym.get(x) for x in args[:2])
            if a and w and a[0] == "qact" and w[0] == "qconst" and not np.any(w[3]):
                self.sym[var] = ("mac", value, args[0], args[1], None)
                return True
            return False
        if name == "relax.add":
            a, b = (self.sym.get(x) for x in args[:2])
            if a and b and a[0] == "mac" and a[4] is None and b[0] == "qconst" \
                    and not np.any(b[3]):
                self.sym[var] = ("mac",) + a[1:4] + (args[1],)
                return True
            if a and b and a[0] == "qact" and b[0] == "qact" \
                    and _shape(args[0]) == _shape(args[1]) == _shape(var):
                self.sym[var] = ("add", args[0], args[1])
                return True
            return False
        if name == "relax.nn.relu":
            inner = self.sym.get(args[0])
            if inner and inner[0] in ("mac", "add"):
                self.sym[var] = ("relu", args[0])
                return True
            if inner and inner[0] == "permuted" and self.sym[inner[1]][0] in ("mac", "add"):
                self.sym[var] = ("permuted", self.relu_of(inner[1]), inner[2])
                return True
            return False
        if name == "relax.quantize":
            return self.quantize(var, value)
        return False

    def permute(self, x, axes: list[int]):
        """``x`` (an int8 tensor of the new function) permuted by ``axes``; a permutation
        of a permutation is composed, and the identity is ``x`` itself."""
        x = self.materialize(x)
        source, before = self.permuted_from.get(x, (x, list(range(len(axes)))))
        composed = [before[a] for a in axes]
        if composed == list(range(len(axes))):
            return source
        out = self.bb.emit(relax.op.permute_dims(self.materialize(source), composed))
        self.permuted_from[out] = (source, composed)
        return out

    def relu_of(self, inner_var):
        """A symbolic ReLU over ``inner_var`` (for a ReLU after a layout permutation)."""
        key = ("relu-of", inner_var)
        if key not in self.sym:
            self.sym[key] = ("relu", inner_var)
        return key

    def quantize(self, var, value) -> bool:
        source = value.args[0]
        relu = False
        axes = None
        if self.sym.get(source, ("",))[0] == "permuted":
            _, source, axes = self.sym[source]
        if self.sym.get(source, ("",))[0] == "relu":
            relu, source = True, self.sym[source][1]
        inner = self.sym.get(source)
        scale, zp = self.const_of(value.args[1]), self.const_of(value.args[2])
        if inner is None or inner[0] not in ("mac", "add") or scale is None or zp is None \
                or scale.size != 1 or str(value.attrs.out_dtype) != "int8":
            return False
        scale, zp = float(scale.reshape(())), int(zp.reshape(()))
        low, high = -128, 127
        if relu:
            low = max(low, zp)
        target = var
        users = self.consumers.get(var, [])
        if len(users) == 1 and users[0] is not None:
            clip = self.value[users[0]]
            if _op_name(clip) == "relax.clip":
                low = max(low, int(float(clip.args[1].value)))
                high = min(high, int(float(clip.args[2].value)))
                self.skip.add(users[0])
                target = users[0]
        if inner[0] == "mac":
            out = self.emit_mac(inner, scale, zp, low, high, var)
        else:
            out = self.emit_add(inner, scale, zp, low, high)
        if out is None:
            self.skip.discard(target)
            return False
        if axes is not None:
            out = self.permute(out, axes)
        self.env[var] = out
        self.env[target] = out
        self.rewritten += 1
        return True

    def emit_mac(self, inner, scale_out, zp_out, low, high, var):
        _, call, act, weight, bias = inner
        _, x, scale_in, zp_in = self.sym[act]
        _, w, w_scale, _, axis = self.sym[weight]
        is_conv = call.op.name == "relax.nn.conv2d"
        out_axis = len(w.shape) - 1
        if is_conv:
            layout = str(call.attrs.kernel_layout)
            out_axis = layout.index("O") if w.shape[layout.index("O")] == _shape(call)[-1] \
                else layout.index("I")
            if str(call.attrs.data_layout) != "NHWC" or str(call.attrs.out_layout) != "NHWC":
                return None
        channels = int(_shape(call)[-1])
        w_scale = np.asarray(w_scale, dtype=np.float64).ravel()
        if w_scale.size not in (1, channels) or (w_scale.size > 1 and axis != out_axis):
            return None
        w_scale = np.broadcast_to(w_scale, (channels,))
        real = np.float64(scale_in) * w_scale / np.float64(scale_out)
        multiplier, shift = arith.quantize_multipliers(real)
        if bias is not None:
            b = self.sym[bias]
            bias_q = np.broadcast_to(np.asarray(b[1], dtype=np.int64).ravel(), (channels,))
        else:
            bias_q = np.zeros(channels, dtype=np.int64)
        bb = self.bb
        xi = bb.emit(relax.op.astype(self.materialize(x), "int32"))
        if zp_in:
            xi = bb.emit(relax.op.subtract(xi, relax.const(np.int32(zp_in))))
        wc = relax.const(np.asarray(w, dtype=np.int32))
        if is_conv:
            attrs = call.attrs
            acc = bb.emit(relax.op.nn.conv2d(
                xi, wc, strides=[int(s) for s in attrs.strides],
                padding=[int(p) for p in attrs.padding],
                dilation=[int(d) for d in attrs.dilation], groups=int(attrs.groups),
                data_layout="NHWC", kernel_layout=str(attrs.kernel_layout), out_layout="NHWC",
                out_dtype="int32"))
        else:
            acc = bb.emit(relax.op.matmul(xi, wc, out_dtype="int32"))
        params = np.array([zp_out, low, high, arith.ROUND_TFLITE], dtype=np.int32)
        return bb.emit_te(requantize_te, acc, relax.const(bias_q.astype(np.int32)),
                          relax.const(multiplier), relax.const(shift), relax.const(params),
                          primfunc_name_hint=REQUANTIZE)

    def emit_add(self, inner, scale_out, zp_out, low, high):
        _, a, b = inner
        _, xa, sa, za = self.sym[a]
        _, xb, sb, zb = self.sym[b]
        params = arith.add_parameters(sa, za, sb, zb, scale_out, zp_out, low, high)
        pa = self.permuted_from.get(self.materialize(xa))
        pb = self.permuted_from.get(self.materialize(xb))
        if pa and pb and pa[1] == pb[1]:  # both operands permuted alike: add, then permute
            out = self.bb.emit_te(qadd_te, self.materialize(pa[0]), self.materialize(pb[0]),
                                  relax.const(params), primfunc_name_hint=QADD)
            return self.permute(out, pa[1])
        return self.bb.emit_te(qadd_te, self.materialize(xa), self.materialize(xb),
                               relax.const(params), primfunc_name_hint=QADD)


def _reshape_qconst(qconst: tuple, shape: tuple) -> tuple | None:
    """A dequantized constant reshaped: the data reshaped, the channel axis followed."""
    _, data, scale, zp, axis = qconst
    if np.asarray(scale).size == 1:
        return ("qconst", data.reshape(shape), scale, zp, 0)
    old_stride = int(np.prod(data.shape[axis + 1:]))
    for new_axis, size in enumerate(shape):
        if size == data.shape[axis] and int(np.prod(shape[new_axis + 1:])) == old_stride:
            return ("qconst", data.reshape(shape), scale, zp, new_axis)
    return None


def _shape(expr) -> tuple:
    shape = getattr(expr.ty, "shape", None)
    return tuple(int(d) for d in shape.values) if shape is not None else ()


def _vars_of(expr) -> list:
    found = []
    relax.analysis.post_order_visit(expr, lambda n: found.append(n)
                                    if isinstance(n, relax.Var) else None)
    return found


def integerize(mod: tvm.IRModule) -> tvm.IRModule:
    """Rewrite the quantized chains of ``mod["main"]``; see the module docstring."""
    return _Integerizer(mod).run()


@tvm.transform.module_pass(opt_level=0, name="edgebyoc.Integerize")
class Integerize:
    """``integerize`` as a ``tvm.transform`` pass (for the ``"import"`` transform stage)."""

    def transform_module(self, mod, ctx):  # noqa: ARG002 - the pass API
        return integerize(mod)
