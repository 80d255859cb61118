"""THE plugin contract: every hook a backend plugin may implement.

A plugin is a module (or object) exposed through the ``edgebyoc`` entry-point group whose functions
are marked with ``edgebyoc.api.hookimpl`` and named like the specifications below. Hook families follow
the design card: targets, availability, patterns, annotate, cost, transforms, codegen, runtime APIs
and runtime loaders.

Scoping: a plugin declares its targets with ``edgebyoc_targets``. When compiling for target ``T``
the core calls the other hooks **only on the plugin that owns ``T``**, so an implementation never
sees another plugin's targets. Hooks with ``firstresult`` stop at the first non-``None`` answer;
the others collect every answer.

Versioning: the contract is ``edgebyoc.api.API_VERSION``. Each ``Target`` declares the version
its plugin was written for (``api_version="2.5"``; undeclared counts as 2.3); the core refuses a
plugin of another major version or of a newer minor, saying why.

Plugins import ``edgebyoc.api`` only (``hookimpl`` and the data model are there). Every example
below runs in the core's tests (tests/test_api.py) with the names of ``edgebyoc.api``,
``edgebyoc.api.regions`` and ``tvm.relax.dpl`` in scope. A minimal plugin::

    from edgebyoc.api import ExecModule, Target, hookimpl

    @hookimpl
    def edgebyoc_targets():
        return [Target(name="mychip", modules=(ExecModule(name="accel"),))]
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Mapping, Sequence

import pluggy

if TYPE_CHECKING:  # the annotations only: the data model imports nothing from here
    import tvm

    from .target import (ApiBinding, Availability, CodegenContext, CodegenOutput, Cost,
                         ExecModule, PatternEntry, Region, RuntimeLoader, Target, Workload)

#: The project name pluggy uses to tie markers to this contract.
PROJECT_NAME = "edgebyoc"

hookspec = pluggy.HookspecMarker(PROJECT_NAME)
hookimpl = pluggy.HookimplMarker(PROJECT_NAME)


@hookspec
def edgebyoc_targets() -> list[Target]:
    """Declare the targets this plugin provides.

    Arguments:
        none.

    Returns:
        A list of ``edgebyoc.api.Target``: name, execution modules (each with its memory
        levels, output kind and priority), user options and the ``api_version`` the plugin was
        written for.

    Called:
        Once, when the plugin is loaded. A plugin that raises here, returns something that is not
        a list of ``Target`` or declares another major or a newer minor ``api_version`` is
        marked *failed*.

    Example::

        @hookimpl
        def edgebyoc_targets():
            cluster = ExecModule(name="cluster", memory_levels=(
                MemoryLevel("L1", 128 * 1024, size_option="l1_kb"), MemoryLevel("L2", 1 << 20)))
            return [Target(name="mychip", description="my SoC", modules=(cluster,),
                           options=(TargetOption("l1_kb", int, 128, "L1 size in kB"),))]
    """


@hookspec(firstresult=True)
def edgebyoc_availability() -> Availability | None:
    """Tell whether the plugin can work on this machine.

    Arguments:
        none.

    Returns:
        ``edgebyoc.api.Availability``; ``None`` (or not implementing the hook) means available.

    Called:
        Once, after ``edgebyoc_targets``, at load time. An unavailable plugin is listed by
        ``edgebyoc plugins`` as *unavailable* with the reason, and its targets cannot be compiled.
        ``Availability(True, "note")`` keeps the plugin usable and shows the note beside its
        *active* status (e.g. an optional runtime that is missing).

    Example::

        import shutil

        @hookimpl
        def edgebyoc_availability():
            if shutil.which("nvcc") is None:
                return Availability(False, "CUDA toolkit not found")
            return Availability(True)
    """


@hookspec
def edgebyoc_patterns(target: Target, module: ExecModule,
                      options: Mapping[str, Any]) -> list[PatternEntry]:
    """Give the pattern table of one execution module.

    Arguments:
        target: the ``Target`` being compiled for (one of this plugin's).
        module: the ``ExecModule`` whose patterns are asked for.
        options: the target's options for this compile (name -> value, defaults filled in);
            implementations that do not need them may leave the argument out.

    Returns:
        A list of ``edgebyoc.api.PatternEntry`` (short name, Relax ``DFPattern``, annotations,
        check predicate, priority). The core registers them in TVM's pattern registry as
        ``<target>.<module>.<name>``.

    Called:
        In the partition stage, once per module of the chosen target.

    Example::

        @hookimpl
        def edgebyoc_patterns(target, module):
            if module.name != "accel":
                return []
            conv = is_op("relax.nn.conv2d")(wildcard(), is_const())
            return [PatternEntry("conv2d", conv, check=lambda ctx: True)]
    """


@hookspec(firstresult=True)
def edgebyoc_annotate(target: Target, module: ExecModule, call: tvm.relax.Call,
                      options: Mapping[str, Any]) -> bool | None:
    """Decide whether a single operator may run on a module (op-level annotation).

    Arguments:
        target: the ``Target`` being compiled for.
        module: the ``ExecModule`` asked about.
        call: the ``tvm.relax.Call`` of the operator, with its struct info.
        options: the target's options for this compile (may be left out).

    Returns:
        ``True`` (supported), ``False`` (not supported) or ``None`` (no opinion: the pattern
        table's check decides).

    Called:
        In the partition stage, for every operator matched by one of the module's patterns.

    Example::

        @hookimpl
        def edgebyoc_annotate(target, module, call):
            if call.op.name == "relax.nn.conv2d":
                return call.attrs.groups == 1
            return None
    """


@hookspec(firstresult=True)
def edgebyoc_cost(target: Target, module: ExecModule, workload: Workload, schedule: Any,
                  options: Mapping[str, Any]) -> Cost | None:
    """Price a workload on a module under a schedule (the module's cost model).

    Arguments:
        target: the ``Target`` being compiled for.
        module: the ``ExecModule`` that would run the workload.
        workload: the ``Workload`` (anchor operator, shapes and dtypes of its arguments and
            result, attributes as plain values, MACs, constant bytes, operand bit widths).
        schedule: the candidate ``edgebyoc.api.match.Schedule`` (tiling, loop order, buffer
            fills, double buffering) for modules with a memory hierarchy, or ``None`` for the
            module's default schedule.
        options: the target's options for this compile (may be left out).

    Returns:
        ``edgebyoc.api.Cost`` (latency in cycles, optional energy, per-term breakdown), or
        ``None`` when the module has no model for this workload.

    Called:
        When several modules match the same pattern (cost-based dispatch) and during the
        schedule search. The first non-``None`` result wins.

    Example::

        @hookimpl
        def edgebyoc_cost(target, module, workload, schedule):
            macs = workload.macs
            return Cost(latency_cycles=macs / 64, breakdown={"L_ops": macs / 64})
    """


@hookspec(firstresult=True)
def edgebyoc_host_cost(target: Target, workload: Workload,
                       options: Mapping[str, Any]) -> Cost | None:
    """Price an operator the target leaves on its host processor (since API 2.1).

    An MCU's host is its fabric controller or RISC-V core, not the machine compiling; with this
    hook the report gives the predicted latency of the whole network, not only of the regions
    offloaded (in ms too, when ``Target.clock_hz`` says the clock the cycles count).

    Arguments:
        target: the ``Target`` being compiled for.
        workload: the operator as a ``Workload`` whose ``pattern`` is ``"host.<operator>"``
            (e.g. ``"host.nn.conv2d"``; a fused TVM kernel is ``"host.call_tir"`` with the
            kernel's arguments as ``inputs``), its output, attributes and MACs.
        options: the target's options for this compile (may be left out).

    Returns:
        ``edgebyoc.api.Cost`` in the target's cycles, or ``None`` when the plugin has no model
        for the operator (the report then gives no whole-network prediction).

    Called:
        Once per operator left on the host, after partitioning (and after the fallback of
        regions not worth offloading, whose operators are then priced here too); for a target
        without modules (a plain MCU, such as edgebyoc-mcu's), once per operator of the model.

    Example::

        @hookimpl
        def edgebyoc_host_cost(target, workload):
            elements = 1
            for extent in workload.output[0]:
                elements *= extent
            cycles = 7 * workload.macs + 4 * elements
            return Cost(latency_cycles=cycles, breakdown={"host": cycles})
    """


@hookspec
def edgebyoc_transforms(target: Target, stage: str) -> list[tvm.transform.Pass]:
    """Give the network transformations the target needs at a pipeline stage.

    Arguments:
        target: the ``Target`` being compiled for.
        stage: ``"import"`` (on the module as imported, before constant folding: quantized
            weights still appear as ``dequantize`` of int8 constants, the place for
            integerization), ``"pre_partition"`` (on the whole folded module, before pattern
            matching) or ``"post_partition"`` (after regions are formed).

    Returns:
        A list of ``tvm.transform.Pass`` applied in order (an empty list for no change).

    Called:
        By the prepare stage (``"import"``, then ``"pre_partition"``) and after partitioning
        (``"post_partition"``).

    Example::

        from tvm import relax

        @hookimpl
        def edgebyoc_transforms(target, stage):
            if stage == "pre_partition":
                return [relax.transform.ConvertLayout({"relax.nn.conv2d": ["NHWC", "OHWI"]})]
            return []
    """


@hookspec(firstresult=True)
def edgebyoc_codegen(target: Target, module: ExecModule, region: Region, schedule: Any,
                     context: CodegenContext) -> CodegenOutput | None:
    """Generate code for one offloaded region.

    Arguments:
        target: the ``Target`` being compiled for.
        module: the ``ExecModule`` the region was assigned to.
        region: the ``Region``: its ``symbol`` (the name the code must export), the merged
            Relax ``function`` (parameters: inputs, then the constants it reads), the matched
            ``composites`` with their workloads and schedules, ``constant_params`` and
            ``constants`` (numpy values by parameter index).
        schedule: the schedule found for it (``None`` for modules without a schedule search;
            the tuple of the composites' schedules for a region of several layers).
        context: the ``CodegenContext``: ``options`` (the target's options for this compile),
            ``bindings`` (flavour -> the ``ApiBinding`` from ``edgebyoc_runtime_apis``) and
            ``region_index`` (the region's row in the report).

    Returns:
        ``edgebyoc.api.CodegenOutput`` of the module's ``output_kind``, exporting
        ``region.symbol``; its call arguments are ``edgebyoc.api.regions.argument_layout``'s.

    Called:
        In the codegen stage, once per region. The first non-``None`` result wins.

    Example::

        # a plain C kernel (edgebyoc.api.match.layer_codegen does all of it for a MATCH layer)
        @hookimpl
        def edgebyoc_codegen(target, module, region, schedule, context):
            n = argument_layout(region).count
            kernel = (f"int {region.symbol}_run(DLTensor** args, int n) {{\\n"
                      f"  (void)args; (void)n; return 0;\\n}}\\n")
            source = packed_wrapper(region.symbol, f"{region.symbol}_run", n) + kernel
            return CodegenOutput(OutputKind.C_SOURCE, symbol=region.symbol, c_source=source)
    """


@hookspec(firstresult=True)
def edgebyoc_runtime_apis(target: Target, module: ExecModule,
                          flavour: str) -> ApiBinding | None:
    """Give the API binding generated code is compiled against.

    Arguments:
        target: the ``Target`` being compiled for.
        module: the ``ExecModule`` whose code is generated.
        flavour: ``"soc"`` (the vendor SDK on the real chip) or ``"host"`` (emulation on this
            machine: memcpy DMA and reference kernels with the chip's integer arithmetic).

    Returns:
        ``edgebyoc.api.ApiBinding`` for that flavour, or ``None`` when not provided.

    Called:
        In the codegen stage, once per region and flavour; the answers reach
        ``edgebyoc_codegen`` as ``context.bindings``.

    Example::

        @hookimpl
        def edgebyoc_runtime_apis(target, module, flavour):
            return ApiBinding(flavour=flavour, memory={"dma_copy_2d": "host_dma_copy_2d"},
                              headers=("host_platform.h",))
    """


@hookspec(firstresult=True)
def edgebyoc_project_files(target: Target, options: Mapping[str, Any],
                           sources: Sequence[str]) -> Mapping[str, str] | None:
    """Give the vendor-SDK build files of a deployable C project.

    Arguments:
        target: the ``Target`` being compiled for (one with ``c_project``).
        options: the resolved target options.
        sources: the project's C sources (paths relative to the project root:
            ``network.c``, ``weights.c``, ``layers/*.c``; ``main.c`` is the host harness).
            Headers are in ``.``, ``include/`` and ``bindings/<flavour>/``.

    Returns:
        A mapping of relative path -> text added to the project (e.g. the SDK's
        ``CMakeLists.txt`` compiling ``sources`` against ``bindings/soc``), or ``None``. The
        core always writes the gcc ``Makefile`` of the host-emulation build itself.

    Called:
        Once per compile of a ``c_project`` target, after the project is laid out.

    Example::

        @hookimpl
        def edgebyoc_project_files(target, options, sources):
            return {"CMakeLists.txt": "add_executable(network " + " ".join(sources) + ")\\n"}
    """


@hookspec
def edgebyoc_runtime_loaders() -> list[RuntimeLoader]:
    """Give the loaders of the JSON-graph and blob kinds this plugin produces.

    Arguments:
        none.

    Returns:
        A list of ``edgebyoc.api.RuntimeLoader`` (kind name and ``load(payload, constants)``).

    Called:
        When an artifact that holds JSON or blob regions is loaded.

    Example::

        def build_engine(graph_json, constants):
            return lambda *inputs: inputs  # a callable running the region

        @hookimpl
        def edgebyoc_runtime_loaders():
            return [RuntimeLoader("mychip.engine", load=build_engine)]
    """


def reference_markdown() -> str:
    """The hook reference page (docs/hooks.md), generated from the specifications above: one
    section per hook, in the order of the contract, with its signature and docstring.
    ``python scripts/hook_reference.py`` writes it; a test fails when docs/hooks.md differs."""
    import inspect

    lines = ["# Hook reference", "",
             "Generated from `core/edgebyoc/hookspecs.py` by `python scripts/hook_reference.py`; "
             "a test fails when this page is stale. The plugin guide "
             "(plugin-guide.md) explains how the hooks fit together.", ""]
    module_doc = inspect.getdoc(__import__(__name__, fromlist=["_"]))
    lines += [module_doc, ""]
    for name, function in list(globals().items()):
        if not (name.startswith("edgebyoc_") and inspect.isfunction(function)):
            continue
        options = getattr(function, f"{PROJECT_NAME}_spec", {})
        first = " (first non-`None` answer wins)" if options.get("firstresult") else ""
        signature = str(inspect.signature(function)).replace("'", "")
        lines += [f"## `{name}`{first}", "", "```python", f"def {name}{signature}", "```", "",
                  inspect.getdoc(function), ""]
    return "\n".join(lines).rstrip() + "\n"
