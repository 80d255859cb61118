"""Constant folding with numpy before TVM's ``FoldConstant``, for the calls numpy computes
exactly as TVM's kernels would.

TVM's ``relax.transform.FoldConstant`` legalizes each call whose arguments are all constants,
builds the kernel with LLVM and runs it: about 27 ms a call on a 2-core Zen 3. The importers
leave hundreds of such calls in a CNN (the weights transposed by the layout conversion, the
``isnan`` / ``where`` guards TVM's ONNX ``Clip`` puts around constant bounds): MobileNetV2 at
96x96 built 296 kernels for them, a third of its compile. ``fold_constants`` first computes
the calls whose numpy result is bit for bit what the kernel gives:

- data movement (``permute_dims``, ``reshape`` and the other views, ``broadcast_to``,
  ``concat``);
- comparisons, ``isnan`` / ``isinf``, logical operators and ``where``;
- ``add``, ``subtract``, ``multiply``, ``divide``, ``negative``, ``abs`` and ``sqrt`` on
  floating-point tensors of one dtype (IEEE 754 operations, correctly rounded in both), and
  ``maximum`` / ``minimum`` of integers, or of floats without a NaN or a zero (where numpy
  and LLVM's ``maxnum`` may disagree: which NaN, which signed zero);
- ``astype`` between floats, from an integer to a float, or between integers (wrapping in
  both); never from a float to an integer (out-of-range values are undefined in LLVM).

then leaves everything else (integer division, ``exp``, ``power``, ...) to ``FoldConstant``.
A call is folded only when its static result shape and dtype are those of the numpy value.

Example::

    >>> import numpy as np, tvm
    >>> from tvm import relax
    >>> x = relax.Var("x", relax.TensorType((2, 3), "float32"))
    >>> bb = relax.BlockBuilder()
    >>> with bb.function("main", [x]):
    ...     w = relax.const(np.arange(6, dtype="float32").reshape(3, 2))
    ...     y = bb.emit(relax.op.add(x, relax.op.permute_dims(w)))
    ...     _ = bb.emit_func_output(y)
    >>> folded = fold_constants(bb.get())
    >>> "permute_dims" in folded.script()
    False
"""

from __future__ import annotations

import numpy as np
import tvm
from tvm import relax

from .relax_info import shape_dtype

#: element-wise operators numpy computes exactly as TVM's kernels, for every dtype
_EXACT = {
    "relax.isnan": np.isnan, "relax.isinf": np.isinf,
    "relax.logical_not": np.logical_not, "relax.logical_and": np.logical_and,
    "relax.logical_or": np.logical_or, "relax.equal": np.equal,
    "relax.not_equal": np.not_equal, "relax.less": np.less, "relax.less_equal": np.less_equal,
    "relax.greater": np.greater, "relax.greater_equal": np.greater_equal,
    "relax.where": np.where,
}
#: IEEE 754 operations: exact on floating-point operands of one dtype only (integer division
#: rounds differently, numpy promotes mixed dtypes)
_FLOAT_ONLY = {
    "relax.add": np.add, "relax.subtract": np.subtract, "relax.multiply": np.multiply,
    "relax.divide": np.divide, "relax.negative": np.negative, "relax.abs": np.abs,
    "relax.sqrt": np.sqrt,
}
#: the views: the result is the operand's elements in order, in the result's shape
_VIEWS = ("relax.reshape", "relax.expand_dims", "relax.squeeze", "relax.flatten")


def _static_result(call) -> tuple[tuple[int, ...], str] | None:
    """(shape, dtype) of ``call``'s tensor result when both are static, else ``None``."""
    if not isinstance(call.ty, relax.TensorType):
        return None
    shape, dtype = shape_dtype(call.ty)
    if not dtype or getattr(call.ty, "shape", None) is None or any(d < 0 for d in shape):
        return None
    return shape, dtype


def _astype(value: np.ndarray, dtype: str) -> np.ndarray | None:
    source, target = value.dtype, np.dtype(dtype)
    if source.kind == "f" and target.kind != "f":
        return None  # out-of-range floats to integers: undefined in LLVM
    if source.kind not in "fiub" or target.kind not in "fiub":
        return None
    return value.astype(target)


def _compute(name: str, call, values: list[np.ndarray], result) -> np.ndarray | None:
    """The numpy value of the call ``name`` on constant ``values``, or ``None`` when numpy
    would not give TVM's bits."""
    shape, dtype = result
    with np.errstate(all="ignore"):
        if name in _EXACT:
            return _EXACT[name](*values)
        if name in _FLOAT_ONLY:
            kinds = {v.dtype for v in values}
            if len(kinds) != 1 or next(iter(kinds)).kind != "f":
                return None
            return _FLOAT_ONLY[name](*values)
        if name in ("relax.maximum", "relax.minimum"):
            if len({v.dtype for v in values}) != 1 or any(  # NaN, or zeros of either sign
                    v.dtype.kind == "f" and (np.isnan(v).any() or (v == 0).any())
                    for v in values):
                return None
            return (np.maximum if name == "relax.maximum" else np.minimum)(*values)
        if name == "relax.permute_dims":
            axes = call.attrs.axes
            return np.transpose(values[0], None if axes is None else [int(a) for a in axes])
        if name in _VIEWS:
            return values[0].reshape(shape)
        if name == "relax.broadcast_to":
            return np.broadcast_to(values[0], shape)
        if name == "relax.astype":
            return _astype(values[0], dtype)
        if name == "relax.concat" and call.attrs.axis is not None:
            return np.concatenate(values, axis=int(call.attrs.axis))
    return None


def _tensor_constant(expr) -> bool:
    """Whether ``expr`` is a tensor constant (not a scalar immediate, which TVM 0.27 also
    derives from ``Constant``)."""
    return isinstance(expr, tvm.ir.expr.Constant) and hasattr(expr.value, "numpy")


@relax.expr_functor.mutator
class _NumpyFolder(relax.PyExprMutator):
    def _bound_constant(self, var):
        """The constant ``var`` is bound to, else ``None``."""
        value = self.lookup_binding(var)
        return value if _tensor_constant(value) else None

    # a variable bound to a constant reads as the constant, as TVM's FoldConstant does (the
    # rewrites after it match constants in the calls' arguments)
    def visit_var_(self, var):
        var = super().visit_var_(var)
        return self._bound_constant(var) or var

    def visit_dataflow_var_(self, var):
        var = super().visit_dataflow_var_(var)
        return self._bound_constant(var) or var

    def _constant(self, expr) -> np.ndarray | None:
        if isinstance(expr, relax.Var):
            expr = self.lookup_binding(expr)
        return expr.value.numpy() if _tensor_constant(expr) else None

    def _operands(self, call) -> list[np.ndarray] | None:
        """The constant tensor operands of ``call`` (a tuple's fields, for ``concat``),
        ``None`` if one is not a constant; a shape operand (``reshape``'s) is left out."""
        args = call.args[0].fields if call.op.name == "relax.concat" and \
            isinstance(call.args[0], relax.Tuple) else call.args
        values = []
        for arg in args:
            if isinstance(arg, relax.ShapeExpr):
                continue
            value = self._constant(arg)
            if value is None:
                return None
            values.append(value)
        return values or None

    def visit_call_(self, call):
        call = super().visit_call_(call)
        if not isinstance(call.op, tvm.ir.Op):
            return call
        result = _static_result(call)
        values = self._operands(call) if result is not None else None
        if values is None:
            return call
        value = _compute(call.op.name, call, values, result)
        if value is None or tuple(value.shape) != result[0] or str(value.dtype) != result[1]:
            return call
        return relax.const(np.array(value, order="C"), result[1])  # a 0-d value stays 0-d


def fold_numpy_constants(mod: tvm.IRModule) -> tvm.IRModule:
    """``mod`` with the calls on constants that numpy computes exactly replaced by their
    values (see the module docstring); the rest untouched."""
    folder = _NumpyFolder(mod)
    for gv, func in list(mod.functions_items()):
        if isinstance(func, relax.Function):
            folder.builder_.update_func(gv, folder.visit_expr(func))
    return folder.builder_.get()


def fold_constants(mod: tvm.IRModule) -> tvm.IRModule:
    """Every call on constants folded: by numpy where it is exact, then by TVM's
    ``FoldConstant`` (one LLVM kernel per call left)."""
    return relax.transform.FoldConstant()(fold_numpy_constants(mod))
