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
from edgebyoc.report import render_markdown
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
    # the C kernels take OHWI weights their codegen computed once: the artifact holds those
    shapes = [tuple(a.shape) for a in compiled.constants.values()]
    assert (16, 3, 3, 8) in shapes and (16, 8, 3, 3) not in shapes
    assert_matches_host(compiled, large)


def test_whole_network_latency_prices_the_host_operators(duo):
    compiled = edgebyoc.compile(small_convnet(16), target="duo", registry=duo)
    report, summary = compiled.report, compiled.report["summary"]
    host = [row for row in report["operators"] if row["module"] == "host"]
    assert host
    for row in host:  # duo's host model: 10 cycles per MAC plus one per output element
        elements = int(np.prod(row["shape"])) if row["shape"] else 1
        assert row["predicted_cycles"] == 10 * row["macs"] + elements
    offloaded = sum(r["predicted_cycles"] for r in report["regions"] if r["offloaded"])
    assert summary["predicted_offload_cycles"] == pytest.approx(offloaded)
    assert summary["predicted_host_cycles"] == sum(row["predicted_cycles"] for row in host)
    assert summary["predicted_cycles"] == pytest.approx(offloaded + summary["predicted_host_cycles"])
    assert summary["clock_hz"] == 100e6
    assert summary["predicted_latency_ms"] == pytest.approx(summary["predicted_cycles"] / 1e5)
    assert summary["macs_per_cycle"] == pytest.approx(summary["macs"] / summary["predicted_cycles"])
    markdown = render_markdown(report)
    assert f"{summary['predicted_latency_ms']:.3g} ms (" in markdown
    assert "at 100 MHz" in markdown and "| host cycles |" in markdown


def test_no_whole_network_latency_without_a_host_model(duo):
    # duo_tight has no host model (edgebyoc_host_cost answers None) and no clock
    compiled = edgebyoc.compile(small_convnet(16), target="duo_tight", registry=duo)
    summary = compiled.report["summary"]
    assert summary["predicted_cycles"] is None and summary["predicted_latency_ms"] is None
    assert all(row.get("predicted_cycles") is None for row in compiled.report["operators"])


BARE_PLUGIN = """
from edgebyoc.api import Cost, Target, hookimpl

@hookimpl
def edgebyoc_targets():
    return [Target("bare", "a processor without modules", api_version="2.5")]

@hookimpl
def edgebyoc_host_cost(target, workload):
    return Cost(2 * workload.macs + 1)
"""


def test_a_target_without_modules_prices_every_operator(make_plugin, isolated_registry):
    """A plain processor (a plugin target with no module, as edgebyoc-mcu) prices every
    operator with its host model; the built-in host target, which no plugin owns, none."""
    registry = isolated_registry(make_plugin("bare", BARE_PLUGIN))
    compiled = edgebyoc.compile(small_convnet(8), target="bare", registry=registry)
    rows, summary = compiled.report["operators"], compiled.report["summary"]
    assert rows and all(row["predicted_cycles"] == 2 * row["macs"] + 1 for row in rows)
    assert summary["predicted_cycles"] == sum(2 * row["macs"] + 1 for row in rows)
    assert summary["note"] == ("Target 'bare' has no execution modules: every operator runs on "
                               "its processor, through TVM.")
    host = edgebyoc.compile(small_convnet(8), target="host", registry=registry)
    assert host.report["summary"]["predicted_cycles"] is None
    assert host.report["summary"]["note"] == "The host target runs every operator on the CPU " \
        "through TVM."


def test_a_clock_must_be_positive():
    from edgebyoc.api import Target
    with pytest.raises(ValueError, match="clock_hz must be a positive number of hertz"):
        Target("chip", clock_hz=-5)


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
    # large convolutions (csrc), small ones (graph), a depthwise one and a classifier (host)
    g = GraphBuilder(7)
    x = g.conv("input", 3, 32, 3, stride=2)
    x = g.conv(x, 32, 32, 3, groups=32)
    x = g.conv(x, 32, 8, 1)
    x = g.conv(x, 8, 96, 3)
    x = g.conv(x, 96, 96, 3, stride=2)
    x = g.op("Flatten", [g.op("GlobalAveragePool", [x])], axis=1)
    model = g.model("input", [1, 3, 32, 32], g.dense(x, 96, 1000), [1, 1000], "owned_once")
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


def one_conv(seed=0) -> onnx.ModelProto:
    g = GraphBuilder(seed)
    y = g.conv("input", 4, 8, 3)
    return g.model("input", [1, 4, 8, 8], y, [1, 8, 8, 8], "one_conv")


def test_partial_quantization_is_bit_exact_against_integer_reference(duo):
    from numpy.lib.stride_tricks import sliding_window_view
    from onnx import numpy_helper

    model = one_conv()
    rng = np.random.default_rng(0)
    calibration = [{"input": rng.standard_normal((1, 4, 8, 8)).astype(np.float32)}
                   for _ in range(4)]
    with pytest.raises(edgebyoc.EdgebyocError, match="run quantized and 2 region boundary "
                                                     "tensor\\(s\\) have no scale in the model; "
                                                     "pass calibration inputs"):
        edgebyoc.compile(model, target="qchip", registry=duo)
    compiled = edgebyoc.compile(model, target="qchip", registry=duo, calibration=calibration)
    (region,) = compiled.report["regions"]
    quant = region["quantization"]
    s_x, s_w, s_b = quant["input_scales"]
    s_y = quant["output_scale"]
    assert s_x == pytest.approx(max(np.abs(c["input"]).max() for c in calibration) / 127)
    # the weights entered the artifact as int8, quantized once at compile time
    assert sorted(str(a.dtype) for a in compiled.constants.values()) == ["int8", "int8"]

    # inputs on the quantization grid, so that host-side rounding is unambiguous
    k = rng.integers(-100, 100, (1, 4, 8, 8))
    x = (k.astype(np.float32) * np.float32(s_x)).astype(np.float32)
    out = compiled.run({"input": x})
    (y,) = out.values()

    # the integer arithmetic, independently: int8 operands, exact int accumulation, one rescale
    w = numpy_helper.to_array(model.graph.initializer[0])
    b = numpy_helper.to_array(model.graph.initializer[1])
    q_x = np.clip(np.round(x / np.float32(s_x)), -128, 127).astype(np.int64)
    q_w = np.clip(np.round(w / np.float32(s_w)), -127, 127).astype(np.int64)
    q_b = np.clip(np.round(b / np.float32(s_b)), -127, 127).astype(np.int8)
    padded = np.pad(q_x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    windows = sliding_window_view(padded, (3, 3), axis=(2, 3))      # 1, 4, 8, 8, 3, 3
    acc = np.einsum("nchwij,ocij->nohw", windows, q_w)
    real = acc.astype(np.float32) * (np.float32(s_x) * np.float32(s_w))
    real = real + (q_b.astype(np.float32) * np.float32(s_b)).reshape(1, 8, 1, 1)
    real = np.maximum(real, np.float32(0))
    q_y = np.clip(np.round(real / np.float32(s_y)), -128, 127).astype(np.int8)
    expected = q_y.astype(np.float32) * np.float32(s_y)
    assert np.array_equal(y, expected)
    assert (q_y != 0).mean() > 0.3  # a meaningful comparison, not all zeros

    # and on data like the calibration's the quantized model stays close to the float one
    sample = calibration[0]
    quantized_y = next(iter(compiled.run(sample).values()))
    float_y = next(iter(host_outputs(model, sample).values()))
    assert np.abs(quantized_y - float_y).max() <= 0.05 * np.abs(float_y).max()


def test_partial_quantization_boundaries_of_a_network(duo):
    model = small_convnet(16)
    rng = np.random.default_rng(1)
    calibration = [{"input": rng.standard_normal((1, 3, 16, 16)).astype(np.float32)}
                   for _ in range(8)]
    compiled = edgebyoc.compile(model, target="qchip", registry=duo, calibration=calibration)
    regions = [r for r in compiled.report["regions"] if r["offloaded"]]
    assert regions and all(r["quantization"]["dtype"] == "int8" for r in regions)
    for region in compiled.external:
        graph = json.loads(compiled.payloads[region.symbol])
        ops = [node["op"] for node in graph["nodes"]]
        inputs = [node for node in graph["nodes"] if node["op"] in ("input", "const")]
        # int8 at the boundary: dequantized on entry, quantized before leaving
        assert {node["attrs"]["dtype"] for node in inputs} == {"int8"}
        assert ops.count("relax.dequantize") == len(inputs)
        assert ops[-1] == "relax.quantize"
    x = calibration[0]["input"]
    y = next(iter(compiled.run({"input": x}).values()))
    reference = next(iter(host_outputs(model, {"input": x}).values()))
    assert np.abs(y - reference).max() <= 0.1 * np.abs(reference).max()


def test_cli_with_a_plugin_target_and_calibration(duo, monkeypatch, tmp_path):
    from click.testing import CliRunner

    from edgebyoc import cli, plugins

    monkeypatch.setattr(plugins, "_default", duo)
    path = tmp_path / "net.onnx"
    onnx.save(small_convnet(16), path)
    samples = np.random.default_rng(0).standard_normal((4, 1, 3, 16, 16)).astype(np.float32)
    np.savez(tmp_path / "calibration.npz", input=samples)
    result = CliRunner().invoke(cli.main, ["compile", str(path), "-t", "qchip", "-q", "-o",
                                           str(tmp_path / "out"), "--calibration",
                                           str(tmp_path / "calibration.npz")])
    assert result.exit_code == 0, result.output
    assert "regions: 2 formed, 2 offloaded" in result.output
    result = CliRunner().invoke(cli.main, ["run", str(tmp_path / "out"), "--random"])
    assert result.exit_code == 0, result.output
    result = CliRunner().invoke(cli.main, ["compile", str(path), "-t", "qchip", "-q", "-o",
                                           str(tmp_path / "out2")])
    assert result.exit_code == 1 and "pass calibration inputs" in result.output
    result = CliRunner().invoke(cli.main, ["verify", str(path), "-t", "duo", "-q",
                                           "--cost-metric", "energy", "--rtol", "1e-5"])
    assert result.exit_code == 0, result.output
    assert "verify passed: net on duo vs onnxruntime" in result.output


def test_pre_quantized_qdq_model_needs_no_calibration(duo, tmp_path):
    from onnxruntime.quantization import (CalibrationDataReader, QuantFormat, QuantType,
                                          quantize_static)

    rng = np.random.default_rng(2)
    samples = [{"input": rng.standard_normal((1, 4, 8, 8)).astype(np.float32)} for _ in range(8)]

    class Reader(CalibrationDataReader):
        def __init__(self):
            self.data = iter(samples)

        def get_next(self):
            return next(self.data, None)

    onnx.save(one_conv(), tmp_path / "float.onnx")
    quantize_static(str(tmp_path / "float.onnx"), str(tmp_path / "qdq.onnx"), Reader(),
                    quant_format=QuantFormat.QDQ, activation_type=QuantType.QInt8,
                    weight_type=QuantType.QInt8,
                    extra_options={"ActivationSymmetric": True, "WeightSymmetric": True})
    qdq = onnx.load(tmp_path / "qdq.onnx")
    input_scale = next(onnx.numpy_helper.to_array(t) for t in qdq.graph.initializer
                       if t.name == next(n for n in qdq.graph.node
                                         if n.op_type == "QuantizeLinear"
                                         and n.input[0] == "input").input[1])
    compiled = edgebyoc.compile(qdq, target="qchip", registry=duo)  # no calibration needed
    (region,) = [r for r in compiled.report["regions"] if r["offloaded"]]
    assert region["quantization"]["input_scales"][0] == pytest.approx(float(input_scale))
    from edgebyoc.verify import compare_output
    outputs = compiled.run(samples[0])
    reference = host_outputs(qdq, samples[0])
    for name, value in outputs.items():
        # the same quantization grid: equal up to one step of the output scale
        step = region["quantization"]["output_scale"]
        assert np.abs(value - reference[name]).max() <= step * 1.01, compare_output(
            name, value, reference[name], 0)


def test_replacing_a_non_constant_parameter_is_refused(duo, monkeypatch):
    import duo as plugin
    from edgebyoc.target import CodegenOutput, OutputKind

    @edgebyoc.hookimpl
    def bad_codegen(target, module, region, schedule, context):
        return CodegenOutput(OutputKind.C_SOURCE, region.symbol, c_source="",
                             replaced_constants={0: ()})  # parameter 0 is the input tensor

    monkeypatch.setattr(plugin, "edgebyoc_codegen", bad_codegen)
    registry = duo.__class__(search_path=[str(duo.test_site)], environ={})
    with pytest.raises(edgebyoc.EdgebyocError, match="replaces parameters \\[0\\], which are "
                                                     "not constants"):
        edgebyoc.compile(small_convnet(32), target="duo", registry=registry)


REFUSING = """
import edgebyoc
from edgebyoc.target import Target, ExecModule, OutputKind, PatternEntry
from tvm.relax.dpl import is_op, wildcard

@edgebyoc.hookimpl
def edgebyoc_targets():
    return [Target("picky", "refuses every convolution",
                   modules=(ExecModule("npu", output_kind=OutputKind.C_SOURCE),))]

@edgebyoc.hookimpl
def edgebyoc_patterns(target, module, options):
    conv = is_op("relax.nn.conv2d")(wildcard(), wildcard())
    return [PatternEntry("conv2d", conv, check=lambda ctx: "stride 2 is not supported")]
"""


def test_a_refusing_check_explains_itself(make_plugin, isolated_registry):
    registry = isolated_registry(make_plugin("picky", REFUSING))
    compiled = edgebyoc.compile(small_convnet(16), target="picky", registry=registry)
    reasons = {r["reason"] for r in compiled.report["operators"] if r["op"] == "nn.conv2d"}
    assert reasons == {"npu: stride 2 is not supported"}
    summary = compiled.report["summary"]
    assert summary["offloaded_operators"] == 0 and "refused every match (the reason is in " \
        "each operator's row)" in summary["note"]


VERSIONED = """
from edgebyoc.api import Cost, ExecModule, OutputKind, PatternEntry, Target, hookimpl
from edgebyoc.api.regions import packed_wrapper
from tvm.relax.dpl import is_const, is_op, wildcard

@hookimpl
def edgebyoc_targets():
    return [Target("{target}", "versioned", modules=(ExecModule("m"),))]

@hookimpl
def edgebyoc_patterns(target, module):
    return [PatternEntry("conv", is_op("relax.nn.conv2d")(wildcard(), is_const()))]

PRICED = []

@hookimpl
def edgebyoc_cost(target, module, workload, schedule):
    PRICED.append(workload.pattern)
    return Cost(latency_cycles={cycles})

@hookimpl
def edgebyoc_codegen(target, module, region, schedule, context):
    raise RuntimeError("not reached: the test stops at the report")
"""


def test_two_compiles_share_no_state(make_plugin, isolated_registry, small_model_path):
    """Cost cache, pattern registrations and relax.ext codegen belong to one compile: the
    same target from two plugin versions in one process, and another target, see only their
    own."""
    import tvm
    from tvm.relax.backend import pattern_registry

    from edgebyoc.errors import PluginError
    from edgebyoc.pipeline import compile as compile_model

    import sys

    seen = []
    for version, cycles in (("1.0", 1000), ("2.0", 7)):
        site = make_plugin(f"v{version[0]}", VERSIONED.format(target="chip", cycles=cycles),
                           distribution="edgebyoc-chip", version=version)
    for version in ("1.0", "2.0", "2.0"):
        registry = isolated_registry(site, EDGEBYOC_LOAD_PLUGINS=f"v{version[0]}")
        with pytest.raises(PluginError, match="not reached") as err:
            compile_model(small_model_path, target="chip", registry=registry)
        seen.append(str(err.value))
        # this compile priced its layers itself: no cost came from another compile's cache
        priced = sys.modules[f"edgebyoc_test_v{version[0]}"].PRICED
        assert priced and set(priced) == {"chip.m.conv"}
        priced.clear()
        # nothing of the compile stays registered in TVM
        assert pattern_registry.get_patterns_with_prefix("chip.") == []
        assert tvm.get_global_func("relax.ext.chip", allow_missing=True) is None
    assert len(seen) == 3


def test_every_json_and_blob_engine_matches_the_host_build_of_its_region(duo):
    from edgebyoc.api.testing import region_check

    for target in ("duo_tight", "blobchip"):
        compiled = edgebyoc.compile(small_convnet(16), target=target, registry=duo)
        errors = region_check(compiled)
        assert len(errors) >= 1 and max(errors.values()) <= 1e-5, errors


CHAINING = """
from edgebyoc.api import CodegenOutput, ExecModule, OutputKind, PatternEntry, Target, hookimpl
from edgebyoc.api.regions import argument_layout, packed_wrapper
from tvm.relax.dpl import is_const, is_op, wildcard

SEEN = []

@hookimpl
def edgebyoc_targets():
    return [Target("chainer", "every conv chained into one region", api_version="2.10",
                   modules=(ExecModule("chain", output_kind=OutputKind.C_SOURCE),))]

@hookimpl
def edgebyoc_patterns(target, module):
    conv = is_op("relax.nn.conv2d")(wildcard(), is_const())
    return [PatternEntry("conv_bias", is_op("relax.add")(conv, is_const()))]

@hookimpl
def edgebyoc_codegen(target, module, region, schedule, context):
    for composite in region.composites:
        SEEN.append((composite.workload.inputs,
                     [(tuple(int(d) for d in p.ty.shape.values), str(p.ty.dtype))
                      for p in composite.function.params]))
    n = argument_layout(region).count
    kernel = (f"int {region.symbol}_run(DLTensor** args, int n) {{\\n"
              f"  (void)args; (void)n; return 0;\\n}}\\n")
    return CodegenOutput(OutputKind.C_SOURCE, symbol=region.symbol,
                         c_source=packed_wrapper(region.symbol, f"{region.symbol}_run", n) + kernel)
"""


def test_a_region_of_several_layers_gives_each_composite_its_own_workload(make_plugin,
                                                                          isolated_registry):
    """Two convolutions of equal shapes share one composite function in a region (TVM's
    MergeCompositeFunctions keeps one), so a region of three layers holds two functions: each
    gets the workload of the layer it was fused from, matched by shapes, not by position."""
    import importlib

    g = GraphBuilder(seed=2)
    y = g.conv(g.conv(g.conv("x", 8, 8, 3, relu=False), 8, 8, 3, relu=False), 8, 16, 1,
               relu=False)
    model = g.model("x", [1, 8, 12, 12], y, [1, 16, 12, 12], "chain")
    registry = isolated_registry(make_plugin("chainer", CHAINING))
    compiled = edgebyoc.compile(model, target="chainer", registry=registry)
    (region,) = [r for r in compiled.report["regions"] if r["offloaded"]]
    assert region["patterns"] == ["chainer.chain.conv_bias"] * 3
    seen = importlib.import_module("edgebyoc_test_chainer").SEEN
    assert len(seen) == 2  # one function for the two 3x3 layers, one for the 1x1
    for inputs, params in seen:
        assert list(inputs) == params[:2]  # data and weight: the function's own shapes
