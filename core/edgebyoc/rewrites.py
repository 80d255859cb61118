"""Rewrites of importer artifacts in Relax, used by the host build and offered to plugins
through ``edgebyoc.api.transforms`` (see there for examples).

- ``scalar_min_max``: ``call_tir(maximum | minimum, (x, scalar constant))``, the form TVM's
  ONNX importer gives ``Clip`` / ReLU6 with constant bounds, back as ``relax.maximum`` /
  ``relax.minimum``: layout conversion and operator fusion then treat the clamp as the
  element-wise operator it is (the host build fuses it into the convolution before it instead
  of running it alone between two transposes);
- ``clip_as_min_max`` (the host build's): ``relax.clip`` by constant bounds, TVM's import of
  ONNX ``HardSigmoid`` and ``HardSwish``, as ``relax.minimum`` then ``relax.maximum``:
  TVM 0.27's layout conversion has no rule for ``clip`` and put a transpose on each side of
  it, which kept MobileNetV3's hard-swish out of the convolutions' epilogues (a kernel of
  its own per activation, a seventh of the model's time);
- ``fast_sigmoid``: ``relax.sigmoid`` through TVM's vectorisable ``fast_exp`` (the host build:
  SiLU and squeeze-excite gates in the convolutions' epilogues);
- ``fast_softmax`` (the host build's): ``relax.nn.softmax`` through TVM's ``fast_softmax``,
  whose ``exp`` is the vectorisable ``fast_exp`` (attention over long sequences);
- ``fast_erf`` (the host build's): ``relax.erf`` through TVM's vectorisable ``fast_erf``
  polynomial (GELU in the transformers' MLP epilogues; ``erf`` itself is a scalar libm call
  per element, 60 % of a ViT MLP layer's time);
- ``fast_tanh`` and ``small_integer_powers`` (the host build's): ``relax.tanh`` through TVM's
  vectorisable ``fast_tanh``, and ``x ** 2`` / ``x ** 3`` by a constant exponent as products
  (GPT-2's tanh GELU, ``0.5 x (1 + tanh(0.798 (x + 0.0447 x ** 3)))``: TVM lowers ``tanh``
  through ``exp`` and ``power`` through ``pow``, scalar libm calls per element, which made it
  half of GPT-2's time);
- ``pad_conv_channels`` (the host build's): a channels-last convolution with constant weights
  whose output channels would leave most SIMD lanes idle (179, 89: ``schedules.
  padded_channels``) computes zero-padded weights' whole vectors of channels, then slices the
  padding off (the slice fuses into the kernel's epilogue; the weights are padded once, at
  compile time);
- ``inverse_permutes`` (the host build's): a transpose of a transpose that undoes it is its
  input (the pairs a channels-last build leaves around depth-first kernels that read and
  write NHWC themselves);
- ``float_floor_mod_edges`` (the pipeline's own): a float ``floor_mod`` (ONNX ``Mod`` with
  ``fmod=0``) by an infinite divisor gives the dividend, or the divisor when their signs
  differ, as numpy and onnxruntime do; TVM's ``x - floor(x / y) * y`` gives NaN there;
- ``infinite_max_reductions`` (the pipeline's own): a float ``max`` (``min``) reduction whose
  reduced elements are all -inf (+inf) gives -inf (+inf), as numpy and onnxruntime do; TVM
  starts the reduction from the lowest (highest) finite value and returns it there (a fully
  masked attention row: ``ReduceMax(bias) == -inf`` was false, its softmax NaN kept);
- ``symbolic_extents`` (the importer's own): a tensor whose extents TVM's importer could not
  tell (a data-dependent slice, ``GatherND`` by computed indices, a detector's post-processing)
  is given a fresh symbolic extent per axis by a ``match_cast``: legalization (``emit_te``)
  and TVM's NMS need shapes, symbolic ones suffice;
  a slice "to the end" of a symbolic axis (ONNX ``Slice`` with end INT64_MAX) ends at the
  axis' extent instead, so its result has that extent, not ``min(INT64_MAX, n)``, which
  TVM's simplifier cannot prove equal to ``n`` (a broadcast of the two fails to legalize);
- ``dead_conv_taps`` (the pipeline's own): the kernel rows / columns of a dilated convolution
  with constant weights that read only padding, for every output (DeepLabV3's ASPP: dilation
  24 and 36 on a 16 x 16 map leave only the centre tap), are cut from the kernel and the
  padding shrunk to match: the same sums without the products of zeros (exact: the weights
  cut are finite), and no kernel padding a map by 36 on each side;
- ``border_tap_convolutions`` (the host build's): a stride-1 dilated convolution with
  constant finite weights whose taps read real input for under ``MAX_LIVE_TAP_FRACTION`` of
  their (tap, output) pairs (DeepLabV3's ASPP, dilation 12 over a 16 x 16 map: a quarter) as
  the sum of one 1x1 convolution per tap, each over the input window it reads and
  zero-padded to the whole output: the same products without the zeros of the padding (the
  sums' order changes: results equal within rounding);
- ``split_wide_concats`` (the pipeline's own, not offered to plugins): a ``concat`` or ``stack``
  of more than ``MAX_CONCAT_INPUTS`` tensors (ONNX ``Concat``; ``Sum`` / ``Mean`` / ``Max`` of
  many inputs import as a ``stack``) as a tree of narrower ones. TVM lowers either to one
  kernel whose every element selects among all inputs: with 2,000 inputs the compiler's
  recursion over that expression overflows its stack, and before that takes minutes.
"""

from __future__ import annotations

import re
from typing import Callable

import tvm
from tvm import relax

__all__ = ["fast_sigmoid", "scalar_min_max"]


def rewrite_functions(mutator: relax.PyExprMutator) -> tvm.IRModule:
    """The module ``mutator`` was made for, every Relax function in it rewritten by it."""
    for gv, func in list(mutator.builder_.get().functions_items()):
        if isinstance(func, relax.Function):
            mutator.builder_.update_func(gv, mutator.visit_expr(func))
    return mutator.builder_.get()


@relax.expr_functor.mutator
class _ScalarMinMax(relax.PyExprMutator):
    def visit_call_(self, call):
        call = super().visit_call_(call)
        if isinstance(call.op, tvm.ir.Op) and call.op.name == "relax.call_tir":
            match = re.fullmatch(r"(maximum|minimum)\d*", call.args[0].name_hint)
            args = call.args[1].fields if isinstance(call.args[1], relax.Tuple) else []
            scalar = len(args) == 2 and (
                isinstance(args[1], (tvm.tirx.FloatImm, tvm.tirx.IntImm)) or (
                    isinstance(args[1], tvm.ir.expr.Constant)
                    and args[1].value.numpy().size == 1))
            if match and scalar:
                bound = args[1]
                if not isinstance(bound, tvm.ir.expr.Constant) or isinstance(
                        bound, (tvm.tirx.FloatImm, tvm.tirx.IntImm)):  # a scalar: as a tensor
                    bound = relax.const(bound.value, str(args[0].ty.dtype))
                operator = relax.op.maximum if match.group(1) == "maximum" else relax.op.minimum
                return operator(args[0], bound)
        return call


@tvm.transform.module_pass(opt_level=0, name="edgebyoc.ScalarMinMax")
def scalar_min_max(mod, _ctx):
    """``call_tir(maximum | minimum, (x, scalar))`` as ``relax.maximum`` / ``relax.minimum``,
    then dead code elimination of the unused TIR functions (see the module docstring)."""
    mod["main"] = _ScalarMinMax(mod).visit_expr(mod["main"])
    return relax.transform.DeadCodeElimination(["main"])(mod)


@relax.expr_functor.mutator
class _ClipAsMinMax(relax.PyExprMutator):
    def visit_call_(self, call):
        call = super().visit_call_(call)
        if not (isinstance(call.op, tvm.ir.Op) and call.op.name == "relax.clip"):
            return call
        bounds = call.args[1:]
        dtype = str(getattr(call.args[0].ty, "dtype", ""))
        if dtype not in ("float32", "float16") or not all(
                isinstance(b, (tvm.tirx.FloatImm, tvm.tirx.IntImm)) for b in bounds):
            return call
        low, high = (relax.const(float(b.value), dtype) for b in bounds)
        # topi's clip: max(min(x, high), low), in that order (the same result for NaN)
        return relax.op.maximum(relax.op.minimum(call.args[0], high), low)


@tvm.transform.module_pass(opt_level=0, name="edgebyoc.ClipAsMinMax")
def clip_as_min_max(mod, _ctx):
    """``relax.clip`` of a float tensor by constant bounds (TVM's import of ONNX
    ``HardSigmoid`` and ``HardSwish``) in ``main`` as ``relax.minimum`` then
    ``relax.maximum`` by scalar constants (see the module docstring)."""
    mod["main"] = _ClipAsMinMax(mod).visit_expr(mod["main"])
    return mod


def permute_axes(expr) -> list[int] | None:
    """The axes of a ``permute_dims`` call given them, else ``None``."""
    if isinstance(expr, relax.Call) and isinstance(expr.op, tvm.ir.Op) and \
            expr.op.name == "relax.permute_dims" and expr.attrs.axes is not None:
        return [int(axis) for axis in expr.attrs.axes]
    return None


@relax.expr_functor.mutator
class _InversePermutes(relax.PyExprMutator):
    def visit_call_(self, call):
        call = super().visit_call_(call)
        outer = permute_axes(call)
        if outer is not None and isinstance(call.args[0], relax.Var):
            inner_call = self.lookup_binding(call.args[0])
            inner = permute_axes(inner_call)
            if inner is not None and [inner[axis] for axis in outer] == list(range(len(outer))):
                return inner_call.args[0]
        return call


@tvm.transform.module_pass(opt_level=0, name="edgebyoc.InversePermutes")
def inverse_permutes(mod, _ctx):
    """A transpose of a transpose that undoes it is its input (the NHWC -> NCHW -> NHWC pair
    a channels-last build leaves around a depth-first kernel that reads and writes NHWC
    itself); the transposes left unused are removed."""
    mod = rewrite_functions(_InversePermutes(mod))
    return relax.transform.DeadCodeElimination(["main"])(mod)


def _fast_sigmoid(x):
    from tvm import topi

    return topi.divide(1.0, topi.add(1.0, topi.fast_exp(topi.negative(x))))


@relax.expr_functor.mutator
class _ThroughTE(relax.PyExprMutator):
    """Every float32 call of one Relax operator replaced by a TE computation of it."""

    def __init__(self, mod, op_name: str, compute: Callable, name_hint: str,
                 attributes: Callable = lambda call: ()):
        super().__init__(mod)
        self.op_name, self.compute, self.name_hint = op_name, compute, name_hint
        self.attributes = attributes  # the call's attributes the computation takes

    def visit_call_(self, call):
        call = super().visit_call_(call)
        if isinstance(call.op, tvm.ir.Op) and call.op.name == self.op_name \
                and str(call.args[0].ty.dtype) == "float32":
            return self.builder_.call_te(self.compute, call.args[0], *self.attributes(call),
                                         primfunc_name_hint=self.name_hint)
        return call


@tvm.transform.module_pass(opt_level=0, name="edgebyoc.FastSigmoid")
def fast_sigmoid(mod, _ctx):
    """``relax.sigmoid`` on float32 as ``1 / (1 + fast_exp(-x))`` (TVM's ``topi.fast_exp``, a
    polynomial LLVM vectorises; ``exp`` itself becomes a scalar libm call per lane): within
    1e-7 absolute and 4e-6 relative of the exact sigmoid over the float32 range
    (``tests/test_host_schedule.py``)."""
    return rewrite_functions(_ThroughTE(mod, "relax.sigmoid", _fast_sigmoid, "sigmoid"))


@tvm.transform.module_pass(opt_level=0, name="edgebyoc.FastSoftmax")
def fast_softmax(mod, _ctx):
    """``relax.nn.softmax`` on float32 through TVM's ``topi.nn.fast_softmax`` (its ``exp`` is
    ``fast_exp``, a polynomial LLVM vectorises; ``exp`` itself is a scalar libm call per
    element: 40 % of Whisper's encoder, attention over 1,500 frames): within 2e-7 absolute
    and 1e-5 relative of the exact softmax; masked (-inf) scores stay exactly 0 and a fully
    masked row NaN (``tests/test_host_schedule.py``). Over the last axis, the row in whole
    vectors and a scalar rest (``softmax.lane_softmax``)."""
    from .softmax import lane_softmax

    return rewrite_functions(_ThroughTE(mod, "relax.nn.softmax", lane_softmax,
                                        "softmax", lambda call: (int(call.attrs.axis),)))


@tvm.transform.module_pass(opt_level=0, name="edgebyoc.FastErf")
def fast_erf(mod, _ctx):
    """``relax.erf`` on float32 through TVM's ``topi.fast_erf`` (a rational polynomial LLVM
    vectorises): within 4e-7 absolute of the exact erf over the float32 range
    (``tests/test_host_schedule.py``)."""
    from tvm import topi

    return rewrite_functions(_ThroughTE(mod, "relax.erf", topi.fast_erf, "erf"))


@tvm.transform.module_pass(opt_level=0, name="edgebyoc.FastTanh")
def fast_tanh(mod, _ctx):
    """``relax.tanh`` on float32 through TVM's ``topi.fast_tanh`` (a rational polynomial LLVM
    vectorises; TVM's own ``tanh`` calls ``exp``, a scalar libm call per element): within 4e-7
    absolute of the exact tanh over the float32 range (``tests/test_host_schedule.py``)."""
    from tvm import topi

    return rewrite_functions(_ThroughTE(mod, "relax.tanh", topi.fast_tanh, "tanh"))


#: the constant exponents ``small_integer_powers`` spells out as products
SMALL_INTEGER_EXPONENTS = (2.0, 3.0)


@relax.expr_functor.mutator
class _SmallIntegerPowers(relax.PyExprMutator):
    def visit_call_(self, call):
        call = super().visit_call_(call)
        if not (isinstance(call.op, tvm.ir.Op) and call.op.name == "relax.power"):
            return call
        base, exponent = call.args
        if isinstance(exponent, relax.Var):
            exponent = self.lookup_binding(exponent) or exponent
        if not isinstance(exponent, tvm.ir.expr.Constant) or exponent.value.numpy().size != 1 \
                or str(base.ty.dtype) not in ("float32", "float64"):
            return call
        value = float(exponent.value.numpy().reshape(()))
        if value not in SMALL_INTEGER_EXPONENTS:
            return call
        product = relax.op.multiply(base, base)
        if value == 3.0:
            product = relax.op.multiply(self.builder_.emit(product), base)
        if list(call.ty.shape) != list(base.ty.shape):  # the exponent broadcast the base
            product = relax.op.broadcast_to(self.builder_.emit(product), call.ty.shape)
        return product


@tvm.transform.module_pass(opt_level=0, name="edgebyoc.SmallIntegerPowers")
def small_integer_powers(mod, _ctx):
    """``relax.power(x, c)`` with a float constant ``c`` of 2 or 3 as ``x * x`` or
    ``x * x * x``: TVM lowers ``power`` to ``pow``, a scalar libm call per element; the
    products fuse and vectorise (each rounds once: within an ulp or two of ``pow``)."""
    return rewrite_functions(_SmallIntegerPowers(mod))


@relax.expr_functor.mutator
class _PadConvChannels(relax.PyExprMutator):
    def __init__(self, mod, padded_extent: Callable[[int], int | None]):
        super().__init__(mod)
        self.padded_extent = padded_extent

    def visit_call_(self, call):
        call = super().visit_call_(call)
        if not (isinstance(call.op, tvm.ir.Op) and call.op.name == "relax.nn.conv2d"):
            return call
        attrs, weight = call.attrs, call.args[1]
        if str(attrs.data_layout) != "NHWC" or str(attrs.kernel_layout) != "HWIO" or \
                int(attrs.groups) != 1 or str(attrs.out_layout) not in ("NHWC", "") or \
                not isinstance(weight, tvm.ir.expr.Constant):
            return call
        value = weight.value.numpy()
        channels = value.shape[-1]
        padded = self.padded_extent(channels)
        if padded is None:
            return call
        import numpy as np

        wider = relax.const(np.pad(value, [(0, 0)] * 3 + [(0, padded - channels)]))
        conv = self.builder_.emit(relax.op.nn.conv2d(
            call.args[0], wider, strides=attrs.strides, padding=attrs.padding,
            dilation=attrs.dilation, groups=1, data_layout="NHWC", kernel_layout="HWIO",
            out_dtype=attrs.out_dtype))
        return relax.op.strided_slice(conv, axes=[3], begin=[0], end=[channels])


def pad_conv_channels(padded_extent: Callable[[int], int | None]) -> tvm.transform.Pass:
    """The module pass padding the output channels of channels-last convolutions with constant
    weights to ``padded_extent(channels)`` channels wherever that is not ``None`` (the host build
    passes ``schedules.padded_channels`` at its SIMD width; see the module docstring); the
    result is sliced back, so nothing else changes."""

    @tvm.transform.module_pass(opt_level=0, name="edgebyoc.PadConvChannels")
    def _pass(mod, _ctx):
        return rewrite_functions(_PadConvChannels(mod, padded_extent))

    return _pass


def unknown_extents(ty) -> bool:
    """Whether ``ty`` is a tensor type of known rank whose extents are not known."""
    return isinstance(ty, relax.TensorType) and ty.ndim >= 0 and \
        not isinstance(ty.shape, relax.ShapeExpr)


@relax.expr_functor.mutator
class _SymbolicExtents(relax.PyExprMutator):
    def visit_var_binding_(self, binding):
        value = self.builder_.normalize(self.visit_expr(binding.value))
        ty = getattr(value, "ty", None)
        dataflow = self.builder_.current_block_is_dataflow()
        output = dataflow and not isinstance(binding.var, relax.DataflowVar)
        name = binding.var.name
        if not unknown_extents(ty):
            new = self.builder_.emit_output(value, name) if output else \
                self.builder_.emit(value, name)
        else:
            dims = [tvm.tirx.Var(f"{name}_d{i}", "int64") for i in range(ty.ndim)]
            new = self.builder_.match_cast(self.builder_.emit(value),
                                           relax.TensorType(dims, ty.dtype), name)
            if output:
                new = self.builder_.emit_output(new, name)
        self.set_var_remap(binding.var, new)

    def visit_call_(self, call):
        call = super().visit_call_(call)
        if not (isinstance(call.op, tvm.ir.Op) and call.op.name == "relax.strided_slice"):
            return call
        shape = getattr(call.args[0].ty, "shape", None)
        axes, ends = call.args[1], call.args[3]
        if not isinstance(shape, relax.ShapeExpr) or not isinstance(axes, relax.Tuple) or \
                not isinstance(ends, relax.Tuple):
            return call
        new_ends = list(ends.fields)
        for i, (axis, end) in enumerate(zip(axes.fields, ends.fields)):
            extent = shape.values[int(axis.value)] if isinstance(axis, tvm.tirx.IntImm) else None
            if isinstance(end, tvm.tirx.IntImm) and end.value >= 1 << 62 and \
                    extent is not None and not isinstance(extent, tvm.tirx.IntImm):
                new_ends[i] = extent  # "to the end" of a symbolic axis
        if new_ends == list(ends.fields):
            return call
        return relax.Call(call.op, [call.args[0], axes, call.args[2], relax.Tuple(new_ends),
                                    *call.args[4:]], call.attrs, call.ty_args)


@tvm.transform.module_pass(opt_level=0, name="edgebyoc.SymbolicExtents")
def symbolic_extents(mod, _ctx):
    """Every tensor of known rank and unknown extents with symbolic ones (see the module
    docstring); a module without such a tensor is returned as it is."""
    unknown = []

    def visit(expr):
        if isinstance(expr, relax.Var) and unknown_extents(getattr(expr, "ty", None)):
            unknown.append(expr)

    for func in mod.functions.values():
        if isinstance(func, relax.Function):
            relax.analysis.post_order_visit(func.body, visit)
    if not unknown:
        return mod
    return rewrite_functions(_SymbolicExtents(mod))


#: the most tensors one ``concat`` kernel takes (``split_wide_concats``)
MAX_CONCAT_INPUTS = 32


@relax.expr_functor.mutator
class _WideConcat(relax.PyExprMutator):
    def visit_call_(self, call):
        call = super().visit_call_(call)
        if not isinstance(call.op, tvm.ir.Op) or call.op.name not in ("relax.concat",
                                                                       "relax.stack") \
                or not isinstance(call.args[0], relax.Tuple) \
                or len(call.args[0].fields) <= MAX_CONCAT_INPUTS:
            return call
        axis = call.attrs.axis
        parts = list(call.args[0].fields)
        if call.op.name == "relax.stack":  # stacks of a few, concatenated along the new axis
            parts = [self._group(relax.op.stack, parts[i:i + MAX_CONCAT_INPUTS], axis, False)
                     for i in range(0, len(parts), MAX_CONCAT_INPUTS)]
        while len(parts) > MAX_CONCAT_INPUTS:
            parts = [self._group(relax.op.concat, parts[i:i + MAX_CONCAT_INPUTS], axis, True)
                     for i in range(0, len(parts), MAX_CONCAT_INPUTS)]
        return relax.op.concat(relax.Tuple(parts), axis)

    def _group(self, operator, parts, axis, single_as_is: bool):
        if len(parts) == 1 and single_as_is:
            return parts[0]
        return self.builder_.emit(operator(relax.Tuple(parts), axis))


@tvm.transform.module_pass(opt_level=0, name="edgebyoc.SplitWideConcats")
def split_wide_concats(mod, _ctx):
    """Every ``concat`` / ``stack`` of more than ``MAX_CONCAT_INPUTS`` tensors as a tree of
    ones of at most that many (see the module docstring); the result is the same tensor."""
    return rewrite_functions(_WideConcat(mod))


@relax.expr_functor.mutator
class _FloorModEdges(relax.PyExprMutator):
    def visit_call_(self, call):
        call = super().visit_call_(call)
        if not isinstance(call.op, tvm.ir.Op) or call.op.name != "relax.floor_mod" \
                or not str(call.args[0].ty.dtype).startswith("float"):
            return call
        x, y = call.args
        dtype = str(x.ty.dtype)
        zero = relax.const(0, dtype)
        result = self.builder_.emit(call)
        both_negative = relax.op.logical_and(relax.op.less(x, zero), relax.op.less(y, zero))
        both_positive = relax.op.logical_and(relax.op.greater_equal(x, zero),
                                             relax.op.greater_equal(y, zero))
        same_sign = relax.op.logical_or(relax.op.logical_or(both_negative, both_positive),
                                        relax.op.equal(x, zero))
        infinite_divisor = relax.op.logical_and(relax.op.isinf(y), relax.op.isfinite(x))
        edge = self.builder_.emit(relax.op.where(same_sign, x, y))
        return relax.op.where(infinite_divisor, edge, result)


@tvm.transform.module_pass(opt_level=0, name="edgebyoc.FloatFloorModEdges")
def float_floor_mod_edges(mod, _ctx):
    """Float ``floor_mod`` as numpy's ``mod`` where the divisor is infinite (see the module
    docstring); unchanged elsewhere."""
    return rewrite_functions(_FloorModEdges(mod))


@relax.expr_functor.mutator
class _InfiniteMaxReductions(relax.PyExprMutator):
    def visit_call_(self, call):
        call = super().visit_call_(call)
        if not isinstance(call.op, tvm.ir.Op) or call.op.name not in ("relax.max", "relax.min") \
                or not str(call.args[0].ty.dtype).startswith("float"):
            return call
        x = call.args[0]
        infinity = relax.const(float("-inf") if call.op.name == "relax.max" else float("inf"),
                               str(x.ty.dtype))
        result = self.builder_.emit(call)
        # every reduced element infinite: min over (x == the infinity), as 0 / 1, is 1
        hits = relax.op.astype(relax.op.equal(x, infinity), "int8")
        everywhere = self.builder_.emit(relax.op.min(hits, call.attrs.axis,
                                                     call.attrs.keepdims))
        return relax.op.where(relax.op.equal(everywhere, relax.const(1, "int8")), infinity,
                              result)


@tvm.transform.module_pass(opt_level=0, name="edgebyoc.InfiniteMaxReductions")
def infinite_max_reductions(mod, _ctx):
    """Float ``max`` / ``min`` reductions give -inf / +inf where every reduced element is it
    (see the module docstring); unchanged elsewhere."""
    return rewrite_functions(_InfiniteMaxReductions(mod))


def live_taps(size: int, pad_before: int, stride: int, dilation: int, kernel: int,
              outputs: int) -> tuple[int, int]:
    """The first and last kernel tap along one axis that reads a real input element for some
    output (the others read padding only): tap ``t`` of output ``o`` reads element
    ``o * stride + t * dilation - pad_before`` of ``size``.

    Example (a 3-tap kernel dilated by 36 over 16 elements padded by 36)::

        >>> live_taps(16, 36, 1, 36, 3, 16), live_taps(16, 12, 1, 12, 3, 16)
        ((1, 1), (0, 2))
    """
    live = [t for t in range(kernel)
            if t * dilation - pad_before + (outputs - 1) * stride >= 0
            and t * dilation - pad_before < size]
    return (live[0], live[-1]) if live else (0, kernel - 1)


def _rewritten_conv2d(call, rewrite: Callable):
    """``rewrite(call)`` for a ``relax.nn.conv2d`` call when it gives a replacement, else the
    call itself (the ``visit_call_`` of the convolution rewrites below)."""
    if not (isinstance(call.op, tvm.ir.Op) and call.op.name == "relax.nn.conv2d"):
        return call
    replacement = rewrite(call)
    return call if replacement is None else replacement


def _constant_weights_and_shapes(call):
    """(weights as numpy, input shape, output shape) of a convolution with constant weights
    and static extents, else ``None``."""
    weight = call.args[1]
    if not isinstance(weight, tvm.ir.expr.Constant):
        return None
    try:
        in_shape = [int(d) for d in call.args[0].ty.shape.values]
        out_shape = [int(d) for d in call.ty.shape.values]
    except (AttributeError, TypeError):
        return None  # symbolic extents
    return weight.value.numpy(), in_shape, out_shape


@relax.expr_functor.mutator
class _DeadConvTaps(relax.PyExprMutator):
    def visit_call_(self, call):
        return _rewritten_conv2d(super().visit_call_(call), self._trimmed)

    def _trimmed(self, call):
        import numpy as np

        attrs, data = call.attrs, call.args[0]
        data_layout, kernel_layout = str(attrs.data_layout), str(attrs.kernel_layout)
        known = _constant_weights_and_shapes(call)
        if known is None or \
                sorted(data_layout) != sorted("NCHW") or sorted(kernel_layout) != sorted("OIHW"):
            return None
        value, in_shape, out_shape = known
        padding = [int(p) for p in attrs.padding]  # top, left, bottom, right
        cuts, new_padding = [], list(padding)
        for axis, name in enumerate("HW"):
            kernel = value.shape[kernel_layout.index(name)]
            stride, dilation = int(attrs.strides[axis]), int(attrs.dilation[axis])
            size = in_shape[data_layout.index(name)]
            outputs = out_shape[str(attrs.out_layout or data_layout).index(name)]
            first, last = live_taps(size, padding[axis], stride, dilation, kernel, outputs)
            before = padding[axis] - first * dilation
            after = (outputs - 1) * stride + (last - first) * dilation + 1 - size - before
            if before < 0 or after < 0:
                return None  # the cut would need a crop of the input: left as it is
            cuts.append((first, last + 1))
            new_padding[axis], new_padding[axis + 2] = before, after
        if new_padding == padding:
            return None
        index = [slice(None)] * value.ndim
        for (start, stop), name in zip(cuts, "HW"):
            index[kernel_layout.index(name)] = slice(start, stop)
        dropped = value.copy()
        dropped[tuple(index)] = 0
        if not np.isfinite(dropped).all():
            return None  # an infinite weight times a padding zero is NaN, not 0
        return relax.op.nn.conv2d(
            data, relax.const(np.ascontiguousarray(value[tuple(index)])), strides=attrs.strides,
            padding=new_padding, dilation=attrs.dilation, groups=attrs.groups,
            data_layout=data_layout, kernel_layout=kernel_layout,
            out_layout=str(attrs.out_layout or data_layout), out_dtype=attrs.out_dtype)


@tvm.transform.module_pass(opt_level=0, name="edgebyoc.DeadConvTaps")
def dead_conv_taps(mod, _ctx):
    """Convolutions with constant weights without the kernel taps that read only padding
    (see the module docstring); every result is the same."""
    return rewrite_functions(_DeadConvTaps(mod))


#: A dilated convolution whose taps read real input for less than this fraction of their
#: (tap, output) pairs is split into one 1x1 convolution per tap (``border_tap_convolutions``)
MAX_LIVE_TAP_FRACTION = 0.5


def tap_windows(size: int, pad_before: int, dilation: int, kernel: int,
                outputs: int) -> list[tuple[int, int] | None]:
    """Per kernel tap along one axis of a stride-1 convolution, the outputs ``[first, end)``
    for which it reads a real input element (tap ``t`` of output ``o`` reads element
    ``o + t * dilation - pad_before``), ``None`` for a tap that reads only padding.

    Example (DeepLabV3's ASPP branch: 3 taps dilated by 12 over 16 elements padded by 12)::

        >>> tap_windows(16, 12, 12, 3, 16)
        [(12, 16), (0, 16), (0, 4)]
    """
    windows = []
    for tap in range(kernel):
        offset = tap * dilation - pad_before
        first, end = max(0, -offset), min(outputs, size - offset)
        windows.append((first, end) if end > first else None)
    return windows


@relax.expr_functor.mutator
class _BorderTapConvolutions(relax.PyExprMutator):
    def visit_call_(self, call):
        return _rewritten_conv2d(super().visit_call_(call), self._split)

    def _split(self, call):
        import numpy as np

        attrs = call.attrs
        known = _constant_weights_and_shapes(call)
        if known is None or int(attrs.groups) != 1 or \
                str(attrs.data_layout) != "NCHW" or str(attrs.kernel_layout) != "OIHW" or \
                str(attrs.out_layout or "NCHW") != "NCHW" or \
                any(int(stride) != 1 for stride in attrs.strides):
            return None
        value, in_shape, out_shape = known
        padding = [int(p) for p in attrs.padding]  # top, left, bottom, right
        windows = [tap_windows(in_shape[2 + axis], padding[axis], int(attrs.dilation[axis]),
                               value.shape[2 + axis], out_shape[2 + axis]) for axis in (0, 1)]
        live = sum((wy[1] - wy[0]) * (wx[1] - wx[0])
                   for wy in windows[0] if wy for wx in windows[1] if wx)
        if value.shape[2] * value.shape[3] < 2 or not np.isfinite(value).all() or not live or \
                live >= MAX_LIVE_TAP_FRACTION * value.shape[2] * value.shape[3] * \
                out_shape[2] * out_shape[3]:
            return None
        parts = []
        for ky, wy in enumerate(windows[0]):
            for kx, wx in enumerate(windows[1]):
                if wy is None or wx is None:
                    continue
                parts.append(self._tap(call, value, (ky, kx), (wy, wx), padding, out_shape))
        parts.sort(key=lambda part: -part[0])  # the widest window first: the others add to it
        total = parts[0][1]
        for _, part in parts[1:]:
            total = self.builder_.emit(relax.op.add(total, part))
        return total

    def _tap(self, call, value, taps, windows, padding, out_shape):
        """(outputs, the tap's 1x1 convolution over the input its window reads, zero-padded
        to the whole output)."""
        attrs, data = call.attrs, call.args[0]
        (first_y, end_y), (first_x, end_x) = windows
        offset_y = taps[0] * int(attrs.dilation[0]) - padding[0]
        offset_x = taps[1] * int(attrs.dilation[1]) - padding[1]
        piece = self.builder_.emit(relax.op.strided_slice(
            data, axes=[2, 3], begin=[first_y + offset_y, first_x + offset_x],
            end=[end_y + offset_y, end_x + offset_x]))
        tap_weight = value[:, :, taps[0]:taps[0] + 1, taps[1]:taps[1] + 1].copy()
        part = self.builder_.emit(relax.op.nn.conv2d(
            piece, relax.const(tap_weight), out_dtype=attrs.out_dtype))
        outputs = (end_y - first_y) * (end_x - first_x)
        if outputs < out_shape[2] * out_shape[3]:
            part = self.builder_.emit(relax.op.nn.pad(part, [
                0, 0, 0, 0, first_y, out_shape[2] - end_y, first_x, out_shape[3] - end_x]))
        return outputs, part


@tvm.transform.module_pass(opt_level=0, name="edgebyoc.BorderTapConvolutions")
def border_tap_convolutions(mod, _ctx):
    """Dilated convolutions whose taps mostly read padding as a sum of one 1x1 convolution
    per live tap over the outputs it reaches (see the module docstring)."""
    mod["main"] = _BorderTapConvolutions(mod).visit_expr(mod["main"])
    return mod
