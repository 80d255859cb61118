"""Activation memory timeline of a compiled model (DFS paper, section III-C).

The estimator reads the IR right after TVM's ``StaticPlanBlockMemory``, before code generation:

- Relax level: every ``R.memory.alloc_storage`` is an allocation event; a storage is released
  after the last use of any tensor carved out of it (``alloc_tensor``, the aliases and views of
  those tensors). Tensors allocated outside the plan (``R.builtin.alloc_tensor``: the outputs)
  count from their allocation on. Model inputs and constants are not counted: they are not
  activations.
- TIR level: each kernel call adds the bytes its PrimFunc allocates internally, measured with
  ``s_tir.analysis.calculate_allocated_bytes`` after TVM's own buffer compaction and storage
  rewriting, only while that kernel runs; ``local`` buffers (a thread's register tiles and
  scalars, which the compiler keeps in registers) are not activation memory and not counted.

One step per kernel call; the step's total is the live Relax storages plus the running kernel's
internal buffers. The peak is the largest total. MB below are 10^6 bytes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from math import prod
from typing import Any

import tvm
from tvm import relax


@dataclass
class MemoryStep:
    index: int
    kernel: str
    relax_bytes: int
    tir_bytes: int
    live: list[tuple[str, int]] = field(default_factory=list)

    @property
    def total(self) -> int:
        return self.relax_bytes + self.tir_bytes

    def to_dict(self) -> dict[str, Any]:
        return {"index": self.index, "kernel": self.kernel, "relax_bytes": self.relax_bytes,
                "tir_bytes": self.tir_bytes, "total_bytes": self.total,
                "live": [list(item) for item in self.live]}


@dataclass
class MemoryTimeline:
    steps: list[MemoryStep]
    #: kernels whose internal buffers could not be measured and allocations whose size depends
    #: on the data (counted as 0, listed in reports)
    unmeasured: list[str] = field(default_factory=list)

    @property
    def peak_bytes(self) -> int:
        return max((s.total for s in self.steps), default=0)

    @property
    def peak_step(self) -> MemoryStep | None:
        return max(self.steps, key=lambda s: s.total, default=None)

    def to_dict(self) -> dict[str, Any]:
        peak = self.peak_step
        return {"peak_bytes": self.peak_bytes,
                "peak_step": peak.index if peak else None,
                "peak_kernel": peak.kernel if peak else None,
                "peak_live": [list(item) for item in peak.live] if peak else [],
                "unmeasured_kernels": self.unmeasured,
                "steps": [s.to_dict() for s in self.steps]}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "MemoryTimeline":
        return cls([MemoryStep(s["index"], s["kernel"], s["relax_bytes"], s["tir_bytes"],
                               [tuple(item) for item in s["live"]]) for s in data["steps"]],
                   list(data.get("unmeasured_kernels", [])))


# -- TIR: bytes allocated inside a kernel --------------------------------------------------------

def _tir_lowering() -> tvm.transform.Pass:
    """TVM's own TIR lowering up to storage rewriting: buffers compacted, reused where dead."""
    from tvm import s_tir, tirx

    return tvm.transform.Sequential([
        s_tir.transform.LowerInitBlock(),
        s_tir.transform.PlanAndUpdateBufferAllocationLocation(),
        s_tir.transform.ConvertBlocksToOpaque(),
        s_tir.transform.CompactBufferAllocation(),
        s_tir.transform.LowerMatchBuffer(),
        s_tir.transform.LowerOpaqueBlock(),
        tirx.transform.FlattenBuffer(),
        tirx.transform.VectorizeLoop(True),
        tirx.transform.StorageRewrite(),
    ])


def kernel_bytes(name: str, func, target: tvm.target.Target) -> int:
    """Bytes a PrimFunc allocates for its internal buffers, ``local`` ones (registers) left
    out (0 when it allocates none)."""
    from tvm.s_tir.analysis import calculate_allocated_bytes

    module = tvm.IRModule({tvm.ir.GlobalVar(name): func.with_attr("target", target)})
    with target:
        lowered = _tir_lowering()(module)
    total = 0
    for lowered_func in lowered.functions.values():
        for scopes in calculate_allocated_bytes(lowered_func).values():
            total += sum(int(v) for scope, v in scopes.items() if str(scope) != "local")
    return total


# -- Relax: storages and their lifetimes ----------------------------------------------------------

def _nbytes(shape_expr, dtype) -> int | None:
    """Bytes of a static shape; ``None`` for a data-dependent one (not known at compile time)."""
    if not all(isinstance(d, tvm.tirx.IntImm) for d in shape_expr.values):
        return None
    dims = [int(d) for d in shape_expr.values]
    return prod(dims) * tvm.DataType(str(dtype)).bits // 8


def _dtype_of(expr) -> str:
    value = getattr(expr, "value", None)
    return str(value if value is not None else expr)


def timeline_of(mod: tvm.IRModule, target: tvm.target.Target) -> MemoryTimeline:
    """The timeline of ``mod`` as it is right after ``StaticPlanBlockMemory``."""
    main = mod["main"]
    bindings = [(b.var, b.value) for block in main.body.blocks for b in block.bindings]
    storage_of: dict[Any, Any] = {}       # tensor var -> its storage key
    storage_size: dict[Any, int] = {}
    storage_name: dict[Any, str] = {}
    first: dict[Any, int] = {}
    last: dict[Any, int] = {}
    kernels: list[tuple[int, str, Any]] = []
    dynamic: list[str] = []  # allocations whose size depends on the data: counted as 0

    def touch(expr, index):
        def visit(node):
            if isinstance(node, relax.Var) and node in storage_of:
                key = storage_of[node]
                last[key] = max(last.get(key, index), index)
        relax.analysis.post_order_visit(expr, visit)

    for index, (var, value) in enumerate(bindings):
        op = value.op if isinstance(value, relax.Call) else None
        op_name = op.name if isinstance(op, tvm.ir.Op) else ""
        if op_name == "relax.memory.alloc_storage":
            storage_of[var] = var
            size = value.args[0].values[0]
            storage_size[var] = int(size) if isinstance(size, tvm.tirx.IntImm) else 0
            if not isinstance(size, tvm.tirx.IntImm):
                dynamic.append(var.name)
            storage_name[var] = var.name
            first[var] = last[var] = index
            continue
        if op_name == "relax.memory.alloc_tensor":
            storage_of[var] = storage_of[value.args[0]]
            continue
        if op_name == "relax.builtin.alloc_tensor":
            storage_of[var] = var
            size = _nbytes(value.args[0], _dtype_of(value.args[1]))
            storage_size[var] = size or 0
            if size is None:
                dynamic.append(var.name)
            storage_name[var] = var.name
            first[var] = last[var] = index
            continue
        touch(value, index)
        if isinstance(value, relax.Var) and value in storage_of:
            storage_of[var] = storage_of[value]            # an alias
        elif op_name in ("relax.reshape", "relax.memory.view") and value.args[0] in storage_of:
            storage_of[var] = storage_of[value.args[0]]    # a view of the same memory
        if isinstance(op, tvm.ir.GlobalVar) and isinstance(mod[op], tvm.tirx.PrimFunc):
            kernels.append((index, op.name_hint, mod[op]))
        elif isinstance(op, relax.ExternFunc):
            kernels.append((index, str(op.global_symbol), None))
        elif op_name in ("relax.call_tir", "relax.call_dps_packed") and value.args:
            callee = value.args[0]
            name = callee.name_hint if isinstance(callee, tvm.ir.GlobalVar) \
                else str(getattr(callee, "global_symbol", callee))
            func = mod[callee] if isinstance(callee, tvm.ir.GlobalVar) else None
            kernels.append((index, name, func))
    touch(main.body.body, len(bindings))

    cache: dict[str, int] = {}
    steps = []
    unmeasured = []
    for number, (index, name, func) in enumerate(kernels):
        if name not in cache:
            try:
                cache[name] = kernel_bytes(name, func, target) \
                    if isinstance(func, tvm.tirx.PrimFunc) else 0
            except Exception:  # noqa: BLE001 - an estimate must not fail the compile
                cache[name] = 0
                unmeasured.append(name)
        live = [(storage_name[key], storage_size[key]) for key in storage_size
                if first[key] <= index <= last[key]]
        steps.append(MemoryStep(number, name, sum(size for _, size in live), cache[name],
                                sorted(live, key=lambda item: -item[1])))
    return MemoryTimeline(steps, unmeasured + [f"dynamic allocation {name}" for name in dynamic])


class TimelineRecorder:
    """A pass placed right after ``StaticPlanBlockMemory`` that records the timeline."""

    def __init__(self, target: tvm.target.Target):
        self.target = target
        self.timeline: MemoryTimeline | None = None
        #: bytes of the arena the build carves its planned tensors from (set by
        #: ``memory.storage.ActivationArena``; ``None``: the build has none)
        self.arena_bytes: int | None = None

    def pass_(self) -> tvm.transform.Pass:
        @tvm.transform.module_pass(opt_level=0, name="edgebyoc.MemoryTimeline")
        def _record(mod: tvm.IRModule, _ctx) -> tvm.IRModule:
            self.timeline = timeline_of(mod, self.target)
            return mod

        return _record


#: the formats ``plot_timelines`` writes
PLOT_SUFFIXES = (".png", ".pdf", ".svg")


def plot_timelines(timelines: dict[str, MemoryTimeline], path: str, title: str,
                   levels: dict[str, int] | None = None) -> None:
    """Write the timelines (label -> timeline) on one plot (the paper's Fig. 4), as PNG, PDF
    or SVG by the suffix of ``path`` (``PLOT_SUFFIXES``), atomically; ``levels`` (label ->
    bytes) are drawn as horizontal lines (e.g. the RAM an MCU build's ELF needs)."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as err:
        from ..errors import EdgebyocError
        raise EdgebyocError("memory plots need matplotlib (pip install 'edgebyoc[plot]')") from err
    figure, axes = plt.subplots(figsize=(9, 4.5))
    for label, timeline in timelines.items():
        totals = [s.total / 1e6 for s in timeline.steps]
        axes.plot(range(len(totals)), totals, label=f"{label} (peak {max(totals, default=0):.2f} MB)",
                  linewidth=1.5)
    for label, size in (levels or {}).items():
        axes.axhline(size / 1e6, linestyle="--", linewidth=1.0,
                     label=f"{label} ({size / 1e6:.3f} MB)")
    axes.set_xlabel("kernel call")
    axes.set_ylabel("activation memory (MB)")
    axes.set_title(title)
    axes.grid(alpha=0.3)
    axes.legend()
    figure.tight_layout()
    from ..runtime.safe_output import write_file_atomically

    try:
        write_file_atomically(path, lambda temporary: figure.savefig(
            temporary, dpi=120, format=Path(path).suffix.lstrip(".").lower() or "png"),
            "the memory plot")
    finally:
        plt.close(figure)
