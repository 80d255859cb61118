"""sparse_cpu: contract conformance, numerics against onnxruntime, the offload decision."""

import numpy as np
import onnxruntime as ort
import pytest

from edgebyoc.api.testing import check_installed_plugin, compile, load
from edgebyoc_sparse_cpu import cost
from edgebyoc_sparse_cpu.layers import TABLE_II, conv_layer, sparse_weight


def reference(model, x):
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, {"x": x})[0]


def check(model, offloaded=True, rtol=1e-4, options=None):
    compiled = compile(model, target="sparse_cpu", options=options)
    conv_rows = [r for r in compiled.report["operators"] if r["op"] == "nn.conv2d"]
    assert all((r["module"] == "spardr") == offloaded for r in conv_rows), conv_rows
    shape = compiled.inputs[0].shape
    x = np.random.default_rng(1).standard_normal(shape).astype(np.float32)
    got = next(iter(compiled.run({"x": x}).values()))
    expected = reference(model, x)
    assert np.abs(got - expected).max() <= rtol * np.abs(expected).max()
    return compiled


def test_conformance():
    check_installed_plugin("sparse_cpu", workloads=True)


#: the Table II layers the cost model keeps on the dense host path, by this CPU's vector ISA
#: (``cost.ISA``, whose constants ``benchmarks/sparse_cost_fit.py`` fitted). AVX-512: none
#: (fitted on an Intel Xeon, where the kernel beat the dense build on all 25 layers timed).
#: AVX2: all but CV7 and CV13; on a Zen 3 the kernel, streaming half the floats per
#: instruction, was faster only there and, by less than the noise, on CV4 and CV10.
DENSE_LAYERS = {"avx512": set(),
                "avx2": {"CV1", "CV2", "CV3", "CV4", "CV5", "CV6", "CV8", "CV9", "CV10", "CV11",
                         "CV12"}}


@pytest.mark.slow
@pytest.mark.parametrize("name", TABLE_II)
def test_table_ii_layers(name):
    model = conv_layer(*TABLE_II[name])
    check(model, offloaded=name not in DENSE_LAYERS[cost.ISA])
    if name in DENSE_LAYERS[cost.ISA]:  # the sparse kernel's numerics all the same
        check(model, options={"min_speedup": 0})


@pytest.mark.parametrize("case", [
    dict(c_in=16, h=15, w=13, c_out=24, kernel=3, pad=1, stride=2, sparsity=0.85),
    dict(c_in=12, h=17, w=17, c_out=16, kernel=3, pad=2, stride=1, sparsity=0.85, dilation=2),
    dict(c_in=8, h=12, w=10, c_out=8, kernel=5, pad=2, stride=1, sparsity=0.9, relu=False),
    dict(c_in=32, h=9, w=9, c_out=32, kernel=1, pad=0, stride=2, sparsity=0.9),
    # stride 2, dilation 2: every tap reads the even rows and columns, one phase of four
    dict(c_in=12, h=15, w=14, c_out=16, kernel=3, pad=2, stride=2, sparsity=0.8, dilation=2),
    # a stem's 7x7 of stride 2: every phase row has padding columns on both sides
    dict(c_in=4, h=19, w=17, c_out=16, kernel=7, pad=3, stride=2, sparsity=0.8),
    # one column: phase 0's rows read no input column at all (padding only)
    dict(c_in=8, h=7, w=1, c_out=8, kernel=3, pad=1, stride=2, sparsity=0.8),
])
def test_strides_dilation_and_odd_sizes(case):
    # small layers: the cost model would keep them on the host, min_speedup=0 offloads them
    check(conv_layer(**case), options={"min_speedup": 0})


def test_empty_output_channels():
    rng = np.random.default_rng(3)
    weight = sparse_weight((16, 16, 3, 3), 0.9, rng)
    weight[[0, 5, 15]] = 0.0  # three output channels without a single non-zero
    check(conv_layer(16, 12, 12, 16, 3, 1, 1, 0.9, weight=weight),
          options={"min_speedup": 0})


def test_dense_layers_stay_on_the_host():
    compiled = check(conv_layer(64, 28, 28, 64, 3, 1, 1, sparsity=0.3),
                     offloaded=False)
    assert compiled.report["summary"]["offloaded_operators"] == 0


def test_weights_are_stored_as_csr_once(tmp_path):
    import json

    model = conv_layer(*TABLE_II["CV9"])
    compiled = check(model, options={"min_speedup": 0})  # offloaded whatever the CPU
    artifact = compiled.save(tmp_path / "cv9")
    manifest = json.loads((artifact / "manifest.json").read_text())
    dtypes = sorted(row["dtype"] for row in manifest["constants"])
    # CSR values, offsets, row pointers, channel order and the bias; no dense weight
    assert dtypes == ["float32", "float32", "int32", "int32", "int32"]
    nnz = int(np.count_nonzero(onnx_weight(model)))
    assert [row["shape"] for row in manifest["constants"] if row["dtype"] == "float32"] \
        .count([nnz]) == 1
    again = load(artifact)
    x = np.ones(compiled.inputs[0].shape, np.float32)
    assert np.array_equal(again.run({"x": x})["y"], compiled.run({"x": x})["y"])


def onnx_weight(model):
    from onnx import numpy_helper
    return next(numpy_helper.to_array(t) for t in model.graph.initializer if t.name == "w")


def test_grouped_and_depthwise_convolutions():
    check(conv_layer(16, 12, 12, 16, 3, 1, 1, 0.85, groups=4),
          options={"min_speedup": 0})
    check(conv_layer(24, 11, 13, 24, 3, 1, 2, 0.7, groups=24),
          options={"min_speedup": 0})


def test_reasons_for_staying_on_the_host():
    compiled = check(conv_layer(64, 28, 28, 64, 3, 1, 1, sparsity=0.3),
                     offloaded=False)
    (row,) = [r for r in compiled.report["operators"] if r["op"] == "nn.conv2d"]
    assert row["reason"].startswith("spardr: 30% sparse: predicted ")
    assert "below min_speedup 1" in row["reason"]


@pytest.mark.slow
def test_wheel_ships_the_templates(tmp_path):
    import subprocess
    import sys
    import zipfile
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp_path),
                    str(root)], check=True, capture_output=True)
    names = zipfile.ZipFile(next(tmp_path.glob("*.whl"))).namelist()
    assert "edgebyoc_sparse_cpu/templates/spardr_conv.c.mako" in names


def residual_block(c: int, h: int, w: int, kernel: int, shortcut_first: bool, seed: int = 0):
    """x -> Conv(+bias) -> Add(shortcut x) -> Relu, a ResNet block's end, as an ONNX model."""
    from onnx import helper, numpy_helper

    rng = np.random.default_rng(seed)
    weight = sparse_weight((c, c, kernel, kernel), 0.85, rng)
    bias = rng.standard_normal(c).astype(np.float32)
    pad = kernel // 2
    add_inputs = ["x", "conv"] if shortcut_first else ["conv", "x"]
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["conv"], kernel_shape=[kernel] * 2,
                              pads=[pad] * 4),
             helper.make_node("Add", add_inputs, ["sum"]),
             helper.make_node("Relu", ["sum"], ["y"])]
    graph = helper.make_graph(nodes, "residual",
                              [helper.make_tensor_value_info("x", 1, [1, c, h, w])],
                              [helper.make_tensor_value_info("y", 1, [1, c, h, w])],
                              [numpy_helper.from_array(weight, "w"),
                               numpy_helper.from_array(bias, "b")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


@pytest.mark.parametrize("kernel, shortcut_first", [(1, False), (3, True)])
def test_the_shortcut_add_and_relu_run_in_the_kernel_epilogue(kernel, shortcut_first):
    # the block's add and ReLU join the convolution's region: no host operator is left
    compiled = check(residual_block(24, 13, 11, kernel, shortcut_first),
                     options={"min_speedup": 0})
    rows = compiled.report["operators"]
    assert [r["op"] for r in rows] == ["nn.conv2d", "add", "add", "nn.relu"]
    assert all(r["module"] == "spardr" for r in rows)
    source = _region_sources(compiled.executable.mod)
    assert "v += add[j]" in source and ("in place" in source) == (kernel == 1)
    (region,) = compiled.report["regions"]
    assert region["patterns"] == ["sparse_cpu.spardr.conv2d_bias_residual_relu"]


@pytest.mark.parametrize("h, w", [(7, 7), (23, 23), (16, 16)])
def test_pointwise_convolutions_read_their_input_in_place(h, w):
    # 1x1, stride 1, unpadded: no reconstruction; planes of 49 (one partial chunk), 529
    # (whole chunks and a tail of a vector and a float) and 256 floats (whole chunks only)
    model = conv_layer(40, h, w, 48, 1, 0, 1, 0.85)
    compiled = check(model, options={"min_speedup": 0})
    source = _region_sources(compiled.executable.mod)
    assert "reads its input in place" in source and "_reconstruct" not in source


def _region_sources(module) -> str:
    """The C source of every generated module imported under ``module``."""
    try:
        own = module.inspect_source() if module.kind == "c" else ""
    except Exception:  # noqa: BLE001 - a module without source
        own = ""
    return own + "".join(_region_sources(m) for m in module.imports)


@pytest.mark.slow
def test_sparse_resnet50_end_to_end():
    from edgebyoc.api.testing import resnet50

    model = resnet50(64, num_classes=10, sparsity=0.85)
    compiled = compile(model, target="sparse_cpu", options={"min_speedup": 0})
    # every convolution (min_speedup 0: the dense stem too), with its bias, its ReLU and the
    # 16 blocks' shortcut adds: 53 layers, chained into 18 regions of at most 12 operators (a
    # block's three layers, and the next block's projection shortcut with some)
    regions = [r for r in compiled.report["regions"] if r["offloaded"]]
    layers = [p for r in regions for p in r["patterns"]]
    assert len(layers) == 53 and len(regions) == 18
    assert all(r["operators"] <= 12 for r in regions)
    assert layers.count("sparse_cpu.spardr.conv2d_bias_residual_relu") == 16
    host = [r["op"] for r in compiled.report["operators"] if r["module"] == "host"]
    assert sorted(host) == sorted(["add", "matmul", "nn.max_pool2d", "mean", "reshape"])
    x = np.random.default_rng(2).standard_normal(compiled.inputs[0].shape).astype(np.float32)
    session = ort.InferenceSession(model.SerializeToString(),
                                   providers=["CPUExecutionProvider"])
    expected = session.run(None, {compiled.inputs[0].name: x})[0]
    got = next(iter(compiled.run({compiled.inputs[0].name: x}).values()))
    assert np.abs(got - expected).max() <= 1e-4 * np.abs(expected).max()


@pytest.mark.parametrize("h, w, chunk_avx512, chunk_avx2", [
    (20, 20, 224, 112),  # CV12: 440 positions over the phase width, 28 vectors
    (40, 40, 240, 112),  # CV11: 1,680 positions, 105 vectors
    (28, 28, 224, 112),  # CV9: 840 positions, 53 vectors
    (7, 7, 64, 64),  # one chunk of the whole plane, 63 positions
])
def test_chunks_share_the_plane_evenly(h, w, chunk_avx512, chunk_avx2):
    from edgebyoc_sparse_cpu.csr import Geometry

    g = Geometry(64, h, w, 64, 3, 3, h, w, 1, 1, 1, 1, 1, 1)
    chunk = cost.chunk_size(g)
    assert chunk == {"avx512": chunk_avx512, "avx2": chunk_avx2}[cost.ISA]
    vectors = -(-g.out_h * g.phase_cols // 16)
    chunks = -(-vectors * 16 // chunk)
    # as few chunks as CHUNK allows, none of them a whole vector short of the others
    assert chunks == -(-vectors * 16 // cost.CHUNK) and chunks * chunk // 16 - vectors < chunks


def test_runs_at_the_input_end_add_their_tail_float_by_float():
    # a 1x1 convolution read in place over a 7x7 plane (49 floats: three vectors and a float):
    # every row has a non-zero on the last input channel, whose run of four whole vectors
    # would read past the input, and the plane's four vectors take two sets of sums
    rng = np.random.default_rng(5)
    weight = sparse_weight((24, 32, 1, 1), 0.85, rng)
    weight[:, -1] = rng.standard_normal((24, 1, 1)).astype(np.float32)
    compiled = check(conv_layer(32, 7, 7, 24, 1, 0, 1, 0.85, weight=weight),
                     options={"min_speedup": 0})
    source = _region_sources(compiled.executable.mod)
    assert "reads its input in place" in source
    assert "every other non-zero adds into a second set of sums" in source
    assert "add the tail float by float" in source


def test_a_1x1_kernel_needs_its_rows_offsets_ascending():
    from edgebyoc_sparse_cpu.csr import Geometry, rows_ascend, to_csr

    weight = sparse_weight((16, 40, 1, 1), 0.7, np.random.default_rng(6))
    values, offsets, row_ptr, _ = to_csr(weight, Geometry(40, 7, 7, 16, 1, 1, 7, 7, 1, 1, 0,
                                                          0, 1, 1))
    assert rows_ascend(offsets, row_ptr)
    k = int(np.argmax(np.diff(row_ptr)))  # the row with the most non-zeros, swapped about
    swapped = offsets.copy()
    swapped[row_ptr[k]], swapped[row_ptr[k] + 1] = offsets[row_ptr[k] + 1], offsets[row_ptr[k]]
    assert not rows_ascend(swapped, row_ptr)
    assert rows_ascend(np.array([3, 1, 2]), np.array([0, 1, 1, 3]))  # an empty row between


def test_a_reconstructed_1x1_reads_every_run_from_a_64_byte_boundary():
    """A 1x1 convolution that reconstructs its input (stride 2 here) lays its channels'
    planes 16 floats apart (``Geometry.plane_stride``): every non-zero's run starts at a
    multiple of 16 floats from the aligned base. Read in place, the planes stay packed."""
    from edgebyoc_sparse_cpu.csr import Geometry, to_csr

    weight = sparse_weight((8, 24, 1, 1), 0.6, np.random.default_rng(7))
    strided = Geometry(24, 14, 14, 8, 1, 1, 7, 7, 2, 2, 0, 0, 1, 1)
    assert (strided.phase_size, strided.plane_stride) == (49, 64)
    _, offsets, _, _ = to_csr(weight, strided)
    assert len(offsets) and not (offsets % 16).any()
    assert sorted(set(offsets.tolist())) == [64 * c for c in np.flatnonzero(weight.any(axis=0))]
    in_place = Geometry(24, 7, 7, 8, 1, 1, 7, 7, 1, 1, 0, 0, 1, 1)
    assert in_place.plane_stride == 49
    assert sorted(set(to_csr(weight, in_place)[1].tolist())) == \
        [49 * c for c in np.flatnonzero(weight.any(axis=0))]
    # the 49 floats of a plane and the 15 between planes: numerics as onnxruntime's
    check(conv_layer(24, 14, 14, 8, 1, 0, 2, 0.6), options={"min_speedup": 0})


def test_aligned_rows_keep_every_non_zero_grouped_by_shift():
    from edgebyoc_sparse_cpu.csr import SHIFTS, Geometry, to_csr

    weight = sparse_weight((8, 24, 3, 3), 0.7, np.random.default_rng(7))
    g = Geometry(24, 11, 13, 8, 3, 3, 11, 13, 1, 1, 1, 1, 1, 1)
    values, offsets, row_ptr, order = to_csr(weight, g)
    a_values, a_offsets, a_row_ptr, a_order = to_csr(weight, g, aligned=True)
    assert len(a_row_ptr) == 8 * SHIFTS + 1 and np.array_equal(order, a_order)
    assert np.all(a_offsets % SHIFTS == 0)
    for k in range(8):
        plain = sorted(zip(offsets[row_ptr[k]:row_ptr[k + 1]].tolist(),
                           values[row_ptr[k]:row_ptr[k + 1]].tolist()))
        regrouped = []
        for shift in range(SHIFTS):
            lo, hi = a_row_ptr[k * SHIFTS + shift], a_row_ptr[k * SHIFTS + shift + 1]
            regrouped += zip((a_offsets[lo:hi] + shift).tolist(), a_values[lo:hi].tolist())
        assert sorted(regrouped) == plain


def test_runs_read_from_64_byte_boundaries_where_rows_are_long():
    # 96 channels, 3x3, 70 % sparse: about 260 non-zeros a row over a 20x20 plane (28
    # vectors): aligned runs with AVX-512, whose shifted sums must give the same numbers
    model = conv_layer(96, 20, 20, 32, 3, 1, 1, 0.7)
    compiled = check(model, options={"min_speedup": 0})
    source = _region_sources(compiled.executable.mod)
    assert ("eb_load_aligned(in + v" in source) == (cost.ISA == "avx512")
    # rows of few non-zeros, and a 1x1 layer read in place, keep the unaligned runs
    for few in (conv_layer(16, 20, 20, 16, 3, 1, 1, 0.9), conv_layer(96, 20, 20, 32, 1, 0, 1,
                                                                      0.3)):
        source = _region_sources(check(few, options={"min_speedup": 0}).executable.mod)
        assert "eb_load_aligned(in + v" not in source


def _tap_offset(g, c, ky, kx):
    """One weight's run start, computed on its own: what ``Geometry.tap_offsets`` computes."""
    y, x = ky * g.dilation_h, kx * g.dilation_w
    rows, cols = g.phases_h, g.phases_w
    phase = (c * len(rows) + rows.index(y % g.stride_h)) * len(cols) + cols.index(x % g.stride_w)
    return phase * g.plane_stride + (y // g.stride_h) * g.phase_cols + x // g.stride_w


def _csr_by_loops(weight, g, groups, aligned):
    """The CSR arrays written out one non-zero at a time: what ``to_csr`` computes."""
    from edgebyoc_sparse_cpu.csr import SHIFTS

    out_channels, per_group_in = weight.shape[:2]
    values, offsets, row_ptr = [], [], [0]
    for k in range(out_channels):
        first = k // (out_channels // groups) * per_group_in
        row = [(_tap_offset(g, first + c, ky, kx), weight[k, c, ky, kx])
               for ky in range(weight.shape[2]) for kx in range(weight.shape[3])
               for c in range(per_group_in) if weight[k, c, ky, kx] != 0]
        if aligned:
            row.sort(key=lambda entry: entry[0] % SHIFTS)
            row_ptr += [len(values) + sum(o % SHIFTS <= s for o, _ in row) for s in range(SHIFTS)]
            row = [(o - o % SHIFTS, w) for o, w in row]
        else:
            row_ptr.append(len(values) + len(row))
        offsets += [o for o, _ in row]
        values += [w for _, w in row]
    counts = np.diff(np.asarray(row_ptr)[::SHIFTS if aligned else 1])
    return np.array(values, np.float32), np.array(offsets), np.array(row_ptr), \
        np.argsort(-counts, kind="stable")


@pytest.mark.parametrize("shape, geometry, groups", [
    ((24, 16, 3, 3), (16, 11, 13, 24, 3, 3, 11, 13, 1, 1, 1, 1, 1, 1), 1),
    ((16, 12, 3, 3), (12, 15, 14, 16, 3, 3, 7, 6, 2, 2, 2, 2, 2, 2), 1),  # stride, dilation
    ((16, 4, 3, 3), (16, 12, 12, 16, 3, 3, 12, 12, 1, 1, 1, 1, 1, 1), 4),  # grouped
    ((24, 1, 3, 3), (24, 11, 13, 24, 3, 3, 6, 7, 2, 2, 1, 1, 1, 1), 24),  # depthwise
    ((32, 40, 1, 1), (40, 9, 9, 32, 1, 1, 5, 5, 2, 2, 0, 0, 1, 1), 1),  # 1x1, stride 2
])
@pytest.mark.parametrize("aligned", [False, True])
def test_csr_arrays_match_the_non_zeros_one_by_one(shape, geometry, groups, aligned):
    from edgebyoc_sparse_cpu.csr import Geometry, to_csr

    weight = sparse_weight(shape, 0.7, np.random.default_rng(8))
    weight[3] = 0.0  # an output channel without a non-zero
    g = Geometry(*geometry)
    got = to_csr(weight, g, groups, aligned)
    expected = _csr_by_loops(weight, g, groups, aligned)
    for array, reference in zip(got, expected):
        assert np.array_equal(array, reference)


@pytest.mark.parametrize("h, w, channels, out_channels, chunk_avx512, chunk_avx2", [
    (56, 56, 256, 64, 224, 112),  # ResNet-50's 56x56 reduction: 14 (AVX2: 28) chunks, no tail
    (28, 28, 512, 128, 192, 96),  # 784 floats: 4 (8) chunks and a vector of tail
    (30, 30, 24, 24, 224, 112),  # 900 floats: 56 whole vectors, 4 floats of tail
    (56, 56, 64, 256, None, None),  # an expansion keeps shared channels
    (14, 14, 1024, 256, None, None),  # 12 whole vectors: one chunk, no plane to share
])
def test_a_reduction_read_in_place_shares_its_plane_between_tasks(
        h, w, channels, out_channels, chunk_avx512, chunk_avx2):
    from edgebyoc_sparse_cpu.csr import Geometry

    g = Geometry(channels, h, w, out_channels, 1, 1, h, w, 1, 1, 0, 0, 1, 1)
    chunk = cost.spatial_chunk_size(g)
    assert chunk == {"avx512": chunk_avx512, "avx2": chunk_avx2}[cost.ISA]
    if chunk:  # an even number of equal chunks of whole vectors, at most CHUNK each
        whole = h * w // 16 * 16
        assert chunk % 16 == 0 and chunk <= cost.CHUNK and (whole // chunk) % 2 == 0
        assert whole - whole // chunk * chunk < whole // chunk * 16  # the tail: < a vector each


def test_tasks_sharing_the_plane_compute_every_output_channel_and_the_tail():
    # a 1x1 block end whose tasks share the plane's chunks (not its channels): 900 floats,
    # four chunks of 224 and a tail of 4 floats shared by output channel; the shortcut add and
    # the ReLU in the contiguous epilogue
    compiled = check(residual_block(24, 30, 30, 1, False), options={"min_speedup": 0})
    source = _region_sources(compiled.executable.mod)
    assert "the tasks share the plane" in source and "one contiguous run of y" in source
    assert "#define EB_CHUNK 224" in source or cost.ISA != "avx512"


@pytest.mark.parametrize("h, stride, shared", [
    (48, 1, True),  # 48x50 over the phase width: 10 chunks of 15 vectors (AVX2: 22 of 7)
    (96, 2, True),  # stride 2 onto 48x48, four phase planes of 49 columns: 10 chunks
    (28, 1, False),  # 28x30: 4 chunks, fewer than SPATIAL_MIN_RECONSTRUCTED_CHUNKS
])
def test_a_reconstructed_3x3_shares_its_rows_and_chunks_between_tasks(h, stride, shared):
    # each task reconstructs the phase rows where its chunks start and reads a few of the
    # next task's (a barrier between): the numerics must not depend on the split
    compiled = check(conv_layer(16, h, h, 16, 3, 1, stride, 0.85), options={"min_speedup": 0})
    source = _region_sources(compiled.executable.mod)
    assert ("the tasks share the phase rows" in source) == shared
    assert ("the tasks share the plane" in source) == shared


SPLIT_SCRIPT = """
import numpy as np, onnxruntime as ort
from edgebyoc.api.testing import compile
from edgebyoc_sparse_cpu.layers import conv_layer
for args in [(24, 30, 30, 24, 1, 0, 1), (16, 48, 48, 16, 3, 1, 1), (16, 96, 96, 16, 3, 1, 2)]:
    model = conv_layer(*args, 0.85)
    compiled = compile(model, target="sparse_cpu", options={"min_speedup": 0})
    x = np.random.default_rng(1).standard_normal(compiled.inputs[0].shape).astype(np.float32)
    got = next(iter(compiled.run({"x": x}).values()))
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    expected = session.run(None, {"x": x})[0]
    print(float(np.abs(got - expected).max() / np.abs(expected).max()))
"""


def test_shared_planes_are_exact_with_one_task():
    # one task takes every chunk and reconstructs every row (TVM's pool, sized once per
    # process, in a fresh one; it gives no more tasks than the machine has cores, so the
    # two-task split is the other tests')
    import os
    import subprocess
    import sys

    env = dict(os.environ, TVM_NUM_THREADS="1")
    done = subprocess.run([sys.executable, "-c", SPLIT_SCRIPT], env=env, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    errors = [float(line) for line in done.stdout.split()]
    assert len(errors) == 3 and max(errors) <= 1e-4, errors


def conv_chain(specs, c_in: int, size: int, seed: int = 3):
    """x -> Conv(+bias) -> Relu per (out channels, kernel, stride) of ``specs``, an ONNX model:
    layers the partitioner chains into one region."""
    from onnx import helper, numpy_helper

    rng = np.random.default_rng(seed)
    nodes, inits, name, channels = [], [], "x", c_in
    for i, (c_out, kernel, stride) in enumerate(specs):
        inits += [numpy_helper.from_array(
            sparse_weight((c_out, channels, kernel, kernel), 0.85, rng), f"w{i}"),
            numpy_helper.from_array(rng.standard_normal(c_out).astype(np.float32), f"b{i}")]
        nodes += [helper.make_node("Conv", [name, f"w{i}", f"b{i}"], [f"c{i}"],
                                   kernel_shape=[kernel] * 2, strides=[stride] * 2,
                                   pads=[kernel // 2] * 4),
                  helper.make_node("Relu", [f"c{i}"], [f"r{i}"])]
        name, channels, size = f"r{i}", c_out, (size + 2 * (kernel // 2) - kernel) // stride + 1
    graph = helper.make_graph(nodes, "chain",
                              [helper.make_tensor_value_info("x", 1, [1, c_in, 30, 30])],
                              [helper.make_tensor_value_info(name, 1, [1, channels, size, size])],
                              inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def test_a_chain_of_layers_runs_in_one_region():
    # four convolutions of 3 operators each merge into one region of 12 (MAX_REGION_OPS): the
    # first two share one composite function (one pattern on equal shapes), so the region
    # holds fewer functions than layers; a reconstructed 3x3 and a stride-2 layer between
    # 1x1 layers read in place
    from edgebyoc_sparse_cpu.plugin import MAX_REGION_OPS

    assert MAX_REGION_OPS == 12
    model = conv_chain([(24, 3, 1), (24, 3, 1), (32, 1, 1), (16, 3, 2)], 24, 30)
    compiled = check(model, options={"min_speedup": 0})
    (region,) = [r for r in compiled.report["regions"] if r["offloaded"]]
    assert region["operators"] == 12
    source = _region_sources(compiled.executable.mod)
    assert source.count("the layers before have written their outputs") == 3
    assert source.count("_reconstruct(int task") == 3 and "reads its input in place" in source


def test_the_workspace_gives_each_inner_tensor_its_own_aligned_buffer():
    from edgebyoc_sparse_cpu.chain import workspace_layout

    assert workspace_layout([100, None, 64], 200) == ([0, None, 128], 192, 448)
    assert workspace_layout([None], 0) == ([None], None, 0)  # one layer read in place
    offsets, recon, total = workspace_layout([4 * 24 * 30 * 30, 4 * 7, None], 4 * 1000)
    assert all(o % 64 == 0 for o in offsets if o is not None) and recon % 64 == 0
    assert total == recon + 4032  # 4,000 bytes rounded up to 64
