"""Relax passes a plugin may return from ``edgebyoc_transforms`` (they run on ``main``).

- ``scalar_min_max``: ``call_tir(maximum | minimum, (x, scalar constant))``, the form TVM's
  ONNX importer gives ``Clip`` / ReLU6 with constant bounds, back as ``relax.maximum`` /
  ``relax.minimum`` calls, so patterns can match a clamp (``is_op("relax.minimum")(
  is_op("relax.maximum")(x, is_const()), is_const())``).

Example (``Clip(x, 0, 6)`` as TVM's ONNX importer and constant folding write it, then
after the pass)::

    >>> from onnx import TensorProto, helper
    >>> from tvm import relax
    >>> from tvm.relax.frontend.onnx import from_onnx
    >>> graph = helper.make_graph(
    ...     [helper.make_node("Clip", ["x", "low", "high"], ["y"])], "clip",
    ...     [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
    ...     [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])],
    ...     [helper.make_tensor("low", TensorProto.FLOAT, [], [0.0]),
    ...      helper.make_tensor("high", TensorProto.FLOAT, [], [6.0])])
    >>> mod = relax.transform.FoldConstant()(from_onnx(helper.make_model(graph)))
    >>> def ops(mod):
    ...     return [b.value.op.name for b in mod["main"].body.blocks[0].bindings
    ...             if isinstance(b.value, relax.Call)]
    >>> ops(mod)
    ['relax.call_tir', 'relax.call_tir']
    >>> ops(scalar_min_max(mod))
    ['relax.maximum', 'relax.minimum']
"""

from __future__ import annotations

import re

import tvm
from tvm import relax

__all__ = ["scalar_min_max"]


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
