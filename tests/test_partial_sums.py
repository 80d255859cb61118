"""Input-channel tiling with partial sums (``ExecModule.accumulator_bits``): the search cuts C of
conv2d and dense layers when a module declares an int32 accumulator, the C loop innermost, the
accumulator counted in L1; the layer template and the host emulation's ``kernel_partial``
accumulate over the slices and requantize once, bit-exactly against the integer reference."""

import random
from pathlib import Path

import pytest

from edgebyoc.api import Cost, ExecModule
from edgebyoc.api.match import LoopNest, search
from edgebyoc.api.testing import check_c_project, compile, verify
from edgebyoc.dse import exhaustive
from edgebyoc.errors import EdgebyocError

MODELS = Path(__file__).resolve().parents[2] / "shared" / "models" / "mlperf_tiny"

ACCUMULATING_PLUGIN = '''
from edgebyoc.api import Cost, ExecModule, MemoryLevel, PatternEntry, Target, TargetOption, hookimpl
from edgebyoc.api.match import host_binding, layer_codegen, schedule_cost
from edgebyoc.api.quant import add_pattern, conv2d_pattern, dense_pattern, int8_import_passes

NPU = ExecModule("npu", "int8 array with an int32 accumulator",
                 memory_levels=(MemoryLevel("L1", 32 * 1024, double_buffering=True,
                                            size_option="l1_kb"),
                                MemoryLevel("L2", 1 << 20)),
                 spatial_mapping={"K": 64, "C": 8}, max_region_composites=1, min_region_macs=0,
                 activation_layout="{layout}", accumulator_bits={bits},
                 partial_sum_dims={dims})
TARGET = Target("accu", "partial sums", modules=(NPU,), c_project=True,
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
    reduce = nest.FY * nest.FX * (1 if nest.channelwise else s.tile("C"))
    ops = s.iterations * (s.tile("K") * s.tile("OY") * s.tile("OX") * reduce / 32 + 30)
    mem = sum(n * (size / 8 + 20 * chunks) for n, size, chunks in s.transfers.values())
    return Cost(max(ops, mem) if s.double_buffer else ops + mem)


@hookimpl
def edgebyoc_cost(target, module, workload, schedule, options):
    return schedule_cost(workload, schedule, price)


@hookimpl
def edgebyoc_runtime_apis(target, module, flavour):
    if flavour != "host":
        return None
    binding = host_binding()
    if {drop}:
        computation = {k: v for k, v in binding.computation.items() if k != "kernel_partial"}
        binding = type(binding)("host", platform=binding.platform, memory=binding.memory,
                                synchronization=binding.synchronization,
                                computation=computation, headers=binding.headers)
    return binding


@hookimpl
def edgebyoc_codegen(target, module, region, schedule, context):
    return layer_codegen(module, region, schedule, context, weight_block={block})
'''


def _registry(make_plugin, isolated_registry, layout="NHWC", bits=32, drop=False, block=1,
              dims=("C",)):
    source = ACCUMULATING_PLUGIN.replace("{layout}", layout).replace("{bits}", str(bits)) \
        .replace("{drop}", str(drop)).replace("{block}", str(block)) \
        .replace("{dims}", repr(tuple(dims)))
    return isolated_registry(make_plugin("accu", source))


def _price(nest, s):
    reduce = nest.FY * nest.FX * (1 if nest.channelwise else s.tile("C"))
    ops = s.iterations * (s.tile("K") * s.tile("OY") * s.tile("OX") * reduce / 16 + 40)
    mem = sum(n * (size / 8 + 27 * chunks) for n, size, chunks in s.transfers.values())
    return Cost(latency_cycles=max(ops, mem) if s.double_buffer else ops + mem)


def test_the_search_cuts_c_only_with_an_accumulator_and_stays_exact():
    pointwise = LoopNest("conv2d", K=64, C=64, OY=25, OX=5, IY=25, IX=5)

    def price(s):
        return _price(pointwise, s)

    without = search(pointwise, 2 * 1024, price, {"K": 32}, True)  # a 32-wide K axis
    assert without.schedule is None and without.smallest_l1 > 2 * 1024
    with_acc = search(pointwise, 2 * 1024, price, {"K": 32}, True, accumulator_bits=32)
    s = with_acc.schedule
    assert s is not None and s.l1_bytes <= 2 * 1024 and s.trips("C") > 1
    assert s.order[-1] == "C" and s.accumulator_bytes == \
        s.tile("K") * s.tile("OY") * s.tile("OX") * 4
    assert s.to_dict()["tiles"]["C"] == s.tile("C")
    # exact against exhaustive enumeration on random workloads of the larger space
    rng = random.Random(3)
    for _ in range(10):  # small enough for exhaustive enumeration to price every candidate
        kind = rng.choice(["conv2d", "conv2d", "dense", "depthwise"])
        k, c = rng.choice([8, 16]), rng.choice([8, 16, 24, 48])
        if kind == "dense":
            nest = LoopNest("dense", K=k, C=c * 4, OY=1, OX=1)
        else:
            f, size = rng.choice([1, 3]), rng.choice([4, 6, 7, 9])  # 7, 9: uneven tiles
            nest = LoopNest(kind, K=k, C=k if kind == "depthwise" else c, OY=size, OX=size,
                            FY=f, FX=f, IY=size, IX=size, padding=(f // 2,) * 4)
        capacity = rng.choice([512, 1024])

        def priced(s, nest=nest):
            return _price(nest, s)

        fast = search(nest, capacity, priced, {"K": 4}, True, 32)
        slow = exhaustive(nest, capacity, priced, {"K": 4}, True, 32)
        assert (fast.cost is None) == (slow.cost is None)
        if fast.cost is not None:
            assert fast.cost.latency_cycles == slow.cost.latency_cycles, nest
        if kind == "depthwise" and fast.schedule is not None:
            assert "C" not in fast.schedule.tiles  # channelwise: nothing to accumulate


def _price_taps(nest, s):
    """``_price`` with the filter taps of a tile (a schedule may cut the filter)."""
    reduce = s.tile("FY") * s.tile("FX") * (1 if nest.channelwise else s.tile("C"))
    ops = s.iterations * (s.tile("K") * s.tile("OY") * s.tile("OX") * reduce / 16 + 40)
    mem = sum(n * (size / 8 + 27 * chunks) for n, size, chunks in s.transfers.values())
    return Cost(latency_cycles=max(ops, mem) if s.double_buffer else ops + mem)


def test_the_search_cuts_the_filter_when_the_module_names_it_and_stays_exact():
    """DS-CNN's first convolution (64 filters of 10x4 over one channel) on a 64-wide K axis:
    its weights need 3.3 kB whole; cutting the filter rows fits 2 kB. The search over every
    reduction loop stays exact against exhaustive enumeration."""
    first = LoopNest("conv2d", K=64, C=1, OY=25, OX=5, FY=10, FX=4, IY=49, IX=10,
                     stride=(2, 2), padding=(4, 1, 5, 2))

    def price(s):
        return _price_taps(first, s)

    channels_only = search(first, 2 * 1024, price, {"K": 64}, True, 32)
    assert channels_only.schedule is None and channels_only.smallest_l1 > 3 * 1024
    filters = search(first, 2 * 1024, price, {"K": 64}, True, 32, ("C", "FY", "FX"))
    s = filters.schedule
    assert s is not None and s.l1_bytes <= 2 * 1024 and s.reduction_trips > 1
    assert [d for d in s.order if d in ("FY", "FX", "C")] == \
        [d for d in ("FY", "FX") if s.trips(d) > 1]  # C = 1 is never cut
    assert s.accumulator_bytes == s.tile("K") * s.tile("OY") * s.tile("OX") * 4
    # the weight buffer holds one filter tile: filled inside the filter loops
    assert s.fill["W"] > max(s.order.index(d) for d in ("FY", "FX") if s.trips(d) > 1)
    assert s.transfers["W"][1] == 64 * s.tile("FY") * s.tile("FX") + 12 * 64
    rng = random.Random(5)
    for _ in range(8):
        f = rng.choice([(3, 3), (5, 1), (2, 4), (3, 1)])
        size, k, c = rng.choice([4, 5, 7]), rng.choice([4, 8]), rng.choice([1, 4, 8])
        nest = LoopNest("conv2d", K=k, C=c, OY=size, OX=size, FY=f[0], FX=f[1], IY=size,
                        IX=size, padding=(f[0] // 2, f[1] // 2, (f[0] - 1) // 2,
                                          (f[1] - 1) // 2))
        capacity = rng.choice([256, 512])

        def priced(s, nest=nest):
            return _price_taps(nest, s)

        dims = ("C", "FY", "FX")
        fast = search(nest, capacity, priced, {"K": 4}, True, 32, dims)
        slow = exhaustive(nest, capacity, priced, {"K": 4}, True, 32, dims)
        assert (fast.cost is None) == (slow.cost is None), nest
        if fast.cost is not None:
            assert fast.cost.latency_cycles == slow.cost.latency_cycles, nest


def test_accumulator_bits_is_validated():
    with pytest.raises(ValueError, match="accumulator_bits must be 0 .* or 32"):
        ExecModule("npu", accumulator_bits=16)
    with pytest.raises(ValueError, match="partial_sum_dims 'K' is not a reduction loop .*"
                                         "allowed: C, FY, FX"):
        ExecModule("npu", accumulator_bits=32, partial_sum_dims=("C", "K"))
    assert ExecModule("npu", partial_sum_dims="FY").partial_sum_dims == ("FY",)


@pytest.mark.parametrize("layout, block", [("NHWC", 1), ("NHCW", 1), ("NHWC", 4)])
def test_ds_cnn_at_4_kb_runs_every_layer_on_the_module_bit_exactly(make_plugin,
                                                                   isolated_registry, layout,
                                                                   block):
    """With C whole, DS-CNN's 64 -> 64 pointwise layers do not fit 4 kB on a 64-wide K axis;
    with partial sums every MAC layer runs on the module, bit-exact, in channels-last and
    in planes cut in rows, with weights interleaved in blocks of output channels too, the C
    project clean under the sanitizers."""
    registry = _registry(make_plugin, isolated_registry, layout, block=block)
    compiled = compile(str(MODELS / "kws_ref_model.tflite"), target="accu",
                       options={"l1_kb": 4}, registry=registry)
    host_macs = [row for row in compiled.report["operators"]
                 if row.get("module") == "host" and row.get("macs", 0) > 0]
    assert not host_macs, host_macs
    cut = [s for r in compiled.report["regions"] for s in r["schedules"]
           if s["tiles"].get("C") and s["accumulator_bytes"]]
    assert cut and all(s["l1_bytes"] <= 4 * 1024 for s in cut)
    result, _ = verify(compiled, seed=2)
    assert result.passed and result.reference == "numpy-integer"
    layer = next(t for f, t in compiled.project_files().items()
                 if f.startswith("layers/") and "kernel_partial" in t)
    assert "int32 partial sums included" in layer
    # weight buffers refilled per slice of C read slice-major weights, one run per slice; the
    # 25-row maps are cut in row tiles that do not divide 25 (the last one smaller)
    layers = [t for f, t in compiled.project_files().items() if f.startswith("layers/")]
    assert any("tile-major weights in L2" in t for t in layers)
    assert any(s["dims"][d] % t for r in compiled.report["regions"] for s in r["schedules"]
               for d, t in s["tiles"].items())
    errors = check_c_project(compiled, sanitize=True)
    assert set(errors.values()) == {0.0}


def test_ds_cnn_at_2_kb_cuts_the_first_layers_filter_bit_exactly(make_plugin,
                                                                  isolated_registry):
    """At 2 kB of L1 DS-CNN's first convolution (10x4 filters over one channel) fits only with
    its filter cut: a module naming FY and FX in partial_sum_dims runs it, bit-exact, the C
    project clean under the sanitizers; a module with C alone leaves it on the host."""
    model = str(MODELS / "kws_ref_model.tflite")
    registry = _registry(make_plugin, isolated_registry, dims=("C", "FY", "FX"))
    compiled = compile(model, target="accu", options={"l1_kb": 2}, registry=registry)
    host_macs = [row for row in compiled.report["operators"]
                 if row.get("module") == "host" and row.get("macs", 0) > 0]
    assert not host_macs, host_macs
    cut = [s for r in compiled.report["regions"] for s in r["schedules"]
           if set(s["tiles"]) & {"FY", "FX"}]
    assert cut and all(s["l1_bytes"] <= 2 * 1024 and s["accumulator_bytes"] for s in cut)
    result, _ = verify(compiled, seed=3)
    assert result.passed and result.integer.agreements[0].max_diff == 0
    layers = [t for f, t in compiled.project_files().items() if f.startswith("layers/")]
    assert any("edgebyoc_filter_window" in t and "tile-major weights in L2" in t
               for t in layers)
    errors = check_c_project(compiled, sanitize=True)
    assert set(errors.values()) == {0.0}


def test_with_c_alone_the_first_layer_of_ds_cnn_stays_on_the_host_at_2_kb(make_plugin,
                                                                          isolated_registry):
    compiled = compile(str(MODELS / "kws_ref_model.tflite"), target="accu",
                       options={"l1_kb": 2}, registry=_registry(make_plugin, isolated_registry))
    reasons = [row.get("reason", "") for row in compiled.report["operators"]
               if row.get("module") == "host" and row.get("macs", 0) > 0]
    assert len(reasons) == 1 and "no schedule fits" in reasons[0], reasons


def test_a_binding_without_kernel_partial_is_named(make_plugin, isolated_registry):
    registry = _registry(make_plugin, isolated_registry, drop=True)
    with pytest.raises(EdgebyocError, match="the 'host' API binding names no 'kernel_partial'"):
        compile(str(MODELS / "kws_ref_model.tflite"), target="accu", options={"l1_kb": 4},
                registry=registry)


def test_without_an_accumulator_nothing_changes(make_plugin, isolated_registry):
    registry = _registry(make_plugin, isolated_registry, bits=0)
    compiled = compile(str(MODELS / "kws_ref_model.tflite"), target="accu",
                       options={"l1_kb": 4}, registry=registry)
    assert all("C" not in s["tiles"] for r in compiled.report["regions"]
               for s in r["schedules"])
    reasons = {row.get("reason", "") for row in compiled.report["operators"]
               if row.get("module") == "host" and row.get("macs", 0) > 0}
    assert any("no schedule fits" in reason for reason in reasons)


def _carray(name, ctype, values):
    import numpy as np

    items = ", ".join(str(int(v)) for v in np.ravel(values))
    return f"static const {ctype} {name}[] = {{{items}}};\n"


SLICES = ({"K": 6, "OY": 3, "OX": 7, "C": 4}, ("OY", "C"))
#: K = 6, OY = 9, OX = 7 in tiles of 4, 4 and 3: every loop's last tile is smaller
UNEVEN = ({"K": 4, "OY": 4, "OX": 3, "C": 4}, ("K", "OY", "OX", "C"))


#: filter rows cut in single rows, the input buffer holding every filter row of a row tile
FILTER_ROWS = ({"K": 6, "OY": 3, "OX": 7, "FY": 1}, ("OY", "FY"))
#: every loop tiled: filter rows and columns one tap at a time, C in slices of 8
EVERY_LOOP = ({"K": 4, "OY": 4, "OX": 3, "FY": 1, "FX": 1, "C": 8},
              ("K", "OY", "OX", "FY", "FX", "C"))


@pytest.mark.parametrize("tiles, order, fill, double, block, slice_major", [
    (*SLICES, (1, 2, 1), False, 1, False), (*SLICES, (2, 2, 1), True, 1, True),
    (*SLICES, (2, 1, 1), True, 3, False), (*SLICES, (0, 2, 0), False, 3, True),
    (*UNEVEN, (4, 4, 3), True, 1, True), (*UNEVEN, (3, 4, 3), False, 3, True),
    (*UNEVEN, (4, 2, 3), True, 3, False),
    ({"K": 4, "OY": 4, "OX": 3}, ("K", "OY", "OX"), (3, 1, 3), True, 1, False),
    (*FILTER_ROWS, (1, 2, 1), False, 1, True), (*FILTER_ROWS, (2, 2, 1), True, 3, True),
    (*EVERY_LOOP, (6, 6, 3), True, 3, True), (*EVERY_LOOP, (3, 5, 3), False, 1, True),
    ({"K": 6, "OY": 9, "OX": 7, "FX": 1, "C": 4}, ("FX", "C"), (0, 1, 0), False, 1, True),
    ({"K": 6, "OY": 3, "OX": 7, "FY": 1, "C": 8}, ("OY", "FY", "C"), (2, 3, 1), True, 3,
     True)])
def test_the_template_accumulates_slices_of_c_bit_exactly(tmp_path, tiles, order, fill, double,
                                                          block, slice_major):
    """One convolution rendered with hand-made schedules that cut C in 4 slices (input and
    weight buffers holding one slice or all of C, single or double buffering, weights
    interleaved in blocks of 3 output channels, in L2 K-major or slice-major), with tiles of
    K, OY and OX that do not divide them (the last one smaller), and that cut the filter's
    rows and columns (one tap at a time; the input buffer holding one filter tile's rows or
    all of them, the weight buffer one filter tile, tile-major in L2), run whole and in row
    bands through ring buffers, under ASan and UBSan, against numpy."""
    import shutil
    import subprocess

    import numpy as np

    from edgebyoc.api.match import (IntegerLayer, Schedule, host_binding, layer_files,
                                    module_weights, slice_major_weights, tile_major_weights,
                                    translation_unit, weight_channel_stride)
    from edgebyoc.api.quant import Rounding, quantize_multipliers, requantize

    if shutil.which("gcc") is None:
        pytest.skip("gcc is needed to run the layer")
    rng = np.random.default_rng(sum(fill) + block + len(order))
    nest = LoopNest("conv2d", K=6, C=16, OY=9, OX=7, FY=3, FX=3, IY=9, IX=7,
                    padding=(1, 1, 1, 1))
    multiplier, shift = quantize_multipliers(np.full(6, 0.0013))
    layer = IntegerLayer(nest, (0,), weight=rng.integers(-127, 128, (3, 3, 16, 6)),
                         kernel_layout="HWIO", bias=rng.integers(-900, 900, 6).astype(np.int32),
                         multiplier=multiplier, shift=shift, zp_in=-3, zp_out=5)
    schedule = Schedule(nest, tiles, order, dict(zip("IWO", fill)), double,
                        accumulator_bits=32)
    if "C" in tiles:
        assert schedule.trips("C") == 16 // tiles["C"] and schedule.accumulator_bytes == \
            tiles["K"] * tiles["OY"] * tiles["OX"] * 4
    module = ExecModule("npu", accumulator_bits=32)
    weights = module_weights(layer, block=block)
    if slice_major and set(tiles) & {"FY", "FX"}:  # the weight buffer holds one filter tile
        assert schedule.reduction_trips > 1
        weights = tile_major_weights(weights, nest, tiles, block,
                                     channels_sliced="C" in tiles and fill[1] == len(order))
    elif slice_major:  # the weight buffer holds one slice: each slice one run in L2
        assert schedule.fill["W"] == len(order)
        weights = slice_major_weights(weights, nest, 4, block)
    files = layer_files(module, "layer", layer, schedule, {"host": host_binding()}, {},
                        weights, weight_channel_stride(nest), w_block=block,
                        weights_slice_major=slice_major)
    assert ("tile-major weights in L2" in files["layers/layer.c"]) == slice_major
    x = rng.integers(-128, 128, (9, 7, 16)).astype(np.int8)
    driver = translation_unit(files, "layers/layer.c", "host") + _carray("x", "int8_t", x) + \
        _carray("w", "int8_t", weights) + _carray("b", "int32_t", layer.bias) + \
        _carray("m", "int32_t", layer.multiplier) + _carray("s", "int32_t", layer.shift) + """
#include <stdio.h>
int main(void) {
  static int8_t y[9 * 7 * 6], ring_in[5 * 7 * 16], ring_out[3 * 7 * 6], banded[9 * 7 * 6];
  int i, y0, r;
  if (layer(x, NULL, w, b, m, s, y, NULL) != 0) return 2;
  for (y0 = 0; y0 < 9; y0 += 2) {  /* bands of 2 rows through rings of 5 and 3 rows */
    int y1 = y0 + 2 > 9 ? 9 : y0 + 2, first = y0 > 0 ? y0 - 1 : 0, end = y1 < 9 ? y1 + 1 : 9;
    edgebyoc_band_t band = {y0, y1, 5, 0, 3};
    for (r = first; r < end; ++r) memcpy(ring_in + (r % 5) * 112, x + r * 112, 112);
    if (layer(ring_in, NULL, w, b, m, s, ring_out, &band) != 0) return 3;
    for (r = y0; r < y1; ++r) memcpy(banded + r * 42, ring_out + (r % 3) * 42, 42);
  }
  if (memcmp(banded, y, sizeof banded) != 0) return 4;
  for (i = 0; i < 9 * 7 * 6; ++i) printf("%d\\n", y[i]);
  return 0;
}
"""
    source, exe = tmp_path / "layer.c", tmp_path / "layer"
    source.write_text(driver)
    subprocess.run(["gcc", "-std=c99", "-Wall", "-Wextra", "-Werror", "-g",
                    "-fsanitize=address,undefined", "-fno-sanitize-recover=all",
                    "-o", str(exe), str(source)], check=True)
    run = subprocess.run([str(exe)], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr[-2000:]
    got = np.array([int(v) for v in run.stdout.split()], dtype=np.int8).reshape(9, 7, 6)
    acc = np.zeros((9, 7, 6), dtype=np.int64)
    padded = np.pad(x.astype(np.int64) - layer.zp_in, [(1, 1), (1, 1), (0, 0)])
    for i in range(3):
        for j in range(3):
            acc += padded[i:i + 9, j:j + 7] @ layer.weight[i, j].astype(np.int64)
    want = requantize(acc, layer.bias, layer.multiplier, layer.shift, 5, -128, 127,
                      Rounding.of("tflite"))
    assert np.array_equal(got, want)


def test_a_band_keeps_the_slices_and_the_accumulator():
    """Depth-first streaming re-prices a layer per band of rows: the band's schedule keeps the
    C slices and counts the accumulator in L1."""
    from edgebyoc.api import Workload
    from edgebyoc.memory.streaming import band_layer

    nest = LoopNest("conv2d", K=8, C=32, OY=8, OX=8, FY=3, FX=3, IY=8, IX=8,
                    padding=(1, 1, 1, 1))
    schedule = search(nest, 1024, lambda s: _price(nest, s), {"K": 4}, True, 32).schedule
    assert schedule.trips("C") > 1
    workload = Workload("relax.nn.conv2d", "accu.npu.conv2d",
                        inputs=(((1, 8, 8, 32), "int8"), ((8, 3, 3, 32), "int8")),
                        output=((1, 8, 8, 8), "int8"),
                        attrs={"data_layout": "NHWC", "kernel_layout": "OHWI", "groups": 1,
                               "strides": [1, 1], "padding": [1, 1, 1, 1]})
    _, band = band_layer(workload, schedule, 2, 4)
    assert band.nest.OY == 2 and band.tile("C") == schedule.tile("C")
    assert band.accumulator_bits == 32 and band.accumulator_bytes > 0


def test_tiles_that_do_not_divide_their_dimension_run_bit_exactly(make_plugin,
                                                                   isolated_registry):
    """A 13x11 image (prime extents): the search takes tiles whose last one is smaller
    (MATCH's padded mapping), the template clips that tile, bit-exact (the C project of
    DS-CNN, whose 25-row maps get such tiles too, runs under the sanitizers above)."""
    from edgebyoc.testing.conformance import int8_workloads

    registry = _registry(make_plugin, isolated_registry)
    model = int8_workloads()["int8_odd_shapes"]
    compiled = compile(model, target="accu", options={"l1_kb": 1}, registry=registry)
    uneven = []
    for region in compiled.report["regions"]:
        assert region["offloaded"], region["reason"]
        for schedule in region["schedules"]:
            dims, tiles = schedule["dims"], schedule["tiles"]
            uneven += [(dim, dims[dim], tile) for dim, tile in tiles.items()
                       if dims[dim] % tile]
    assert uneven  # e.g. ("OY", 13, 5): tiles of 5, 5 and 3 rows
    # the artifact runs the generated layers through the host emulation
    result, _ = verify(compiled, seed=1)
    assert result.passed and result.integer.agreements[0].max_diff == 0
