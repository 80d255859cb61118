"""The BYOC JSON graph of a region (BYOC paper, section 3.3, option 1).

``region_graph(region)`` translates an offloaded region into the standard graph form a plugin's
runtime interprets::

    {"nodes": [{"op": "input" | "const" | <kernel>, "name": ..., "inputs": [[node, k, 0], ...],
                "attrs": {...}}, ...],
     "arg_nodes": [indices of input / const nodes, in the region's parameter order],
     "heads": [[node, k, 0], ...]}

A reference ``[node, k, 0]`` names output ``k`` of a node (0 but for nodes with a tuple
result, e.g. ``split``, whose attrs list ``outputs``: shape and dtype of each).

Parameter nodes carry ``shape`` and ``dtype``; a kernel node is one matched pattern (``op`` is
its full name ``<target>.<module>.<pattern>``) and carries ``shape``, ``dtype`` and ``body``:
the pattern's operators in order, each ``{"op", "args", "attrs"}`` where an argument is
``["param", i]`` (the kernel's i-th input), ``["op", j]`` (the j-th operator's result),
``["scalar", value]`` (a scalar constant, an integer, float or string argument), ``["shape",
[dims]]`` or ``["tuple", [arguments]]`` (e.g. the axes / begins / ends of ``strided_slice``).
Constants are not in the graph: they arrive at run time as the region's
constant parameters (and, once, through the loader's ``constants`` mapping).
"""

from __future__ import annotations

import json
from typing import Any

import tvm
from tvm import relax

from ..relax_info import attrs_dict, shape_dtype
from ..target import Region


#: The schema of ``region_graph``'s output (JSON Schema, draft 2020-12 vocabulary), the
#: contract between a JSON_GRAPH module's codegen and its runtime loader.
_REF = {"type": "array", "prefixItems": [{"type": "integer", "minimum": 0},
                                        {"type": "integer", "minimum": 0}, {"const": 0}],
        "minItems": 3, "maxItems": 3}
_OPERATION = {"type": "object", "required": ["op", "args", "attrs"],
              "properties": {"op": {"type": "string"}, "attrs": {"type": "object"},
                             "args": {"type": "array", "items": {
                                 "type": "array", "minItems": 2, "maxItems": 2,
                                 "prefixItems": [{"enum": ["param", "op", "scalar", "shape",
                                                           "tuple", "unknown"]}, {}]}}}}
GRAPH_SCHEMA = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "title": "edgebyoc BYOC region graph",
    "type": "object",
    "required": ["nodes", "arg_nodes", "heads"],
    "properties": {
        "nodes": {"type": "array", "items": {
            "type": "object", "required": ["op", "name", "inputs", "attrs"],
            "properties": {
                "op": {"type": "string"}, "name": {"type": "string"},
                "inputs": {"type": "array", "items": _REF},
                "attrs": {"type": "object", "required": ["shape", "dtype"], "properties": {
                    "shape": {"type": "array", "items": {"type": "integer"}},
                    "dtype": {"type": "string"},
                    "outputs": {"type": "array", "items": {
                        "type": "object", "required": ["shape", "dtype"]}},
                    "body": {"type": "array", "items": _OPERATION}}}}}},
        "arg_nodes": {"type": "array", "items": {"type": "integer", "minimum": 0}},
        "heads": {"type": "array", "items": _REF, "minItems": 1},
    },
}


def check_graph(graph: dict[str, Any]) -> list[str]:
    """The ways ``graph`` breaks ``GRAPH_SCHEMA`` and its references (empty when it keeps it):
    every input and head names an earlier node, every ``arg_nodes`` entry an ``input`` or
    ``const`` node, every body argument an existing parameter or earlier operation."""
    problems = []
    nodes = graph.get("nodes")
    if not isinstance(nodes, list):
        return ["'nodes' is not a list"]
    for key in ("arg_nodes", "heads"):
        if not isinstance(graph.get(key), list):
            problems.append(f"{key!r} is not a list")
    for index, node in enumerate(nodes):
        where = f"node {index}"
        missing = [k for k in ("op", "name", "inputs", "attrs") if k not in node]
        if missing:
            problems.append(f"{where} lacks {missing}")
            continue
        attrs = node["attrs"]
        if not isinstance(attrs.get("shape"), list) or not isinstance(attrs.get("dtype"), str):
            problems.append(f"{where} ({node['op']}): attrs need a shape list and a dtype")
        for ref in node["inputs"]:
            if not (isinstance(ref, list) and len(ref) == 3 and 0 <= ref[0] < index
                    and 0 <= ref[1] < len(nodes[ref[0]]["attrs"].get("outputs", [0]))):
                problems.append(f"{where}: input {ref} does not name an earlier node's output")
        for j, operation in enumerate(attrs.get("body", [])):
            for arg in operation.get("args", []):
                kind = arg[0] if isinstance(arg, list) and len(arg) == 2 else None
                if kind not in ("param", "op", "scalar", "shape", "tuple", "unknown"):
                    problems.append(f"{where}, body {j}: argument {arg} is malformed")
                elif kind == "param" and not 0 <= arg[1] < len(node["inputs"]):
                    problems.append(f"{where}, body {j}: no parameter {arg[1]}")
                elif kind == "op" and not 0 <= arg[1] < j:
                    problems.append(f"{where}, body {j}: no earlier operation {arg[1]}")
    for index in graph.get("arg_nodes") or []:
        if not (isinstance(index, int) and 0 <= index < len(nodes)
                and nodes[index].get("op") in ("input", "const")):
            problems.append(f"arg_nodes entry {index} is not an input or const node")
    for ref in graph.get("heads") or []:
        if not (isinstance(ref, list) and len(ref) == 3 and 0 <= ref[0] < len(nodes)
                and 0 <= ref[1] < len(nodes[ref[0]]["attrs"].get("outputs", [0]))):
            problems.append(f"head {ref} does not name a node's output")
    return problems


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


def _argument(arg, params: dict, results: dict) -> list:
    """One operator argument in the graph's form (see the module docstring)."""
    if isinstance(arg, relax.Var) and arg in params:
        return ["param", params[arg]]
    if isinstance(arg, relax.Var) and arg in results:
        return ["op", results[arg]]
    if isinstance(arg, (tvm.tirx.IntImm, tvm.tirx.FloatImm, tvm.ir.expr.StringImm)):
        return ["scalar", arg.value]  # TVM 0.27: integer / float arguments are constants too
    if isinstance(arg, tvm.ir.expr.Constant):
        return ["scalar", _scalar(arg)]
    if isinstance(arg, relax.ShapeExpr):
        return ["shape", [int(d) for d in arg.values]]
    if isinstance(arg, relax.Tuple):
        return ["tuple", [_argument(f, params, results) for f in arg.fields]]
    return ["unknown", str(arg)]


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
            args = [_argument(arg, params, results) for arg in value.args]
            results[binding.var] = len(ops)
            ops.append({"op": value.op.name if isinstance(value.op, tvm.ir.Op) else str(value.op),
                        "args": args, "attrs": attrs_dict(value.attrs)})
    return ops


def region_graph(region: Region) -> dict[str, Any]:
    """The JSON-ready graph of ``region`` (see the module docstring)."""
    function = region.function
    nodes: list[dict[str, Any]] = []
    entry: dict[Any, tuple[int, int]] = {}  # var -> (node, output index)
    for index, param in enumerate(function.params):
        shape, dtype = shape_dtype(param.ty)
        entry[param] = (len(nodes), 0)
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
            if isinstance(value, relax.TupleGetItem) and value.tuple_value in entry:
                entry[binding.var] = (entry[value.tuple_value][0], int(value.index))
                continue
            if not isinstance(value, relax.Call):
                raise ValueError(f"region {region.symbol}: cannot serialise {type(value).__name__}")
            callee = local.get(value.op) if isinstance(value.op, relax.Var) else None
            if callee is None and isinstance(value.op, relax.Function):
                callee = value.op
            tensor_args = [a for a in value.args if isinstance(a, relax.Var)]
            node = {"name": binding.var.name,
                    "inputs": [[*entry[a], 0] for a in tensor_args],
                    "attrs": _output_attrs(binding.var.ty)}
            if callee is not None:
                node["op"] = _composite_name(callee)
                node["attrs"]["body"] = _body(callee)
            else:  # an operator outside patterns, e.g. the (de)quantize of partial quantization
                node["op"] = value.op.name
                args = [_argument(a, {t: i for i, t in enumerate(tensor_args)}, {})
                        for a in value.args]
                node["attrs"]["body"] = [{"op": value.op.name, "args": args,
                                          "attrs": attrs_dict(value.attrs)}]
            entry[binding.var] = (len(nodes), 0)
            nodes.append(node)
    ret = function.body.body
    heads = [[*entry[f], 0] for f in (ret.fields if isinstance(ret, relax.Tuple) else [ret])]
    return {"nodes": nodes, "arg_nodes": arg_nodes, "heads": heads}


def _output_attrs(ty) -> dict[str, Any]:
    """``shape`` and ``dtype`` of a node's result; a tuple result (``split``) lists each of
    its ``outputs`` and has an empty shape and dtype ``"tuple"``."""
    if isinstance(ty, relax.TupleType):
        outputs = [dict(zip(("shape", "dtype"), (list(s), d)))
                   for s, d in (shape_dtype(field) for field in ty.fields)]
        return {"shape": [], "dtype": "tuple", "outputs": outputs}
    shape, dtype = shape_dtype(ty)
    return {"shape": list(shape), "dtype": dtype}


def region_json(region: Region) -> str:
    """``region_graph`` as a JSON string (the payload of a JSON_GRAPH ``CodegenOutput``)."""
    return json.dumps(region_graph(region))
