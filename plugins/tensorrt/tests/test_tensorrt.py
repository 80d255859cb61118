"""tensorrt: partitioning with TensorRT's constraints and the MAC rule (the BYOC paper's Tables
1-2), the JSON payloads, the onnxruntime route verified end to end and region by region, the
JSON-to-network translation op by op without a GPU, the engine cache key, and the TensorRT
route where TensorRT and a GPU exist (skipped here, with the reason)."""

import json
import types

import numpy as np
import pytest

from edgebyoc.api.regions import GRAPH_SCHEMA, check_graph
from edgebyoc.api.testing import (check_installed_plugin, compile, mobilenet_v2, region_check,
                                  resnet18, run_cli, verify)
from edgebyoc_tensorrt import ops
from edgebyoc_tensorrt.models import ssd_like
from edgebyoc_tensorrt.runtime import (build_network, engine_key, tensorrt_missing, to_onnx,
                                       walk)

ONNX_ROUTE = {"runtime": "onnxruntime"}
MODELS = {"resnet18": lambda: resnet18(image_size=64, num_classes=10),
          "mobilenet_v2": lambda: mobilenet_v2(image_size=64, num_classes=10),
          "ssd_like": ssd_like}


@pytest.fixture(scope="module")
def compiled():
    return {name: compile(build(), target="tensorrt", options=ONNX_ROUTE)
            for name, build in MODELS.items()}


@pytest.mark.parametrize("name", MODELS)
def test_offload_ratios_and_the_mac_rule(compiled, name):
    summary, regions = compiled[name].report["summary"], compiled[name].report["regions"]
    assert summary["mac_offload_ratio"] == 1.0
    assert summary["regions_offloaded"] == 1  # Table 2: one subgraph after the rule
    if name == "ssd_like":  # Table 1: a fraction of the nodes, every MAC
        assert 0.5 < summary["node_offload_ratio"] < 1.0
        assert summary["regions_before_fallback"] == 3
        fallen = [r for r in regions if not r["offloaded"]]
        assert fallen and all(r["macs"] == 0 and "0 MACs" in r["reason"] for r in fallen)
        host = {r["op"]: r["reason"] for r in compiled[name].report["operators"]
                if r["module"] == "host"}
        assert host["topk"] == "no pattern of trt matched"
        assert "dtype int64: the TensorRT route runs float32 / float16" in host["add"]
    else:  # classification: everything offloaded as one subgraph
        assert summary["node_offload_ratio"] == 1.0 and summary["regions_before_fallback"] == 1


@pytest.mark.parametrize("name", MODELS)
def test_onnxruntime_route_verifies_and_every_subgraph_matches_its_host_build(compiled, name):
    result, _ = verify(compiled[name], rtol=1e-4)
    assert result.passed and result.reference == "onnxruntime", result.to_dict()
    errors = region_check(compiled[name], rtol=1e-4)
    assert len(errors) == 1 and max(errors.values()) <= 1e-4


def test_payload_is_the_schema_graph_with_precision_and_workspace():
    model = compile(resnet18(image_size=32, num_classes=10), target="tensorrt",
                    options={**ONNX_ROUTE, "fp16": True, "max_workspace_mb": 64})
    (payload,) = model.payloads.values()
    spec = json.loads(payload)
    assert spec["precision"] == "fp16" and spec["max_workspace_mb"] == 64
    assert check_graph(spec["graph"]) == [] and set(GRAPH_SCHEMA["required"]) <= set(
        spec["graph"])
    # constants are arguments, never embedded: the conv weights are const nodes
    consts = [n for n in spec["graph"]["nodes"] if n["op"] == "const"]
    assert len(consts) >= 20 and all("body" not in n["attrs"] for n in consts)
    # partial precision: boundaries rounded through fp16, close to the fp32 result
    result, _ = verify(model, rtol=5e-3)
    assert result.passed and result.max_rel > 1e-7


def test_default_runtime_fails_with_one_clear_line_here(tmp_path):
    reason = tensorrt_missing()
    if reason is None:
        pytest.skip("TensorRT and a GPU are present: the engine route runs instead")
    model = tmp_path / "small.onnx"
    import onnx

    onnx.save(resnet18(image_size=32, num_classes=10), model)
    code, output = run_cli(["compile", str(model), "-t", "tensorrt", "-q", "-o",
                            str(tmp_path / "out")])
    assert code == 0, output  # compiling works without TensorRT
    code, output = run_cli(["run", str(tmp_path / "out"), "--random"])
    lines = [line for line in output.splitlines() if line.strip()]
    assert code == 1 and len(lines) == 1, output
    assert lines[0].startswith("error: ") and "TensorRT cannot run here" in lines[0] and \
        "--option runtime=onnxruntime" in lines[0]
    code, output = run_cli(["plugins", "--json"])
    entry = next(p for p in json.loads(output)["plugins"] if p["name"] == "tensorrt")
    assert entry["status"] == "active" and entry["reason"].startswith(
        "TensorRT runtime missing (")


def test_build_at_compile_time_without_tensorrt_is_one_clear_error():
    if tensorrt_missing() is None:
        pytest.skip("TensorRT and a GPU are present")
    from edgebyoc.api import PluginError

    with pytest.raises(PluginError, match="TensorRT cannot run here"):
        compile(resnet18(image_size=32, num_classes=10), target="tensorrt",
                options={"build_at_compile_time": True})


# -- the translation, op by op, without a GPU ---------------------------------------------------

class FakeTensor:
    def __init__(self, shape, origin):
        self.shape, self.origin, self.name = tuple(shape), origin, ""


class FakeLayer:
    def __init__(self, kind, shape):
        self.kind, self._shape = kind, shape

    def get_output(self, index):
        return FakeTensor(self._shape, self.kind)


class FakeNetwork:
    """Records the layers a translation adds (shapes are not inferred: each output keeps its
    first input's shape, enough for the converters' rank arithmetic)."""

    def __init__(self):
        self.layers, self.outputs = [], []

    def __getattr__(self, name):
        if not name.startswith("add_"):
            raise AttributeError(name)

        def add(*args, **kwargs):
            first = next((a for a in args if isinstance(a, FakeTensor)), None)
            if name == "add_concatenation":
                first = args[0][0]
            shape = first.shape if first is not None else (args[0] if isinstance(
                args[0], tuple) else ())
            self.layers.append(name)
            return FakeLayer(name, shape)
        return add

    def add_input(self, name, dtype, shape):  # TensorRT returns the input's tensor itself
        self.layers.append("add_input")
        return FakeTensor(shape, name)

    def mark_output(self, tensor):
        self.outputs.append(tensor)


FAKE_TRT = types.SimpleNamespace(
    float32="float32", Weights=lambda *a: ("weights", a),
    **{enum: types.SimpleNamespace(**{k: f"{enum}.{k}" for k in values}) for enum, values in {
        "ElementWiseOperation": [v for _, v in ops.BINARY.values()],
        "ActivationType": ["RELU", "SIGMOID", "TANH", "CLIP"],
        "UnaryOperation": ["EXP", "SQRT", "ABS", "NEG"],
        "ReduceOperation": ["SUM", "AVG", "MAX", "MIN"],
        "PoolingType": ["MAX", "AVERAGE"], "MatrixOperation": ["NONE"],
        "InterpolationMode": ["NEAREST", "LINEAR"],
        "ResizeCoordinateTransformation": ["ASYMMETRIC", "ALIGN_CORNERS", "HALF_PIXEL"],
    }.items()}, Permutation=list)

#: one sample operation per operator: (arguments, attributes, the TensorRT layer expected)
SAMPLES = {
    "relax.nn.conv2d": ([("t", (1, 4, 8, 8)), ("c", np.zeros((8, 4, 3, 3)))],
                        {"strides": [1, 1], "padding": [1, 1, 1, 1], "dilation": [1, 1],
                         "groups": 1}, "add_convolution_nd"),
    "relax.nn.conv2d_transpose": ([("t", (1, 4, 8, 8)), ("c", np.zeros((4, 2, 3, 3)))],
                                  {"strides": [2, 2], "padding": [1, 1, 1, 1], "groups": 1},
                                  "add_deconvolution_nd"),
    "relax.matmul": ([("t", (1, 4)), ("c", np.zeros((4, 3)))], {}, "add_matrix_multiply"),
    "relax.nn.max_pool2d": ([("t", (1, 4, 8, 8))], {"pool_size": [2, 2], "strides": [2, 2],
                                                      "padding": [0, 0, 0, 0]},
                            "add_pooling_nd"),
    "relax.nn.avg_pool2d": ([("t", (1, 4, 8, 8))], {"pool_size": [2, 2], "strides": [2, 2],
                                                      "padding": [0, 0, 0, 0],
                                                      "count_include_pad": False},
                            "add_pooling_nd"),
    "relax.nn.adaptive_avg_pool2d": ([("t", (1, 4, 8, 8))], {}, "add_reduce"),
    **{op: ([("t", (1, 4, 8, 8)), ("c", np.zeros((4, 1, 1)))], {}, "add_elementwise")
       for op in ops.BINARY},
    **{op: ([("t", (1, 4))], {}, "add_activation" if kind == "activation" else "add_unary")
       for op, (_, kind, _) in ops.UNARY.items()},
    "relax.clip": ([("t", (1, 4)), ("s", 0.0), ("s", 6.0)], {}, "add_activation"),
    "relax.nn.softmax": ([("t", (1, 4))], {"axis": -1}, "add_softmax"),
    "relax.concat": ([("tuple", [(1, 4), (1, 4)])], {"axis": 1}, "add_concatenation"),
    "relax.reshape": ([("t", (1, 4, 2)), ("s", [1, 8])], {}, "add_shuffle"),
    "relax.split": ([("t", (1, 6, 2))], {"axis": 1, "indices_or_sections": [2]}, "add_slice"),
    "relax.permute_dims": ([("t", (1, 4, 2))], {"axes": [0, 2, 1]}, "add_shuffle"),
    "relax.strided_slice": ([("t", (1, 4, 8)), ("s", [2]), ("s", [0]), ("s", [4])], {},
                            "add_slice"),
    "relax.image.resize2d": ([("t", (1, 4, 8, 8)), ("s", [16, 16])],
                             {"method": "linear", "coordinate_transformation_mode":
                              "half_pixel"}, "add_resize"),
    **{op: ([("t", (1, 4, 8))], {"axis": [2], "keepdims": False}, "add_reduce")
       for op in ops.REDUCE},
    "relax.nn.layer_norm": ([("t", (1, 4, 8)), ("c", np.ones(8)), ("c", np.zeros(8))],
                            {"axes": [-1], "epsilon": 1e-5}, "add_normalization"),
}


def test_every_operator_has_both_converters_and_a_sample():
    assert set(ops.CHECKS) == set(ops.TO_ONNX) == set(ops.TO_TENSORRT) == set(SAMPLES)


@pytest.mark.parametrize("op", sorted(SAMPLES))
def test_json_to_network_translation_op_by_op(op):
    """Each operator as a one-node graph of the JSON schema, translated into a (fake) TensorRT
    network and into ONNX (checked by onnx's checker)."""
    import onnx

    args, attrs, expected = SAMPLES[op]
    nodes, values, json_args = [], [], []
    for kind, value in args:
        if kind in ("t", "c"):
            shape = value if kind == "t" else value.shape
            json_args.append(["param", len(nodes)])
            nodes.append({"op": "input" if kind == "t" else "const", "name": f"p{len(nodes)}",
                          "inputs": [], "attrs": {"shape": list(shape), "dtype": "float32"}})
            values.append(np.zeros(shape, np.float32) if kind == "t" else value)
        elif kind == "tuple":
            refs = []
            for shape in value:
                refs.append(["param", len(nodes)])
                nodes.append({"op": "input", "name": f"p{len(nodes)}", "inputs": [],
                              "attrs": {"shape": list(shape), "dtype": "float32"}})
                values.append(np.zeros(shape, np.float32))
            json_args.append(["tuple", refs])
        else:
            json_args.append(["scalar" if not isinstance(value, list) else "shape", value])
    params = list(range(len(nodes)))
    out_attrs = {"shape": [1], "dtype": "float32"}
    if op == "relax.split":  # a tuple result: two outputs
        out_attrs = {"shape": [], "dtype": "tuple", "outputs": [
            {"shape": [1, 2, 2], "dtype": "float32"}, {"shape": [1, 4, 2], "dtype": "float32"}]}
    nodes.append({"op": f"tensorrt.trt.{op.rsplit('.', 1)[1]}", "name": "y",
                  "inputs": [[i, 0, 0] for i in params],
                  "attrs": {**out_attrs, "body": [{"op": op, "args": json_args,
                                                   "attrs": attrs}]}})
    heads = [[len(nodes) - 1, k, 0] for k in range(len(out_attrs.get("outputs", [0])))]
    graph = {"nodes": nodes, "arg_nodes": params, "heads": heads}
    assert check_graph(graph) == []
    network = FakeNetwork()
    build_network(FAKE_TRT, network, graph, values)
    assert expected in network.layers and len(network.outputs) == len(heads)
    model = to_onnx(graph)
    onnx.checker.check_model(model)
    assert any(node.op_type not in ("Identity",) for node in model.graph.node)


def test_the_onnx_route_resizes_every_channel():
    """A bilinear resize of 4 channels: the ONNX graph keeps the batch and channel axes (its
    sizes named [1, 1, H, W] once, which onnxruntime refuses for C > 1) and equals
    onnxruntime's own Resize to [1, 4, 16, 16]."""
    import onnxruntime as ort
    from onnx import helper

    nodes = [{"op": "input", "name": "x", "inputs": [],
              "attrs": {"shape": [1, 4, 8, 8], "dtype": "float32"}},
             {"op": "tensorrt.trt.resize2d", "name": "y", "inputs": [[0, 0, 0]],
              "attrs": {"shape": [1, 4, 16, 16], "dtype": "float32", "body": [
                  {"op": "relax.image.resize2d", "args": [["param", 0], ["shape", [16, 16]]],
                   "attrs": {"method": "linear",
                             "coordinate_transformation_mode": "half_pixel"}}]}}]
    model = to_onnx({"nodes": nodes, "arg_nodes": [0], "heads": [[1, 0, 0]]})
    x = np.random.default_rng(0).standard_normal((1, 4, 8, 8)).astype(np.float32)
    ours = ort.InferenceSession(model.SerializeToString()).run(None, {"arg0": x})[0]
    sizes = helper.make_tensor("sizes", 7, [4], [1, 4, 16, 16])
    reference = helper.make_model(helper.make_graph(
        [helper.make_node("Resize", ["x", "", "", "sizes"], ["y"], mode="linear",
                          coordinate_transformation_mode="half_pixel")], "resize",
        [helper.make_tensor_value_info("x", 1, [1, 4, 8, 8])],
        [helper.make_tensor_value_info("y", 1, [1, 4, 16, 16])], [sizes]),
        opset_imports=[helper.make_opsetid("", 17)])
    reference.ir_version = 8
    want = ort.InferenceSession(reference.SerializeToString()).run(None, {"x": x})[0]
    assert ours.shape == (1, 4, 16, 16) and np.array_equal(ours, want)


def test_walk_names_a_graph_it_cannot_read():
    graph = {"nodes": [{"op": "input", "name": "x", "inputs": [], "attrs": {"shape": [1],
                                                                            "dtype": "float32"}},
                       {"op": "k", "name": "y", "inputs": [[0, 0, 0]], "attrs": {
                           "shape": [1], "dtype": "float32", "body": [
                               {"op": "relax.nn.relu", "args": [["unknown", "?"]],
                                "attrs": {}}]}}],
             "arg_nodes": [0], "heads": [[1, 0, 0]]}
    with pytest.raises(ValueError, match="node y: an argument the graph cannot name"):
        walk(graph, ["x"], lambda *a: a)


def test_engine_cache_key_covers_graph_constants_version_gpu_precision():
    graph = {"nodes": [], "arg_nodes": [], "heads": []}
    w = [np.ones(3, np.float32)]
    base = engine_key(graph, w, "10.0", "Orin", "fp32")
    assert base == engine_key(graph, [np.ones(3, np.float32)], "10.0", "Orin", "fp32")
    changed = [engine_key({**graph, "x": 1}, w, "10.0", "Orin", "fp32"),
               engine_key(graph, [np.zeros(3, np.float32)], "10.0", "Orin", "fp32"),
               engine_key(graph, w, "10.1", "Orin", "fp32"),
               engine_key(graph, w, "10.0", "A100", "fp32"),
               engine_key(graph, w, "10.0", "Orin", "fp16")]
    assert len({base, *changed}) == 6


@pytest.mark.gpu
def test_tensorrt_engines_build_cache_and_match_the_host(tmp_path, monkeypatch):
    reason = tensorrt_missing()
    if reason:
        print(f"skipped: {reason}")
        pytest.skip(reason)
    monkeypatch.setenv("EDGEBYOC_TENSORRT_CACHE", str(tmp_path))
    model = compile(resnet18(image_size=64, num_classes=10), target="tensorrt")
    result, _ = verify(model, rtol=1e-3)
    assert result.passed
    engines = sorted(tmp_path.glob("*.engine"))
    assert len(engines) == 1
    stamp = engines[0].stat().st_mtime_ns
    again = compile(resnet18(image_size=64, num_classes=10), target="tensorrt")
    verify(again, rtol=1e-3)
    assert engines[0].stat().st_mtime_ns == stamp  # reused, not rebuilt


def test_conformance():
    check_installed_plugin("tensorrt", workloads=True, options=ONNX_ROUTE)


def test_split_with_two_outputs_leaving_the_region():
    """A tuple result (split) inside a region and at its boundary, verified both ways."""
    from edgebyoc.api.testing import GraphBuilder

    g = GraphBuilder(3)
    x = g.conv("input", 3, 8, 3)
    parts = g.name("split")
    from onnx import helper

    g.nodes.append(helper.make_node("Split", [x, g.const(np.array([3, 5], np.int64), "sp")],
                                    [f"{parts}_a", f"{parts}_b"], axis=1))
    left = g.op("Relu", [g.conv(f"{parts}_a", 3, 4, 1, relu=False)])
    model = g.model("input", [1, 3, 8, 8], left, [1, 4, 8, 8], "split_net")
    model.graph.output.append(helper.make_tensor_value_info(f"{parts}_b", 1, [1, 5, 8, 8]))
    compiled = compile(model, target="tensorrt", options=ONNX_ROUTE)
    assert compiled.report["summary"]["node_offload_ratio"] == 1.0
    result, _ = verify(compiled)
    assert result.passed and len(result.outputs) == 2
    assert max(region_check(compiled).values()) <= 1e-5
