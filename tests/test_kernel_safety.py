"""No compiled kernel reads or writes out of bounds (issue #26, classes 2 to 4): attributes
checked against the ONNX specification, index operands checked at compile time or right
before their kernels, the safe build's run-time checks, outputs as onnxruntime gives them,
memory bounded before work, wide graphs compiled."""

import re

import numpy as np
import pytest
from onnx import TensorProto as T
from onnx import helper, numpy_helper

import edgebyoc
from edgebyoc.errors import EdgebyocError, UnsupportedModelError
from edgebyoc.plugins import PluginRegistry
from edgebyoc.resources import ResourceError


def model(nodes, inputs, outputs, initializers=(), opset=17):
    graph = helper.make_graph(nodes, "g", inputs, outputs, initializer=list(initializers))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def value(name, dtype, shape):
    return helper.make_tensor_value_info(name, dtype, shape)


def const(name, array):
    return numpy_helper.from_array(np.asarray(array), name)


def compile_host(proto, **kwargs):
    return edgebyoc.compile(proto, registry=PluginRegistry(search_path=[]), dfs=False, **kwargs)


RANK4 = ["a", "b", "c", "d"]

#: (model, the error's words): models onnxruntime refuses, each one line naming the node
REFUSED = {
    "conv dilation 0": (model([helper.make_node("Conv", ["x", "w"], ["y"], dilations=[0, 0])],
                              [value("x", T.FLOAT, [1, 1, 8, 8])], [value("y", T.FLOAT, RANK4)],
                              [const("w", np.ones((1, 1, 3, 3), np.float32))]),
                        "dilations must only contain positive values"),
    "conv dilation -1": (model([helper.make_node("Conv", ["x", "w"], ["y"], dilations=[-1, -1])],
                               [value("x", T.FLOAT, [1, 1, 8, 8])], [value("y", T.FLOAT, RANK4)],
                               [const("w", np.ones((1, 1, 3, 3), np.float32))]),
                         "dilations must only contain positive values"),
    "maxpool window over the input": (
        model([helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[10, 10])],
              [value("x", T.FLOAT, [1, 1, 4, 4])], [value("y", T.FLOAT, RANK4)]),
        "gives 'y' the shape [1, 1, -5, -5], with a negative dimension"),
    "pad removing more than the axis": (
        model([helper.make_node("Pad", ["x", "p"], ["y"])], [value("x", T.FLOAT, [1, 4])],
              [value("y", T.FLOAT, ["a", "b"])], [const("p", np.array([0, -10, 0, 0]))]),
        "with a negative dimension"),
    "split into more parts than the axis": (
        model([helper.make_node("Split", ["x"], [f"y{i}" for i in range(6)], axis=0,
                                num_outputs=6)], [value("x", T.FLOAT, [4])],
              [value(f"y{i}", T.FLOAT, ["n"]) for i in range(6)], opset=18),
        "with a negative dimension"),
    "depth-to-space block 0": (
        model([helper.make_node("DepthToSpace", ["x"], ["y"], blocksize=0)],
              [value("x", T.FLOAT, [1, 4, 2, 2])], [value("y", T.FLOAT, RANK4)]),
        "Blocksize must be positive"),
    "scatternd index 10^5": (
        model([helper.make_node("ScatterND", ["x", "i", "u"], ["y"], name="sc")],
              [value("x", T.FLOAT, [4]), value("u", T.FLOAT, [1])], [value("y", T.FLOAT, [4])],
              [const("i", np.array([[100000]]))]),
        "node 'sc' (ScatterND): reads or writes index 100000 of an axis of 4"),
    "scatterelements index 10^6": (
        model([helper.make_node("ScatterElements", ["x", "i", "u"], ["y"], axis=0)],
              [value("x", T.FLOAT, [4]), value("u", T.FLOAT, [1])], [value("y", T.FLOAT, [4])],
              [const("i", np.array([1000000]))]),
        "reads or writes index 1000000 of an axis of 4"),
    "gathernd second index position": (
        model([helper.make_node("GatherND", ["x", "i"], ["y"])], [value("x", T.FLOAT, [4, 3])],
              [value("y", T.FLOAT, [1])], [const("i", np.array([[1, 3]]))]),
        "reads or writes index 3 of an axis of 3"),
    "transpose perm not a permutation": (
        model([helper.make_node("Transpose", ["x"], ["y"], perm=[0, 0])],
              [value("x", T.FLOAT, [2, 3])], [value("y", T.FLOAT, ["a", "b"])]),
        "Transpose"),
}


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_models_onnxruntime_refuses_are_refused_naming_the_reason(case):
    proto, words = REFUSED[case]
    ort = pytest.importorskip("onnxruntime")
    with pytest.raises(Exception):  # the premise: onnxruntime refuses it too
        session = ort.InferenceSession(proto.SerializeToString())
        feeds = {i.name: np.ones([d.dim_value for d in i.type.tensor_type.shape.dim],
                                 np.float32) for i in proto.graph.input}
        session.run(None, feeds)
    with pytest.raises(UnsupportedModelError) as info:
        compile_host(proto)
    assert words in str(info.value) and "\n" not in str(info.value)


def test_indices_given_at_run_time_are_checked_before_the_kernel():
    # an index input: checked before the run, per position of GatherND's index tuple
    proto = model([helper.make_node("GatherND", ["x", "i"], ["y"])],
                  [value("x", T.FLOAT, [4, 3]), value("i", T.INT64, [2, 2])],
                  [value("y", T.FLOAT, [2])])
    compiled = compile_host(proto)
    x = np.arange(12, dtype=np.float32).reshape(4, 3)
    good = compiled.run({"x": x, "i": np.array([[3, 2], [0, 1]])})["y"]
    assert good.tolist() == [11.0, 1.0]
    for bad, message in (([[4, 0], [0, 0]], "index 4 is outside the axis of 4"),
                         ([[0, 3], [0, 0]], "index 3 is outside the axis of 3"),
                         ([[-5, 0], [0, 0]], "index -5 is outside the axis of 4")):
        with pytest.raises(EdgebyocError, match=f"input 'i': {message}"):
            compiled.run({"x": x, "i": np.array(bad)})
    assert compiled.inputs[1].index_extents == (4, 3)
    assert compiled.run(edgebyoc.frontend.random_inputs(compiled.inputs))["y"].shape == (2,)
    # an index computed from the input: the guard in the compiled model stops the kernel
    shifted = model([helper.make_node("Add", ["i", "one"], ["j"]),
                     helper.make_node("GatherND", ["x", "j"], ["y"])],
                    [value("x", T.FLOAT, [4, 3]), value("i", T.INT64, [2, 2])],
                    [value("y", T.FLOAT, [2])], [const("one", np.array(1))])
    compiled = compile_host(shifted)
    assert compiled.run({"x": x, "i": np.array([[2, 1], [0, 0]])})["y"].tolist() == [11.0, 4.0]
    with pytest.raises(EdgebyocError, match="GatherND .*outside the axis it indexes"):
        compiled.run({"x": x, "i": np.array([[3, 0], [0, 0]])})


def test_scatter_with_indices_from_the_model_input_is_guarded():
    proto = model([helper.make_node("ScatterElements", ["x", "i", "u"], ["y"], axis=0)],
                  [value("x", T.FLOAT, [4]), value("i", T.INT64, [2]),
                   value("u", T.FLOAT, [2])], [value("y", T.FLOAT, [4])])
    compiled = compile_host(proto)
    feeds = {"x": np.zeros(4, np.float32), "u": np.ones(2, np.float32)}
    out = compiled.run({**feeds, "i": np.array([1, -1])})["y"]
    assert out.tolist() == [0.0, 1.0, 0.0, 1.0]
    with pytest.raises(EdgebyocError, match="input 'i': index 1000000 is outside the axis"):
        compiled.run({**feeds, "i": np.array([1, 1_000_000])})


def test_the_safe_build_checks_what_it_cannot_prove():
    """The bound checks of ``--safe`` on a kernel that reads through data-dependent indices
    (the index guards switched off to reach the kernel itself), and none on a convolution."""
    import tvm
    from tvm import te

    from edgebyoc.codegen.bounds import instrument_bounds

    data = te.placeholder((4, 3), name="A")
    index = te.placeholder((2,), name="I", dtype="int64")
    take = te.compute((2, 3), lambda i, j: data[index[i], j], name="B")
    padded = te.compute((6, 5), lambda i, j: tvm.tirx.if_then_else(
        tvm.tirx.all(i >= 1, i < 5, j >= 1, j < 4), data[i - 1, j - 1], 0.0), name="P")
    mod = tvm.IRModule({"take": te.create_prim_func([data, index, take]),
                        "pad": te.create_prim_func([data, padded])})
    checked = instrument_bounds(mod)
    assert "assert" in checked["take"].script()
    assert "assert" not in checked["pad"].script()  # the padding's reads are proven in range
    library = tvm.compile(checked["take"], target="llvm")
    a = tvm.runtime.tensor(np.arange(12, dtype=np.float32).reshape(4, 3))
    b = tvm.runtime.tensor(np.zeros((2, 3), np.float32))
    library(a, tvm.runtime.tensor(np.array([3, 0])), b)
    assert b.numpy()[0].tolist() == [9.0, 10.0, 11.0]
    with pytest.raises(Exception, match="index out of bounds in kernel take"):
        library(a, tvm.runtime.tensor(np.array([1, 2000])), b)


def test_safe_builds_verify(small_model_path):
    compiled = edgebyoc.compile(small_model_path, registry=PluginRegistry(search_path=[]),
                                safe=True, dfs=False)
    result, _ = edgebyoc.verify(compiled)
    assert result.passed and compiled.manifest["host"]["safe"] is True


def test_outputs_have_onnxruntimes_types_and_count():
    onehot = model([helper.make_node("OneHot", ["i", "d", "v"], ["y"])],
                   [value("i", T.INT64, [3])], [value("y", T.FLOAT, ["a", "b"])],
                   [const("d", np.array(4)), const("v", np.array([0.0, 1.0], np.float32))])
    compiled = compile_host(onehot)
    out = compiled.run({"i": np.array([0, 3, -1])})["y"]
    assert out.dtype == np.float32 and out.tolist()[1] == [0, 0, 0, 1]
    twice = model([helper.make_node("Relu", ["x"], ["y"])], [value("x", T.FLOAT, [4])],
                  [value("y", T.FLOAT, [4]), value("y", T.FLOAT, [4])])
    compiled = compile_host(twice)
    assert [s.name for s in compiled.outputs] == ["y", "y_1"]
    result, outputs = edgebyoc.verify(compiled)
    assert result.passed and len(outputs) == 2
    # a dtype that differs from the reference fails verify instead of passing on values
    from edgebyoc.verify import compare_output

    mismatch = compare_output("y", np.zeros(2, np.float64), np.zeros(2, np.float32), 1e-4)
    assert not mismatch.passed and "element type float64 vs reference float32" in mismatch.reason


def test_memory_is_checked_before_folding_compiling_and_running(monkeypatch, small_compiled,
                                                                tmp_path):
    huge = model([helper.make_node("ConstantOfShape", ["s"], ["c"]),
                  helper.make_node("Add", ["x", "c"], ["y"])],
                 [value("x", T.FLOAT, [1])], [value("y", T.FLOAT, ["n"])],
                 [const("s", np.array([10_000_000_000]))])
    monkeypatch.setenv("EDGEBYOC_MAX_MEMORY", "8GB")
    with pytest.raises(ResourceError, match=r"tensor 'c' \(node 'c' \(ConstantOfShape\), shape "
                                            r"\[10000000000\]\) needs 40.0 GB, more than the "
                                            r"8.0 GB allowed"):
        compile_host(huge)
    artifact = small_compiled.save(tmp_path / "a")
    monkeypatch.setenv("EDGEBYOC_MAX_MEMORY", "1kB")
    with pytest.raises(ResourceError, match="running the model .* needs .* more than the "
                                            "1.0 kB allowed"):
        edgebyoc.load(artifact).run(np.zeros((1, 3, 16, 16), np.float32))
    monkeypatch.setenv("EDGEBYOC_MAX_MEMORY", "unlimited")
    assert edgebyoc.load(artifact).run(np.zeros((1, 3, 16, 16), np.float32))
    monkeypatch.setenv("EDGEBYOC_MAX_MEMORY", "lots")
    with pytest.raises(ResourceError, match="EDGEBYOC_MAX_MEMORY: 'lots' is not a size"):
        edgebyoc.load(artifact).run(np.zeros((1, 3, 16, 16), np.float32))


@pytest.mark.slow
@pytest.mark.parametrize("operator", ["Concat", "Sum", "Max"])
def test_operators_of_two_thousand_inputs_compile_and_verify(operator):
    """A concat / stack of 2,000 inputs overflowed the compiler's stack (a segfault)."""
    count = 2000
    nodes = [helper.make_node("Neg" if i % 2 else "Relu", ["x"], [f"r{i}"]) for i in range(count)]
    attributes = {"axis": 0} if operator == "Concat" else {}
    nodes.append(helper.make_node(operator, [f"r{i}" for i in range(count)], ["y"],
                                  **attributes))
    proto = model(nodes, [value("x", T.FLOAT, [4])], [value("y", T.FLOAT, ["n"])])
    result, _ = edgebyoc.verify(compile_host(proto))
    assert result.passed, result.to_dict()


def test_wide_concats_become_trees_of_the_same_tensor():
    import tvm
    from tvm import relax

    from edgebyoc.rewrites import MAX_CONCAT_INPUTS, split_wide_concats

    builder = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((2,), "float32"))
    with builder.function("main", [x]):
        with builder.dataflow():
            parts = [builder.emit(relax.op.add(x, relax.const(float(i), "float32")))
                     for i in range(100)]
            out = builder.emit_output(relax.op.stack(relax.Tuple(parts), axis=0))
        builder.emit_func_output(out)
    before = builder.get()
    after = split_wide_concats(before)
    widest = []

    def visit(node):
        if isinstance(node, relax.Call) and isinstance(node.op, tvm.ir.Op) \
                and node.op.name in ("relax.concat", "relax.stack"):
            widest.append(len(node.args[0].fields))

    relax.analysis.post_order_visit(after["main"].body, visit)
    assert max(widest) <= MAX_CONCAT_INPUTS and len(widest) > 1
    results = []
    for mod in (before, after):
        vm = relax.VirtualMachine(tvm.compile(mod, target="llvm"), tvm.cpu())
        results.append(vm["main"](tvm.runtime.tensor(np.array([1.0, 2.0], np.float32))).numpy())
    assert results[0].shape == (100, 2) and np.array_equal(results[0], results[1])


def test_onnx_inference_messages_name_the_node():
    proto = REFUSED["conv dilation 0"][0]
    with pytest.raises(UnsupportedModelError) as info:
        compile_host(proto)
    assert re.search(r"node 'y' \(Conv\): Attribute dilations", str(info.value))
