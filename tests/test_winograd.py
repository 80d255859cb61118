"""Winograd F(2x2, 3x3) convolutions on the host: which convolutions are rewritten, and that
the rewritten build computes what TVM's default build and onnxruntime compute."""

import numpy as np
import onnx
import pytest
import tvm
from onnx import helper, numpy_helper

from edgebyoc.codegen.host import host_pipeline, host_target
from edgebyoc.frontend import import_model
from edgebyoc.verify import compare_output
from edgebyoc.winograd import FILTER_TRANSFORM, transformed_weights
from test_host_schedule import _both_builds


def conv_chain(cin, cout, size, stride=1, dilation=1, groups=1, residual=False, batch=1,
               seed=0) -> onnx.ModelProto:
    """A 3x3 convolution (bias, ReLU), then, with ``residual``, a second one whose output is
    added to the first's before a ReLU (ResNet's basic block)."""
    rng = np.random.default_rng(seed)

    def weights(name, out, inp):
        return [numpy_helper.from_array((rng.standard_normal((out, inp // groups, 3, 3))
                                         / np.sqrt(inp * 9)).astype(np.float32), name),
                numpy_helper.from_array(rng.standard_normal(out).astype(np.float32),
                                        name + "_b")]

    conv = dict(kernel_shape=[3, 3], strides=[stride] * 2, dilations=[dilation] * 2,
                pads=[dilation] * 4, group=groups)
    inits = weights("w1", cout, cin)
    nodes = [helper.make_node("Conv", ["x", "w1", "w1_b"], ["c1"], **conv),
             helper.make_node("Relu", ["c1"], ["r1"])]
    out = "r1"
    if residual:
        inits += weights("w2", cout, cout)
        nodes += [helper.make_node("Conv", ["r1", "w2", "w2_b"], ["c2"], kernel_shape=[3, 3],
                                   pads=[1] * 4),
                  helper.make_node("Add", ["c2", "r1"], ["s"]),
                  helper.make_node("Relu", ["s"], ["r2"])]
        out = "r2"
    nodes.append(helper.make_node("Identity", [out], ["y"]))
    graph = helper.make_graph(nodes, "convs",
                              [helper.make_tensor_value_info("x", 1, [batch, cin, size, size])],
                              [helper.make_tensor_value_info("y", 1, None)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    return onnx.shape_inference.infer_shapes(model)


def _builds(model, seed=1):
    """(kernel names of the scheduled build, its outputs, the default build's outputs)."""
    imported = import_model(model)
    target = host_target()
    with target:
        lowered = host_pipeline(target, True)(imported.mod)
    names = {gv.name_hint for gv, f in lowered.functions.items()
             if isinstance(f, tvm.tirx.PrimFunc)}
    return (names, *_both_builds(imported, seed))


def test_transformed_weights_are_g_g_gt():
    """U = G g G^T per filter, in [16, Cin, Cout] with the 4x4 entries row-major."""
    rng = np.random.default_rng(0)
    hwio = rng.standard_normal((3, 3, 2, 5)).astype(np.float32)
    u = transformed_weights(hwio)
    assert u.shape == (16, 2, 5) and u.dtype == np.float32
    for i, o in ((0, 0), (1, 4)):
        expected = FILTER_TRANSFORM @ hwio[:, :, i, o].astype(np.float64) @ FILTER_TRANSFORM.T
        np.testing.assert_allclose(u[:, i, o].reshape(4, 4), expected, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("case", [
    dict(cin=64, cout=64, size=14),
    dict(cin=64, cout=128, size=15),  # odd: the last row and column of blocks half outside
    dict(cin=64, cout=64, size=16, residual=True),  # residual add and ReLU in the epilogue
    dict(cin=72, cout=64, size=14, batch=2),  # channels in half vectors on AVX-512, 2 images
])
def test_rewritten_convolutions_equal_the_default_build(case):
    names, scheduled, default = _builds(conv_chain(**case))
    assert any(name.startswith("winograd_input") for name in names), names
    assert any("winograd_output" in name for name in names), names
    for key, value in scheduled.items():
        comparison = compare_output(key, value, default[key], rtol=1e-5)
        assert comparison.passed, (case, comparison)


@pytest.mark.parametrize("case", [
    dict(cin=64, cout=64, size=14, stride=2),
    dict(cin=64, cout=64, size=14, dilation=2),
    dict(cin=64, cout=64, size=14, groups=2),
    dict(cin=32, cout=64, size=28),  # too few input channels to pay for the transforms
    dict(cin=64, cout=64, size=13),  # 169 pixels: under WINOGRAD_MIN_PIXELS
])
def test_other_convolutions_stay_direct(case):
    names, scheduled, default = _builds(conv_chain(**case))
    assert not any("winograd" in name for name in names), names
    for key, value in scheduled.items():
        assert compare_output(key, value, default[key], rtol=1e-5).passed


def test_depth_first_builds_keep_direct_convolutions():
    """A depth-first plan is there to save memory: the convolutions it leaves outside its
    macro-kernels are not rewritten (the transforms' tensors are 4x the layer's)."""
    from edgebyoc.codegen.host import host_pipeline as pipeline

    class Plan:  # the fields host_pipeline reads of a DfsPlan with one (absent) kernel
        kernels = ["none"]
        tiles = {}
        padding_limit = False

    imported = import_model(conv_chain(64, 64, 14))
    target = host_target()
    import edgebyoc.codegen.host as host

    calls = []
    original = host.fuse_macro_kernels, host.lower_sliding_kernels
    host.fuse_macro_kernels = lambda mod, plan: mod
    host.lower_sliding_kernels = lambda mod, plan, prefix, target=None: mod
    original_winograd = host.winograd_convolutions
    host.winograd_convolutions = lambda lanes: calls.append(lanes) or (lambda mod: mod)
    try:
        with target:
            pipeline(target, True, dfs=Plan())(imported.mod)
            assert calls == []
            pipeline(target, True)(imported.mod)
            assert len(calls) == 1
    finally:
        host.fuse_macro_kernels, host.lower_sliding_kernels = original
        host.winograd_convolutions = original_winograd


@pytest.mark.slow
def test_resnet18_with_winograd_layers_verifies_against_onnxruntime():
    import edgebyoc
    from edgebyoc.plugins import PluginRegistry
    from edgebyoc.testing.models import resnet18

    compiled = edgebyoc.compile(resnet18(), registry=PluginRegistry(search_path=[]))
    x = np.random.default_rng(0).standard_normal((1, 3, 224, 224)).astype(np.float32)
    import onnxruntime as ort

    session = ort.InferenceSession(resnet18().SerializeToString(),
                                   providers=["CPUExecutionProvider"])
    expected = session.run(None, {"input": x})[0]
    got = next(iter(compiled.run({"input": x}).values()))
    assert np.abs(got - expected).max() <= 1e-5 * np.abs(expected).max()
