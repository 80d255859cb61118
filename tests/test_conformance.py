"""The conformance checks plugins run: a conforming plugin passes, each breach is named."""

from pathlib import Path

import pytest

from edgebyoc.testing.conformance import check_plugin, plugin_problems

PLUGIN_DIR = Path(__file__).resolve().parent / "byoc_plugins"

SLOPPY = """
import edgebyoc
from edgebyoc.target import ExecModule, MemoryLevel, OutputKind, PatternEntry, Target
from tvm.relax.dpl import is_op, wildcard

@edgebyoc.hookimpl
def edgebyoc_targets():
    module = ExecModule("npu", output_kind=OutputKind.JSON_GRAPH,
                        memory_levels=(MemoryLevel("L2", 1 << 20), MemoryLevel("L1", 1 << 10)))
    return [Target("sloppy", modules=(module,))]

@edgebyoc.hookimpl
def edgebyoc_patterns(target, module):
    relu = is_op("relax.nn.relu")(wildcard())
    return [PatternEntry("relu", relu), PatternEntry("relu", relu), "conv2d"]

@edgebyoc.hookimpl
def edgebyoc_cost(target, module, workload, schedule):
    return workload.macs / 16

@edgebyoc.hookimpl
def edgebyoc_runtime_apis(target, module, flavour):
    from edgebyoc.target import ApiBinding
    return ApiBinding(flavour="soc")
"""


def test_the_test_plugin_conforms(make_plugin, isolated_registry, monkeypatch):
    monkeypatch.syspath_prepend(str(PLUGIN_DIR))
    registry = isolated_registry(make_plugin("duo", module="duo"))
    check_plugin(registry, "duo")


def test_every_breach_is_listed(make_plugin, isolated_registry):
    registry = isolated_registry(make_plugin("sloppy", SLOPPY))
    problems = "\n".join(plugin_problems(registry, "sloppy"))
    assert "target 'sloppy': no description" in problems
    assert "memory levels must go from the innermost out: the last (outer) one must be " \
        "larger than the first" in problems
    assert "edgebyoc_patterns returned a str" in problems
    assert "pattern names repeat: ['relu', 'relu']" in problems
    assert "edgebyoc_cost returned a float" in problems
    assert "the 'host' binding says flavour 'soc'" in problems
    assert "produces json_graph but the plugin gives no runtime loader" in problems
    with pytest.raises(AssertionError, match="plugin 'sloppy' breaks the contract"):
        check_plugin(registry, "sloppy")
    assert plugin_problems(registry, "absent") == [
        "no plugin 'absent' is installed (installed: sloppy)"]
