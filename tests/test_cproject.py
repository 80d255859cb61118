"""The deployable C project (codegen.cproject) and its static arena (memory.arena): arena
placement against hand-computed plans, the reference C kernels built with gcc -Wall -Wextra
-Werror under AddressSanitizer / UndefinedBehaviorSanitizer and compared with TVM and the numpy
integer reference, clear refusals, and the pipeline's fallback when a network has no project."""

import doctest
import random
import shutil
from pathlib import Path

import numpy as np
import pytest
import tvm
from tvm import relax

import edgebyoc
from edgebyoc.codegen.cproject import ProjectUnsupported, build_project
from edgebyoc.memory import arena
from edgebyoc.memory.arena import ArenaTensor, check_arena, plan_arena

MODELS = Path(__file__).resolve().parents[2] / "shared" / "models" / "mlperf_tiny"
SANITIZE = "-Og -g -fsanitize=address,undefined -fno-sanitize-recover=all"  # -Og: edgebyoc.testing.cproject.SANITIZE_FLAGS says why
needs_gcc = pytest.mark.skipif(shutil.which("gcc") is None or shutil.which("make") is None,
                               reason="gcc and make are needed to build the C project")


def test_arena_docstring_example():
    assert doctest.testmod(arena).failed == 0


def test_arena_reuses_dead_tensors_and_keeps_live_ones_apart():
    tensors = [ArenaTensor("a", 100, 0, 1), ArenaTensor("b", 50, 1, 2),
               ArenaTensor("c", 100, 2, 3), ArenaTensor("d", 30, 4, 4)]
    plan = plan_arena(tensors)
    # a and c never live together: same offset; b lives with both: above them (112 aligned);
    # d lives alone: offset 0
    assert plan.offsets == {"a": 0, "c": 0, "b": 112, "d": 0}
    assert plan.size_bytes == 176 and plan.lower_bound_bytes == 150
    assert plan.naive_bytes == 112 + 64 + 112 + 32


def test_arena_timeline_is_the_lifetimes_step_by_step():
    from edgebyoc.memory.arena import arena_timeline

    tensors = [ArenaTensor("a", 100, 1, 2), ArenaTensor("b", 50, 2, 3),
               ArenaTensor("c", 100, 3, 4), ArenaTensor("d", 30, 5, 5)]
    timeline = arena_timeline(tensors, ["conv", "pool", "add", "dense", "softmax"])
    assert [s.total for s in timeline.steps] == [100, 150, 150, 100, 30]
    assert timeline.peak_bytes == plan_arena(tensors).lower_bound_bytes == 150
    assert timeline.peak_step.kernel == "pool" and timeline.peak_step.live == [("a", 100),
                                                                               ("b", 50)]


def test_arena_fills_a_gap_between_placed_tensors():
    # x and z are live at step 1, y only at step 2: y fits below z where x ended
    tensors = [ArenaTensor("x", 64, 0, 1), ArenaTensor("z", 64, 1, 3),
               ArenaTensor("y", 48, 2, 3), ArenaTensor("w", 200, 5, 6)]
    plan = plan_arena(tensors)
    check_arena(tensors, plan)
    assert plan.offsets["y"] == plan.offsets["x"]  # x is dead when y is written
    assert plan.size_bytes == 208  # w alone at step 5 needs the most


def test_arena_random_plans_are_valid_and_bounded():
    rng = random.Random(0)
    for _ in range(30):
        tensors = []
        for i in range(rng.randint(1, 60)):
            first = rng.randint(0, 40)
            tensors.append(ArenaTensor(f"t{i}", rng.randint(0, 5000), first,
                                       first + rng.randint(0, 8)))
        plan = plan_arena(tensors)
        check_arena(tensors, plan)
        assert plan.lower_bound_bytes <= plan.size_bytes <= plan.naive_bytes


def _greedy_offsets(tensors, alignment, order):
    """The placement rule of the module docstring, read literally (one loop per tensor)."""
    placed, offsets = [], {}
    for tensor in sorted(tensors, key=order):
        offset = 0
        for start, other in sorted((p for p in placed if p[1].overlaps(tensor)),
                                   key=lambda p: p[0]):
            if start - offset >= tensor.size:
                break
            offset = max(offset, -(-(start + other.size) // alignment) * alignment)
        placed.append((offset, tensor))
        offsets[tensor.name] = offset
    return offsets


def test_arena_placement_is_the_greedy_rule_and_scales_to_thousands_of_live_tensors():
    rng = random.Random(1)
    orders = [lambda t: (-t.size, t.first, t.name), lambda t: (t.first - t.last, t.name)]
    for _ in range(300):
        tensors = []
        for i in range(rng.randint(0, 40)):
            first = rng.randint(0, 30)
            tensors.append(ArenaTensor(f"t{i}", rng.choice([0, 7, 16, rng.randint(1, 5000)]),
                                       first, first + rng.choice([0, 2, 10, 30])))
        alignment = rng.choice([1, 8, 16])
        for order in orders:
            plan = plan_arena(tensors, alignment, order)
            assert plan.offsets == _greedy_offsets(tensors, alignment, order)
            check_arena(tensors, plan)
            alive = [sum(t.size for t in tensors if t.first <= s <= t.last) for s in range(70)]
            assert plan.lower_bound_bytes == max(alive, default=0)
    # 2,000 parallel branches alive at once (a concat of 2,000 inputs): seconds of loops each
    # plan before, one of the 36 placement orders a host build tries
    wide = [ArenaTensor(f"r{i}", 16 * (1 + i % 3), i, 2000 + i // 7) for i in range(2000)] + \
        [ArenaTensor(f"c{i}", 64 * (1 + i % 5), 2000 + i, 2003 + i) for i in range(300)]
    plan = plan_arena(wide)
    check_arena(wide, plan)
    assert plan.offsets == _greedy_offsets(wide, 16, orders[0])


def test_check_arena_finds_an_overlap():
    tensors = [ArenaTensor("a", 64, 0, 2), ArenaTensor("b", 64, 1, 3)]
    plan = plan_arena(tensors)
    plan.offsets["b"] = 32
    with pytest.raises(ValueError, match="overlap while alive"):
        check_arena(tensors, plan)


def _float_graph():
    """Every float reference kernel: NHWC conv (padding, stride, dilation, depthwise groups),
    broadcasting add / multiply / maximum, transpose, clip, ReLU, average pooling, matmul,
    softmax along a middle axis and views."""
    rng = np.random.default_rng(0)
    x = relax.Var("x", relax.TensorType((1, 9, 11, 4), "float32"))
    bias = relax.Var("bias", relax.TensorType((8,), "float32"))
    bb = relax.BlockBuilder()
    with bb.function("main", [x, bias]):
        with bb.dataflow():
            w1 = relax.const(rng.standard_normal((3, 3, 4, 8)).astype("float32"))
            y = bb.emit(relax.op.nn.conv2d(x, w1, strides=2, padding=(1, 2, 1, 0),
                                           data_layout="NHWC", kernel_layout="HWIO"))
            y = bb.emit(relax.op.add(y, bias))
            y = bb.emit(relax.op.nn.relu(y))
            w2 = relax.const(rng.standard_normal((8, 3, 3, 1)).astype("float32"))
            y = bb.emit(relax.op.nn.conv2d(y, w2, padding=2, dilation=2, groups=8,
                                           data_layout="NHWC", kernel_layout="OHWI"))
            y = bb.emit(relax.op.multiply(y, relax.const(np.float32(0.5))))
            y = bb.emit(relax.op.maximum(y, relax.const(
                rng.standard_normal((1, 1, 1, 8)).astype("float32"))))
            y = bb.emit(relax.op.clip(y, -1.5, 2.0))
            p = bb.emit(relax.op.nn.avg_pool2d(y, pool_size=(2, 2), strides=(2, 2),
                                               layout="NHWC"))
            t = bb.emit(relax.op.permute_dims(p, [0, 3, 1, 2]))
            s = bb.emit(relax.op.nn.softmax(t, axis=1))
            flat = bb.emit(relax.op.reshape(p, (1, -1)))
            w3 = relax.const(rng.standard_normal((48, 5)).astype("float32"))  # 2x3x8
            m = bb.emit(relax.op.matmul(flat, w3))
            out = bb.emit_output(relax.Tuple([s, m]))
        bb.emit_func_output(out)
    return bb.get()


@needs_gcc
def test_float_reference_kernels_match_tvm(tmp_path):
    mod = _float_graph()
    project = build_project(mod, {}, "floats", ["x", "bias"], ["softmax", "dense"])
    assert project.host_steps == 11 and project.region_steps == 0
    # the report's timeline: one step per kernel, its peak the arena's lower bound
    assert len(project.timeline.steps) == 11
    assert project.timeline.peak_bytes == project.arena.lower_bound_bytes
    assert all(s.kernel.startswith(f"step{s.index + 1}_") for s in project.timeline.steps)
    binary = project.make(tmp_path / "floats", cflags=SANITIZE, ldflags=SANITIZE)
    rng = np.random.default_rng(1)
    inputs = [rng.standard_normal((1, 9, 11, 4)).astype("float32"),
              rng.standard_normal(8).astype("float32")]
    ours = project.run_binary(binary, inputs)
    vm = relax.VirtualMachine(tvm.compile(mod, target="llvm"), tvm.cpu())
    theirs = vm["main"](*[tvm.runtime.tensor(v) for v in inputs])
    for got, want in zip(ours, theirs):
        np.testing.assert_allclose(got, want.numpy(), rtol=1e-5, atol=1e-5)


@needs_gcc
def test_inputs_and_outputs_in_the_arena(tmp_path):
    mod = _float_graph()
    apart = build_project(mod, {}, "floats", ["x", "bias"], ["softmax", "dense"])
    inside = build_project(mod, {}, "floats", ["x", "bias"], ["softmax", "dense"],
                           io_in_arena=True)
    # x (1584 B), bias (32 B), softmax (192 B) and dense (20 B) move into the arena; x is
    # dead after the first convolution, so its bytes are reused
    assert apart.io_bytes == (1 * 9 * 11 * 4 + 8 + 8 * 2 * 3 + 5) * 4
    assert inside.io_bytes == 0 and inside.total_activation_bytes == inside.arena.size_bytes
    assert inside.arena.size_bytes < apart.total_activation_bytes
    assert "#define EDGEBYOC_NETWORK_IO_IN_ARENA 1" in inside.files["network.h"]
    rng = np.random.default_rng(2)
    inputs = [rng.standard_normal((1, 9, 11, 4)).astype("float32"),
              rng.standard_normal(8).astype("float32")]
    expected = apart.run_binary(apart.make(tmp_path / "apart"), inputs)
    # the harness reads and writes in place (edgebyoc_network_input / _output)
    got = inside.run_binary(inside.make(tmp_path / "inside", cflags=SANITIZE,
                                        ldflags=SANITIZE), inputs)
    for a, b in zip(got, expected):
        assert np.array_equal(a, b)


def test_an_input_returned_as_an_output_is_copied_into_the_arena():
    x = relax.Var("x", relax.TensorType((1, 4), "float32"))
    bb = relax.BlockBuilder()
    with bb.function("main", [x]):
        with bb.dataflow():
            y = bb.emit(relax.op.nn.relu(x))
            out = bb.emit_output(relax.Tuple([x, y]))
        bb.emit_func_output(out)
    project = build_project(bb.get(), {}, "echo", ["x"], ["x_again", "relu"], io_in_arena=True)
    offsets = project.arena.offsets
    # x, relu's result and the copy of x are three arena tensors, the copy apart from x
    assert len(offsets) == 3 and project.arena.size_bytes >= 3 * 16
    assert "memcpy(edgebyoc_arena +" in project.files["network.c"]


@needs_gcc
@pytest.mark.slow
def test_integer_kws_project_is_bit_exact_with_the_numpy_reference(tmp_path):
    from edgebyoc.frontend import import_model, random_inputs
    from edgebyoc.quant.integerize import integerize
    from edgebyoc.quant.reference import run_reference

    imported = import_model(str(MODELS / "kws_ref_model.tflite"))
    mod = relax.transform.FoldConstant()(integerize(imported.mod))
    project = build_project(mod, {}, "kws", [s.name for s in imported.inputs],
                            [s.name for s in imported.outputs])
    # conv / depthwise / dense as host steps with requantize (each conv and the dense layer
    # fused with its zero point and requantize: no int32 tensor stored, int32 accumulators
    # where no sum can overflow), avg pool read from int8, the softmax chain
    network = project.files["network.c"]
    assert network.count("conv2d + edgebyoc_requantize (fused)") == 9  # 1 + 4 dw + 4 pw
    assert network.count("astype + subtract + matmul + edgebyoc_requantize1 (fused)") == 1
    assert network.count("astype + nn.avg_pool2d + astype (fused)") == 1
    assert network.count("int32_t acc = 0;") == 10 and "int64_t acc" not in network
    assert project.host_steps == 14 and project.arena.size_bytes >= project.arena.lower_bound_bytes
    assert project.arena.size_bytes <= 16_000  # TFLite Micro's arena for DS-CNN
    binary = project.make(tmp_path / "kws", cflags=SANITIZE, ldflags=SANITIZE)
    for seed in (0, 1):
        x = list(random_inputs(imported.inputs, seed=seed).values())
        assert np.array_equal(project.run_binary(binary, x)[0], run_reference(mod, x)[0])


def test_an_operator_without_a_kernel_is_named():
    x = relax.Var("x", relax.TensorType((1, 8, 8, 4), "float32"))
    bb = relax.BlockBuilder()
    with bb.function("main", [x]):
        with bb.dataflow():
            y = bb.emit_output(relax.op.nn.max_pool2d(x, pool_size=2, layout="NHWC"))
        bb.emit_func_output(y)
    with pytest.raises(ProjectUnsupported, match="relax.nn.max_pool2d has no reference C"):
        build_project(bb.get(), {}, "pool", ["x"], ["y"])


def test_c_project_target_keeps_the_tvm_build_and_says_why(make_plugin, isolated_registry,
                                                           monkeypatch):
    from edgebyoc.testing.models import small_convnet

    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parent / "byoc_plugins"))
    registry = isolated_registry(make_plugin("duo", module="duo",
                                             distribution="edgebyoc-test-duo"))
    model = small_convnet(16)
    compiled = edgebyoc.compile(model, target="cproj", registry=registry)
    entry = compiled.report["c_project"]
    assert entry["generated"] is False
    assert entry["reason"].startswith("region cproj_csrc_r0_")
    assert entry["reason"].endswith("has no C entry point (its codegen gives no c_entry)")
    assert compiled.project is None and compiled.manifest["c_project"] is None
    from edgebyoc.verify import verify
    result, _ = verify(compiled)
    assert result.passed


def test_integer_average_pooling_rounds_half_away_from_zero_everywhere(tmp_path):
    """TFLite (and TFLite Micro) round integer average pooling half away from zero; TVM's own
    legalization truncates. The host build (edgebyoc's schedules or TVM's default loops), the
    C project's kernel and the numpy reference all round as TFLite does."""
    from edgebyoc.codegen.host import build_host, host_target
    from edgebyoc.quant.reference import run_reference

    windows = [[1, 1, 0, 0], [-1, -1, 0, 0], [3, 3, 0, 0], [-3, -3, 0, 0],  # +-0.5, +-1.5
               [2, 2, 1, 0], [-2, -2, -2, -1], [127, 127, 127, 126], [-128, -128, -128, -127]]
    x = np.zeros((1, 2, 16, 1), np.int32)  # eight 2x2 windows side by side
    for index, window in enumerate(windows):
        x[0, 0:2, 2 * index:2 * index + 2, 0] = np.array(window).reshape(2, 2)
    expected = np.array([1, -1, 2, -2, 1, -2, 127, -128], np.int32)
    var = relax.Var("x", relax.TensorType(x.shape, "int32"))
    bb = relax.BlockBuilder()
    with bb.function("main", [var]):
        with bb.dataflow():
            y = bb.emit_output(relax.op.nn.avg_pool2d(var, pool_size=(2, 2), strides=(2, 2),
                                                      layout="NHWC"))
        bb.emit_func_output(y)
    mod = bb.get()
    for schedules in (True, False):
        vm = relax.VirtualMachine(build_host(mod, host_target(), schedules=schedules),
                                  tvm.cpu())
        got = vm["main"](tvm.runtime.tensor(x)).numpy()
        assert np.array_equal(got[0, 0, :, 0], expected), (schedules, got[0, 0, :, 0])
    assert np.array_equal(run_reference(mod, [x])[0][0, 0, :, 0], expected)
    if shutil.which("gcc") and shutil.which("make"):
        project = build_project(mod, {}, "pool", ["x"], ["y"])
        got = project.run_binary(project.make(tmp_path / "pool"), [x])[0]
        assert np.array_equal(got[0, 0, :, 0], expected)


def test_int32_accumulators_only_where_no_sum_can_overflow():
    """An int8 x int8 layer accumulates in int32 while terms x 255 x 128 < 2^31 (65,793
    products a sum), in int64 beyond and for wider operands; float layers in float."""
    from edgebyoc.codegen.cgraph import CTensor
    from edgebyoc.codegen.ckernels import accumulator

    int8 = CTensor("x", "int8", (1, 8), "arena")
    wide = CTensor("x", "int32", (1, 8), "arena")
    out, fout = CTensor("y", "int8", (1, 8), "arena"), CTensor("y", "float32", (1, 8), "arena")
    assert accumulator(int8, int8, 65_793, -128, out) == "int32_t"
    assert accumulator(int8, int8, 65_794, -128, out) == "int64_t"
    assert accumulator(wide, int8, 9, 0, out) == "int64_t"
    assert accumulator(int8, int8, 9, 200, out) == "int64_t"
    assert accumulator(int8, int8, 9, 0, fout) == "float"
