"""Static shape folding of ONNX models before TVM's importer.

Exporters (PyTorch's among them) write shapes as computations: ``Shape -> Gather -> Concat ->
Reshape``, attention masks built by ``ConstantOfShape`` / ``Expand`` / ``Where`` of a computed
shape, position ids from ``Range(0, Shape(x)[1])``. Once the inputs' shapes are fixed, every
such value is known at compile time, but TVM's importer sees tensors where it needs shapes and
fails (``Reshape expects the input to have a shape``, ``broadcast_to expects ...``).

``fold_static_shapes`` computes them first, with ONNX's own tools and nothing else: shape
inference (``onnx.shape_inference.infer_shapes``) gives each tensor's static shape; then, in
graph order, a ``Shape`` / ``Size`` of a statically shaped tensor becomes its value, and a node
whose inputs are all known and at least one of them derives from a shape is evaluated by ONNX's
reference implementation (``onnx.reference.ReferenceEvaluator``) and replaced by its value, an
initializer; so is a node computing on small 32- / 64-bit integer constants and float scalars
alone (a shape the exporter traced as Python numbers: Swin's window padding
``(w - W % w) % w``, MobileViT's ``ceil(h / p) * p``). Only such values are folded: a
computation on weights (a ``DequantizeLinear`` of int8 weights, a
transposed weight) is left to the importer, which keeps the patterns the int8 targets match.

Why not a general simplifier (onnxslim, onnxsim): they also rewrite and fuse the graph, which
changes what the targets' patterns see and, for onnxsim, needs onnxruntime at compile time;
folding only what is static keeps the graph the user exported, and every folded model is
checked against onnxruntime on the original by ``verify``.

Limits: a folded tensor larger than ``limit`` elements (default ``FOLD_LIMIT_ELEMENTS``, 1 MiB
of float32) stays a computation, so a mask over a long sequence does not become megabytes of
constants; nodes with subgraphs (``If``, ``Loop``, ``Scan``) and random ones are never folded;
tensors are read from memory only (external data was loaded from the model's folder by the
frontend, never from elsewhere).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np

from .onnx_checks import with_input_shapes

FOLD_LIMIT_ELEMENTS = 1 << 18
#: an integer constant this small (32- or 64-bit) counts as shape arithmetic
SHAPE_LIKE_ELEMENTS = 64

#: never folded: nodes whose result is not a function of their inputs, or that hold subgraphs
_NOT_FOLDED = {"RandomNormal", "RandomNormalLike", "RandomUniform", "RandomUniformLike",
               "Multinomial", "Bernoulli", "If", "Loop", "Scan", "SequenceMap"}


@dataclass
class FoldResult:
    """The folded model and what was folded (``by_op``: op type -> nodes replaced by their
    value; ``kept``: shape-derived nodes left as computations, with why)."""

    model: Any
    by_op: dict[str, int] = field(default_factory=dict)
    kept: list[str] = field(default_factory=list)

    @property
    def nodes(self) -> int:
        return sum(self.by_op.values())

    def to_dict(self) -> dict[str, Any]:
        return {"nodes": self.nodes, "by_op": dict(sorted(self.by_op.items())),
                "kept": list(self.kept)}


def _static_shapes(model, inputs) -> tuple[dict[str, tuple[int, ...]], dict[str, int]]:
    """(name -> static shape of every tensor shape inference can tell, the inputs fixed;
    name -> element type of those)."""
    import onnx

    given = {spec.name: spec.shape for spec in inputs}
    fixed = with_input_shapes(_without_weights(model), given)
    try:
        # no data propagation: it materialises tensors (a ConstantOfShape of 10^8
        # elements took 14 GB); shapes that depend on folded values are found in the
        # next round instead (fold_static_shapes)
        inferred = onnx.shape_inference.infer_shapes(fixed)
    except Exception:  # noqa: BLE001 - inference is best effort; nothing is folded then
        inferred = fixed
    shapes, types = {}, {}
    graph = inferred.graph
    for value in list(graph.value_info) + list(graph.input) + list(graph.output):
        _record_type(value.name, value.type, shapes, types)
    for name, shape in given.items():
        shapes[name] = tuple(int(d) for d in shape)
    return shapes, types


#: integer initializers up to this many elements keep their values for shape inference
KEPT_INTEGER_ELEMENTS = 4096


def _without_weights(model):
    """``model`` as shape inference needs it: initializers other than small integer ones
    (shapes, axes, indices) and float scalars become typed graph inputs, so a model's weights
    are not serialized for every round of inference (GPT-2: 3 s a round)."""
    from onnx import helper

    graph = model.graph
    kept, typed = [], []
    named = {value.name for value in graph.input}
    for tensor in graph.initializer:
        size = int(np.prod(tensor.dims, dtype=np.int64)) if tensor.dims else 1
        if (tensor.data_type in (6, 7) and size <= KEPT_INTEGER_ELEMENTS) or size == 1:
            kept.append(tensor)
        elif tensor.name not in named:
            typed.append(helper.make_tensor_value_info(tensor.name, tensor.data_type,
                                                       list(tensor.dims)))
    light = helper.make_graph(list(graph.node), graph.name, list(graph.input) + typed,
                              list(graph.output), kept, value_info=list(graph.value_info))
    return helper.make_model(light, opset_imports=list(model.opset_import),
                             ir_version=model.ir_version,
                             functions=list(model.functions))


def _record_type(name: str, type_proto, shapes: dict, types: dict) -> None:
    """``shapes[name]`` / ``types[name]`` from a ``TypeProto`` whose shape is static."""
    tensor = type_proto.tensor_type
    if not type_proto.HasField("tensor_type") or not tensor.HasField("shape"):
        return
    dims = [d.dim_value if d.HasField("dim_value") else None for d in tensor.shape.dim]
    if None not in dims:
        shapes[name] = tuple(int(d) for d in dims)
        types[name] = tensor.elem_type


def _infer_outputs(node, shapes, types, known, derived, opsets) -> None:
    """The static shapes of a node that is not folded, from ONNX's inference of that node
    alone, told the values known so far (a ``Reshape`` to a shape folded in this round has a
    static output now, not in the next round's whole-model inference); nothing when an input
    is not static or inference fails."""
    import onnx
    from onnx import helper, numpy_helper

    if all(name in shapes for name in node.output if name):
        return
    input_types, input_data = {}, {}
    for name in node.input:
        if not name:
            continue
        if name in known and (name in derived or known.shape_like(name)):
            value = np.asarray(known[name])
            input_data[name] = numpy_helper.from_array(value, name)
            input_types[name] = helper.make_tensor_type_proto(
                helper.np_dtype_to_tensor_dtype(value.dtype), value.shape)
        elif name in shapes and name in types:
            input_types[name] = helper.make_tensor_type_proto(types[name], shapes[name])
        elif name in known:
            input_types[name] = helper.make_tensor_type_proto(
                known.protos[name].data_type, known.shape_of(name))
        else:
            return
    version = next((o.version for o in opsets if o.domain in ("", "ai.onnx")), None)
    try:
        schema = onnx.defs.get_schema(node.op_type, version, node.domain)
        outputs = onnx.shape_inference.infer_node_outputs(
            schema, node, input_types, input_data, opset_imports=list(opsets))
    except Exception:  # noqa: BLE001 - inference is best effort: the next round tries again
        return
    for name, type_proto in outputs.items():
        _record_type(name, type_proto, shapes, types)


class _KnownValues(dict):
    """Values known at compile time by name: the folded ones, and the model's initializers,
    each turned into an array only when a node to fold reads it (a model's weights are never
    copied here); a tensor kept in an external file is never read."""

    def __init__(self, model):
        super().__init__()
        self.protos = {t.name: t for t in model.graph.initializer
                       if not (t.data_location == t.EXTERNAL and not t.raw_data)}

    def __contains__(self, name) -> bool:
        return dict.__contains__(self, name) or name in self.protos

    def __missing__(self, name):
        from onnx import numpy_helper

        value = self[name] = numpy_helper.to_array(self.protos[name])
        return value

    def shape_of(self, name: str) -> tuple[int, ...]:
        """The value's shape, from an initializer's header alone."""
        if dict.__contains__(self, name):
            return tuple(np.shape(dict.__getitem__(self, name)))
        return tuple(int(d) for d in self.protos[name].dims)

    def shape_like(self, name: str) -> bool:
        """``_shape_like`` of the value, told from an initializer's header alone."""
        if dict.__contains__(self, name):
            return _shape_like(dict.__getitem__(self, name))
        proto = self.protos[name]
        size = int(np.prod(proto.dims, dtype=np.int64)) if proto.dims else 1
        if proto.data_type in (6, 7):  # INT32, INT64
            return size <= SHAPE_LIKE_ELEMENTS
        return proto.data_type in (1, 10, 11, 16) and size == 1  # FLOAT, FLOAT16, DOUBLE, BF16


def _evaluate(node, values: Sequence[np.ndarray], opsets) -> list[np.ndarray]:
    """``node`` run by ONNX's reference implementation on ``values``, under the model's
    opsets."""
    from onnx import helper
    from onnx.reference import ReferenceEvaluator

    names = [f"in{i}" for i in range(len(node.input))]
    feeds, graph_inputs = {}, []
    for name, original, value in zip(names, node.input, values):
        if not original:
            continue
        feeds[name] = value
        graph_inputs.append(helper.make_tensor_value_info(
            name, helper.np_dtype_to_tensor_dtype(value.dtype), value.shape))
    copy = helper.make_node(node.op_type, [n if o else "" for n, o in zip(names, node.input)],
                            [f"out{i}" for i in range(len(node.output))], domain=node.domain)
    copy.attribute.extend(node.attribute)
    outputs = [helper.make_empty_tensor_value_info(f"out{i}") for i in range(len(node.output))]
    model = helper.make_model(helper.make_graph([copy], "fold", graph_inputs, outputs),
                              opset_imports=list(opsets))
    return [np.asarray(v) for v in ReferenceEvaluator(model).run(None, feeds)]


#: folding rounds at most: each round's shape inference sees the values the last one folded
FOLD_ROUNDS = 64


def fold_static_shapes(model, inputs, limit: int = FOLD_LIMIT_ELEMENTS) -> FoldResult:
    """``model`` with every shape-derived value known at compile time folded into an
    initializer (see the module docstring); ``inputs``: the inputs' static ``TensorSpec`` s.
    The model given is not changed. Folds in rounds: a ``Reshape`` to a folded shape has a
    static output only once that shape is a constant, so the next round's shape inference sees
    it (``FOLD_ROUNDS`` at most)."""
    result = FoldResult(model)
    for _ in range(FOLD_ROUNDS):
        step = _fold_round(result.model, inputs, limit)
        result.kept = step.kept
        if not step.nodes:
            break
        result.model = step.model
        for op, count in step.by_op.items():
            result.by_op[op] = result.by_op.get(op, 0) + count
    return result


#: operators TVM's ONNX importer lets read a shape it carries as a ``relax.ShapeExpr`` (the
#: value of a ``Shape`` node, and what ``Gather`` / ``Slice`` / ``Concat`` of it give); any
#: other operator reading one fails ("cannot handle ShapeExpr inputs")
IMPORTER_SHAPE_OPS = {"Reshape", "Resize", "ConstantOfShape", "Gather", "Slice", "Shape",
                      "Expand", "Concat", "Equal", "Where", "Cast", "CastLike", "Squeeze"}
#: operators through which a value stays derived from a ``Shape`` node's
_SHAPE_CARRIERS = {"Shape", "Gather", "Slice", "Concat", "Squeeze", "Unsqueeze", "Identity"}


def shapes_as_tensors(model) -> Any:
    """``model`` with a ``Cast`` to int64 before every input an operator TVM's importer
    cannot read a shape with takes from a shape that folding left (a data-dependent one: the
    number of detections a ``NonZero`` found, ``ReduceMin`` of it against a top-k). TVM's
    importer turns a shape read by ``Cast`` into a tensor (``shape_to_tensor``); a cast of
    int64 to int64 changes no value, so the model computes what it did. The model given is
    not changed."""
    import onnx
    from onnx import TensorProto, helper

    graph = model.graph
    producer = {o: n for n in graph.node for o in n.output}

    def from_shape(name: str, seen=()) -> bool:
        node = producer.get(name)
        if node is None or node.op_type not in _SHAPE_CARRIERS or name in seen:
            return False
        if node.op_type == "Shape":
            return True
        return any(from_shape(i, (*seen, name)) for i in node.input[:1] if i) or (
            node.op_type == "Concat" and any(from_shape(i, (*seen, name)) for i in node.input))

    nodes, casts = [], 0
    for node in graph.node:
        if node.op_type not in IMPORTER_SHAPE_OPS and node.op_type not in _SHAPE_CARRIERS:
            inputs = list(node.input)
            for i, name in enumerate(inputs):
                if name and from_shape(name):
                    tensor = f"{name}__as_tensor_{casts}"
                    nodes.append(helper.make_node("Cast", [name], [tensor],
                                                  to=TensorProto.INT64,
                                                  name=f"{tensor}_cast"))
                    inputs[i], casts = tensor, casts + 1
            if casts and inputs != list(node.input):
                copy = onnx.NodeProto()
                copy.CopyFrom(node)
                del copy.input[:]
                copy.input.extend(inputs)
                node = copy
        nodes.append(node)
    if not casts:
        return model
    rewritten = onnx.ModelProto()
    rewritten.CopyFrom(model)
    del rewritten.graph.node[:]
    rewritten.graph.node.extend(nodes)
    return rewritten


def _fold_round(model, inputs, limit: int) -> FoldResult:
    """One round of ``fold_static_shapes``."""
    import onnx
    from onnx import numpy_helper

    graph = model.graph
    shapes, types = _static_shapes(model, inputs)
    known = _KnownValues(model)
    derived: set[str] = set()
    folded_nodes: set[int] = set()
    result = FoldResult(model)
    outputs = {o.name for o in graph.output}
    for index, node in enumerate(graph.node):
        if node.domain not in ("", "ai.onnx") or node.op_type in _NOT_FOLDED or \
                any(o in outputs for o in node.output):
            continue
        if node.op_type == "Constant":
            if len(node.output) == 1:
                try:
                    known[node.output[0]] = _evaluate(node, [], model.opset_import)[0]
                except Exception:  # noqa: BLE001 - an unusual Constant stays as it is
                    pass
            continue
        values = _node_values(node, shapes, known, derived)
        if values is None:
            _infer_outputs(node, shapes, types, known, derived, model.opset_import)
            continue
        size = _output_size(node, values, shapes)
        if size is None or size > limit:  # judged before anything is computed
            if size is not None:
                result.kept.append(f"{node.op_type} {node.name or node.output[0]}: "
                                   f"{size:,} elements > {limit:,}")
            _infer_outputs(node, shapes, types, known, derived, model.opset_import)
            continue
        try:
            produced = _evaluate(node, values, model.opset_import) \
                if node.op_type not in ("Shape", "Size") else values
        except Exception:  # noqa: BLE001 - the importer then sees the node as it was
            _infer_outputs(node, shapes, types, known, derived, model.opset_import)
            continue
        for name, value in zip(node.output, produced):
            known[name], _ = value, derived.add(name)
        folded_nodes.add(index)
        result.by_op[node.op_type] = result.by_op.get(node.op_type, 0) + 1
    if not folded_nodes:
        return result
    folded = onnx.ModelProto()
    folded.CopyFrom(model)
    del folded.graph.node[:]
    kept = [n for i, n in enumerate(graph.node) if i not in folded_nodes]
    folded.graph.node.extend(kept)
    needed = {name for n in kept for name in n.input} | outputs
    present = {t.name for t in folded.graph.initializer}
    for name in sorted(derived & needed - present):
        folded.graph.initializer.append(numpy_helper.from_array(known[name], name))
    result.model = folded
    return result


def _node_values(node, shapes, known, derived) -> list[np.ndarray] | None:
    """The node's input values when it folds (``Shape`` / ``Size``: its result), else
    ``None``: an input is unknown, or neither derives from a shape nor is shape-like."""
    if node.op_type in ("Shape", "Size"):
        shape = shapes.get(node.input[0])
        if shape is None and node.input[0] in known:  # an initializer or a folded value
            shape = known.shape_of(node.input[0])
        if shape is None:
            return None
        if node.op_type == "Size":
            return [np.array(int(np.prod(shape, dtype=np.int64)), np.int64)]
        rank = len(shape)
        attrs = {a.name: a.i for a in node.attribute}
        start, end = attrs.get("start", 0), attrs.get("end", rank)
        start, end = (start + rank if start < 0 else start), (end + rank if end < 0 else end)
        return [np.array(shape[max(0, start):min(rank, end)], np.int64)]
    present = [name for name in node.input if name]
    if not present or any(name not in known for name in present):
        return None
    if not any(name in derived for name in present) and \
            not all(known.shape_like(name) for name in present):
        return None
    return [known[name] if name else None for name in node.input]


#: operators whose output may hold more elements than their inputs together
_GROWING = {"ConstantOfShape", "Expand", "Tile", "Range", "Resize", "Upsample", "Pad", "OneHot",
            "EyeLike", "MatMul", "Gemm", "Einsum", "Col2Im", "ConvTranspose"}


def _output_size(node, values, shapes) -> int | None:
    """The elements of the node's largest output, before computing it: from shape inference,
    or from the inputs' values for the operators that create tensors; ``None`` when it cannot
    be told for an operator that may grow its inputs (then it is not folded)."""
    inferred = [shapes.get(name) for name in node.output]
    if all(shape is not None for shape in inferred):
        return max((int(np.prod(shape, dtype=np.int64)) for shape in inferred), default=0)
    try:
        if node.op_type == "ConstantOfShape":
            return int(np.prod(values[0], dtype=np.int64))
        if node.op_type == "Expand":
            return int(np.prod(np.broadcast_shapes(values[0].shape, tuple(values[1])),
                               dtype=np.int64))
        if node.op_type == "Tile":
            return int(np.prod(np.array(values[0].shape) * values[1], dtype=np.int64))
        if node.op_type == "Range":
            start, limit, delta = (float(v) for v in values[:3])
            return max(0, int(np.ceil((limit - start) / delta))) if delta else None
    except (ValueError, TypeError, IndexError, OverflowError):
        return None
    if node.op_type in _GROWING:
        return None
    return sum(int(v.size) for v in values if v is not None)


def _shape_like(value: np.ndarray) -> bool:
    """A constant of shape arithmetic: 32- or 64-bit integers, at most ``SHAPE_LIKE_ELEMENTS``,
    or a float scalar (an exporter that traced a shape as Python numbers writes it as such
    ``Constant`` s: MobileViT's ``ceil(h / patch) * patch``)."""
    if value.dtype in (np.int32, np.int64):
        return value.size <= SHAPE_LIKE_ELEMENTS
    return value.dtype.kind == "f" and value.size == 1
