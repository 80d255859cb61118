"""Import: ONNX files or ``onnx.ModelProto``, TFLite files, Relax ``IRModule`` -> ``ImportedModel``.

The result holds a Relax module whose ``main`` takes the model inputs (weights bound as
constants) plus the input / output signature. Every failure is an ``edgebyoc`` error naming the
file, the node or operator, and the reason: a missing, empty, truncated or corrupted file; an
operator the TVM importer does not know; a dynamic dimension without a ``--input-shape``.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import math
import os
import warnings
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator, Mapping, Sequence

import numpy as np

from .errors import ModelLoadError, UnsupportedModelError, first_line, release_tvm_frames
from .onnx_checks import check_semantics, check_structure
from .onnx_fold import fold_static_shapes, shapes_as_tensors
from .rewrites import symbolic_extents, unknown_extents


@dataclass(frozen=True)
class TensorSpec:
    """Name, static shape and dtype of a model input or output.

    An input that indexes tensors is checked before every run (a guard in the compiled model
    checks again before the kernel): ``index_bound`` > 0 when every value indexes an axis of
    that size (a ``Gather``'s indices): values in ``[-index_bound, index_bound)``;
    ``index_extents`` when each position of its last axis indexes its own axis (``GatherND``,
    ``ScatterND``): position ``j`` in ``[-index_extents[j], index_extents[j])``."""

    name: str
    shape: tuple[int, ...]
    dtype: str
    index_bound: int = 0
    index_extents: tuple[int, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        row = {"name": self.name, "shape": list(self.shape), "dtype": self.dtype}
        if self.index_bound:
            row["index_bound"] = self.index_bound
        if self.index_extents:
            row["index_extents"] = list(self.index_extents)
        return row

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "TensorSpec":
        return cls(data["name"], tuple(int(d) for d in data["shape"]), data["dtype"],
                   int(data.get("index_bound", 0)),
                   tuple(int(e) for e in data.get("index_extents", ())))

    def index_limits(self) -> np.ndarray | None:
        """The extent each value indexes, broadcastable against the input (``None``: not an
        index input)."""
        if self.index_extents:
            return np.asarray(self.index_extents, dtype=np.int64)
        return np.int64(self.index_bound) if self.index_bound else None


@dataclass
class ImportedModel:
    """A model in Relax form with its signature and where it came from."""

    mod: Any  # tvm.IRModule
    inputs: list[TensorSpec]
    outputs: list[TensorSpec]
    format: str  # "onnx", "tflite" or "relax"
    name: str
    source: str  # the file path, or a description of the in-memory object
    sha256: str = ""
    onnx_model: Any = field(default=None, repr=False)  # kept for the onnxruntime reference
    #: ONNX: what static shape folding replaced by values before the importer ran
    #: (``onnx_fold.FoldResult.to_dict``); ``None`` for other formats
    folded: dict[str, Any] | None = None


InputShapes = Mapping[str, Sequence[int]]


def import_model(model: Any, input_shapes: InputShapes | None = None,
                 constant_inputs: Mapping[str, np.ndarray] | None = None) -> ImportedModel:
    """Import ``model``: a path (``.onnx``, ``.tflite``), an ``onnx.ModelProto`` or an IRModule.

    ``input_shapes`` fixes dynamic input dimensions by input name. ``constant_inputs`` (ONNX
    only) turns graph inputs into constants with the given values: shape, axes or index operands
    that an exporter left as inputs, which TVM's importer needs as constants.
    """
    import tvm

    if isinstance(model, tvm.IRModule):
        return _import_relax(model)
    try:
        import onnx
        if isinstance(model, onnx.ModelProto):
            digest = hashlib.sha256(model.SerializeToString()).hexdigest()
            return _import_onnx(_freeze_onnx_inputs(model, constant_inputs, "<onnx.ModelProto>"),
                                "<onnx.ModelProto>", input_shapes, digest)
    except ImportError:  # pragma: no cover - onnx is a core dependency
        pass
    if isinstance(model, (str, os.PathLike)):
        path = Path(model)
        data = _read_model_file(path)
        digest = hashlib.sha256(data).hexdigest()
        suffix = path.suffix.lower()
        if suffix == ".onnx":
            parsed = _freeze_onnx_inputs(_parse_onnx(path, data), constant_inputs, str(path))
            return _import_onnx(parsed, str(path), input_shapes, digest)
        if constant_inputs:
            raise UnsupportedModelError(f"{path}: constant_inputs is supported for ONNX only")
        if suffix == ".tflite":
            return _import_tflite(path, data, input_shapes, digest)
        raise ModelLoadError(f"{path}: unknown model format {suffix or '(no extension)'!r} "
                             f"(supported: .onnx, .tflite)")
    raise ModelLoadError(f"cannot import a {type(model).__name__}: pass a .onnx / .tflite path, "
                         f"an onnx.ModelProto or a tvm.IRModule")


def _read_model_file(path: Path) -> bytes:
    if not path.exists():
        raise ModelLoadError(f"{path}: no such file")
    if path.is_dir():
        raise ModelLoadError(f"{path}: is a directory, not a model file")
    data = path.read_bytes()
    if not data:
        raise ModelLoadError(f"{path}: empty file")
    return data


# -- ONNX -------------------------------------------------------------------------------------

def _parse_onnx(path: Path, data: bytes):
    import onnx
    from google.protobuf.message import DecodeError

    try:
        model = onnx.load_model_from_string(data)
    except (DecodeError, ValueError, RuntimeError) as err:
        raise ModelLoadError(f"{path}: not a valid ONNX file, truncated or corrupted "
                             f"({first_line(err)})") from err
    if not model.HasField("graph") or not model.graph.node:
        raise ModelLoadError(f"{path}: not a valid ONNX file (no graph or no nodes; truncated?)")
    _load_external_data(model, path)
    return model


def _load_external_data(model, path: Path) -> None:
    """Read the tensors a model keeps in external files, from the model's own directory only:
    a location that is absolute, climbs out with ``..`` or links outside is refused (a model
    must not make edgebyoc read other files into an artifact)."""
    from onnx import external_data_helper

    tensors = [t for t in external_data_helper._get_all_tensors(model)
               if external_data_helper.uses_external_data(t)]
    if not tensors:
        return
    base = path.resolve().parent
    for tensor in tensors:
        location = next((e.value for e in tensor.external_data if e.key == "location"), "")
        target = (base / location).resolve()
        if not location or Path(location).is_absolute() or ".." in Path(location).parts \
                or not target.is_relative_to(base) or not target.is_file():
            raise ModelLoadError(f"{path}: tensor {tensor.name!r} names external data "
                                 f"{location!r}, which is not a file inside the model's "
                                 f"directory")
    try:
        external_data_helper.load_external_data_for_model(model, str(base))
    except (OSError, ValueError) as err:
        raise ModelLoadError(f"{path}: cannot read its external data "
                             f"({first_line(err)})") from err


def _freeze_onnx_inputs(model, constant_inputs: Mapping[str, np.ndarray] | None, source: str):
    """A copy of ``model`` whose inputs named in ``constant_inputs`` are initializers."""
    if not constant_inputs:
        return model
    from onnx import numpy_helper

    names = {v.name for v in model.graph.input}
    unknown = sorted(set(constant_inputs) - names)
    if unknown:
        raise UnsupportedModelError(f"{source}: constant_inputs names unknown input(s) "
                                    f"{', '.join(unknown)}")
    frozen = type(model)()
    frozen.CopyFrom(model)
    kept = [v for v in frozen.graph.input if v.name not in constant_inputs]
    del frozen.graph.input[:]
    frozen.graph.input.extend(kept)
    for name, value in constant_inputs.items():
        frozen.graph.initializer.append(numpy_helper.from_array(np.asarray(value), name))
    return frozen


_ONNX_DTYPES = {1: "float32", 2: "uint8", 3: "int8", 4: "uint16", 5: "int16", 6: "int32",
                7: "int64", 9: "bool", 10: "float16", 11: "float64", 12: "uint32", 13: "uint64"}


#: the most elements one input may have (an int32 index space, as TVM's kernels use)
MAX_INPUT_ELEMENTS = 2**31 - 1


def _given_shapes(source: str, input_shapes: InputShapes | None,
                  names: Sequence[str]) -> dict[str, tuple[int, ...]]:
    """``--input-shape`` values checked: known input names, positive dimensions, a size the
    compiled code can index."""
    given = {name: tuple(int(d) for d in dims) for name, dims in (input_shapes or {}).items()}
    unknown = [name for name in given if name not in names]
    if unknown:
        raise UnsupportedModelError(f"{source}: --input-shape names {', '.join(unknown)}, "
                                    f"which is not an input (inputs: {', '.join(names)})")
    for name, shape in given.items():
        _check_size(source, name, shape)
    return given


def _check_size(source: str, name: str, shape: Sequence[int]) -> None:
    if any(d < 0 for d in shape):
        raise UnsupportedModelError(f"{source}: input {name!r}: shape {list(shape)} has a "
                                    f"negative dimension")
    if math.prod(shape) > MAX_INPUT_ELEMENTS:
        raise UnsupportedModelError(f"{source}: input {name!r}: shape {list(shape)} has "
                                    f"{math.prod(shape)} elements, more than the "
                                    f"{MAX_INPUT_ELEMENTS} edgebyoc compiles")


def _onnx_inputs(model, source: str, input_shapes: InputShapes | None) -> list[TensorSpec]:
    initializers = {init.name for init in model.graph.initializer}
    given = _given_shapes(source, input_shapes, [v.name for v in model.graph.input
                                                 if v.name not in initializers])
    specs = []
    for value in model.graph.input:
        if value.name in initializers:
            continue
        tensor_type = value.type.tensor_type
        dtype = _ONNX_DTYPES.get(tensor_type.elem_type)
        if dtype is None:
            raise UnsupportedModelError(f"{source}: input {value.name!r} has an unsupported "
                                        f"element type (ONNX type {tensor_type.elem_type})")
        if value.name in given:
            shape = tuple(int(d) for d in given.pop(value.name))
        else:
            dims = [d.dim_value if d.HasField("dim_value") and d.dim_value > 0
                    else (d.dim_param or "?") for d in tensor_type.shape.dim]
            dynamic = [d for d in dims if isinstance(d, str)]
            if dynamic or not tensor_type.HasField("shape"):
                shown = "[" + ", ".join(str(d) for d in dims) + "]" if dims else "unknown"
                example = ",".join(str(d) if isinstance(d, int) else "<n>" for d in dims)
                raise UnsupportedModelError(
                    f"{source}: input {value.name!r} has a dynamic shape {shown}; give a static "
                    f"one with --input-shape {value.name}={example or '<d0>,<d1>,..'} "
                    f"(python: input_shapes=)")
            shape = tuple(int(d) for d in dims)
            _check_size(source, value.name, shape)
        specs.append(TensorSpec(value.name, shape, dtype))
    return specs


@contextmanager
def _track_onnx_node(model) -> Iterator[list]:
    """Record which ONNX node the TVM importer is converting, to name it when it fails.

    The importer converts ``graph.node`` in order and calls ``_convert_operator`` once per node
    that is not a ``Constant`` / ``If``; the k-th call for an op type is the k-th node of it.
    """
    from tvm.relax.frontend.onnx import onnx_frontend

    importer = onnx_frontend.ONNXGraphImporter
    original = importer._convert_operator
    nodes_by_op: dict[str, list] = {}
    for node in model.graph.node:
        nodes_by_op.setdefault(node.op_type, []).append(node)
    seen: dict[str, int] = {}
    current: list = [None]

    def tracking(self, op_name, *args, **kwargs):
        index = seen.get(op_name, 0)
        seen[op_name] = index + 1
        candidates = nodes_by_op.get(op_name, [])
        current[0] = candidates[index] if index < len(candidates) else None
        if args and args[0]:  # data-dependent extents as symbolic ones, as converters need
            inputs = args[0]  # (the importer's list type: None past its end)
            for i, value in enumerate(list(inputs)):
                if value is not None:
                    inputs[i] = _with_symbolic_shape(self.bb, value, f"{op_name.lower()}_in")
        if op_name == "TopK":
            converted = _topk_of_a_computed_k(self.bb, *args)
            if converted is not None:
                return converted
        if op_name == "NonMaxSuppression":
            args = (_nms_inputs(self.bb, args[0]), *args[1:])
            return _selected_count_symbolic(self.bb, original(self, op_name, *args, **kwargs))
        return original(self, op_name, *args, **kwargs)

    importer._convert_operator = tracking
    try:
        yield current
    finally:
        importer._convert_operator = original


#: ONNX operators whose output shape depends on input values
DATA_DEPENDENT_OPERATORS = ("NonZero", "NonMaxSuppression", "Unique", "Compress", "RoiAlign")


def data_dependent_operators(onnx_model) -> list[str]:
    """The operators of ``onnx_model`` (``None``: not an ONNX model) whose results' shapes
    depend on the data, with their counts: ``["NonZero x2", "NonMaxSuppression x1"]``."""
    if onnx_model is None:
        return []
    counts: dict[str, int] = {}
    for node in onnx_model.graph.node:
        if node.op_type in DATA_DEPENDENT_OPERATORS:
            counts[node.op_type] = counts.get(node.op_type, 0) + 1
    return [f"{op} x{count}" for op, count in counts.items()]


def _topk_of_a_computed_k(bb, inputs, attrs, opset):
    """ONNX ``TopK`` whose ``k`` is computed at run time (a detector's
    ``min(candidates, detections left)``), which TVM's importer refuses ("TopK k must be a
    constant"): the whole axis sorted (``argsort``, descending for the largest), the values
    gathered along it, and ``k`` read as a symbolic extent (``tensor_to_shape`` bound by a
    ``match_cast``) by which the first ``k`` of both are sliced off. ``None`` for a ``TopK``
    the importer converts itself (a constant ``k``, or opset 1's attribute)."""
    import tvm
    from tvm import relax

    if opset < 10 or len(inputs) < 2 or inputs[1] is None or \
            isinstance(inputs[1], tvm.ir.expr.Constant) or \
            not isinstance(getattr(inputs[1], "ty", None), relax.TensorType):
        return None
    data, k = inputs[0], inputs[1]
    ndim = data.ty.ndim
    if ndim < 1 or int(attrs.get("sorted", 1)) != 1:
        return None
    axis = int(attrs.get("axis", -1)) % ndim
    order = bb.normalize(relax.op.argsort(data, axis=axis,
                                          descending=bool(attrs.get("largest", 1)),
                                          dtype="int64"))
    values = bb.normalize(relax.op.gather_elements(data, order, axis=axis))
    k = bb.normalize(relax.op.reshape(relax.op.astype(k, "int64"), [1]))
    # ONNX requires 0 <= k <= the axis' extent; the slice below assumes it (a clamp would put
    # if_then_else in the shape), so a k outside stops the run instead of reading past the axis
    extent = bb.normalize(relax.op.strided_slice(
        relax.op.shape_to_tensor(relax.op.shape_of(data)), [0], [axis], [axis + 1]))
    within = relax.op.logical_and(relax.op.greater_equal(k, relax.const(0, "int64")),
                                  relax.op.less_equal(k, extent))
    bb.emit(relax.op.assert_op(relax.op.squeeze(within), [],
                               "TopK's computed k is outside 0 to its axis' extent"))
    count = tvm.tirx.Var("topk_k", "int64")
    bb.match_cast(bb.normalize(relax.op.tensor_to_shape(k)), relax.ShapeType([count]))
    return relax.Tuple([bb.normalize(relax.op.strided_slice(x, [axis], [0], [count],
                                                            assume_inbound=True))
                        for x in (values, order)])


def _selected_count_symbolic(bb, selected):
    """NonMaxSuppression's selected indices with a symbolic count: TVM types them with the
    largest count possible (every box of every class), but the kernel returns the ones kept;
    an output typed with the largest count would be refused at run time as inconsistent."""
    import tvm
    from tvm import relax

    ty = getattr(selected, "ty", None)
    if not isinstance(ty, relax.TensorType) or ty.ndim != 2:
        return selected
    count = tvm.tirx.Var("nms_selected", "int64")
    return bb.match_cast(bb.normalize(selected), relax.TensorType([count, 3], ty.dtype))


#: the most boxes per class a NonMaxSuppression without a limit of its own keeps (its output
#: is allocated for this many; more boxes at run time stop the run with an error saying so)
NMS_BOX_LIMIT = 1 << 16


def _with_symbolic_shape(bb, value, name: str):
    """``value`` with a symbolic extent per axis when its type knows only its rank (what a
    data-dependent slice gives): TVM's NMS crashes on inputs of unknown shape."""
    import tvm
    from tvm import relax

    ty = getattr(value, "ty", None)
    if not unknown_extents(ty):
        return value
    dims = [tvm.tirx.Var(f"{name}_{i}", "int64") for i in range(ty.ndim)]
    return bb.match_cast(value, relax.TensorType(dims, ty.dtype))


def _nms_inputs(bb, inputs):
    """NonMaxSuppression's inputs as TVM's converter needs them: boxes and scores of known
    rank get symbolic extents (it crashes on unknown ones), a limit past NMS_BOX_LIMIT
    becomes NMS_BOX_LIMIT, checked at run time (its limit and thresholds are constants:
    ``onnx_checks`` refuses computed ones before import)."""
    import tvm
    from tvm import relax

    inputs = list(inputs)
    for i, name in ((0, "boxes"), (1, "scores")):
        if i < len(inputs) and inputs[i] is not None:
            inputs[i] = _with_symbolic_shape(bb, inputs[i], f"nms_{name}")
    limit = inputs[2] if len(inputs) > 2 else None
    boxes_shape = getattr(inputs[0].ty, "shape", None)
    if isinstance(limit, tvm.ir.expr.Constant) and isinstance(boxes_shape, relax.ShapeExpr) \
            and int(limit.value.numpy().item()) > NMS_BOX_LIMIT:
        count = boxes_shape.values[1]
        if isinstance(count, tvm.tirx.IntImm):  # a static count: the limit it needs
            inputs[2] = relax.const(min(int(count), NMS_BOX_LIMIT), "int64")
        else:
            # TOPI's NMS sizes its output by the limit ("no limit" is sys.maxsize in
            # torchvision's export: 51 GB): NMS_BOX_LIMIT, checked at run time
            boxes_count = bb.normalize(relax.op.strided_slice(
                relax.op.shape_to_tensor(relax.op.shape_of(inputs[0])), [0], [1], [2]))
            within = bb.normalize(relax.op.less_equal(
                boxes_count, relax.const(np.array([NMS_BOX_LIMIT], np.int64), "int64")))
            bb.emit(relax.op.assert_op(
                relax.op.squeeze(within), [], f"NonMaxSuppression over more than "
                f"{NMS_BOX_LIMIT} boxes (edgebyoc.frontend.NMS_BOX_LIMIT)"))
            inputs[2] = relax.const(NMS_BOX_LIMIT, "int64")
    return inputs


def _short(name: str, limit: int = 60) -> str:
    """Exporters make node names of hundreds of characters; keep the end, which is specific."""
    return name if len(name) <= limit else "..." + name[-(limit - 3):]


def _import_onnx(model, source: str, input_shapes: InputShapes | None,
                 digest: str) -> ImportedModel:
    from tvm.relax.frontend.onnx.onnx_frontend import _get_convert_map

    if model.ir_version < 3:
        raise UnsupportedModelError(f"{source}: ONNX IR version {model.ir_version} is too old "
                                    f"(3 or newer is needed)")
    known = set(_get_convert_map()) | {"Constant", "If"}
    # operators ONNX does not define either: named before anything else looks at the graph
    _refuse_unknown(model, source, known, only_undefined=True)
    check_structure(model, source)
    inputs = _onnx_inputs(model, source, input_shapes)
    original = model
    # shapes the exporter wrote as computations, folded into values (onnx_fold); the ONNX
    # operators the importer lacks and folding left are named before it runs
    fold = fold_static_shapes(model, inputs)
    # a shape folding left (data-dependent) read by an operator the importer cannot read a
    # shape with: cast to a tensor first
    model = shapes_as_tensors(fold.model)
    _refuse_unknown(model, source, known)
    bounds = check_semantics(model, source, {s.name: s.shape for s in inputs})
    inputs = [_with_index_extents(s, bounds.get(s.name, ())) for s in inputs]
    mod = _run_onnx_importer(model, inputs, source)
    mistyped = _mistyped_outputs(mod, model)
    if mistyped:
        mod = _run_onnx_importer(_with_output_casts(model, mistyped), inputs, source)
    mod = symbolic_extents(mod)  # data-dependent extents: symbolic ones, legalization needs them
    name = Path(source).stem if not source.startswith("<") else (model.graph.name or "model")
    # the reference (onnxruntime) runs the model as exported: verify checks the folding too
    imported = ImportedModel(mod, inputs, [], "onnx", name, source, digest,
                             onnx_model=original, folded=fold.to_dict())
    imported.outputs = _output_specs(mod, [o.name for o in model.graph.output], source)
    return imported


def _refuse_unknown(model, source: str, known: set, only_undefined: bool = False) -> None:
    """An ``UnsupportedModelError`` naming the nodes (up to five) whose operator TVM's importer
    lacks; with ``only_undefined``, only operators ONNX does not define in their domain."""
    from onnx import defs

    unknown = [n for n in model.graph.node if n.op_type not in known and not (
        only_undefined and defs.has(n.op_type, n.domain or ""))]
    if unknown:
        listed = ", ".join(f"{n.op_type} (node {n.name or n.output[0]!r})" for n in unknown[:5])
        more = f" and {len(unknown) - 5} more" if len(unknown) > 5 else ""
        raise UnsupportedModelError(f"{source}: operator not supported by the ONNX importer: "
                                    f"{listed}{more}")


def _with_index_extents(spec: TensorSpec, extents: tuple[int, ...]) -> TensorSpec:
    """``spec`` checked as an index input of ``extents`` (see ``TensorSpec``): one extent for
    every value, or one per position of its last axis."""
    if len(extents) == 1:
        return TensorSpec(spec.name, spec.shape, spec.dtype, int(extents[0]))
    if extents and spec.shape and spec.shape[-1] == len(extents):
        return TensorSpec(spec.name, spec.shape, spec.dtype, 0, tuple(extents))
    return spec


def _run_onnx_importer(model, inputs: list[TensorSpec], source: str):
    """TVM's ONNX importer on ``model``; its failure as one line naming the node."""
    from tvm.relax.frontend.onnx import from_onnx

    printed = io.StringIO()  # the importer prints its own diagnostics to stdout
    with warnings.catch_warnings(), _track_onnx_node(model) as current, \
            contextlib.redirect_stdout(printed):
        warnings.simplefilter("ignore")
        try:
            return from_onnx(model, shape_dict={s.name: list(s.shape) for s in inputs},
                             dtype_dict={s.name: s.dtype for s in inputs},
                             keep_params_in_input=False)
        except Exception as err:  # noqa: BLE001 - the importer raises many kinds
            node = current[0]
            where = (f" at node {_short(node.name or node.output[0])!r} ({node.op_type})"
                     if node is not None else "")
            release_tvm_frames(err)
            raise UnsupportedModelError(f"{source}: import failed{where}: "
                                        f"{type(err).__name__}: {first_line(err)}") from err


def _mistyped_outputs(mod, model) -> list[int]:
    """Positions of the outputs TVM's importer computed in another element type than the ONNX
    graph declares (``OneHot`` with float32 values gives float64)."""
    from tvm import relax

    declared = [_ONNX_DTYPES.get(o.type.tensor_type.elem_type) for o in model.graph.output]
    ret = mod["main"].ret_ty
    fields = list(ret.fields) if isinstance(ret, relax.TupleType) else [ret]
    if len(fields) != len(declared):
        return []
    return [i for i, (f, want) in enumerate(zip(fields, declared))
            if want is not None and getattr(f, "dtype", want) not in (want, "")]


def _with_output_casts(model, positions: list[int]):
    """A copy of ``model`` whose outputs at ``positions`` pass through a ``Cast`` to their
    declared type (imported again, the importer then returns them as declared)."""
    from onnx import helper

    fixed = type(model)()
    fixed.CopyFrom(model)
    taken = {n for node in fixed.graph.node for n in node.output} | \
        {v.name for v in fixed.graph.input} | {t.name for t in fixed.graph.initializer}
    for position in dict((fixed.graph.output[p].name, p) for p in positions).values():
        output = fixed.graph.output[position]
        source = output.name
        renamed = f"{source}__edgebyoc_uncast"
        while renamed in taken:
            renamed += "_"
        taken.add(renamed)
        for node in fixed.graph.node:
            node.output[:] = [renamed if n == source else n for n in node.output]
            node.input[:] = [renamed if n == source else n for n in node.input]
        fixed.graph.node.append(helper.make_node(
            "Cast", [renamed], [source], to=output.type.tensor_type.elem_type,
            name=f"{source}__edgebyoc_cast"))
    return fixed


# -- TFLite -----------------------------------------------------------------------------------

def _import_tflite(path: Path, data: bytes, input_shapes: InputShapes | None,
                   digest: str) -> ImportedModel:
    try:
        import tflite
    except ImportError as err:
        raise UnsupportedModelError(f"{path}: TFLite import needs the 'tflite' package "
                                    f"(pip install 'edgebyoc[tflite]')") from err
    from tvm.relax.frontend.tflite import from_tflite

    if len(data) < 8 or data[4:8] != b"TFL3":
        raise ModelLoadError(f"{path}: not a valid TFLite file (no TFL3 identifier; truncated "
                             f"or corrupted)")
    try:
        model = tflite.Model.GetRootAsModel(data, 0)
        subgraph = model.Subgraphs(0)
        tensors = [subgraph.Tensors(subgraph.Inputs(i)) for i in range(subgraph.InputsLength())]
        out_tensors = [subgraph.Tensors(subgraph.Outputs(i))
                       for i in range(subgraph.OutputsLength())]
    except Exception as err:  # noqa: BLE001 - flatbuffers raises on garbage in many ways
        raise ModelLoadError(f"{path}: not a valid TFLite file ({first_line(err)})") from err
    type_names = {v: k.lower() for k, v in vars(tflite.TensorType).items()
                  if not k.startswith("_")}
    given = _given_shapes(str(path), input_shapes, [t.Name().decode() for t in tensors])
    inputs = []
    for tensor in tensors:
        name = tensor.Name().decode()
        shape = tuple(int(d) for d in given.get(name, tensor.ShapeAsNumpy()))
        _check_size(str(path), name, shape)
        dtype = type_names.get(tensor.Type(), "?")
        dtype = {"float32": "float32", "int8": "int8", "uint8": "uint8", "int32": "int32",
                 "int64": "int64", "int16": "int16"}.get(dtype, dtype)
        inputs.append(TensorSpec(name, shape, dtype))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            mod = from_tflite(model, shape_dict={s.name: list(s.shape) for s in inputs},
                              dtype_dict={s.name: s.dtype for s in inputs})
        except Exception as err:  # noqa: BLE001
            release_tvm_frames(err)
            raise UnsupportedModelError(f"{path}: TFLite import failed: {type(err).__name__}: "
                                        f"{first_line(err)}") from err
    imported = ImportedModel(mod, inputs, [], "tflite", path.stem, str(path), digest)
    imported.outputs = _output_specs(mod, [t.Name().decode() for t in out_tensors], str(path))
    return imported


# -- Relax ------------------------------------------------------------------------------------

def _import_relax(mod) -> ImportedModel:
    if "main" not in [gv.name_hint for gv in mod.get_global_vars()]:
        raise UnsupportedModelError("IRModule: no 'main' function")
    main = mod["main"]
    num_input = int(main.attrs["num_input"]) if main.attrs and "num_input" in main.attrs \
        else len(main.params)
    inputs = []
    for param in main.params[:num_input]:
        inputs.append(_spec_of(param.name, param.ty, "IRModule"))
    if num_input != len(main.params):
        raise UnsupportedModelError("IRModule: main takes weights as parameters; bind them "
                                    "first (relax.transform.BindParams)")
    imported = ImportedModel(mod, inputs, [], "relax", "model", "IRModule",
                             hashlib.sha256(mod.script().encode()).hexdigest())
    imported.outputs = _output_specs(mod, None, "IRModule")
    return imported


def _spec_of(name: str, ty, source: str, dynamic_ok: bool = False) -> TensorSpec:
    """The spec of a tensor (or shape) type; unknown dimensions are -1 when ``dynamic_ok``."""
    from tvm import relax

    if isinstance(ty, relax.ShapeType):  # a shape value returned as an output: int64 vector
        return TensorSpec(name, (int(ty.ndim),) if ty.ndim >= 0 else (-1,), "int64")
    shape = getattr(ty, "shape", None)
    if shape is None or not hasattr(shape, "values"):
        if dynamic_ok and getattr(ty, "ndim", -1) >= 0 and hasattr(ty, "dtype"):
            return TensorSpec(name, (-1,) * int(ty.ndim), str(ty.dtype))
        raise UnsupportedModelError(f"{source}: {name!r} has no known shape ({ty})")
    dims = []
    for dim in shape.values:
        if hasattr(dim, "value"):
            dims.append(int(dim.value))
        elif dynamic_ok:
            dims.append(-1)
        else:
            raise UnsupportedModelError(f"{source}: {name!r} has a dynamic shape {shape}; "
                                        f"give static input shapes")
    return TensorSpec(name, tuple(dims), str(ty.dtype))


def _output_specs(mod, names: list[str] | None, source: str) -> list[TensorSpec]:
    """Output specs; outputs may have data-dependent (-1) dimensions, inputs may not. A graph
    that lists one value as several outputs gets them all (as onnxruntime returns them), the
    repeats named ``<name>_1``, ``<name>_2``, ...: outputs are returned by name."""
    from tvm import relax

    ret = mod["main"].ret_ty
    fields = list(ret.fields) if isinstance(ret, relax.TupleType) else [ret]
    if names is None or len(names) != len(fields):
        names = [f"output_{i}" for i in range(len(fields))]
    unique: list[str] = []
    for name in names:
        candidate, count = name, 0
        while candidate in unique or (candidate != name and candidate in names):
            count += 1
            candidate = f"{name}_{count}"
        unique.append(candidate)
    return [_spec_of(n, f, source, dynamic_ok=True) for n, f in zip(unique, fields)]


def random_inputs(specs: Sequence[TensorSpec], seed: int = 0) -> dict[str, np.ndarray]:
    """Seeded random inputs for ``specs``: N(0, 1) floats, small non-negative integers (valid
    indices for an input that indexes an axis)."""
    rng = np.random.default_rng(seed)
    arrays = {}
    for spec in specs:
        dtype = np.dtype(spec.dtype)
        if dtype.kind == "f":
            arrays[spec.name] = rng.standard_normal(spec.shape).astype(dtype)
        elif dtype.kind == "b":
            arrays[spec.name] = rng.integers(0, 2, spec.shape).astype(bool)
        else:
            info = np.iinfo(dtype)
            low, high = max(info.min, -128 if info.min < 0 else 0), min(info.max, 127)
            limits = spec.index_limits()
            if limits is not None:  # an index operand: valid indices of the axes it reads
                arrays[spec.name] = (rng.random(spec.shape) * np.minimum(limits, high + 1)
                                     ).astype(np.int64).astype(dtype)
                continue
            arrays[spec.name] = rng.integers(low, high + 1, spec.shape).astype(dtype)
    return arrays
