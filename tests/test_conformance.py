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


PAST_THE_API = """
import importlib
from edgebyoc import api
from edgebyoc.api import ExecModule, Target, hookimpl
from edgebyoc.api.match import search

@hookimpl
def edgebyoc_targets():
    from edgebyoc.pipeline import compile  # noqa: F401 - reaching past edgebyoc.api
    importlib.import_module("edgebyoc.codegen.layer")
    return [Target("reacher", "reaches past the API", modules=(ExecModule("npu"),))]
"""


def test_imports_past_the_api_are_named_with_file_and_line(make_plugin, isolated_registry):
    registry = isolated_registry(make_plugin("reacher", PAST_THE_API))
    problems = plugin_problems(registry, "reacher")
    assert [p.split(".py:", 1)[1].split(" (")[0] for p in problems] == [
        "9 imports edgebyoc.pipeline", "10 imports edgebyoc.codegen.layer"]
    assert all("edgebyoc_test_reacher.py:" in p and "imports only edgebyoc.api" in p
               for p in problems)
    sloppy = "\n".join(plugin_problems(isolated_registry(make_plugin("sloppy", SLOPPY)),
                                       "sloppy"))
    assert ":2 imports edgebyoc (" in sloppy and ":3 imports edgebyoc.target (" in sloppy


def test_the_in_tree_allow_list_is_the_checks():
    import tomllib

    from edgebyoc.testing.import_boundary import PLUGIN_IMPORTS

    pyproject = tomllib.loads((Path(__file__).resolve().parents[1] / "pyproject.toml")
                              .read_text())
    assert tuple(pyproject["tool"]["edgebyoc"]["plugin_imports"]) == PLUGIN_IMPORTS


def test_check_plugin_command(make_plugin, isolated_registry, monkeypatch):
    from click.testing import CliRunner

    import edgebyoc.plugins
    from edgebyoc import cli

    registry = isolated_registry(make_plugin("reacher", PAST_THE_API))
    monkeypatch.setattr(edgebyoc.plugins, "default_registry", lambda: registry)
    result = CliRunner().invoke(cli.main, ["check-plugin", "reacher"])
    assert result.exit_code == 1, result.output
    assert "imports and hooks: 2 problem(s)" in result.output
    assert ":9 imports edgebyoc.pipeline" in result.output
    monkeypatch.syspath_prepend(str(PLUGIN_DIR))
    registry = isolated_registry(make_plugin("duo", module="duo"))
    result = CliRunner().invoke(cli.main, ["check-plugin", "duo"])
    assert result.exit_code == 0 and "imports and hooks: OK" in result.output, result.output
    result = CliRunner().invoke(cli.main, ["check-plugin", "absent"])
    assert result.exit_code == 1 and "no plugin 'absent' is installed" in result.output


def test_the_summary_says_what_ran_and_what_was_skipped():
    from edgebyoc.testing.conformance import WorkloadOutcome, summary

    outcomes = [WorkloadOutcome("chip", "small_convnet", False, message="runs int8 models"),
                WorkloadOutcome("chip", "int8_mlp", True, offloaded_regions=2,
                                checked="bit-exact against the integer reference"),
                WorkloadOutcome("chip", "int8_odd_shapes", True, problems=["verify failed"])]
    assert summary(outcomes).splitlines() == [
        "skipped chip / small_convnet: the target refused it (runs int8 models)",
        "ran     chip / int8_mlp: 2 region(s) offloaded, outputs bit-exact against the integer "
        "reference, second compile byte-identical",
        "FAILED  chip / int8_odd_shapes: verify failed"]


def test_the_integer_reference_pools_as_onnxruntime_does():
    """Max pooling (padded, strided) and global average pooling of the integer reference, the
    operators the int8 conformance workloads leave on the host, against onnxruntime."""
    import numpy as np
    import onnxruntime as ort
    from tvm import relax

    from edgebyoc.quant.reference import run_reference
    from edgebyoc.testing.conformance import int8_workloads
    from edgebyoc.testing.models import GraphBuilder

    assert sorted(int8_workloads()) == ["int8_depthwise_pool", "int8_mlp", "int8_odd_shapes"]
    x = np.random.default_rng(0).standard_normal((1, 5, 9, 7)).astype(np.float32)
    g = GraphBuilder(0)
    y = g.op("MaxPool", ["input"], kernel_shape=[3, 2], strides=[2, 2], pads=[1, 0, 1, 1])
    model = g.model("input", [1, 5, 9, 7], g.op("GlobalAveragePool", [y]), [1, 5, 1, 1], "p")
    want = ort.InferenceSession(model.SerializeToString()).run(None, {"input": x})[0]
    from tvm.relax.frontend.onnx import from_onnx

    mod = relax.transform.DecomposeOpsForInference()(from_onnx(model))
    got = run_reference(mod, [x])[0]
    np.testing.assert_allclose(got, want, rtol=1e-6)


def test_a_namespace_package_plugin_is_checked_alone(tmp_path, monkeypatch):
    """Two vendors' plugins under one namespace package ``acme``: each plugin's check reads
    its own regular package, not its neighbour's; a plugin module directly in the namespace
    is checked alone."""
    from edgebyoc.testing.import_boundary import plugin_import_violations

    for package, source in (("clean", "from edgebyoc.api import Target\n"),
                            ("reacher", "from edgebyoc.pipeline import compile\n")):
        folder = tmp_path / "acme" / package
        folder.mkdir(parents=True)
        (folder / "__init__.py").write_text("")
        (folder / "plugin.py").write_text(source)
        (folder / "helpers.py").write_text("import edgebyoc.target\n" if package == "reacher"
                                           else "")
    (tmp_path / "acme" / "single.py").write_text("import edgebyoc.codegen\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert plugin_import_violations("acme.clean.plugin") == []
    found = sorted((Path(v.file).name, v.line, v.imported)
                   for v in plugin_import_violations("acme.reacher.plugin"))
    assert found == [("helpers.py", 1, "edgebyoc.target"), ("plugin.py", 1, "edgebyoc.pipeline")]
    assert [(Path(v.file).name, v.imported) for v in plugin_import_violations("acme.single")] \
        == [("single.py", "edgebyoc.codegen")]
    assert plugin_import_violations("acme.absent.plugin") == []
