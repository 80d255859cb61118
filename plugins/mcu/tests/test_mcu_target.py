"""mcu: the four int8 MLPerf Tiny networks as portable C on a plain microcontroller, verified
bit-exactly against the integer reference, built for Cortex-M4 and RV32IMC (Cortex-M55 once)
and run under QEMU bit-exactly against the artifact, untiled and streamed depth-first; RAM
from the ELF against TensorFlow Lite Micro's arena and Vela's SRAM; the cost model's
predicted instructions within 20 % of QEMU's count; clear errors for bad options and float
models."""

from pathlib import Path

import pytest

from edgebyoc.api import CompileError, TargetError
from edgebyoc.api.testing import (check_installed_plugin, compile, missing_mcu_tools,
                                  run_cli, small_convnet, verify)

MODELS = Path(__file__).resolve().parents[4] / "shared" / "models" / "mlperf_tiny"
NETWORKS = ["pretrainedResnet_quant", "vww_96_int8", "kws_ref_model", "ad01_int8"]
#: TensorFlow Lite Micro's arena head and Vela 5.2's SRAM for Ethos-U55-128 with
#: --optimise Size (../shared/notes/facts.md)
TFLM_ARENA = {"pretrainedResnet_quant": 49_152, "vww_96_int8": 73_728, "kws_ref_model": 16_000,
              "ad01_int8": 768}
VELA_SRAM = {"pretrainedResnet_quant": 35 * 1024, "vww_96_int8": 48 * 1024}
MISSING = missing_mcu_tools("cortex-m4") + missing_mcu_tools("rv32imc")
needs_qemu = pytest.mark.skipif(bool(MISSING), reason=f"needs {MISSING}")


def test_conformance():
    check_installed_plugin("mcu")


@pytest.mark.slow
@pytest.mark.parametrize("network", NETWORKS)
def test_every_layer_runs_as_portable_c_bit_exactly(network):
    """No module: every operator is a kernel of the C project (the artifact runs that C), and
    the outputs equal the numpy executor of the same integer arithmetic."""
    compiled = compile(str(MODELS / f"{network}.tflite"), target="mcu")
    summary = compiled.report["summary"]
    assert summary["offloaded_operators"] == 0 and compiled.report["c_project"]["generated"]
    assert compiled.project.region_steps == 0 and compiled.project.host_steps > 0
    assert summary["predicted_cycles"] > summary["macs"]  # instructions, more than one a MAC
    for seed in (0, 1):
        result, _ = verify(compiled, seed=seed)
        assert result.reference == "numpy-integer" and result.passed, result.to_dict()


@pytest.mark.slow
@needs_qemu
@pytest.mark.parametrize("network", NETWORKS)
def test_cortex_m4_and_rv32imc_run_it_within_20_percent_of_the_predicted_instructions(network):
    """For each ISA the report's predicted instructions (the cost model fitted on other
    networks, plugins/mcu/edgebyoc_mcu/icount.json) are within 20 % of those QEMU counts
    while the network runs; the outputs are the artifact's, bit for bit; no L1 apart from
    RAM."""
    for isa in ("cortex-m4", "rv32imc"):
        compiled = compile(str(MODELS / f"{network}.tflite"), target="mcu",
                           options={"isa": isa})
        run, comparison = compiled.check_on_qemu(isa, seed=1)
        assert all(exact for _, exact, _ in comparison), (isa, comparison)
        assert run.memory.l1 == 0
        predicted = compiled.report["summary"]["predicted_cycles"]
        assert abs(predicted / run.instructions - 1) <= 0.20, (isa, predicted, run.instructions)


@pytest.mark.slow
@needs_qemu
@pytest.mark.parametrize("network", NETWORKS)
def test_streamed_projects_fit_tflite_micro_and_vela_bit_exactly(network):
    """--dfs --io-in-arena streams the kernels in row bands: RAM from the ELF (.data, .bss,
    the stack's high-water mark) at most TensorFlow Lite Micro's arena and, for ResNet-8 and
    VWW, Vela's SRAM; the AutoEncoder's arena equals TFLite Micro's 768 B (640 inputs beside
    128 outputs: nothing to stream), so only its arena is compared."""
    path = str(MODELS / f"{network}.tflite")
    untiled = compile(path, target="mcu", io_in_arena=True, dfs=False)
    streamed = compile(path, target="mcu", io_in_arena=True, dfs=True)
    arena = streamed.project.total_activation_bytes
    assert arena <= untiled.project.total_activation_bytes
    for isa in ("cortex-m4", "rv32imc"):
        run, comparison = streamed.check_on_qemu(isa, seed=2)
        assert all(exact for _, exact, _ in comparison), (isa, comparison)
        ram = run.memory.ram_bytes
        assert arena + run.memory.stack_used <= ram <= arena + run.memory.stack_used + 1024
        if network == "ad01_int8":
            assert arena <= TFLM_ARENA[network]
        else:
            assert ram <= TFLM_ARENA[network], (isa, run.memory)
            assert ram <= VELA_SRAM.get(network, ram), (isa, run.memory)


@needs_qemu
@pytest.mark.skipif(bool(missing_mcu_tools("cortex-m55")),
                    reason=f"needs {missing_mcu_tools('cortex-m55')}")
def test_cortex_m55_from_the_command_line(tmp_path):
    code, out = run_cli(["compile", str(MODELS / "kws_ref_model.tflite"), "-t", "mcu",
                         "--option", "isa=cortex-m55", "--dfs", "--io-in-arena", "-q",
                         "--qemu", "cortex-m55", "-o", str(tmp_path / "build")])
    assert code == 0, out
    assert "qemu cortex-m55 (mps3-an547): outputs bit-exact with the artifact" in out
    report = (tmp_path / "build" / "report.md").read_text()
    assert "| cortex-m55 | mps3-an547 | bit-exact |" in report
    assert "has no execution modules: every operator runs on its processor" in report


def test_an_unknown_isa_is_named():
    with pytest.raises(TargetError, match="option isa: 'cortex-a53' is not allowed "
                       r"\(allowed: one of cortex-m4, cortex-m55, rv32imc\)"):
        compile(str(MODELS / "ad01_int8.tflite"), target="mcu", options={"isa": "cortex-a53"})


def test_a_float_model_is_refused_with_the_reason():
    with pytest.raises(CompileError, match="mcu runs int8 models: this one has 3 float "
                       "convolution / matmul layers and no quantized layer"):
        compile(small_convnet(8), target="mcu")
