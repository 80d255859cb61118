"""The C project of a network lowered once into a step graph: data, no text.

``lower_project`` walks the compiled ``main`` (offloaded regions as ``call_dps_packed``
calls, the rest host operators) and records, in program order, each step: the region it
calls (its ``CodegenOutput.c_entry``, and ``c_entry_rows`` for row bands) or the host kernel
it runs (``codegen.ckernels.Kernel``: template and values), the tensors it reads and writes,
and, for a step that can compute a band of output rows, the ``RowWindow`` of each tensor it
reads in rows. Tensors carry where their bytes live (the caller's inputs and outputs, the
constants, the activation arena) and their lifetimes; reshapes are views of their source.

The memory stage plans the arena and the depth-first streaming on this graph
(``memory.streaming``); ``codegen.cemit`` writes the project's files from the graph and that
plan, once. An operator the C project cannot express raises ``ProjectUnsupported`` naming it;
the pipeline then keeps the TVM host build and the report says why there is no project.

The graph is built once: the row axis of each tensor read or written in rows (1: channels-
last, 2: channel planes) is settled while it is built, by the first step that streams it.
"""

from __future__ import annotations

import functools
import hashlib
import math
from dataclasses import dataclass, field
from typing import Any, Mapping

import numpy as np
import tvm
from tvm import relax

from ..quant.integerize import QADD, REQUANTIZE
from ..target import CodegenOutput, OutputKind, RowWindow
from .ckernels import (CTYPES, KERNELS, Kernel, Unsupported, lower_avg_pool2d, lower_conv2d,
                       lower_dense_requantize,
                       lower_qadd, lower_requantize)

#: Operators the core's reference kernels cover (views and the integer call_tir kernels aside).
SUPPORTED_OPS = tuple(KERNELS) + ("relax.reshape", "relax.squeeze", "relax.expand_dims",
                                  "relax.flatten")
_VIEWS = ("relax.reshape", "relax.squeeze", "relax.expand_dims", "relax.flatten")


class ProjectUnsupported(Exception):
    """The network holds something the C project cannot express (the message says what)."""


@functools.lru_cache(maxsize=None)
def _itemsize(dtype: str) -> int:
    """Bytes per element of ``dtype`` (a bool is a byte)."""
    return np.dtype(dtype if dtype != "bool" else "uint8").itemsize


@dataclass(eq=False)
class CTensor:
    """A tensor of the network: where its bytes live and how C reads them."""

    name: str
    dtype: str
    shape: tuple[int, ...]
    kind: str  # "input", "output", "const", "arena"
    index: int = 0  # input / output position
    root: "CTensor | None" = None  # the tensor a view shares its bytes with
    first: int = -1
    last: int = -1
    #: the axis of its rows for row streaming (1: NHWC, 2: NCHW), settled while the graph is
    #: built by the first step that reads or writes it in rows
    row_axis: int | None = None

    @property
    def size(self) -> int:
        return int(math.prod(self.shape))

    @property
    def nbytes(self) -> int:
        return self.size * _itemsize(self.dtype)

    @property
    def ctype(self) -> str:
        return CTYPES[self.dtype]

    def base(self) -> "CTensor":
        return self.root.base() if self.root is not None else self


@dataclass(frozen=True)
class RegionCall:
    """An offloaded region's call: its symbol, whole-tensor entry and (when it has one) its
    row-band entry, with the ``edgebyoc_resident_t`` variable and bytes of its weights when
    a chain can keep them in its module's weight memory (``CodegenOutput.resident_weights``)."""

    symbol: str
    entry: str
    entry_rows: str = ""
    resident_weights: str = ""
    resident_weight_bytes: int = 0


@dataclass(eq=False)
class Step:
    """One step of the network.

    ``params`` are (name, tensor, written) in call order: a host kernel's C parameters, a
    region's data pointers (inputs, then outputs). ``reads`` every tensor it reads; ``windows``
    the ``RowWindow`` of each activation it can read in row bands (empty: the step cannot be
    streamed); ``output_axis`` the output's row axis when it differs from the inputs'."""

    number: int
    name: str
    output: CTensor | None
    reads: list[CTensor]
    params: list[tuple[str, CTensor, bool]]
    title: str = ""
    kernel: Kernel | None = None
    region: RegionCall | None = None
    windows: list[tuple[CTensor, RowWindow]] = field(default_factory=list)
    output_axis: int | None = None

    @property
    def streamable(self) -> bool:
        return bool(self.windows) and self.output is not None

    @property
    def symbol(self) -> str:
        """The offloaded region's symbol ("" for a host kernel)."""
        return self.region.symbol if self.region is not None else ""


@dataclass
class StepGraph:
    """The network as steps over tensors (see the module docstring)."""

    name: str
    description: str
    input_names: list[str]
    output_names: list[str]
    io_in_arena: bool
    inputs: list[CTensor]
    results: list[CTensor]
    steps: list[Step]
    constants: list[tuple[CTensor, np.ndarray]]
    arena: list[CTensor]  # the arena tensors (bases), with their lifetimes
    viewed: set[int]  # ids of base tensors read through a view
    #: copies into the outputs at the end of the run: (output index, source, destination in
    #: the arena, or None for the caller's buffer)
    output_copies: list[tuple[int, CTensor, CTensor | None]]
    #: with ``io_in_arena``: the arena tensors holding each input and each output
    io_tensors: dict[str, list[CTensor]]
    region_files: dict[str, str]  # the regions' project files (layers, includes, bindings)
    end: int  # the step number of the output copies (the last)

    @property
    def host_steps(self) -> int:
        return sum(s.kernel is not None for s in self.steps)

    @property
    def region_steps(self) -> int:
        return sum(s.region is not None for s in self.steps)

    @property
    def step_names(self) -> list[str]:
        return [s.name for s in self.steps]

    @property
    def io_bytes(self) -> int:
        """Bytes of the caller's input and output buffers (0 with ``io_in_arena``)."""
        if self.io_in_arena:
            return 0
        return sum(t.nbytes for t in self.inputs + self.results)

    @property
    def weights_bytes(self) -> int:
        return sum(v.nbytes for _, v in self.constants)


def _shape(ty) -> tuple[int, ...]:
    values = getattr(getattr(ty, "shape", None), "values", None)
    if values is None or not all(isinstance(v, tvm.tirx.IntImm) for v in values):
        raise ProjectUnsupported(f"a tensor of dynamic or unknown shape ({ty})")
    return tuple(int(v) for v in values)


def _dtype(ty) -> str:
    dtype = str(ty.dtype)
    if dtype not in CTYPES:
        raise ProjectUnsupported(f"dtype {dtype} has no C type in the project")
    return dtype


def _agree_on_row_axes(step: Step) -> bool:
    """Give the tensors a step reads and writes in rows their row axis; ``False`` (and no
    windows) when the step's axes disagree or a tensor's rows already lie on another axis."""
    axes = {w.axis for _, w in step.windows}
    if len(axes) != 1:
        step.windows = []
        return False
    axis = axes.pop()
    wanted = [(t.base(), axis) for t, _ in step.windows] + [
        (step.output.base(), step.output_axis or axis)]
    if any(t.row_axis not in (None, a) for t, a in wanted):
        step.windows = []
        return False
    for tensor, a in wanted:
        tensor.row_axis = a
    return True


class _Lowering:
    """Walks ``main`` into the steps of a ``StepGraph``."""

    def __init__(self, mod: tvm.IRModule, outputs: Mapping[str, CodegenOutput],
                 io_in_arena: bool):
        self.main = mod["main"]
        self.outputs = outputs
        self.io_in_arena = io_in_arena
        self.io_tensors: dict[str, list[CTensor]] = {"input": [], "output": []}
        self.tensors: dict[Any, Any] = {}
        self.constants: list[tuple[CTensor, np.ndarray]] = []
        self._const_keys: dict[str, CTensor] = {}
        self.step = 0
        self.steps: list[Step] = []
        self.viewed: set[int] = set()
        self.copies: list[tuple[int, CTensor, CTensor | None]] = []

    # -- tensors ----------------------------------------------------------------------------
    def const(self, value: np.ndarray, dtype: str | None = None) -> CTensor:
        value = np.ascontiguousarray(value if dtype is None else value.astype(dtype))
        dtype = str(value.dtype)
        if dtype not in CTYPES:
            raise ProjectUnsupported(f"a constant of dtype {dtype}")
        key = hashlib.sha256(dtype.encode() + str(value.shape).encode() +
                             value.tobytes()).hexdigest()
        if key not in self._const_keys:
            tensor = CTensor(f"edgebyoc_c{len(self.constants)}", dtype, tuple(value.shape),
                             "const")
            self.constants.append((tensor, value))
            self._const_keys[key] = tensor
        return self._const_keys[key]

    def tensor(self, expr) -> CTensor:
        if isinstance(expr, tvm.ir.expr.Constant):
            return self.const(expr.value.numpy())
        if expr in self.tensors:
            return self.tensors[expr]
        raise ProjectUnsupported(f"an argument of kind {type(expr).__name__}")

    def use(self, tensor: CTensor) -> CTensor:
        base = tensor.base()
        base.last = max(base.last, self.step)
        return tensor

    def define(self, var, kind: str = "arena") -> CTensor:
        tensor = CTensor(f"t{len(self.tensors)}", _dtype(var.ty), _shape(var.ty), kind,
                         first=self.step, last=self.step)
        self.tensors[var] = tensor
        return tensor

    def view(self, var, source: CTensor, shape: tuple[int, ...]) -> None:
        self.viewed.add(id(source.base()))
        self.tensors[var] = CTensor(f"t{len(self.tensors)}", source.dtype, shape, "arena",
                                    root=source)

    # -- walking ----------------------------------------------------------------------------
    def run(self) -> None:
        for index, param in enumerate(self.main.params):
            # in the arena, an input lives from the copy-in (step 0) to its last reader
            tensor = self.define(param, "arena" if self.io_in_arena else "input")
            tensor.index = index
            if self.io_in_arena:
                self.io_tensors["input"].append(tensor)
        bindings = [b for block in self.main.body.blocks for b in block.bindings]
        fused = _fusions(bindings, self.main.body.body)
        skip = set()
        for index, binding in enumerate(bindings):
            if index in skip:
                continue
            if index in fused:
                kind, members = fused[index]
                self.fused_step(kind, [bindings[i] for i in members])
                skip.update(members)
                continue
            try:
                self.binding(binding)
            except Unsupported as err:
                raise ProjectUnsupported(str(err)) from err
        self.finish_outputs(self.results())

    def results(self) -> list[CTensor]:
        result = self.main.body.body
        if isinstance(result, relax.Tuple):
            return [self.tensor(f) for f in result.fields]
        value = self.tensor(result)
        return value if isinstance(value, list) else [value]

    def binding(self, binding) -> None:
        value, var = binding.value, binding.var
        if isinstance(value, relax.Var):
            alias = self.tensor(value)
            if isinstance(alias, list):  # another name for a tuple
                self.tensors[var] = alias
            else:
                self.view(var, alias, alias.shape)
            return
        if isinstance(value, relax.Tuple):
            self.tensors[var] = [self.tensor(f) for f in value.fields]
            return
        if isinstance(value, relax.TupleGetItem):
            source = self.tensors.get(value.tuple_value)
            if not isinstance(source, list):
                raise ProjectUnsupported("a tuple that is not the outputs of a region")
            self.tensors[var] = source[value.index]
            return
        if not isinstance(value, relax.Call) or not isinstance(value.op, tvm.ir.Op):
            raise ProjectUnsupported(f"a binding of kind {type(value).__name__}")
        name = value.op.name
        if name == "relax.call_dps_packed":
            self.region(var, value)
            return
        if name in _VIEWS:
            source = self.use(self.tensor(value.args[0]))
            shape = _shape(var.ty)
            if int(np.prod(shape)) != source.size:
                raise ProjectUnsupported(f"{name} changes the element count")
            self.view(var, source, shape)
            return
        lower, args = KERNELS.get(name), value.args
        if name == "relax.call_tir":
            callee = value.args[0].name_hint
            lower = lower_requantize if callee.startswith(REQUANTIZE) else \
                lower_qadd if callee.startswith(QADD) else None
            name, args = f"call_tir {callee}", value.args[1].fields
        if lower is None:
            raise ProjectUnsupported(f"operator {name} has no reference C kernel")
        self.step += 1
        out = self.define(var)
        suffix = "".join(c if c.isalnum() else "_" for c in name.split(".")[-1].lower())
        self.host_step(suffix, name, out, lower(self, out, value, args))

    def host_step(self, suffix: str, title: str, out: CTensor, kernel: Kernel) -> None:
        for _, tensor, written in kernel.params:
            if not written:
                self.use(tensor)
        step = Step(self.step, f"step{self.step}_{suffix}", out,
                    [t for _, t, w in kernel.params if not w], kernel.params, title, kernel,
                    output_axis=kernel.output_axis)
        written = {p for p, _, w in kernel.params if w}
        step.windows = [(kernel.params[w.position][1], w) for p, w in kernel.windows.items()
                        if p not in written]
        if step.windows:
            _agree_on_row_axes(step)
        self.steps.append(step)

    def fused_step(self, kind: str, chain: list) -> None:
        """One host step for a chain of bindings whose intermediates nobody else reads (see
        ``_fusions``): the int32 tensors between them are never stored."""
        self.step += 1
        last = chain[-1]
        out = self.define(last.var)
        try:
            if kind in ("conv2d_requantize", "dense_requantize"):
                layer, requantize = chain[-2].value, last.value
                args, zero_point = list(layer.args), 0
                if len(chain) == 4:  # the int8 input widened and its zero point subtracted
                    args[0] = chain[0].value.args[0]
                    zero_point = int(np.asarray(chain[1].value.args[1].value.numpy())
                                     .reshape(()))
                lower = lower_conv2d if kind == "conv2d_requantize" else lower_dense_requantize
                kernel = lower(self, out, layer, args, zero_point=zero_point,
                               requantize=list(requantize.args[1].fields))
            else:  # widen, average-pool, narrow: the pool reads the int8 values directly
                kernel = lower_avg_pool2d(self, out, chain[1].value, [chain[0].value.args[0]])
        except Unsupported as err:
            raise ProjectUnsupported(str(err)) from err
        names = " + ".join(b.value.op.name.replace("relax.", "") if b.value.op.name !=
                           "relax.call_tir" else b.value.args[0].name_hint for b in chain)
        self.host_step(kind, f"{names} (fused)", out, kernel)

    def region(self, var, call) -> None:
        symbol = str(call.args[0].global_symbol)
        output = self.outputs.get(symbol)
        if output is None or output.kind is not OutputKind.C_SOURCE or not output.c_entry:
            raise ProjectUnsupported(f"region {symbol} has no C entry point (its codegen gives "
                                     f"no c_entry)")
        self.step += 1
        args = [self.use(self.tensor(a)) for a in call.args[1].fields]
        if isinstance(var.ty, relax.TupleType):
            outs = [CTensor(f"t{len(self.tensors)}_{i}", _dtype(ty), _shape(ty), "arena",
                            first=self.step, last=self.step)
                    for i, ty in enumerate(var.ty.fields)]
            self.tensors[var] = outs
        else:
            outs = [self.define(var)]
        params = [(f"in{i}", t, False) for i, t in enumerate(args)] + \
            [(f"out{i}", t, True) for i, t in enumerate(outs)]
        rows = output.c_entry_rows if len(outs) == 1 and all(
            0 <= w.position < len(args) for w in output.row_windows) else ""
        resident = output.resident_weights if rows and output.resident_weights else ""
        step = Step(self.step, output.c_entry, outs[0] if len(outs) == 1 else None, list(args),
                    params, symbol, region=RegionCall(
                        symbol, output.c_entry, rows, resident,
                        output.resident_weight_bytes if resident else 0))
        if rows:
            step.windows = [(args[w.position], w) for w in output.row_windows]
            if not _agree_on_row_axes(step):
                step.region = RegionCall(symbol, output.c_entry)
        self.steps.append(step)

    def finish_outputs(self, results: list[CTensor]) -> None:
        seen: set[int] = set()
        self.step += 1
        if self.io_in_arena:  # each output stays in the arena, alive to the end of the run
            inputs = {id(t) for t in self.io_tensors["input"]}
            for index, tensor in enumerate(results):
                base = tensor.base()
                if base.kind == "arena" and id(base) not in seen and id(base) not in inputs:
                    base.last = self.step
                    seen.add(id(base))
                    self.io_tensors["output"].append(base)
                    continue
                copy = CTensor(f"out{index}", tensor.dtype, tensor.shape, "arena",
                               first=self.step, last=self.step)
                self.use(tensor)
                self.copies.append((index, tensor, copy))
                self.tensors[f"output {index}"] = copy
                self.io_tensors["output"].append(copy)
            return
        for index, tensor in enumerate(results):
            base = tensor.base()
            if base.kind == "arena" and id(base) not in seen:
                base.kind, base.index = "output", index  # written in place by its producer
                seen.add(id(base))
                continue
            # an input, a constant or an output twice: copied into the output buffer
            self.use(tensor)
            self.copies.append((index, tensor, None))

    def arena_tensors(self) -> list[CTensor]:
        seen, found = set(), []
        for value in self.tensors.values():
            for tensor in value if isinstance(value, list) else [value]:
                base = tensor.base()
                if base.kind == "arena" and id(base) not in seen:
                    seen.add(id(base))
                    found.append(base)
        return found


def _fusions(bindings: list, result) -> dict[int, tuple[str, list[int]]]:
    """Chains of consecutive host bindings lowered as one step, by the index of their first:
    ``conv2d_requantize`` (an integer conv2d whose int32 result only the next binding, a
    requantize, reads: the accumulator never leaves the loop; when its input is an int8
    tensor widened and minus its zero point just before, the convolution reads the int8
    values and subtracts the zero point itself), ``dense_requantize`` (the same for a dense
    layer: a matmul of one row by constant weights) and ``pool_narrow`` (astype
    int8 -> int32, avg_pool2d, astype back to int8, each read only by the next)."""
    uses: dict[Any, int] = {}

    def count(expr) -> None:
        if isinstance(expr, relax.Var):
            uses[expr] = uses.get(expr, 0) + 1
        elif isinstance(expr, relax.Tuple):
            for item in expr.fields:
                count(item)
        elif isinstance(expr, relax.Call):
            for arg in expr.args:
                count(arg)
        elif isinstance(expr, relax.TupleGetItem):
            count(expr.tuple_value)

    for binding in bindings:
        count(binding.value)
    count(result)

    def call_of(binding, name: str):
        value = binding.value
        if isinstance(value, relax.Call) and isinstance(value.op, tvm.ir.Op) and \
                value.op.name == name:
            return value
        return None

    def feeds(binding, consumer_arg) -> bool:  # only read by that argument
        return consumer_arg.same_as(binding.var) and uses.get(binding.var, 0) == 1

    def widened_input(i: int, conv) -> bool:  # astype int8 -> int32, minus a scalar constant
        if i < 2:
            return False
        sub, widen = call_of(bindings[i - 1], "relax.subtract"), call_of(bindings[i - 2],
                                                                         "relax.astype")
        return sub is not None and widen is not None and feeds(bindings[i - 1], conv.args[0]) \
            and feeds(bindings[i - 2], sub.args[0]) and _dtype(widen.args[0].ty) == "int8" \
            and isinstance(sub.args[1], tvm.ir.expr.Constant) \
            and sub.args[1].value.numpy().size == 1 and (i - 2) not in fused \
            and all(i - 2 not in m and i - 1 not in m for _, m in fused.values())

    def dense(binding):  # one row by constant 2-D weights
        call = call_of(binding, "relax.matmul")
        if call is None or not isinstance(call.args[1], tvm.ir.expr.Constant):
            return None
        shape = [int(d) for d in call.args[0].ty.shape.values]
        return call if len(shape) == 2 and shape[0] == 1 and \
            call.args[1].value.numpy().ndim == 2 else None

    fused: dict[int, tuple[str, list[int]]] = {}
    for i, binding in enumerate(bindings[:-1]):
        nxt = call_of(bindings[i + 1], "relax.call_tir")
        for kind, layer in (("conv2d_requantize", call_of(binding, "relax.nn.conv2d")),
                            ("dense_requantize", dense(binding))):
            if layer is not None and nxt is not None and \
                    nxt.args[0].name_hint.startswith(REQUANTIZE) and \
                    _dtype(binding.var.ty) == "int32" and feeds(binding, nxt.args[1].fields[0]):
                if widened_input(i, layer):
                    fused[i - 2] = (kind, [i - 2, i - 1, i, i + 1])
                else:
                    fused[i] = (kind, [i, i + 1])
                break
        if i in fused or (i - 2 in fused and i in fused[i - 2][1]):
            continue
        widen = call_of(binding, "relax.astype")
        if widen is None or i + 2 >= len(bindings) or i - 1 in fused:
            continue
        pool, narrow = (call_of(bindings[i + 1], "relax.nn.avg_pool2d"),
                        call_of(bindings[i + 2], "relax.astype"))
        if pool is not None and narrow is not None \
                and _dtype(widen.args[0].ty) == _dtype(narrow.ty) == "int8" \
                and feeds(binding, pool.args[0]) and feeds(bindings[i + 1], narrow.args[0]):
            fused[i] = ("pool_narrow", [i, i + 1, i + 2])
    return fused


def lower_project(mod: tvm.IRModule, outputs: Mapping[str, CodegenOutput], name: str,
                  input_names: list[str], output_names: list[str], description: str = "",
                  io_in_arena: bool = False) -> StepGraph:
    """The step graph of ``mod["main"]`` (after codegen); ``ProjectUnsupported`` if the C
    project cannot express it. ``outputs`` are the regions' codegen outputs (their entries and
    ``project_files``); ``io_in_arena``: the inputs and outputs live in the arena too."""
    lowering = _Lowering(mod, outputs, io_in_arena)
    lowering.run()
    files: dict[str, str] = {}
    for output in outputs.values():
        for path, text in output.project_files.items():
            if path in files and files[path] != text:
                raise ProjectUnsupported(f"two regions give different versions of {path}")
            files[path] = text
    params = list(mod["main"].params)
    return StepGraph(name, description, list(input_names), list(output_names), io_in_arena,
                     [lowering.tensors[p] for p in params], lowering.results(), lowering.steps,
                     lowering.constants, lowering.arena_tensors(), lowering.viewed,
                     lowering.copies, lowering.io_tensors, files, lowering.step)
