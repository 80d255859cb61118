"""The BYOC JSON graph of a region (BYOC paper, section 3.3, option 1).

``region_graph(region)`` translates an offloaded region into the standard graph form a plugin's
runtime interprets::

    {"nodes": [{"op": "input" | "const" | <kernel>, "name": ..., "inputs": [[node, 0, 0], ...],
                "attrs": {...}}, ...],
     "arg_nodes": [indices of input / const nodes, in the region's parameter order],
     "heads": [[node, 0, 0], ...]}

Parameter nodes carry ``shape`` and ``dtype``; a kernel node is one matched pattern (``op`` is
its full name ``<target>.<module>.<pattern>``) and carries ``shape``, ``dtype`` and ``body``:
the pattern's operators in order, each ``{"op", "args", "attrs"}`` where an argument is
``["param", i]`` (the kernel's i-th input), ``["op", j]`` (the j-th operator's result) or
``["scalar", value]``. Constants are not in the graph: they arrive at run time as the region's
constant parameters (and, once, through the loader's ``constants`` mapping).
"""

from __future__ import annotations

import json
from typing import Any

import tvm
from tvm import relax

from ..partition.partitioner import attrs_dict, shape_dtype
from ..target import Region


def _composite_name(function) -> str:
    name = str(function.attrs["Composite"])
    return name.split(".", 1)[1]  # drop the partitioner's region prefix


def _scalar(expr) -> Any:
    value = expr.value
    if hasattr(value, "numpy"):
        value = value.numpy()
    try:
        return value.item() if hasattr(value, "item") else float(value)
    except (TypeError, ValueError):
        return str(value)


def _body(function) -> list[dict[str, Any]]:
    params = {p: i for i, p in enumerate(function.params)}
    results: dict[Any, int] = {}
    ops = []
    for block in function.body.blocks:
        for binding in block.bindings:
            value = binding.value
            if not isinstance(value, relax.Call):
                if isinstance(value, relax.Var) and value in results:
                    results[binding.var] = results[value]
                continue
            args = []
            for arg in value.args:
                if isinstance(arg, relax.Var) and arg in params:
                    args.append(["param", params[arg]])
                elif isinstance(arg, relax.Var) and arg in results:
                    args.append(["op", results[arg]])
                elif isinstance(arg, tvm.ir.expr.Constant):
                    args.append(["scalar", _scalar(arg)])
                elif isinstance(arg, relax.ShapeExpr):
                    args.append(["shape", [int(d) for d in arg.values]])
                else:
                    args.append(["unknown", str(arg)])
            results[binding.var] = len(ops)
            ops.append({"op": value.op.name if isinstance(value.op, tvm.ir.Op) else str(value.op),
                        "args": args, "attrs": attrs_dict(value.attrs)})
    return ops


def region_graph(region: Region) -> dict[str, Any]:
    """The JSON-ready graph of ``region`` (see the module docstring)."""
    function = region.function
    nodes: list[dict[str, Any]] = []
    entry: dict[Any, int] = {}
    for index, param in enumerate(function.params):
        shape, dtype = shape_dtype(param.ty)
        entry[param] = len(nodes)
        nodes.append({"op": "const" if index in region.constant_params else "input",
                      "name": param.name, "inputs": [],
                      "attrs": {"shape": list(shape), "dtype": dtype}})
    arg_nodes = list(range(len(nodes)))
    local: dict[Any, Any] = {}
    for block in function.body.blocks:
        for binding in block.bindings:
            value = binding.value
            if isinstance(value, relax.Function):
                local[binding.var] = value
                continue
            if isinstance(value, relax.Var) and value in entry:
                entry[binding.var] = entry[value]
                continue
            if not isinstance(value, relax.Call):
                raise ValueError(f"region {region.symbol}: cannot serialise {type(value).__name__}")
            callee = local.get(value.op) if isinstance(value.op, relax.Var) else None
            if callee is None and isinstance(value.op, relax.Function):
                callee = value.op
            shape, dtype = shape_dtype(binding.var.ty)
            tensor_args = [a for a in value.args if isinstance(a, relax.Var)]
            node = {"name": binding.var.name,
                    "inputs": [[entry[a], 0, 0] for a in tensor_args],
                    "attrs": {"shape": list(shape), "dtype": dtype}}
            if callee is not None:
                node["op"] = _composite_name(callee)
                node["attrs"]["body"] = _body(callee)
            else:  # an operator outside patterns, e.g. the (de)quantize of partial quantization
                node["op"] = value.op.name
                args = [["param", tensor_args.index(a)] if isinstance(a, relax.Var)
                        else ["scalar", _scalar(a)] if isinstance(a, tvm.ir.expr.Constant)
                        else ["unknown", str(a)] for a in value.args]
                node["attrs"]["body"] = [{"op": value.op.name, "args": args,
                                          "attrs": attrs_dict(value.attrs)}]
            entry[binding.var] = len(nodes)
            nodes.append(node)
    ret = function.body.body
    heads = [[entry[f], 0, 0] for f in (ret.fields if isinstance(ret, relax.Tuple) else [ret])]
    return {"nodes": nodes, "arg_nodes": arg_nodes, "heads": heads}


def region_json(region: Region) -> str:
    """``region_graph`` as a JSON string (the payload of a JSON_GRAPH ``CodegenOutput``)."""
    return json.dumps(region_graph(region))
