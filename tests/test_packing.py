"""Constant weights re-laid in channel-tile blocks at compile time (``edgebyoc.packing``): the
kernels read each tile's weights as one run, the results stay those of TVM's default build."""

import numpy as np
import pytest
import tvm
from onnx import helper, numpy_helper
from tvm import relax

from edgebyoc.codegen.host import host_pipeline, host_target
from edgebyoc.frontend import import_model
from edgebyoc.packing import PACK_MIN_BYTES, pack_constant_weights
from edgebyoc.schedules import DENSE_VECTORS_PER_TILE, channel_tile, simd_lanes
from edgebyoc.verify import compare_output

from test_host_schedule import _both_builds, conv_model


def _matmul_model(k, n, constant=True, seed=0, rows=12):
    rng = np.random.default_rng(seed)
    inputs = [helper.make_tensor_value_info("x", 1, [1, rows, k])]
    initializers = []
    if constant:
        initializers.append(numpy_helper.from_array(
            rng.standard_normal((k, n)).astype(np.float32), "w"))
    else:
        inputs.append(helper.make_tensor_value_info("w", 1, [k, n]))
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "mm", inputs,
                              [helper.make_tensor_value_info("y", 1, [1, rows, n])], initializers)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _legalized(imported):
    """The host build's module right before packing: channels-last, legalized, fused."""
    from edgebyoc.codegen.host import _channels_last

    target = host_target()
    with target:
        mod = _channels_last(relax.transform.FoldConstant()(imported.mod))
        return tvm.transform.Sequential([
            relax.transform.DecomposeOpsForInference(), relax.transform.LegalizeOps(),
            relax.transform.AnnotateTIROpPattern(), relax.transform.FoldConstant(),
            relax.transform.FuseOps(), relax.transform.FuseTIR()])(mod)


def _packed_constants(mod):
    """{kernel name: the shapes of the constants its calls pass} after packing."""
    found = {}

    def visit(node):
        if isinstance(node, relax.Call) and isinstance(node.op, tvm.ir.Op) \
                and node.op.name == "relax.call_tir":
            shapes = [tuple(a.value.numpy().shape) for a in node.args[1].fields
                      if isinstance(a, tvm.ir.expr.Constant)]
            found[node.args[0].name_hint] = shapes

    relax.analysis.post_order_visit(mod["main"].body, visit)
    return found


@pytest.mark.parametrize("rows, vectors", [(16, DENSE_VECTORS_PER_TILE), (12, 2)])
def test_dense_tiles_are_three_vectors_where_rows_are_whole_blocks_of_8(rows, vectors):
    """On AVX-512 a dense layer whose rows are whole register blocks (8) accumulates 3 vectors
    of output channels per tile (8 x 3 registers); other rows keep 2. The packed weights and
    the schedule agree: the result equals TVM's default build."""
    target = host_target()
    if simd_lanes(target) != 16:
        pytest.skip("the 3-vector dense tile is for 512-bit vectors")
    imported = import_model(_matmul_model(384, 768, rows=rows, seed=3))
    shapes = _packed_constants(pack_constant_weights(target)(_legalized(imported)))
    tile = 16 * vectors
    assert any((768 // tile, 384, tile) in s for s in shapes.values()), shapes
    got, default = _both_builds(imported, seed=4)
    for key, value in got.items():
        assert compare_output(key, value, default[key], rtol=1e-5).passed


@pytest.mark.parametrize("model, weight_shape", [
    (conv_model(64, 64, 10, 3), (3, 3, 64, 64)), (_matmul_model(256, 512), (256, 512))])
def test_conv_and_dense_weights_are_tile_major_and_exact(model, weight_shape):
    imported = import_model(model)
    target = host_target()
    packed = pack_constant_weights(target)(_legalized(imported))
    _, tile = channel_tile(weight_shape[-1], simd_lanes(target))
    blocked = (weight_shape[-1] // tile, *weight_shape[:-1], tile)
    shapes = _packed_constants(packed)
    names = [name for name, s in shapes.items() if blocked in s]
    assert names and all(name.endswith("_packed") for name in names), shapes
    # the kernel reads the packed buffer: its parameter has the blocked shape
    func = packed[names[0]]
    assert any(tuple(int(d) for d in p.ty.shape) == blocked for p in func.params
               if hasattr(p.ty, "shape"))
    got, default = _both_builds(imported, seed=5)
    for key, value in got.items():
        assert compare_output(key, value, default[key], rtol=1e-5).passed


def test_a_weight_that_is_an_input_or_small_keeps_its_layout():
    target = host_target()
    for model in (_matmul_model(256, 512, constant=False), _matmul_model(16, 64)):
        assert 16 * 64 * 4 < PACK_MIN_BYTES
        mod = _legalized(import_model(model))
        packed = pack_constant_weights(target)(mod)
        assert not [gv for gv in packed.functions if gv.name_hint.endswith("_packed")]


def test_the_host_build_packs_and_runs_exactly():
    """Through the whole host pipeline (constants lifted to parameters after packing)."""
    imported = import_model(_matmul_model(384, 768))
    target = host_target()
    lowered = host_pipeline(target, True)(imported.mod)
    assert any(gv.name_hint.endswith("_packed") for gv in lowered.functions)
    got, default = _both_builds(imported, seed=2)
    for key, value in got.items():
        assert compare_output(key, value, default[key], rtol=1e-5).passed
