"""The conformance checks every plugin's test suite runs: ``check_plugin(registry, name)``.

They exercise each hook the plugin implements with the data the core would pass and check the
answers against the contract, so a plugin learns about a broken hook in its own tests rather
than in a user's compile. Usage in ``plugins/<name>/tests/test_conformance.py``::

    from edgebyoc.plugins import PluginRegistry
    from edgebyoc.testing.conformance import check_plugin

    def test_conformance():
        check_plugin(PluginRegistry(), "gap9")

``check_plugin`` raises ``AssertionError`` listing every problem found.
"""

from __future__ import annotations

from typing import Any

from ..plugins import PluginRegistry, PluginStatus
from ..target import (API_VERSION, ApiBinding, Cost, OutputKind, PatternEntry, RuntimeLoader,
                      Target, Workload, api_major)

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
    if info.status is not PluginStatus.ACTIVE:
        return [f"plugin {name!r} is {info.status.value}: {info.reason}"]
    problems: list[str] = []
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
    if api_major(target.api_version) != api_major(API_VERSION):
        problems.append(f"{where}: api_version {target.api_version} (core: {API_VERSION})")
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
    sizes = [level.size_bytes for level in module.memory_levels]
    if sizes != sorted(sizes):
        problems.append(f"{where}: memory levels must go from the innermost (smallest) out")
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
