"""The host build's NonMaxSuppression (``edgebyoc.nms``): both kernels (the sweep and the
kept list) give onnxruntime's selected rows, bit for bit, across batches, classes, limits,
thresholds, corner orders, ties, empty and identical boxes; TVM's kernel kept where the
sweep's premise does not hold."""

import numpy as np
import onnx
import pytest
import tvm
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper as nh

import edgebyoc
import edgebyoc.nms
from edgebyoc.codegen.host import host_pipeline, host_target
from edgebyoc.frontend import import_model
from edgebyoc.plugins import PluginRegistry

HOST_ONLY = PluginRegistry(search_path=[])


def _nms_model(batch, classes, count, limit, iou, score_threshold, center=0):
    nodes = [h.make_node("NonMaxSuppression", ["boxes", "scores", "limit", "iou", "st"],
                         ["selected"], center_point_box=center)]
    inits = [nh.from_array(np.array([limit], np.int64), "limit"),
             nh.from_array(np.array([iou], np.float32), "iou"),
             nh.from_array(np.array([score_threshold], np.float32), "st")]
    graph = h.make_graph(nodes, "nms", [
        h.make_tensor_value_info("boxes", T.FLOAT, [batch, count, 4]),
        h.make_tensor_value_info("scores", T.FLOAT, [batch, classes, count])],
        [h.make_tensor_value_info("selected", T.INT64, ["kept", 3])], inits)
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def _boxes(rng, batch, count, extent=300.0, sizes=(1.0, 40.0)):
    """Random boxes, a third of them with their corners given the other way round."""
    corner = rng.uniform(0, extent, (batch, count, 2))
    boxes = np.concatenate([corner, corner + rng.uniform(*sizes, (batch, count, 2))], 2)
    boxes[:, ::3] = boxes[:, ::3][:, :, [2, 3, 0, 1]]
    return boxes.astype(np.float32)


def _selected(tmp_path, model, feed):
    import onnxruntime as ort

    path = tmp_path / "nms.onnx"
    onnx.save(model, path)
    compiled = edgebyoc.compile(path, registry=HOST_ONLY)
    want = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(
        None, feed)[0]
    return compiled.run(feed)["selected"], want


CASES = {  # (batch, classes, boxes, limit, iou threshold, score threshold, center_point_box)
    "one-class": (1, 1, 400, 1000, 0.5, 0.0, 0),
    "batches-and-classes": (2, 5, 300, 1000, 0.45, 0.2, 0),
    "small-limit": (2, 3, 500, 7, 0.5, 0.0, 0),
    "zero-limit": (1, 2, 50, 0, 0.5, 0.0, 0),
    "iou-zero": (1, 2, 200, 1000, 0.0, 0.0, 0),
    "iou-one": (1, 2, 200, 1000, 1.0, 0.0, 0),
    "centre-point-boxes": (1, 3, 250, 1000, 0.3, 0.1, 1),
}


#: KEPT_LIST_LIMIT per kernel: every call through the one named
KERNELS = {"sweep": -1, "kept-list": 2 ** 31}


@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("case", CASES, ids=list(CASES))
def test_selected_rows_equal_onnxruntime(tmp_path, monkeypatch, case, kernel):
    monkeypatch.setattr(edgebyoc.nms, "KEPT_LIST_LIMIT", KERNELS[kernel])
    batch, classes, count, limit, iou, threshold, center = CASES[case]
    rng = np.random.default_rng(sorted(CASES).index(case))
    scores = rng.random((batch, classes, count)).astype(np.float32)
    scores[..., 1::4] = scores[..., ::4][..., :scores[..., 1::4].shape[-1]]  # ties
    feed = {"boxes": _boxes(rng, batch, count), "scores": scores}
    ours, want = _selected(tmp_path, _nms_model(batch, classes, count, limit, iou, threshold,
                                                center), feed)
    assert ours.dtype == np.int64 and ours.shape == want.shape
    assert np.array_equal(ours, want)
    if limit:
        assert len(want) > 0


@pytest.mark.parametrize("kernel", KERNELS)
def test_identical_empty_and_shifted_boxes(tmp_path, monkeypatch, kernel):
    """Identical boxes (IoU 1: all but the best suppressed), boxes without area (suppress
    nothing, are never suppressed) and torchvision's batched-NMS shifting (each class's boxes
    moved apart, one class in NMS): as onnxruntime."""
    monkeypatch.setattr(edgebyoc.nms, "KEPT_LIST_LIMIT", KERNELS[kernel])
    rng = np.random.default_rng(7)
    same = np.tile(np.array([[10, 10, 50, 60]], np.float32), (20, 1))
    flat = np.array([[5, 5, 5, 40], [30, 30, 30, 30], [0, 0, 100, 0]], np.float32)
    shifted = _boxes(rng, 1, 300, extent=100.0, sizes=(5.0, 60.0))[0]
    shifted += (np.arange(300) % 6 * 200.0)[:, None].astype(np.float32)  # six "classes"
    boxes = np.concatenate([same, flat, shifted])[None]
    scores = rng.random((1, 1, len(boxes[0]))).astype(np.float32)
    ours, want = _selected(tmp_path, _nms_model(1, 1, len(boxes[0]), 10 ** 6, 0.5, 0.0),
                           {"boxes": boxes, "scores": scores})
    assert np.array_equal(ours, want)
    kept = set(want[:, 2].tolist())
    assert len(kept & set(range(20))) == 1 and set(range(20, 23)) <= kept


def _kernels(mod):
    target = host_target()
    with target:
        lowered = host_pipeline(target, True)(mod)
    return {gv.name_hint for gv, f in lowered.functions.items()
            if isinstance(f, tvm.tirx.PrimFunc)}


def test_the_kernels_replace_tvms_unless_the_iou_threshold_is_negative():
    """The rewrite applies to constant limits and thresholds of 0 or more, with the kept-list
    kernel up to KEPT_LIST_LIMIT boxes per class and the sweep above. With a negative
    IoU threshold every later box would overlap "enough", which the sweep cannot see (it
    visits overlapping boxes only): a Relax model with one keeps TVM's kernel."""
    from tvm import relax

    from edgebyoc.nms import KEPT_LIST_LIMIT

    small = _kernels(import_model(_nms_model(1, 2, 30, KEPT_LIST_LIMIT, 0.5, 0.0)).mod)
    large = _kernels(import_model(_nms_model(1, 2, 30, KEPT_LIST_LIMIT + 1, 0.5, 0.0)).mod)
    assert "edgebyoc_nms" in small and "edgebyoc_nms" in large
    # the sweep sorts the boxes by left edge too: one argsort more
    assert sum("argsort" in k for k in large) == sum("argsort" in k for k in small) + 1
    builder = relax.BlockBuilder()
    boxes = relax.Var("boxes", relax.TensorType([1, 30, 4], "float32"))
    scores = relax.Var("scores", relax.TensorType([1, 2, 30], "float32"))
    with builder.function("main", [boxes, scores]):
        out = builder.emit(relax.op.vision.all_class_non_max_suppression(
            boxes, scores, relax.const(5, "int64"), relax.const(-0.1, "float32"),
            relax.const(0.0, "float32"), output_format="onnx"))
        builder.emit_func_output(out)
    kernels = _kernels(builder.get())
    assert "edgebyoc_nms" not in kernels
    assert any("non_max_suppression" in name for name in kernels)


def test_an_iou_threshold_outside_0_1_is_refused(tmp_path):
    """ONNX (and onnxruntime) define the IoU threshold in [0, 1]: outside, the compile stops
    naming the node and the value."""
    from edgebyoc.errors import UnsupportedModelError

    path = tmp_path / "nms.onnx"
    onnx.save(_nms_model(1, 2, 30, 5, -0.1, 0.0), path)
    with pytest.raises(UnsupportedModelError, match=r"iou_threshold -0.1 is outside \[0, 1\]"):
        edgebyoc.compile(path, registry=HOST_ONLY)
