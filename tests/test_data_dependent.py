"""Data-dependent shapes (issue #32): a detector's post-processing (NonZero, a TopK of a computed
k, NonMaxSuppression without a limit, a branch returning an empty tensor) compiles on the host
path and matches onnxruntime; what TVM cannot compile ends in one line naming the model's
data-dependent operators and the way out."""

import numpy as np
import onnx
import pytest
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper as nh

import edgebyoc
from edgebyoc.errors import CompileError, EdgebyocError
from edgebyoc.frontend import data_dependent_operators
from edgebyoc.plugins import PluginRegistry

HOST_ONLY = PluginRegistry(search_path=[])


def _save(tmp_path, nodes, inputs, outputs, initializers=(), name="m"):
    graph = h.make_graph(nodes, name, inputs, outputs, list(initializers))
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 17)])
    model.ir_version = 8
    path = tmp_path / f"{name}.onnx"
    onnx.save(model, path)
    return path


def _onnxruntime(path, feed):
    import onnxruntime as ort

    return ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, feed)


def _topk_of_the_kept_scores(tmp_path, k_nodes, k_constant, name):
    """A model keeping the scores of its 40 above 0.5 (NonZero), then a TopK of them whose k
    ``k_nodes`` compute from ``n``, how many were kept (with ``k_constant``)."""
    nodes = [h.make_node("Greater", ["s", "thr"], ["mask"]),
             h.make_node("NonZero", ["mask"], ["nz"]),
             h.make_node("Squeeze", ["nz", "ax0"], ["idx"]),
             h.make_node("Gather", ["s", "idx"], ["kept"], axis=0),
             h.make_node("Shape", ["kept"], ["n"]), *k_nodes,
             h.make_node("TopK", ["kept", "k"], ["values", "indices"])]
    inits = [nh.from_array(np.array(0.5, np.float32), "thr"),
             nh.from_array(np.array([0], np.int64), "ax0"), k_constant]
    return _save(tmp_path, nodes, [h.make_tensor_value_info("s", T.FLOAT, [40])],
                 [h.make_tensor_value_info("values", T.FLOAT, ["k"]),
                  h.make_tensor_value_info("indices", T.INT64, ["k"])], inits, name=name)


def test_topk_of_a_computed_k_matches_onnxruntime(tmp_path):
    """What SSD's post-processing does per class: the scores above a threshold (NonZero),
    then the best min(5, how many there are) of them; TVM's importer refuses the TopK ("k
    must be a constant"), edgebyoc sorts the axis and slices k off at run time, ties broken
    by the lower index as ONNX says."""
    path = _topk_of_the_kept_scores(
        tmp_path, [h.make_node("Concat", ["five", "n"], ["both"], axis=0),
                   h.make_node("ReduceMin", ["both"], ["k"], keepdims=1)],
        nh.from_array(np.array([5], np.int64), "five"), "min_k")
    compiled = edgebyoc.compile(path, registry=HOST_ONLY)
    rng = np.random.default_rng(0)
    for scores, expected_k in ((rng.random(40).astype(np.float32), 5),
                               (np.full(40, 0.1, np.float32), 0),
                               (np.where(np.arange(40) < 3, 0.9, 0.1).astype(np.float32), 3),
                               (np.full(40, 0.7, np.float32), 5)):  # ties: lower index first
        ours = compiled.run({"s": scores})
        want = _onnxruntime(path, {"s": scores})
        assert ours["values"].shape == (expected_k,)
        assert np.array_equal(ours["values"], want[0])
        assert np.array_equal(ours["indices"], want[1])


def test_a_computed_k_past_the_axis_stops_the_run(tmp_path):
    """ONNX requires k <= the axis' extent; the sliced result assumes it, so a model computing
    a larger k (here: how many scores pass, plus 3) stops with an error instead of reading
    past the sorted axis."""
    path = _topk_of_the_kept_scores(
        tmp_path, [h.make_node("Add", ["n", "three"], ["k"])],
        nh.from_array(np.array([3], np.int64), "three"), "too_large_k")
    compiled = edgebyoc.compile(path, registry=HOST_ONLY)
    with pytest.raises(EdgebyocError, match="TopK.s computed k is outside"):
        compiled.run({"s": np.random.default_rng(0).random(40).astype(np.float32)})


def test_nms_without_a_limit_keeps_the_boxes_onnxruntime_keeps(tmp_path):
    """torchvision exports NMS with max_output_boxes_per_class = sys.maxsize: TVM's NMS
    sizes its output by the limit (51 GB) and types it with every box; edgebyoc gives it a
    limit checked at run time and a symbolic count, so the selected boxes come back as
    onnxruntime returns them."""
    n = 120
    nodes = [h.make_node("NonMaxSuppression", ["b", "s", "limit", "iou", "st"], ["selected"])]
    inits = [nh.from_array(np.array([2 ** 63 - 1], np.int64), "limit"),
             nh.from_array(np.array([0.5], np.float32), "iou"),
             nh.from_array(np.array([0.0], np.float32), "st")]
    path = _save(tmp_path, nodes, [h.make_tensor_value_info("b", T.FLOAT, [1, n, 4]),
                                   h.make_tensor_value_info("s", T.FLOAT, [1, 2, n])],
                 [h.make_tensor_value_info("selected", T.INT64, ["count", 3])], inits)
    compiled = edgebyoc.compile(path, registry=HOST_ONLY)
    rng = np.random.default_rng(1)
    corner = rng.uniform(0, 100, (1, n, 2))
    boxes = np.concatenate([corner, corner + rng.uniform(10, 60, (1, n, 2))], 2)
    scores = np.stack([rng.permutation(n), rng.permutation(n)])[None] / n  # distinct
    feed = {"b": boxes.astype(np.float32), "s": scores.astype(np.float32)}
    ours = compiled.run(feed)["selected"]
    want = _onnxruntime(path, feed)[0]
    assert 0 < len(want) < 2 * n and np.array_equal(ours, want)


def test_an_empty_constant_is_lifted_and_the_artifact_reloads(tmp_path):
    """A branch returning an empty tensor (torchvision's batched NMS with no boxes) holds a
    zero-size constant, which TVM 0.27 writes into an executable but cannot read back: it
    lives with the other constants instead."""
    nodes = [h.make_node("Concat", ["x", "empty"], ["y"], axis=0)]
    path = _save(tmp_path, nodes, [h.make_tensor_value_info("x", T.FLOAT, [3])],
                 [h.make_tensor_value_info("y", T.FLOAT, [3])],
                 [nh.from_array(np.zeros(0, np.float32), "empty")])
    compiled = edgebyoc.compile(path, registry=HOST_ONLY)
    compiled.save(tmp_path / "build")
    again = edgebyoc.load(tmp_path / "build")
    x = np.arange(3, dtype=np.float32)
    assert np.array_equal(again.run({"x": x})["y"], x)


def test_a_failure_on_data_dependent_shapes_names_them_and_the_way_out(tmp_path):
    """When TVM fails to compile a model that computes data-dependent shapes (Faster R-CNN:
    benchmarks/real_models.py), the one-line error names those operators and the way out."""
    from edgebyoc.pipeline import StageClock

    nodes = [h.make_node("NonZero", ["x"], ["nz"]), h.make_node("NonZero", ["x"], ["nz2"])]
    model = h.make_model(h.make_graph(nodes, "g", [h.make_tensor_value_info("x", T.FLOAT,
                                                                           [4])],
                                      [h.make_tensor_value_info("nz", T.INT64, [1, "n"])]))
    assert data_dependent_operators(model) == ["NonZero x2"]
    assert data_dependent_operators(None) == []
    clock = StageClock(progress=False)
    clock.subject, clock.data_dependent = "detector.onnx", ["NonMaxSuppression x2"]
    with pytest.raises(CompileError) as failure:
        with clock("memory"):
            raise RuntimeError("There is no definition of shape_func")
    message = str(failure.value)
    assert message.startswith("detector.onnx: memory stage failed: RuntimeError: There is no "
                              "definition of shape_func; the model computes data-dependent "
                              "shapes (NonMaxSuppression x2)")
    assert "export the network without its post-processing" in message and "\n" not in message
