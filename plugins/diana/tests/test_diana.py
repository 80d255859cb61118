"""diana: the four int8 MLPerf Tiny networks verified bit-exactly at L1 = 256 ... 16 kB, a ternary
network on the analog array (its modelled arithmetic checked bit-exactly), the generated C
under -Wall -Wextra -Werror and the sanitizers, the soc binding compile-checked, options
checked, and the cost models."""

import json
import re
import subprocess
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from edgebyoc.api import TargetError
from edgebyoc.api.match import LoopNest, search
from edgebyoc.api.testing import (build_c_project, check_installed_plugin, compile,
                                  missing_mcu_tools, random_inputs, run_c_project, run_cli,
                                  verify)

MODELS = Path(__file__).resolve().parents[4] / "shared" / "models" / "mlperf_tiny"
NETWORKS = ["pretrainedResnet_quant", "vww_96_int8", "kws_ref_model", "ad01_int8"]
SANITIZE = "-Og -g -fsanitize=address,undefined -fno-sanitize-recover=all"  # -Og: edgebyoc.testing.cproject.SANITIZE_FLAGS says why


def verified(compiled, seeds=(0, 1)):
    for seed in seeds:
        result, _ = verify(compiled, seed=seed)
        assert result.passed and result.reference == "numpy-integer", result.to_dict()
        exact, model = result.integer.agreements[0], result.integer.agreements[1]
        assert exact.identical_share == 1.0 and exact.max_diff == 0
        # both accelerators requantize like TFLite: identical to the int8 host build
        assert model.identical_share == 1.0 and model.max_diff == 0
        assert result.integer.rounding == {}


@pytest.mark.slow
@pytest.mark.parametrize("network", NETWORKS)
@pytest.mark.parametrize("l1_kb", [256, 128, 64, 32, 16])
def test_network_verifies_bit_exact_at_every_l1_size(network, l1_kb):
    compiled = compile(str(MODELS / f"{network}.tflite"), target="diana",
                       options={"l1_kb": l1_kb})
    assert compiled.report["c_project"]["generated"]
    for region in compiled.report["regions"]:
        if region["offloaded"]:
            assert region["module"] == "digital" and region["predicted_cycles"] > 0
            assert region["schedules"][0]["l1_bytes"] <= l1_kb * 1024 + 64 * 1024
    for row in compiled.report["operators"]:
        if row["module"] == "host" and row["macs"]:
            assert row["reason"], row
    verified(compiled)


def test_digital_layers_take_activations_as_channel_planes():
    """MATCH V-A: the digital array's NCHW-derived layout, channel planes cut in rows (NHCW).
    Its regions take and return NHCW; ResNet-8's chain of 12 digital layers needs a permute
    only at its NHWC input and into the host's average pooling, and the layer code copies and
    indexes planes cut in rows."""
    compiled = compile(str(MODELS / "pretrainedResnet_quant.tflite"), target="diana",
                       options={"l1_kb": 32})
    digital = [r for r in compiled.report["regions"] if r["module"] == "digital"]
    assert len(digital) == 13 and {r["activation_layout"] for r in digital} == {"NHCW"}
    summary = compiled.report["summary"]
    assert (summary["layout_transforms"], summary["layout_transforms_removed"]) == (2, 0)
    layer = next(text for name, text in compiled.project.files.items()
                 if name.startswith("layers/") and "_r0_" in name)
    assert "EDGEBYOC_NHCW" in layer and "planes cut in rows" in layer
    verified(compiled, seeds=(0,))


def test_ds_cnn_first_layer_falls_back_with_its_reason():
    compiled = compile(str(MODELS / "kws_ref_model.tflite"), target="diana")
    conv = next(r for r in compiled.report["operators"] if r["op"] == "nn.conv2d")
    assert conv["module"] == "host"
    assert "digital: the digital array runs 1x1, 3x3, 5x5 and 7x7 filters, not 10x4" in \
        conv["reason"]
    offloaded = [r for r in compiled.report["operators"] if r["module"] == "digital"]
    assert sum(r["macs"] for r in offloaded) > 0.7 * sum(
        r["macs"] for r in compiled.report["operators"])


def ternary_network(seed: int = 0) -> onnx.ModelProto:
    """A QDQ int8 CNN whose convolutions and dense layer have ternary weights (int8 -1 / 0 / 1
    with one scale per tensor), as a ternary-quantized model arrives; the third convolution
    has 1440 rows (160 x 3 x 3), more than the analog array's 1152."""
    rng = np.random.default_rng(seed)
    nodes, inits = [], []

    def const(name, array):
        inits.append(numpy_helper.from_array(array, name))
        return name

    def qdq(x, scale, name):
        s, z = const(f"{name}_s", np.float32(scale)), const(f"{name}_z", np.int8(0))
        nodes.append(helper.make_node("QuantizeLinear", [x, s, z], [f"{name}_q"]))
        nodes.append(helper.make_node("DequantizeLinear", [f"{name}_q", s, z], [f"{name}_dq"]))
        return f"{name}_dq"

    def conv(x, cin, cout, kernel, scale_in, name, relu=True):
        w = rng.choice(np.array([-1, 0, 1], np.int8), size=(cout, cin, kernel, kernel),
                       p=[0.3, 0.4, 0.3])
        w_scale = 0.05
        wq = const(f"{name}_w", w)
        nodes.append(helper.make_node("DequantizeLinear", [wq, const(f"{name}_ws", np.float32(
            w_scale)), const(f"{name}_wz", np.int8(0))], [f"{name}_wdq"]))
        b = rng.integers(-200, 200, cout).astype(np.int32)
        nodes.append(helper.make_node("DequantizeLinear", [const(f"{name}_b", b), const(
            f"{name}_bs", np.float32(scale_in * w_scale)), const(f"{name}_bz", np.int32(0))],
            [f"{name}_bdq"]))
        nodes.append(helper.make_node("Conv", [x, f"{name}_wdq", f"{name}_bdq"], [f"{name}_c"],
                                      kernel_shape=[kernel, kernel], pads=[kernel // 2] * 4))
        y = f"{name}_c"
        if relu:
            nodes.append(helper.make_node("Relu", [y], [f"{name}_r"]))
            y = f"{name}_r"
        return y

    x = qdq("input", 0.02, "in")
    x = qdq(conv(x, 8, 32, 3, 0.02, "c1"), 0.05, "a1")
    x = qdq(conv(x, 32, 160, 1, 0.05, "c2"), 0.05, "a2")
    x = qdq(conv(x, 160, 32, 3, 0.05, "c3"), 0.1, "a3")
    x = qdq(conv(x, 32, 16, 3, 0.1, "c4", relu=False), 0.2, "a4")
    graph = helper.make_graph(nodes, "ternary", [helper.make_tensor_value_info(
        "input", TensorProto.FLOAT, [1, 8, 12, 12])], [helper.make_tensor_value_info(
            x, TensorProto.FLOAT, [1, 16, 12, 12])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


@pytest.mark.parametrize("mode", ["auto", "force"])
def test_ternary_layers_run_on_the_analog_array_bit_exactly(mode):
    compiled = compile(ternary_network(), target="diana", options={"analog": mode})
    regions = compiled.report["regions"]
    modules = [r["module"] for r in regions]
    assert len(regions) == 4 and modules.count("analog") >= 3, modules
    if mode == "force":
        assert modules == ["analog"] * 4
        conv = [r for r in compiled.report["operators"] if r["op"] == "nn.conv2d"][0]
        assert "digital refused: ternary weights go to the analog array (analog=force)" in \
            conv["reason"]
    else:  # both modules were offered each layer and the cost model chose
        convs = [r for r in compiled.report["operators"] if r["op"] == "nn.conv2d"]
        assert len(convs) == 4 and all(
            re.search(r"latency [\d.e+]+ cycles beats (digital|analog)", r["reason"])
            for r in convs), [r["reason"] for r in convs]
    # the analog array reads channels-last, the digital array channel planes
    assert all(r["activation_layout"] == ("NHCW" if r["module"] == "digital" else "NHWC")
               for r in regions)
    verified(compiled, seeds=(0, 1, 2))


def test_analog_host_kernel_refuses_weights_it_cannot_program(tmp_path):
    """The emulated array computes ternary weights only: a weight of 2 is an error (-3)."""
    header = (Path(__file__).resolve().parents[1] / "edgebyoc_diana" / "templates")
    from edgebyoc.api.match import core_file

    (tmp_path / "edgebyoc_match.h").write_text(core_file("edgebyoc_match.h"))
    (tmp_path / "edgebyoc_match_host.h").write_text(core_file("edgebyoc_match_host.h"))
    driver = tmp_path / "driver.c"
    driver.write_text('#include "diana_analog_host.h"\n#include <stdio.h>\nint main(void) {\n'
                      '  edgebyoc_layer_t L = {EDGEBYOC_CONV2D, 1, 2, 1, 1, 1, 1, 1, 1, 1, 1, '
                      '0, 0, 0, 0, -128, 127, 0, 2, NULL, 1, EDGEBYOC_NHWC};\n'
                      '  edgebyoc_box_t b = {0, 0, 0, 1, 1, 1}, ib = {0, 0, 0, 2, 1, 1};\n'
                      '  int8_t x[2] = {3, 4}, w[2] = {1, -1}, w2[2] = {2, 0}, y[1];\n'
                      '  int32_t bias[1] = {0}, m[1] = {1 << 30}, s[1] = {1};\n'
                      '  int ok = diana_host_analog_kernel(&L, x, ib, NULL, w, bias, m, s, b, '
                      'y, b, b);\n  int bad = diana_host_analog_kernel(&L, x, ib, NULL, w2, '
                      'bias, m, s, b, y, b, b);\n  printf("%d %d %d\\n", ok, (int)y[0], bad);\n'
                      '  return 0;\n}\n')
    exe = tmp_path / "driver"
    subprocess.run(["gcc", "-std=c99", "-Wall", "-Wextra", "-Werror", f"-I{header}",
                    f"-I{tmp_path}", "-o", str(exe), str(driver)], check=True)
    out = subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["0", "-1", "-3"]  # (3 - 4) * 2^30 * 2^1 / 2^31 = -1; then the refusal


@pytest.mark.slow
@pytest.mark.parametrize("network, options", [("pretrainedResnet_quant", {"l1_kb": 16}),
                                              ("ternary", {"analog": "force"})])
def test_deployable_project_builds_clean_under_sanitizers(tmp_path, network, options):
    model = ternary_network() if network == "ternary" else str(MODELS / f"{network}.tflite")
    compiled = compile(model, target="diana", options=options)
    files = compiled.project_files()
    assert "diana.mk" in files and files["include/diana_soc.h"]
    binary = build_c_project(compiled, tmp_path / "project", sanitize=True)
    for seed in (0, 1):
        x = random_inputs(compiled.inputs, seed=seed)
        ours = run_c_project(compiled, x, binary=binary)
        assert np.array_equal(list(ours.values())[0], list(compiled.run(x).values())[0])


@pytest.mark.slow
@pytest.mark.parametrize("network, total, tflm", [("pretrainedResnet_quant", 15_872, 49_152),
                                                  ("vww_96_int8", 35_808, 73_728)])
def test_streamed_projects_stream_channel_planes_bit_exactly(tmp_path, network, total, tflm):
    """--dfs --io-in-arena: the digital array's regions and the input's transpose to planes
    cut in rows stream in row bands (rings of rows), the chain's output written over its
    input's dead rows; outputs equal the untiled project's, clean under ASan and UBSan, at
    most half of TFLite Micro's arena (``tflm``, measured by its interpreter). The digital
    array's weight memory keeps each chain's weights for all its bands (ResNet-8: its chain
    cut in two, each part's weights fitting the 64 kB, the two parts' places overlapping),
    so the predicted latency stays within 1.20x the untiled project's (issue #30)."""
    path = str(MODELS / f"{network}.tflite")
    untiled = compile(path, target="diana", dfs=False, io_in_arena=True)
    streamed = compile(path, target="diana", dfs=True, io_in_arena=True)
    assert streamed.project.total_activation_bytes == total and 2 * total <= tflm
    chains = streamed.report["memory"]["chains"]
    assert chains[0]["overlap"] is not None
    assert all(chain["resident_weights"] for chain in chains)
    assert 0 < streamed.project.weight_memory_bytes <= 64 * 1024
    summary = streamed.report["summary"]
    assert summary["predicted_cycles"] <= 1.20 * summary["predicted_cycles_untiled"]
    assert "step1_permute_dims(" in streamed.project.files["network.c"]  # its row form
    binary = streamed.project.make(tmp_path / "project", cflags=SANITIZE, ldflags=SANITIZE)
    x = random_inputs(streamed.inputs, seed=2)
    expected = list(untiled.run(x).values())[0]
    assert np.array_equal(list(streamed.run(x).values())[0], expected)
    assert np.array_equal(streamed.project.run_binary(binary, list(x.values()))[0], expected)


def test_soc_flavour_compiles_against_the_runtime_declarations(tmp_path):
    compiled = compile(ternary_network(), target="diana", options={"analog": "force"})
    root = compiled.project.write(tmp_path / "project")
    layers = sorted(root.glob("layers/*.c"))
    assert layers
    for source in layers + [root / "network.c", root / "weights.c"]:
        subprocess.run(["gcc", "-std=c99", "-Wall", "-Wextra", "-Werror", "-fsyntax-only",
                        f"-I{root}", f"-I{root / 'include'}", f"-I{root / 'bindings' / 'soc'}",
                        str(source)], check=True)
    soc = (root / "bindings" / "soc" / f"{layers[0].stem}_api.h").read_text()
    assert "diana_dma_l2_to_l1" in soc and "diana_analog_layer_tile" in soc
    assert "edgebyoc_host" not in soc
    # blocking DMA: the binding has no synchronization family, the waits are no-ops
    assert re.search(r"#define \w+_dma_wait\(transfer\) \(\(void\)\(transfer\)\)", soc)


@pytest.mark.parametrize("options, message", [
    ({"modules": "foo"}, "option modules: 'foo' is not allowed (allowed: a comma-separated "
                         "subset of digital, analog)"),
    ({"modules": "digital,analog,gpu"}, "option modules: 'digital,analog,gpu' is not allowed"),
    ({"l1_kb": "-5"}, "option l1_kb: -5 is out of range (8 to 256)"),
    ({"l1_kb": "512"}, "option l1_kb: 512 is out of range (8 to 256)"),
    ({"analog": "always"}, "option analog: 'always' is not allowed (allowed: one of auto, "
                           "force, off)"),
])
def test_option_values_are_checked(options, message):
    with pytest.raises(TargetError, match=re.escape(message)):
        compile(str(MODELS / "ad01_int8.tflite"), target="diana", options=options)


def test_modules_option_and_analog_off():
    compiled = compile(ternary_network(), target="diana", options={"analog": "off"})
    assert {r["module"] for r in compiled.report["regions"]} == {"digital"}
    compiled = compile(ternary_network(), target="diana", options={"modules": "analog"})
    assert {r["module"] for r in compiled.report["regions"]} == {"analog"}
    compiled = compile(str(MODELS / "ad01_int8.tflite"), target="diana",
                       options={"modules": ""})
    assert compiled.report["regions"] == []


def test_cost_models():
    from edgebyoc_diana import cost

    conv = LoopNest("conv2d", K=64, C=64, OY=32, OX=32, FY=3, FX=3, IY=32, IX=32,
                    padding=(1, 1, 1, 1))
    capacity = {"L1": (256 * 1024, ("I", "O")), "WMEM": (64 * 1024, ("W",))}
    best = search(conv, capacity, lambda s: cost.price("digital", conv, s), {"K": 16, "OX": 16},
                  double_buffering=False)
    macs_per_cycle = conv.macs / best.cost.latency_cycles
    assert 100 < macs_per_cycle < 256  # the array's 256 MACs per cycle, less 23-cycle passes
    assert best.cost.latency_cycles == pytest.approx(best.cost.breakdown["L_ops"] +
                                                     best.cost.breakdown["L_mem"])
    # K and OX pad to 16: 17 output channels cost two passes per position
    narrow = LoopNest("conv2d", K=17, C=8, OY=4, OX=16, FY=1, FX=1, IY=4, IX=16)
    assert cost.digital_tile_cycles(narrow, 17, 4, 16) == 2 * 4 * (8 + 2 + 23)
    # analog: PLiNIO's output-x unrolling rule
    assert cost.ox_unroll(LoopNest("conv2d", K=64, C=32, OY=8, OX=8, FY=3, FX=3, IY=8,
                                   IX=8)) == 4
    assert cost.ox_unroll(LoopNest("conv2d", K=512, C=128, OY=8, OX=8, FY=3, FX=3, IY=8,
                                   IX=8)) == 1


def test_conformance():
    check_installed_plugin("diana", workloads=True)


def test_report_prices_host_layers_with_the_risc_v_model():
    from edgebyoc_diana import cost

    compiled = compile(str(MODELS / "kws_ref_model.tflite"), target="diana",
                       options={"modules": "digital"})
    summary = compiled.report["summary"]
    host = [row for row in compiled.report["operators"] if row["module"] == "host"]
    for row in host:
        elements = int(np.prod(row["shape"])) if row["shape"] else 1
        shipped = json.loads(Path(cost.__file__).with_name("calibration").joinpath(
            "match_table_iii.json").read_text())["values"]
        assert row["predicted_cycles"] == pytest.approx(cost.host_cycles(
            row["macs"], elements, {**cost.DEFAULTS, **shipped}))
    offloaded = sum(r["predicted_cycles"] for r in compiled.report["regions"] if r["offloaded"])
    assert summary["predicted_cycles"] == pytest.approx(
        offloaded + sum(row["predicted_cycles"] for row in host))
    assert summary["predicted_latency_ms"] == pytest.approx(
        summary["predicted_cycles"] / cost.CLOCK_HZ * 1e3)
    # the 10x4 first layer runs on the host, fused with its requantization (no int32 tensor
    # stored): the arena is no larger than TensorFlow Lite Micro's 16,000 bytes
    assert host and compiled.report["c_project"]["arena_bytes"] <= 16_000


@pytest.mark.parametrize("k_tile, double", [(20, False), (8, True), (40, False)])
def test_digital_weights_are_k_padded_and_interleaved_by_16(tmp_path, k_tile, double):
    """The digital array reads 16 output channels' weights at once: the codegen stores them
    K-padded to a multiple of 16 and interleaved by 16 (a static reshape, at compile time),
    the template copies whole blocks (K tiles of 20 and 8 start inside blocks), activations
    move as channel planes and the host emulation computes exactly the integer reference."""
    from edgebyoc.api.match import (IntegerLayer, Schedule, host_binding, layer_files,
                                    module_weights, translation_unit)
    from edgebyoc.api.quant import Rounding, quantize_multipliers, requantize
    from edgebyoc_diana import plugin

    rng = np.random.default_rng(7)
    k, c = 40, 8
    nest = LoopNest("conv2d", K=k, C=c, OY=9, OX=7, FY=3, FX=3, IY=9, IX=7,
                    padding=(1, 1, 1, 1)).with_activation_layout(plugin.DIGITAL.activation_layout)
    multiplier, shift = quantize_multipliers(np.full(k, 0.0021))
    layer = IntegerLayer(nest, (0,), weight=rng.integers(-127, 128, (3, 3, c, k)),
                         kernel_layout="HWIO", bias=rng.integers(-500, 500, k).astype(np.int32),
                         multiplier=multiplier, shift=shift, zp_in=-3, zp_out=5)
    weights = module_weights(layer, block=16)
    assert weights.shape == (48, 9 * c)  # K padded 40 -> 48
    ohwi = layer.weights_ohwi().reshape(k, -1)
    blocked = weights.reshape(3, 9 * c, 16)  # block, tap x channel, channel in the block
    assert np.array_equal(blocked[1, :, 3], ohwi[19]) and not blocked[2, :, 8:].any()
    schedule = Schedule(nest, tiles={"K": k_tile, "OY": 9, "OX": 7}, order=("K",),
                        fill={"I": 0, "W": 1, "O": 1}, double_buffer=double)
    files = layer_files(plugin.DIGITAL, "layer", layer, schedule, {"host": host_binding()},
                        {"l1_kb": 256}, weights, c, w_block=16)
    source = translation_unit(files, "layers/layer.c", "host")
    assert "(int)sizeof(int32_t), 0, 0, 0, 0);" in source and \
        ", 16, EDGEBYOC_NHCW\n};" in source
    x = rng.integers(-128, 128, (9, 7, c)).astype(np.int8)
    x_planes = np.ascontiguousarray(x.transpose(0, 2, 1))  # rows of channel planes

    def carray(name, ctype, values):
        return (f"static const {ctype} {name}[] = "
                f"{{{', '.join(str(int(v)) for v in np.ravel(values))}}};\n")

    driver = source + carray("x", "int8_t", x_planes) + carray("w", "int8_t", weights) + \
        carray("b", "int32_t", layer.bias) + carray("m", "int32_t", layer.multiplier) + \
        carray("s", "int32_t", layer.shift) + f"""
#include <stdio.h>
int main(void) {{
  static int8_t y[9 * 7 * {k}];
  int i;
  if (layer(x, NULL, w, b, m, s, y, NULL) != 0) return 2;
  for (i = 0; i < 9 * 7 * {k}; ++i) printf("%d\\n", y[i]);
  return 0;
}}
"""
    src = tmp_path / "digital.c"
    src.write_text(driver)
    exe = tmp_path / "digital"
    subprocess.run(["gcc", "-std=c99", "-Wall", "-Wextra", "-Werror", "-g",
                    "-fsanitize=address,undefined", "-fno-sanitize-recover=all",
                    "-o", str(exe), str(src)], check=True)
    run = subprocess.run([str(exe)], capture_output=True, text=True, check=True)
    got = np.array([int(v) for v in run.stdout.split()], dtype=np.int8).reshape(9, k, 7)
    got = got.transpose(0, 2, 1)
    acc = np.zeros((9, 7, k), dtype=np.int64)
    padded = np.pad(x.astype(np.int64) - layer.zp_in, [(1, 1), (1, 1), (0, 0)])
    for i in range(3):
        for j in range(3):
            acc += padded[i:i + 9, j:j + 7] @ layer.weight[i, j].astype(np.int64)
    want = requantize(acc, layer.bias, layer.multiplier, layer.shift, 5, -128, 127,
                      Rounding.of(plugin.DIGITAL.requantize_rounding))
    assert np.array_equal(got, want)


#: TensorFlow Lite Micro's arena head and Arm Vela 5.2's SRAM for Ethos-U55-128 with
#: --optimise Size (../shared/notes/facts.md)
TFLM_ARENA = {"pretrainedResnet_quant": 49_152, "vww_96_int8": 73_728, "kws_ref_model": 16_000,
              "ad01_int8": 768}
VELA_SRAM = {"pretrainedResnet_quant": 35 * 1024, "vww_96_int8": 48 * 1024}
MCUS = ("rv32imc", "cortex-m4")
MISSING = missing_mcu_tools("rv32imc") + missing_mcu_tools("cortex-m4")


@pytest.mark.slow
@pytest.mark.skipif(bool(MISSING), reason=f"needs {MISSING}")
@pytest.mark.parametrize("network", NETWORKS)
@pytest.mark.parametrize("streamed", [False, True], ids=["untiled", "dfs-io-in-arena"])
def test_projects_run_bit_exactly_on_rv32imc_and_cortex_m4_under_qemu(network, streamed):
    """DIANA's host is a RISC-V core: the C project built bare-metal for RV32IMC (and
    Cortex-M4) and run under QEMU gives the artifact's bytes, channel planes and analog
    layers included. Streamed (--dfs --io-in-arena) its RAM (.data + .bss + the stack's
    high-water mark) is at most TensorFlow Lite Micro's arena and, for ResNet-8 and VWW,
    Vela's SRAM; the AutoEncoder's arena equals TFLite Micro's 768 B, so only the arena is
    compared there. The emulated L1 (832 kB with the analog weight memory) is apart from RAM."""
    compiled = compile(str(MODELS / f"{network}.tflite"), target="diana", dfs=streamed,
                       io_in_arena=streamed)
    arena = compiled.project.total_activation_bytes
    for mcu in MCUS:
        run, comparison = compiled.check_on_qemu(mcu, seed=2)
        assert all(exact for _, exact, _ in comparison), (mcu, comparison)
        memory = run.memory
        assert memory.l1 == compiled.project.host_l1_bytes + compiled.project.weight_memory_bytes
        assert compiled.project.host_l1_bytes > 0
        assert arena + memory.stack_used <= memory.ram_bytes <= arena + memory.stack_used + 1024
        if streamed and network != "ad01_int8":
            assert memory.ram_bytes <= TFLM_ARENA[network], (mcu, memory)
            assert memory.ram_bytes <= VELA_SRAM.get(network, memory.ram_bytes), (mcu, memory)
        elif streamed:
            assert arena <= TFLM_ARENA[network]


@pytest.mark.skipif(bool(missing_mcu_tools("rv32imc")),
                    reason=f"needs {missing_mcu_tools('rv32imc')}")
def test_verify_checks_the_project_on_the_emulated_risc_v(tmp_path):
    """`edgebyoc verify --qemu rv32imc -o DIR`: the reference check, then the project on the
    emulated RISC-V against the artifact; the saved report gives the ELF's flash and RAM."""
    code, out = run_cli(["verify", str(MODELS / "kws_ref_model.tflite"), "-t", "diana", "-q",
                         "--qemu", "rv32imc", "-o", str(tmp_path / "build")])
    assert code == 0, out
    assert "qemu rv32imc (virt): outputs bit-exact with the artifact" in out
    assert "verify passed" in out
    assert "| rv32imc | virt | bit-exact |" in (tmp_path / "build" / "report.md").read_text()


def test_the_shipped_calibration_prices_table_iii_within_30_percent():
    """The calibration fitted on the TVM column and MATCH's MobileNet and autoencoder figures
    (benchmarks/diana_table_iii.py) predicts the test points, MATCH's ResNet (0.79 ms) and
    DS-CNN (7.30 ms), within 30 %."""
    for file, ms in (("pretrainedResnet_quant", 0.79), ("kws_ref_model", 7.30)):
        summary = compile(str(MODELS / f"{file}.tflite"), target="diana", dfs=False,
                          options={"modules": "digital"}).report["summary"]
        assert summary["predicted_latency_ms"] == pytest.approx(ms, rel=0.30)
        assert summary["calibration"]["file"].endswith("match_table_iii.json")
