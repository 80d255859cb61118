"""The deployable C project of a network (MATCH's output): plain C, no TVM runtime.

For targets with ``Target.c_project``, the core turns the compiled ``main`` (offloaded regions as
``call_dps_packed`` calls, the rest host operators) into a C project::

    network.h          edgebyoc_network_run(inputs, outputs), input / output sizes, arena size
    network.c          the steps in program order: region entries and host-fallback kernels
    weights.h/.c       every constant once, as a const array in the layout its consumer needs
    main.c             a harness: reads the inputs from files, runs, writes the outputs
    Makefile           host-emulation build with gcc (``FLAVOUR=host``)
    include/, layers/, bindings/<flavour>/
                       the plugins' layer code and API bindings (``CodegenOutput.project_files``)
    + the plugin's build files for its vendor SDK (hook ``edgebyoc_project_files``)

Activations live in one static arena planned by tensor lifetimes (``memory.arena``); inputs and
outputs are the caller's buffers, or with ``io_in_arena`` arena tensors too (an input's bytes
are reused once its last reader has run, as TensorFlow Lite Micro does; the caller writes
inputs at ``edgebyoc_network_input(i)`` and reads outputs at ``edgebyoc_network_output(i)``);
reshapes are views. Host-fallback operators become the core's
reference kernels, generated per step with the shapes baked in (NHWC convolution, matmul,
average pooling rounding half away from zero as TFLite does, elementwise arithmetic with
broadcasting, casts, clip / ReLU, transpose, (de)quantize, softmax, and the integer
requantize / quantized-add kernels of ``edgebyoc.quant``). An operator outside that set makes
``build_project`` raise ``ProjectUnsupported`` naming it; the pipeline then keeps the TVM host
build and the report says why there is no project.

With ``streaming`` (``--dfs``, ``--memory-budget``, or by default where it pays), chains of
layers run depth-first in row bands through ring buffers (``codegen.cstream``): each step is
recorded as a ``StepRecord`` that can re-render itself in row form, the planner picks the
chains by the arena they give, and each chain becomes one loop over a table of calls.

``runtime_source`` gives the project's translation units as one, includes expanded (host
binding); the pipeline links it into the artifact and replaces ``main`` by one call of
``edgebyoc_network_run``, so ``edgebyoc run`` / ``verify`` execute exactly this C.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Mapping

import numpy as np
import tvm
from tvm import relax

from ..memory.arena import ArenaPlan, ArenaTensor, arena_timeline, check_arena, plan_arena
from ..memory.timeline import MemoryTimeline
from ..quant.integerize import QADD, REQUANTIZE
from ..target import CodegenOutput, OutputKind, RowWindow
from .layer import core_file, expand_includes

ENTRY = "edgebyoc_network_run"
CTYPES = {"int8": "int8_t", "uint8": "uint8_t", "int16": "int16_t", "uint16": "uint16_t",
          "int32": "int32_t", "uint32": "uint32_t", "int64": "int64_t", "float32": "float",
          "bool": "uint8_t"}
#: Operators the core's reference kernels cover (views and the integer call_tir kernels aside).
SUPPORTED_OPS = ("relax.nn.conv2d", "relax.matmul", "relax.nn.avg_pool2d", "relax.add",
                 "relax.subtract", "relax.multiply", "relax.maximum", "relax.minimum",
                 "relax.astype", "relax.clip", "relax.nn.relu", "relax.permute_dims",
                 "relax.dequantize", "relax.quantize", "relax.nn.softmax", "relax.reshape",
                 "relax.squeeze", "relax.expand_dims", "relax.flatten")
_VIEWS = ("relax.reshape", "relax.squeeze", "relax.expand_dims", "relax.flatten")


class ProjectUnsupported(Exception):
    """The network holds something the C project cannot express (the message says what)."""


@dataclass
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
    #: the axis of its rows for row streaming (1: NHWC, 2: NCHW), once a step reads or
    #: writes it in rows (``StepRecord.windows``)
    row_axis: int | None = None

    @property
    def size(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))

    @property
    def nbytes(self) -> int:
        return self.size * np.dtype(self.dtype if self.dtype != "bool" else "uint8").itemsize

    @property
    def ctype(self) -> str:
        return CTYPES[self.dtype]

    def base(self) -> "CTensor":
        return self.root.base() if self.root is not None else self


@dataclass
class CProject:
    """A generated C project: its files (relative path -> text) and what it measured."""

    name: str
    files: dict[str, str] = field(default_factory=dict)
    arena: ArenaPlan = field(default_factory=ArenaPlan)
    weights_bytes: int = 0
    steps: int = 0
    host_steps: int = 0
    region_steps: int = 0
    translation_units: list[str] = field(default_factory=list)
    #: the arena's activation memory timeline (``memory.arena.arena_timeline``)
    timeline: MemoryTimeline | None = None
    #: (name, dtype, shape) of each input and output, in order
    inputs: list[tuple[str, str, tuple[int, ...]]] = field(default_factory=list)
    outputs: list[tuple[str, str, tuple[int, ...]]] = field(default_factory=list)
    #: the inputs and outputs live in the arena (the caller holds no buffer of its own)
    io_in_arena: bool = False
    #: the depth-first row streaming (``codegen.cstream.StreamPlan.to_dict``), or ``None``
    streaming: dict[str, Any] | None = None
    #: per streamed region symbol, the (first, end) output rows of each of its calls
    region_calls: dict[str, list[tuple[int, int]]] = field(default_factory=dict)

    @property
    def io_bytes(self) -> int:
        """Bytes of the input and output buffers the caller holds while the network runs
        (0 when they are in the arena)."""
        if self.io_in_arena:
            return 0
        return sum(int(np.prod(shape, dtype=np.int64)) * np.dtype(
            dtype if dtype != "bool" else "uint8").itemsize
            for _, dtype, shape in self.inputs + self.outputs)

    @property
    def total_activation_bytes(self) -> int:
        """All activation RAM of a run: the arena plus the caller's input / output buffers."""
        return self.arena.size_bytes + self.io_bytes

    def to_dict(self) -> dict[str, Any]:
        return {"generated": True, "entry": ENTRY, **self.arena.to_dict(),
                "io_in_arena": self.io_in_arena, "io_bytes": self.io_bytes,
                "total_activation_bytes": self.total_activation_bytes,
                "weights_bytes": self.weights_bytes, "steps": self.steps,
                "host_steps": self.host_steps, "region_steps": self.region_steps,
                "streaming": self.streaming, "files": sorted(self.files)}

    def project_files(self) -> dict[str, str]:
        """The files of the written project (the artifact's TVM wrapper left out)."""
        return {k: v for k, v in self.files.items() if k != _WRAPPER}

    def write(self, directory: str | Path) -> Path:
        root = Path(directory)
        for name, text in self.project_files().items():
            (root / name).parent.mkdir(parents=True, exist_ok=True)
            (root / name).write_text(text)
        return root

    def make(self, directory: str | Path, cflags: str = "-O2", ldflags: str = "",
             jobs: int = 2) -> Path:
        """Write the project into ``directory`` and build it with its Makefile (gcc, host
        binding); returns the harness binary. ``RuntimeError`` with the compiler's messages
        if the build fails."""
        import subprocess

        root = self.write(directory)
        done = subprocess.run(["make", "-s", f"-j{jobs}", f"CFLAGS={cflags}",
                               f"LDFLAGS={ldflags}"], cwd=root, capture_output=True, text=True)
        if done.returncode != 0:
            raise RuntimeError(f"make failed in {root}:\n{done.stderr[-4000:]}")
        return root / "network"

    def run_binary(self, binary: str | Path, inputs: list[np.ndarray]) -> list[np.ndarray]:
        """Run the harness built by ``make`` on ``inputs`` (in order); outputs in order."""
        import subprocess
        import tempfile

        with tempfile.TemporaryDirectory(prefix="edgebyoc-run-") as scratch:
            ins, outs = [], []
            for i, ((name, dtype, shape), value) in enumerate(zip(self.inputs, inputs)):
                path = Path(scratch, f"in{i}.bin")
                np.ascontiguousarray(value, dtype=dtype).reshape(shape).tofile(path)
                ins.append(str(path))
            outs = [str(Path(scratch, f"out{i}.bin")) for i in range(len(self.outputs))]
            done = subprocess.run([str(binary), *ins, *outs], capture_output=True, text=True)
            if done.returncode != 0:
                raise RuntimeError(f"{binary} failed ({done.returncode}):\n{done.stderr[-4000:]}")
            return [np.fromfile(p, dtype=dtype).reshape(shape)
                    for p, (_, dtype, shape) in zip(outs, self.outputs)]

    def runtime_source(self, flavour: str = "host") -> str:
        """The whole project as one translation unit (every header inlined once, the
        ``flavour`` binding), with the TVM FFI wrapper of ``edgebyoc_network_run``: what the
        artifact compiles and links (``CSourceModuleCreate``)."""
        dirs, seen = ["", "include/", f"bindings/{flavour}/"], set()
        units = [f"/* ---- {unit} ---- */\n" + expand_includes(self.files[unit], self.files,
                                                              dirs, seen)
                 for unit in self.translation_units]
        return "\n".join(units) + self.files[_WRAPPER]


_WRAPPER = "tvm_wrapper.c"  # kept out of the written project (only the artifact needs it)


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


def _literal(value, dtype: str) -> str:
    if dtype == "float32":
        v = float(np.float32(value))
        if not np.isfinite(v):
            return {True: "INFINITY", False: "-INFINITY"}[v > 0] if not np.isnan(v) else "NAN"
        return f"{v:.9e}f"
    v = int(value)
    if dtype == "int64":
        return f"INT64_C({v})"
    if v == -2 ** 31:
        return "(-2147483647 - 1)"
    return str(v)


def _strides(shape: tuple[int, ...]) -> list[int]:
    strides, running = [], 1
    for extent in reversed(shape):
        strides.append(running)
        running *= extent
    return strides[::-1]


@dataclass(eq=False)
class StepRecord:
    """One step of the network as the row-streaming planner (``codegen.cstream``) sees it.

    ``output`` is the tensor it writes, ``reads`` every tensor it reads; ``windows`` the
    ``RowWindow`` of each activation it can read in row bands (empty: the step cannot be
    streamed); ``render_rows(rings)`` gives (the function text or ``""``, the statement
    computing output rows ``y0`` to ``y1 - 1``) for buffers of ``rings[tensor name]`` rows
    (0: whole); ``call_index`` / ``function_index`` locate the whole-tensor forms in the
    emitter's lists."""

    number: int
    name: str
    output: CTensor | None
    reads: list[CTensor]
    windows: list[tuple[CTensor, RowWindow]] = field(default_factory=list)
    render_rows: Callable[[Mapping[str, int]], tuple[str, str]] | None = None
    call_index: int = -1
    function_index: int | None = None
    #: the output's row axis when it differs from the inputs' (a layout transpose)
    output_axis: int | None = None
    #: the offloaded region's symbol ("" for a host kernel)
    symbol: str = ""

    @property
    def streamable(self) -> bool:
        return self.render_rows is not None and self.output is not None


def _set_row_axes(record: StepRecord) -> bool:
    """Give the tensors a step reads and writes in rows their row axis; ``False`` (and no
    windows) when the step's axes disagree or a tensor's rows already lie on another axis."""
    axes = {w.axis for _, w in record.windows}
    if len(axes) != 1:
        record.windows = []
        return False
    axis = axes.pop()
    wanted = [(t.base(), axis) for t, _ in record.windows] + [
        (record.output.base(), record.output_axis or axis)]
    if any(t.row_axis not in (None, a) for t, a in wanted):
        record.windows = []
        return False
    for tensor, a in wanted:
        tensor.row_axis = a
    return True


class _Emitter:
    """Walks ``main`` and writes network.c / weights.c."""

    def __init__(self, mod: tvm.IRModule, outputs: Mapping[str, CodegenOutput],
                 io_in_arena: bool = False):
        self.main = mod["main"]
        self.outputs = outputs
        self.io_in_arena = io_in_arena
        #: with ``io_in_arena``: the arena tensors holding each input and each output
        self.io_tensors: dict[str, list[CTensor]] = {"input": [], "output": []}
        self.tensors: dict[Any, CTensor] = {}
        self.constants: list[tuple[CTensor, np.ndarray]] = []
        self._const_keys: dict[str, CTensor] = {}
        self.functions: list[str] = []
        self.calls: list[str] = []
        self.entries: list[str] = []
        self.row_entries: list[str] = []  # the c_entry_rows the streamed steps call
        self.step = 0
        self.step_names: list[str] = []  # the function each step calls, in order
        self.host_steps = self.region_steps = 0
        self.records: list[StepRecord] = []  # one per step, in order
        self.viewed: set[int] = set()  # ids of base tensors read through a view

    # -- tensors ------------------------------------------------------------------------------
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

    def pointer(self, tensor: CTensor, const: bool) -> str:
        base = tensor.base()
        qualifier = "const " if const else ""
        cast = f"({qualifier}{tensor.ctype}*)"
        if base.kind == "const":
            return f"{cast}{base.name}" if base.dtype != tensor.dtype else base.name
        if base.kind == "input":
            return f"{cast}inputs[{base.index}]"
        return f"{cast}({{base:{base.name}}})"  # resolved once outputs and offsets are known

    # -- walking ------------------------------------------------------------------------------
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
            self.binding(binding)
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
                return
            view = CTensor(f"t{len(self.tensors)}", alias.dtype, alias.shape, "arena",
                           root=alias)
            self.viewed.add(id(alias.base()))
            self.tensors[var] = view
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
            self.tensors[var] = CTensor(f"t{len(self.tensors)}", source.dtype, shape, "arena",
                                        root=source)
            self.viewed.add(id(source.base()))
            return
        emit = _KERNELS.get(name)
        if name == "relax.call_tir":
            callee = value.args[0].name_hint
            emit = _requantize if callee.startswith(REQUANTIZE) else \
                _qadd if callee.startswith(QADD) else None
            name = f"call_tir {callee}"
        if emit is None:
            raise ProjectUnsupported(f"operator {name} has no reference C kernel")
        self.step += 1
        self.host_steps += 1
        out = self.define(var)
        args = [value.args[1].fields] if name.startswith("call_tir") else [value.args]
        params, body = emit(self, out, value, *args)
        rows = None
        if emit in _ROW_KERNELS:
            rows = lambda rings: emit(self, out, value, *args, rows=rings)  # noqa: E731
        self.host_step(re.sub(r'[^a-z0-9]+', '_', name.split('.')[-1].lower()), name, out,
                       params, body, rows)

    def host_step(self, suffix: str, title: str, out: CTensor, params, body: str,
                  rows=None) -> None:
        """Emit step ``self.step`` as ``static void step<n>_<suffix>(params)`` and its call;
        ``params`` are (name, tensor, written) triples. ``rows(rings)``, for kernels that can
        compute a band of output rows, gives their (params, body, windows) in that form."""
        fname = f"step{self.step}_{suffix}"
        signature = ", ".join(f"{'const ' if not w else ''}{t.ctype}* {p}"
                              for p, t, w in params)
        self.step_names.append(fname)
        header = f"/* step {self.step}: {title} -> {out.dtype}{list(out.shape)} */\n"
        record = StepRecord(self.step, fname, out, [t for _, t, w in params if not w],
                            call_index=len(self.calls), function_index=len(self.functions))
        self.functions.append(f"{header}static void {fname}({signature}) {{\n{body}}}\n")
        pointers = ", ".join(self.pointer(self.use(t) if not w else t, not w)
                             for _, t, w in params)
        self.calls.append(f"  {fname}({pointers});")
        self.records.append(record)
        if rows is None:
            return
        try:
            _, _, windows = rows({})
        except ProjectUnsupported:
            return
        written = {p for p, _, w in params if w}
        record.windows = [(params[w.position][1], w) for p, w in windows.items()
                          if p not in written]
        record.output_axis = next((w.axis for p, w in windows.items() if p in written), None)
        if not _set_row_axes(record):
            return

        def render(rings: Mapping[str, int]) -> tuple[str, str]:
            names = {p: t.base().name for p, t, _ in params}
            local = {p: rings.get(names[p], 0) for p in names}
            _, body_, _ = rows(local)
            return (f"{header}static void {fname}({signature}, int y0, int y1) {{\n{body_}}}\n",
                    f"{fname}({pointers}, y0, y1);")

        record.render_rows = render

    def fused_step(self, kind: str, chain: list) -> None:
        """One host step for a chain of bindings whose intermediates nobody else reads (see
        ``_fusions``): the int32 tensors between them are never stored."""
        self.step += 1
        self.host_steps += 1
        last = chain[-1]
        out = self.define(last.var)
        if kind == "conv2d_requantize":
            conv, requantize = chain[-2].value, last.value
            args, zero_point = list(conv.args), 0
            if len(chain) == 4:  # the int8 input widened and its zero point subtracted
                args[0] = chain[0].value.args[0]
                zero_point = int(np.asarray(chain[1].value.args[1].value.numpy()).reshape(()))
            fields = list(requantize.args[1].fields)

            def emit(rows=None):
                return _conv2d(self, out, conv, args, zero_point=zero_point,
                               requantize=fields, rows=rows)
        else:  # widen, average-pool, narrow: the pool reads the int8 values directly
            widen, pool = chain[0].value, chain[1].value

            def emit(rows=None):
                return _avg_pool2d(self, out, pool, [widen.args[0]], rows=rows)
        params, body = emit()
        names = " + ".join(b.value.op.name.replace("relax.", "") if b.value.op.name !=
                           "relax.call_tir" else b.value.args[0].name_hint for b in chain)
        self.host_step(kind, f"{names} (fused)", out, params, body,
                       lambda rings: emit(rows=rings))

    def region(self, var, call) -> None:
        symbol = str(call.args[0].global_symbol)
        output = self.outputs.get(symbol)
        if output is None or output.kind is not OutputKind.C_SOURCE or not output.c_entry:
            raise ProjectUnsupported(f"region {symbol} has no C entry point (its codegen gives "
                                     f"no c_entry)")
        self.step += 1
        self.region_steps += 1
        args = [self.use(self.tensor(a)) for a in call.args[1].fields]
        if isinstance(var.ty, relax.TupleType):
            outs = []
            for i, ty in enumerate(var.ty.fields):
                t = CTensor(f"t{len(self.tensors)}_{i}", _dtype(ty), _shape(ty), "arena",
                            first=self.step, last=self.step)
                outs.append(t)
            self.tensors[var] = outs
        else:
            outs = [self.define(var)]
        self.entries.append(output.c_entry)
        self.step_names.append(output.c_entry)
        data = ", ".join(f"(void*){self.pointer(t, False)}" for t in args + outs)
        record = StepRecord(self.step, output.c_entry, outs[0] if len(outs) == 1 else None,
                            list(args), call_index=len(self.calls), symbol=symbol)
        self.calls.append(f"  {{\n    void* data[{len(args) + len(outs)}] = {{{data}}};\n"
                          f"    if ({output.c_entry}(data) != 0) return {self.step};\n  }}")
        self.records.append(record)
        everything = args + outs
        if output.c_entry_rows and len(outs) == 1 and all(
                0 <= w.position < len(args) for w in output.row_windows):
            record.windows = [(args[w.position], w) for w in output.row_windows]
            if not _set_row_axes(record):
                return
            entry, step, count = output.c_entry_rows, self.step, len(everything)

            def render(rings: Mapping[str, int]) -> tuple[str, str]:
                self.row_entries.append(entry)
                ring = ", ".join(str(rings.get(t.base().name, 0)) for t in everything)
                return "", (f"{{\n      static const int rings[{count}] = {{{ring}}};\n"
                            f"      void* data[{count}] = {{{data}}};\n"
                            f"      if ({entry}(data, y0, y1, rings) != 0) return {step};\n"
                            f"    }}")

            record.render_rows = render

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
                self.calls.append(f"  memcpy({self.pointer(copy, False)}, "
                                  f"{self.pointer(tensor, True)}, {tensor.nbytes});")
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
            self.calls.append(f"  memcpy(outputs[{index}], {self.pointer(tensor, True)}, "
                              f"{tensor.nbytes});")

    def arena_tensors(self) -> list[CTensor]:
        seen, found = set(), []
        for value in self.tensors.values():
            for tensor in value if isinstance(value, list) else [value]:
                base = tensor.base()
                if base.kind == "arena" and id(base) not in seen:
                    seen.add(id(base))
                    found.append(base)
        return found


# -- reference kernels ----------------------------------------------------------------------------
# Each takes (emitter, out tensor, call, args) and returns ([(param, tensor, written)], C body).

_LOOP_VARS = tuple(f"i{d}" for d in range(8))


def _loop_nest(shape, body: str, indent: str = "  ", names=_LOOP_VARS) -> str:
    lines = []
    for depth, extent in enumerate(shape):
        lines.append(f"{indent}{'  ' * depth}for (int {names[depth]} = 0; {names[depth]} < "
                     f"{extent}; ++{names[depth]})")
    lines.append(f"{indent}{'  ' * len(shape)}{body}")
    return "\n".join(lines) + "\n"


def _broadcast_index(shape_in, shape_out, names=_LOOP_VARS) -> str:
    """The flat index of an operand of ``shape_in`` broadcast to ``shape_out``."""
    offset = len(shape_out) - len(shape_in)
    strides = _strides(tuple(shape_in))
    terms = [f"{names[offset + i]} * {s}" if s != 1 else names[offset + i]
             for i, (extent, s) in enumerate(zip(shape_in, strides)) if extent != 1]
    return " + ".join(terms) or "0"


def _elementwise(op: str):
    def emit(em, out, call, args):
        a, b = (em.tensor(x) for x in args[:2])
        if len(out.shape) > 8:
            raise ProjectUnsupported(f"{op} of rank {len(out.shape)}")
        wide = "double" if out.dtype == "float32" else "int64_t"
        ia, ib = _broadcast_index(a.shape, out.shape), _broadcast_index(b.shape, out.shape)
        x, y = f"({wide})a[{ia}]", f"({wide})b[{ib}]"
        expr = {"add": f"{x} + {y}", "subtract": f"{x} - {y}", "multiply": f"{x} * {y}",
                "maximum": f"{x} > {y} ? {x} : {y}", "minimum": f"{x} < {y} ? {x} : {y}"}[op]
        if out.dtype == "float32" and op in ("add", "subtract", "multiply"):
            expr = {"add": "a[{}] + b[{}]", "subtract": "a[{}] - b[{}]",
                    "multiply": "a[{}] * b[{}]"}[op].format(ia, ib)
        flat = _broadcast_index(out.shape, out.shape)
        body = _loop_nest(out.shape, f"y[{flat}] = ({out.ctype})({expr});")
        return [("a", a, False), ("b", b, False), ("y", out, True)], body
    return emit


def _astype(em, out, call, args):
    x = em.tensor(args[0])
    if x.dtype == "float32" and out.dtype != "float32":
        raise ProjectUnsupported("astype from float to integer (use quantize)")
    return [("x", x, False), ("y", out, True)], \
        f"  for (int i = 0; i < {out.size}; ++i) y[i] = ({out.ctype})x[i];\n"


def _clip(em, out, call, args, rows=None):
    x = em.tensor(args[0])
    low, high = (float(a.value) for a in args[1:3])
    if out.dtype != "float32":
        info = np.iinfo(out.dtype)
        low, high = max(low, info.min), min(high, info.max)
    lo, hi = _literal(low, out.dtype), _literal(high, out.dtype)
    body = _pointwise(out, [("x", x)], f"{out.ctype} v = x[{{x}}];\n    y[{{y}}] = v < {lo} ? "
                      f"{lo} : (v > {hi} ? {hi} : v);", rows)
    return _with_rows([("x", x, False), ("y", out, True)], body, rows, {"x": RowWindow(0)})


def _relu(em, out, call, args, rows=None):
    x = em.tensor(args[0])
    zero = _literal(0, out.dtype)
    body = _pointwise(out, [("x", x)], f"y[{{y}}] = x[{{x}}] > {zero} ? x[{{x}}] : {zero};", rows)
    return _with_rows([("x", x, False), ("y", out, True)], body, rows, {"x": RowWindow(0)})


def _permute(em, out, call, args, rows=None):
    """A transpose; with ``rows`` (see ``_conv2d``) only the NHWC <-> NCHW ones, whose row
    ``y`` reads the input's row ``y`` (axis 1 and 2 swap roles), and NHWC <-> NHCW (rows on
    axis 1 on both sides)."""
    x = em.tensor(args[0])
    axes = [int(a) for a in call.attrs.axes] if call.attrs.axes is not None \
        else list(range(len(x.shape)))[::-1]
    if rows is not None and axes == [0, 1, 3, 2] and len(x.shape) == 4 and x.shape[0] == 1:
        _, _, inner, last = x.shape  # (1, H, A, B) -> (1, H, B, A)
        read = f"({_row('r', rows.get('x', 0))} * {inner} + a) * {last} + b"
        write = f"({_row('r', rows.get('y', 0))} * {last} + b) * {inner} + a"
        body = (f"  for (int r = y0; r < y1; ++r)\n  for (int a = 0; a < {inner}; ++a)\n"
                f"  for (int b = 0; b < {last}; ++b)\n    y[{write}] = x[{read}];\n")
        return [("x", x, False), ("y", out, True)], body, {
            "x": RowWindow(0, axis=1), "y": RowWindow(1, axis=1)}
    if rows is not None:
        if len(x.shape) != 4 or x.shape[0] != 1 or axes not in ([0, 3, 1, 2], [0, 2, 3, 1]):
            raise ProjectUnsupported("row streaming of a transpose other than NHWC <-> NCHW "
                                     "or NHWC <-> NHCW")
        planar_out = axes == [0, 3, 1, 2]
        h = x.shape[1] if planar_out else x.shape[2]
        width = x.shape[2] if planar_out else x.shape[3]
        channels = x.shape[3] if planar_out else x.shape[1]
        rx, ry = rows.get("x", 0), rows.get("y", 0)
        planes_x, planes_y = rx or h, ry or h
        if planar_out:
            read = f"({_row('r', rx)} * {width} + w) * {channels} + c"
            write = f"(c * {planes_y} + {_row('r', ry)}) * {width} + w"
        else:
            read = f"(c * {planes_x} + {_row('r', rx)}) * {width} + w"
            write = f"({_row('r', ry)} * {width} + w) * {channels} + c"
        body = (f"  for (int r = y0; r < y1; ++r)\n  for (int c = 0; c < {channels}; ++c)\n"
                f"  for (int w = 0; w < {width}; ++w)\n    y[{write}] = x[{read}];\n")
        return [("x", x, False), ("y", out, True)], body, {
            "x": RowWindow(0, axis=1 if planar_out else 2),
            "y": RowWindow(1, axis=2 if planar_out else 1)}
    in_strides = _strides(x.shape)
    index = " + ".join(f"{_LOOP_VARS[i]} * {in_strides[axis]}" for i, axis in enumerate(axes))
    flat = _broadcast_index(out.shape, out.shape)
    return [("x", x, False), ("y", out, True)], \
        _loop_nest(out.shape, f"y[{flat}] = x[{index or '0'}];")


def _scalar(expr, what: str):
    if not isinstance(expr, tvm.ir.expr.Constant):
        raise ProjectUnsupported(f"a non-constant {what}")
    value = expr.value.numpy()
    if value.size != 1:
        raise ProjectUnsupported(f"a per-channel {what} (scalars only)")
    return value.reshape(())


def _dequantize(em, out, call, args):
    x = em.tensor(args[0])
    scale, zp = _scalar(args[1], "dequantize scale"), _scalar(args[2], "dequantize zero point")
    return [("x", x, False), ("y", out, True)], (
        f"  for (int i = 0; i < {out.size}; ++i)\n"
        f"    y[i] = ((float)x[i] - {_literal(zp, 'float32')}) * {_literal(scale, 'float32')};\n")


def _quantize(em, out, call, args):
    x = em.tensor(args[0])
    scale, zp = _scalar(args[1], "quantize scale"), _scalar(args[2], "quantize zero point")
    info = np.iinfo(out.dtype)
    return [("x", x, False), ("y", out, True)], (
        f"  for (int i = 0; i < {out.size}; ++i) {{\n"
        f"    float q = nearbyintf(x[i] / {_literal(scale, 'float32')}) + "
        f"{_literal(zp, 'float32')};\n"
        f"    y[i] = ({out.ctype})(q < {info.min}.0f ? {info.min}.0f : "
        f"(q > {info.max}.0f ? {info.max}.0f : q));\n  }}\n")


def _softmax(em, out, call, args):
    x = em.tensor(args[0])
    if out.dtype != "float32":
        raise ProjectUnsupported("softmax on integers")
    axis = int(call.attrs.axis) % len(x.shape)
    outer = int(np.prod(x.shape[:axis], dtype=np.int64))
    n, inner = x.shape[axis], int(np.prod(x.shape[axis + 1:], dtype=np.int64))
    return [("x", x, False), ("y", out, True)], (
        f"  for (int o = 0; o < {outer}; ++o)\n    for (int i = 0; i < {inner}; ++i) {{\n"
        f"      const float* xs = x + o * {n * inner} + i;\n"
        f"      float* ys = y + o * {n * inner} + i;\n"
        f"      float top = xs[0], sum = 0.0f;\n"
        f"      for (int j = 1; j < {n}; ++j) if (xs[j * {inner}] > top) top = xs[j * {inner}];\n"
        f"      for (int j = 0; j < {n}; ++j) {{ ys[j * {inner}] = expf(xs[j * {inner}] - top); "
        f"sum += ys[j * {inner}]; }}\n"
        f"      for (int j = 0; j < {n}; ++j) ys[j * {inner}] = ys[j * {inner}] / sum;\n    }}\n")


def _fusions(bindings: list, result) -> dict[int, tuple[str, list[int]]]:
    """Chains of consecutive host bindings emitted as one step, by the index of their first:
    ``conv2d_requantize`` (an integer conv2d whose int32 result only the next binding, a
    requantize, reads: the accumulator never leaves the loop; when its input is an int8
    tensor widened and minus its zero point just before, the convolution reads the int8
    values and subtracts the zero point itself) and ``pool_narrow`` (astype
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

    fused: dict[int, tuple[str, list[int]]] = {}
    for i, binding in enumerate(bindings[:-1]):
        conv, nxt = call_of(binding, "relax.nn.conv2d"), call_of(bindings[i + 1],
                                                                 "relax.call_tir")
        if conv is not None and nxt is not None and \
                nxt.args[0].name_hint.startswith(REQUANTIZE) and \
                _dtype(binding.var.ty) == "int32" and feeds(binding, nxt.args[1].fields[0]):
            if widened_input(i, conv):
                fused[i - 2] = ("conv2d_requantize", [i - 2, i - 1, i, i + 1])
            else:
                fused[i] = ("conv2d_requantize", [i, i + 1])
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


def _row(var: str, ring: int) -> str:
    """The buffer row of tensor row ``var`` in a buffer of ``ring`` rows (0: the whole
    tensor; fewer: a ring buffer, ``codegen.cstream``)."""
    return f"({var} % {ring})" if ring else var


def _conv2d(em, out, call, args, requantize=None, zero_point: int = 0, rows=None):
    """NHWC convolution; with ``requantize`` (the fields of the requantize call that reads
    its int32 result) each accumulator is requantized to int8 in place of being stored;
    ``zero_point`` is subtracted from each input value read (padding stays 0). With ``rows``
    (parameter name -> rows its buffer holds, see ``_row``) the kernel computes output rows
    ``y0`` to ``y1 - 1`` (two more parameters) and also returns the input's ``RowWindow``."""
    attrs = call.attrs
    if str(attrs.data_layout) != "NHWC" or str(attrs.out_layout) not in ("NHWC", ""):
        raise ProjectUnsupported(f"conv2d in layout {attrs.data_layout} (NHWC only)")
    if not isinstance(args[1], tvm.ir.expr.Constant):
        raise ProjectUnsupported("conv2d with non-constant weights")
    x = em.tensor(args[0])
    layout = str(attrs.kernel_layout)
    w = np.transpose(args[1].value.numpy(), [layout.index(a) for a in "OHWI"])
    weights = em.const(w)
    n, iy, ix, c = x.shape
    _, oy, ox, k = out.shape
    ko, fy, fx, cg = w.shape
    groups = int(attrs.groups)
    pt, pl, _, _ = (int(p) for p in attrs.padding)
    sy, sx = (int(s) for s in attrs.strides)
    dy, dx = (int(d) for d in attrs.dilation)
    kg = k // groups
    floating = out.dtype == "float32"
    acc = "float" if floating else "int64_t"
    rings = dict(rows or {})
    if rows is not None and n != 1:
        raise ProjectUnsupported("row streaming of a batch")
    rx, ry = rings.get("x", 0), rings.get("y", 0)
    body = (f"  for (int n = 0; n < {n}; ++n)\n"
            + ("  for (int oy = y0; oy < y1; ++oy)\n" if rows is not None else
               f"  for (int oy = 0; oy < {oy}; ++oy)\n") +
            f"  for (int ox = 0; ox < {ox}; ++ox)\n"
            f"  for (int k = 0; k < {k}; ++k) {{\n"
            f"    const int g = k / {kg};\n    {acc} acc = 0;\n"
            f"    for (int fy = 0; fy < {fy}; ++fy) {{\n"
            f"      const int iy = oy * {sy} - {pt} + fy * {dy};\n"
            f"      if (iy < 0 || iy >= {iy}) continue;\n"
            f"      for (int fx = 0; fx < {fx}; ++fx) {{\n"
            f"        const int ix = ox * {sx} - {pl} + fx * {dx};\n"
            f"        if (ix < 0 || ix >= {ix}) continue;\n"
            f"        const {x.ctype}* xp = x + ((n * {iy} + {_row('iy', rx)}) * {ix} + ix) * {c} "
            f"+ g * {cg};\n"
            f"        const {weights.ctype}* wp = w + ((k * {fy} + fy) * {fx} + fx) * {cg};\n"
            f"        for (int c = 0; c < {cg}; ++c) acc += "
            + (f"(({acc})xp[c] - {zero_point})" if zero_point else f"({acc})xp[c]")
            + f" * ({acc})wp[c];\n"
            f"      }}\n    }}\n"
            f"    y[((n * {oy} + {_row('oy', ry)}) * {ox} + ox) * {k} + k] = @STORE@;\n  }}\n")
    if ko != k:
        raise ProjectUnsupported("conv2d weights that do not match the output channels")
    params = [("x", x, False), ("w", weights, False)]
    windows = {"x": RowWindow(0, kernel=(fy - 1) * dy + 1, stride=sy, pad_top=pt)}
    if requantize is None:
        return _with_rows(params + [("y", out, True)],
                          body.replace("@STORE@", f"({out.ctype})acc"), rows, windows)
    (bias, bi), (mult, mi), (shift, si) = (
        _channel_vector(em, f, k, what) for f, what in zip(requantize[1:4],
                                                         ("bias", "multiplier", "shift")))
    zp, low, high, rounding = (int(v) for v in requantize[4].value.numpy())
    if out.dtype != "int8":
        raise ProjectUnsupported(f"requantize to {out.dtype}")
    store = (f"edgebyoc_clamp_int8(edgebyoc_mbqm(acc + bias[{bi}], mult[{mi}], shift[{si}], "
             f"{rounding}) + {zp}, {low}, {high})")
    return _with_rows(params + [("bias", bias, False), ("mult", mult, False),
                                ("shift", shift, False), ("y", out, True)],
                      body.replace("@STORE@", store), rows, windows)


def _with_rows(params, body: str, rows, windows: dict[str, RowWindow]):
    """A kernel's (params, body), and with ``rows`` its ``RowWindow`` per streamed parameter
    (positions into ``params``)."""
    if rows is None:
        return params, body
    names = [p for p, _, _ in params]
    return params, body, {name: replace(w, position=names.index(name))
                          for name, w in windows.items()}


def _matmul(em, out, call, args):
    a, b = (em.tensor(x) for x in args[:2])
    if len(b.shape) != 2 or any(d != 1 for d in a.shape[:-2]):
        raise ProjectUnsupported(f"matmul of shapes {list(a.shape)} x {list(b.shape)}")
    m, kk = (a.shape[-2] if len(a.shape) > 1 else 1), a.shape[-1]
    nn = b.shape[1]
    acc = "float" if out.dtype == "float32" else "int64_t"
    body = (f"  for (int i = 0; i < {m}; ++i)\n    for (int j = 0; j < {nn}; ++j) {{\n"
            f"      {acc} acc = 0;\n"
            f"      for (int p = 0; p < {kk}; ++p) acc += ({acc})a[i * {kk} + p] * "
            f"({acc})b[p * {nn} + j];\n"
            f"      y[i * {nn} + j] = ({out.ctype})acc;\n    }}\n")
    return [("a", a, False), ("b", b, False), ("y", out, True)], body


def _avg_pool2d(em, out, call, args, rows=None):
    attrs = call.attrs
    layout = str(attrs.layout)
    if layout not in ("NHWC", "NCHW") or str(attrs.out_layout) not in (layout, "") \
            or any(int(p) for p in attrs.padding) \
            or any(int(d) != 1 for d in attrs.dilation) or bool(attrs.ceil_mode):
        raise ProjectUnsupported("avg_pool2d other than NHWC / NCHW, unpadded, undilated, "
                                 "floor mode")
    x = em.tensor(args[0])
    dims = {axis: x.shape[layout.index(axis)] for axis in "NHWC"}
    odims = {axis: out.shape[layout.index(axis)] for axis in "NHWC"}
    n, iy, ix, c = (dims[a] for a in "NHWC")
    oy, ox = odims["H"], odims["W"]
    fy, fx = (int(v) for v in attrs.pool_size)
    sy, sx = (int(v) for v in attrs.strides)
    acc = "float" if out.dtype == "float32" else "int64_t"

    if rows is not None and (layout != "NHWC" or n != 1):
        raise ProjectUnsupported("row streaming of a batch or of channel planes")
    rings = dict(rows or {})

    def at(h: str, w: str, ny: int, nx: int, ring: int = 0) -> str:  # flat index (n, h, w, k)
        if layout == "NHWC":
            return f"((n * {ny} + {_row(h, ring)}) * {nx} + {w}) * {c} + k"
        return f"((n * {c} + k) * {ny} + {h}) * {nx} + {w}"

    # integer sums divide rounding half away from zero, as TFLite does (and edgebyoc's host
    # build, codegen.host); float sums divide
    body = (f"  for (int n = 0; n < {n}; ++n)\n"
            + ("  for (int oy = y0; oy < y1; ++oy)\n" if rows is not None else
               f"  for (int oy = 0; oy < {oy}; ++oy)\n") +
            f"  for (int ox = 0; ox < {ox}; ++ox)\n"
            f"  for (int k = 0; k < {c}; ++k) {{\n    {acc} sum = 0;\n"
            f"    for (int fy = 0; fy < {fy}; ++fy)\n      for (int fx = 0; fx < {fx}; ++fx)\n"
            f"        sum += x[{at(f'oy * {sy} + fy', f'ox * {sx} + fx', iy, ix, rings.get('x', 0))}];\n"
            f"    y[{at('oy', 'ox', oy, ox, rings.get('y', 0))}] = ({out.ctype})("
            + (f"sum / {fy * fx}" if acc == "float" else f"edgebyoc_round_div(sum, {fy * fx})")
            + ");\n  }\n")
    return _with_rows([("x", x, False), ("y", out, True)], body, rows,
                      {"x": RowWindow(0, kernel=fy, stride=sy)})


def _channel_vector(em, expr, channels: int, what: str) -> tuple[CTensor, str]:
    """A per-channel int32 constant (or a scalar broadcast): its tensor and C index."""
    if not isinstance(expr, tvm.ir.expr.Constant):
        raise ProjectUnsupported(f"a non-constant requantization {what}")
    value = expr.value.numpy().astype(np.int32).reshape(-1)
    if value.size not in (1, channels):
        raise ProjectUnsupported(f"a requantization {what} of {value.size} values for "
                                 f"{channels} channels")
    return em.const(value), ("k" if value.size > 1 else "0")


def _pointwise(out, operands: list[tuple[str, CTensor]], statement: str, rows,
               channel: bool = False):
    """The body of an element-wise kernel: ``statement`` with ``{name}`` standing for the
    flat index of each operand (same shape as ``out``) and ``{y}`` for the output's (``k``
    is the channel when ``channel``); with ``rows`` (see ``_conv2d``) rows ``y0`` to
    ``y1 - 1`` of the NHWC height axis, each operand's buffer holding ``rows[name]`` rows."""
    channels = out.shape[-1]
    if rows is None:
        index = {name: "i" for name, _ in operands} | {"y": "i"}
        head = f"  for (int i = 0; i < {out.size}; ++i) {{\n"
    else:
        if len(out.shape) != 4 or out.shape[0] != 1:
            raise ProjectUnsupported("row streaming of an element-wise kernel of shape "
                                     f"{list(out.shape)} (NHWC, batch 1 only)")
        row = out.size // out.shape[1]
        index = {name: f"{_row('r', rows.get(name, 0))} * {row} + i"
                 for name in [n for n, _ in operands] + ["y"]}
        head = f"  for (int r = y0; r < y1; ++r)\n  for (int i = 0; i < {row}; ++i) {{\n"
    if any(t.shape != out.shape for _, t in operands):
        raise ProjectUnsupported("an element-wise kernel of operands of different shapes")
    k = f"    const int k = i % {channels};\n" if channel else ""
    return head + k + "    " + statement.format(**index) + "\n  }\n"


def _requantize(em, out, call, fields, rows=None):
    acc = em.tensor(fields[0])
    channels = acc.shape[-1]
    (bias, bi), (mult, mi), (shift, si) = (
        _channel_vector(em, f, channels, w) for f, w in zip(fields[1:4],
                                                          ("bias", "multiplier", "shift")))
    zp, low, high, rounding = (int(v) for v in fields[4].value.numpy())
    if out.dtype != "int8":
        raise ProjectUnsupported(f"requantize to {out.dtype}")
    if acc.shape != out.shape:
        raise ProjectUnsupported("a requantize that changes the shape")
    body = _pointwise(out, [("x", acc)], (
        f"int64_t v = edgebyoc_mbqm((int64_t)x[{{x}}] + bias[{bi}], mult[{mi}], shift[{si}], "
        f"{rounding}) + {zp};\n    y[{{y}}] = (int8_t)(v < {low} ? {low} : "
        f"(v > {high} ? {high} : v));"), rows, channel=True)
    return _with_rows([("x", acc, False), ("bias", bias, False), ("mult", mult, False),
                       ("shift", shift, False), ("y", out, True)], body, rows,
                      {"x": RowWindow(0)})


def _qadd(em, out, call, fields, rows=None):
    a, b = em.tensor(fields[0]), em.tensor(fields[1])
    if a.shape != b.shape or a.dtype != "int8" or b.dtype != "int8":
        raise ProjectUnsupported("a quantized add of different shapes or non-int8 operands")
    params = em.const(fields[2].value.numpy().astype(np.int32).reshape(-1))
    body = _pointwise(out, [("a", a), ("b", b)],
                      "y[{y}] = edgebyoc_quantized_add(a[{a}], b[{b}], p);", rows)
    return _with_rows([("a", a, False), ("b", b, False), ("p", params, False),
                       ("y", out, True)], body, rows, {"a": RowWindow(0), "b": RowWindow(0)})


#: the kernels that can compute a band of output rows (``rows=``)
_ROW_KERNELS = (_conv2d, _avg_pool2d, _requantize, _qadd, _clip, _relu, _permute)

_KERNELS: dict[str, Callable] = {
    "relax.nn.conv2d": _conv2d, "relax.matmul": _matmul, "relax.nn.avg_pool2d": _avg_pool2d,
    "relax.astype": _astype, "relax.clip": _clip, "relax.nn.relu": _relu,
    "relax.permute_dims": _permute, "relax.dequantize": _dequantize,
    "relax.quantize": _quantize, "relax.nn.softmax": _softmax,
    **{f"relax.{op}": _elementwise(op) for op in ("add", "subtract", "multiply", "maximum",
                                                  "minimum")},
}


# -- files ----------------------------------------------------------------------------------------

def _c_array(tensor: CTensor, value: np.ndarray) -> str:
    flat = value.reshape(-1)
    if tensor.dtype == "float32":
        items = [_literal(v, "float32") for v in flat.tolist()]
    else:
        items = [_literal(v, tensor.dtype) for v in flat.astype(np.int64).tolist()]
    rows = [", ".join(items[i:i + 16]) for i in range(0, len(items), 16)]
    return (f"const {tensor.ctype} {tensor.name}[{max(tensor.size, 1)}] "
            f"__attribute__((aligned(16))) = {{\n  " + ",\n  ".join(rows or ["0"]) + "\n};\n")


_CPP_OPEN = "#ifdef __cplusplus\nextern \"C\" {\n#endif\n"
_CPP_CLOSE = "#ifdef __cplusplus\n}\n#endif\n"


def build_project(mod: tvm.IRModule, outputs: Mapping[str, CodegenOutput], name: str,
                  input_names: list[str], output_names: list[str],
                  description: str = "", io_in_arena: bool = False,
                  streaming: str = "off", budget: int | None = None,
                  band: int = 1) -> CProject:
    """The C project of ``mod["main"]`` (after codegen); ``ProjectUnsupported`` if it cannot be
    expressed. ``outputs`` are the regions' codegen outputs (their ``c_entry`` and
    ``project_files``). ``io_in_arena``: the inputs and outputs live in the arena too (see the
    module docstring). ``streaming``: ``"off"``, or ``"on"`` to stream chains of layers in
    row bands for the smallest arena (``codegen.cstream``), or ``"budget"`` to stream just
    enough for the activation RAM (arena + the caller's buffers) to fit ``budget`` bytes;
    each streamed call computes at most ``band`` rows."""
    from .cstream import chain_code, plan_chains

    em = _Emitter(mod, outputs, io_in_arena)
    em.run()
    arena = em.arena_tensors()
    stream = None
    if streaming == "off":
        items = [ArenaTensor(t.name, t.nbytes, t.first, t.last) for t in arena]
        plan = plan_arena(items)
    else:
        io_bytes = 0 if io_in_arena else sum(
            t.nbytes for t in [em.tensors[p] for p in em.main.params] + em.results())
        stream = plan_chains(em.records, arena, em.viewed,
                             budget=budget if streaming == "budget" else None,
                             extra_bytes=io_bytes, band=band)
        for number, chain in enumerate(stream.chains):
            functions, block = chain_code(em.records, chain, f"depth-first chain {number}")
            for index, text in functions.items():
                em.functions[em.records[index].function_index] = text
            for index in range(chain.first, chain.last + 1):
                em.calls[em.records[index].call_index] = block if index == chain.first else ""
        em.calls = [c for c in em.calls if c]
        items, plan = stream.items, stream.arena
    check_arena(items, plan)
    where = {f"{{base:{t.name}}}": f"edgebyoc_arena + {plan.offsets[t.name]}" for t in arena}
    for value in em.tensors.values():
        for tensor in value if isinstance(value, list) else [value]:
            base = tensor.base()
            if base.kind == "output":
                where[f"{{base:{base.name}}}"] = f"outputs[{base.index}]"
    functions = "\n".join(em.functions)
    calls = "\n".join(em.calls)
    calls = re.sub(r"\{base:[^}]+\}", lambda m: where[m.group(0)], calls)
    params = list(mod["main"].params)
    in_specs = [(n, em.tensors[p]) for n, p in zip(input_names, params)]
    out_specs = list(zip(output_names, em.results()))
    project = CProject(name=name, arena=plan, steps=em.step - 1, host_steps=em.host_steps,
                       region_steps=em.region_steps,
                       timeline=arena_timeline(items, em.step_names),
                       weights_bytes=sum(v.nbytes for _, v in em.constants),
                       io_in_arena=io_in_arena)
    project.streaming = stream.to_dict(em.records) if stream is not None else None
    for chain in stream.chains if stream is not None else []:
        for index, y0, y1 in chain.events:
            if em.records[index].symbol:
                project.region_calls.setdefault(em.records[index].symbol, []).append((y0, y1))
    project.inputs = [(n, t.dtype, t.shape) for n, t in in_specs]
    project.outputs = [(n, t.dtype, t.shape) for n, t in out_specs]
    io_code = _io_in_arena_code(em, plan) if io_in_arena else ("", "", "")
    files = project.files
    for symbol, output in outputs.items():
        for path, text in output.project_files.items():
            if path in files and files[path] != text:
                raise ProjectUnsupported(f"two regions give different versions of {path}")
            files[path] = text
    files["include/edgebyoc_match.h"] = core_file("edgebyoc_match.h")
    files["network.h"] = _network_header(name, description, in_specs, out_specs, plan,
                                         io_in_arena)
    files["weights.h"] = ("/* the network's constants (generated by edgebyoc) */\n"
                          "#ifndef EDGEBYOC_WEIGHTS_H\n#define EDGEBYOC_WEIGHTS_H\n"
                          "#include <stdint.h>\n" + _CPP_OPEN +
                          "".join(f"extern const {t.ctype} {t.name}[{max(t.size, 1)}];\n"
                                  for t, _ in em.constants) + _CPP_CLOSE + "#endif\n")
    files["weights.c"] = ('#include "weights.h"\n\n' +
                          "\n".join(_c_array(t, v) for t, v in em.constants))
    entries = "".join(f"int {e}(void* const* data);\n" for e in dict.fromkeys(em.entries))
    entries += "".join(f"int {e}(void* const* data, int y0, int y1, const int* rings);\n"
                       for e in dict.fromkeys(em.row_entries))
    files["network.c"] = (
        f"/* {name}: the network's steps in program order (generated by edgebyoc) */\n"
        "#include <math.h>\n#include <stdint.h>\n#include <string.h>\n"
        '#include "network.h"\n#include "weights.h"\n#include "edgebyoc_match.h"\n\n'
        + _CPP_OPEN + entries + _CPP_CLOSE +
        f"\nstatic uint8_t edgebyoc_arena[{max(plan.size_bytes, 16)}] "
        "__attribute__((aligned(16), unused));\n\n" + io_code[0] + functions +
        f"\nint {ENTRY}(const void* const* inputs, void* const* outputs) {{\n"
        "  (void)inputs; (void)outputs;\n" + io_code[1] + calls + io_code[2]
        + "\n  return 0;\n}\n")
    files["main.c"] = core_file("edgebyoc_main.c")
    files["Makefile"] = core_file("edgebyoc_project.mk").replace("@NAME@", name)
    files[_WRAPPER] = _tvm_wrapper(len(in_specs), len(out_specs))
    project.translation_units = ["network.c", "weights.c"] + sorted(
        p for p in files if p.startswith("layers/") and p.endswith(".c"))
    return project


def _io_in_arena_code(em: "_Emitter", plan: ArenaPlan) -> tuple[str, str, str]:
    """(accessors, copy-in, copy-out) of a project whose inputs and outputs are in the arena:
    ``edgebyoc_network_input(i)`` / ``edgebyoc_network_output(i)`` give their places, and
    ``edgebyoc_network_run`` copies a caller's buffer only when it is not that place."""
    places = {kind: [plan.offsets[t.name] for t in tensors]
              for kind, tensors in em.io_tensors.items()}
    accessors = "".join(
        f"static const size_t edgebyoc_{kind}_offsets[{max(len(offsets), 1)}] = "
        f"{{{', '.join(map(str, offsets)) or '0'}}};\n"
        f"void* edgebyoc_network_{kind}(int index) {{\n"
        f"  return (index < 0 || index >= {len(offsets)}) ? NULL : "
        f"edgebyoc_arena + edgebyoc_{kind}_offsets[index];\n}}\n"
        for kind, offsets in places.items()) + "\n"
    copy_in = "".join(
        f"  if (inputs[{i}] != edgebyoc_arena + {offset})\n"
        f"    memcpy(edgebyoc_arena + {offset}, inputs[{i}], {t.nbytes});\n"
        for i, (t, offset) in enumerate(zip(em.io_tensors["input"], places["input"])))
    copy_out = "".join(
        f"\n  if (outputs[{i}] != edgebyoc_arena + {offset})\n"
        f"    memcpy(outputs[{i}], edgebyoc_arena + {offset}, {t.nbytes});"
        for i, (t, offset) in enumerate(zip(em.io_tensors["output"], places["output"])))
    return accessors, copy_in, copy_out


def _network_header(name, description, in_specs, out_specs, plan, io_in_arena=False) -> str:
    suffix = f" - {description}" if description else ""
    if io_in_arena:
        where = [" * int edgebyoc_network_run(inputs, outputs): the inputs and outputs live in the",
                 " * arena: write each input at edgebyoc_network_input(i) and read each output at",
                 " * edgebyoc_network_output(i) (no copy), or pass buffers of your own (copied in",
                 " * and out). Returns 0, or the number of the step that failed.",
                 f" * The arena of {plan.size_bytes} bytes holds every activation, inputs and "
                 f"outputs included (not reentrant). */"]
    else:
        where = [" * int edgebyoc_network_run(inputs, outputs): inputs and outputs are the "
                 "caller's",
                 " * buffers, in the order below; returns 0, or the number of the step that "
                 "failed.",
                 f" * Activations use one static arena of {plan.size_bytes} bytes (not "
                 f"reentrant). */"]
    lines = [f"/* {name}: deployable network (generated by edgebyoc){suffix}", *where,
             "#ifndef EDGEBYOC_NETWORK_H", "#define EDGEBYOC_NETWORK_H", "#include <stddef.h>", ""]
    if io_in_arena:
        lines.append("#define EDGEBYOC_NETWORK_IO_IN_ARENA 1")
    lines.append(f"#define EDGEBYOC_NETWORK_INPUTS {len(in_specs)}")
    lines.append(f"#define EDGEBYOC_NETWORK_OUTPUTS {len(out_specs)}")
    lines.append(f"#define EDGEBYOC_NETWORK_ARENA_BYTES {plan.size_bytes}")
    for kind, specs in (("INPUT", in_specs), ("OUTPUT", out_specs)):
        for i, (tname, t) in enumerate(specs):
            lines.append(f"/* {kind.lower()} {i}: {tname}, {t.dtype} {list(t.shape)} */")
            lines.append(f"#define EDGEBYOC_{kind}{i}_BYTES {t.nbytes}")
        sizes = ", ".join(f"EDGEBYOC_{kind}{i}_BYTES" for i in range(len(specs))) or "0"
        lines.append(f"#define EDGEBYOC_{kind}_BYTES_LIST {{{sizes}}}")
    lines += ["", _CPP_OPEN.rstrip(),
              f"int {ENTRY}(const void* const* inputs, void* const* outputs);"]
    if io_in_arena:
        lines += ["void* edgebyoc_network_input(int index);   /* NULL past the last */",
                  "void* edgebyoc_network_output(int index);"]
    lines += [_CPP_CLOSE.rstrip(), "#endif", ""]
    return "\n".join(lines)


def _tvm_wrapper(num_inputs: int, num_outputs: int) -> str:
    from .external import packed_wrapper

    count = num_inputs + num_outputs
    kernel = (f"\nint edgebyoc_network_kernel(DLTensor** args, int num_args) {{\n"
              f"  const void* inputs[{max(num_inputs, 1)}];\n"
              f"  void* outputs[{max(num_outputs, 1)}];\n  int i;\n  (void)num_args;\n"
              f"  for (i = 0; i < {num_inputs}; ++i)\n"
              f"    inputs[i] = (const char*)args[i]->data + args[i]->byte_offset;\n"
              f"  for (i = 0; i < {num_outputs}; ++i)\n"
              f"    outputs[i] = (char*)args[{num_inputs} + i]->data + "
              f"args[{num_inputs} + i]->byte_offset;\n"
              f"  return {ENTRY}(inputs, outputs);\n}}\n")
    return "\n" + packed_wrapper(ENTRY, "edgebyoc_network_kernel", count) + kernel
