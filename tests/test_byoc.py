"""The BYOC core with the test plugin ``duo`` (tests/byoc_plugins): dispatch by cost, regions,
fallback, the three output kinds, boundary layouts, the metadata module."""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest

import edgebyoc
from edgebyoc.plugins import PluginRegistry
from edgebyoc.testing.models import GraphBuilder, small_convnet

HERE = Path(__file__).resolve().parent
PLUGIN_DIR = HERE / "byoc_plugins"


@pytest.fixture
def duo(make_plugin, isolated_registry, monkeypatch):
    monkeypatch.syspath_prepend(str(PLUGIN_DIR))
    site = make_plugin("duo", module="duo", distribution="edgebyoc-test-duo")
    registry = isolated_registry(site)
    registry.test_site = site  # where the fake distribution lives, for child processes
    return registry


def host_outputs(model, inputs):
    compiled = edgebyoc.compile(model, registry=PluginRegistry(search_path=[]))
    return compiled.run(inputs)


def assert_matches_host(compiled, model, seed=0, rtol=1e-5):
    from edgebyoc.frontend import random_inputs
    from edgebyoc.verify import compare_output

    inputs = random_inputs(compiled.inputs, seed)
    reference = host_outputs(model, inputs)
    outputs = compiled.run(inputs)
    for name, value in outputs.items():
        result = compare_output(name, value, reference[name], rtol)
        assert result.passed, result
    return outputs


def modules_of(compiled, op):
    return [row["module"] for row in compiled.report["operators"] if row["op"] == op]


def test_cheaper_module_wins_and_flips_with_shapes(duo):
    small = small_convnet(16)
    compiled = edgebyoc.compile(small, target="duo", registry=duo)
    assert modules_of(compiled, "nn.conv2d") == ["graph", "graph"]
    reason = [r["reason"] for r in compiled.report["operators"] if r["op"] == "nn.conv2d"][0]
    # 55296 MACs: graph 55296 / 4 + 100 cycles, csrc 20000 + 55296 / 64
    assert reason == ("pattern duo.graph.conv2d_bias_relu; latency 1.392e+04 cycles beats "
                      "csrc 2.086e+04 cycles")
    assert_matches_host(compiled, small)

    large = small_convnet(32)
    compiled = edgebyoc.compile(large, target="duo", registry=duo)
    assert modules_of(compiled, "nn.conv2d") == ["csrc", "csrc"]
    assert compiled.manifest["c_source_regions"]
    assert_matches_host(compiled, large)


def test_energy_metric_changes_the_choice(duo):
    compiled = edgebyoc.compile(small_convnet(16), target="duo", registry=duo,
                                cost_metric="energy")
    assert modules_of(compiled, "nn.conv2d") == ["csrc", "csrc"]


def ssd_like(seed=0) -> onnx.ModelProto:
    """Conv backbone and heads, then MAC-free post-processing behind a host-only softmax."""
    g = GraphBuilder(seed)
    x = g.conv("input", 3, 8, 3)
    x = g.conv(x, 8, 16, 3, stride=2)
    x = g.conv(x, 16, 16, 3)
    scores = g.conv(x, 16, 6, 1, relu=False)                     # 6 = 2 anchors x 3 classes
    boxes = g.conv(x, 16, 8, 1, relu=False)                      # 8 = 2 anchors x 4 coords
    scores = g.op("Transpose", [scores], perm=[0, 2, 3, 1])
    scores = g.op("Reshape", [scores, g.const(np.array([1, -1, 3], np.int64), "shape")])
    scores = g.op("Softmax", [scores], axis=-1)                  # not supported: host
    scores = g.op("Mul", [scores, g.const(np.full((3,), 2.0, np.float32), "scale")])
    scores = g.op("Sigmoid", [scores])
    boxes = g.op("Transpose", [boxes], perm=[0, 2, 3, 1])
    boxes = g.op("Reshape", [boxes, g.const(np.array([1, -1, 4], np.int64), "shape")])
    out = g.op("Concat", [scores, boxes], axis=-1)               # not supported: host
    return g.model("input", [1, 3, 16, 16], out, [1, 128, 7], "ssd_like")


def test_ssd_like_backbone_offloaded_postprocessing_on_host(duo):
    model = ssd_like()
    compiled = edgebyoc.compile(model, target="duo", registry=duo)
    summary = compiled.report["summary"]
    regions = compiled.report["regions"]
    fallen = [r for r in regions if not r["offloaded"]]
    assert fallen and all(r["macs"] == 0 and "fallback to host" in r["reason"] for r in fallen)
    assert summary["regions_before_fallback"] == len(regions) > summary["regions_offloaded"]
    assert summary["mac_offload_ratio"] == 1.0
    assert 0 < summary["node_offload_ratio"] < 1
    rows = compiled.report["operators"]
    assert all(r["module"] != "host" for r in rows if r["macs"] > 0)
    assert {r["module"] for r in rows if r["op"] in ("nn.softmax", "concat", "sigmoid")} == \
        {"host"}
    markdown = (compiled.save(Path(os.environ.get("TMPDIR", "/tmp")) / "ssd_like_artifact")
                / "report.md").read_text()
    assert "## Regions" in markdown and "fallback to host" in markdown
    assert_matches_host(compiled, model)


def test_region_over_memory_limit_is_split(duo):
    model = small_convnet(16)
    compiled = edgebyoc.compile(model, target="duo_tight", registry=duo)
    regions = compiled.report["regions"]
    assert len(regions) > 1
    for region in regions:
        assert region["memory_bytes"] <= 6000 or len(region["patterns"]) == 1
    assert_matches_host(compiled, model)


def test_boundary_layout_conversion(duo):
    model = small_convnet(16)
    compiled = edgebyoc.compile(model, target="nhwcchip", registry=duo)
    assert modules_of(compiled, "nn.conv2d") == ["graph", "graph"]
    # weights were transformed once, at compile time, to the module's OHWI layout
    shapes = [list(a.shape) for a in compiled.constants.values()]
    assert [8, 3, 3, 3] in shapes and [16, 3, 3, 8] in shapes
    # the conversions into and out of the region run on the host, at its boundary
    transposes = [r for r in compiled.report["operators"] if r["op"] == "permute_dims"]
    assert transposes and all(r["module"] == "host" or r["module"] == "graph"
                              for r in transposes)
    assert_matches_host(compiled, model)


def test_blob_kind_and_round_trip_in_a_fresh_process(duo, tmp_path):
    model = small_convnet(16)
    compiled = edgebyoc.compile(model, target="blobchip", registry=duo)
    outputs = assert_matches_host(compiled, model, seed=3)
    artifact = compiled.save(tmp_path / "blob")
    manifest = json.loads((artifact / "manifest.json").read_text())
    # the backbone region and the classifier region (the global pooling between runs on the host)
    assert [r["kind"] for r in manifest["external"]] == ["blob", "blob"]
    assert all((artifact / r["file"]).exists() for r in manifest["external"])
    from edgebyoc.frontend import random_inputs
    np.savez(tmp_path / "x.npz", **random_inputs(compiled.inputs, 3))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(duo.test_site), str(PLUGIN_DIR)]))
    env.pop("EDGEBYOC_LOAD_PLUGINS", None)
    script = ("import numpy as np, edgebyoc\n"
              f"m = edgebyoc.load({str(artifact)!r})\n"
              f"x = dict(np.load({str(tmp_path / 'x.npz')!r}))\n"
              "first = m.run(x); second = m.run(x)\n"
              "from numpy_engine import GraphEngine\n"
              "print(GraphEngine.builds)\n"
              f"np.savez({str(tmp_path / 'y.npz')!r}, **first)\n")
    result = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                            text=True)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == str(len(manifest["external"]))  # engines built once
    again = np.load(tmp_path / "y.npz")
    for name, value in outputs.items():
        assert np.array_equal(again[name], value)


@pytest.mark.slow
def test_constants_are_owned_once(duo, tmp_path):
    from edgebyoc.testing.models import mobilenet_v2

    model = mobilenet_v2(32)
    weight_bytes = sum(onnx.numpy_helper.to_array(t).nbytes for t in model.graph.initializer
                       if t.data_type == onnx.TensorProto.FLOAT)
    for target in ("host", "duo"):
        compiled = edgebyoc.compile(model, target=target, registry=duo)
        artifact = compiled.save(tmp_path / target)
        manifest = json.loads((artifact / "manifest.json").read_text())
        stored = sum(row["nbytes"] for row in manifest["constants"])
        assert abs(stored - weight_bytes) / weight_bytes < 0.01, (target, stored, weight_bytes)
        library = (artifact / "host.so").stat().st_size
        assert library < weight_bytes / 4, (target, library, weight_bytes)
        assert (artifact / "constants.bin").stat().st_size < stored + 64 * len(
            manifest["constants"])
        users = [u for row in manifest["constants"] for u in row["users"]]
        if target == "duo":
            assert any(u.startswith("external:") for u in users)
        loaded = edgebyoc.load(artifact, registry=duo)
        x = np.random.default_rng(0).standard_normal((1, 3, 32, 32)).astype(np.float32)
        for name, value in compiled.run({"input": x}).items():
            assert np.array_equal(loaded.run({"input": x})[name], value)


def test_codegen_failure_names_the_plugin(duo, monkeypatch):
    import duo as plugin

    def broken(region):
        raise KeyError("strides")

    monkeypatch.setattr(plugin, "_c_source", broken)
    with pytest.raises(edgebyoc.EdgebyocError, match="code generation of duo_csrc_r0_.* failed: "
                                                     "plugin 'duo' raised in edgebyoc_codegen "
                                                     "for target 'duo': KeyError: 'strides'"):
        edgebyoc.compile(small_convnet(32), target="duo", registry=duo)
