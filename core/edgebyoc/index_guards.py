"""Index operands checked before the kernels that use them read or write memory.

TVM's kernels for ``take`` (ONNX ``Gather``), ``gather_elements``, ``gather_nd``,
``scatter_elements``, ``scatter_nd``, ``index_tensor`` and ``index_put`` use their index
operands as addresses without checking them (``take``'s default mode is ``"fast"``): an index
out of its axis reads or writes outside the tensor. Two passes make every such operator safe
(computed shapes and indices are constants by the time they run):

- ``check_constant_indices`` (the prepare stage, after constant folding): a **constant** index
  operand outside ``[-extent, extent)`` of the axis it indexes is an ``UnsupportedModelError``
  naming the operator, the value and the axis (onnxruntime refuses such models too);
- ``guard_runtime_indices`` (after partitioning, on the host's functions; a region's operators
  are its plugin's): an index operand **computed at run time** (a model input, or derived from
  one) gets a check right before the operator: its smallest and largest value against the
  axis (for ``gather_nd`` and ``scatter_nd`` each position of the index tuple against its own
  axis), then ``assert_op``, which ends the run before the kernel runs.

Example: ``take(x: [4, 3], i: [2] int64, axis=0)`` with ``i`` an input becomes::

    hi = max(i - 4); lo = min(i + 4)
    assert_op(hi < 0 and lo >= 0, "... reads an index outside [-4, 4)")
    y = take(x, i, axis=0)
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import tvm
from tvm import relax

from .errors import UnsupportedModelError

__all__ = ["GUARDED_OPERATORS", "check_constant_indices", "guard_runtime_indices"]

#: the operators whose index operands address memory, and the ONNX operators they come from
GUARDED_OPERATORS = {
    "relax.take": "Gather",
    "relax.gather_elements": "GatherElements",
    "relax.gather_nd": "GatherND",
    "relax.scatter_elements": "ScatterElements",
    "relax.scatter_nd": "ScatterND",
    "relax.index_tensor": "advanced indexing",
    "relax.index_put": "index_put",
}


def _static_shape(expr) -> list[int] | None:
    shape = getattr(getattr(expr, "ty", None), "shape", None)
    if shape is None or not hasattr(shape, "values"):
        return None
    dims = []
    for dim in shape.values:
        if not hasattr(dim, "value"):
            return None
        dims.append(int(dim.value))
    return dims


def _bounds(call) -> list[tuple[Any, list[int]]]:
    """(index operand, extents it indexes) of a guarded call: one extent for an operand whose
    every value indexes one axis, one per position of the last axis for ``*_nd`` operators."""
    name = call.op.name
    data = _static_shape(call.args[0])
    if data is None:
        return []
    if name == "relax.take":
        if str(getattr(call.attrs, "mode", "fast")) != "fast":
            return []  # "clip" and "wrap" stay inside the tensor by themselves
        axis = call.attrs.axis
        extent = math.prod(data) if axis is None else data[int(axis)]
        return [(call.args[1], [extent])]
    if name in ("relax.gather_elements", "relax.scatter_elements"):
        return [(call.args[1], [data[int(call.attrs.axis)]])]
    if name in ("relax.gather_nd", "relax.scatter_nd"):
        indices = _static_shape(call.args[1])
        if not indices:
            return []
        first = int(call.attrs.batch_dims) if name == "relax.gather_nd" else 0
        return [(call.args[1], data[first:first + indices[-1]])]
    if name in ("relax.index_tensor", "relax.index_put"):
        operands = call.args[1].fields if isinstance(call.args[1], relax.Tuple) else []
        return [(operand, [data[axis]]) for axis, operand in enumerate(operands)
                if axis < len(data)]
    return []


def _constant_value(expr) -> np.ndarray | None:
    if isinstance(expr, tvm.ir.expr.Constant):
        return expr.value.numpy()
    return None


@relax.expr_functor.mutator
class _IndexGuard(relax.PyExprMutator):
    """Checks constant index operands; emits a run-time check before the others."""

    def __init__(self, mod=None):
        super().__init__(mod)
        self.guards = 0

    def visit_call_(self, call):
        call = super().visit_call_(call)
        if not isinstance(call.op, tvm.ir.Op) or call.op.name not in GUARDED_OPERATORS:
            return call
        for operand, extents in _bounds(call):
            dtype = str(getattr(operand.ty, "dtype", ""))
            if extents and dtype.startswith(("int", "uint")) \
                    and _constant_value(operand) is None:
                self._emit_check(call, operand, extents, dtype)
        return call

    def _emit_check(self, call, operand, extents: list[int], dtype: str) -> None:
        limit = relax.const(np.asarray(extents if len(extents) > 1 else extents[0],
                                       dtype=dtype), dtype)
        emit = self.builder_.emit
        high = emit(relax.op.max(relax.op.subtract(operand, limit)))
        low = emit(relax.op.min(relax.op.add(operand, limit)))
        inside = emit(relax.op.logical_and(relax.op.less(high, relax.const(0, dtype)),
                                           relax.op.greater_equal(low, relax.const(0, dtype))))
        shown = extents[0] if len(extents) == 1 else extents
        emit(relax.op.assert_op(inside, [], f"{GUARDED_OPERATORS[call.op.name]} "
                                            f"({call.op.name}): an index given at run time is "
                                            f"outside the axis it indexes (extent {shown}); "
                                            f"refusing to read or write outside the tensor"))
        self.guards += 1


def _check_constant(source: str, call, values: np.ndarray, extents: list[int]) -> None:
    if not values.size:
        return
    if len(extents) > 1:
        values = values.reshape(-1, len(extents))
    limit = np.asarray(extents, dtype=np.int64)
    wide = values.astype(np.int64)
    bad = (wide < -limit) | (wide >= limit)
    if bad.any():
        position = np.argwhere(bad)[0]
        value = int(wide[tuple(position)])
        extent = int(limit[position[-1]] if len(extents) > 1 else limit[0])
        raise UnsupportedModelError(
            f"{source}: {GUARDED_OPERATORS[call.op.name]} ({call.op.name}) reads or writes "
            f"index {value} of an axis of {extent}; the model is invalid")


def _guarded_calls(function) -> list:
    found = []

    def visit(node):
        if isinstance(node, relax.Call) and isinstance(node.op, tvm.ir.Op) \
                and node.op.name in GUARDED_OPERATORS:
            found.append(node)

    relax.analysis.post_order_visit(function.body, visit)
    return found


def check_constant_indices(mod, source: str = "model") -> None:
    """``UnsupportedModelError`` for a constant index operand of ``GUARDED_OPERATORS`` outside
    its axis (the prepare stage, after constant folding)."""
    for function in mod.functions.values():
        if not isinstance(function, relax.Function):
            continue
        for call in _guarded_calls(function):
            for operand, extents in _bounds(call):
                values = _constant_value(operand)
                if values is not None and extents:
                    _check_constant(source, call, values, extents)


def _host_function(function) -> bool:
    """A Relax function run by the host: not a region handed to a plugin, not a pattern."""
    attrs = function.attrs or {}
    return isinstance(function, relax.Function) and not any(
        key in attrs for key in ("Codegen", "Composite", "Primitive"))


def guard_runtime_indices(mod):
    """``mod`` with a check before every host-side ``GUARDED_OPERATORS`` call whose index
    operand is computed at run time (after partitioning: a region's operators are its
    plugin's; the pattern matcher does not see the checks)."""
    functions = {gv: f for gv, f in mod.functions.items() if _host_function(f)}
    wanted = [gv for gv, f in functions.items() if any(
        _constant_value(operand) is None and extents
        for call in _guarded_calls(f) for operand, extents in _bounds(call))]
    if not wanted:
        return mod
    updated = tvm.IRModule(dict(mod.functions), attrs=mod.attrs)
    for gv in wanted:
        # checks are impure: the function leaves dataflow form for them, and gets it back
        # around them (each function alone: the regions' functions stay as they are)
        alone = tvm.IRModule({gv: functions[gv]})
        flat = relax.transform.ToNonDataflow()(alone)
        guard = _IndexGuard(flat)
        alone = tvm.IRModule({gv: guard.visit_expr(flat[gv])})
        updated[gv] = relax.transform.ConvertToDataflow()(alone)[gv]
    return updated
