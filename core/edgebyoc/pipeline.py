"""The compile pipeline, one stage after another (DESIGN.md, "The compile pipeline").

    import     file / ModelProto / IRModule -> ImportedModel              (frontend.import_model)
    prepare    the target's import transforms (before folding: int8 weights still visible),
               constant folding, the target's pre_partition transforms and module layouts
    partition  patterns, cost-based dispatch, regions, host fallback, partial quantization at
               region boundaries                                           (partition/)
    codegen    plugins' code for the regions (codegen/external)
    memory     with dfs / memory_budget: the depth-first plan of the host part (memory/)
    build      the host library with edgebyoc's CPU schedules; every constant lifted into the
               metadata table; the activation memory timeline recorded after static planning
    package    CompiledModel: runnable in memory, ``save(dir)`` writes the artifact

``compile`` returns a ``CompiledModel``; ``load`` reads a saved artifact back.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import platform
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path
from dataclasses import dataclass, replace
from typing import Any, Callable, Iterator, Mapping, Sequence

import numpy as np

from .version import __version__
from .codegen.external import ExternalCodegen, compile_options
from .codegen.host import build_host, host_cpu, host_target
from .errors import (PLUGIN_FAULTS, ArtifactError, CompileError, EdgebyocError, PluginError,
                     TargetError, first_line, release_tvm_frames)
from .frontend import ImportedModel, InputShapes, TensorSpec, import_model
from .index_guards import check_constant_indices, guard_runtime_indices
from .rewrites import float_floor_mod_edges, split_wide_concats
from .resources import check_memory, format_bytes
from .memory import budget_error, dfs_skipped
from .memory.timeline import TimelineRecorder
from .partition import PartitionResult, partition_module
from .partition.quantize import quantize_regions
from .plugins import PluginRegistry, default_registry
from .report import build_report, predicted_cycles, render_markdown
from .runtime.artifact import (HOST_LIBRARY, HostRunner, copy_artifact, read_manifest,
                               read_report, write_artifact)
from .runtime.constants import ConstantTable, load_constants
from .runtime.external import ExternalRegion, bind_regions, loaders_for
from .session import CompileSession
from .target import Cost, OutputKind, Target


class StageClock:
    """Times the pipeline stages; prints each one to stderr when ``progress`` is on."""

    def __init__(self, progress: bool):
        self.progress = progress
        self.subject = ""  # the model, named in stage failures once known
        self.stages: list[dict[str, Any]] = []
        self._console = None
        if progress:
            from rich.console import Console
            self._console = Console(stderr=True)

    @contextmanager
    def __call__(self, name: str, detail: str = "") -> Iterator[None]:
        start = time.perf_counter()
        status = None
        if self._console is not None and self._console.is_terminal:
            status = self._console.status(f"{name} {detail}".strip())
            status.start()
        try:
            yield
        except EdgebyocError as err:
            release_tvm_frames(err)
            raise
        except Exception as err:  # noqa: BLE001 - TVM raises many kinds; name the stage
            release_tvm_frames(err)
            prefix = f"{self.subject}: " if self.subject else ""
            raise CompileError(f"{prefix}{name} stage failed: {type(err).__name__}: "
                               f"{first_line(err)}") from err
        finally:
            if status is not None:
                status.stop()
        seconds = time.perf_counter() - start
        self.stages.append({"name": name, "seconds": round(seconds, 3)})
        if self._console is not None:
            self._console.print(f"[green]✓[/green] {name:<10} {seconds:6.2f} s  {detail}",
                                highlight=False)


    def note(self, text: str) -> None:
        """A remark between stages (shown only with progress on)."""
        if self._console is not None:
            self._console.print(f"[yellow]![/yellow] {text}", highlight=False)


# -- stages -------------------------------------------------------------------------------------

def prepare(mod, target: Target, registry: PluginRegistry, source: str = "model"):
    """The target's ``import`` transforms, constant folding, constant index operands checked
    (``index_guards``), the target's ``pre_partition`` transforms, the modules' layouts."""
    from tvm import relax

    for transform in _flatten(registry.call(target.name, "edgebyoc_transforms", target=target,
                                            stage="import")):
        mod = _apply_plugin_pass(transform, mod, target, "import")
    _check_tensor_sizes(mod, source)  # before folding materialises any of them
    mod = float_floor_mod_edges(split_wide_concats(mod))
    mod = relax.transform.FoldConstant()(mod)
    _reject_empty_constants(mod)
    check_constant_indices(mod, source)
    for transform in _flatten(registry.call(target.name, "edgebyoc_transforms", target=target,
                                            stage="pre_partition")):
        mod = _apply_plugin_pass(transform, mod, target, "pre_partition")
    layouts: dict[str, list[str]] = {}
    for module in target.modules:
        for op, wanted in module.layouts.items():
            if op in layouts and layouts[op] != list(wanted):
                raise TargetError(f"target {target.name!r}: modules ask for different layouts "
                                  f"of {op} ({layouts[op]} vs {list(wanted)})")
            layouts[op] = list(wanted)
    if layouts:
        # constant weights are transformed here, once, by the folding after the conversion
        mod = relax.transform.ConvertLayout(layouts)(mod)
        mod = relax.transform.FoldConstant()(mod)
    return mod


def _apply_plugin_pass(transform, mod, target: Target, stage: str):
    try:
        return transform(mod)
    except PLUGIN_FAULTS as err:
        raise CompileError(f"target {target.name!r}: {stage} transform "
                           f"{getattr(getattr(transform, 'info', None), 'name', transform)} "
                           f"failed: {first_line(err)}") from err


def _check_tensor_sizes(mod, source: str) -> None:
    """``resources.ResourceError`` when a tensor of the graph is larger than the memory the
    compile may use (constant folding would allocate it, a run would need it)."""
    from tvm import relax

    from .relax_info import nbytes

    largest = [0, None]

    def visit(expr):
        size = nbytes(getattr(expr, "ty", None)) if isinstance(
            getattr(expr, "ty", None), relax.TensorType) else 0
        if size > largest[0]:
            largest[:] = [size, expr]

    for func in mod.functions.values():
        if isinstance(func, relax.Function):
            relax.analysis.post_order_visit(func.body, visit)
    if largest[1] is not None:
        check_memory(f"{source}: a tensor of the model (type {largest[1].ty})", largest[0])


def _reject_empty_constants(mod) -> None:
    """TVM 0.27 writes zero-size constants into the executable but cannot read them back."""
    import tvm
    from tvm import relax

    empty = []

    def visit(expr):
        shape = getattr(getattr(expr, "ty", None), "shape", None)
        if isinstance(expr, tvm.ir.expr.Constant) and hasattr(shape, "values") \
                and any(getattr(d, "value", 1) == 0 for d in shape.values):
            empty.append([int(d) for d in shape.values])

    for func in mod.functions.values():
        if isinstance(func, relax.Function):
            relax.analysis.post_order_visit(func.body, visit)
    if empty:
        raise CompileError(f"the model holds a zero-size constant (shape {empty[0]}), which "
                           f"TVM {tvm.__version__} cannot serialize; make that tensor an input")


def _flatten(results: Any) -> list:
    flat = []
    for item in results or []:
        flat.extend(item if isinstance(item, (list, tuple)) else [item])
    return flat


def post_partition(mod, target: Target, registry: PluginRegistry):
    for transform in _flatten(registry.call(target.name, "edgebyoc_transforms", target=target,
                                            stage="post_partition")):
        mod = _apply_plugin_pass(transform, mod, target, "post_partition")
    return mod


def _external_regions(partition: PartitionResult, codegen: ExternalCodegen,
                      constants: ConstantTable) -> tuple[list[ExternalRegion], dict[str, Any]]:
    """The JSON / blob regions with the constants each reads, and their payloads."""
    regions, payloads = [], {}
    for symbol, output in codegen.outputs.items():
        if output.kind is OutputKind.C_SOURCE:
            continue
        _, region = partition.functions[symbol]
        used = tuple(e.name for e in constants.entries if f"external:{symbol}" in e.users)
        ret = region.function.ret_ty
        num_outputs = len(ret.fields) if hasattr(ret, "fields") else 1
        suffix = "json" if output.kind is OutputKind.JSON_GRAPH else "bin"
        regions.append(ExternalRegion(symbol, region.module, output.kind.value,
                                      output.loader_kind, f"regions/{symbol}.{suffix}", used,
                                      num_outputs))
        payloads[symbol] = output.graph_json if output.kind is OutputKind.JSON_GRAPH \
            else output.blob
    return regions, payloads


def compile(model: Any, target: str = "host", options: Mapping[str, Any] | None = None,
            input_shapes: InputShapes | None = None,
            constant_inputs: Mapping[str, Any] | None = None,
            registry: PluginRegistry | None = None,
            progress: bool = False, schedules: bool = True,
            host_cpu_name: str | None = None, cost_metric: str = "latency",
            calibration: Sequence[Mapping[str, Any]] | None = None, dfs: bool | None = None,
            memory_budget: int | None = None, max_recompute: float = 1.5,
            io_in_arena: bool = False, safe: bool = False) -> "CompiledModel":
    """Compile ``model`` for ``target``; see the module docstring for the stages.

    ``options`` are the target's options (strings are parsed); ``input_shapes`` fixes dynamic
    input dimensions; ``constant_inputs`` turns ONNX graph inputs into constants;
    ``schedules=False`` skips edgebyoc's CPU schedules (TVM's default loops); ``host_cpu_name``
    overrides the LLVM CPU (``"generic"`` for a portable library); ``cost_metric`` is what
    dispatch between modules minimises: ``"latency"`` or ``"energy"``; ``calibration`` is a
    list of input dicts measuring the scales of partial quantization (modules that quantize).
    ``dfs`` plans depth-first tiling of the host part for the lowest activation peak within
    ``max_recompute`` times the model's MACs: ``None`` (the default) uses it when it lowers the
    measured peak by at least ``memory.AUTO_MIN_GAIN`` (20 %; not with ``schedules=False``)
    and its build runs within ``memory.speed.AUTO_MAX_SLOWDOWN`` (5 %) of the untiled one's
    time, measured at compile time and cached per model and CPU (not with offloaded regions),
    ``True`` whenever it lowers the peak at all, ``False`` never; ``memory_budget`` (bytes,
    implies ``dfs``) asks for the least re-computation that keeps the peak within the budget
    instead; for a C project the budget is its total activation RAM (arena plus the caller's
    input / output buffers). ``io_in_arena`` (C projects) puts the inputs and outputs in the
    arena, so their memory is reused once dead and the caller holds no buffer of its own.
    ``safe`` checks every host kernel's unproven memory accesses at run time
    (``codegen.bounds``: for untrusted models; its cost is in docs/performance.md).
    """
    if dfs is False and memory_budget is not None:
        raise CompileError("a memory budget needs depth-first planning: do not combine it "
                           "with dfs=False (--no-dfs)")
    registry = registry or default_registry()
    the_target, resolved = _target(registry, target, options)
    if io_in_arena and not the_target.c_project:
        raise CompileError(f"io_in_arena (--io-in-arena) places the inputs and outputs in a C "
                           f"project's arena; target {the_target.name!r} deploys no C project")
    clock = StageClock(progress)
    with CompileSession(the_target.name, _plugin_of(registry, the_target)) as session:
        with clock("import", str(model) if isinstance(model, (str, os.PathLike)) else ""):
            imported = import_model(model, input_shapes, constant_inputs)
        clock.subject = imported.source
        with clock("prepare"):
            mod = prepare(imported.mod, the_target, registry, imported.source)
        with clock("partition"):
            partition, mod = _partition(mod, imported, the_target, registry, resolved,
                                        cost_metric, calibration, session)
        codegen = ExternalCodegen(the_target, registry, partition.functions, resolved, session)
        with clock("codegen", f"{len(partition.functions)} offloaded region(s)"):
            mod = codegen.run(mod)
    mode = ("budget" if memory_budget is not None else
            "auto" if dfs is None else "on" if dfs else "off")
    mod, project, project_info = _deploy(mod, clock, codegen, the_target, registry, resolved,
                                         imported, io_in_arena, mode, memory_budget,
                                         partition)
    build = HostBuild(host_cpu_name or host_cpu(), schedules, safe)
    dfs_choice, dfs_report, mod, timed = _memory(mod, clock, project, the_target, build,
                                                 partition, max_recompute,
                                                 memory_budget, mode, imported)
    with clock("build", f"host library for {build.cpu}" + (", bound-checked" if safe else "")):
        # the build the depth-first timing made and kept, or a new one
        executable, constants, memory = timed or _host_build(
            mod, build, dfs_choice.plan if dfs_choice else None)
    host = {"cpu": build.cpu, "schedules": schedules, "machine": platform.machine(),
            "safe": safe}
    compiled = _package(executable, imported, the_target, resolved, registry, partition,
                        codegen, constants, memory, clock, host, dfs_report, project,
                        project_info)
    check_run_memory(compiled.report, compiled.inputs, compiled.outputs, imported.source)
    return compiled


def _target(registry: PluginRegistry, name: str, options) -> tuple[Target, dict[str, Any]]:
    """The target called ``name`` and its options for this compile (parsed and checked)."""
    target = registry.target(name)
    try:
        return target, target.resolve_options(options)
    except ValueError as err:
        raise TargetError(str(err)) from err


def _plugin_of(registry: PluginRegistry, target: Target) -> tuple[str, str]:
    """(plugin name, version) owning ``target`` (empty for the core's host target)."""
    owner = registry.owner(target.name)
    return (owner, registry.info(owner).version) if owner else ("", "")


def _deploy(mod, clock: "StageClock", codegen: "ExternalCodegen", target: Target,
            registry: PluginRegistry, options: dict[str, Any], imported: ImportedModel,
            io_in_arena: bool = False, mode: str = "off", memory_budget: int | None = None,
            partition: "PartitionResult | None" = None):
    """(module, project, report entry): a ``c_project`` target's deployable C project, which
    the artifact then runs; ``None`` (and why) where the project cannot express the network.
    ``mode`` (``"off"``, ``"auto"``, ``"on"``, ``"budget"``) and ``memory_budget`` choose its
    depth-first row streaming (``_streaming``)."""
    if not target.c_project:
        return mod, None, None
    with clock("c_project", "deployable C project"):
        project, info = _c_project(mod, codegen, target, registry, options, imported,
                                   io_in_arena, mode, memory_budget, partition)
        if project is not None:
            mod = _run_project(mod, project)
    if project is None:
        clock.note(f"no C project: {info['reason']}; the TVM host build runs instead")
    return mod, project, info


def _package(executable, imported: ImportedModel, target: Target, options: dict[str, Any],
             registry: PluginRegistry, partition: PartitionResult, codegen: "ExternalCodegen",
             constants: ConstantTable, memory: TimelineRecorder, clock: "StageClock",
             host: dict[str, Any], dfs_report, project, project_info) -> "CompiledModel":
    """The ``CompiledModel``: its report, manifest, constants and region payloads."""
    external, payloads = _external_regions(partition, codegen, constants)
    report = build_report(imported, target, options, partition.operators, clock.stages, host,
                          partition.regions, constants.nbytes, memory.timeline, dfs_report,
                          project, project_info, partition.search_seconds,
                          partition.layout_transforms)
    manifest = _manifest(report, target, options, registry, host, imported, external, codegen,
                         project)
    return CompiledModel(executable, imported.inputs, imported.outputs, report, manifest,
                         constants=constants.arrays(), constant_table=constants,
                         external=external, payloads=payloads, imported=imported,
                         registry=registry, project=project, regions=codegen.regions)


def _partition(mod, imported: ImportedModel, target: Target, registry: PluginRegistry,
               options: dict[str, Any], cost_metric: str, calibration, session):
    """(partition result, module): regions, post-partition transforms, partial quantization."""
    token = hashlib.sha256(f"{imported.sha256}{target.name}{sorted(options.items())}"
                           .encode()).hexdigest()[:8]
    try:
        partition = partition_module(mod, target, registry, cost_metric, token, options,
                                     session)
    except ValueError as err:
        raise CompileError(str(err)) from err
    mod = post_partition(partition.mod, target, registry)
    mod = quantize_regions(mod, partition, target, calibration,
                           [s.name for s in imported.inputs])
    # run-time index operands of the host's operators checked right before their kernels
    return partition, guard_runtime_indices(mod)


def _memory(mod, clock: "StageClock", project, target: Target, build: "HostBuild",
            partition: PartitionResult, max_recompute: float, memory_budget: int | None,
            mode: str, imported: ImportedModel):
    """(choice, report entry, module to build, its build when the timing made one already)
    for ``mode`` (``"off"``, ``"auto"``, ``"on"``, ``"budget"``):
    depth-first planning of the host part, or why there is none; for a C project, the entry
    of its row streaming (planned in ``_streaming``). In automatic mode a plan
    is kept only if its build runs within ``memory.speed.AUTO_MAX_SLOWDOWN`` of the untiled
    one (``_keep_if_fast``)."""
    if project is not None:
        if memory_budget is not None and project.total_activation_bytes > memory_budget:
            io = (f" + {project.io_bytes} bytes of the caller's inputs and outputs "
                  f"(--io-in-arena puts them in the arena)" if project.io_bytes else "")
            raise budget_error(
                memory_budget, f"the C project needs {project.total_activation_bytes} bytes "
                f"of activation RAM: its static arena of {project.arena.size_bytes} bytes "
                f"(at least {project.arena.lower_bound_bytes} alive at once){io}; "
                f"depth-first streaming: {(project.streaming or {}).get('reason', 'off')}",
                f" on target {target.name}")
        info = project.streaming or {}
        return (None, {**dfs_skipped(mode, info.get("reason", "")),
                       "enabled": bool(info.get("enabled")), "c_project": info}, mod, None)
    if mode == "off":
        return None, dfs_skipped(mode, "turned off"), mod, None
    if mode == "auto" and not build.schedules:
        return None, dfs_skipped(mode, "--no-schedules keeps TVM's default build (--dfs tiles "
                                       "it anyway)"), mod, None
    with clock("memory", "depth-first plan search"):
        choice, planned = _plan_memory(mod, build, partition.operators,
                                       max_recompute, memory_budget, mode)
    timed = None
    if mode == "auto" and choice is not None and choice.plan.kernels:
        with clock("memory", "timing the depth-first build against the untiled one"):
            choice, timed = _keep_if_fast(choice, mod, planned, build, imported)
        if not choice.plan.kernels:
            planned = mod
    report = choice.to_dict() if choice else dfs_skipped(mode, "no chain of convolutions to "
                                                               "tile")
    return choice, report, planned, timed


@dataclass(frozen=True)
class HostBuild:
    """How the host library is built: the LLVM CPU, edgebyoc's schedules or TVM's default
    loops, run-time bound checks (``codegen.bounds``)."""

    cpu: str
    schedules: bool = True
    safe: bool = False


def _host_build(mod, build: HostBuild, plan):
    """(executable, its constant table, its memory timeline recorder): the host library."""
    constants, memory = ConstantTable(), TimelineRecorder(host_target(build.cpu))
    executable = build_host(mod, host_target(build.cpu), schedules=build.schedules,
                            constants=constants, memory=memory, dfs=plan, safe=build.safe)
    return executable, constants, memory


def _keep_if_fast(choice, untiled, tiled, build: HostBuild, imported: ImportedModel):
    """(``choice``, or no plan (with the reason) when the tiled build runs slower than
    ``memory.speed.AUTO_MAX_SLOWDOWN`` times the untiled one here (measured, cached per model
    and CPU) or cannot be timed because the model has offloaded regions; the ``_host_build``
    of the kept module when the timing built it, else ``None``)."""
    import tvm
    from tvm_ffi import structural_hash

    from .frontend import random_inputs
    from .memory import DfsPlan
    from .memory.speed import AUTO_MAX_SLOWDOWN, cache_key, cached_slowdown, measured_slowdown

    def dropped(reason: str):
        return replace(choice, plan=DfsPlan(), peak_bytes=choice.baseline_peak_bytes,
                       recompute=1.0, reason=reason)

    if _has_offloaded_regions(untiled):
        return dropped("automatic mode uses a depth-first plan only when it runs within "
                       f"{AUTO_MAX_SLOWDOWN:.2f}x the untiled build's time, which it measures "
                       "on the host build alone, not with offloaded regions (--dfs or "
                       "--memory-budget use it)"), None
    key = cache_key(structural_hash(untiled), structural_hash(tiled),
                    json.dumps(choice.plan.to_dict(), sort_keys=True, default=str), build.cpu,
                    os.environ.get("TVM_NUM_THREADS", os.cpu_count()), tvm.__version__,
                    __version__)
    ratio, cached, builds = cached_slowdown(key), True, None
    if ratio is None:  # measure: build both (the one kept serves the compile)
        builds = [_host_build(untiled, build, None), _host_build(tiled, build, choice.plan)]
        runners = [HostRunner(executable, imported.inputs, imported.outputs,
                              list(constants.arrays().values()))
                   for executable, constants, _ in builds]
        inputs = random_inputs(imported.inputs, seed=0)
        ratio, cached = measured_slowdown(key, lambda: runners[0].run(inputs),
                                          lambda: runners[1].run(inputs))
    choice = replace(choice, slowdown=round(ratio, 3))
    if ratio > AUTO_MAX_SLOWDOWN:
        return dropped(f"the depth-first build (peak {choice.peak_bytes / 1e6:.3f} MB against "
                       f"{choice.baseline_peak_bytes / 1e6:.3f} MB) ran {ratio:.2f}x the untiled "
                       f"build's time here{' (cached measurement)' if cached else ''}; "
                       f"automatic mode accepts up to {AUTO_MAX_SLOWDOWN:.2f}x (--dfs or "
                       f"--memory-budget use it)"), None if builds is None else builds[0]
    return choice, None if builds is None else builds[1]


def _has_offloaded_regions(mod) -> bool:
    """Whether ``main`` calls generated region code (external modules, packed functions)."""
    from tvm import relax

    if mod.attrs is not None and mod.attrs.get("external_mods"):
        return True
    found = []

    def visit(node):
        if isinstance(node, relax.ExternFunc):
            found.append(node)

    relax.analysis.post_order_visit(mod["main"].body, visit)
    return bool(found)


def _manifest(report, target: Target, options, registry: PluginRegistry, host, imported,
              external, codegen: ExternalCodegen, project) -> dict[str, Any]:
    return {
        "edgebyoc_version": __version__,
        "tvm_version": _tvm_version(),
        "model": report["model"],
        "target": {"name": target.name, "options": options,
                   "plugin": registry.owner(target.name) or None},
        "plugins": registry.versions(),
        "host": host,
        "inputs": [s.to_dict() for s in imported.inputs],
        "outputs": [s.to_dict() for s in imported.outputs],
        "external": [r.to_dict() for r in external],
        "c_source_regions": sorted(s for s, o in codegen.outputs.items()
                                   if o.kind is OutputKind.C_SOURCE),
        "c_project": project.to_dict() if project is not None else None,
    }


def _c_project(mod, codegen: ExternalCodegen, target: Target, registry: PluginRegistry,
               options: dict[str, Any], imported: ImportedModel, io_in_arena: bool = False,
               mode: str = "off", memory_budget: int | None = None,
               partition: "PartitionResult | None" = None):
    """(project, report entry): the deployable C project, or ``None`` and why not."""
    from .codegen.cproject import ProjectUnsupported

    name = "".join(c if c.isalnum() else "_" for c in imported.name) or "network"
    try:
        project = _streaming(mod, codegen, name, imported, target, io_in_arena, mode,
                             memory_budget, _StreamPricer(partition, registry, target, options))
    except ProjectUnsupported as err:
        return None, {"generated": False, "reason": str(err)}
    extra = registry.call(target.name, "edgebyoc_project_files", target=target, options=options,
                          sources=list(project.translation_units)) or {}
    if not isinstance(extra, Mapping) or not all(isinstance(k, str) and isinstance(v, str)
                                                 for k, v in extra.items()):
        raise PluginError(f"target {target.name!r}: edgebyoc_project_files must return a "
                          f"mapping of relative path -> text")
    clash = sorted(set(extra) & set(project.files))
    if clash or any(Path(k).is_absolute() or ".." in Path(k).parts for k in extra):
        raise PluginError(f"target {target.name!r}: edgebyoc_project_files may not write "
                          f"{(clash or sorted(extra))[0]}")
    project.files.update(extra)
    return project, project.to_dict()


def _streaming(mod, codegen: ExternalCodegen, name: str, imported: ImportedModel,
               target: Target, io_in_arena: bool, mode: str, memory_budget: int | None,
               price: Callable[[Any], float | None]):
    """The C project with the depth-first row streaming ``mode`` asks for
    (``codegen.cstream``), each streamed call computing a band of ``STREAM_BANDS`` rows:

    - ``"on"``: the smallest activation RAM (one row per call), the fewest calls among the
      bands that reach it;
    - ``"budget"``: the widest band (fewest calls) whose plan fits ``memory_budget``, streaming
      only until it fits; when none fits, the smallest plan (the pipeline then names it);
    - ``"auto"``: the widest band that lowers the activation RAM by ``memory.AUTO_MIN_GAIN``
      or more at a predicted latency (``price``: the extra cycles, ``None`` if unknown) within
      ``memory.speed.AUTO_MAX_SLOWDOWN`` of the untiled project's (the memory rule alone
      where the target predicts no whole-network latency); else none, with the reason;
    - ``"off"``: none.
    """
    from .codegen.cproject import build_project
    from .memory import AUTO_MIN_GAIN
    from .memory.speed import AUTO_MAX_SLOWDOWN

    def build(streaming: str, band: int = 1):
        return build_project(mod, codegen.outputs, name, [s.name for s in imported.inputs],
                             [s.name for s in imported.outputs], f"target {target.name}",
                             io_in_arena, streaming, memory_budget, band=band)

    def priced(project):  # its predicted extra cycles, computed once, where they are read
        if "predicted_extra_cycles" not in project.streaming:
            project.streaming["predicted_extra_cycles"] = price(project)
        return project

    untiled = build("off")
    untiled.streaming = {"enabled": False, "mode": mode, "reason": "turned off", "chains": [],
                         "extra_macs": 0}
    if mode == "off":
        return untiled
    base_total, base_cycles = untiled.total_activation_bytes, price.whole
    tried = {band: build("budget" if mode == "budget" else "on", band)
             for band in STREAM_BANDS}
    usable = [b for b in STREAM_BANDS if tried[b].streaming["chains"]]
    if mode == "on":
        best = min(tried[b].total_activation_bytes for b in usable) if usable else None
        chosen = max((b for b in usable if tried[b].total_activation_bytes == best),
                     default=None)
    elif mode == "budget":
        fits = [b for b in usable if tried[b].total_activation_bytes <= memory_budget]
        chosen = max(fits) if fits else (min(usable, key=lambda b: (
            tried[b].total_activation_bytes, -b)) if usable else None)
    else:
        def fast(band):
            extra = priced(tried[band]).streaming["predicted_extra_cycles"]
            return base_cycles is None or (extra is not None and
                                           base_cycles + extra <= AUTO_MAX_SLOWDOWN * base_cycles)

        good = [b for b in usable if fast(b) and
                tried[b].total_activation_bytes <= (1 - AUTO_MIN_GAIN) * base_total]
        chosen = max(good) if good else None
    if chosen is None:
        why = "no chain of layers to stream lowers the activation RAM"
        if mode == "auto" and usable:
            smallest = min(usable, key=lambda b: tried[b].total_activation_bytes)
            why = (f"automatic mode streams only to save {AUTO_MIN_GAIN:.0%} of the activation "
                   f"RAM at a predicted latency within {AUTO_MAX_SLOWDOWN:.2f}x: bands of "
                   f"{smallest} row(s) reach {tried[smallest].total_activation_bytes} bytes "
                   f"against "
                   f"{base_total}{_slowdown_text(priced(tried[smallest]), base_cycles)} (--dfs or "
                   f"--memory-budget stream anyway)")
        untiled.streaming.update(reason=why)
        return untiled
    project = priced(tried[chosen])
    chains = project.streaming["chains"]
    project.streaming.update(
        enabled=True, mode=mode, untiled_total_bytes=base_total, band_rows=chosen,
        baseline_memory=untiled.timeline.to_dict(),
        reason=f"{len(chains)} chain(s) of layers streamed in bands of {chosen} row(s): "
               f"{project.total_activation_bytes} bytes of activation RAM against {base_total} "
               f"untiled{_slowdown_text(project, base_cycles)}")
    return project


def _slowdown_text(project, base_cycles: float | None) -> str:
    extra = (project.streaming or {}).get("predicted_extra_cycles")
    if base_cycles is None or extra is None or not base_cycles:
        return ""
    return f", predicted latency {(base_cycles + extra) / base_cycles:.2f}x the untiled build's"


#: rows per streamed call the planner tries (``_streaming``)
STREAM_BANDS = (1, 2, 4, 8)


class _StreamPricer:
    """``pricer(project)``: the predicted cycles a C project's row streaming adds, each
    streamed region's calls priced band by band by its module's cost model
    (``codegen.cstream.band_layer``: every call loads the layer's weights again and reads its
    halo rows) minus its whole-layer cycles; ``None`` where a region cannot be priced so.
    ``whole``: the untiled network's predicted cycles (regions and host operators), or
    ``None``."""

    def __init__(self, partition: PartitionResult | None, registry: PluginRegistry,
                 target: Target, options: dict[str, Any]):
        self.partition, self.registry, self.target, self.options = (partition, registry,
                                                                    target, options)
        self.prices: dict = {}
        self.whole = None if partition is None else predicted_cycles(
            target, partition.regions, partition.operators)[2]

    def __call__(self, project) -> float | None:
        from .codegen.cstream import band_layer

        if self.partition is None:
            return None
        by_symbol = {symbol: region for region in self.partition.regions
                     for symbol in region.symbols}
        extra = 0.0
        for symbol, calls in project.region_calls.items():
            region = by_symbol.get(symbol)
            if region is None or len(region.candidates) != 1 or \
                    region.predicted_cycles is None or region.candidates[0].schedule is None:
                return None
            candidate = region.candidates[0]
            for y0, y1 in calls:
                workload, schedule = band_layer(candidate.workload, candidate.schedule, y0, y1)
                key = (workload.key(), schedule, candidate.module.name)
                if key not in self.prices:
                    cost = self.registry.call(
                        self.target.name, "edgebyoc_cost", target=self.target,
                        module=candidate.module, workload=workload, schedule=schedule,
                        options=self.options)
                    self.prices[key] = None if not isinstance(cost, Cost) or \
                        cost.latency_cycles is None else float(cost.latency_cycles)
                if self.prices[key] is None:
                    return None
                extra += self.prices[key]
            extra -= region.predicted_cycles
        return extra


def _run_project(mod, project):
    """``mod`` whose ``main`` calls the project's ``edgebyoc_network_run`` (host binding), with
    the project's translation units as its only linked C."""
    import tvm
    from tvm import relax

    from .codegen.cproject import ENTRY

    main = mod["main"]
    params = [relax.Var(p.name, p.ty) for p in main.params]
    ret = main.ret_ty
    out_ty = list(ret.fields) if isinstance(ret, relax.TupleType) else ret
    builder = relax.BlockBuilder()
    with builder.function("main", params, attrs=dict(main.attrs) if main.attrs else None):
        with builder.dataflow():
            out = builder.emit_output(relax.call_dps_packed(
                relax.ExternFunc(ENTRY), relax.Tuple(params), out_ty))
        builder.emit_func_output(out)
    wrapped = builder.get()
    create = tvm.get_global_func("runtime.CSourceModuleCreate")
    units = [create(project.runtime_source("host"), "c", [ENTRY], [])]
    attrs = {k: v for k, v in (mod.attrs or {}).items() if k != "external_mods"}
    for key, value in attrs.items():
        wrapped = wrapped.with_attr(key, value)
    return wrapped.with_attr("external_mods", units)


def _plan_memory(mod, build: HostBuild, operators, max_recompute: float,
                 memory_budget: int | None, mode: str):
    """(choice, module to build): the depth-first plan chosen by measuring candidates with the
    timeline estimator. A channels-last model is searched in its NCHW variant (``memory.
    planner.nchw_variant``), which is what gets built when a plan is used."""
    from .codegen.host import host_pipeline
    from .memory import AUTO_MIN_GAIN, choose_dfs_plan
    from .memory.planner import nchw_variant

    target = host_target(build.cpu)
    searched = nchw_variant(mod) or mod

    def measure(plan):
        recorder = TimelineRecorder(target)
        with target:
            host_pipeline(target, build.schedules, memory=recorder, dfs=plan)(
                searched if plan is not None and plan.kernels else mod)
        return recorder.timeline

    total_macs = sum(row["macs"] for row in operators)
    choice = choose_dfs_plan(searched, total_macs, measure, max_recompute, memory_budget,
                             min_gain=AUTO_MIN_GAIN if mode == "auto" else 0.0, mode=mode)
    return choice, searched if choice is not None and choice.plan.kernels else mod


def check_run_memory(report: Mapping[str, Any], inputs: Sequence[TensorSpec],
                     outputs: Sequence[TensorSpec], what: str) -> None:
    """``resources.ResourceError`` when running the model would need more memory than the
    machine has: its planned activation peak, its constants, its inputs and outputs."""
    summary = report.get("summary") or {}
    peak = summary.get("peak_activation_bytes") or 0
    constants = summary.get("constant_bytes") or 0
    io = sum(max(1, math.prod(max(d, 1) for d in s.shape)) * np.dtype(s.dtype).itemsize
             for s in [*inputs, *outputs])
    if not all(isinstance(v, (int, float)) for v in (peak, constants)):
        return
    check_memory(f"{what}: running the model (activation peak {format_bytes(peak)}, "
                 f"constants {format_bytes(constants)}, inputs and outputs "
                 f"{format_bytes(io)})", int(peak + constants + io))


def _tvm_version() -> str:
    import tvm
    return tvm.__version__


class CompiledModel:
    """A compiled model: run it, read its report, save it as an artifact directory.

    Returned by ``edgebyoc.compile`` (in memory) and by ``edgebyoc.load`` (from a directory).
    """

    def __init__(self, executable: Any, inputs: list[TensorSpec], outputs: list[TensorSpec],
                 report: dict[str, Any], manifest: dict[str, Any],
                 constants: Mapping[str, Any] | None = None,
                 constant_table: ConstantTable | None = None,
                 external: list[ExternalRegion] | None = None,
                 payloads: Mapping[str, Any] | None = None,
                 imported: ImportedModel | None = None, directory: Path | None = None,
                 registry: PluginRegistry | None = None, project=None,
                 regions: Mapping[str, Any] | None = None):
        self.executable = executable
        self.inputs, self.outputs = inputs, outputs
        self.report, self.manifest = report, manifest
        self.constants = dict(constants or {})
        self._constant_table = constant_table
        self.external = list(external or [])
        self.payloads = dict(payloads or {})
        self.imported = imported
        self.directory = directory
        self._registry = registry
        self.project = project  # the deployable C project (``codegen.cproject``), if any
        self._runner: HostRunner | None = None
        self._scratch: tempfile.TemporaryDirectory | None = None
        self.engines: dict[str, Any] = {}  # JSON / blob regions' engines, once bound
        #: symbol -> the ``Region`` handed to codegen (compiled in this process only)
        self.regions = dict(regions or {})

    @property
    def runner(self) -> HostRunner:
        if self._runner is None:
            module = self.executable
            if self.directory is None and (self.manifest.get("c_source_regions")
                                           or self.manifest.get("c_project")):
                # generated C must be compiled and linked before the VM can call it
                self._scratch = tempfile.TemporaryDirectory(prefix="edgebyoc-")
                path = os.path.join(self._scratch.name, HOST_LIBRARY)
                self.executable.export_library(
                    path, options=compile_options(self.manifest["host"]["cpu"]))
                import tvm
                module = tvm.runtime.load_module(path)
            if self.external:
                registry = self._registry or default_registry()
                loaders = loaders_for(registry, self.manifest["target"]["name"])
                self.engines = bind_regions(self.external, self.payloads, self.constants, loaders)
            check_run_memory(self.report, self.inputs, self.outputs,
                             str(self.directory or self.report["model"].get("name", "model")))
            names = [row["name"] for row in self.manifest.get("constants", [])] or \
                list(self.constants)
            self._runner = HostRunner(module, self.inputs, self.outputs,
                                      [self.constants[n] for n in names])
        return self._runner

    def run(self, inputs: Any) -> dict[str, Any]:
        """Run on ``inputs`` (dict by name, list in order, or one array); outputs by name."""
        return self.runner.run(inputs)

    def save(self, directory: str | os.PathLike) -> Path:
        """Write the artifact directory (atomically); returns its path."""
        if self.directory is not None:  # loaded by ``load``: copy the checked files
            target = Path(directory).resolve()
            if target != self.directory.resolve():
                read_manifest(self.directory)  # still the artifact that was loaded
                copy_artifact(self.directory, target)
            return target
        table = self._constant_table or ConstantTable()
        files: dict[str, Any] = {"report.json": json.dumps(self.report, indent=2) + "\n",
                                 "report.md": render_markdown(self.report)}
        for region in self.external:
            files[region.file] = self.payloads[region.symbol]
        if self.project is not None:
            files.update({f"c_project/{k}": v for k, v in self.project.project_files().items()})
        return write_artifact(directory, self.executable, self.manifest, files,
                              write_constants=table.write,
                              export_options=compile_options(self.manifest["host"]["cpu"]))

    export = save

    def __repr__(self) -> str:
        return (f"CompiledModel({self.report['model']['name']!r}, "
                f"target={self.report['target']['name']!r})")


def load(directory: str | os.PathLike, registry: PluginRegistry | None = None) -> CompiledModel:
    """Load an artifact written by ``CompiledModel.save`` after checking its integrity.

    The checks (``runtime.artifact.read_manifest``) catch corrupted and tampered files, but
    loading runs the artifact's native code: load only artifacts you trust.
    """
    import tvm

    root = Path(directory)
    manifest = read_manifest(root)
    try:
        report = read_report(root)
        external = [ExternalRegion.from_dict(d) for d in manifest["external"]]
        inputs = [TensorSpec.from_dict(d) for d in manifest["inputs"]]
        outputs = [TensorSpec.from_dict(d) for d in manifest["outputs"]]
        constants = load_constants(root, manifest["constants"])
        payloads = {}
        for region in external:
            data = (root / region.file).read_bytes()
            payloads[region.symbol] = data.decode() if region.kind == "json_graph" else data
    except (KeyError, TypeError, ValueError, AttributeError, OSError) as err:
        raise ArtifactError(f"{root}: malformed artifact: {type(err).__name__}: "
                            f"{first_line(err)}") from err
    try:
        module = tvm.runtime.load_module(str(root / HOST_LIBRARY))
    except Exception as err:  # noqa: BLE001
        raise EdgebyocError(f"{root}: cannot load {HOST_LIBRARY}: {first_line(err)}") from err
    return CompiledModel(module, inputs, outputs, report, manifest, constants=constants,
                         external=external, payloads=payloads, directory=root,
                         registry=registry)
