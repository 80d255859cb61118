"""An ONNX model checked against the operator specification before TVM's importer sees it.

TVM's importer trusts the model: attributes out of their range (a ``Conv`` dilation of 0 or
-1, a ``MaxPool`` kernel larger than its input, ``Pad`` removing more than an axis holds) or
constant index operands outside their axis compile into kernels that read or write out of
bounds, or into shapes the runtime cannot allocate. Here the model is refused, with the node
and the reason, wherever onnxruntime would refuse it:

1. the opsets and operator domains this onnx knows, a graph with outputs, ``onnx.checker``;
2. **strict shape inference** with type checks (``onnx.shape_inference``, the operators'
   own attribute and type rules), on the model with its input shapes as compiled; only an
   operator defined by a function body the checker cannot infer (``MeanVarianceNormalization``)
   falls back to the lenient inference;
3. **every inferred dimension** non-negative (ONNX infers ``-5`` for a 10x10 pooling window
   over a 4x4 input, ``-6`` for a pad of -10 on an axis of 4, ``-1`` for a seventh split of
   an axis of 6);
4. the **attribute rules inference does not check** (``ATTRIBUTE_RULES``: window sizes,
   strides, dilations and block sizes positive, axes within the rank, ...), and axes given as
   constant operands (``AXIS_OPERANDS``) within the rank;
5. **semantics TVM's importer lacks** (``UNSUPPORTED_SEMANTICS``: training-mode batch
   normalization and dropout, ``ConvTranspose``'s ``output_shape``, ...): refused with what to
   change, where it would otherwise compile a wrong result;
6. **constant operands**: indices of ``Gather*`` / ``Scatter*`` within their axes (per
   position of the index tuple for ``GatherND`` / ``ScatterND``), ``Split`` sizes adding up to
   the axis, ``TopK``'s ``k`` within its axis;
7. **element types**: every value of a type TVM compiles (no float8, 4- or 2-bit tensors);
8. **sizes**: no tensor the model computes is larger than the memory edgebyoc may plan for
   (``resources.memory_limit``): a 40 GB ``ConstantOfShape`` is refused here, not folded.

``check_model`` returns, for the graph inputs used as indices, the extent of the axis they
index (checked before every run, and used for random inputs).
"""

from __future__ import annotations

import math
import re
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from .errors import ModelLoadError, UnsupportedModelError
from .resources import check_memory

#: the operator domains whose operators the ONNX importer implements
ONNX_DOMAINS = ("", "ai.onnx")

#: the ONNX element types TVM compiles and runs (``TensorProto`` numbers): float8, 4- and
#: 2-bit types and strings are refused (TVM 0.27 casts float8 wrongly and cannot hold sub-byte
#: tensors; the ONNX node suite's Cast tests)
SUPPORTED_ELEMENT_TYPES = frozenset({1, 2, 3, 4, 5, 6, 7, 9, 10, 11, 12, 13, 16})


def _type_name(kind: int) -> str:
    from onnx import TensorProto

    try:
        return TensorProto.DataType.Name(kind)
    except ValueError:
        return f"type {kind}"


#: bytes per element of ONNX tensor types (``TensorProto`` numbers)
_ITEM_BYTES = {1: 4, 2: 1, 3: 1, 4: 2, 5: 2, 6: 4, 7: 8, 9: 1, 10: 2, 11: 8, 12: 4, 13: 8,
               14: 8, 15: 16, 16: 2}

_WINDOWED = ("Conv", "ConvTranspose", "ConvInteger", "QLinearConv", "MaxPool", "AveragePool",
             "LpPool", "MaxUnpool", "DeformConv")


def _attribute(node, name: str, default: Any = None) -> Any:
    import onnx

    for attribute in node.attribute:
        if attribute.name == name:
            return onnx.helper.get_attribute_value(attribute)
    return default


def _positive_ints(*names: str) -> Callable:
    def rule(node, rank):
        for name in names:
            values = _attribute(node, name)
            if values is None:
                continue
            values = values if isinstance(values, (list, tuple)) else [values]
            if any(v <= 0 for v in values):
                return f"attribute {name} must be positive, got {list(values)}"
        return None
    return rule


def _non_negative_ints(*names: str) -> Callable:
    def rule(node, rank):
        for name in names:
            values = _attribute(node, name)
            if values is not None and any(v < 0 for v in values):
                return f"attribute {name} must not be negative, got {list(values)}"
        return None
    return rule


def _axis_within(name: str = "axis", default: int | None = 0, extra: int = 0) -> Callable:
    def rule(node, rank):
        axis = _attribute(node, name, default)
        if axis is None or rank is None:
            return None
        axes = axis if isinstance(axis, (list, tuple)) else [axis]
        bound = rank + extra
        bad = [a for a in axes if not -bound <= a < bound]
        if bad:
            return f"attribute {name} = {bad[0]} is outside the rank {rank}"
        if len(set(a % bound for a in axes)) != len(axes):
            return f"attribute {name} repeats an axis: {list(axes)}"
        return None
    return rule


def _all(*rules: Callable) -> Callable:
    def rule(node, rank):
        for each in rules:
            problem = each(node, rank)
            if problem:
                return problem
        return None
    return rule


#: operator -> rule(node, rank of its first input or None) -> problem or None: the attribute
#: ranges of the ONNX operator specification that shape inference leaves unchecked
ATTRIBUTE_RULES: Mapping[str, Callable] = {
    **{op: _all(_positive_ints("kernel_shape", "strides", "dilations", "group"),
                _non_negative_ints("pads")) for op in _WINDOWED},
    "LpPool": _all(_positive_ints("kernel_shape", "strides", "dilations", "p"),
                   _non_negative_ints("pads")),
    "LRN": _positive_ints("size"),
    "DepthToSpace": _positive_ints("blocksize"),
    "SpaceToDepth": _positive_ints("blocksize"),
    "Concat": _axis_within("axis", None),
    "Gather": _axis_within(), "GatherElements": _axis_within(),
    "ScatterElements": _axis_within(), "Scatter": _axis_within(),
    "Split": _axis_within(), "Softmax": _axis_within("axis", -1),
    "LogSoftmax": _axis_within("axis", -1), "Hardmax": _axis_within("axis", -1),
    "ArgMax": _axis_within(), "ArgMin": _axis_within(),
    "CumSum": _axis_within(), "Flatten": _axis_within("axis", 1, extra=1),
    "LayerNormalization": _axis_within("axis", -1),
    "Compress": _axis_within("axis", None),
    "TopK": _axis_within("axis", -1),
    "OneHot": _axis_within("axis", -1, extra=1),
    "Transpose": lambda node, rank: None if rank is None or _attribute(node, "perm") is None
    or sorted(_attribute(node, "perm")) == list(range(rank))
    else f"attribute perm {list(_attribute(node, 'perm'))} is not a permutation of "
         f"{rank} axes",
}


#: operators whose axis is a (constant) operand, which inference does not check: its position
AXIS_OPERANDS = {"CumSum": 1}


def _avgpool_last_window_in_padding(node, shapes, constants) -> str | None:
    """ONNX drops a ceil-mode window that starts in the end padding; the importer keeps it."""
    data = shapes.get(node.input[0])
    kernel = _attribute(node, "kernel_shape")
    if not _attribute(node, "ceil_mode", 0) or not data or not kernel:
        return None
    spatial = data[2:]
    strides = _attribute(node, "strides") or [1] * len(kernel)
    pads = _attribute(node, "pads") or [0] * (2 * len(kernel))
    for axis, (size, k, stride) in enumerate(zip(spatial, kernel, strides)):
        begin, end = pads[axis], pads[axis + len(kernel)]
        if size is None or stride <= 0:
            continue
        count = -(-(size + begin + end - k) // stride) + 1
        if (count - 1) * stride >= size + begin:
            return ("ceil_mode with a last window that starts in the padding (ONNX drops it, "
                    "TVM's importer averages it)")
    return None


def _transposed_output_shape(node, shapes) -> str | None:
    """TVM's importer ignores ``output_shape``: fine only where it is what the pads give."""
    wanted = _attribute(node, "output_shape")
    data, weight = shapes.get(node.input[0]), shapes.get(node.input[1])
    if wanted is None:
        return None
    problem = ("its output_shape attribute is not supported by TVM's importer (which keeps "
               "the pads' output size); give pads and output_padding instead")
    if not data or not weight or None in data[2:] or None in weight[2:]:
        return problem
    spatial = len(data) - 2
    kernel = _attribute(node, "kernel_shape") or weight[2:]
    strides = _attribute(node, "strides") or [1] * spatial
    dilations = _attribute(node, "dilations") or [1] * spatial
    pads = _attribute(node, "pads") or [0] * (2 * spatial)
    extra = _attribute(node, "output_padding") or [0] * spatial
    given = [stride * (size - 1) + more + (k - 1) * dilation + 1 - pads[i] - pads[i + spatial]
             for i, (size, k, stride, dilation, more) in enumerate(
                 zip(data[2:], kernel, strides, dilations, extra))]
    return None if list(wanted)[-spatial:] == given else problem


def _outputs_used(node, consumed) -> list[str]:
    return [name for name in node.output[1:] if name and name in consumed]


def _operand_constant(node, index: int, constants) -> bool:
    return len(node.input) <= index or not node.input[index] or node.input[index] in constants


def _nms_operands(node, constants) -> str | None:
    if not all(_operand_constant(node, i, constants) for i in (2, 3, 4)):
        return "max_output_boxes_per_class, iou_threshold and score_threshold must be " \
               "constants (TVM's importer replaces a computed one by a default)"
    if len(node.input) > 3 and node.input[3]:
        from onnx import numpy_helper

        iou = numpy_helper.to_array(constants[node.input[3]]).reshape(-1)
        if iou.size and not 0.0 <= float(iou[0]) <= 1.0:
            return f"iou_threshold {float(iou[0]):g} is outside [0, 1] (ONNX's range)"
    return None


def _empty_reduction(node, shapes, constants) -> str | None:
    data = shapes.get(node.input[0]) or []
    axes = _attribute(node, "axes")
    if axes is None and len(node.input) > 1 and node.input[1] in constants:
        from onnx import numpy_helper

        axes = numpy_helper.to_array(constants[node.input[1]]).reshape(-1).tolist()
    if axes is None:
        axes = list(range(len(data)))
    empty = [a for a in axes if -len(data) <= a < len(data) and data[a] == 0]
    return "reduces over an empty axis (onnxruntime gives the reduction's identity, TVM " \
           "another value)" if empty else None


#: operator -> rule(node, shapes, constants, consumed value names) -> problem: valid ONNX whose
#: semantics TVM 0.27's importer does not implement (it would compile a wrong result),
#: refused with what to change; found by the ONNX node suite's checks of values, element types
#: and output counts (``testing.node_suite``)
UNSUPPORTED_SEMANTICS: Mapping[str, Callable] = {
    "BatchNormalization": lambda n, sh, c, u: "training mode (batch statistics) is not "
    "supported; export the model for inference" if _attribute(n, "training_mode", 0) else None,
    "Dropout": lambda n, sh, c, u: None if len(n.input) < 3 or not n.input[2] or (
        n.input[2] in c and not _constant(c, n.input[2]).any()) or (
        len(n.input) > 1 and n.input[1] in c and not _constant(c, n.input[1]).any()) else
    "training mode (random dropping) is not supported; export the model for inference",
    "ConvTranspose": lambda n, sh, c, u: _transposed_output_shape(n, sh),
    "IsInf": lambda n, sh, c, u: "detect_negative / detect_positive = 0 is not supported "
    "(TVM's importer detects both signs)" if not _attribute(n, "detect_negative", 1)
    or not _attribute(n, "detect_positive", 1) else None,
    "LayerNormalization": lambda n, sh, c, u: f"its outputs {_outputs_used(n, u)} (Mean, "
    f"InvStdDev) are not supported; only Y is" if _outputs_used(n, u) else None,
    "Resize": lambda n, sh, c, u: "antialias = 1 is not supported"
    if _attribute(n, "antialias", 0) else None,
    "RoiAlign": lambda n, sh, c, u: "mode max is not supported (TVM's importer averages)"
    if _attribute(n, "mode", b"avg") in (b"max", "max") else None,
    "SpaceToDepth": lambda n, sh, c, u: "mode CRD is not supported (TVM's importer orders "
    "DCR)" if _attribute(n, "mode", b"DCR") not in (b"DCR", "DCR") else None,
    "NonMaxSuppression": lambda n, sh, c, u: _nms_operands(n, c),
    "ReduceMax": lambda n, sh, c, u: _empty_reduction(n, sh, c),
    "ReduceMin": lambda n, sh, c, u: _empty_reduction(n, sh, c),
    "AveragePool": lambda n, sh, c, u: _avgpool_last_window_in_padding(n, sh, c),
}


def _constant(constants, name: str) -> np.ndarray:
    from onnx import numpy_helper

    return numpy_helper.to_array(constants[name])


def check_semantics(model, source: str,
                    input_shapes: Mapping[str, Sequence[int]]) -> dict[str, tuple[int, ...]]:
    """Checks 2 to 8 of the module docstring, with the graph inputs at ``input_shapes`` (after
    ``check_structure``); the extents indexed by each graph input used as an index operand."""
    inferred = infer_shapes(model, source, input_shapes)
    shapes, types, producers = _value_table(inferred)
    for node in inferred.graph.node:
        rule = ATTRIBUTE_RULES.get(node.op_type)
        rank = len(shapes[node.input[0]]) if node.input and node.input[0] in shapes else None
        problem = rule(node, rank) if rule else None
        if problem:
            raise UnsupportedModelError(f"{source}: node {_name(node)} ({node.op_type}): "
                                        f"{problem}")
    constants = _constants(inferred)
    consumed = {name for node in inferred.graph.node for name in node.input} | \
        {o.name for o in inferred.graph.output}
    for node in inferred.graph.node:
        rule = UNSUPPORTED_SEMANTICS.get(node.op_type)
        problem = rule(node, shapes, constants, consumed) if rule and node.input else None
        if problem:
            raise UnsupportedModelError(f"{source}: node {_name(node)} ({node.op_type}): "
                                        f"{problem}")
    for name, kind in types.items():
        if kind not in SUPPORTED_ELEMENT_TYPES:
            raise UnsupportedModelError(
                f"{source}: {_producer_text(producers, name)} gives {name!r} the element type "
                f"{_type_name(kind)}, which edgebyoc does not compile (supported: "
                f"{', '.join(_type_name(t) for t in sorted(SUPPORTED_ELEMENT_TYPES))})")
    for name, dims in shapes.items():
        known = [d for d in dims if d is not None]
        if any(d < 0 for d in known):
            raise UnsupportedModelError(
                f"{source}: {_producer_text(producers, name)} gives {name!r} the shape "
                f"{[d if d is not None else '?' for d in dims]}, with a negative dimension "
                f"(its attributes or operands do not fit its input)")
        if len(known) == len(dims) and name in types:
            nbytes = math.prod(known) * _ITEM_BYTES.get(types[name], 8)
            check_memory(f"{source}: tensor {name!r} ({_producer_text(producers, name)}, "
                         f"shape {known})", nbytes)
    return _check_constant_operands(inferred, shapes, source)


def check_structure(model, source: str) -> None:
    """Check 1 of the module docstring: opsets, domains, outputs, ``onnx.checker``."""
    import onnx

    for opset in model.opset_import:
        if opset.domain in ONNX_DOMAINS and not 1 <= opset.version <= \
                onnx.defs.onnx_opset_version():
            raise UnsupportedModelError(f"{source}: ONNX opset {opset.version} is not one this "
                                        f"onnx ({onnx.__version__}) knows (1 to "
                                        f"{onnx.defs.onnx_opset_version()})")
    foreign = [n for n in model.graph.node if n.domain not in ONNX_DOMAINS]
    if foreign:
        raise UnsupportedModelError(f"{source}: operator {foreign[0].op_type} of domain "
                                    f"{foreign[0].domain!r} (node {foreign[0].name!r}) is not "
                                    f"supported (domains: the standard ONNX operators)")
    if not model.graph.output:
        raise UnsupportedModelError(f"{source}: the graph has no outputs")
    try:
        onnx.checker.check_model(model)
    except onnx.checker.ValidationError as err:
        raise ModelLoadError(f"{source}: invalid ONNX model: {_one_line(err)}") from err


def _one_line(err: BaseException, limit: int = 400) -> str:
    text = " ".join(line.strip() for line in str(err).splitlines() if line.strip())
    return text[:limit]


def with_input_shapes(model, input_shapes: Mapping[str, Sequence[int]]):
    """A copy of ``model`` whose graph inputs named in ``input_shapes`` have those static
    shapes (what shape inference then works from)."""
    import onnx

    shaped = onnx.ModelProto()
    shaped.CopyFrom(model)
    for value in shaped.graph.input:
        if value.name in input_shapes:
            shape = value.type.tensor_type.shape
            del shape.dim[:]
            for size in input_shapes[value.name]:
                shape.dim.add().dim_value = int(size)
    return shaped


def infer_shapes(model, source: str, input_shapes: Mapping[str, Sequence[int]]):
    """The model with its value shapes inferred strictly (types and attributes checked), at
    the input shapes it is compiled for; the lenient inference where only a function-defined
    operator's body cannot be inferred."""
    from onnx import shape_inference

    shaped = with_input_shapes(model, input_shapes)
    try:
        return shape_inference.infer_shapes(shaped, check_type=True, strict_mode=True)
    except shape_inference.InferenceError as err:
        if not _function_operator_failed(str(err), model):
            raise UnsupportedModelError(f"{source}: invalid ONNX model: "
                                        f"{_inference_message(err, model)}") from err
    try:
        return shape_inference.infer_shapes(shaped)
    except shape_inference.InferenceError as err:  # pragma: no cover - strict failed first
        raise UnsupportedModelError(f"{source}: invalid ONNX model: {_one_line(err)}") from err


_INFERENCE_ERROR = re.compile(r"\(op_type:(\w+)(?:, node name: ([^)]*))?\):\s*"
                              r"(?:\[\w+\]\s*)?(.*)")


def _inference_message(err: BaseException, model) -> str:
    """ONNX's nested inference message as ``node 'n' (Op): reason`` (a node without a name
    named by its first output when it is the only one of its operator)."""
    text = _one_line(err, 2000)
    match = _INFERENCE_ERROR.search(text)
    if not match:
        return text[:400]
    op, node, reason = match.groups()
    reason = re.sub(r"^(?:\[\w+\]\s*)?Inference error\(s\):\s*", "", reason).strip()
    if not node:
        alike = [n for n in model.graph.node if n.op_type == op]
        node = (alike[0].output[0] if alike[0].output else "") if len(alike) == 1 else ""
    where = f"node {_short(node)!r} ({op})" if node else f"a {op} node"
    return f"{where}: {reason[:300]}"


def _function_operator_failed(message: str, model) -> bool:
    """Whether strict inference failed only inside an operator defined by a function body."""
    import onnx

    # the outermost operator named: the graph's own node (the others are inside its body)
    operators = re.findall(r"op_type:(\w+)", message)[:1]
    versions = {o.domain: o.version for o in model.opset_import}
    if not operators:
        return False
    for op in operators:
        try:
            schema = onnx.defs.get_schema(op, versions.get("", onnx.defs.onnx_opset_version()))
        except onnx.defs.SchemaError:
            return False
        if not (schema.has_function or schema.has_context_dependent_function):
            return False
    return True


def _value_table(model) -> tuple[dict[str, list], dict[str, int], dict[str, Any]]:
    """(name -> dims (``None`` unknown), name -> element type, name -> producing node)."""
    shapes: dict[str, list] = {}
    types: dict[str, int] = {}
    for value in [*model.graph.input, *model.graph.value_info, *model.graph.output]:
        tensor = value.type.tensor_type
        if not value.type.HasField("tensor_type") or not tensor.HasField("shape"):
            continue
        shapes[value.name] = [d.dim_value if d.HasField("dim_value") else None
                              for d in tensor.shape.dim]
        types[value.name] = tensor.elem_type
    for tensor in model.graph.initializer:
        shapes.setdefault(tensor.name, list(tensor.dims))
        types.setdefault(tensor.name, tensor.data_type)
    producers = {out: node for node in model.graph.node for out in node.output}
    return shapes, types, producers


def _short(name: str, limit: int = 60) -> str:
    """Exporters make node names of hundreds of characters; keep the end, which is specific."""
    return name if len(name) <= limit else "..." + name[-(limit - 3):]


def _name(node) -> str:
    return repr(_short(node.name or (node.output[0] if node.output else "?")))


def _producer_text(producers: Mapping[str, Any], name: str) -> str:
    node = producers.get(name)
    return f"node {_name(node)} ({node.op_type})" if node is not None else "the graph"


def _constants(model) -> dict[str, Any]:
    constants = {t.name: t for t in model.graph.initializer}
    for node in model.graph.node:
        if node.op_type == "Constant" and node.attribute and node.attribute[0].name == "value":
            constants[node.output[0]] = node.attribute[0].t
    return constants


#: operators whose output holds their first input's values, rearranged
VALUE_PRESERVING = ("Reshape", "Squeeze", "Unsqueeze", "Flatten", "Identity", "Transpose",
                    "Cast")
#: ONNX element types of integers (TensorProto: INT8 3, INT16 5, INT32 6, INT64 7, UINT8 2,
#: UINT16 4, UINT32 12, UINT64 13)
INTEGER_TYPES = (2, 3, 4, 5, 6, 7, 12, 13)


def _index_extents(node, shapes: Mapping[str, list]) -> list[int | None] | None:
    """The extents an index operand of ``node`` (its input 1) addresses: one for every value
    (``Gather*``, ``ScatterElements``), one per position of the last axis (``*ND``)."""
    data = shapes.get(node.input[0])
    if not data:
        return None
    if node.op_type in ("Gather", "GatherElements", "ScatterElements", "Scatter"):
        axis = _attribute(node, "axis", 0)
        return [data[axis]] if -len(data) <= axis < len(data) else None
    if node.op_type in ("GatherND", "ScatterND"):
        indices = shapes.get(node.input[1])
        if not indices or indices[-1] is None:
            return None
        first = _attribute(node, "batch_dims", 0) if node.op_type == "GatherND" else 0
        return data[first:first + indices[-1]]
    return None


def _check_constant_operands(model, shapes: Mapping[str, list],
                             source: str) -> dict[str, tuple[int, ...]]:
    """Constant index operands within their axes, ``Split`` sizes adding up to the axis,
    ``TopK``'s ``k`` within its axis; the extents indexed by graph inputs (one for an operand
    whose every value indexes one axis, one per position of the last axis for ``*ND``)."""
    from onnx import numpy_helper

    constants = _constants(model)
    inputs = {v.name for v in model.graph.input} - set(constants)
    # a graph input's values rearranged (GPT-2 reshapes its token ids before the embedding):
    # name -> the input, for the bound of an operand whose every value indexes one axis
    rearranged: dict[str, str] = {}
    bounds: dict[str, tuple[int, ...]] = {}
    for node in model.graph.node:
        where = f"{source}: node {_name(node)} ({node.op_type})"
        if node.op_type in VALUE_PRESERVING and node.input and node.output and \
                (node.input[0] in inputs or node.input[0] in rearranged) and \
                (node.op_type != "Cast" or _attribute(node, "to") in INTEGER_TYPES):
            rearranged[node.output[0]] = rearranged.get(node.input[0], node.input[0])
        if len(node.input) < 2:
            continue
        extents = _index_extents(node, shapes)
        if extents and all(e is not None for e in extents):
            operand = node.input[1]
            if len(extents) == 1 and operand in rearranged:
                operand = rearranged[operand]
            if operand in constants:
                _check_indices(where, numpy_helper.to_array(constants[operand]), extents)
            elif operand in inputs:
                known = bounds.get(operand, tuple(extents))
                bounds[operand] = tuple(min(a, b) for a, b in zip(known, extents)) \
                    if len(known) == len(extents) else known
        if node.op_type in AXIS_OPERANDS and len(node.input) > AXIS_OPERANDS[node.op_type] \
                and node.input[AXIS_OPERANDS[node.op_type]] in constants:
            rank = len(shapes.get(node.input[0]) or ()) or None
            axes = numpy_helper.to_array(constants[node.input[AXIS_OPERANDS[node.op_type]]])
            bad = [int(a) for a in axes.reshape(-1) if rank and not -rank <= a < rank]
            if bad:
                raise UnsupportedModelError(f"{where}: axis {bad[0]} is outside the rank "
                                            f"{rank} of its input")
        if node.op_type not in ("Split", "TopK") or node.input[1] not in constants:
            continue
        axis = _attribute(node, "axis", -1 if node.op_type == "TopK" else 0)
        shape = shapes.get(node.input[0])
        if not shape or not -len(shape) <= axis < len(shape) or shape[axis] is None:
            continue
        values, size = numpy_helper.to_array(constants[node.input[1]]), shape[axis]
        if node.op_type == "Split":
            if int(values.sum()) != size or (values.size and values.min() < 0):
                raise UnsupportedModelError(f"{where}: splits an axis of {size} into sizes "
                                            f"{values.tolist()}")
        else:
            k = int(values.reshape(-1)[0]) if values.size else -1
            if not 0 <= k <= size:
                raise UnsupportedModelError(f"{where}: takes the top {k} of an axis of {size}")
    return bounds


def _check_indices(where: str, values: np.ndarray, extents: list[int]) -> None:
    if not values.size:
        return
    wide = values.astype(np.int64).reshape(-1, len(extents)) if len(extents) > 1 \
        else values.astype(np.int64).reshape(-1, 1)
    limit = np.asarray(extents, dtype=np.int64)
    bad = (wide < -limit) | (wide >= limit)
    if bad.any():
        row, column = np.argwhere(bad)[0]
        raise UnsupportedModelError(f"{where}: reads or writes index {int(wide[row, column])} "
                                    f"of an axis of {int(limit[column])}")
