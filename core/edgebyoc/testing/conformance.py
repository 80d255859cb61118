"""The conformance checks every plugin's test suite runs: ``check_plugin(registry, name)``.

They exercise each hook the plugin implements with the data the core would pass and check the
answers against the contract, so a plugin learns about a broken hook in its own tests rather
than in a user's compile; and they read the plugin's source for imports of the core's private
modules (``import_boundary``: a plugin imports ``edgebyoc.api`` only). Usage in
``plugins/<name>/tests/test_conformance.py``::

    from edgebyoc.plugins import PluginRegistry
    from edgebyoc.testing.conformance import check_plugin

    def test_conformance():
        check_plugin(PluginRegistry(), "gap9")

``check_plugin`` raises ``AssertionError`` listing every problem found.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

from ..plugins import PluginRegistry, PluginStatus
from .import_boundary import PLUGIN_IMPORTS, plugin_import_violations
from ..target import (ApiBinding, Cost, OutputKind, PatternEntry, RuntimeLoader, Target,
                      Workload, api_mismatch)

FLAVOURS = ("host", "soc")
STAGES = ("pre_partition", "post_partition")

#: The workload the cost hook is asked to price: a 3x3 convolution, 16 -> 16 channels, 8x8.
SAMPLE_WORKLOAD = Workload(
    op="relax.nn.conv2d", pattern="conformance.sample.conv2d",
    inputs=(((1, 16, 8, 8), "float32"), ((16, 16, 3, 3), "float32")),
    output=((1, 16, 8, 8), "float32"),
    attrs={"strides": [1, 1], "padding": [1, 1, 1, 1], "dilation": [1, 1], "groups": 1,
           "data_layout": "NCHW", "kernel_layout": "OIHW"},
    macs=16 * 8 * 8 * 16 * 9, constant_bytes=16 * 16 * 9 * 4)


def _flat(answer: Any) -> list:
    flat = []
    for item in answer or []:
        flat.extend(item if isinstance(item, (list, tuple)) else [item])
    return flat


def plugin_problems(registry: PluginRegistry, name: str) -> list[str]:
    """Every contract problem of plugin ``name`` (empty when it conforms)."""
    try:
        info = registry.info(name)
    except KeyError:
        return [f"no plugin {name!r} is installed (installed: "
                f"{', '.join(p.name for p in registry.plugins) or 'none'})"]
    problems = [f"{violation} (a plugin imports only {' and '.join(PLUGIN_IMPORTS)}: the "
                f"rest of the core is private)" for violation in plugin_import_violations(
                    info.module)]
    if info.status is not PluginStatus.ACTIVE:
        return problems + [f"plugin {name!r} is {info.status.value}: {info.reason}"]
    if not info.target_objects:
        problems.append("edgebyoc_targets declares no target")
    for target in info.target_objects:
        problems += _target_problems(registry, target)
    loaders = _flat(registry.call(info.targets[0], "edgebyoc_runtime_loaders")) \
        if info.targets else []
    kinds = [getattr(loader, "kind", None) for loader in loaders]
    for loader in loaders:
        if not isinstance(loader, RuntimeLoader):
            problems.append(f"edgebyoc_runtime_loaders returned a {type(loader).__name__}")
        elif not callable(loader.load):
            problems.append(f"runtime loader {loader.kind!r}: load is not callable")
    if len(set(kinds)) != len(kinds):
        problems.append(f"runtime loader kinds repeat: {kinds}")
    return problems


def _target_problems(registry: PluginRegistry, target: Target) -> list[str]:
    where = f"target {target.name!r}"
    problems = []
    mismatch = api_mismatch(target)
    if mismatch:
        problems.append(f"{where}: {mismatch}")
    if not target.description:
        problems.append(f"{where}: no description (shown by `edgebyoc plugins --json`)")
    for stage in STAGES:
        for transform in _flat(registry.call(target.name, "edgebyoc_transforms",
                                             target=target, stage=stage)):
            if not callable(transform):
                problems.append(f"{where}: {stage} transform {transform!r} is not a pass")
    for module in target.modules:
        problems += _module_problems(registry, target, module)
    return problems


def _module_problems(registry: PluginRegistry, target: Target, module) -> list[str]:
    where = f"target {target.name!r}, module {module.name!r}"
    problems = []
    levels = module.memory_levels
    if len(levels) >= 2:
        inner, outer = levels[:-1], levels[-1]
        if levels[0].size_bytes >= outer.size_bytes:
            problems.append(f"{where}: memory levels must go from the innermost out: the last "
                            f"(outer) one must be larger than the first")
        held = [operand for level in inner for operand in level.operands]
        if sorted(held) != ["I", "O", "W"]:
            problems.append(f"{where}: the inner memory levels must hold each operand I, W, O "
                            f"once (they hold {held})")
    options = target.resolve_options(None)
    entries = _flat(registry.call(target.name, "edgebyoc_patterns", target=target,
                                  module=module, options=options))
    names = []
    for entry in entries:
        if not isinstance(entry, PatternEntry):
            problems.append(f"{where}: edgebyoc_patterns returned a {type(entry).__name__}")
            continue
        names.append(entry.name)
        if "." in entry.name or not entry.name:
            problems.append(f"{where}: pattern name {entry.name!r} must be non-empty, no '.'")
        if entry.check is not None and not callable(entry.check):
            problems.append(f"{where}: pattern {entry.name!r}: check is not callable")
    if len(set(names)) != len(names):
        problems.append(f"{where}: pattern names repeat: {names}")
    cost = registry.call(target.name, "edgebyoc_cost", target=target, module=module,
                         workload=SAMPLE_WORKLOAD, schedule=None, options=options)
    if cost is not None:
        if not isinstance(cost, Cost):
            problems.append(f"{where}: edgebyoc_cost returned a {type(cost).__name__}")
        elif not cost.latency_cycles >= 0:
            problems.append(f"{where}: negative or NaN latency {cost.latency_cycles}")
    for flavour in FLAVOURS:
        binding = registry.call(target.name, "edgebyoc_runtime_apis", target=target,
                                module=module, flavour=flavour)
        if binding is None:
            continue
        if not isinstance(binding, ApiBinding):
            problems.append(f"{where}: edgebyoc_runtime_apis({flavour!r}) returned a "
                            f"{type(binding).__name__}")
        elif binding.flavour != flavour:
            problems.append(f"{where}: the {flavour!r} binding says flavour "
                            f"{binding.flavour!r}")
    if module.output_kind is not OutputKind.C_SOURCE and not _flat(
            registry.call(target.name, "edgebyoc_runtime_loaders")):
        problems.append(f"{where}: produces {module.output_kind.value} but the plugin gives "
                        f"no runtime loader")
    return problems


def check_plugin(registry: PluginRegistry, name: str) -> None:
    """Assert that plugin ``name`` conforms to the contract; the message lists every problem."""
    problems = plugin_problems(registry, name)
    assert not problems, f"plugin {name!r} breaks the contract:\n- " + "\n- ".join(problems)


# -- compiled workloads -------------------------------------------------------------------------

#: report files hold the stage timings of their compile: compared without them
_TIMED_FILES = ("report.json", "report.md")


def int8_convnet(image_size: int = 16, seed: int = 0):
    """``small_convnet``'s layers (with a residual add) quantized by onnxruntime into QDQ int8:
    the form int8 targets integerize (needs onnxruntime)."""
    from .models import GraphBuilder

    g = GraphBuilder(seed)
    x = g.conv("input", 3, 16, 3)
    y = g.conv(x, 16, 16, 3, relu=False)
    x = g.op("Relu", [g.op("Add", [x, y])])
    x = g.conv(x, 16, 16, 3, stride=2, groups=16)
    x = g.conv(x, 16, 32, 1)
    x = g.op("AveragePool", [x], kernel_shape=[2, 2], strides=[2, 2])
    x = g.op("Flatten", [x], axis=1)
    out = g.dense(x, 32 * (image_size // 4) ** 2, 10)
    model = g.model("input", [1, 3, image_size, image_size], out, [1, 10], "int8_convnet")
    return qdq_int8(model, seed)


def int8_mobilenet_v1(image_size: int = 224, width: float = 0.25, num_classes: int = 10,
                      seed: int = 0):
    """``models.mobilenet_v1`` quantized by onnxruntime into QDQ int8 (needs onnxruntime): a
    high-resolution int8 network for depth-first memory planning."""
    from .models import mobilenet_v1

    return int8_io(qdq_int8(mobilenet_v1(image_size, num_classes, width, seed), seed))


def int8_io(model):
    """A QDQ model whose float input is quantized first thing and whose float output is the
    dequantized last value, taking and giving those int8 tensors instead (as TFLite's int8
    models do, and as an MCU's camera buffer holds them)."""
    import onnx
    from onnx import helper

    graph = model.graph
    first = next(n for n in graph.node if graph.input[0].name in n.input)
    last = next(n for n in graph.node if graph.output[0].name in n.output)
    if first.op_type != "QuantizeLinear" or last.op_type != "DequantizeLinear":
        raise ValueError("int8_io needs a QuantizeLinear on the input and a DequantizeLinear "
                         "on the output")

    def shape(value):
        return [d.dim_value for d in value.type.tensor_type.shape.dim]

    new_input = helper.make_tensor_value_info(first.output[0], onnx.TensorProto.INT8,
                                              shape(graph.input[0]))
    new_output = helper.make_tensor_value_info(last.input[0], onnx.TensorProto.INT8,
                                               shape(graph.output[0]))
    graph.node.remove(first)
    graph.node.remove(last)
    del graph.input[:]
    graph.input.append(new_input)
    del graph.output[:]
    graph.output.append(new_output)
    onnx.checker.check_model(model)
    return model


def qdq_int8(model, seed: int = 0, samples: int = 4, per_channel: bool = False):
    """``model`` (one float NCHW input) quantized statically by onnxruntime into QDQ int8
    (activations and weights int8), calibrated on ``samples`` seeded uniform inputs; with
    ``per_channel`` the weights get a scale per output channel, as TFLite's int8 models do."""
    import logging
    import tempfile
    from pathlib import Path

    import numpy as np
    import onnx
    from onnxruntime.quantization import (CalibrationDataReader, QuantFormat, QuantType,
                                          quantize_static)

    value = model.graph.input[0]
    name = value.name
    shape = [d.dim_value for d in value.type.tensor_type.shape.dim]
    rng = np.random.default_rng(seed)

    class Samples(CalibrationDataReader):
        def __init__(self):
            self.samples = [{name: rng.random(shape, dtype=np.float32)}
                            for _ in range(samples)]

        def get_next(self):
            return self.samples.pop() if self.samples else None

    with tempfile.TemporaryDirectory() as tmp:
        source, quantized = Path(tmp) / "float.onnx", Path(tmp) / "int8.onnx"
        onnx.save(model, source)
        previous = logging.root.manager.disable
        logging.disable(logging.WARNING)  # its advice to pre-process the float model
        try:
            quantize_static(str(source), str(quantized), Samples(),
                            quant_format=QuantFormat.QDQ, activation_type=QuantType.QInt8,
                            weight_type=QuantType.QInt8, per_channel=per_channel)
        finally:
            logging.disable(previous)
        return onnx.load(quantized)


def _odd_convnet():
    """Shapes few accelerators take: a dilated 5x2 convolution in 3 groups, odd sizes."""
    from .models import GraphBuilder

    g = GraphBuilder(7)
    weight = g.rng.normal(0, 0.3, (6, 1, 5, 2)).astype("float32")
    x = g.op("Conv", ["input", g.const(weight)], kernel_shape=[5, 2], dilations=[2, 3],
             group=3, pads=[4, 1, 4, 2])
    y = g.op("Relu", [x])
    return g.model("input", [1, 3, 11, 7], y, [1, 6, 11, 7], "odd_convnet")


def int8_workloads(seed: int = 0) -> dict[str, Any]:
    """The standard int8 workloads (QDQ, quantized by onnxruntime): what an int8-only target
    is checked on, beside ``int8_convnet`` (a residual add, a stride-2 depthwise, a 1x1,
    average pooling and a dense layer).

    - ``int8_odd_shapes``: a 13x11 image, 3 -> 12 -> 20 channels, a stride-2 3x3, a 5x5
      depthwise, max pooling of a 7x6 map and a 7-class dense layer: extents no tile divides;
    - ``int8_depthwise_pool``: depthwise layers at stride 1 and 2, 3x3 max pooling and global
      average pooling;
    - ``int8_mlp``: dense layers only (64 -> 100 -> 37).
    """
    from .models import GraphBuilder

    g = GraphBuilder(seed + 11)
    x = g.conv("input", 3, 12, 3, stride=2)
    x = g.conv(x, 12, 12, 5, groups=12)
    x = g.conv(x, 12, 20, 1)
    x = g.op("MaxPool", [x], kernel_shape=[2, 2], strides=[2, 2])
    x = g.op("Flatten", [x], axis=1)
    odd = g.model("input", [1, 3, 13, 11], g.dense(x, 20 * 3 * 3, 7), [1, 7], "int8_odd_shapes")

    g = GraphBuilder(seed + 12)
    x = g.conv("input", 3, 16, 3)
    x = g.conv(x, 16, 16, 3, groups=16)
    x = g.conv(x, 16, 16, 3, stride=2, groups=16)
    x = g.op("MaxPool", [x], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    x = g.op("GlobalAveragePool", [x])
    x = g.op("Flatten", [x], axis=1)
    pool = g.model("input", [1, 3, 16, 16], g.dense(x, 16, 10), [1, 10], "int8_depthwise_pool")

    g = GraphBuilder(seed + 13)
    x = g.op("Relu", [g.dense("input", 64, 100)])
    mlp = g.model("input", [1, 64], g.dense(x, 100, 37), [1, 37], "int8_mlp")
    return {model.graph.name: qdq_int8(model, seed) for model in (odd, pool, mlp)}


@dataclass
class WorkloadOutcome:
    """What ``conformance_workloads`` found for one (target, workload)."""

    target: str
    workload: str
    compiled: bool
    message: str = ""  # why the target refused it, or what failed
    offloaded_regions: int = 0
    problems: list[str] = field(default_factory=list)
    #: how the outputs were checked ("bit-exact against the integer reference", ...)
    checked: str = ""

    def line(self) -> str:
        """One line of the conformance summary: ran, skipped (and why) or failed."""
        where = f"{self.target} / {self.workload}"
        if self.problems:
            return f"FAILED  {where}: " + "; ".join(self.problems)
        if not self.compiled:
            return f"skipped {where}: the target refused it ({self.message})"
        return f"ran     {where}: {self.offloaded_regions} region(s) offloaded, outputs " \
               f"{self.checked}, second compile byte-identical"


def summary(outcomes: list[WorkloadOutcome]) -> str:
    """What ran, what was skipped and what failed, one line per (target, workload)."""
    return "\n".join(outcome.line() for outcome in outcomes)


def _host_reasons(report) -> list[str]:
    return [f"operator {row['index']} ({row['op']}) runs on the host without a reason"
            for row in report["operators"]
            if row.get("module") == "host" and not str(row.get("reason", "")).strip()]


def _compare_with_host(compiled, host, seed: int = 0) -> list[str]:
    import numpy as np

    from ..frontend import random_inputs

    x = random_inputs(compiled.inputs, seed)
    ours, ref = compiled.run(x), host.run(x)
    problems = []
    for (name, a), b in zip(ours.items(), ref.values()):
        if a.shape != b.shape or a.dtype != b.dtype:
            problems.append(f"output {name}: {a.dtype}{list(a.shape)} vs the host build's "
                            f"{b.dtype}{list(b.shape)}")
        elif np.issubdtype(a.dtype, np.integer):
            if not np.array_equal(a, b):
                problems.append(f"output {name}: not bit-exact with the host build")
        else:
            scale = float(np.max(np.abs(b))) or 1.0
            error = float(np.max(np.abs(a - b))) / scale
            if not error <= 1e-4:
                problems.append(f"output {name}: relative error {error:.2e} > 1e-4 against "
                                f"the host build")
    return problems


def _artifact_differences(first, second) -> list[str]:
    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory() as tmp:
        a, b = first.save(Path(tmp) / "a"), second.save(Path(tmp) / "b")
        names = sorted(str(p.relative_to(a)) for p in a.rglob("*") if p.is_file())
        other = sorted(str(p.relative_to(b)) for p in b.rglob("*") if p.is_file())
        if names != other:
            return [f"two compiles wrote different files: {sorted(set(names) ^ set(other))}"]
        return [f"two compiles wrote different bytes in {name}" for name in names
                if name not in _TIMED_FILES and _content(a / name) != _content(b / name)]


def _content(path):
    """A file's bytes; for the manifest, its JSON without the report files' hashes and the
    digest over them."""
    if path.name != "manifest.json":
        return path.read_bytes()
    import json

    manifest = json.loads(path.read_text())
    for name in _TIMED_FILES:
        manifest.get("files", {}).pop(name, None)
    manifest.pop("digest", None)
    return manifest


def conformance_workloads(name: str, registry: PluginRegistry | None = None,
                          workloads: Mapping[str, Any] | None = None,
                          options: Mapping[str, Any] | None = None) -> list[WorkloadOutcome]:
    """Compile the standard small workloads for every target of plugin ``name`` and check
    what a user relies on; the outcomes list every problem found.

    Workloads (ONNX): ``small_convnet`` (float), ``int8_convnet`` (QDQ int8, when onnxruntime
    is installed) and an odd one (dilated, grouped, non-square); a target that refuses the
    float ``small_convnet`` (an int8-only target) is given ``int8_workloads`` as well. For
    each, a target either refuses it with a one-line ``EdgebyocError`` (e.g. an int8-only
    target and a float model), or compiles it and then: the outputs equal the host build's
    (relative error 1e-4 for float; ``verify`` bit-exact against the integer reference for
    integerized models), every
    operator left on the host has a reason in the report, and a second compile writes a
    byte-identical artifact (the report files, which hold compile times, aside).
    ``options`` are given to every compile (e.g. a runtime that works on the test machine).
    ``conformance_workloads`` never raises for a plugin's failure: a crash is a problem.
    """
    from .models import small_convnet

    registry = registry or PluginRegistry()
    standard = workloads is None
    if standard:
        workloads = {"small_convnet": small_convnet(), "odd_convnet": _odd_convnet()}
        try:
            workloads["int8_convnet"] = int8_convnet()
        except ImportError:  # onnxruntime is a test extra
            pass
    outcomes = []
    for target in registry.info(name).target_objects:
        mine = [_run_workload(target.name, label, model, registry, options)
                for label, model in workloads.items()]
        int8_only = standard and "int8_convnet" in workloads and not mine[0].compiled
        if int8_only:  # the float workloads were refused: the int8 set instead
            mine += [_run_workload(target.name, label, model, registry, options)
                     for label, model in int8_workloads().items()]
        outcomes += mine
    return outcomes


def _run_workload(target: str, label: str, model, registry: PluginRegistry,
                  options: Mapping[str, Any] | None) -> WorkloadOutcome:
    """One standard workload compiled for ``target`` and checked (``conformance_workloads``)."""
    from ..errors import EdgebyocError
    from ..pipeline import compile as compile_model
    from ..verify import integerized, verify

    outcome = WorkloadOutcome(target, label, compiled=False)
    try:
        compiled = compile_model(model, target=target, registry=registry, options=options)
    except EdgebyocError as err:
        outcome.message = str(err)
        if not outcome.message or "\n" in outcome.message:
            outcome.problems.append(f"refused without a one-line reason: {err!r}")
        return outcome
    except Exception as err:  # noqa: BLE001 - the suite reports, never crashes
        outcome.problems.append(f"compile crashed: {type(err).__name__}: {err}")
        return outcome
    outcome.compiled = True
    report = compiled.report
    outcome.offloaded_regions = sum(r["offloaded"] for r in report["regions"])
    outcome.problems += _host_reasons(report)
    try:
        if integerized(compiled):
            result, _ = verify(compiled, seed=0)
            outcome.checked = "bit-exact against the integer reference"
            if not result.passed:
                outcome.problems.append(f"verify failed: {result.to_dict()}")
        else:
            host = compile_model(model, target="host", registry=PluginRegistry(search_path=[]))
            outcome.checked = "within 1e-4 of the host build"
            outcome.problems += _compare_with_host(compiled, host)
        again = compile_model(model, target=target, registry=registry, options=options)
        outcome.problems += _artifact_differences(compiled, again)
    except Exception as err:  # noqa: BLE001
        outcome.problems.append(f"running failed: {type(err).__name__}: {err}")
    return outcome


def check_workloads(name: str, registry: PluginRegistry | None = None,
                    options: Mapping[str, Any] | None = None) -> list[WorkloadOutcome]:
    """Assert that ``conformance_workloads`` finds no problem and that every target of plugin
    ``name`` compiles at least one standard workload; returns the outcomes."""
    outcomes = conformance_workloads(name, registry, options=options)
    problems = [f"{o.target} / {o.workload}: {p}" for o in outcomes for p in o.problems]
    assert not problems, f"plugin {name!r} fails the standard workloads:\n- " + \
        "\n- ".join(problems) + "\n" + summary(outcomes)
    for target in {o.target for o in outcomes}:
        assert any(o.compiled for o in outcomes if o.target == target), \
            f"target {target!r} compiles none of the standard workloads: " + "; ".join(
                f"{o.workload}: {o.message}" for o in outcomes if o.target == target)
    return outcomes
