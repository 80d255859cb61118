"""Plain-Python views of Relax IR: static shapes, dtypes, sizes, attributes, MAC counts.

The lowest layer of the core: every stage reads operators through these helpers, and
``edgebyoc.api.regions`` gives them to plugins.
"""

from __future__ import annotations

from math import prod
from typing import Any

import tvm


def shape_dtype(ty) -> tuple[tuple[int, ...], str]:
    """(static shape, dtype) of a tensor type; unknown dimensions are -1."""
    shape = getattr(ty, "shape", None)
    dims: tuple[int, ...] = ()
    if shape is not None and hasattr(shape, "values"):
        dims = tuple(int(d.value) if hasattr(d, "value") else -1 for d in shape.values)
    return dims, str(getattr(ty, "dtype", ""))


def nbytes(ty) -> int:
    """Bytes of a tensor type with a static shape (0 when unknown)."""
    dims, dtype = shape_dtype(ty)
    if not dtype or any(d < 0 for d in dims):
        return 0
    return prod(dims) * tvm.DataType(dtype).bits // 8


def attrs_dict(attrs) -> dict[str, Any]:
    """An operator's attributes as plain Python values (lists of ints, strings, numbers)."""
    if attrs is None:
        return {}
    result = {}
    for key in dir(attrs):
        if key.startswith("_") or key in ("id_", "same_as", "is_"):
            continue
        value = getattr(attrs, key)
        if callable(value):
            continue
        try:
            result[key] = [int(v) if hasattr(v, "__int__") else str(v) for v in value] \
                if not isinstance(value, (str, int, float)) else value
        except TypeError:
            result[key] = str(value)
    return result


def static_shape(ty) -> list[int] | None:
    """The static shape of a tensor type as a list of ints, ``None`` when unknown."""
    shape = getattr(ty, "shape", None)
    if shape is None or not hasattr(shape, "values"):
        return None
    try:
        return [int(d) for d in shape.values]
    except TypeError:
        return None


def operator_macs(call) -> int:
    """Multiply-accumulates of one Relax operator call (0 for MAC-free operators)."""
    name = call.op.name
    out = static_shape(call.ty)
    if out is None:
        return 0
    if name in ("relax.nn.conv1d", "relax.nn.conv2d", "relax.nn.conv3d"):
        weight = static_shape(call.args[1].ty)
        layout = str(call.attrs.kernel_layout)
        if weight is None:
            return 0
        # per output element: input channels of its group times the kernel window
        reduce = prod(d for axis, d in zip(layout, weight) if axis != "O")
        return prod(out) * reduce
    if name in ("relax.nn.conv2d_transpose", "relax.nn.conv1d_transpose"):
        data, weight = static_shape(call.args[0].ty), static_shape(call.args[1].ty)
        if data is None or weight is None:
            return 0
        layout = str(call.attrs.kernel_layout)
        per_input = prod(d for axis, d in zip(layout, weight) if axis != "I")
        return prod(data) * per_input // max(1, int(call.attrs.groups))
    if name == "relax.matmul":
        lhs = static_shape(call.args[0].ty)
        return prod(out) * (lhs[-1] if lhs else 1)
    return 0


def operator_table(mod) -> list[dict[str, Any]]:
    """One row per operator binding of ``main``, in program order: op, output shape, MACs."""
    import tvm
    from tvm import relax

    rows = []
    for block in mod["main"].body.blocks:
        for binding in block.bindings:
            value = binding.value
            if isinstance(value, relax.Call) and isinstance(value.op, tvm.ir.Op):
                rows.append({"index": len(rows), "op": value.op.name.replace("relax.", ""),
                             "shape": static_shape(value.ty), "macs": int(operator_macs(value))})
                if value.op.name == "relax.call_tir":  # the kernel it calls
                    rows[-1]["callee"] = value.args[0].name_hint
    return rows
