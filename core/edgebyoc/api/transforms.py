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

from ..rewrites import scalar_min_max

__all__ = ["scalar_min_max"]
