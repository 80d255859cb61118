"""Concatenations on the host as copy loops (``edgebyoc.concat``): the kernel's values, which
epilogues it takes, and whole models against TVM's default build and onnxruntime."""

import numpy as np
import onnx
import pytest
import tvm
from onnx import helper, numpy_helper

from edgebyoc.codegen.host import host_pipeline, host_target
from edgebyoc.concat import EpilogueStep, concat_kernel
from edgebyoc.frontend import import_model
from edgebyoc.verify import compare_output
from test_host_schedule import _both_builds


def _run_kernel(kernel, arrays, shape, dtype):
    library = tvm.compile(tvm.IRModule({"main": kernel.with_attr("global_symbol", "main")}),
                          target="llvm")
    output = tvm.runtime.tensor(np.zeros(shape, dtype))
    library["main"](*[tvm.runtime.tensor(a) for a in arrays], output)
    return output.numpy()


@pytest.mark.parametrize("shapes, axis", [
    ([(1, 7, 7, 64), (1, 7, 7, 32), (1, 7, 7, 32)], 3),   # DenseNet's, channels-last
    ([(1, 64, 7, 7), (1, 32, 7, 7)], 1),                  # channels-first: rows of planes
    ([(2, 1, 5), (2, 196, 5), (2, 3, 5)], 1),             # a class token before the patches
    ([(300, 2), (300, 3)], 1),                             # rows in parallel, short copies
    ([(4,), (9,)], 0),                                     # one row
    ([(3,), (0,)], 0),                                     # an empty part
])
def test_the_kernel_concatenates_as_numpy(shapes, axis):
    rng = np.random.default_rng(0)
    parts = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    expected = np.concatenate(parts, axis)
    got = _run_kernel(concat_kernel(shapes, axis, "float32"), parts, expected.shape, "float32")
    assert np.array_equal(got, expected)


def test_the_epilogue_applies_each_constant_at_its_place():
    rng = np.random.default_rng(1)
    shapes = [(1, 3, 4, 5), (1, 3, 4, 2)]
    parts = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    shift = rng.standard_normal((1, 1, 1, 7)).astype(np.float32)
    scale = rng.standard_normal((4, 1)).astype(np.float32)  # broadcast over rows and channels
    steps = (EpilogueStep("relax.subtract", shift.shape, constant_first=True),
             EpilogueStep("relax.multiply", scale.shape), EpilogueStep("relax.nn.relu"),
             EpilogueStep("relax.minimum", (1,)))
    limit = np.array([0.75], np.float32)
    got = _run_kernel(concat_kernel(shapes, 3, "float32", steps),
                      parts + [shift, scale, limit], (1, 3, 4, 7), "float32")
    expected = np.minimum(np.maximum((shift - np.concatenate(parts, 3)) * scale, 0), limit)
    assert np.array_equal(got, expected)


def test_integer_parts_copy_bit_exact():
    rng = np.random.default_rng(2)
    shapes = [(1, 5, 5, 16), (1, 5, 5, 8)]
    parts = [rng.integers(-128, 128, s, dtype=np.int8) for s in shapes]
    offset = rng.integers(-3, 3, (1, 1, 1, 24), dtype=np.int8)
    got = _run_kernel(concat_kernel(shapes, 3, "int8", (EpilogueStep("relax.add", (1, 1, 1, 24)),)),
                      parts + [offset], (1, 5, 5, 24), "int8")
    assert np.array_equal(got, (np.concatenate(parts, 3) + offset).astype(np.int8))


def dense_block(layers=4, channels=16, growth=8, size=8, extra_use=False) -> onnx.ModelProto:
    """DenseNet's dense block: each layer concatenates every feature map so far, normalises
    (batch norm, ReLU) and convolves to ``growth`` new channels. With ``extra_use`` the last
    concatenation is also an output of the model (its epilogue must then stay a kernel of its
    own)."""
    rng = np.random.default_rng(3)
    inits, features = [], ["x", "x_relu"]  # every concatenation of at least two tensors
    nodes = [helper.make_node("Relu", ["x"], ["x_relu"])]
    width = 2 * channels
    for layer in range(layers):
        name = f"l{layer}"
        nodes.append(helper.make_node("Concat", list(features), [name + "_cat"], axis=1))
        for field, values in (("g", rng.random(width) + 0.5), ("b", rng.standard_normal(width)),
                              ("m", rng.standard_normal(width)), ("v", rng.random(width) + 0.5)):
            inits.append(numpy_helper.from_array(values.astype(np.float32), f"{name}_{field}"))
        inits.append(numpy_helper.from_array(
            (rng.standard_normal((growth, width, 3, 3)) / np.sqrt(9 * width)).astype(
                np.float32), name + "_w"))
        nodes += [helper.make_node("BatchNormalization", [name + "_cat"] + [
                      f"{name}_{f}" for f in "gbmv"], [name + "_bn"]),
                  helper.make_node("Relu", [name + "_bn"], [name + "_relu"]),
                  helper.make_node("Conv", [name + "_relu", name + "_w"], [name + "_out"],
                                   kernel_shape=[3, 3], pads=[1] * 4)]
        features.append(name + "_out")
        width += growth
    nodes.append(helper.make_node("Concat", features, ["y"], axis=1))
    outputs = [helper.make_tensor_value_info("y", 1, None)]
    if extra_use:
        outputs.append(helper.make_tensor_value_info(f"l{layers - 1}_cat", 1, None))
    graph = helper.make_graph(
        nodes, "dense_block", [helper.make_tensor_value_info("x", 1, [1, channels, size, size])],
        outputs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    return onnx.shape_inference.infer_shapes(model)


def _lowered_kernels(imported) -> list[str]:
    target = host_target()
    with target:
        lowered = host_pipeline(target, True)(imported.mod)
    return sorted(gv.name_hint for gv, f in lowered.functions.items()
                  if isinstance(f, tvm.tirx.PrimFunc))


@pytest.mark.parametrize("extra_use", [False, True])
def test_a_dense_block_concatenates_by_copies_and_equals_the_default_build(extra_use):
    imported = import_model(dense_block(extra_use=extra_use))
    kernels = _lowered_kernels(imported)
    assert not [k for k in kernels if "concatenate" in k], kernels
    assert len([k for k in kernels if k.startswith("concat_parts")]) == 5
    # the batch norm and ReLU run in the copy loops, unless the concatenation is also an
    # output: then that one's epilogue stays a kernel of its own
    assert bool([k for k in kernels if "subtract" in k]) == extra_use, kernels
    scheduled, default = _both_builds(imported, seed=4)
    for name in default:
        assert compare_output(name, scheduled[name], default[name], rtol=1e-5).passed


@pytest.mark.slow
def test_a_dense_block_verifies_against_onnxruntime():
    import edgebyoc

    result, _ = edgebyoc.verify(edgebyoc.compile(dense_block(layers=6, size=14)), seed=0)
    assert result.passed and result.outputs[0].rel < 1e-5


def test_a_model_with_data_dependent_shapes_keeps_tvm_s_concatenation():
    """A detector's post-processing (symbolic extents) is left to TVM's lowering, its
    concatenations too (SSDlite320's build failed when they were rewritten)."""
    nodes = [helper.make_node("Concat", ["x", "x"], ["twice"], axis=0),
             helper.make_node("NonZero", ["twice"], ["where"])]
    graph = helper.make_graph(nodes, "nonzero", [helper.make_tensor_value_info("x", 1, [4])],
                              [helper.make_tensor_value_info("where", 7, [1, "n"])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    imported = import_model(model)
    kernels = _lowered_kernels(imported)
    assert not [k for k in kernels if k.startswith("concat_parts")], kernels
    assert [k for k in kernels if "concatenate" in k], kernels
