"""The compile pipeline, one stage after another (DESIGN.md, "The compile pipeline").

    import     file / ModelProto / IRModule -> ImportedModel              (frontend.import_model)
    prepare    the target's import transforms (before folding: int8 weights still visible),
               constant folding, constant index checks, the target's pre_partition transforms
               and module layouts
    partition  patterns, cost-based dispatch, regions, host fallback, partial quantization at
               region boundaries, run-time index guards on the host    (partition/, index_guards)
    codegen    plugins' code for the regions                             (codegen/external)
    lower      a C-project target's network as a step graph: data, no text (codegen/cgraph)
    memory     one request, one plan: the C project's arena and depth-first streaming, or
               the host build's depth-first tiling; one report entry      (memory_stage)
    emit       the C project's files, written once from the graph and the plan (codegen/cemit)
    build      the host library (edgebyoc's CPU schedules, every constant lifted into the
               metadata table, the activation memory timeline recorded after static planning)
    package    CompiledModel: runnable in memory, ``save(dir)`` writes the artifact

``compile`` returns a ``CompiledModel`` (``compiled``); ``load`` reads a saved artifact back.
"""

from __future__ import annotations

import hashlib
import os
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Mapping, Sequence

from .codegen.cgraph import ProjectUnsupported, StepGraph, lower_project
from .codegen.cemit import HOST_L1_FILE
from .codegen.cproject import emit_project, translation_units
from .codegen.layer import DEFAULT_HOST_L1_BYTES, host_l1_bytes
from .codegen.external import ExternalCodegen
from .codegen.host import HostBuild, build_library
from .compiled import CompiledModel, check_run_memory, load
from .const_fold import fold_constants
from .errors import (PLUGIN_FAULTS, CompileError, EdgebyocError, PluginError, TargetError,
                     first_line, release_tvm_frames)
from .frontend import ImportedModel, InputShapes, data_dependent_operators, import_model
from .index_guards import check_constant_indices, guard_runtime_indices
from .memory.request import MemoryRequest
from .memory_stage import MemoryPlan, ProjectPricer, host_build_of, plan_host, plan_project
from .partition import PartitionResult, partition_module
from .partition.quantize import quantize_regions
from .plugins import PluginRegistry, default_registry
from .report import build_report, predicted_cycles
from .resources import check_memory, configure_thread_pool
from .rewrites import (dead_conv_taps, float_floor_mod_edges, infinite_max_reductions,
                       split_wide_concats)
from .runtime.constants import ConstantTable
from .runtime.external import ExternalRegion
from .session import TVM_LOCK, CompileSession
from .target import OutputKind, Target
from .version import __version__

__all__ = ["CompileRequest", "CompiledModel", "compile", "load", "prepare"]


def _tvm_version() -> str:
    import tvm

    return tvm.__version__


class StageClock:
    """Times the pipeline stages; prints each one to stderr when ``progress`` is on."""

    def __init__(self, progress: bool):
        self.progress = progress
        self.subject = ""  # the model, named in stage failures once known
        #: the model's operators whose results' shapes depend on its data (named in a TVM
        #: failure they most likely caused, with the way out)
        self.data_dependent: list[str] = []
        self.stages: list[dict[str, Any]] = []
        self._console = None
        self._running: tuple[str, Any] | None = None  # the stage running, its spinner
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
        self._running = (name, status)
        try:
            yield
        except EdgebyocError as err:
            release_tvm_frames(err)
            raise
        except Exception as err:  # noqa: BLE001 - TVM raises many kinds; name the stage
            release_tvm_frames(err)
            prefix = f"{self.subject}: " if self.subject else ""
            hint = (f"; the model computes data-dependent shapes "
                    f"({', '.join(self.data_dependent)}), which TVM {_tvm_version()} "
                    f"compiles only in part: export the network without its post-processing "
                    f"and run that apart (docs/user-guide.md, 'Data-dependent shapes')"
                    if self.data_dependent else "")
            raise CompileError(f"{prefix}{name} stage failed: {type(err).__name__}: "
                               f"{first_line(err)}{hint}") from err
        finally:
            self._running = None
            if status is not None:
                status.stop()
        seconds = time.perf_counter() - start
        self.stages.append({"name": name, "seconds": round(seconds, 3)})
        if self._console is not None:
            self._console.print(f"[green]✓[/green] {name:<10} {seconds:6.2f} s  {detail}",
                                highlight=False)

    def step(self, text: str) -> None:
        """What the running stage does now, for work that takes a while within it (the
        memory stage timing depth-first plans with ``--tune``): one line under the stage,
        and the spinner's text on a terminal (shown only with progress on)."""
        if self._console is None:
            return
        name, status = self._running or ("", None)
        if status is not None:
            status.update(f"{name} {text}".strip())
        self._console.print(f"  [dim]{name}:[/dim] {text}", highlight=False, soft_wrap=True)

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
    mod = infinite_max_reductions(float_floor_mod_edges(split_wide_concats(mod)))
    mod = dead_conv_taps(fold_constants(mod))
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
        mod = fold_constants(mod)
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


# -- the request ---------------------------------------------------------------------------------

#: ``compile``'s keyword settings, each a field of ``CompileRequest`` or of its parts
SETTINGS = ("input_shapes", "constant_inputs", "progress", "schedules", "host_cpu_name",
            "cost_metric", "calibration", "dfs", "memory_budget", "max_recompute",
            "io_in_arena", "safe", "tuning_record", "tune")


@dataclass(frozen=True)
class CompileRequest:
    """Everything a compile is asked besides the model and the target, checked once.

    ``input_shapes`` fixes dynamic input dimensions; ``constant_inputs`` turns ONNX graph
    inputs into constants; ``cost_metric`` is what dispatch between modules minimises
    (``"latency"`` or ``"energy"``); ``calibration``: input dicts measuring the scales of
    partial quantization (modules that quantize); ``memory``: the memory stage's request
    (``memory.request.MemoryRequest``); ``build``: how the host library is built
    (``codegen.host.HostBuild``); ``progress``: print each stage.

    Example::

        >>> request = CompileRequest.from_settings(dfs=True, schedules=False)
        >>> request.memory.mode.value, request.build.schedules
        ('on', False)
    """

    input_shapes: InputShapes | None = None
    constant_inputs: Mapping[str, Any] | None = None
    cost_metric: str = "latency"
    calibration: Sequence[Mapping[str, Any]] | None = None
    memory: MemoryRequest = field(default_factory=MemoryRequest)
    build: HostBuild = field(default_factory=HostBuild)
    progress: bool = False

    @classmethod
    def from_settings(cls, *, input_shapes: InputShapes | None = None,
                      constant_inputs: Mapping[str, Any] | None = None,
                      progress: bool = False, schedules: bool = True,
                      host_cpu_name: str | None = None, cost_metric: str = "latency",
                      calibration: Sequence[Mapping[str, Any]] | None = None,
                      dfs: bool | None = None, memory_budget: int | None = None,
                      max_recompute: float = 1.5, io_in_arena: bool = False,
                      safe: bool = False, tuning_record: str | os.PathLike | None = None,
                      tune: bool = False) -> "CompileRequest":
        """The request of ``compile``'s keyword settings (see ``compile``)."""
        if cost_metric not in ("latency", "energy"):
            raise CompileError(f"cost metric {cost_metric!r}: use latency or energy")
        memory = MemoryRequest.from_options(dfs, memory_budget, max_recompute, io_in_arena,
                                            tuning_record, tune)
        return cls(input_shapes, constant_inputs, cost_metric, calibration, memory,
                   HostBuild(host_cpu_name, bool(schedules), bool(safe)), bool(progress))


def compile(model: Any, target: str = "host", options: Mapping[str, Any] | None = None,
            registry: PluginRegistry | None = None, request: CompileRequest | None = None,
            **settings: Any) -> CompiledModel:
    """Compile ``model`` for ``target``; see the module docstring for the stages.

    ``options`` are the target's options (strings are parsed). The rest is a
    ``CompileRequest``, given whole as ``request`` or as keyword settings:
    ``input_shapes``, ``constant_inputs``, ``progress``, ``cost_metric``, ``calibration``
    (see ``CompileRequest``); ``schedules=False`` builds TVM's default loops instead of
    edgebyoc's schedules, ``host_cpu_name`` the LLVM CPU (``"generic"`` for a portable
    library), ``safe`` adds run-time bound checks to every host kernel (``codegen.bounds``);
    ``dfs`` (``None``: automatic, ``True``, ``False``), ``memory_budget`` (bytes; for a C
    project its total activation RAM, the caller's buffers included), ``max_recompute``,
    ``io_in_arena`` (a C project's inputs and outputs in its arena), ``tuning_record`` and
    ``tune`` form the memory stage's ``MemoryRequest`` (``memory_stage`` says how each mode
    decides; nothing is timed unless ``tune`` asks).
    """
    if request is not None and settings:
        raise TypeError("compile(): give either request= or keyword settings, not both")
    unknown = sorted(set(settings) - set(SETTINGS))
    if unknown:
        raise TypeError(f"compile() got unknown setting(s) {', '.join(unknown)} (settings: "
                        f"{', '.join(SETTINGS)})")
    request = request or CompileRequest.from_settings(**settings)
    configure_thread_pool()
    with TVM_LOCK:  # compiles in threads take turns (session.py says why)
        return _compile(model, target, options, registry or default_registry(), request)


def _compile(model: Any, target: str, options: Mapping[str, Any] | None,
             registry: PluginRegistry, request: CompileRequest) -> CompiledModel:
    """The stages of ``compile`` (see the module docstring)."""
    from .calibration import constants_memo

    the_target, resolved = _target(registry, target, options)
    if request.memory.io_in_arena and not the_target.c_project:
        raise CompileError(f"io_in_arena (--io-in-arena) places the inputs and outputs in a C "
                           f"project's arena; target {the_target.name!r} deploys no C project")
    clock = StageClock(request.progress)
    with CompileSession(the_target.name, _plugin_of(registry, the_target)) as session, \
            constants_memo():
        with clock("import", str(model) if isinstance(model, (str, os.PathLike)) else ""):
            imported = import_model(model, request.input_shapes, request.constant_inputs)
        clock.subject = imported.source
        clock.data_dependent = data_dependent_operators(imported.onnx_model)
        with clock("prepare"):
            mod = prepare(imported.mod, the_target, registry, imported.source)
        with clock("partition"):
            partition, mod = _partition(mod, imported, the_target, registry, resolved,
                                        request, session)
        codegen = ExternalCodegen(the_target, registry, partition.functions, resolved, session)
        with clock("codegen", f"{len(partition.functions)} offloaded region(s)"):
            mod = codegen.run(mod)
        graph, project_info = None, None
        if the_target.c_project:
            with clock("lower", "the C project as a step graph"):
                graph, project_info = _lower(mod, codegen, the_target, imported,
                                             request.memory)
            if graph is None:
                clock.note(f"no C project: {project_info['reason']}; the TVM host build runs "
                           f"instead")
        with clock("memory", "depth-first planning"):
            plan = _plan_memory(mod, graph, the_target, partition, request, imported,
                                resolved, clock.step)
    project = None
    if graph is not None:
        with clock("emit", "the deployable C project"):
            project = emit_project(graph, plan.arena, plan.items, plan.chains,
                                   _project_files(registry, the_target, resolved, graph),
                                   max((host_l1_bytes(m, resolved) for m in the_target.modules),
                                       default=DEFAULT_HOST_L1_BYTES))
            project_info = project.to_dict()
            mod = _run_project(mod, project)
    with clock("build", f"host library for {request.build.llvm_cpu}"
               + (", bound-checked" if request.build.safe else "")):
        executable, constants, recorder = (build_library(mod, request.build) if graph
                                           else host_build_of(plan, request.build))
    if graph is None:
        plan.timeline, plan.host_arena_bytes = recorder.timeline, recorder.arena_bytes
    compiled = _package(executable, imported, the_target, resolved, registry, partition,
                        codegen, constants, plan, clock, request, project, project_info)
    check_run_memory(compiled.report, compiled.inputs, compiled.outputs, imported.source)
    return compiled


def _target(registry: PluginRegistry, name: str, options) -> tuple[Target, dict[str, Any]]:
    """The target called ``name`` and its options for this compile (parsed and checked)."""
    from .calibration import calibration_in_force

    target = registry.target(name)
    try:
        resolved = target.resolve_options(options)
    except ValueError as err:
        raise TargetError(str(err)) from err
    # a calibration file that cannot be used is refused here, naming the file, before any
    # work (not from inside the plugin's cost hooks)
    calibration_in_force(target, resolved)
    return target, resolved


def _plugin_of(registry: PluginRegistry, target: Target) -> tuple[str, str]:
    """(plugin name, version) owning ``target`` (empty for the core's host target)."""
    owner = registry.owner(target.name)
    return (owner, registry.info(owner).version) if owner else ("", "")


def _partition(mod, imported: ImportedModel, target: Target, registry: PluginRegistry,
               options: dict[str, Any], request: CompileRequest, session):
    """(partition result, module): regions, post-partition transforms, partial quantization,
    run-time index operands of the host's operators checked right before their kernels."""
    token = hashlib.sha256(f"{imported.sha256}{target.name}{sorted(options.items())}"
                           .encode()).hexdigest()[:8]
    try:
        partition = partition_module(mod, target, registry, request.cost_metric, token,
                                     options, session)
    except ValueError as err:
        raise CompileError(str(err)) from err
    mod = post_partition(partition.mod, target, registry)
    mod = quantize_regions(mod, partition, target, request.calibration,
                           [s.name for s in imported.inputs])
    return partition, guard_runtime_indices(mod)


def _lower(mod, codegen: ExternalCodegen, target: Target, imported: ImportedModel,
           memory: MemoryRequest) -> tuple[StepGraph | None, dict[str, Any] | None]:
    """(the step graph of a C-project target's network, ``None``), or (``None``, the report
    entry saying why the C project cannot express it)."""
    name = "".join(c if c.isalnum() else "_" for c in imported.name) or "network"
    try:
        graph = lower_project(mod, codegen.outputs, name, [s.name for s in imported.inputs],
                              [s.name for s in imported.outputs], f"target {target.name}",
                              memory.io_in_arena)
    except ProjectUnsupported as err:
        return None, {"generated": False, "reason": str(err)}
    return graph, None


def _plan_memory(mod, graph: StepGraph | None, target: Target, partition: PartitionResult,
                 request: CompileRequest, imported: ImportedModel,
                 options: dict[str, Any],
                 progress: Callable[[str], None] | None = None) -> MemoryPlan:
    """The memory stage (``memory_stage``): the C project's plan when there is a graph, the
    host build's otherwise; ``options``: the target's resolved options; ``progress``: told
    what a long part of the stage does (``StageClock.step``)."""
    if graph is not None:
        whole = predicted_cycles(target, partition.regions, partition.operators)[2]
        return plan_project(graph, request.memory, ProjectPricer(partition, whole, options),
                            f" on target {target.name}")
    total_macs = sum(row["macs"] for row in partition.operators)
    return plan_host(mod, request.memory, request.build, total_macs,
                     _has_offloaded_regions(mod), imported.inputs, imported.outputs,
                     progress)


def _project_files(registry: PluginRegistry, target: Target, options: dict[str, Any],
                   graph: StepGraph) -> dict[str, str]:
    """The plugin's build files for its SDK (hook ``edgebyoc_project_files``), checked."""
    extra = registry.call(target.name, "edgebyoc_project_files", target=target, options=options,
                          sources=translation_units(graph.region_files)) or {}
    if not isinstance(extra, Mapping) or not all(isinstance(k, str) and isinstance(v, str)
                                                 for k, v in extra.items()):
        raise PluginError(f"target {target.name!r}: edgebyoc_project_files must return a "
                          f"mapping of relative path -> text")
    reserved = set(graph.region_files) | {"network.c", "network.h", "weights.c", "weights.h",
                                          "main.c", "Makefile", "include/edgebyoc_match.h",
                                          "tvm_wrapper.c", HOST_L1_FILE}
    clash = sorted(set(extra) & reserved)
    from pathlib import Path

    if clash or any(Path(k).is_absolute() or ".." in Path(k).parts for k in extra):
        raise PluginError(f"target {target.name!r}: edgebyoc_project_files may not write "
                          f"{(clash or sorted(extra))[0]}")
    return dict(extra)


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


def _package(executable, imported: ImportedModel, target: Target, options: dict[str, Any],
             registry: PluginRegistry, partition: PartitionResult, codegen: ExternalCodegen,
             constants: ConstantTable, plan: MemoryPlan, clock: StageClock,
             request: CompileRequest, project, project_info) -> CompiledModel:
    """The ``CompiledModel``: its report, manifest, constants and region payloads."""
    external, payloads = _external_regions(partition, codegen, constants)
    host = request.build.to_dict()
    report = build_report(imported, target, options, partition.operators, clock.stages, host,
                          partition.regions, constants.nbytes, plan, project_info,
                          partition.search_seconds, partition.layout_transforms)
    manifest = {
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
    return CompiledModel(executable, imported.inputs, imported.outputs, report, manifest,
                         constants=constants.arrays(), constant_table=constants,
                         external=external, payloads=payloads, imported=imported,
                         registry=registry, project=project, regions=codegen.regions,
                         pricing=partition.priced)


def _tvm_version() -> str:
    import tvm
    return tvm.__version__
