"""Depth-first row streaming of C projects (memory.streaming, issue #18): the layer template in
row bands through ring buffers, the planner's rings and schedule, and whole projects that
must stay bit-exact against their untiled build."""

import subprocess
from pathlib import Path

import numpy as np
import pytest

import edgebyoc
from edgebyoc.api import Cost, ExecModule, MemoryLevel, RowWindow
from edgebyoc.api.match import (IntegerLayer, LoopNest, host_binding, layer_files, search,
                                translation_unit)
from edgebyoc.api.quant import quantize_multipliers
from edgebyoc.frontend import random_inputs

MODELS = Path(__file__).resolve().parents[2] / "shared" / "models" / "mlperf_tiny"
SANITIZE = ["-fsanitize=address,undefined", "-fno-sanitize-recover=all"]

MODULE = ExecModule("accel", memory_levels=(
    MemoryLevel("L1", size_bytes=4 * 1024, read_bytes_per_cycle=8, write_bytes_per_cycle=8),
    MemoryLevel("L2", size_bytes=512 * 1024, read_bytes_per_cycle=4,
                write_bytes_per_cycle=4)))


def _carray(name, ctype, values):
    return f"static const {ctype} {name}[] = {{{', '.join(str(int(v)) for v in np.ravel(values))}}};\n"


@pytest.mark.parametrize("layout", ["NHWC", "NCHW", "NHCW"])
@pytest.mark.parametrize("kind, stride", [("conv2d", 1), ("conv2d", 2), ("depthwise", 2)])
def test_layer_in_row_bands_through_rings_is_bit_exact(tmp_path, layout, kind, stride):
    """The generic layer template computes any band of output rows with its input and output
    in ring buffers (row y at y % ring, wrapping inside a DMA), giving the whole layer's
    bytes; built with -Wall -Wextra -Werror under ASan and UBSan."""
    rng = np.random.default_rng(stride)
    c = 8
    k = c if kind == "depthwise" else 12
    iy, ix = 11, 6
    oy, ox = (iy + 2 - 3) // stride + 1, (ix + 2 - 3) // stride + 1
    nest = LoopNest(kind, K=k, C=c, OY=oy, OX=ox, FY=3, FX=3, IY=iy, IX=ix,
                    stride=(stride, stride), padding=(1, 1, 1, 1)).with_activation_layout(layout)
    multiplier, shift = quantize_multipliers(np.full(k, 0.003))
    weight = rng.integers(-127, 128, (3, 3, 1 if kind == "depthwise" else c, k))
    layer = IntegerLayer(nest, (0,), weight=weight, kernel_layout="HWIO",
                         bias=rng.integers(-500, 500, k).astype(np.int32),
                         multiplier=multiplier, shift=shift, zp_in=-3, zp_out=5)
    # the schedule with the most row tiles: bands cut through tiles and tiles through bands
    result = search(nest, 4096, lambda s: Cost(latency_cycles=1 / s.trips("OY")))
    files = layer_files(MODULE, "layer", layer, result.schedule, {"host": host_binding()},
                        {}, None, 1)
    from edgebyoc.api.match import module_weights
    weights = module_weights(layer)
    source = translation_unit({**files, "layers/layer.c": files["layers/layer.c"]},
                              "layers/layer.c", "host")
    x = rng.integers(-128, 128, (iy, ix, c)).astype(np.int8)
    if layout == "NCHW":
        x = np.ascontiguousarray(x.transpose(2, 0, 1))
    if layout == "NHCW":
        x = np.ascontiguousarray(x.transpose(0, 2, 1))
    ring_in, ring_out, band = 5, 3, 2
    row_in, row_out = ix * c, ox * k
    # NHWC and NHCW rows are contiguous; in NCHW planes, row r of channel j is at
    # (j * rows + r) * width
    if layout != "NCHW":
        copy_in = f"memcpy(rin + (r % {ring_in}) * {row_in}, x + r * {row_in}, {row_in});"
        copy_out = f"memcpy(z + r * {row_out}, rout + (r % {ring_out}) * {row_out}, {row_out});"
    else:
        copy_in = (f"for (j = 0; j < {c}; ++j) memcpy(rin + (j * {ring_in} + r % {ring_in}) * "
                   f"{ix}, x + (j * {iy} + r) * {ix}, {ix});")
        copy_out = (f"for (j = 0; j < {k}; ++j) memcpy(z + (j * {oy} + r) * {ox}, rout + "
                    f"(j * {ring_out} + r % {ring_out}) * {ox}, {ox});")
    driver = source + _carray("x", "int8_t", x) + _carray("w", "int8_t", weights) + \
        _carray("b", "int32_t", layer.bias) + _carray("m", "int32_t", layer.multiplier) + \
        _carray("s", "int32_t", layer.shift) + f"""
#include <stdio.h>
int main(void) {{
  static int8_t y[{oy * ox * k}], z[{oy * ox * k}], rin[{ring_in * row_in}], rout[{ring_out * row_out}];
  int y0, r, j;
  (void)j;
  if (layer(x, NULL, w, b, m, s, y, NULL) != 0) return 2;
  for (y0 = 0; y0 < {oy}; y0 += {band}) {{
    int y1 = y0 + {band} > {oy} ? {oy} : y0 + {band};
    int first = y0 * {stride} - 1 < 0 ? 0 : y0 * {stride} - 1;
    int end = (y1 - 1) * {stride} + 2 > {iy} ? {iy} : (y1 - 1) * {stride} + 2;
    edgebyoc_band_t rows = {{y0, y1, {ring_in}, 0, {ring_out}}};
    for (r = first; r < end; ++r) {{ {copy_in} }}
    if (layer(rin, NULL, w, b, m, s, rout, &rows) != 0) return 3;
    for (r = y0; r < y1; ++r) {{ {copy_out} }}
  }}
  for (r = 0; r < {oy * ox * k}; ++r) if (y[r] != z[r]) {{ printf("%d\\n", r); return 4; }}
  return 0;
}}
"""
    src = tmp_path / "layer.c"
    src.write_text(driver)
    exe = tmp_path / "layer"
    # -O2 too: its flow analysis warns where -Og does not (maybe-uninitialized)
    subprocess.run(["gcc", "-std=c99", "-Wall", "-Wextra", "-Werror", "-O2", "-c", "-o",
                    str(tmp_path / "layer.o"), str(src)], check=True)
    subprocess.run(["gcc", "-std=c99", "-Wall", "-Wextra", "-Werror", "-g", *SANITIZE, "-o",
                    str(exe), str(src)], check=True)
    done = subprocess.run([str(exe)], capture_output=True, text=True)
    assert done.returncode == 0, (done.returncode, done.stdout, done.stderr)
    assert result.schedule.trips("OY") > 1


def test_row_window_rows():
    window = RowWindow(0, kernel=3, stride=2, pad_top=1)
    assert window.rows(0, 1, 16) == (0, 2)  # the top padding row is not read
    assert window.rows(7, 8, 16) == (13, 16)
    assert window.rows(7, 8, 15) == (13, 15)  # clipped to the input
    with pytest.raises(ValueError, match="axis 1 or 2"):
        RowWindow(0, axis=3)


# -- whole projects ---------------------------------------------------------------------------

RESNET8 = MODELS / "pretrainedResnet_quant.tflite"
SANITIZE_FLAGS = "-Og -g " + " ".join(SANITIZE)  # -Og: edgebyoc.testing.cproject.SANITIZE_FLAGS says why


def _planar_registry(make_plugin, isolated_registry, layout):
    from test_layouts import PLANAR_PLUGIN

    return isolated_registry(make_plugin("planar", PLANAR_PLUGIN.replace("{layout}", layout)))


@pytest.mark.parametrize("layout, total, rings, overlapped", [
    # channels-last: the input's rows are reused by the chain's output; 3 rows under a 3x3
    # filter, 1 under the residual adds and 1x1 convolutions
    ("NHWC", 15_872, {3: 6, 1: 5}, "t0"),
    # channel planes: the permuted input streamed too, no overlap of planes with rows
    ("NCHW", 16_672, {3: 7, 1: 6}, "t0"),
    # planes cut in rows: rows outermost, so the chain's output is written over its input's
    # dead rows as in NHWC (here the input permuted to NHCW, t1: as small a plan)
    ("NHCW", 15_872, {3: 6, 1: 5}, "t1")])
def test_resnet8_streams_depth_first_bit_exactly(make_plugin, isolated_registry, tmp_path,
                                                 layout, total, rings, overlapped):
    registry = _planar_registry(make_plugin, isolated_registry, layout)
    options = {"l1_kb": 8}
    untiled = edgebyoc.compile(str(RESNET8), target="planar", options=options, dfs=False,
                               io_in_arena=True, registry=registry)
    streamed = edgebyoc.compile(str(RESNET8), target="planar", options=options, dfs=True,
                                io_in_arena=True, registry=registry)
    assert untiled.project.total_activation_bytes == 49_152  # TFLite Micro's arena
    assert streamed.project.total_activation_bytes == total
    info = streamed.report["memory"]
    assert info["enabled"] and info["mode"] == "on" and info["kind"] == "c_project"
    # the toy plugin prices no host operator: no whole-network latency to compare
    assert info["reason"] == (f"1 chain(s) of layers streamed in bands of 1 row(s): {total} "
                              f"bytes of activation RAM against 49152 untiled")
    chain = info["chains"][0]
    held = list(chain["rings"].values())
    assert {rows: held.count(rows) for rows in set(held)} == rings
    # the chain's output is written over the input's rows already read (with planes too:
    # that chain begins and ends with the transposes from and to channels-last)
    assert chain["overlap"]["input"] == overlapped and chain["overlap"]["offset_bytes"] >= 0
    assert info["extra_macs"] == 0
    # each call loads its layer's weights again: the regions' cycles grow
    assert info["predicted_extra_cycles"] > 0
    regions = info["streamed_regions"]
    assert sum(r["cycles"] - r["untiled_cycles"] for r in regions) == \
        pytest.approx(info["predicted_extra_cycles"], abs=1)
    assert sum(r["calls"] for r in regions) <= chain["calls"]
    # every call loads its layer's weights (at an 8 kB L1 some whole layers reload them per
    # tile too); the toy plugin's costs have no breakdown
    first = regions[0]
    assert first["weight_bytes"] == [first["calls"] * 624, 624] and first["parts"] == {}
    assert all(r["weight_bytes"][0] >= r["weight_bytes"][1] for r in regions)
    inputs = random_inputs(streamed.inputs, seed=3)
    want = untiled.run(inputs)
    got = streamed.run(inputs)
    assert all(np.array_equal(want[k], got[k]) for k in want)
    binary = streamed.project.make(tmp_path / "streamed", cflags=SANITIZE_FLAGS,
                                   ldflags=SANITIZE_FLAGS)
    out = streamed.project.run_binary(binary, list(inputs.values()))
    assert all(np.array_equal(a, b) for a, b in zip(out, want.values()))
    network = streamed.project.files["network.c"]
    assert "streamed depth-first in" in network and "_rows(data, y0, y1, rings)" in network
    # every layer shares the one emulated L1 (l1_kb 8), defined in one file of the project
    assert streamed.project.host_l1_bytes == 8 * 1024
    defined = [path for path, text in streamed.project.files.items()
               if path.endswith(".c") and "unsigned char edgebyoc_host_l1[" in text]
    assert defined == ["bindings/host/edgebyoc_host_l1.c"]
    assert "edgebyoc_host_l1[8192]" in streamed.project.files[defined[0]]


def test_a_weight_memory_keeps_each_chains_weights_for_all_its_bands(make_plugin,
                                                                     isolated_registry, tmp_path):
    """A module with a weight memory (``ExecModule.weight_memory``, API 2.10): at the same
    arena, each streamed chain keeps its layers' weights there (ResNet-8's 80,752 B do not
    fit 64 kB, so its chain is cut where the arena allows: each part's do), only the first
    call of each layer loads them, the predicted extra cycles drop, and the C project stays
    bit-exact under ASan and UBSan, the two parts' places in the weight memory overlapping."""
    from test_layouts import PLANAR_PLUGIN

    kept = PLANAR_PLUGIN.replace("{layout}", "NHWC").replace(
        'memory_levels=(MemoryLevel("L1", 32 * 1024, size_option="l1_kb"),',
        'memory_levels=(MemoryLevel("L1", 32 * 1024, size_option="l1_kb", '
        'operands=("I", "O")), MemoryLevel("WMEM", 64 * 1024, operands=("W",)),').replace(
        'activation_layout="NHWC")', 'activation_layout="NHWC", weight_memory="WMEM")')
    assert 'weight_memory="WMEM"' in kept
    loads = isolated_registry(make_plugin("planar_loads", kept.replace('weight_memory="WMEM"',
                                                                 'weight_memory=""')))
    registry = isolated_registry(make_plugin("planar", kept))
    untiled = edgebyoc.compile(str(RESNET8), target="planar", dfs=False, io_in_arena=True,
                               registry=registry)
    streamed = edgebyoc.compile(str(RESNET8), target="planar", dfs=True, io_in_arena=True,
                                registry=registry)
    reloaded = edgebyoc.compile(str(RESNET8), target="planar", dfs=True, io_in_arena=True,
                                registry=loads)
    info, before = streamed.report["memory"], reloaded.report["memory"]
    assert streamed.project.total_activation_bytes == \
        reloaded.project.total_activation_bytes == 15_872
    assert len(before["chains"]) == 1 and not before["chains"][0]["resident_weights"]
    assert len(info["chains"]) == 2
    for chain in info["chains"]:
        places = sorted((r["offset_bytes"], r["bytes"]) for r in chain["resident_weights"])
        assert places and all(o % 8 == 0 for o, _ in places)
        assert all(a + n <= b for (a, n), (b, _) in zip(places, places[1:]))  # no overlap
        assert places[-1][0] + places[-1][1] <= 64 * 1024
    assert 0 < streamed.project.weight_memory_bytes <= 64 * 1024
    # a resident layer's weights move once per chain; the others' once per call
    for region in info["streamed_regions"]:
        assert region["weight_bytes"][0] == region["weight_bytes"][1]
    assert 0 < info["predicted_extra_cycles"] < 0.5 * before["predicted_extra_cycles"]
    network = streamed.project.files["network.c"]
    assert network.count("_layer_resident.base = edgebyoc_weight_memory_npu + ") == \
        sum(len(c["resident_weights"]) for c in info["chains"])
    inputs = random_inputs(streamed.inputs, seed=4)
    want = untiled.run(inputs)
    binary = streamed.project.make(tmp_path / "streamed", cflags=SANITIZE_FLAGS,
                                   ldflags=SANITIZE_FLAGS)
    out = streamed.project.run_binary(binary, list(inputs.values()))
    assert all(np.array_equal(a, b) for a, b in zip(out, want.values()))


def test_memory_budget_streams_just_enough_or_names_the_smallest_total(make_plugin,
                                                                        isolated_registry):
    from edgebyoc.api import CompileError

    registry = _planar_registry(make_plugin, isolated_registry, "NHWC")
    options = {"l1_kb": 32}
    fitted = edgebyoc.compile(str(RESNET8), target="planar", options=options,
                              memory_budget=30_000, io_in_arena=True, registry=registry)
    info = fitted.report["memory"]
    assert info["mode"] == "budget" and info["enabled"]
    assert 15_872 < fitted.project.total_activation_bytes <= 30_000
    # the widest band that fits: fewer calls than one row each
    assert info["band_rows"] > 1
    assert info["chains"][0]["calls"] < 224
    with pytest.raises(CompileError, match=r"the C project needs 15872 bytes of activation "
                                           r"RAM: .*; depth-first streaming: 1 chain\(s\) of "
                                           r"layers streamed in bands of 1 row\(s\): 15872 "
                                           r"bytes of activation RAM against 49152 untiled"):
        edgebyoc.compile(str(RESNET8), target="planar", options=options,
                         memory_budget=12_000, io_in_arena=True, registry=registry)


def test_automatic_mode_streams_only_when_it_saves_memory_at_the_same_predicted_speed(
        make_plugin, isolated_registry):
    registry = _planar_registry(make_plugin, isolated_registry, "NHWC")
    compiled = edgebyoc.compile(str(RESNET8), target="planar", options={"l1_kb": 32},
                                io_in_arena=True, registry=registry)
    info = compiled.report["memory"]
    # no whole-network prediction (the toy plugin prices no host operator): the memory rule
    assert info["mode"] == "auto" and info["enabled"]
    assert info["decision"] == "cost model (automatic mode)"
    assert compiled.project.total_activation_bytes <= 0.8 * 49_152


def test_the_report_says_what_was_streamed(make_plugin, isolated_registry):
    registry = _planar_registry(make_plugin, isolated_registry, "NHWC")
    compiled = edgebyoc.compile(str(RESNET8), target="planar", options={"l1_kb": 32},
                                dfs=True, registry=registry)
    from edgebyoc.report import render_markdown

    text = render_markdown(compiled.report)
    assert "Depth-first streaming of the C project (on; decided by forced (--dfs): the " \
        "smallest activation RAM): 1 chain(s) of layers streamed in bands of 1 row(s): " \
        in text and "1.00x MACs" in text
    off = edgebyoc.compile(str(RESNET8), target="planar", options={"l1_kb": 32}, dfs=False,
                           registry=registry)
    assert off.report["memory"]["reason"] == "turned off"
    assert not off.report["memory"]["enabled"]


@pytest.mark.slow
def test_high_resolution_int8_mobilenet_streams_several_fold(make_plugin, isolated_registry,
                                                             tmp_path):
    """MobileNetV1-0.25 at 224x224, quantized by onnxruntime (QDQ, int8 input and output):
    its early 112x112 layers dominate the arena, and streaming them cuts it several-fold,
    bit-exactly, clean under ASan and UBSan."""
    from edgebyoc.testing.conformance import int8_mobilenet_v1

    registry = _planar_registry(make_plugin, isolated_registry, "NHWC")
    model = int8_mobilenet_v1(224)
    untiled = edgebyoc.compile(model, target="planar", dfs=False, registry=registry)
    streamed = edgebyoc.compile(model, target="planar", dfs=True, registry=registry)
    before, after = untiled.project.arena.size_bytes, streamed.project.arena.size_bytes
    assert before == 351_232 and after <= before / 4, (before, after)
    # the caller's int8 input (150,528 bytes) comes on top of both
    assert streamed.project.io_bytes == untiled.project.io_bytes == 224 * 224 * 3 + 10
    inputs = random_inputs(streamed.inputs, seed=5)
    want, got = untiled.run(inputs), streamed.run(inputs)
    assert all(np.array_equal(want[k], got[k]) for k in want)
    binary = streamed.project.make(tmp_path / "mobilenet", cflags=SANITIZE_FLAGS,
                                   ldflags=SANITIZE_FLAGS)
    out = streamed.project.run_binary(binary, list(inputs.values()))
    assert all(np.array_equal(a, b) for a, b in zip(out, want.values()))



def test_a_chain_reads_what_it_writes_through_windows_and_never_through_a_view():
    from edgebyoc.codegen.cgraph import CTensor, Step
    from edgebyoc.memory.streaming import chain_valid, make_chain

    x = CTensor("x", "int8", (1, 8, 4, 2), "arena", first=0, last=1)
    a = CTensor("a", "int8", (1, 8, 4, 2), "arena", first=1, last=2)
    view = CTensor("v", "int8", (1, 4, 8, 2), "arena", root=a)
    b = CTensor("b", "int8", (1, 8, 4, 2), "arena", first=2, last=3)

    def step(number, output, reads, windows):
        return Step(number, "f", output, reads, [], windows=windows)

    first = step(1, a, [x], [(x, RowWindow(0, kernel=3, pad_top=1))])
    direct = step(2, b, [a], [(a, RowWindow(0, kernel=3, pad_top=1))])
    assert chain_valid([first, direct], 0, 1)
    chain = make_chain([first, direct], 0, 1, 1, set())
    # a is only read by the chain: a ring of 3 rows (a 3x3 window); each row computed once
    assert chain.rings == {"a": 3} and len(chain.events) == 8 + 8
    through_view = step(2, b, [view], [(view, RowWindow(0))])
    assert not chain_valid([first, through_view], 0, 1)
    whole = step(2, b, [a, x], [(x, RowWindow(0))])  # a read whole
    assert not chain_valid([first, whole], 0, 1)


def test_the_project_is_lowered_and_emitted_once_per_compile(make_plugin, isolated_registry,
                                                              monkeypatch):
    """Every band size is planned on the one step graph; the files are written once, for the
    plan the memory stage chose (the automatic mode tries four band sizes)."""
    from edgebyoc import pipeline

    registry = _planar_registry(make_plugin, isolated_registry, "NHWC")
    calls = {"lower": 0, "emit": 0}

    def counting(name, function):
        def wrapped(*args, **kwargs):
            calls[name] += 1
            return function(*args, **kwargs)
        return wrapped

    monkeypatch.setattr(pipeline, "lower_project", counting("lower", pipeline.lower_project))
    monkeypatch.setattr(pipeline, "emit_project", counting("emit", pipeline.emit_project))
    for dfs in (None, True, False):
        edgebyoc.compile(str(RESNET8), target="planar", options={"l1_kb": 32}, dfs=dfs,
                         io_in_arena=True, registry=registry)
    assert calls == {"lower": 3, "emit": 3}


def test_a_resident_layer_loads_its_weights_once_per_chain(tmp_path):
    """A layer whose schedule loads all its weights once per call (``fill["W"] == 0``) keeps
    them at ``<symbol>_resident.base`` while that is set: the first band call loads them, the
    later ones read them there (given zeroed weights in L2, the bands still give the whole
    layer's bytes); with ``base`` NULL a band loads its own copy again (the zeroed weights
    then change the output). Built with -Werror under ASan and UBSan."""
    from edgebyoc.codegen.layer import resident_weight_bytes

    rng = np.random.default_rng(5)
    c, k, iy, ix = 8, 12, 9, 6
    nest = LoopNest("conv2d", K=k, C=c, OY=iy, OX=ix, FY=3, FX=3, IY=iy, IX=ix,
                    padding=(1, 1, 1, 1))
    multiplier, shift = quantize_multipliers(np.full(k, 0.003))
    layer = IntegerLayer(nest, (0,), weight=rng.integers(-127, 128, (3, 3, c, k)),
                         kernel_layout="HWIO", bias=rng.integers(-500, 500, k).astype(np.int32),
                         multiplier=multiplier, shift=shift, zp_in=-3, zp_out=5)
    result = search(nest, 4096, lambda s: Cost(latency_cycles=(1e6 if s.fill["W"] else 0)
                                               + 1 / s.trips("OY")))
    schedule = result.schedule
    assert schedule.fill["W"] == 0 and schedule.trips("OY") > 1
    from edgebyoc.api.match import module_weights
    weights = module_weights(layer)
    size = resident_weight_bytes("layer", layer, schedule, int(weights[0].size))
    assert size == 3 * 3 * c * k + 12 * k  # 864 weight bytes (8-aligned), then 3 int32 arrays
    files = layer_files(MODULE, "layer", layer, schedule, {"host": host_binding()}, {}, None, 1)
    assert "edgebyoc_resident_t layer_resident = {NULL, 0};" in files["layers/layer.c"]
    source = translation_unit(files, "layers/layer.c", "host")
    x = rng.integers(-128, 128, (iy, ix, c)).astype(np.int8)
    row = ix * c
    driver = source + _carray("x", "int8_t", x) + _carray("w", "int8_t", weights) + \
        _carray("b", "int32_t", layer.bias) + _carray("m", "int32_t", layer.multiplier) + \
        _carray("s", "int32_t", layer.shift) + f"""
#include <stdio.h>
static int8_t wmem[{size}] __attribute__((aligned(8)));
static const int8_t w0[{weights.size}];
static const int32_t b0[{k}], m0[{k}], s0[{k}];
int main(void) {{
  static int8_t y[{iy * ix * k}], z[{iy * ix * k}];
  int y0, r;
  if (layer(x, NULL, w, b, m, s, y, NULL) != 0) return 2;
  layer_resident.base = wmem; layer_resident.loaded = 0;
  for (y0 = 0; y0 < {iy}; ++y0) {{
    edgebyoc_band_t rows = {{y0, y0 + 1, 0, 0, 0}};
    /* only the first call may read the weights in L2: the others are given zeros */
    if (layer(x, NULL, y0 ? w0 : w, y0 ? b0 : b, y0 ? m0 : m, y0 ? s0 : s, z, &rows) != 0) return 3;
    if (!layer_resident.loaded) return 4;
  }}
  for (r = 0; r < {iy * ix * k}; ++r) if (y[r] != z[r]) {{ printf("%d\\n", r); return 5; }}
  layer_resident.base = NULL;
  {{
    edgebyoc_band_t rows = {{1, 2, 0, 0, 0}};
    if (layer(x, NULL, w0, b0, m0, s0, z, &rows) != 0) return 6;
  }}
  for (r = {row // c * k}; r < {2 * row // c * k}; ++r) if (y[r] != z[r]) return 0;
  return 7; /* not resident: the zeroed weights were loaded and must change the row */
}}
"""
    src = tmp_path / "resident.c"
    src.write_text(driver)
    exe = tmp_path / "resident"
    subprocess.run(["gcc", "-std=c99", "-Wall", "-Wextra", "-Werror", "-g", *SANITIZE, "-o",
                    str(exe), str(src)], check=True)
    done = subprocess.run([str(exe)], capture_output=True, text=True)
    assert done.returncode == 0, (done.returncode, done.stdout, done.stderr)


def test_resident_layers_fit_the_weight_memory_beside_the_largest_other_buffer():
    """``resident_layers``: the layers saving the most weight bytes first, each kept while
    the resident weights plus the largest weight buffer of the chain's other layers on the
    module fit its weight memory; places 8-byte aligned; a layer called once, or offering
    nothing, stays out."""
    from edgebyoc.memory.streaming import Chain, WeightOffer, resident_layers

    events = tuple((i, y, y + 1) for y in range(4) for i in (0, 1, 2)) + ((3, 0, 1),)
    chain = Chain(0, 3, 1, events)

    def offer(name, nbytes, buffer):
        return WeightOffer(name, nbytes, "digital", 1000, buffer)

    # 0: 500 B (saves 1500), 1: 301 B (saves 903), 2: 450 B (saves 1350), 3: called once
    offers = {0: offer("a", 500, 500), 1: offer("b", 301, 301), 2: offer("c", 450, 450),
              3: offer("d", 100, 100)}
    kept = resident_layers(chain, offers)
    # a first (500 + the largest other, c's 450 = 950 <= 1000); c next would need
    # 500 + 456 + b's 301 > 1000; b: 500 + 304 + c's 450 > 1000: only a
    assert [(r.variable, r.offset, r.nbytes) for r in kept] == [("a", 0, 500)]
    roomy = {i: WeightOffer(o.variable, o.nbytes, o.module, 2000, o.buffer_bytes)
             for i, o in offers.items()}
    kept = resident_layers(chain, roomy)
    assert [(r.index, r.offset) for r in kept] == [(0, 0), (1, 960), (2, 504)]
    assert resident_layers(chain, {1: WeightOffer("", 0, "digital", 2000, 301)}) == ()


def test_weight_offers_take_the_weight_memorys_size_option():
    """``ProjectPricer.weight_offers``: a weight memory with a ``size_option`` offers the size
    the compile's options give it, as the schedule search does, not its declared size."""
    from types import SimpleNamespace

    from edgebyoc.api import ExecModule, MemoryLevel
    from edgebyoc.memory_stage import ProjectPricer

    module = ExecModule(name="npu", memory_levels=(
        MemoryLevel("L1", 32 * 1024, operands=("I", "O")),
        MemoryLevel("WMEM", 64 * 1024, operands=("W",), size_option="wmem_kb"),
        MemoryLevel("L2", 512 * 1024)), weight_memory="WMEM")
    schedule = SimpleNamespace(operand_l1_bytes=lambda operand: 4096)
    region = SimpleNamespace(symbols=["npu_r0"], candidates=[
        SimpleNamespace(module=module, schedule=schedule)])
    graph = SimpleNamespace(steps=[SimpleNamespace(symbol="npu_r0", region=SimpleNamespace(
        resident_weights="npu_r0_layer_resident", resident_weight_bytes=3000))])
    partition = SimpleNamespace(regions=[region])
    capacities = [ProjectPricer(partition, None, options).weight_offers(graph)[0].capacity
                  for options in (None, {"wmem_kb": 16}, {"wmem_kb": None})]
    assert capacities == [64 * 1024, 16 * 1024, 64 * 1024]
