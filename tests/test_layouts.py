"""Activation layouts at region boundaries: a MATCH module whose hardware reads channel planes
(``ExecModule.activation_layout = "NCHW"``, or ``"NHCW"``: planes cut in rows, rows outermost)
gets its tensors across its regions' boundaries in that layout, permutes only where they meet
NHWC host operators, DMA chunks counted for planes, and the layer template copying and
indexing planes, bit-exact against the integer reference."""

import re
from pathlib import Path

import numpy as np
import pytest

from edgebyoc.api import ExecModule
from edgebyoc.api.match import LoopNest, Schedule
from edgebyoc.api.testing import compile, int8_convnet, verify
from edgebyoc.partition import partition_module
from edgebyoc.pipeline import prepare
from edgebyoc.report import render_markdown

PLANAR_PLUGIN = '''
import math
from edgebyoc.api import Cost, ExecModule, MemoryLevel, PatternEntry, Target, TargetOption, hookimpl
from edgebyoc.api.match import host_binding, layer_codegen, schedule_cost
from edgebyoc.api.quant import add_pattern, conv2d_pattern, dense_pattern, int8_import_passes

NPU = ExecModule("npu", "channel-plane int8 array",
                 memory_levels=(MemoryLevel("L1", 32 * 1024, size_option="l1_kb"),
                                MemoryLevel("L2", 1 << 20)),
                 spatial_mapping={"K": 8, "OX": 8}, max_region_composites=1, min_region_macs=0,
                 activation_layout="{layout}")
TARGET = Target("planar", "NCHW activations", modules=(NPU,), c_project=True,
                options=(TargetOption("l1_kb", float, 32.0, "L1 size in kB"),))


@hookimpl
def edgebyoc_targets():
    return [TARGET]


@hookimpl
def edgebyoc_transforms(target, stage):
    return int8_import_passes(target.name) if stage == "import" else []


@hookimpl
def edgebyoc_patterns(target, module, options):
    return [PatternEntry("conv2d", conv2d_pattern()), PatternEntry("dense", dense_pattern()),
            PatternEntry("add", add_pattern())]


def price(nest, s):
    ops = s.iterations * s.tiles["K"] * s.tiles["OY"] * s.tiles["OX"]
    mem = sum(n * (size / 8 + 20 * chunks) for n, size, chunks in s.transfers.values())
    return Cost(ops + mem)


@hookimpl
def edgebyoc_cost(target, module, workload, schedule, options):
    return schedule_cost(workload, schedule, price)


@hookimpl
def edgebyoc_runtime_apis(target, module, flavour):
    return host_binding() if flavour == "host" else None


@hookimpl
def edgebyoc_codegen(target, module, region, schedule, context):
    return layer_codegen(module, region, schedule, context)
'''


RESNET8 = Path(__file__).resolve().parents[2] / "shared" / "models" / "mlperf_tiny" / \
    "pretrainedResnet_quant.tflite"


@pytest.fixture(scope="module")
def convnet():
    return int8_convnet()


def _registry(make_plugin, isolated_registry, layout):
    return isolated_registry(make_plugin("planar", PLANAR_PLUGIN.replace("{layout}", layout)))


@pytest.mark.parametrize("l1_kb", [32, 4])
def test_nchw_regions_verify_bit_exactly_with_permutes_only_at_host_boundaries(
        make_plugin, isolated_registry, convnet, l1_kb):
    registry = _registry(make_plugin, isolated_registry, "NCHW")
    compiled = compile(convnet, target="planar", options={"l1_kb": l1_kb}, registry=registry)
    regions = compiled.report["regions"]
    assert len(regions) == 6 and all(r["offloaded"] for r in regions)
    assert {r["activation_layout"] for r in regions} == {"NCHW"}
    # none between the five chained conv / add regions, none at the NCHW input and at the
    # NCHW pooling: the import's two permutes to and from NHWC are gone
    summary = compiled.report["summary"]
    assert (summary["layout_transforms"], summary["layout_transforms_removed"]) == (0, 2)
    assert "0 layout transforms (permute_dims) run on the host where they meet NHWC " \
        "operators, none between two such regions; 2 of the model's own permutes became " \
        "unnecessary" in render_markdown(compiled.report)
    if l1_kb < 8:  # tiled: the DMA copies channel planes tile by tile
        assert any(r["schedules"][0]["iterations"] > 1 for r in regions)
    result, _ = verify(compiled, seed=1)
    assert result.passed and result.reference == "numpy-integer"
    layer = compiled.project.files[next(f for f in compiled.project.files
                                        if f.startswith("layers/") and "_r0_" in f)]
    assert "EDGEBYOC_NCHW" in layer and "channel planes" in layer


@pytest.mark.parametrize("l1_kb", [32, 4])
def test_nhcw_regions_verify_bit_exactly(make_plugin, isolated_registry, convnet, l1_kb):
    registry = _registry(make_plugin, isolated_registry, "NHCW")
    compiled = compile(convnet, target="planar", options={"l1_kb": l1_kb}, registry=registry)
    regions = compiled.report["regions"]
    assert len(regions) == 6 and all(r["offloaded"] for r in regions)
    assert {r["activation_layout"] for r in regions} == {"NHCW"}
    # none between the chained regions: one permute from the model's NCHW input (the import's
    # NCHW -> NHWC and ours to NHCW composed are no identity) and one to the NCHW pooling
    summary = compiled.report["summary"]
    assert (summary["layout_transforms"], summary["layout_transforms_removed"]) == (2, 0)
    if l1_kb < 8:
        assert any(r["schedules"][0]["iterations"] > 1 for r in regions)
    result, _ = verify(compiled, seed=1)
    assert result.passed and result.reference == "numpy-integer"
    layer = compiled.project.files[next(f for f in compiled.project.files
                                        if f.startswith("layers/") and "_r0_" in f)]
    assert "EDGEBYOC_NHCW" in layer and "planes cut in rows" in layer


def test_an_nhwc_model_gets_permutes_where_regions_meet_host_operators(make_plugin,
                                                                      isolated_registry):
    # ResNet-8 (int8 TFLite, NHWC): its input goes into the first region and the last add's
    # output into the host's average pooling; everything between is regions
    registry = _registry(make_plugin, isolated_registry, "NCHW")
    compiled = compile(str(RESNET8), target="planar", options={"l1_kb": 8}, registry=registry)
    summary = compiled.report["summary"]
    assert (summary["layout_transforms"], summary["layout_transforms_removed"]) == (2, 0)
    steps = compiled.project.files["network.c"]
    assert steps.count("permute_dims") >= 2
    result, _ = verify(compiled)
    assert result.passed and result.reference == "numpy-integer"


def test_region_functions_take_and_return_nchw(make_plugin, isolated_registry, convnet):
    registry = _registry(make_plugin, isolated_registry, "NCHW")
    target = registry.target("planar")
    from edgebyoc.frontend import import_model  # noqa: PLC0415

    mod = prepare(import_model(convnet).mod, target, registry)
    result = partition_module(mod, target, registry, options={"l1_kb": 32.0})
    first = next(region for _, region in result.functions.values() if "_r0_" in region.symbol)
    assert first.activation_layout == "NCHW"
    params = first.function.params
    assert [int(d) for d in params[0].ty.shape.values] == [1, 3, 16, 16]  # NCHW input
    assert [int(d) for d in first.function.ret_ty.shape.values] == [1, 16, 16, 16]
    # the weights (a constant argument) keep their layout (OHWI here); only the run-time
    # activation is permuted
    assert [[int(d) for d in p.ty.shape.values] for p in params
            if len(p.ty.shape.values) == 4] == [[1, 3, 16, 16], [16, 3, 3, 3]]
    # the ONNX model's NCHW input, which the import permuted to NHWC, reaches the first region
    # as it came, and the last convolution's NCHW result goes straight to the model's NCHW
    # average pooling: both of the model's permutes are gone, none was added
    before, after = (str(m["main"]).count("R.permute_dims") for m in (mod, result.mod))
    assert (before, after, result.layout_transforms) == (2, 0, (0, 2))


def test_region_functions_take_and_return_nhcw(make_plugin, isolated_registry, convnet):
    registry = _registry(make_plugin, isolated_registry, "NHCW")
    target = registry.target("planar")
    from edgebyoc.frontend import import_model  # noqa: PLC0415

    mod = prepare(import_model(convnet).mod, target, registry)
    result = partition_module(mod, target, registry, options={"l1_kb": 32.0})
    first = next(region for _, region in result.functions.values() if "_r0_" in region.symbol)
    assert first.activation_layout == "NHCW"
    assert [int(d) for d in first.function.params[0].ty.shape.values] == [1, 16, 3, 16]
    assert [int(d) for d in first.function.ret_ty.shape.values] == [1, 16, 16, 16]
    # between two regions the tensor stays NHCW: the permutes left in main are the import's
    # NCHW -> NHWC of the model's input and ours to NHCW, ours back from NHCW after the last
    # region and the model's own to the NCHW pooling
    axes = re.findall(r"R\.permute_dims\([^)]*axes=\[([0-9, ]+)\]", str(result.mod["main"]))
    assert sorted(axes) == ["0, 1, 3, 2", "0, 1, 3, 2", "0, 2, 3, 1", "0, 3, 1, 2"]
    assert result.layout_transforms == (2, 0)


def test_the_same_model_in_nhwc_has_no_layout_transforms(make_plugin, isolated_registry,
                                                          convnet):
    registry = _registry(make_plugin, isolated_registry, "NHWC")
    compiled = compile(convnet, target="planar", options={"l1_kb": 4}, registry=registry)
    assert compiled.report["summary"]["layout_transforms"] == 0
    assert {r["activation_layout"] for r in compiled.report["regions"]} == {"NHWC"}
    result, _ = verify(compiled)
    assert result.passed


def _three_schedules(layout):
    """A 3x3 layer's whole-layer K tiles, row bands and column tiles, in ``layout``."""
    nest = LoopNest("conv2d", K=32, C=8, OY=16, OX=16, FY=3, FX=3, IY=16, IX=16,
                    padding=(1, 1, 1, 1)).with_activation_layout(layout)
    whole = Schedule(nest, {"K": 16, "OY": 16, "OX": 16}, ("K",), {"I": 0, "W": 1, "O": 1},
                     False)
    bands = Schedule(nest, {"K": 32, "OY": 4, "OX": 16}, ("OY",), {"I": 1, "W": 0, "O": 1},
                     False)
    cols = Schedule(nest, {"K": 32, "OY": 4, "OX": 8}, ("OY", "OX"), {"I": 2, "W": 0, "O": 2},
                    False)
    return nest, whole, bands, cols


def test_planar_dma_chunks_by_hand():
    nest, whole, bands, cols = _three_schedules("NCHW")
    assert nest.planar and nest.layouts["W"] == "OHWI"
    # K tiles of whole planes: output channels 0-15 are one contiguous run
    assert whole.transfers["O"] == (2, 16 * 16 * 16, 1)
    assert whole.transfers["I"] == (1, 8 * 18 * 18, 1)
    # row bands: each channel's rows are one run; 4 output rows read 6 input rows
    assert bands.transfers["O"][2] == 32 and bands.transfers["I"][2] == 8
    # column tiles: a run per row of each channel
    assert cols.transfers["O"][2] == 32 * 4 and cols.transfers["I"][2] == 8 * 6
    # the NHWC nest counts runs of channels instead
    _, nhwc, _, _ = _three_schedules("NHWC")
    assert nhwc.transfers["O"][2] == 16 * 16


def test_nhcw_dma_chunks_by_hand():
    # planes cut in rows: row y of channel c at (y * C + c) * W, in L2 and in the L1 tile
    nest, whole, bands, cols = _three_schedules("NHCW")
    assert nest.planar and nest.rows_outermost
    # every channel, whole rows: one run; half the channels: a run per row
    assert whole.transfers["O"] == (2, 16 * 16 * 16, 16)
    assert whole.transfers["I"] == (1, 8 * 18 * 18, 1)
    assert bands.transfers["O"][2] == 1 and bands.transfers["I"][2] == 1
    assert cols.transfers["O"][2] == 32 * 4 and cols.transfers["I"][2] == 8 * 6


def test_a_strided_layer_as_wide_as_its_output_copies_whole_rows():
    # a 1x1 stride-2 convolution reads 31 of 32 columns; in channel planes the tile copies
    # whole rows (one run each), and whole planes when it is as high as the output too
    nest = LoopNest("conv2d", K=16, C=16, OY=16, OX=16, IY=32, IX=32, stride=(2, 2))
    assert nest.input_extent(16, 16) == (31, 31)
    planar = nest.with_activation_layout("NCHW")
    assert planar.input_extent(16, 16) == (32, 32)
    assert planar.input_extent(4, 16) == (7, 32)
    assert planar.input_extent(4, 8) == (7, 15)
    # planes cut in rows: whole rows, never widened to whole planes
    assert nest.with_activation_layout("NHCW").input_extent(16, 16) == (31, 32)
    band = Schedule(planar, {"K": 16, "OY": 4, "OX": 16}, ("OY",), {"I": 1, "W": 0, "O": 1},
                    False)
    assert band.transfers["I"] == (4, 16 * 7 * 32, 16)


def test_dense_layers_keep_their_rows():
    dense = LoopNest("dense", K=10, C=64, OY=1, OX=1)
    assert dense.with_activation_layout("NCHW") is dense


def test_every_layout_a_module_may_ask_for_has_its_permutes():
    from edgebyoc.partition.layouts import LAYOUT_AXES, from_layout, to_layout
    from edgebyoc.target import ACTIVATION_LAYOUTS

    assert tuple(LAYOUT_AXES) == ACTIVATION_LAYOUTS
    x = np.arange(3 * 4 * 5).reshape(1, 3, 4, 5)  # NHWC
    assert x.transpose(to_layout("NHCW")).shape == (1, 3, 5, 4)
    assert x.transpose(to_layout("NCHW")).shape == (1, 5, 3, 4)
    for layout in ACTIVATION_LAYOUTS:
        assert np.array_equal(x.transpose(to_layout(layout)).transpose(from_layout(layout)), x)


def test_activation_layout_is_checked():
    with pytest.raises(ValueError, match="activation_layout must be one of 'NHWC', 'NCHW', 'NHCW', not 'NC4HW4'"):
        ExecModule("npu", activation_layout="NC4HW4")


def test_box_offsets_in_the_header_match_numpy(tmp_path):
    """``edgebyoc_box_offset`` of the C header against numpy's NCHW / NHWC indexing."""
    import subprocess  # noqa: PLC0415
    from importlib import resources  # noqa: PLC0415

    include = resources.files("edgebyoc.templates")
    source = tmp_path / "offsets.c"
    source.write_text('#include <stdio.h>\n#include "edgebyoc_match.h"\nint main(void) {\n'
                      '  edgebyoc_layer_t L = {0};\n  edgebyoc_box_t b = {2, 1, 3, 4, 5, 6};\n'
                      '  int layout;\n  for (layout = 0; layout < 3; ++layout) {\n'
                      '    L.act_layout = layout;\n'
                      '    printf("%zu %zu\\n", edgebyoc_box_offset(&L, b, 1, 3, 2),'
                      ' edgebyoc_box_offset(&L, b, 4, 7, 5));\n  }\n  return 0;\n}\n')
    binary = tmp_path / "offsets"
    subprocess.run(["cc", "-std=c99", "-Wall", "-Werror", f"-I{include}", str(source), "-o",
                    str(binary)], check=True)
    lines = subprocess.run([str(binary)], capture_output=True, text=True,
                           check=True).stdout.split()
    nhwc = np.arange(5 * 6 * 4).reshape(5, 6, 4)  # box: ny=5, nx=6, nk=4
    nchw = np.arange(4 * 5 * 6).reshape(4, 5, 6)
    nhcw = np.arange(5 * 4 * 6).reshape(5, 4, 6)
    assert [int(v) for v in lines] == [nhwc[0, 0, 0], nhwc[3, 4, 3], nchw[0, 0, 0],
                                       nchw[3, 3, 4], nhcw[0, 0, 0], nhcw[3, 3, 4]]
    header = (include / "edgebyoc_match.h").read_text()
    assert re.search(r"EDGEBYOC_NCHW = 1", header) and re.search(r"EDGEBYOC_NHCW = 2", header)


def test_a_host_tensor_two_regions_read_is_permuted_once():
    # main: x -> relu (host) -> two NCHW regions reading its result, their results added
    import tvm
    from tvm import relax

    from edgebyoc.partition.layouts import planar_boundaries

    ty = relax.TensorType([1, 8, 8, 4], "float32")
    builder = relax.BlockBuilder()
    regions = []
    for name in ("region_a", "region_b"):
        param = relax.Var("x", ty)
        with builder.function(name, [param], attrs={"global_symbol": name}):
            with builder.dataflow():
                out = builder.emit_output(relax.op.nn.relu(param))
            builder.emit_func_output(out)
        regions.append(builder.get().get_global_var(name))
    x = relax.Var("x", ty)
    with builder.function("main", [x]):
        with builder.dataflow():
            y = builder.emit(relax.op.nn.relu(x))
            a, b = (builder.emit(relax.Call(gv, [y])) for gv in regions)
            out = builder.emit_output(relax.op.add(a, b))
        builder.emit_func_output(out)
    mod, added, removed = planar_boundaries(builder.get(), {"region_a", "region_b"})
    permutes = [b.value for block in mod["main"].body.blocks for b in block.bindings
                if isinstance(b.value, relax.Call) and isinstance(b.value.op, tvm.ir.Op)
                and b.value.op.name == "relax.permute_dims"]
    # one NHWC -> NCHW of relu's result for both regions, one NCHW -> NHWC of each result
    assert (added, removed, len(permutes)) == (3, 0, 3)
    assert [tuple(int(a) for a in p.attrs.axes) for p in permutes].count((0, 3, 1, 2)) == 1
    data = np.random.default_rng(0).standard_normal((1, 8, 8, 4)).astype("float32")
    executable = tvm.relax.build(mod, target="llvm")
    vm = tvm.relax.VirtualMachine(executable, tvm.cpu())
    got = vm["main"](tvm.runtime.tensor(data)).numpy()
    np.testing.assert_array_equal(got, 2 * np.maximum(data, 0))
