"""Static shape folding before TVM's ONNX importer (``onnx_fold``): shapes an exporter wrote as
computations become values, results unchanged (verified against onnxruntime on the model as
exported), weights untouched, large tensors left as computations."""

import numpy as np
import onnx
import pytest
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper as nh

import edgebyoc
from edgebyoc.frontend import TensorSpec
from edgebyoc.onnx_fold import fold_static_shapes
from edgebyoc.report import render_markdown
from edgebyoc.verify import verify


def const(name, value):
    return nh.from_array(np.asarray(value), name)


def attention_mask_model(batch=2, tokens=12):
    """What PyTorch exports for a Hugging Face encoder called without an attention mask: the
    mask and position ids built from the input's shape (Shape -> Gather -> Concat ->
    ConstantOfShape, Range(0, tokens)), then broadcast into the scores. TVM's importer alone
    fails on it (a shape that is a tensor)."""
    nodes = [
        h.make_node("Shape", ["x"], ["s"]),
        h.make_node("Gather", ["s", "i0"], ["b"], axis=0),
        h.make_node("Gather", ["s", "i1"], ["t"], axis=0),
        h.make_node("Unsqueeze", ["b", "ax0"], ["b1"]),
        h.make_node("Unsqueeze", ["t", "ax0"], ["t1"]),
        h.make_node("Concat", ["b1", "t1"], ["bt"], axis=0),
        h.make_node("ConstantOfShape", ["bt"], ["ones"],
                    value=nh.from_array(np.array([1], np.int64))),
        h.make_node("Cast", ["ones"], ["onesf"], to=T.FLOAT),
        h.make_node("Unsqueeze", ["onesf", "ax12"], ["m4"]),
        h.make_node("Sub", ["one", "m4"], ["inv"]),
        h.make_node("Mul", ["inv", "neg"], ["bias"]),
        h.make_node("Range", ["zero", "t", "step"], ["pos"]),
        h.make_node("Cast", ["pos"], ["posf"], to=T.FLOAT),
        h.make_node("MatMul", ["x", "w"], ["q"]),
        h.make_node("Unsqueeze", ["q", "ax1"], ["q4"]),
        h.make_node("Add", ["q4", "bias"], ["a"]),
        h.make_node("Add", ["a", "posf"], ["y"]),
    ]
    weights = np.random.default_rng(0).standard_normal((tokens, tokens)).astype(np.float32)
    inits = [const("i0", np.int64(0)), const("i1", np.int64(1)),
             const("ax0", np.array([0], np.int64)), const("ax12", np.array([1, 2], np.int64)),
             const("ax1", np.array([1], np.int64)), const("one", np.float32(1.0)),
             const("neg", np.float32(-10000.0)), const("zero", np.int64(0)),
             const("step", np.int64(1)), const("w", weights)]
    graph = h.make_graph(nodes, "attention_mask",
                         [h.make_tensor_value_info("x", T.FLOAT, ["batch", tokens, tokens])],
                         [h.make_tensor_value_info("y", T.FLOAT, ["d0", "d1", "d2", "d3"])],
                         inits)
    return h.make_model(graph, opset_imports=[h.make_opsetid("", 17)])


def channel_shuffle_model():
    """ShuffleNetV2's channel shuffle with the shape computed from Shape(x)."""
    nodes = [h.make_node("Shape", ["x"], ["s"])]
    for i in range(4):
        nodes.append(h.make_node("Gather", ["s", f"i{i}"], [f"d{i}"], axis=0))
    nodes += [h.make_node("Div", ["d1", "two"], ["half"])]
    nodes += [h.make_node("Unsqueeze", [n, "ax0"], [n + "u"]) for n in ("d0", "half", "d2", "d3")]
    nodes += [h.make_node("Concat", ["d0u", "two1", "halfu", "d2u", "d3u"], ["shape5"], axis=0),
              h.make_node("Reshape", ["x", "shape5"], ["r"]),
              h.make_node("Transpose", ["r"], ["tr"], perm=[0, 2, 1, 3, 4]),
              h.make_node("Reshape", ["tr", "s"], ["y"])]
    inits = [const(f"i{i}", np.int64(i)) for i in range(4)] + [
        const("two", np.int64(2)), const("two1", np.array([2], np.int64)),
        const("ax0", np.array([0], np.int64))]
    graph = h.make_graph(nodes, "shuffle", [h.make_tensor_value_info("x", T.FLOAT, [1, 8, 4, 4])],
                         [h.make_tensor_value_info("y", T.FLOAT, ["a", "b", "c", "d"])], inits)
    return h.make_model(graph, opset_imports=[h.make_opsetid("", 17)])


def test_an_attention_mask_built_from_shapes_verifies(tmp_path):
    path = tmp_path / "mask.onnx"
    onnx.save(attention_mask_model(), path)
    compiled = edgebyoc.compile(path, input_shapes={"x": [2, 12, 12]})
    folded = compiled.report["model"]["folded"]
    assert folded["by_op"] == {"Cast": 2, "Concat": 1, "ConstantOfShape": 1, "Gather": 2,
                               "Mul": 1, "Range": 1, "Shape": 1, "Sub": 1, "Unsqueeze": 3}
    assert folded["nodes"] == 13 and folded["kept"] == []
    result, _ = verify(compiled, seed=1)
    assert result.passed and result.reference == "onnxruntime"  # on the model as exported
    assert "static shapes folded before import: 13 node(s) (Cast 2, Concat 1" in \
        render_markdown(compiled.report)


def test_a_channel_shuffle_folds_and_is_bit_exact(tmp_path):
    path = tmp_path / "shuffle.onnx"
    onnx.save(channel_shuffle_model(), path)
    compiled = edgebyoc.compile(path)
    assert compiled.report["model"]["folded"]["by_op"]["Shape"] == 1
    result, _ = verify(compiled, seed=0)
    assert result.passed and result.max_abs == 0


def chained_shuffles_model(units=12):
    """ShuffleNetV2's units in a row: each unit's channel shuffle reads the shape of the last
    unit's output, a Reshape to a computed shape (static only once that shape is folded), and
    its second half's shape from an initializer."""
    nodes, x = [], "x"
    for u in range(units):
        nodes += [h.make_node("Shape", [x], [f"s{u}"]),
                  h.make_node("Gather", [f"s{u}", "i1"], [f"c{u}"], axis=0),
                  h.make_node("Div", [f"c{u}", "two"], [f"h{u}"]),
                  h.make_node("Unsqueeze", [f"h{u}", "ax0"], [f"hu{u}"]),
                  h.make_node("Shape", ["rest"], [f"rs{u}"]),  # of an initializer
                  h.make_node("Concat", ["one1", "two1", f"hu{u}", f"rs{u}"], [f"sh{u}"],
                              axis=0),
                  h.make_node("Reshape", [x, f"sh{u}"], [f"r{u}"]),
                  h.make_node("Transpose", [f"r{u}"], [f"t{u}"], perm=[0, 2, 1, 3, 4]),
                  h.make_node("Shape", [f"t{u}"], [f"ts{u}"]),
                  h.make_node("Gather", [f"ts{u}", "i3"], [f"d{u}"], axis=0),
                  h.make_node("Unsqueeze", [f"d{u}", "ax0"], [f"du{u}"]),
                  h.make_node("Concat", ["one1", "eight1", f"du{u}", "four1"], [f"back{u}"],
                              axis=0),
                  h.make_node("Reshape", [f"t{u}", f"back{u}"], [f"y{u}"])]
        x = f"y{u}"
    nodes.append(h.make_node("Identity", [x], ["y"]))
    inits = [const("i1", np.int64(1)), const("i3", np.int64(3)), const("two", np.int64(2)),
             const("ax0", np.array([0], np.int64)), const("one1", np.array([1], np.int64)),
             const("two1", np.array([2], np.int64)), const("eight1", np.array([8], np.int64)),
             const("four1", np.array([4], np.int64)), const("rest", np.zeros((4, 4), np.int8))]
    graph = h.make_graph(nodes, "shuffles",
                         [h.make_tensor_value_info("x", T.FLOAT, ["batch", 8, 4, 4])],
                         [h.make_tensor_value_info("y", T.FLOAT, ["a", "b", "c", "d"])], inits)
    return h.make_model(graph, opset_imports=[h.make_opsetid("", 17)])


def test_a_chain_of_computed_reshapes_folds_in_two_rounds(tmp_path, monkeypatch):
    """Each unit's shape depends on the last unit's Reshape: the shapes a Reshape to a value
    folded in the same round gives are inferred node by node, so a chain of any length folds
    in one round (and one to see that nothing is left), not a round per unit (torchvision's
    ShuffleNetV2, Swin and MaxViT: 16 to 60 units; 8 rounds left them failing to import); a
    Shape of an initializer folds too."""
    import edgebyoc.onnx_fold as fold

    rounds = []
    real = fold._fold_round
    monkeypatch.setattr(fold, "_fold_round",
                        lambda *a, **k: rounds.append(1) or real(*a, **k))
    result = fold_static_shapes(chained_shuffles_model(), [TensorSpec("x", (1, 8, 4, 4),
                                                                      "float32")])
    assert len(rounds) == 2
    assert [n.op_type for n in result.model.graph.node] == ["Reshape", "Transpose",
                                                            "Reshape"] * 12 + ["Identity"]
    assert result.by_op["Shape"] == 36 and not result.kept
    path = tmp_path / "shuffles.onnx"
    onnx.save(chained_shuffles_model(), path)
    compiled = edgebyoc.compile(path, input_shapes={"x": [1, 8, 4, 4]})
    checked, _ = verify(compiled, seed=0)
    assert checked.passed and checked.max_abs == 0


def test_only_shape_derived_values_fold_and_the_model_given_is_untouched():
    model = attention_mask_model()
    before = model.SerializeToString()
    result = fold_static_shapes(model, [TensorSpec("x", (2, 12, 12), "float32")])
    assert model.SerializeToString() == before
    kept = [n.op_type for n in result.model.graph.node]
    # the computation on the input and the weights stays; the shape arithmetic is gone
    assert kept == ["MatMul", "Unsqueeze", "Add", "Add"]
    names = {t.name for t in result.model.graph.initializer}
    assert {"bias", "posf", "w"} <= names
    bias = nh.to_array(next(t for t in result.model.graph.initializer if t.name == "bias"))
    assert bias.shape == (2, 1, 1, 12) and np.all(bias == 0)


def test_weights_alone_are_left_to_the_importer():
    """A computation on initializers that no shape feeds (a dequantized or transposed weight)
    is not folded: the int8 targets match those patterns."""
    nodes = [h.make_node("DequantizeLinear", ["wq", "scale", "zp"], ["w"]),
             h.make_node("Transpose", ["w"], ["wt"], perm=[1, 0]),
             h.make_node("MatMul", ["x", "wt"], ["y"])]
    inits = [const("wq", np.ones((4, 4), np.int8)), const("scale", np.float32(0.5)),
             const("zp", np.int8(0))]
    graph = h.make_graph(nodes, "dq", [h.make_tensor_value_info("x", T.FLOAT, [1, 4])],
                         [h.make_tensor_value_info("y", T.FLOAT, [1, 4])], inits)
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 17)])
    result = fold_static_shapes(model, [TensorSpec("x", (1, 4), "float32")])
    assert result.nodes == 0 and result.model is model


def test_a_folded_tensor_above_the_limit_stays_a_computation():
    result = fold_static_shapes(attention_mask_model(), [TensorSpec("x", (2, 12, 12), "float32")],
                                limit=20)
    assert any(k.startswith("ConstantOfShape ") and "24 elements > 20" in k
               for k in result.kept)
    assert "ConstantOfShape" not in result.by_op and result.by_op["Shape"] == 1
    kept = [n.op_type for n in result.model.graph.node]
    assert "ConstantOfShape" in kept and "Mul" in kept


@pytest.mark.parametrize("given", [(1, 12, 12), (3, 12, 12)])
def test_folding_follows_the_input_shape_given(tmp_path, given):
    path = tmp_path / "mask.onnx"
    onnx.save(attention_mask_model(), path)
    compiled = edgebyoc.compile(path, input_shapes={"x": list(given)})
    assert compiled.outputs[0].shape == (given[0], 1, 12, 12)
    assert verify(compiled, seed=2)[0].passed


def test_without_folding_tvms_importer_cannot_build_the_mask(tmp_path, monkeypatch):
    """Why the pass exists: the same model, not folded, fails in TVM 0.27."""
    from edgebyoc import frontend
    from edgebyoc.errors import EdgebyocError
    from edgebyoc.onnx_fold import FoldResult

    path = tmp_path / "mask.onnx"
    onnx.save(attention_mask_model(), path)
    monkeypatch.setattr(frontend, "fold_static_shapes", lambda model, inputs: FoldResult(model))
    with pytest.raises(EdgebyocError):
        edgebyoc.compile(path, input_shapes={"x": [2, 12, 12]})


def test_a_max_reduction_over_infinities_is_infinite():
    """TVM starts max (min) reductions from the lowest (highest) finite value: a row of -inf
    gave -3.4e38 and a fully masked attention row NaN (rewrites.infinite_max_reductions)."""
    nodes = [h.make_node("ReduceMax", ["x", "ax"], ["hi"], keepdims=1),
             h.make_node("ReduceMin", ["x", "ax"], ["lo"], keepdims=0)]
    graph = h.make_graph(nodes, "reduce", [h.make_tensor_value_info("x", T.FLOAT, [3, 2])],
                         [h.make_tensor_value_info("hi", T.FLOAT, [3, 1]),
                          h.make_tensor_value_info("lo", T.FLOAT, [3])],
                         [const("ax", np.array([-1], np.int64))])
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 18)])
    x = np.array([[-np.inf, -np.inf], [np.inf, np.inf], [-np.inf, 2.0]], np.float32)
    out = edgebyoc.compile(model).run({"x": x})
    assert out["hi"].ravel().tolist() == [-np.inf, np.inf, 2.0]
    assert out["lo"].tolist() == [-np.inf, np.inf, -np.inf]


def test_half_precision_outputs_are_compared_within_their_precision():
    from edgebyoc.verify import compare_output

    ref = np.linspace(-1, 1, 16).astype(np.float16)
    close = ref.copy()
    close[3] = np.float16(float(close[3]) + 2.9e-3)  # three fp16 steps at the range's top
    assert compare_output("y", close, ref, 1e-4).passed
    far = (ref * 1.01).astype(np.float16)
    verdict = compare_output("y", far, ref, 1e-4)
    assert not verdict.passed and verdict.reason.endswith("(float16's precision)")
    assert not compare_output("y", ref.astype(np.float32) * 1.001, ref.astype(np.float32),
                              1e-4).passed  # float32 keeps the 1e-4 asked


def test_a_tvm_schedule_rule_that_fails_declines():
    from edgebyoc.schedules import Declining

    class Asserting:
        def apply(self, func, target, tunable):
            assert False, "no reduction loop"

    assert Declining(Asserting()).apply(None, None, False) is None


def test_shapes_traced_as_numbers_fold():
    """Exporters write a shape traced as Python numbers as Constants: Swin's window padding
    ``(w - W % w) % w`` (integers) feeding a Pad, MobileViT's ``ceil(h / p) * p`` (float
    scalars) feeding a Reshape. TVM's importer takes neither as a shape."""
    c = lambda name, v: h.make_node("Constant", [], [name], value=nh.from_array(np.asarray(v)))
    nodes = [c("W", np.int64(6)), c("w", np.int64(4)), c("h", np.float32(6.0)),
             c("p", np.float32(4.0)),
             h.make_node("Mod", ["W", "w"], ["m"]), h.make_node("Sub", ["w", "m"], ["d"]),
             h.make_node("Mod", ["d", "w"], ["pad_right"]),
             h.make_node("Unsqueeze", ["pad_right", "ax0"], ["pr"]),
             h.make_node("Concat", ["zeros3", "pr"], ["pads"], axis=0),
             h.make_node("Pad", ["x", "pads"], ["padded"]),          # [1, 8] -> [1, 10]
             h.make_node("Div", ["h", "p"], ["q"]), h.make_node("Ceil", ["q"], ["cq"]),
             h.make_node("Mul", ["cq", "p"], ["hp"]),                 # 8.0
             h.make_node("Cast", ["hp"], ["hi"], to=T.INT64),
             h.make_node("Unsqueeze", ["hi", "ax0"], ["hu"]),
             h.make_node("Div", ["hu", "two"], ["half"]),
             h.make_node("Concat", ["half", "two1"], ["shape"], axis=0),  # [4, 2]
             h.make_node("Slice", ["padded", "s0", "s8", "ax1"], ["first8"]),
             h.make_node("Reshape", ["first8", "shape"], ["y"])]
    inits = [const("ax0", np.array([0], np.int64)), const("zeros3", np.zeros(3, np.int64)),
             const("two", np.array([2], np.int64)), const("two1", np.array([2], np.int64)),
             const("s0", np.array([0], np.int64)), const("s8", np.array([8], np.int64)),
             const("ax1", np.array([1], np.int64))]
    graph = h.make_graph(nodes, "traced", [h.make_tensor_value_info("x", T.FLOAT, [1, 6])],
                         [h.make_tensor_value_info("y", T.FLOAT, ["a", "b"])], inits)
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 17)])
    result = fold_static_shapes(model, [TensorSpec("x", (1, 6), "float32")])
    assert {"Mod", "Ceil", "Concat"} <= set(result.by_op)
    assert [n.op_type for n in result.model.graph.node if n.op_type != "Constant"] == \
        ["Pad", "Slice", "Reshape"]
    compiled = edgebyoc.compile(model)
    assert compiled.outputs[0].shape == (4, 2)
    assert verify(compiled, seed=0)[0].passed


def test_a_huge_constant_of_shape_is_judged_before_it_is_computed():
    """The size limit is checked from the shape, not by building the tensor (2^34 floats)."""
    nodes = [h.make_node("ConstantOfShape", ["shape"], ["big"],
                         value=nh.from_array(np.array([1.0], np.float32))),
             h.make_node("ReduceSum", ["big"], ["y"], keepdims=0)]
    graph = h.make_graph(nodes, "big", [h.make_tensor_value_info("x", T.FLOAT, [1])],
                         [h.make_tensor_value_info("y", T.FLOAT, [])],
                         [const("shape", np.array([1 << 17, 1 << 17], np.int64))])
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 17)])
    result = fold_static_shapes(model, [TensorSpec("x", (1,), "float32")])
    assert result.nodes == 0 and result.model is model
    assert result.kept == ["ConstantOfShape big: 17,179,869,184 elements > 262,144"]
