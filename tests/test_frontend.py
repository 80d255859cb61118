"""Import: good models come in with their signature; bad ones give one clear error."""

from pathlib import Path

import re

import numpy as np
import onnx
import pytest
from onnx import helper

from edgebyoc.errors import ModelLoadError, UnsupportedModelError
from edgebyoc.frontend import TensorSpec, import_model, random_inputs
from edgebyoc.testing.models import small_convnet

MODELS = Path(__file__).resolve().parents[2] / "shared" / "models" / "mlperf_tiny"


def _one_node_model(op_type: str, shape, **attrs) -> onnx.ModelProto:
    node = helper.make_node(op_type, ["x"], ["y"], name="the_node", **attrs)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", 1, shape)],
                              [helper.make_tensor_value_info("y", 1, shape)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_onnx_file_signature(small_model_path):
    imported = import_model(small_model_path)
    assert imported.format == "onnx" and imported.name == "small_convnet"
    assert imported.inputs == [TensorSpec("input", (1, 3, 16, 16), "float32")]
    assert [(o.shape, o.dtype) for o in imported.outputs] == [((1, 10), "float32")]
    assert len(imported.sha256) == 64


def test_model_proto_and_relax_module():
    imported = import_model(small_convnet())
    assert imported.source == "<onnx.ModelProto>"
    again = import_model(imported.mod)
    assert again.format == "relax"
    assert again.inputs == imported.inputs


@pytest.mark.parametrize("content, message", [
    (b"", "empty file"),
    (b"\x08\x07garbage\xff\xff\xff\xff", "not a valid ONNX file"),
])
def test_bad_onnx_files(tmp_path, content, message):
    path = tmp_path / "bad.onnx"
    path.write_bytes(content)
    with pytest.raises(ModelLoadError, match=f"bad.onnx: {message}"):
        import_model(path)


def test_truncated_onnx_file(tmp_path):
    data = small_convnet().SerializeToString()
    path = tmp_path / "cut.onnx"
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(ModelLoadError, match="cut.onnx: not a valid ONNX file"):
        import_model(path)


def test_missing_directory_and_extension(tmp_path):
    with pytest.raises(ModelLoadError, match="nothere.onnx: no such file"):
        import_model(tmp_path / "nothere.onnx")
    with pytest.raises(ModelLoadError, match="is a directory"):
        import_model(tmp_path)
    other = tmp_path / "model.pb"
    other.write_bytes(b"x")
    with pytest.raises(ModelLoadError, match="unknown model format '.pb'"):
        import_model(other)


def test_unsupported_operator_names_the_node():
    model = _one_node_model("Relu", [1, 4])
    model.graph.node[0].op_type = "FancyNewOp"
    with pytest.raises(UnsupportedModelError,
                       match="operator not supported by the ONNX importer: FancyNewOp "
                             "\\(node 'the_node'\\)"):
        import_model(model)


def test_import_failure_names_the_node():
    # ReduceSum with axes as a runtime input: TVM's importer needs constant axes
    node = helper.make_node("ReduceSum", ["x", "axes"], ["y"], name="sum_it", keepdims=1)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", 1, [2, 3]),
                                            helper.make_tensor_value_info("axes", 7, [1])],
                              [helper.make_tensor_value_info("y", 1, [2, 1])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(UnsupportedModelError, match="import failed at node 'sum_it' "
                                                    "\\(ReduceSum\\)"):
        import_model(model)
    # the same model with the axes frozen as a constant imports
    imported = import_model(model, constant_inputs={"axes": np.array([1], np.int64)})
    assert [s.name for s in imported.inputs] == ["x"]


def test_a_failed_import_leaves_no_tvm_warning_after_the_error(tmp_path):
    """TVM's importer raises with its BlockBuilder still open; destroyed later, it logged
    "BlockBuilder destroyed with remaining blocks!" after the one-line error."""
    import subprocess
    import sys

    from onnx import numpy_helper

    # a valid model (onnxruntime runs it) whose OneHot depth is an input: TVM's importer
    # asserts that it is a constant
    node = helper.make_node("OneHot", ["i", "depth", "values"], ["y"], name="cut")
    graph = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info("i", 7, [3]),
                      helper.make_tensor_value_info("depth", 7, [])],
        [helper.make_tensor_value_info("y", 1, ["a", "b"])],
        [numpy_helper.from_array(np.array([0.0, 1.0], np.float32), "values")])
    path = tmp_path / "onehot.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    result = subprocess.run([sys.executable, "-m", "edgebyoc.cli", "compile", str(path), "-o",
                             str(tmp_path / "out")], capture_output=True, text=True)
    assert result.returncode == 1
    assert result.stderr.strip().splitlines() == [
        f"error: {path}: import failed at node 'cut' (OneHot): AssertionError: Only constant "
        f"depth currently supported."]


def test_dynamic_shapes_need_input_shapes():
    model = _one_node_model("Relu", ["N", 8])
    with pytest.raises(UnsupportedModelError,
                       match="input 'x' has a dynamic shape \\[N, 8\\]; give a static one with "
                             "--input-shape x=<n>,8"):
        import_model(model)
    imported = import_model(model, input_shapes={"x": [2, 8]})
    assert imported.inputs[0].shape == (2, 8)
    with pytest.raises(UnsupportedModelError, match="--input-shape names y, which is not an "
                                                    "input \\(inputs: x\\)"):
        import_model(model, input_shapes={"x": [2, 8], "y": [1]})


def test_invalid_graph_is_reported():
    model = _one_node_model("Relu", [1, 4])
    model.graph.node[0].input[0] = "undefined_tensor"
    with pytest.raises(ModelLoadError, match="invalid ONNX model"):
        import_model(model)


def test_random_inputs_are_seeded_and_typed():
    specs = [TensorSpec("a", (2, 3), "float32"), TensorSpec("b", (4,), "int8"),
             TensorSpec("c", (), "int64")]
    first, second = random_inputs(specs, seed=3), random_inputs(specs, seed=3)
    assert all(np.array_equal(first[k], second[k]) for k in first)
    assert first["b"].dtype == np.int8 and first["c"].shape == ()


tflite = pytest.importorskip("tflite")


@pytest.mark.skipif(not MODELS.exists(), reason="../shared/models is not beside the checkout")
def test_tflite_int8_import():
    imported = import_model(MODELS / "vww_96_int8.tflite")
    assert imported.format == "tflite"
    assert imported.inputs[0].shape == (1, 96, 96, 3) and imported.inputs[0].dtype == "int8"
    assert imported.outputs[0].shape == (1, 2)


def test_corrupted_tflite(tmp_path):
    path = tmp_path / "bad.tflite"
    path.write_bytes(b"\x00" * 64)
    with pytest.raises(ModelLoadError, match="bad.tflite: not a valid TFLite file"):
        import_model(path)



def _graph(nodes, inputs, outputs, initializers=(), opset=17, domain_opsets=()):
    from onnx import helper

    graph = helper.make_graph(nodes, "g", inputs, outputs, list(initializers))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset),
                                                   *domain_opsets])


@pytest.mark.parametrize("case, message", [
    ("domain", "operator Relu of domain 'com.evil' (node 'r') is not supported"),
    ("opset", "ONNX opset 99 is not one this onnx"),
    ("split", "node 's' (Split): Mismatch between the sum of 'split' (6) and the split "
              "dimension of the input (4)"),
    ("no_outputs", "the graph has no outputs"),
    ("gather", "node 'g' (Gather): reads or writes index 10 of an axis of 4"),
    ("gather_huge", "reads or writes index 8589934592 of an axis of 4"),
    ("topk", "node 't' (TopK): Axis has less than the requested k elements"),
])
def test_models_onnxruntime_refuses_are_refused(case, message):
    """Models that compiled silently wrong (or segfaulted at run time) before."""
    from onnx import TensorProto, helper, numpy_helper

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 2])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 2] if case == "split" else
                                      [2, 2] if case.startswith("gather") else [4, 2])
    if case == "domain":
        model = _graph([helper.make_node("Relu", ["x"], ["y"], name="r", domain="com.evil")],
                       [x], [y], domain_opsets=[helper.make_opsetid("com.evil", 1)])
    elif case == "opset":
        model = _graph([helper.make_node("Relu", ["x"], ["y"], name="r")], [x], [y], opset=99)
    elif case == "split":
        sizes = numpy_helper.from_array(np.array([3, 3], np.int64), "sizes")
        model = _graph([helper.make_node("Split", ["x", "sizes"], ["y", "z"], name="s",
                                         axis=0)], [x],
                       [y, helper.make_tensor_value_info("z", TensorProto.FLOAT, [3, 2])],
                       [sizes])
    elif case == "no_outputs":
        model = _graph([helper.make_node("Relu", ["x"], ["y"], name="r")], [x], [])
    elif case == "topk":
        k = numpy_helper.from_array(np.array([20], np.int64), "k")
        model = _graph([helper.make_node("TopK", ["x", "k"], ["y", "i"], name="t", axis=1)],
                       [x], [y, helper.make_tensor_value_info("i", TensorProto.INT64, [4, 2])],
                       [k])
    else:
        index = 10 if case == "gather" else 2**33
        indices = numpy_helper.from_array(np.array([0, index], np.int64), "i")
        model = _graph([helper.make_node("Gather", ["x", "i"], ["y"], name="g", axis=0)],
                       [x], [y], [indices])
    with pytest.raises(UnsupportedModelError, match=re.escape(message)):
        import_model(model)


@pytest.mark.parametrize("shape, message", [
    ([-1, 4], "input 'x': shape [-1, 4] has a negative dimension"),
    ([2**20, 2**20], "has 1099511627776 elements, more than the 2147483647 edgebyoc compiles"),
])
def test_input_shapes_are_checked(shape, message):
    model = _one_node_model("Relu", ["N", 4])
    with pytest.raises(UnsupportedModelError, match=re.escape(message)):
        import_model(model, input_shapes={"x": shape})


def test_external_data_is_read_from_the_model_directory_only(tmp_path, monkeypatch):
    from onnx import TensorProto, external_data_helper, numpy_helper

    def model_with(location: str, weights: np.ndarray):
        w = numpy_helper.from_array(weights, "w")
        graph = helper.make_graph(
            [helper.make_node("Add", ["x", "w"], ["y"])], "g",
            [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])], [w])
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
        external_data_helper.set_external_data(model.graph.initializer[0], location)
        model.graph.initializer[0].ClearField("raw_data")
        model.graph.initializer[0].data_location = TensorProto.EXTERNAL
        return model

    folder = tmp_path / "model"
    folder.mkdir()
    weights = np.arange(4, dtype=np.float32)
    (folder / "w.bin").write_bytes(weights.tobytes())
    onnx.save(model_with("w.bin", weights), folder / "m.onnx")
    elsewhere = tmp_path / "cwd"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)  # resolved against the model's folder, not the current one
    imported = import_model(folder / "m.onnx")
    assert imported.inputs[0].name == "x"
    secret = tmp_path / "secret"
    secret.write_bytes(np.ones(4, np.float32).tobytes())
    for location in ("../secret", str(secret)):
        onnx.save(model_with(location, weights), folder / "bad.onnx")
        with pytest.raises(ModelLoadError, match="which is not a file inside the model's "
                                                 "directory"):
            import_model(folder / "bad.onnx")


def test_gather_indices_given_at_run_time_are_checked():
    import edgebyoc
    from edgebyoc.errors import InputError
    from edgebyoc.plugins import PluginRegistry
    from onnx import TensorProto

    graph = helper.make_graph(
        [helper.make_node("Gather", ["x", "i"], ["y"], axis=0)], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 2]),
         helper.make_tensor_value_info("i", TensorProto.INT64, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 2])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    compiled = edgebyoc.compile(model, registry=PluginRegistry(search_path=[]))
    assert compiled.inputs[1].index_bound == 4
    x = np.arange(8, dtype=np.float32).reshape(4, 2)
    got = compiled.run({"x": x, "i": np.array([3, -4])})["y"]
    assert np.array_equal(got, x[[3, 0]])
    for bad in (10, 2**33, -5):
        with pytest.raises(InputError, match=f"input 'i': index {bad} is outside the axis of "
                                             f"4 it indexes \\(allowed -4 to 3\\)"):
            compiled.run({"x": x, "i": np.array([0, bad])})


def test_token_ids_reshaped_before_the_embedding_keep_their_bound():
    """GPT-2 reshapes its token ids before the embedding's Gather: the input is still known to
    index the vocabulary (checked before the run, and --random draws valid ids)."""
    import edgebyoc
    from edgebyoc.errors import InputError
    from edgebyoc.plugins import PluginRegistry
    from onnx import TensorProto, numpy_helper

    graph = helper.make_graph(
        [helper.make_node("Reshape", ["ids", "flat"], ["r"]),
         helper.make_node("Cast", ["r"], ["c"], to=TensorProto.INT32),
         helper.make_node("Gather", ["table", "c"], ["y"], axis=0)], "g",
        [helper.make_tensor_value_info("ids", TensorProto.INT64, [1, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 2])],
        [numpy_helper.from_array(np.arange(10, dtype=np.float32).reshape(5, 2), "table"),
         numpy_helper.from_array(np.array([-1], np.int64), "flat")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    compiled = edgebyoc.compile(model, registry=PluginRegistry(search_path=[]))
    assert compiled.inputs[0].index_bound == 5
    with pytest.raises(InputError, match="input 'ids': index 7 is outside the axis of 5"):
        compiled.run({"ids": np.array([[0, 7, 1]])})
