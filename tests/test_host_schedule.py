"""The host CPU schedules change loops, never results: scheduled == TVM's default build."""

import re

import numpy as np
import onnx
import pytest
import tvm
from onnx import helper, numpy_helper
from tvm import relax

import edgebyoc.schedules as host_schedules
from edgebyoc.codegen.host import host_pipeline, host_target
from edgebyoc.rewrites import fast_erf, fast_sigmoid
from edgebyoc.schedules import (HOST_LAYOUTS, SHORT_ROW_VECTORS, VECTORS_PER_TILE,
                                HostReductionRule,
                                channel_tile, einsum_channel_padding, max_row_block,
                                padded_channels, row_block, simd_lanes, tile_vectors,
                                vector_registers)
from edgebyoc.frontend import import_model, random_inputs
from edgebyoc.runtime.artifact import HostRunner
from edgebyoc.verify import compare_output


def conv_model(cin, cout, size, kernel, stride=1, dilation=1, groups=1, pad=None, pool=None,
               residual=False, seed=0, pool_kernel=2, pool_pad=0) -> onnx.ModelProto:
    rng = np.random.default_rng(seed)
    pad = (kernel // 2) * dilation if pad is None else pad
    w = rng.standard_normal((cout, cin // groups, kernel, kernel)).astype(np.float32)
    b = rng.standard_normal(cout).astype(np.float32)
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], kernel_shape=[kernel, kernel],
                              strides=[stride, stride], dilations=[dilation, dilation],
                              pads=[pad] * 4, group=groups),
             helper.make_node("Relu", ["c"], ["y0"])]
    out = "y0"
    if residual:
        nodes.append(helper.make_node("Add", ["y0", "x"], ["y1"]))
        out = "y1"
    if pool:
        nodes.append(helper.make_node(pool, [out], ["y2"], kernel_shape=[pool_kernel] * 2,
                                      strides=[2, 2], pads=[pool_pad] * 4))
        out = "y2"
    nodes.append(helper.make_node("Identity", [out], ["y"]))
    graph = helper.make_graph(nodes, "conv",
                              [helper.make_tensor_value_info("x", 1, [1, cin, size, size + 1])],
                              [helper.make_tensor_value_info("y", 1, None)],
                              [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    return onnx.shape_inference.infer_shapes(model)


CASES = {
    "3x3": dict(cin=16, cout=32, size=14, kernel=3),
    "3x3-stride2-odd": dict(cin=8, cout=24, size=15, kernel=3, stride=2),
    "1x1": dict(cin=32, cout=64, size=9, kernel=1),
    "5x5-dilated": dict(cin=8, cout=16, size=13, kernel=5, dilation=2),
    "depthwise": dict(cin=32, cout=32, size=12, kernel=3, groups=32),
    "depthwise-stride2-odd": dict(cin=24, cout=24, size=15, kernel=3, stride=2, groups=24),
    "depthwise-5x5": dict(cin=40, cout=40, size=9, kernel=5, groups=40),
    "depthwise-72-channels": dict(cin=72, cout=72, size=11, kernel=5, stride=2, groups=72),
    "depthwise-multiplier-2": dict(cin=8, cout=16, size=10, kernel=3, groups=8),
    "grouped": dict(cin=16, cout=16, size=10, kernel=3, groups=4),
    "grouped-8-stride2": dict(cin=48, cout=48, size=17, kernel=3, stride=2, groups=6),
    "grouped-8-in-16-out": dict(cin=32, cout=64, size=9, kernel=3, groups=4),
    "residual+maxpool": dict(cin=16, cout=16, size=12, kernel=3, residual=True, pool="MaxPool"),
    "maxpool-3x3-padded": dict(cin=16, cout=16, size=12, kernel=3, pool="MaxPool",
                               pool_kernel=3, pool_pad=1),
    "avgpool-no-pad": dict(cin=3, cout=20, size=11, kernel=3, pad=0, pool="AveragePool"),
    "7x7-stride2": dict(cin=3, cout=16, size=32, kernel=7, stride=2),
    "3x3-37-channels": dict(cin=8, cout=37, size=10, kernel=3),  # padded to whole vectors
    "1x1-1000-channels": dict(cin=16, cout=1000, size=5, kernel=1),  # half vectors -> whole
    # weights streamed, each channel tile's input channels in blocks (FCN-ResNet50's head)
    "3x3-dilated-blocked": dict(cin=512, cout=128, size=24, kernel=3, dilation=2),
    # streamed on a 7x8 map: input channels in blocks of SMALL_MAP_CHANNEL_BLOCK
    "3x3-small-map-blocked": dict(cin=64, cout=128, size=7, kernel=3),
}


@pytest.mark.parametrize("name", CASES)
def test_scheduled_equals_default_build(name):
    scheduled, default = _both_builds(import_model(conv_model(**CASES[name])), seed=1)
    for key, value in scheduled.items():
        comparison = compare_output(key, value, default[key], rtol=1e-5)
        assert comparison.passed, (name, comparison)


def _both_builds(imported, seed: int, cpu: str | None = None):
    """(outputs of the host build scheduled for ``cpu``, of TVM's default build for this
    machine's CPU) on seeded inputs; ``cpu`` None schedules for this machine's CPU too."""
    outputs = {}
    for schedules in (True, False):
        target = host_target(cpu if schedules else None)
        executable = tvm.compile(imported.mod, target=target,
                                 relax_pipeline=host_pipeline(target, schedules))
        runner = HostRunner(executable, imported.inputs, imported.outputs)
        outputs[schedules] = runner.run(random_inputs(imported.inputs, seed=seed))
    return outputs[True], outputs[False]


#: The CPU the loop-structure tests lower for (lowering only: the values are checked on the
#: machine's own CPU), so that their tile counts do not depend on the machine running them
AVX512_CPU = "skylake-avx512"


def _scheduled_kernel_script(imported, kernel: str = "conv2d", cpu: str = AVX512_CPU) -> str:
    """The TVMScript of the first PrimFunc named after ``kernel`` (a convolution unless told)
    that the host pipeline lowers ``imported`` to for ``cpu`` (schedules applied)."""
    target = host_target(cpu)
    with target:
        lowered = host_pipeline(target, True)(imported.mod)
    return next(f.script() for gv, f in lowered.functions.items()
                if isinstance(f, tvm.tirx.PrimFunc) and kernel in gv.name_hint)


def _loop_lines(script: str) -> list[str]:
    """The ``for`` lines of a TVMScript, stripped, outermost first."""
    return [line.strip() for line in script.splitlines() if line.strip().startswith("for ")]


def _scheduled_functions(mod) -> dict[str, bool]:
    target = host_target()
    with target:
        lowered = tvm.transform.Sequential([
            relax.transform.DecomposeOpsForInference(),
            relax.transform.LegalizeOps(), relax.transform.AnnotateTIROpPattern(),
            relax.transform.FoldConstant(), relax.transform.FuseOps(),
            relax.transform.FuseTIR()])(mod)
    rule = HostReductionRule()
    return {gv.name_hint: rule.apply(func, target, False) is not None
            for gv, func in lowered.functions.items() if isinstance(func, tvm.tirx.PrimFunc)}


def test_rule_schedules_conv_dense_and_pool():
    from edgebyoc.testing.models import small_convnet

    scheduled = _scheduled_functions(import_model(small_convnet()).mod)
    conv = [name for name in scheduled if "conv2d" in name]
    assert conv and all(scheduled[name] for name in conv)
    assert scheduled["max_pool2d"]
    assert any(ok for name, ok in scheduled.items() if "matmul" in name)


def test_simd_lanes():
    """The vector width comes from LLVM's features of the CPU, not from a list of names:
    Rocket Lake and Zen 4 have AVX-512, Zen 3 and Alder Lake AVX2."""
    lanes = {cpu: simd_lanes(tvm.target.Target({"kind": "llvm", "mcpu": cpu}))
             for cpu in ("skylake-avx512", "rocketlake", "znver4", "sapphirerapids", "haswell",
                         "znver3", "alderlake", "generic")}
    assert lanes == {"skylake-avx512": 16, "rocketlake": 16, "znver4": 16, "sapphirerapids": 16,
                     "haswell": 8, "znver3": 8, "alderlake": 8, "generic": 4}
    assert simd_lanes(tvm.target.Target({"kind": "llvm", "mcpu": "haswell",
                                         "mattr": ["+avx512f"]})) == 16


def test_channel_tiles_have_no_vector_tails():
    for lanes in (4, 8, 16):
        for channels in (3, 16, 24, 40, 96, 112, 144, 240, 672, 1000, 1152):
            vector, tile = channel_tile(channels, lanes)
            assert channels % tile == 0 and tile % vector == 0 and tile <= max(2 * lanes,
                                                                                vector)
            # the widest power of two up to the lanes that divides the channels
            assert vector & (vector - 1) == 0 and channels % vector == 0 and vector <= lanes
            assert vector == lanes or channels % (2 * vector) != 0
    assert channel_tile(144, 16) == (16, 16)  # not 24 channels = 1.5 vectors


def test_per_channel_windows_tile_a_power_of_two_of_vectors():
    """A depthwise convolution's or a pooling's tile is 1, 2 or 4 vectors, never 3 (24, 72
    and 120 channels in vectors of 8 ran 3-5x slower as tiles of 3 vectors)."""
    for lanes in (4, 8, 16):
        for channels in range(1, 1200):
            vector, tile = channel_tile(channels, lanes, per_channel=True)
            assert (vector, tile) in {channel_tile(channels, lanes), (vector, vector)}
            vectors = tile // vector
            assert channels % tile == 0 and vectors & (vectors - 1) == 0, (channels, lanes)
    assert channel_tile(72, 16) == (8, 24) and channel_tile(72, 16, per_channel=True) == (8, 8)
    assert channel_tile(96, 16, per_channel=True) == (16, 32)


def test_register_blocks_fit_the_targets_vector_registers():
    """A register block holds ``max_row_block`` positions: 8 x 2 vectors of accumulators in
    AVX-512's 32 registers, at most 6 x 2 in AVX2's 16 (blocks of 8 spilled: ResNet-18 1.69x
    -> 0.94x onnxruntime on a Zen 2 EPYC). A 1x1 convolution of 64 channels on rows of 56
    (``conv_model``'s 55x56 map) gets blocks of 8 for skylake-avx512 and of 4 (the largest
    divisor up to 6) for znver2; the znver2 build equals TVM's default build where this CPU
    runs AVX2."""
    assert vector_registers(host_target("skylake-avx512")) == 32
    assert vector_registers(host_target("znver2")) == 16
    assert vector_registers(host_target("generic")) == 16
    assert [max_row_block(16, v) for v in (1, 2, 3, 4)] == [8, 6, 4, 2]
    assert [max_row_block(32, v) for v in (1, 2, 3, 4)] == [8, 8, 8, 6]
    assert [row_block(r, 6) for r in (56, 28, 14, 7, 197, 6)] == [4, 4, 5, 4, 6, 6]
    imported = import_model(conv_model(cin=64, cout=64, size=55, kernel=1, pad=0))
    unrolled = {cpu: [int(n) for n in re.findall(
        r"in T\.unroll\(T\.int64\((\d+)\)\)", _scheduled_kernel_script(imported, cpu=cpu))]
        for cpu in ("skylake-avx512", "znver2")}
    assert max(unrolled["skylake-avx512"]) == 8, unrolled
    assert 4 in unrolled["znver2"] and max(unrolled["znver2"]) <= 6, unrolled
    if not tvm.target.codegen.target_has_features("avx2", host_target()):
        pytest.skip("this CPU does not run AVX2 code: the loop structure alone is checked")
    got, default = _both_builds(imported, seed=9, cpu="znver2")
    for key, value in got.items():
        assert compare_output(key, value, default[key], rtol=1e-5).passed


def test_a_short_row_no_two_vector_block_divides_tiles_four_vectors_on_avx2():
    """A row of 7 on AVX2 (16 registers; ``conv_model``'s 6x7 map): 2-vector tiles would take
    blocks of 4 rows, the second guarded (its accumulators were kept on the stack); where the
    channels are whole 4-vector tiles the kernel accumulates 4 vectors in blocks of 2 rows
    instead, and its packed weights are in 32-channel blocks to match. AVX-512 keeps blocks
    of 7 x 2 vectors; channels that are no whole 4-vector tile (40) keep 2 vectors. The znver2
    build equals TVM's default build where this CPU runs AVX2."""
    assert tile_vectors(3, 8, 7, 64, registers=16) == SHORT_ROW_VECTORS == 4
    assert tile_vectors(3, 8, 7, 64, registers=32) == VECTORS_PER_TILE
    assert tile_vectors(3, 8, 7, 40, registers=16) == VECTORS_PER_TILE  # 5 vectors
    assert tile_vectors(3, 8, 8, 64, registers=16) == VECTORS_PER_TILE  # blocks of 4 divide
    assert tile_vectors(3, 8, 14, 64, registers=16) == VECTORS_PER_TILE  # not a short row
    imported = import_model(conv_model(cin=96, cout=64, size=6, kernel=1, pad=0))

    def tiles(cpu):
        script = _scheduled_kernel_script(imported, cpu=cpu)
        packed = re.search(r"T\.Buffer\(\(T\.int64\((\d+)\), T\.int64\(1\), T\.int64\(1\), "
                           r"T\.int64\(96\), T\.int64\((\d+)\)\)", script)
        unrolled = [int(n) for n in re.findall(r"in T\.unroll\(T\.int64\((\d+)\)\)", script)]
        return (packed.groups() if packed else None), unrolled

    (blocks, width), unrolled = tiles("znver2")
    assert (int(blocks), int(width)) == (2, 32), (blocks, width)
    assert max(unrolled) == 4 and 2 in unrolled, unrolled  # 4 vectors, blocks of 2 rows
    (blocks, width), unrolled = tiles(AVX512_CPU)
    assert (int(blocks), int(width)) == (2, 32) and 7 in unrolled, (blocks, width, unrolled)
    if not tvm.target.codegen.target_has_features("avx2", host_target()):
        pytest.skip("this CPU does not run AVX2 code: the loop structure alone is checked")
    got, default = _both_builds(imported, seed=11, cpu="znver2")
    for key, value in got.items():
        assert compare_output(key, value, default[key], rtol=1e-5).passed


def test_rows_and_channels_no_block_divides_keep_full_register_blocks():
    """A prime row keeps a register block with a guarded last one; a channel extent whose
    widest power-of-two divisor is under half a vector is padded to whole vectors."""
    assert [row_block(r) for r in (56, 28, 14, 7, 197, 22, 3, 1)] == [8, 7, 7, 7, 6, 8, 3, 1]
    for row in range(9, 300):
        block = row_block(row)
        assert 4 <= block <= 8
        assert row % block == 0 or all(row % d for d in range(4, 9))
    assert padded_channels(197, 16) == 208 and padded_channels(197, 8) == 200
    assert padded_channels(1000, 16) == 1008 and padded_channels(12, 16) is None
    assert padded_channels(100, 16) == 112 and padded_channels(100, 8) == 104
    # half vectors stay where whole ones would add more than a sixteenth of the work
    assert padded_channels(120, 16) is None and padded_channels(24, 16) is None


def _attention_model(tokens=37, heads=2, head=16, width=40):
    """Scores of ``heads`` heads over ``tokens`` (prime) tokens scaled, then a linear layer
    over the tokens: matmuls whose rows and columns no register block divides."""
    rng = np.random.default_rng(4)
    w = rng.standard_normal((tokens, width)).astype(np.float32)
    nodes = [helper.make_node("MatMul", ["q", "k"], ["s"]),
             helper.make_node("Div", ["s", "d"], ["t"]),
             helper.make_node("MatMul", ["t", "w"], ["y"])]
    graph = helper.make_graph(
        nodes, "attention",
        [helper.make_tensor_value_info("q", 1, [1, heads, tokens, head]),
         helper.make_tensor_value_info("k", 1, [1, heads, head, tokens])],
        [helper.make_tensor_value_info("y", 1, [1, heads, tokens, width])],
        [numpy_helper.from_array(np.array(4.0, np.float32), "d"),
         numpy_helper.from_array(w, "w")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("tokens", [37, 197])
def test_odd_token_matmuls_are_blocked_padded_and_exact(tokens):
    """Attention-shaped matmuls over a prime number of tokens get register blocks with a
    guarded last one and, where the token axis is the vector axis, a padded computation
    (TVM's pad_einsum: full vectors, the padding copied in and out; 197 keys: whole register
    tiles of two vectors, 224 on AVX-512, not 13 vectors in tiles of one); the results equal
    TVM's default build."""
    imported = import_model(_attention_model(tokens=tokens, heads=1 if tokens > 100 else 2))
    scheduled = _scheduled_functions(imported.mod)
    matmuls = [name for name in scheduled if "matmul" in name]
    assert len(matmuls) == 2 and all(scheduled[name] for name in matmuls), scheduled
    target = host_target()
    with target:
        lowered = tvm.transform.Sequential([
            relax.transform.LegalizeOps(), relax.transform.AnnotateTIROpPattern(),
            relax.transform.FuseOps(), relax.transform.FuseTIR()])(imported.mod)
    scores = next(f for gv, f in lowered.functions.items() if "divide" in gv.name_hint)
    text = HostReductionRule().apply(scores, target, False).mod.script()
    lanes = simd_lanes(target)
    multiple = einsum_channel_padding(tokens, lanes)
    assert multiple == (lanes if tokens == 37 else 2 * lanes)
    assert f"T.int64({-(-tokens // multiple) * multiple})" in text and "_pad" in text
    assert f"T.vectorized(T.int64({min(lanes, 16)}))" in text or "T.vectorized" in text
    bound = max_row_block(vector_registers(target), VECTORS_PER_TILE)
    assert f"T.unroll(T.int64({row_block(tokens, bound)}))" in text
    if multiple > lanes:  # the register tile: two vectors of keys
        assert "T.unroll(T.int64(2))" in text
    got, default = _both_builds(imported, seed=3)
    for key, value in got.items():
        assert compare_output(key, value, default[key], rtol=1e-5).passed


def test_odd_conv_channels_compute_padded_weights_and_slice():
    """37 output channels (prime): the host build's convolution computes zero-padded weights'
    whole vectors of channels and slices the result (SparDR's 179-channel layers: 4.1 ->
    0.5 ms); the slice fuses into the kernel, the results are the default build's (the
    parametrized case above)."""
    imported = import_model(conv_model(8, 37, 10, 3))
    target = host_target()
    lowered = host_pipeline(target, True)(imported.mod)
    padded = padded_channels(37, simd_lanes(target))
    kernels = [f for gv, f in lowered.functions.items()
               if isinstance(f, tvm.tirx.PrimFunc) and "conv2d" in gv.name_hint]
    assert len(kernels) == 1 and "strided_slice" in [gv.name_hint for gv in lowered.functions
                                                     if "conv2d" in gv.name_hint][0]
    assert f"T.int64({padded})" in kernels[0].script()


def _through_rewrite(rewrite, operator, values: np.ndarray):
    """(the module ``rewrite`` made of one float32 ``operator`` call, its result on ``values``
    as float64)."""
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType(list(values.shape), "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            y = bb.emit_output(operator(x))
        bb.emit_func_output(y)
    mod = rewrite(bb.get())
    vm = relax.VirtualMachine(tvm.compile(mod, target="llvm"), tvm.cpu())
    return mod, vm["main"](tvm.runtime.tensor(values)).numpy().astype(np.float64)


def test_fast_erf_is_within_4e_7_of_the_exact_one():
    import math

    v = np.concatenate([np.linspace(-8, 8, 1 << 15),
                        np.random.default_rng(0).normal(0, 2, 1 << 15)]).astype(np.float32)
    mod, got = _through_rewrite(fast_erf, relax.op.erf, v)
    assert "erf" in {gv.name_hint for gv in mod.functions}  # a TIR function now
    exact = np.array([math.erf(float(t)) for t in v])
    assert np.abs(got - exact).max() < 4e-7


@pytest.mark.parametrize("build, shape", [
    ("vit", (1, 3, 32, 32)), ("transformer_encoder", (1, 13, 32))])
def test_transformers_verify_against_onnxruntime(build, shape):
    """The benchmarks' ViT and BERT-shaped encoder builders (small configurations here): 17
    and 13 tokens, layer norm, attention, Erf GELU, all scheduled, against onnxruntime."""
    import edgebyoc
    from edgebyoc.plugins import PluginRegistry
    from edgebyoc.testing import models

    kwargs = dict(image_size=32, patch=8, dim=32, depth=2, heads=2, mlp=64) if build == "vit" \
        else dict(tokens=13, dim=32, heads=2, mlp=64, layers=2)
    compiled = edgebyoc.compile(getattr(models, build)(**kwargs),
                                registry=PluginRegistry(search_path=[]))
    x = np.random.default_rng(1).standard_normal(shape).astype(np.float32)
    result, _ = edgebyoc.verify(compiled, inputs={"input": x})
    assert result.passed and result.max_rel < 1e-5, result


def _relu6_mobile_block():
    """Pointwise expansion, ReLU6 (Clip, imported as TIR maximum / minimum), depthwise, SiLU."""
    rng = np.random.default_rng(0)
    w1 = rng.standard_normal((48, 8, 1, 1)).astype(np.float32)
    w2 = rng.standard_normal((48, 1, 3, 3)).astype(np.float32)
    nodes = [helper.make_node("Conv", ["x", "w1"], ["a"]),
             helper.make_node("Clip", ["a", "lo", "hi"], ["b"]),
             helper.make_node("Conv", ["b", "w2"], ["c"], group=48, pads=[1, 1, 1, 1]),
             helper.make_node("Sigmoid", ["c"], ["s"]), helper.make_node("Mul", ["c", "s"], ["y"])]
    graph = helper.make_graph(
        nodes, "block", [helper.make_tensor_value_info("x", 1, [1, 8, 12, 12])],
        [helper.make_tensor_value_info("y", 1, [1, 48, 12, 12])],
        [numpy_helper.from_array(w1, "w1"), numpy_helper.from_array(w2, "w2"),
         numpy_helper.from_array(np.array(0, np.float32), "lo"),
         numpy_helper.from_array(np.array(6, np.float32), "hi")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_clamps_and_sigmoids_fuse_into_the_convolutions():
    """ReLU6 and SiLU run in the convolutions' epilogues: no kernel of their own, no
    transposes around them; the outputs match TVM's default build."""
    imported = import_model(_relu6_mobile_block())
    target = host_target()
    lowered = host_pipeline(target, True)(imported.mod)
    kernels = sorted(gv.name_hint for gv, f in lowered.functions.items()
                     if isinstance(f, tvm.tirx.PrimFunc))
    assert not [k for k in kernels if "transpose" in k and ("maximum" in k or "sigmoid" in k)]
    fused = [k for k in kernels if k.startswith("fused_conv2d")]
    assert any("maximum" in k and "minimum" in k for k in fused), kernels
    assert any("sigmoid" in k and "multiply" in k for k in fused), kernels
    scheduled, default = _both_builds(imported, seed=2)
    for key, value in scheduled.items():
        assert compare_output(key, value, default[key], rtol=1e-5).passed


def test_fast_sigmoid_is_within_1e_7_of_the_exact_one():
    v = np.concatenate([np.linspace(-100, 100, 1 << 15),
                        np.random.default_rng(0).normal(0, 5, 1 << 15)]).astype(np.float32)
    mod, got = _through_rewrite(fast_sigmoid, relax.op.sigmoid, v)
    assert "sigmoid" in {gv.name_hint for gv in mod.functions}  # a TIR function now
    exact = 1 / (1 + np.exp(-v.astype(np.float64)))
    assert np.abs(got - exact).max() < 1e-7
    normal = exact > 1e-30  # below, float32 flushes: fast_exp's input is clamped at -88
    assert (np.abs(got - exact) / exact)[normal].max() < 4e-6


def test_a_reduction_over_columns_is_not_recomputed_for_every_row():
    """A column maximum subtracted from every row, fused into one function: its extents look
    row-wise (64 rows, a reduction over 64), but each row needs all 64 column maxima, so the
    row rule's schedule (rows in parallel, every block inside them) would recompute them for
    every row. It declines; the function keeps TVM's loops and its results."""
    from edgebyoc.row_schedules import HostRowReductionRule

    x = tvm.te.placeholder((64, 64), name="x")
    k = tvm.te.reduce_axis((0, 64), name="k")
    column_max = tvm.te.compute((64,), lambda j: tvm.te.max(x[k, j], axis=k), name="column_max")
    y = tvm.te.compute((64, 64), lambda i, j: x[i, j] - column_max[j], name="centred")
    func = tvm.te.create_prim_func([x, y])
    target = host_target()
    assert HostRowReductionRule().apply(func, target, False) is None
    v = np.random.default_rng(3).standard_normal((64, 64)).astype(np.float32)
    out = tvm.runtime.empty((64, 64), "float32", tvm.cpu())
    tvm.compile(tvm.IRModule({"main": func}), target=target)["main"](tvm.runtime.tensor(v), out)
    np.testing.assert_array_equal(out.numpy(), v - v.max(0))


def test_padding_is_read_in_place_only_past_the_memory_limit():
    """With a byte limit (a depth-first plan's), a conv keeps its padded copy while input,
    output and copy fit in it, and reads the padding through bounds checks otherwise."""
    imported = import_model(conv_model(8, 8, 16, 3))
    mod = relax.transform.LegalizeOps()(relax.transform.FoldConstant()(imported.mod))
    (conv,) = [f for gv, f in mod.functions.items() if gv.name_hint.startswith("conv2d")]
    # input 8x16x17, output 8x16x17, padded copy 8x18x19 (float32)
    needed = (2 * 8 * 16 * 17 + 8 * 18 * 19) * 4
    target = host_target()

    def copies_padding(inline_padding) -> bool:
        sch = HostReductionRule(inline_padding).schedule(conv, target)
        return "pad_temp" in sch.mod["main"].script()

    assert copies_padding(False) and copies_padding(needed)
    assert not copies_padding(needed - 1) and not copies_padding(True)


def test_an_empty_channel_axis_keeps_the_default_loops():
    """ONNX node test ``test_reduce_sum_empty_set_non_reduced_axis_zero`` (a 0-wide axis): the
    rule declines it instead of failing the build."""
    from edgebyoc.testing import node_suite

    (case,) = [c for c in node_suite.load_cases()
               if "test_reduce_sum_empty_set_non_reduced_axis_zero" in str(getattr(c, "name", c))]
    assert node_suite.run_case(case)["status"] == "passed"


def _conv_calls(mod):
    calls = []

    def visit(expr):
        if isinstance(expr, relax.Call) and isinstance(expr.op, tvm.ir.Op) and \
                expr.op.name == "relax.nn.conv2d":
            calls.append(expr)

    for func in mod.functions.values():
        if isinstance(func, relax.Function):
            relax.analysis.post_order_visit(func.body, visit)
    return calls


@pytest.mark.parametrize("dilation,size,kernel,pad,expected_kernel,expected_padding", [
    (36, 16, 3, None, (1, 1), [0, 0, 0, 0]),   # DeepLabV3's ASPP: the centre tap alone
    (4, 5, 5, 8, (3, 3), [4, 4, 4, 4]),        # the outer taps read padding only
    (12, 16, 3, None, (3, 3), [12, 12, 12, 12]),  # every tap reads the map somewhere
])
def test_dilated_taps_that_read_only_padding_are_cut(dilation, size, kernel, pad,
                                                     expected_kernel, expected_padding):
    import edgebyoc
    from edgebyoc.rewrites import dead_conv_taps, live_taps

    model = conv_model(8, 16, size, kernel, dilation=dilation, pad=pad)
    mod = dead_conv_taps(relax.transform.FoldConstant()(import_model(model).mod))
    (conv,) = _conv_calls(mod)
    assert tuple(int(d) for d in conv.args[1].ty.shape.values[2:]) == expected_kernel
    assert [int(p) for p in conv.attrs.padding] == expected_padding
    result, _ = edgebyoc.verify(edgebyoc.compile(model), seed=3)
    assert result.passed and max(o.rel for o in result.outputs) < 1e-5
    assert live_taps(16, 36, 1, 36, 3, 16) == (1, 1)
    assert live_taps(7, 3, 2, 1, 7, 4) == (0, 6)  # a plain 7x7 stride-2 kernel keeps all


def test_dead_taps_stay_when_a_weight_there_is_not_finite():
    """inf x a padding zero is NaN in the original convolution: the cut would change it."""
    from edgebyoc.rewrites import dead_conv_taps

    model = conv_model(4, 4, 8, 3, dilation=20)
    weight = numpy_helper.to_array(model.graph.initializer[0]).copy()
    weight[0, 0, 0, 0] = np.inf
    model.graph.initializer[0].CopyFrom(numpy_helper.from_array(weight, "w"))
    mod = dead_conv_taps(relax.transform.FoldConstant()(import_model(model).mod))
    (conv,) = _conv_calls(mod)
    assert tuple(int(d) for d in conv.args[1].ty.shape.values[2:]) == (3, 3)


def test_convolutions_whose_taps_mostly_read_padding_run_one_1x1_per_tap():
    """Dilation 12 over a 16 x 17 map (DeepLabV3's ASPP): the taps read real input for about
    a quarter of their (tap, output) pairs, so the host build computes one 1x1 convolution
    per tap over the window it reads, summed (``rewrites.border_tap_convolutions``); values
    equal TVM's build of the original convolution. Dilation 2 reads mostly input: kept, as are
    a kernel with an infinite weight (inf x a padding zero is NaN there) and one no tap of
    which reads the map."""
    from edgebyoc.rewrites import border_tap_convolutions, tap_windows

    def kernels(model):
        mod = border_tap_convolutions(relax.transform.FoldConstant()(import_model(model).mod))
        return sorted(tuple(int(d) for d in conv.args[1].ty.shape.values[2:])
                      for conv in _conv_calls(mod))

    model = conv_model(8, 16, 16, 3, dilation=12)
    assert kernels(model) == [(1, 1)] * 9
    scheduled, default = _both_builds(import_model(model), seed=4)
    for key, value in scheduled.items():
        assert compare_output(key, value, default[key], rtol=1e-5).passed
    assert kernels(conv_model(8, 16, 16, 3, dilation=2)) == [(3, 3)]
    weight = numpy_helper.to_array(model.graph.initializer[0]).copy()
    weight[1, 2, 2, 0] = np.inf
    model.graph.initializer[0].CopyFrom(numpy_helper.from_array(weight, "w"))
    assert kernels(model) == [(3, 3)]
    assert tap_windows(17, 12, 12, 3, 17) == [(12, 17), (0, 17), (0, 5)]
    assert tap_windows(16, 36, 36, 3, 16) == [None, (0, 16), None]
    # no tap reads the 1-row map (rows -1 and 1): the convolution is left as it is
    assert tap_windows(1, 1, 2, 2, 1) == [None, None]
    assert kernels(conv_model(4, 4, 1, 2, dilation=2, pad=1)) == [(2, 2)]

def _row_model(op: str, width: int, axis: int = -1) -> onnx.ModelProto:
    """One row-wise normalisation over ``(2, 3, 5, width)`` scores: ``Softmax`` (masked
    entries included), ``LayerNormalization`` or ``ReduceMean``-built RMS norm."""
    rng = np.random.default_rng(0)
    shape = [2, 3, 5, width]
    inits = []
    if op == "Softmax":
        nodes = [helper.make_node("Softmax", ["x"], ["y"], axis=axis)]
    elif op == "LayerNormalization":
        inits = [numpy_helper.from_array(rng.standard_normal(width).astype(np.float32), n)
                 for n in ("g", "b")]
        nodes = [helper.make_node("LayerNormalization", ["x", "g", "b"], ["y"], axis=-1,
                                  epsilon=1e-5)]
    else:  # x / sqrt(mean(x * x) + eps)
        inits = [numpy_helper.from_array(np.array(1e-6, np.float32), "eps")]
        nodes = [helper.make_node("Mul", ["x", "x"], ["sq"]),
                 helper.make_node("ReduceMean", ["sq"], ["ms"], axes=[-1], keepdims=1),
                 helper.make_node("Add", ["ms", "eps"], ["mse"]),
                 helper.make_node("Sqrt", ["mse"], ["rms"]),
                 helper.make_node("Div", ["x", "rms"], ["y"])]
    graph = helper.make_graph(nodes, "rows", [helper.make_tensor_value_info("x", 1, shape)],
                              [helper.make_tensor_value_info("y", 1, shape)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("op, width", [("Softmax", 1500), ("Softmax", 37),
                                       ("LayerNormalization", 384), ("rms", 96)])
def test_row_normalisations_run_row_by_row_in_vectors_and_equal_the_default_build(op, width):
    """Softmax, layer norm and an RMS norm: the rows are the parallel loop, every block runs
    inside it, reductions keep vector lanes of partial results (rfactor) where a lane count
    of 4-16 divides the row (37: scalar reductions, still one row at a time); results equal
    TVM's default build within float32 rounding of the reordered sums."""
    from edgebyoc.row_schedules import HostRowReductionRule, row_lanes

    imported = import_model(_row_model(op, width))
    target = host_target()
    with target:
        lowered = tvm.transform.Sequential([
            relax.transform.DecomposeOpsForInference(), relax.transform.LegalizeOps(),
            relax.transform.AnnotateTIROpPattern(), relax.transform.FuseOps(),
            relax.transform.FuseTIR()])(imported.mod)
    funcs = [f for f in lowered.functions.values() if isinstance(f, tvm.tirx.PrimFunc)]
    scheduled = [HostRowReductionRule().apply(f, target, False) for f in funcs]
    assert any(s is not None for s in scheduled), [f.script() for f in funcs]
    text = next(s for s in scheduled if s is not None).mod.script()
    assert re.search(r"T\.parallel\((T\.int64\()?30\)", text)  # 2 x 3 x 5 rows
    if row_lanes(width):
        assert "_rf" in text
        assert re.search(rf"T\.vectorized\((T\.int64\()?{row_lanes(width)}\)", text)
    got, default = _both_builds(imported, seed=2)
    for key, value in got.items():
        assert compare_output(key, value, default[key], rtol=1e-5).passed


def test_a_softmax_over_a_leading_axis_keeps_its_default_loops():
    """Reductions over any axis but the last are outside the row rule: it declines, and the
    build still equals the default one."""
    from edgebyoc.row_schedules import HostRowReductionRule

    imported = import_model(_row_model("Softmax", 16, axis=1))
    target = host_target()
    with target:
        lowered = tvm.transform.Sequential([
            relax.transform.LegalizeOps(), relax.transform.AnnotateTIROpPattern(),
            relax.transform.FuseOps(), relax.transform.FuseTIR()])(imported.mod)
    assert all(HostRowReductionRule().apply(f, target, False) is None
               for f in lowered.functions.values() if isinstance(f, tvm.tirx.PrimFunc))
    got, default = _both_builds(imported, seed=2)
    for key, value in got.items():
        assert compare_output(key, value, default[key], rtol=1e-5).passed


def test_fast_tanh_is_within_4e_7_of_the_exact_one():
    from edgebyoc.rewrites import fast_tanh

    v = np.concatenate([np.linspace(-12, 12, 1 << 16),
                        np.random.default_rng(0).normal(0, 2, 1 << 16)]).astype(np.float32)
    mod, got = _through_rewrite(fast_tanh, relax.op.tanh, v)
    assert "tanh" in {gv.name_hint for gv in mod.functions}  # a TIR function now
    assert np.abs(got - np.tanh(v.astype(np.float64))).max() < 4e-7


def test_tanh_gelu_has_no_scalar_libm_calls_and_verifies():
    """GPT-2's GELU, ``0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x ** 3)))``: the cube as
    products and tanh through ``fast_tanh`` (TVM's own tanh calls ``exp``, its power ``pow``:
    libm per element), the result within 1e-5 of onnxruntime's; a power by 2.5 stays."""
    from edgebyoc.rewrites import small_integer_powers

    def gelu(extra_power: bool) -> onnx.ModelProto:
        c = [numpy_helper.from_array(np.array(v, np.float32), n) for n, v in (
            ("three", 3.0), ("k", 0.044715), ("s", 0.7978845608), ("one", 1.0),
            ("half", 0.5), ("e", 2.5))]
        nodes = [helper.make_node("Pow", ["x", "three"], ["x3"]),
                 helper.make_node("Mul", ["x3", "k"], ["kx3"]),
                 helper.make_node("Add", ["x", "kx3"], ["inner"]),
                 helper.make_node("Mul", ["inner", "s"], ["scaled"]),
                 helper.make_node("Tanh", ["scaled"], ["t"]),
                 helper.make_node("Add", ["t", "one"], ["t1"]),
                 helper.make_node("Mul", ["x", "t1"], ["xt"]),
                 helper.make_node("Mul", ["xt", "half"], ["g" if extra_power else "y"])]
        if extra_power:
            nodes.append(helper.make_node("Pow", ["g", "e"], ["y"]))
        graph = helper.make_graph(nodes, "gelu",
                                  [helper.make_tensor_value_info("x", 1, [4, 96])],
                                  [helper.make_tensor_value_info("y", 1, [4, 96])], c)
        return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])

    rewritten = small_integer_powers(import_model(gelu(True)).mod).script()
    assert rewritten.count("R.power") == 1 and "R.multiply(x, x)" in rewritten
    import edgebyoc

    compiled = edgebyoc.compile(gelu(False), target="host")
    llvm = [m for m in compiled.executable.mod.imports if m.kind == "llvm"][0].inspect_source("ll")
    libm = {name.split(".")[1] if name.startswith("llvm.") else name
            for name in re.findall(r"call [^@]*@([\w.]+)\(", llvm)}
    assert not libm & {"exp", "expf", "tanh", "tanhf", "pow", "powf"}, libm
    result, _ = edgebyoc.verify(compiled, seed=0)
    assert result.passed and max(o.max_abs for o in result.outputs) < 1e-5


def test_large_element_wise_kernels_run_in_parallel_but_float_index_kernels_keep_their_loops():
    """A concatenation and a concatenation + batch norm + ReLU (DenseNet's) of at least
    ``PARALLEL_ELEMENTS`` elements get a parallel loop; a nearest resize (float coordinates
    rounded to indices) keeps LLVM's loops, so its rounding cannot move; a small concatenation
    stays serial; the results equal TVM's default build."""
    from tvm import te, topi

    from edgebyoc.schedules import PARALLEL_ELEMENTS, HostInjectiveRule

    target = host_target()
    a = te.placeholder((1, 55, 55, 64), name="a")
    b = te.placeholder((1, 55, 55, 64), name="b")

    def scheduled(inputs, output) -> str | None:
        sch = HostInjectiveRule().apply(te.create_prim_func([*inputs, output]), target, False)
        return None if sch is None else sch.mod.script()

    both = topi.concatenate([a, b], 3)
    assert 55 * 55 * 128 >= PARALLEL_ELEMENTS
    assert "T.parallel" in scheduled([a, b], both)
    normalised = topi.nn.relu(topi.add(topi.multiply(topi.subtract(both, 0.5), 1.5), 0.1))
    assert "T.parallel" in scheduled([a, b], normalised)
    corner = [topi.strided_slice(t, [0, 0, 0, 0], [1, 4, 4, 64]) for t in (a, b)]
    small = scheduled([a, b], topi.concatenate(corner, 3))
    assert small is None or "T.parallel" not in small
    resized = scheduled([a], topi.image.resize2d(a, [0.0] * 4, (110, 110), layout="NHWC",
                                                 method="nearest_neighbor"))
    assert resized is None or "T.parallel" not in resized
    imported = import_model(conv_model(16, 16, 48, 3))  # NCHW input: a parallel transpose
    got, default = _both_builds(imported, seed=4)
    for key, value in got.items():
        assert compare_output(key, value, default[key], rtol=1e-5).passed


@pytest.mark.parametrize("method", ["linear", "nearest_neighbor"])
def test_a_resize_to_channels_first_runs_its_channels_in_parallel(method):
    """A resize to an NCHW output (DeepLabV3's last layer, 21 x 256 x 256) rounds its row and
    column coordinates, not its channels: the channel loop, as it is, runs in parallel, and
    the outputs equal the unscheduled kernel's bit for bit (linear and nearest); the rows and
    columns keep their loops."""
    from tvm import te, topi

    from edgebyoc.schedules import HostInjectiveRule

    target = host_target()
    image = te.placeholder((1, 8, 20, 20), name="image")
    resized = topi.image.resize2d(image, [0.0] * 4, (150, 170), method=method,
                                  coordinate_transformation_mode="half_pixel")
    func = te.create_prim_func([image, resized])
    scheduled = HostInjectiveRule().apply(func, target, False)
    assert scheduled is not None
    text = scheduled.mod.script()
    assert re.findall(r"for \w+ in T\.parallel\((\d+)\)", text) == ["8"], text
    assert "for i2, i3 in T.grid(150, 170)" in text, text
    data = np.random.default_rng(5).standard_normal((1, 8, 20, 20)).astype(np.float32)
    outputs = []
    for module in (scheduled.mod, tvm.IRModule({"main": func})):
        kernel = tvm.compile(module, target=target)
        result = tvm.runtime.tensor(np.zeros((1, 8, 150, 170), np.float32))
        kernel(tvm.runtime.tensor(data), result)
        outputs.append(result.numpy())
    assert np.array_equal(outputs[0], outputs[1])
    assert outputs[0].std() > 0.5  # the image, not zeros


def test_a_grouped_convolutions_vectors_stay_within_a_group():
    """RegNet's grouped 3x3 convolutions (8 channels a group): a vector of output channels
    spans one group, so every lane reads the same input channel (broadcast), not a lane each
    (a gather: 8 G multiply-adds/s before); the results equal TVM's default build."""
    from edgebyoc.schedules import _channels_per_group

    target = host_target()
    with target:
        lowered = tvm.transform.Sequential([
            relax.transform.ConvertLayout(HOST_LAYOUTS), relax.transform.LegalizeOps(),
            relax.transform.AnnotateTIROpPattern(), relax.transform.FuseOps(),
            relax.transform.FuseTIR()])(import_model(conv_model(**CASES["grouped-8-stride2"])).mod)
    conv = next(f for gv, f in lowered.functions.items() if "conv2d" in gv.name_hint)
    text = HostReductionRule().apply(conv, target, False).mod.script()
    assert re.search(r"T\.vectorized\((T\.int64\()?8\)", text)
    sch = tvm.s_tir.Schedule(conv)
    block = next(b for b in sch.get_child_blocks(sch.get_sblock("root"))
                 if "conv" in sch.get(b).name_hint)
    assert _channels_per_group(sch.get(block), 3) == 8


def _lowered_host_functions(model) -> dict:
    target = host_target()
    with target:
        lowered = tvm.transform.Sequential([
            relax.transform.ConvertLayout(HOST_LAYOUTS), relax.transform.LegalizeOps(),
            relax.transform.AnnotateTIROpPattern(), relax.transform.FuseOps(),
            relax.transform.FuseTIR()])(import_model(model).mod)
    return {gv.name_hint: f for gv, f in lowered.functions.items()
            if isinstance(f, tvm.tirx.PrimFunc)}


@pytest.mark.parametrize("case, per_channel", [
    ("depthwise", True), ("depthwise-stride2-odd", True), ("depthwise-5x5", True),
    ("maxpool-3x3-padded", True), ("3x3", False), ("grouped", False)])
def test_depthwise_convs_and_pools_read_padding_in_place_with_unrolled_taps(case, per_channel):
    """A depthwise convolution or a pooling does a window's few multiply-adds per input
    element: it reads the padding in place (no padded copy) with the filter row's taps
    unrolled; a convolution over input channels keeps its per-tile padded copy. (Results:
    ``test_scheduled_equals_default_build``.)"""
    functions = _lowered_host_functions(conv_model(**CASES[case]))
    key = "pool" if "pool" in case else "conv2d"
    (name,) = [n for n in functions if key in n and (key != "conv2d" or "pool" not in n)]
    text = HostReductionRule().apply(functions[name], host_target(), False).mod.script()
    assert ("pad_temp" not in text) == per_channel, text
    taps = CASES[case]["pool_kernel"] if key == "pool" else CASES[case]["kernel"]
    unrolled = re.findall(r"for \w+ in T\.unroll\((?:T\.int64\()?(\d+)\)", text)
    assert (str(taps) in unrolled) == per_channel, unrolled


def test_streamed_convolutions_block_their_input_channels():
    """A convolution whose weights are streamed (over WEIGHT_STREAM_BYTES, more than its
    input) and whose channel tile alone holds more than TILE_WEIGHT_BYTES of them runs its
    input channels in blocks: the channel tiles (4 of 32) are the parallel loop, and 8 blocks
    of 64 input channels each pass over all 24 x 5 output tiles of 5 columns (values: CASES
    "3x3-dilated-blocked"). A layer whose channel tile holds fewer weights is not blocked."""

    def loops(**shape):
        return _loop_lines(_scheduled_kernel_script(import_model(conv_model(**shape))))

    blocked = loops(cin=512, cout=128, size=24, kernel=3, dilation=2)
    assert any("T.parallel(T.int64(4))" in line for line in blocked)
    assert any("T.grid(T.int64(8), T.int64(24), T.int64(5), T.int64(3), T.int64(3), "
               "T.int64(64))" in line for line in blocked)
    small = loops(cin=64, cout=128, size=24, kernel=3, dilation=2)
    assert "T.parallel" in small[0] and not any("T.int64(3), T.int64(3), T.int64(64))" in line
                                                and "T.grid(T.int64(8)" in line for line in small)


def test_streamed_stride_one_windows_on_small_maps_block_input_channels_in_pairs(monkeypatch):
    """A 3x3 stride-1 convolution of 64 -> 128 channels on a 7x8 map streams its weights
    (295 KB) over 7 register blocks of outputs, too few for ``TILE_WEIGHT_BYTES``' blocks: its
    input channels run in 32 blocks of SMALL_MAP_CHANNEL_BLOCK (2), each over all 7 rows,
    with the 4 channel tiles as the parallel loop (values: CASES "3x3-small-map-blocked").
    The same layer with stride 2 (a 14x15 map), and with the constant at 0, is not blocked."""

    def loops(channel_block=None, **shape):
        if channel_block is not None:
            monkeypatch.setattr(host_schedules, "SMALL_MAP_CHANNEL_BLOCK", channel_block)
        return _loop_lines(_scheduled_kernel_script(
            import_model(conv_model(cin=64, cout=128, **shape))))

    blocked_grid = ("T.grid(T.int64(32), T.int64(7), T.int64(1), T.int64(3), T.int64(3), "
                    "T.int64(2))")
    blocked = loops(size=7, kernel=3)
    assert any("T.parallel(T.int64(4))" in line for line in blocked), blocked
    assert any(blocked_grid in line for line in blocked), blocked
    strided = loops(size=14, kernel=3, stride=2)
    assert any("T.grid(T.int64(3), T.int64(3), T.int64(64))" in line for line in strided)
    unblocked = loops(channel_block=0, size=7, kernel=3)
    assert not any(blocked_grid in line for line in unblocked)
    assert any("T.grid(T.int64(3), T.int64(3), T.int64(64))" in line for line in unblocked)


def test_dense_weights_over_l2_are_passed_in_reduction_blocks_by_panels_of_rows(monkeypatch):
    """A dense layer whose weights are over PANEL_WEIGHT_BYTES (here lowered to 64 KiB: 256 x
    96 floats are 96 KiB) and whose rows are larger still (200 x 256) runs panels of 5 of its
    25 register blocks of 8 rows in parallel, each passing the weights in 4 blocks of 64
    input channels (PANEL_K_BLOCK_BYTES lowered to 32 KiB) over all its rows and both
    channel tiles (of 48); the values equal TVM's default build. At the shipped thresholds
    the same layer keeps its rows as the parallel loop (Whisper's 1500 x 1536 x 384 layer:
    15.8 -> 11.0 ms)."""
    rng = np.random.default_rng(6)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"])], "dense",
        [helper.make_tensor_value_info("x", 1, [1, 200, 256])],
        [helper.make_tensor_value_info("y", 1, [1, 200, 96])],
        [numpy_helper.from_array(rng.standard_normal((256, 96)).astype(np.float32), "w")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])

    def loops() -> list[str]:
        return _loop_lines(_scheduled_kernel_script(import_model(model), kernel="matmul"))

    shipped = loops()
    assert shipped[0].endswith("in T.parallel(T.int64(25)):"), shipped
    monkeypatch.setattr(host_schedules, "PANEL_WEIGHT_BYTES", 64 << 10)
    monkeypatch.setattr(host_schedules, "PANEL_K_BLOCK_BYTES", 32 << 10)
    panels = loops()
    assert panels[0].endswith("in T.parallel(T.int64(5)):"), panels
    assert any("T.grid(T.int64(4), T.int64(5), T.int64(2), T.int64(64))" in line
               for line in panels), panels
    got, default = _both_builds(import_model(model), seed=6)
    for key, value in got.items():
        assert compare_output(key, value, default[key], rtol=1e-5).passed


def test_a_small_map_runs_its_channel_tiles_in_parallel():
    """A 1x1 convolution on a 7x8 map (``conv_model``'s maps are a column wider than tall)
    has 7 rows of one output tile, too few for the threads: its channel tiles (128 / 32) join
    the parallel loop, 7 x 4 = 28 tasks (7 before); a 14x15 map keeps its 14 x 3 row blocks
    of 5 columns as the parallel loop. Both equal TVM's default build."""
    for size, tasks in ((7, 28), (14, 42)):
        imported = import_model(conv_model(cin=64, cout=128, size=size, kernel=1, pad=0))
        text = _scheduled_kernel_script(imported)
        parallel = re.findall(r"for (\w+) in T\.parallel\(T\.int64\((\d+)\)\)", text)
        assert [int(extent) for _, extent in parallel] == [tasks], parallel
        got, default = _both_builds(imported, seed=size)
        for key, value in got.items():
            assert compare_output(key, value, default[key], rtol=1e-5).passed


def test_an_odd_count_of_channel_vectors_tiles_in_pairs_with_a_guarded_last_tile():
    """Output channels in 7 or 5 full vectors (112 or 80 on AVX-512) have no exact tile of
    two vectors: the tiles are two vectors each and the last one is guarded to the one vector
    left (``guarded_channel_tile``), for a 1x1 convolution and for a 3x3 one with a residual
    add. The packed weights stay one vector per block; both builds equal TVM's default. A
    row of 13 columns (register blocks of 7, the last guarded) keeps one-vector tiles: both
    guards together ran slower (SqueezeNet's classifier)."""
    target = host_target(AVX512_CPU)
    lanes = simd_lanes(target)
    for vectors, cin, kernel, residual, size, guards in (
            (7, 64, 1, False, 9, 2), (5, 5 * lanes, 3, True, 9, 2), (7, 64, 1, False, 12, 0)):
        imported = import_model(conv_model(cin=cin, cout=vectors * lanes, size=size,
                                           kernel=kernel, residual=residual))
        text = _scheduled_kernel_script(imported)
        guard = rf"T\.where\(.*\* T\.int64\(2\) \+ \w+ < T\.int64\({vectors}\)"
        assert len(re.findall(guard, text)) == guards, text  # the accumulator's init, update
        assert f"T.Buffer((T.int64({vectors}), T.int64({kernel})" in text  # packed per vector
        got, default = _both_builds(imported, seed=vectors)
        for key, value in got.items():
            assert compare_output(key, value, default[key], rtol=1e-5).passed


def test_weights_over_l1_and_the_input_are_streamed_by_channel_tile():
    """A 1x1 convolution of 128 -> 256 channels on a 14x15 map has 128 KiB of weights, over
    ``WEIGHT_STREAM_BYTES`` and its 105 KiB input: the channel tiles go outermost in the
    parallel loop (tiles x 14 x 3 row blocks), each tile's weights read once while every row
    passes them. With 64 -> 128 channels (32 KiB of weights) the 42 row blocks alone are the
    parallel loop. Both equal TVM's default build."""
    target = host_target(AVX512_CPU)
    lanes = simd_lanes(target)
    for cin, cout, streamed in ((128, 256, True), (64, 128, False)):
        imported = import_model(conv_model(cin=cin, cout=cout, size=14, kernel=1, pad=0))
        text = _scheduled_kernel_script(imported)
        tiles = cout // channel_tile(cout, lanes)[1]
        parallel = re.findall(r"for (\w+) in T\.parallel\(T\.int64\((\d+)\)\)", text)
        assert [int(extent) for _, extent in parallel] == [tiles * 42 if streamed else 42]
        if streamed:  # the channel tile is the fused loop's outer part: every 42 tasks
            assert f"{parallel[0][0]} // T.int64(42)" in text, text
        got, default = _both_builds(imported, seed=cin)
        for key, value in got.items():
            assert compare_output(key, value, default[key], rtol=1e-5).passed


def _squeeze_excitation_model(channels=48, reduced=4, size=29):
    """A feature map times a sigmoid of two 1x1 convolutions of its mean (EfficientNet's
    squeeze-and-excitation): the second convolution's consumers broadcast over the map."""
    rng = np.random.default_rng(5)

    def weight(name, *shape):
        return numpy_helper.from_array(rng.standard_normal(shape).astype(np.float32), name)

    nodes = [helper.make_node("Conv", ["x", "w0"], ["a"]),  # channels-last from here
             helper.make_node("GlobalAveragePool", ["a"], ["g"]),
             helper.make_node("Conv", ["g", "w1", "b1"], ["s1"]),
             helper.make_node("Relu", ["s1"], ["s2"]),
             helper.make_node("Conv", ["s2", "w2", "b2"], ["s3"]),
             helper.make_node("Sigmoid", ["s3"], ["s4"]),
             helper.make_node("Mul", ["a", "s4"], ["m"]),
             helper.make_node("Conv", ["m", "w3"], ["y"])]
    graph = helper.make_graph(
        nodes, "se", [helper.make_tensor_value_info("x", 1, [1, channels, size, size])],
        [helper.make_tensor_value_info("y", 1, [1, channels, size, size])],
        [weight("w0", channels, channels, 1, 1), weight("w1", reduced, channels, 1, 1),
         weight("b1", reduced), weight("w2", channels, reduced, 1, 1), weight("b2", channels),
         weight("w3", channels, channels, 1, 1)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_a_broadcast_epilogue_gets_parallel_loops_of_its_own():
    """The sigmoid of the excitation runs once per channel on the accumulator tile; the
    product with the feature map, which broadcasts it over 29 x 29 positions, runs after the
    reduction with its rows over the threads (on the tile it ran serially and recomputed the
    sigmoid per element: EfficientNet-B0 1.24x -> 1.10x onnxruntime). Values: TVM's build."""
    imported = import_model(_squeeze_excitation_model())
    scheduled, default = _both_builds(imported, seed=2)
    for key, value in scheduled.items():
        assert compare_output(key, value, default[key], rtol=1e-5).passed
    target = host_target()
    with target:
        lowered = host_pipeline(target, True)(imported.mod)
    text = next(f.script() for gv, f in lowered.functions.items()
                if isinstance(f, tvm.tirx.PrimFunc) and "sigmoid" in gv.name_hint)
    top_loops = [line.strip() for line in text.splitlines() if line.startswith("    for ")]
    assert top_loops[-1].startswith("for ax0_ax1_fused in T.parallel(T.int64(841))"), top_loops
    assert text.count('T.sblock("T_multiply")') == 1
    divide = text.index('T.sblock("T_divide")')  # the sigmoid: before the broadcast loops
    assert divide < text.index("T.parallel(T.int64(841))") < text.index('T.sblock("T_multiply")')


def test_hard_swish_and_hard_sigmoid_fuse_into_the_convolution():
    """TVM imports HardSwish / HardSigmoid with ``relax.clip``, which its layout conversion
    leaves in NCHW between two transposes, a kernel of its own; as minimum and maximum by
    constants (``rewrites.clip_as_min_max``) both join the convolution's epilogue. Values:
    TVM's default build, inputs spread over the clamps' bends."""
    rng = np.random.default_rng(6)
    weight = numpy_helper.from_array(rng.standard_normal((16, 16, 1, 1)).astype(np.float32), "w")
    nodes = [helper.make_node("Conv", ["x", "w"], ["a"]),
             helper.make_node("HardSwish", ["a"], ["b"]),
             helper.make_node("HardSigmoid", ["b"], ["c"], alpha=0.25),
             helper.make_node("Conv", ["c", "w"], ["y"])]
    graph = helper.make_graph(nodes, "hard",
                              [helper.make_tensor_value_info("x", 1, [1, 16, 9, 9])],
                              [helper.make_tensor_value_info("y", 1, [1, 16, 9, 9])], [weight])
    imported = import_model(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))
    target = host_target()
    with target:
        lowered = host_pipeline(target, True)(imported.mod)
    names = [gv.name_hint for gv, f in lowered.functions.items()
             if isinstance(f, tvm.tirx.PrimFunc)]
    assert [n for n in names if "conv2d" in n and n.count("minimum") == 2
            and n.count("maximum") == 2], names
    assert not [n for n in names if "clip" in n], names
    scheduled, default = _both_builds(imported, seed=3)
    for key, value in scheduled.items():
        assert compare_output(key, value, default[key], rtol=1e-5).passed


def test_a_tensor_two_unknown_calls_read_is_converted_back_once():
    """``ConvertLayout`` converts an NHWC tensor back to NCHW for each call it does not know
    (an offloaded region, a depth-first macro-kernel): the sparse ResNet-50's max-pool output
    was transposed twice, once per region reading it. The host build keeps one transpose."""
    from edgebyoc.codegen.host import _channels_last

    builder = relax.BlockBuilder()
    regions = []
    for name in ("region_a", "region_b"):
        param = relax.Var("t", relax.TensorType([1, 8, 6, 6], "float32"))
        with builder.function(name, [param]):
            with builder.dataflow():
                out = builder.emit_output(relax.op.nn.relu(param))
            builder.emit_func_output(out)
        regions.append(builder.get().get_global_var(name))
    x = relax.Var("x", relax.TensorType([1, 4, 6, 6], "float32"))
    weight = relax.const(np.ones((8, 4, 3, 3), "float32"))
    with builder.function("main", [x]):
        with builder.dataflow():
            y = builder.emit(relax.op.nn.relu(relax.op.nn.conv2d(x, weight, padding=1)))
            a, b = (builder.emit(relax.Call(region, [y])) for region in regions)
            out = builder.emit_output(relax.op.add(a, b))
        builder.emit_func_output(out)
    converted = _channels_last(builder.get())
    permutes = [b.value for block in converted["main"].body.blocks for b in block.bindings
                if isinstance(b.value, relax.Call) and isinstance(b.value.op, tvm.ir.Op)
                and b.value.op.name == "relax.permute_dims"]
    # x to NHWC, the weight to OHWI, then the relu's result back to NCHW once for both calls
    assert [tuple(int(a) for a in p.attrs.axes) for p in permutes] == [
        (0, 2, 3, 1), (2, 3, 1, 0), (0, 3, 1, 2)]
