"""gap9: the four int8 MLPerf Tiny networks compiled, run through the host binding and checked
bit-exactly against the numpy reference of the same integer arithmetic; the generated C under
-Wall -Wextra -Werror and the sanitizers; the cost models and the schedule search."""

import json
import re
import subprocess
from pathlib import Path

import numpy as np
import pytest

from edgebyoc.api import CompileError, TargetError
from edgebyoc.api.match import (IntegerLayer, LoopNest, host_binding, layer_files,
                                module_weights, search, translation_unit,
                                weight_channel_stride)
from edgebyoc.api.quant import Rounding, quantize_multipliers, requantize
from edgebyoc.api.testing import (check_c_project, check_installed_plugin, compile, load,
                                  missing_mcu_tools, random_inputs, run_c_project, run_cli,
                                  verify)

MODELS = Path(__file__).resolve().parents[4] / "shared" / "models" / "mlperf_tiny"
NETWORKS = ["pretrainedResnet_quant", "vww_96_int8", "kws_ref_model", "ad01_int8"]


L1_SIZES = [128, 64, 32, 16, 8]


def verify_integer(compiled, seeds=(0, 1)):
    """``edgebyoc verify`` on seeded inputs: each result's integer report."""
    reports = []
    for seed in seeds:
        result, _ = verify(compiled, seed=seed)
        assert result.reference == "numpy-integer" and result.integer is not None
        assert result.passed, result.to_dict()
        reports.append(result.integer)
    return reports


@pytest.mark.slow
@pytest.mark.parametrize("network", NETWORKS)
@pytest.mark.parametrize("l1_kb", L1_SIZES)
def test_network_verifies_bit_exact_at_every_l1_size(network, l1_kb):
    path = str(MODELS / f"{network}.tflite")
    compiled = compile(path, target="gap9", options={"l1_kb": l1_kb})
    assert compiled.report["c_project"]["generated"]  # run() executes the project's C
    regions = compiled.report["regions"]
    assert regions
    for region in regions:
        if region["offloaded"]:
            assert region["module"] in ("cluster", "ne16") and region["predicted_cycles"] > 0
            assert region["schedules"][0]["l1_bytes"] <= l1_kb * 1024
    # a layer that no schedule fits runs on the host, and the report says why
    for row in compiled.report["operators"]:
        if row["module"] == "host" and row["macs"] and row["op"] in ("nn.conv2d", "matmul"):
            assert "no schedule fits L1" in row["reason"], row
    for report in verify_integer(compiled):
        exact, model = report.agreements[0], report.agreements[1]
        assert exact.max_lsb == 0 and exact.identical_share == 1.0
        if "ne16" in report.rounding:  # half-up rounding: within 1 LSB per layer
            assert report.max_layer_lsb == 1 and report.layers_rounded_otherwise > 0
        else:  # TFLite rounding everywhere: identical to the int8 host build
            assert model.max_lsb == 0 and model.identical_share == 1.0


def test_cluster_only_is_identical_to_the_integer_host_build():
    compiled = compile(str(MODELS / "kws_ref_model.tflite"), target="gap9",
                                options={"modules": "cluster"})
    assert {r["module"] for r in compiled.report["regions"]} == {"cluster"}
    for report in verify_integer(compiled, seeds=(0, 1, 2)):
        assert report.rounding == {} and report.agreements[1].max_lsb == 0


SANITIZE = "-Og -g -fsanitize=address,undefined -fno-sanitize-recover=all"  # -Og: edgebyoc.testing.cproject.SANITIZE_FLAGS says why


@pytest.mark.slow
@pytest.mark.parametrize("network,options", [("pretrainedResnet_quant", {"l1_kb": 8}),
                                             ("kws_ref_model", {})])
def test_deployable_project_builds_clean_and_matches_the_artifact(tmp_path, network, options):
    compiled = compile(str(MODELS / f"{network}.tflite"), target="gap9",
                                options=options)
    project = compiled.project
    info = compiled.report["c_project"]
    assert info["generated"] and info["region_steps"] == sum(
        r["offloaded"] for r in compiled.report["regions"])
    assert info["lower_bound_bytes"] <= info["arena_bytes"] < info["naive_bytes"]
    assert compiled.report["summary"]["peak_activation_bytes"] == info["arena_bytes"]
    assert f"EDGEBYOC_NETWORK_ARENA_BYTES {info['arena_bytes']}" in project.files["network.h"]
    layers = sorted(p for p in project.files if p.startswith("layers/"))
    assert layers and all(f"${{CMAKE_CURRENT_LIST_DIR}}/{p}" in project.files["CMakeLists.txt"]
                          for p in layers)
    assert all(f"bindings/soc/{Path(p).stem}_api.h" in project.files for p in layers)
    # gcc -std=c99 -Wall -Wextra -Werror, AddressSanitizer and UBSan over the whole network
    binary = project.make(tmp_path / "project", cflags=SANITIZE, ldflags=SANITIZE)
    for seed in (0, 1):
        x = random_inputs(compiled.inputs, seed=seed)
        ours = project.run_binary(binary, list(x.values()))
        assert np.array_equal(ours[0], list(compiled.run(x).values())[0])


#: TensorFlow Lite Micro's activation arena ("head", inputs and outputs included) for these
#: networks, measured on this machine (../shared/notes/facts.md)
TFLM_ARENA = {"vww_96_int8": 73_728, "ad01_int8": 768}


@pytest.mark.slow
@pytest.mark.parametrize("network", ["vww_96_int8", "ad01_int8"])
def test_inputs_and_outputs_in_the_arena(tmp_path, network):
    """--io-in-arena: the arena holds the input and output too (the input's bytes reused once
    it is dead), the caller none; no more RAM than TFLite Micro's arena, results unchanged,
    in place (the harness) and through the caller's buffers (the artifact)."""
    path = str(MODELS / f"{network}.tflite")
    apart, inside = compile(path, target="gap9"), compile(path, target="gap9", io_in_arena=True)
    a, b = apart.report["c_project"], inside.report["c_project"]
    assert a["io_bytes"] > 0 and a["total_activation_bytes"] == a["arena_bytes"] + a["io_bytes"]
    assert b["io_in_arena"] and b["io_bytes"] == 0
    assert b["total_activation_bytes"] == b["arena_bytes"] < a["total_activation_bytes"]
    assert b["arena_bytes"] <= TFLM_ARENA[network]
    assert "void* edgebyoc_network_input(int index);" in inside.project.files["network.h"]
    binary = inside.project.make(tmp_path / "project", cflags=SANITIZE, ldflags=SANITIZE)
    x = random_inputs(apart.inputs, seed=3)
    expected = list(apart.run(x).values())[0]
    assert np.array_equal(list(inside.run(x).values())[0], expected)  # copied in and out
    assert np.array_equal(inside.project.run_binary(binary, list(x.values()))[0], expected)
    with pytest.raises(CompileError, match="target 'host' deploys no C project"):
        compile(path, target="host", io_in_arena=True)


#: TensorFlow Lite Micro's arena head of the four networks (../shared/notes/facts.md)
TFLM_HEAD = {"pretrainedResnet_quant": 49_152, "vww_96_int8": 73_728, "kws_ref_model": 16_000,
             "ad01_int8": 768}
#: the activation RAM of their --dfs --io-in-arena projects (row bands through ring buffers)
STREAMED = {"pretrainedResnet_quant": 15_872, "vww_96_int8": 34_944, "kws_ref_model": 12_160,
            "ad01_int8": 768}


@pytest.mark.slow
@pytest.mark.parametrize("network", NETWORKS)
def test_streamed_projects_need_at_most_half_of_tflite_micro_bit_exactly(tmp_path, network):
    """Depth-first row streaming (--dfs) with the input and output in the arena: at most half
    of TFLite Micro's arena on ResNet-8 and VWW, never more on any network, with the model's
    MACs; the outputs equal the untiled project's, and the project is clean under ASan and
    UBSan."""
    path = str(MODELS / f"{network}.tflite")
    untiled = compile(path, target="gap9", dfs=False, io_in_arena=True)
    streamed = compile(path, target="gap9", dfs=True, io_in_arena=True)
    total = streamed.project.total_activation_bytes
    assert total == STREAMED[network] <= TFLM_HEAD[network]
    if network in ("pretrainedResnet_quant", "vww_96_int8"):
        assert total <= TFLM_HEAD[network] / 2
    info = streamed.report["memory"]
    assert info["kind"] == "c_project" and info["extra_macs"] == 0
    if info["enabled"]:  # each call loads its layer's weights again: it costs cycles
        summary = streamed.report["summary"]
        assert summary["predicted_cycles"] > summary["predicted_cycles_untiled"]
    binary = streamed.project.make(tmp_path / "project", cflags=SANITIZE, ldflags=SANITIZE)
    for seed in (0, 1):
        x = random_inputs(streamed.inputs, seed=seed)
        expected = list(untiled.run(x).values())[0]
        assert np.array_equal(list(streamed.run(x).values())[0], expected)
        assert np.array_equal(streamed.project.run_binary(binary, list(x.values()))[0],
                              expected)


@pytest.mark.parametrize("dfs", [False, True])
def test_project_builds_with_the_makefiles_default_flags(tmp_path, dfs):
    """`make` as the README runs it (-O2 -Werror): gcc's -O2 flow analysis warns where the
    sanitizer builds (-Og) do not (a tile box once looked uninitialized to it). Every layer
    shares one emulated L1 of the target's size: the binary's .bss is the arena plus that L1
    (it was one 128 kB L1 per layer file, 1.88 MB for ResNet-8)."""
    compiled = compile(str(MODELS / "pretrainedResnet_quant.tflite"), target="gap9",
                       options={"l1_kb": 32}, dfs=dfs)
    binary = compiled.project.make(tmp_path / "project")
    x = random_inputs(compiled.inputs, seed=0)
    assert np.array_equal(compiled.project.run_binary(binary, list(x.values()))[0],
                          list(compiled.run(x).values())[0])
    project = compiled.project
    assert project.host_l1_bytes == 32 * 1024
    sections = subprocess.run(["size", "-A", str(binary)], capture_output=True, text=True,
                              check=True).stdout
    bss = next(int(line.split()[1]) for line in sections.splitlines()
               if line.startswith(".bss "))
    assert project.arena.size_bytes + project.host_l1_bytes <= bss <= \
        project.arena.size_bytes + project.host_l1_bytes + 256, sections


def test_cli_plots_the_streamed_arena_beside_the_untiled_one(tmp_path):
    plot = tmp_path / "arena.png"
    code, output = run_cli(["compile", str(MODELS / "pretrainedResnet_quant.tflite"), "-t",
                            "gap9", "-q", "--dfs", "--io-in-arena", "-o", str(tmp_path / "out"),
                            "--memory-plot", str(plot)])
    assert code == 0, output
    assert plot.read_bytes()[:4] == b"\x89PNG"
    report = (tmp_path / "out" / "report.md").read_text()
    assert "Depth-first streaming of the C project (on; decided by forced (--dfs): the smallest " \
        "activation RAM): 1 chain(s) of layers streamed in bands of 1 row(s): 15872 bytes of " \
        "activation RAM against 49152 untiled" in report


def test_the_report_says_where_a_streamed_projects_cycles_go(tmp_path):
    """Each offloaded region a chain calls: its calls, their predicted cycles against the whole
    layer's, the cost model's parts and the weight bytes moved. With the shipped calibration
    every call pays its module's fixed cost (cluster 10,295 cycles, NE16 33,329: the
    overhead grows with the calls) and loads its layer's weights again."""
    compiled = compile(str(MODELS / "pretrainedResnet_quant.tflite"), target="gap9", dfs=True,
                       io_in_arena=True)
    memory = compiled.report["memory"]
    regions = memory["streamed_regions"]
    (chain,) = memory["chains"]
    assert len(regions) == 12 and sum(r["calls"] for r in regions) == chain["calls"] == 224
    assert {r["calls"] for r in regions} == {32, 16, 8}  # 32x32, 16x16 and 8x8 maps: a row a call
    assert sum(r["cycles"] - r["untiled_cycles"] for r in regions) == \
        pytest.approx(memory["predicted_extra_cycles"], abs=1)
    calibration = json.loads((Path(__file__).resolve().parents[1] / "edgebyoc_gap9" /
                              "calibration" / "match_table_iv.json").read_text())["values"]
    for region in regions:
        fixed = calibration[f"{region['module']}_layer_cycles"]  # 10,295 / 33,329 cycles
        streamed, untiled = region["parts"]["overhead"]
        assert untiled == pytest.approx(fixed, abs=0.1)
        assert streamed == pytest.approx(region["calls"] * fixed, abs=0.1)
        moved, once = region["weight_bytes"]
        assert moved == region["calls"] * once  # the add layers have none
        assert region["cycles"] > region["untiled_cycles"]
    markdown = (compiled.save(tmp_path / "artifact") / "report.md").read_text()
    assert "| region | module | calls | predicted cycles | L_mem | L_ops | overhead | weight " \
        "bytes moved |" in markdown
    first = regions[0]
    assert f"| `{first['symbol']}` | {first['module']} | {first['calls']} | " \
           f"{first['cycles']:.0f} / {first['untiled_cycles']:.0f} |" in markdown


def test_artifact_keeps_the_project_and_runs_it_after_load(tmp_path):
    compiled = compile(str(MODELS / "ad01_int8.tflite"), target="gap9")
    saved = compiled.save(tmp_path / "ad01")
    for name in ("network.c", "network.h", "weights.c", "Makefile", "CMakeLists.txt", "main.c",
                 "include/edgebyoc_match.h", "include/edgebyoc_match_host.h",
                 "include/gap9_soc.h"):
        assert (saved / "c_project" / name).is_file(), name
    assert not (saved / "c_project" / "tvm_wrapper.c").exists()
    loaded = load(saved)
    x = random_inputs(compiled.inputs, seed=4)
    assert np.array_equal(list(loaded.run(x).values())[0], list(compiled.run(x).values())[0])
    assert loaded.manifest["c_project"]["arena_bytes"] == compiled.project.arena.size_bytes


def test_the_public_helpers_build_and_run_the_project_of_a_loaded_artifact(tmp_path):
    """``edgebyoc.api.testing``'s C project helpers, as an out-of-tree plugin's tests use them:
    the project of a loaded artifact built under the sanitizers and bit-exact with the
    artifact; a flipped weight in the project's sources is caught."""
    compiled = compile(str(MODELS / "ad01_int8.tflite"), target="gap9")
    loaded = load(compiled.save(tmp_path / "ad01"))
    x = random_inputs(compiled.inputs, seed=5)
    assert check_c_project(loaded, x, directory=tmp_path / "build") == {
        spec.name: 0.0 for spec in compiled.outputs}
    text = loaded.project_files()["weights.c"]
    start = text.index("{") + 1
    end = text.index(",", start)
    flipped = text[:start] + (" 100" if int(text[start:end]) != 100 else " 101") + text[end:]

    class Edited:  # the loaded model with one weight of its project's sources changed
        inputs, outputs, runner = compiled.inputs, compiled.outputs, compiled.runner

        def project_files(self):
            return {**loaded.project_files(), "weights.c": flipped}

    outputs = run_c_project(Edited(), x, sanitize=False)
    assert not np.array_equal(list(outputs.values())[0], list(compiled.run(x).values())[0])
    with pytest.raises(Exception, match="deploys no C project"):
        check_c_project(compile(str(MODELS / "ad01_int8.tflite"), target="host"))


def test_memory_timeline_and_budget_come_from_the_arena(tmp_path):
    """The report's timeline is the C arena's (one step per network call); a memory budget
    is checked against the arena, below it is the clear error."""
    path = str(MODELS / "ad01_int8.tflite")
    compiled = compile(path, target="gap9")
    memory, arena = compiled.report["memory"]["timeline"], compiled.project.arena
    assert len(memory["steps"]) == compiled.project.steps
    assert memory["peak_bytes"] == arena.lower_bound_bytes <= arena.size_bytes
    # dense layers only: nothing to stream in row bands
    assert compiled.report["memory"]["reason"] == ("no chain of layers to stream lowers the "
                                                   "activation RAM")
    # the budget is the whole activation RAM: the arena and the caller's input / output
    total = compiled.project.total_activation_bytes
    assert total == arena.size_bytes + 640 * 1 + 640 * 1  # ad01: int8 640 in, 640 out
    assert compile(path, target="gap9", memory_budget=total).project
    with pytest.raises(CompileError, match=f"the C project needs {total} bytes of activation "
                                           f"RAM: its static arena of {arena.size_bytes} "
                                           f"bytes .* \\+ 1280 bytes of the caller's .*"
                                           f"depth-first streaming: no chain of layers"):
        compile(path, target="gap9", memory_budget=total - 1)
    plot = tmp_path / "arena.png"
    code, output = run_cli(["compile", path, "-t", "gap9", "-q", "-o", str(tmp_path / "out"),
                            "--memory-plot", str(plot)])
    assert code == 0, output
    assert plot.read_bytes()[:4] == b"\x89PNG"


def test_dispatch_ds_cnn_first_layer_stays_off_ne16():
    compiled = compile(str(MODELS / "kws_ref_model.tflite"), target="gap9")
    first = compiled.report["regions"][0]
    assert first["module"] == "cluster"  # its 10x4 filter is not an NE16 shape
    assert "10x4" not in first["reason"] and first["patterns"] == ["gap9.cluster.conv2d"]
    conv = next(r for r in compiled.report["operators"] if r["op"] == "nn.conv2d")
    assert conv["reason"].endswith("; ne16 refused: NE16 runs 1x1 and 3x3 filters, not 10x4")
    assert sum(r["module"] == "ne16" for r in compiled.report["regions"]) == 8


def test_tiny_l1_falls_back_to_host_with_reason():
    """At 0.5 kB NE16 alone (its 3x3x32 output block) fits none of ResNet-8's layers and says
    so, naming the smallest footprint; with the cluster too every MAC layer of DS-CNN runs on
    the modules (row tiles that do not divide 25, the last one smaller), and the
    autoencoder's dense layers as well, their input channels cut with partial sums."""
    compiled = compile(str(MODELS / "pretrainedResnet_quant.tflite"), target="gap9",
                       options={"l1_kb": 0.5, "modules": "ne16"})
    reasons = [row["reason"] for row in compiled.report["operators"] if row["module"] == "host"
               and row["macs"]]
    assert len(reasons) == 9 and all(
        re.search(r"ne16: no schedule fits L1 \(0\.5 kB\): the smallest needs \d+\.\d kB", r)
        for r in reasons), reasons
    ds_cnn = compile(str(MODELS / "kws_ref_model.tflite"), target="gap9",
                     options={"l1_kb": 0.5})
    assert ds_cnn.report["summary"]["mac_offload_ratio"] == 1.0
    result, _ = verify(ds_cnn)
    assert result.passed and result.integer.agreements[0].max_diff == 0
    dense = compile(str(MODELS / "ad01_int8.tflite"), target="gap9", options={"l1_kb": 0.5})
    assert dense.report["summary"]["mac_offload_ratio"] == 1.0
    assert any(s["tiles"].get("C") for r in dense.report["regions"] for s in r["schedules"])
    result, _ = verify(dense)
    assert result.passed and result.reference == "numpy-integer"


def test_generated_c_is_warning_and_sanitizer_clean(tmp_path):
    from edgebyoc_gap9 import codegen, cost, plugin

    compiled = compile(str(MODELS / "pretrainedResnet_quant.tflite"), target="gap9",
                       options={"l1_kb": 8})
    region = compiled.report["regions"][1]
    assert region["schedules"][0]["iterations"] > 1  # tiled at 8 kB
    # the same layer standalone through the public API: the soc-free host binding
    rng = np.random.default_rng(0)
    nest = LoopNest("conv2d", K=16, C=8, OY=9, OX=7, FY=3, FX=3, IY=9, IX=7,
                    padding=(1, 1, 1, 1))
    multiplier, shift = quantize_multipliers(np.full(16, 0.0021))
    layer = IntegerLayer(nest, (0,), weight=rng.integers(-127, 128, (3, 3, 8, 16)),
                         kernel_layout="HWIO", bias=rng.integers(-500, 500, 16).astype(np.int32),
                         multiplier=multiplier, shift=shift, zp_in=-3, zp_out=5)
    result = search(nest, 2048, lambda s: cost.price("cluster", nest, s), {"OY": 8, "K": 4})
    assert result.schedule.iterations > 1
    for module in (plugin.CLUSTER, plugin.NE16):
        align = codegen.NE16_CHANNEL_ALIGN if module.name == "ne16" else 1
        weights = module_weights(layer, align)
        # the cluster's 2 kB schedule; NE16's weights pad C = 8 to 16 channels, so its copy
        # of the weight buffer is larger than the search counted: an emulated L1 of 4 kB
        files = layer_files(module, "layer", layer, result.schedule, {"host": host_binding()},
                            {"l1_kb": 4}, weights, weight_channel_stride(nest, align))
        source = translation_unit(files, "layers/layer.c", "host")
        x = rng.integers(-128, 128, (9, 7, 8)).astype(np.int8)

        def carray(name, ctype, values):
            return f"static const {ctype} {name}[] = {{{', '.join(str(int(v)) for v in np.ravel(values))}}};\n"

        driver = source + carray("x", "int8_t", x) + carray("w", "int8_t", weights) + \
            carray("b", "int32_t", layer.bias) + carray("m", "int32_t", layer.multiplier) + \
            carray("s", "int32_t", layer.shift) + """
#include <stdio.h>
int main(void) {
  static int8_t y[9 * 7 * 16];
  int i;
  /* the same layer in bands of 2 output rows, input and output in ring buffers of 5 and 3
   * rows (a depth-first C project's row streaming): it must give the same bytes */
  static int8_t ring_in[5 * 7 * 8], ring_out[3 * 7 * 16], banded[9 * 7 * 16];
  int y0, r;
  if (layer(x, NULL, w, b, m, s, y, NULL) != 0) return 2;
  for (y0 = 0; y0 < 9; y0 += 2) {
    int y1 = y0 + 2 > 9 ? 9 : y0 + 2, first = y0 > 0 ? y0 - 1 : 0, end = y1 < 9 ? y1 + 1 : 9;
    edgebyoc_band_t band = {y0, y1, 5, 0, 3};
    for (r = first; r < end; ++r) memcpy(ring_in + (r % 5) * 56, x + r * 56, 56);
    if (layer(ring_in, NULL, w, b, m, s, ring_out, &band) != 0) return 3;
    for (r = y0; r < y1; ++r) memcpy(banded + r * 112, ring_out + (r % 3) * 112, 112);
  }
  if (memcmp(banded, y, sizeof banded) != 0) return 4;
  for (i = 0; i < 9 * 7 * 16; ++i) printf("%d\\n", y[i]);
  return 0;
}
"""
        src = tmp_path / f"{module.name}.c"
        src.write_text(driver)
        exe = tmp_path / module.name
        subprocess.run(["gcc", "-std=c99", "-Wall", "-Wextra", "-Werror", "-g",
                        "-fsanitize=address,undefined", "-fno-sanitize-recover=all",
                        "-o", str(exe), str(src)], check=True)
        run = subprocess.run([str(exe)], capture_output=True, text=True, check=True)
        got = np.array([int(v) for v in run.stdout.split()], dtype=np.int8).reshape(9, 7, 16)
        acc = np.zeros((9, 7, 16), dtype=np.int64)
        padded = np.pad(x.astype(np.int64) - layer.zp_in, [(1, 1), (1, 1), (0, 0)])
        for i in range(3):
            for j in range(3):
                acc += padded[i:i + 9, j:j + 7] @ layer.weight[i, j].astype(np.int64)
        rounding = Rounding.of(module.requantize_rounding)
        want = requantize(acc, layer.bias, layer.multiplier, layer.shift, 5, -128, 127, rounding)
        assert np.array_equal(got, want), module.name
        assert run.stderr == ""


def test_cost_models_and_table_iv_shape():
    from edgebyoc_gap9 import cost

    conv = LoopNest("conv2d", K=64, C=64, OY=16, OX=16, FY=3, FX=3, IY=16, IX=16,
                    padding=(1, 1, 1, 1))
    cluster = search(conv, 128 * 1024, lambda s: cost.price("cluster", conv, s),
                     {"OY": 8, "OX": 2, "K": 4})
    ne16 = search(conv, 128 * 1024, lambda s: cost.price("ne16", conv, s),
                  {"OY": 3, "OX": 3, "K": 32})
    macs = conv.macs
    # the cluster reaches several MACs per cycle; NE16 is faster still on 3x3 convolutions
    assert 4 < macs / cluster.cost.latency_cycles < 32
    assert ne16.cost.latency_cycles < cluster.cost.latency_cycles
    assert set(cluster.cost.breakdown) == {"L_ops", "L_mem", "efficiency", "overhead"}


def test_the_cluster_cuts_a_filter_that_does_not_fit_and_prices_each_slice():
    """The cluster declares FY and FX as partial-sum loops (its im2col kernels take any
    window), NE16 does not (3x3 and 1x1 only): at 280 bytes of L1 a layer with 10x4 filters
    over one channel (DS-CNN's first, smaller) runs on the cluster only with its filter cut,
    and every filter slice is
    priced as a kernel call over its taps plus the partial sums' stores and loads."""
    from dataclasses import replace

    from edgebyoc_gap9 import cost, plugin

    assert plugin.CLUSTER.partial_sum_dims == ("C", "FY", "FX")
    assert plugin.NE16.partial_sum_dims == ("C",)
    nest = LoopNest("conv2d", K=4, C=1, OY=4, OX=2, FY=10, FX=4, IY=13, IX=5)
    unroll = {"OY": 8, "OX": 2, "K": 4}

    def price(s):
        return cost.price("cluster", nest, s)

    assert search(nest, 280, price, unroll, True, 32).schedule is None  # C alone: no fit
    tiled = search(nest, 280, price, unroll, True, 32, ("C", "FY", "FX")).schedule
    assert tiled is not None and tiled.l1_bytes <= 280
    assert tiled.trips("FY") * tiled.trips("FX") > 1
    whole = search(nest, 128 * 1024, price, unroll, True, 32, ("C", "FY", "FX")).schedule
    assert whole.reduction_trips == 1  # with room, the filter stays whole (fewer calls)
    # one slice's compute is the kernel call over its taps (and channels)
    slice_nest = replace(nest, FY=tiled.tile("FY"), FX=tiled.tile("FX"), C=tiled.tile("C"))
    taps = tiled.tile("FY") * tiled.tile("FX")
    assert cost.cluster_tile_cycles(nest, 4, 4, 2, tiled.tile("C"), last=True, taps=taps) == \
        cost.cluster_tile_cycles(slice_nest, 4, 4, 2, last=True) + \
        1 * 2 * 4 * cost.ACC_CYCLES  # its partial sums loaded: a row of 2 x 4 per core
    assert price(tiled).breakdown["L_ops"] > price(whole).breakdown["L_ops"]


def test_report_predicts_the_whole_network_in_ms_at_260_mhz():
    from edgebyoc_gap9 import cost

    compiled = compile(str(MODELS / "pretrainedResnet_quant.tflite"), target="gap9")
    report, summary = compiled.report, compiled.report["summary"]
    host = [row for row in report["operators"] if row["module"] == "host"]
    assert host  # the reshape and softmax at the end stay on the fabric controller
    shipped = json.loads(Path(cost.__file__).with_name("calibration").joinpath(
        "match_table_iv.json").read_text())["values"]
    for row in host:
        elements = int(np.prod(row["shape"])) if row["shape"] else 1
        assert row["predicted_cycles"] == pytest.approx(
            row["macs"] * shipped["host_cycles_per_mac"]
            + elements * shipped["host_cycles_per_element"])
    offloaded = sum(r["predicted_cycles"] for r in report["regions"] if r["offloaded"])
    cycles = offloaded + sum(row["predicted_cycles"] for row in host)
    assert summary["predicted_cycles"] == pytest.approx(cycles)
    assert summary["predicted_latency_ms"] == pytest.approx(cycles / 260e6 * 1e3)
    assert 0 < summary["macs_per_cycle"] < 64


def qdq_resnet(path, per_channel: bool):
    """MLPerf Tiny's fp32 ResNet-8 (NCHW ONNX) quantized by onnxruntime into QDQ form."""
    import onnx
    from onnx import version_converter
    from onnxruntime.quantization import (CalibrationDataReader, QuantFormat, QuantType,
                                          quantize_static)

    model = version_converter.convert_version(onnx.load(MODELS / "pretrainedResnet.onnx"), 13)
    source = path.with_suffix(".fp32.onnx")
    onnx.save(model, source)
    name = model.graph.input[0].name
    rng = np.random.default_rng(0)

    class Samples(CalibrationDataReader):
        def __init__(self):
            self.samples = [{name: rng.random((1, 3, 32, 32), dtype=np.float32)}
                            for _ in range(4)]

        def get_next(self):
            return self.samples.pop() if self.samples else None

    quantize_static(str(source), str(path), Samples(), quant_format=QuantFormat.QDQ,
                    activation_type=QuantType.QInt8, weight_type=QuantType.QInt8,
                    per_channel=per_channel)
    return path


@pytest.mark.slow
@pytest.mark.parametrize("per_channel", [False, True])
def test_onnx_qdq_model_runs_channels_last_and_verifies(tmp_path, per_channel):
    path = qdq_resnet(tmp_path / "resnet_qdq.onnx", per_channel)
    compiled = compile(str(path), target="gap9")
    regions = compiled.report["regions"]
    # every conv, add and the dense layer offloaded, in NHWC (ChannelsLast + Integerize)
    assert len(regions) == 13 and all(r["offloaded"] for r in regions)
    network = compiled.project.files["network.c"]
    # NCHW <-> NHWC permutations cancel between layers: only the input's and the head's remain
    assert network.count("relax.permute_dims") == 3
    result, _ = verify(compiled, seed=0)
    assert result.passed and result.reference == "numpy-integer"
    assert result.integer.agreements[0].max_diff == 0
    assert result.integer.agreements[2].reference.startswith("onnxruntime")


def test_soc_flavour_of_the_project_compiles_against_sdk_declarations(tmp_path):
    """The same layer files with ``bindings/soc`` (GAP9 SDK names): a compile-only check
    against declarations of the PMSIS / NE16 calls (tests/sdk_stubs); nothing runs."""
    compiled = compile(str(MODELS / "pretrainedResnet_quant.tflite"), target="gap9",
                                options={"l1_kb": 32})
    root = compiled.project.write(tmp_path / "project")
    layers = sorted(root.glob("layers/*.c"))
    modules = {r["module"] for r in compiled.report["regions"]}
    assert len(layers) == len(compiled.report["regions"]) and modules == {"cluster", "ne16"}
    stubs = Path(__file__).resolve().parent / "sdk_stubs"
    for source in layers + [root / "network.c", root / "weights.c"]:
        subprocess.run(["gcc", "-std=c99", "-Wall", "-Wextra", "-Werror", "-fsyntax-only",
                        f"-I{root}", f"-I{root / 'include'}", f"-I{root / 'bindings' / 'soc'}",
                        f"-I{stubs}", str(source)], check=True)
    # the soc binding names the SDK's calls, the host binding never does
    soc = (root / "bindings" / "soc" / f"{layers[0].stem}_api.h").read_text()
    assert "gap9_soc_dma_in_3d" in soc and "gap9_host" not in soc


def test_conformance():
    check_installed_plugin("gap9", workloads=True)


@pytest.mark.parametrize("options, message", [
    ({"modules": "foo"}, "option modules: 'foo' is not allowed (allowed: a comma-separated "
                         "subset of cluster, ne16)"),
    ({"modules": "ne16,cluster,gpu"}, "option modules: 'ne16,cluster,gpu' is not allowed"),
    ({"l1_kb": "-5"}, "option l1_kb: -5.0 is out of range (0.5 to 128)"),
])
def test_option_values_are_checked_not_silently_ignored(options, message):
    import re

    with pytest.raises(TargetError, match=re.escape(message)):
        compile(str(MODELS / "ad01_int8.tflite"), target="gap9", options=options)


@pytest.mark.slow
@pytest.mark.parametrize("network", NETWORKS)
def test_tflite_rounding_build_is_bit_exact_with_tflite_micro(network):
    """TensorFlow Lite Micro (what MCU users deploy today) as the reference: with every layer
    on the cluster, which requantizes as TFLite does, the outputs are identical to its."""
    from tflite_micro.python.tflite_micro import runtime

    path = str(MODELS / f"{network}.tflite")
    compiled = compile(path, target="gap9", options={"modules": "cluster"})
    interpreter = runtime.Interpreter.from_file(path)
    for seed in (0, 1):
        x = random_inputs(compiled.inputs, seed=seed)
        interpreter.set_input(list(x.values())[0], 0)
        interpreter.invoke()
        expected = interpreter.get_output(0)
        ours = list(compiled.run(x).values())[0]
        assert ours.dtype == expected.dtype
        assert np.array_equal(ours.reshape(expected.shape), expected)


def test_a_bias_zero_point_of_1000_verifies_or_is_one_line(tmp_path):
    """A TFLite fully-connected bias with zero point 1000 (TFLite says 0): the integer
    reference once ended in a traceback on its scalar operands; per-axis biases are refused by
    the importer in one line."""
    tflite = pytest.importorskip("tflite")
    source = MODELS / "ad01_int8.tflite"
    if not source.is_file():
        pytest.skip("../shared/models is not beside the checkout")
    data = bytearray(source.read_bytes())
    subgraph = tflite.Model.GetRootAsModel(data, 0).Subgraphs(0)
    biases = [i for i in range(subgraph.TensorsLength())
              if subgraph.Tensors(i).Type() == tflite.TensorType.INT32
              and subgraph.Tensors(i).Quantization()
              and subgraph.Tensors(i).Quantization().ZeroPointLength()]
    subgraph.Tensors(biases[1]).Quantization().ZeroPointAsNumpy()[:] = 1000
    path = tmp_path / "bias_zero_point.tflite"
    path.write_bytes(bytes(data))
    code, output = run_cli(["verify", str(path), "-t", "gap9", "-q"])
    assert "Traceback" not in output, output
    assert code == 0 and "verify passed" in output, output


#: Arm Vela 5.2's SRAM for Ethos-U55-128 with --optimise Size (../shared/notes/facts.md)
VELA_SRAM = {"pretrainedResnet_quant": 35 * 1024, "vww_96_int8": 48 * 1024}
MCUS = ("cortex-m4", "rv32imc")


@pytest.mark.slow
@pytest.mark.skipif(bool(missing_mcu_tools("cortex-m4") + missing_mcu_tools("rv32imc")),
                    reason=f"needs {missing_mcu_tools('cortex-m4') + missing_mcu_tools('rv32imc')}")
@pytest.mark.parametrize("network", NETWORKS)
@pytest.mark.parametrize("streamed", [False, True], ids=["untiled", "dfs-io-in-arena"])
def test_projects_run_bit_exactly_on_cortex_m4_and_rv32imc_under_qemu(network, streamed):
    """The C project built bare-metal (`make TARGET=...`, -Werror) and run under QEMU gives
    the artifact's bytes on Armv7E-M and RV32IMC. Streamed (--dfs --io-in-arena), the ELF's
    RAM (.data + .bss + the stack's high-water mark) is at most TensorFlow Lite Micro's arena
    and Vela's SRAM for ResNet-8 and VWW; the AutoEncoder's arena equals TFLite Micro's 768 B
    (640 inputs beside 128 outputs), so only the arena is compared there. The cluster's L1 is
    the emulation's 128 kB, apart from RAM."""
    compiled = compile(str(MODELS / f"{network}.tflite"), target="gap9", dfs=streamed,
                       io_in_arena=streamed)
    for mcu in MCUS:
        run, comparison = compiled.check_on_qemu(mcu, seed=1)
        assert all(exact for _, exact, _ in comparison), (mcu, comparison)
        memory = run.memory
        assert memory.l1 == 128 * 1024
        assert memory.flash_bytes > compiled.project.weights_bytes
        arena = compiled.project.total_activation_bytes
        assert arena + memory.stack_used <= memory.ram_bytes <= arena + memory.stack_used + 1024
        if streamed and network != "ad01_int8":
            assert memory.ram_bytes <= TFLM_HEAD[network], (mcu, memory)
            assert memory.ram_bytes <= VELA_SRAM.get(network, memory.ram_bytes), (mcu, memory)
        elif streamed:
            assert arena <= TFLM_HEAD[network]
    assert [b["target"] for b in compiled.report["mcu_builds"]] == list(MCUS)


@pytest.mark.skipif(bool(missing_mcu_tools("cortex-m55")),
                    reason=f"needs {missing_mcu_tools('cortex-m55')}")
def test_streamed_resnet8_runs_on_cortex_m55_from_the_command_line(tmp_path):
    """`edgebyoc compile --qemu cortex-m55` checks the project on the emulated Cortex-M55
    before writing the artifact, whose report then gives its flash and RAM."""
    code, out = run_cli(["compile", str(MODELS / "pretrainedResnet_quant.tflite"), "-t", "gap9",
                         "--dfs", "--io-in-arena", "-q", "--qemu", "cortex-m55",
                         "-o", str(tmp_path / "build")])
    assert code == 0, out
    assert "qemu cortex-m55 (mps3-an547): outputs bit-exact with the artifact" in out
    report = (tmp_path / "build" / "report.md").read_text()
    assert "| cortex-m55 | mps3-an547 | bit-exact |" in report


def test_the_shipped_calibration_prices_table_iv_within_30_percent():
    """The calibration fitted on Table IV's Cluster+CPU and NE16+CPU columns
    (benchmarks/gap9_table_iv.py) is in force by default, the report says so, and it predicts
    the test columns (Full, CPU only) of ResNet within 30 % of the board; uncalibrated, the
    paper's cost model is ~2.8x faster than the board."""
    path = str(MODELS / "pretrainedResnet_quant.tflite")
    board = {"cluster,ne16": 2.15, "": 342.72, "cluster": 5.48, "ne16": 2.90}
    for modules, ms in board.items():
        options = {"modules": modules, "ne16_fc": False}
        summary = compile(path, target="gap9", options=options, dfs=False).report["summary"]
        assert summary["predicted_latency_ms"] == pytest.approx(ms, rel=0.30)
        assert summary["calibration"]["file"].endswith("match_table_iv.json")
        assert summary["calibration"]["points"] == 8
        assert summary["calibration"]["error_band"] < 0.30
    raw = compile(path, target="gap9", dfs=False,
                  options={"calibration": "uncalibrated", "ne16_fc": False})
    assert raw.report["summary"]["predicted_latency_ms"] < 2.15 / 2
    assert raw.report["summary"]["calibration"]["uncalibrated"]


def test_calibration_keeps_fig_11s_mapping():
    """MATCH Fig. 11 (ResNet, Full): NE16 for the 3x3 convolutions, the cluster for the
    additions and the dense layer; the 1x1 stride-2 convolutions (C = 16 or 32) go to the
    cluster, which the paper says would have been faster than the NE16 it chose."""
    compiled = compile(str(MODELS / "pretrainedResnet_quant.tflite"), target="gap9",
                       options={"ne16_fc": False}, dfs=False)
    placed = {}
    for region in compiled.report["regions"]:
        kind = region["patterns"][0].split(".")[-1]
        placed.setdefault(kind, set()).add(region["module"])
    assert placed["add"] == {"cluster"} and placed["dense"] == {"cluster"}
    convs = [r for r in compiled.report["regions"] if r["patterns"][0].endswith("conv2d")]
    three = [r for r in convs if r["macs"] != 131072]
    assert {r["module"] for r in three} == {"ne16"}
    assert {r["module"] for r in convs if r["macs"] == 131072} == {"cluster"}


def test_a_vendor_calibration_file_changes_the_prediction(tmp_path):
    path = str(MODELS / "ad01_int8.tflite")
    slow = tmp_path / "board.json"
    slow.write_text(json.dumps({"format": "edgebyoc-calibration/1", "target": "gap9",
                                "values": {"cluster_layer_cycles": 100000}}))
    # a file overlays the parameters' defaults (the paper's model), not the shipped file
    base = compile(path, target="gap9", dfs=False, options={
        "modules": "cluster", "calibration": "uncalibrated"}).report["summary"]
    mine = compile(path, target="gap9", dfs=False, options={
        "modules": "cluster", "calibration": str(slow)}).report["summary"]
    layers = base["regions_offloaded"]
    assert mine["predicted_cycles"] == pytest.approx(base["predicted_cycles"] + layers * 100000)
    assert mine["calibration"]["file"] == str(slow)
    slow.write_text(json.dumps({"format": "edgebyoc-calibration/1", "target": "gap9",
                                "values": {"cluster_efficiency": 3}}))
    with pytest.raises(CompileError, match="cluster_efficiency: 3.0 is outside its bounds"):
        compile(path, target="gap9", options={"calibration": str(slow)})


@pytest.mark.slow
def test_calibrate_recovers_a_synthetic_boards_constants(tmp_path):
    """A synthetic board: 'measured' latencies are the gap9 models with known constants times
    1 + 1 % noise; `edgebyoc calibrate` (the command a vendor runs) recovers the constants
    within 5 %, re-pricing the offloaded layers through the plugin's cost hooks (modules chosen
    anew each round)."""
    import csv

    true = {"cluster_efficiency": 0.55, "cluster_layer_cycles": 12000.0,
            "ne16_layer_cycles": 25000.0, "host_cycles_per_mac": 6.0}
    board = tmp_path / "board.json"
    board.write_text(json.dumps({"format": "edgebyoc-calibration/1", "target": "gap9",
                                 "values": true}))
    rng = np.random.default_rng(7)
    rows = []
    for file in ("ad01_int8", "kws_ref_model", "pretrainedResnet_quant"):
        for modules in ("cluster", "ne16", "cluster;ne16"):
            options = {"modules": modules.replace(";", ","), "calibration": str(board)}
            ms = compile(str(MODELS / f"{file}.tflite"), target="gap9", options=options,
                         dfs=False).report["summary"]["predicted_latency_ms"]
            rows.append([f"{file} {modules}", str(MODELS / f"{file}.tflite"),
                         f"modules={modules.replace(';', ',')}", "false", "fit",
                         ms * (1 + rng.normal(0, 0.01))])
    path = tmp_path / "measured.csv"
    with open(path, "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["name", "model", "options", "dfs", "split", "latency_ms"])
        writer.writerows(rows)
    fitted = tmp_path / "fitted.json"
    arguments = ["calibrate", "gap9", str(path), "-o", str(fitted), "-q"]
    for name in true:
        arguments += ["--parameter", name]
    code, output = run_cli(arguments)
    assert code == 0, output
    written = json.loads(fitted.read_text())
    assert written["format"] == "edgebyoc-calibration/1" and written["target"] == "gap9"
    for name, value in true.items():
        assert written["values"][name] == pytest.approx(value, rel=0.05), name
        assert re.search(rf"^  {name} = ", output, re.M), name
    assert written["fit"]["fit"]["max_error"] < 0.05


def test_report_md_shows_the_plugins_own_cost_terms(tmp_path):
    """The breakdown terms beyond L_ops / L_mem (the calibration's efficiency and fixed
    overhead) appear in report.md, not only in report.json."""
    compiled = compile(str(MODELS / "ad01_int8.tflite"), target="gap9", dfs=False,
                       options={"modules": "cluster"})
    breakdown = compiled.report["regions"][0]["breakdown"][0]
    markdown = (compiled.save(tmp_path / "artifact") / "report.md").read_text()
    assert "| L_ops | L_mem | other terms |" in markdown
    assert f"efficiency {breakdown['efficiency']:.4g}, overhead " \
           f"{breakdown['overhead']:.4g}" in markdown
