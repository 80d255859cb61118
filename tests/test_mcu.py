"""C projects on real MCU instruction sets (codegen.mcu, templates/mcu): the generated project
cross-built with `make TARGET=cortex-m4|cortex-m55|rv32imc` under -Wall -Wextra -Werror, run
under QEMU (semihosting harness, painted stack) and compared with the host build of the same
C; flash and RAM from the ELF; clear errors for missing tools, bad arguments and failing runs.
Without the Debian toolchains and QEMU (debian-packages.txt) these tests are skipped with
the reason."""

import json
import subprocess
from pathlib import Path

import numpy as np
import pytest

import edgebyoc
from edgebyoc.api.testing import run_cli
from edgebyoc.codegen import mcu
from edgebyoc.codegen.cproject import build_project
from edgebyoc.errors import EdgebyocError
from edgebyoc.frontend import random_inputs

from test_cproject import _float_graph
from test_cstream import RESNET8, _planar_registry

MODELS = Path(__file__).resolve().parents[2] / "shared" / "models" / "mlperf_tiny"


def needs(*targets):
    missing = sorted({tool for name in targets
                      for tool in mcu.missing_tools(mcu.MCU_TARGETS[name])})
    packages = sorted({p for name in targets for p in mcu.MCU_TARGETS[name].packages})
    return pytest.mark.skipif(bool(missing), reason=f"needs {', '.join(missing)} (Debian "
                                                    f"packages {' '.join(packages)})")


ALL = tuple(mcu.MCU_TARGETS)
FLOAT_INPUTS = [np.random.default_rng(1).standard_normal((1, 9, 11, 4)).astype("float32"),
                np.random.default_rng(2).standard_normal(8).astype("float32")]


@needs(*ALL)
@pytest.mark.parametrize("target", ALL)
def test_every_float_kernel_runs_on_the_mcu_as_on_the_host(tmp_path, target):
    """The core's float kernels (convolutions, pooling, matmul, softmax's expf ...) built
    bare-metal with -Werror and run under QEMU agree with the host gcc build of the same C
    (the cross libm may round expf differently: 1e-5 of the largest value)."""
    project = build_project(_float_graph(), {}, "floats", ["x", "bias"], ["softmax", "dense"])
    expected = project.run_binary(project.make(tmp_path / "host"), FLOAT_INPUTS)
    run = mcu.run_on_qemu(project.project_files(), target, FLOAT_INPUTS,
                          [(d, s) for _, d, s in project.outputs], directory=tmp_path / target)
    for got, want in zip(run.outputs, expected):
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-5 * np.max(np.abs(want)))
    memory = run.memory
    # the arena and the harness's static input / output buffers are .bss; weights are flash
    assert memory.bss >= project.arena.size_bytes + project.io_bytes
    assert memory.static_ram_bytes <= project.total_activation_bytes + 1024
    assert memory.rodata >= project.weights_bytes
    assert 0 < memory.stack_used < memory.stack_reserved == 16384
    assert memory.ram_bytes == memory.data + memory.bss + memory.stack_used
    assert memory.l1 == 0  # no layer on the host emulation of an accelerator
    assert (tmp_path / target / f"build-{target}" / "network.elf").is_file()


@needs("rv32imc", "cortex-m4")
def test_instruction_counts_of_the_run_and_of_each_step(tmp_path):
    """QEMU runs with -icount: the harness counts the instructions edgebyoc_network_run
    executes (minstret on RISC-V, SysTick on Cortex-M) and, built with PROFILE=1, those of
    each step, which add up to the run's; the same count run after run."""
    project = build_project(_float_graph(), {}, "floats", ["x", "bias"], ["softmax", "dense"])
    outputs = [(d, s) for _, d, s in project.outputs]
    for target in ("rv32imc", "cortex-m4"):
        plain = mcu.run_on_qemu(project.project_files(), target, FLOAT_INPUTS, outputs)
        again = mcu.run_on_qemu(project.project_files(), target, FLOAT_INPUTS, outputs)
        profiled = mcu.run_on_qemu(project.project_files(), target, FLOAT_INPUTS, outputs,
                                   profile=True)
        assert plain.instructions == again.instructions > 10_000
        assert plain.step_instructions == {}
        steps = profiled.step_instructions
        assert sorted(steps) == list(range(1, project.steps + 1))
        # the counter's own reads cost a few instructions a step; Cortex-M counts to 40
        assert 0.9 * profiled.instructions <= sum(steps.values()) <= profiled.instructions
        assert abs(profiled.instructions / plain.instructions - 1) < 0.1
        for got, want in zip(profiled.outputs, plain.outputs):
            assert np.array_equal(got, want)


@needs("cortex-m4", "rv32imc")
@pytest.mark.slow
def test_integer_kws_is_bit_exact_on_cortex_m4_and_rv32imc(tmp_path):
    """DS-CNN's int8 host kernels (requantization in integer arithmetic) give the same bytes
    on Armv7E-M and RV32IMC as on x86-64; the ELF's RAM is the untiled arena (TFLite
    Micro's 16,000 B, inputs and outputs in it), the stack and under 1 kB of harness and
    library state."""
    from edgebyoc.frontend import import_model
    from edgebyoc.quant.integerize import integerize
    from edgebyoc.quant.reference import run_reference
    from tvm import relax

    imported = import_model(str(MODELS / "kws_ref_model.tflite"))
    mod = relax.transform.FoldConstant()(integerize(imported.mod))
    project = build_project(mod, {}, "kws", [s.name for s in imported.inputs],
                            [s.name for s in imported.outputs], io_in_arena=True)
    # the int8 weights stay int8 in flash (integerization widens them to int32): 29,072 B of
    # constants, the weights' 22.5 k parameters and the int32 biases and multipliers
    assert project.weights_bytes == 29_072
    x = list(random_inputs(imported.inputs, seed=0).values())
    want = run_reference(mod, x)[0]
    for target in ("cortex-m4", "rv32imc"):
        run = mcu.run_on_qemu(project.project_files(), target, x,
                              [(d, s) for _, d, s in project.outputs])
        assert np.array_equal(run.outputs[0], want), target
        memory = run.memory
        assert project.arena.size_bytes <= 16_000
        assert project.arena.size_bytes + memory.stack_used < memory.ram_bytes <= \
            project.arena.size_bytes + memory.stack_used + 1024, memory


@needs("cortex-m4")
def test_streamed_resnet8_on_cortex_m4_through_the_user_api(make_plugin, isolated_registry,
                                                            tmp_path):
    """A compiled model checks its C project on an MCU (CompiledModel.check_on_qemu): the
    streamed ResNet-8 of a MATCH-style target is bit-exact with the artifact, and the report
    records flash, RAM and the emulated L1 apart from RAM (report.json and report.md)."""
    registry = _planar_registry(make_plugin, isolated_registry, "NHWC")
    compiled = edgebyoc.compile(str(RESNET8), target="planar", options={"l1_kb": 8}, dfs=True,
                                io_in_arena=True, registry=registry)
    run, comparison = compiled.check_on_qemu("cortex-m4", seed=3)
    assert comparison == [("Identity_int8", True, 0.0)]
    # QEMU's count of the instructions edgebyoc_network_run executed (-icount)
    assert 1_000_000 < run.instructions == compiled.report["mcu_builds"][0]["instructions"]
    memory = run.memory
    assert memory.l1 == 8 * 1024  # the one emulated L1 every layer shares, in its section
    # RAM: the streamed arena (15,872 B, inputs and outputs in it), the stack and ~0.6 kB of
    # harness, counter and library state: at most 37 % of TFLite Micro's arena (49,152 B),
    # half of Vela's SRAM for Ethos-U55 (35.00 KiB)
    assert 15_872 + memory.stack_used <= memory.ram_bytes <= 15_872 + memory.stack_used + 1024
    assert memory.ram_bytes <= 0.37 * 49_152 and memory.ram_bytes <= 35 * 1024 / 2
    build = compiled.report["mcu_builds"][0]
    assert build["target"] == "cortex-m4" and build["bit_exact"]
    assert build["ram_bytes"] == memory.ram_bytes and build["l1_bytes"] == 8192
    saved = compiled.save(tmp_path / "artifact")
    assert json.loads((saved / "report.json").read_text())["mcu_builds"] == [build]
    text = (saved / "report.md").read_text()
    assert f"| cortex-m4 | mps2-an386 | bit-exact | {memory.flash_bytes} | " \
           f"{memory.ram_bytes} |" in text
    # the saved artifact's own c_project/ builds the same ELF (`edgebyoc run --qemu`)
    code, out = run_cli(["run", str(saved), "--random", "--seed", "3", "--qemu", "cortex-m4"])
    assert code == 0, out
    assert (f"qemu cortex-m4 (mps2-an386): outputs bit-exact with the artifact; flash "
            f"{memory.flash_bytes} B, RAM {memory.ram_bytes} B") in out


def test_a_target_without_a_c_project_is_named(tmp_path):
    from edgebyoc.testing.models import small_convnet

    model = small_convnet(8)
    compiled = edgebyoc.compile(model, target="host")
    with pytest.raises(EdgebyocError, match="target 'host' deploys no C project"):
        compiled.project_files()
    if not mcu.missing_tools(mcu.MCU_TARGETS["cortex-m4"]):
        path = tmp_path / "model.onnx"
        path.write_bytes(model.SerializeToString())
        code, out = run_cli(["compile", str(path), "-o", str(tmp_path / "out"), "-q",
                             "--qemu", "cortex-m4"])
        assert code == 1 and "error: target 'host' deploys no C project" in out
        assert not (tmp_path / "out").exists()  # nothing half-written


def test_missing_tools_name_the_debian_packages(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    target = mcu.mcu_target("rv32imc")
    assert mcu.missing_tools(target) == ["make", "riscv64-unknown-elf-gcc",
                                         "riscv64-unknown-elf-size", "qemu-system-riscv32"]
    with pytest.raises(mcu.McuToolsMissing, match="install the Debian packages "
                       "gcc-riscv64-unknown-elf picolibc-riscv64-unknown-elf qemu-system-misc"):
        mcu.check_tools(target)
    code, out = run_cli(["run", str(tmp_path), "--qemu", "rv32imc"])
    assert code == 1 and "error: rv32imc builds need make, riscv64-unknown-elf-gcc" in out
    with pytest.raises(ValueError, match="unknown MCU target 'cortex-a53': one of cortex-m4, "
                       "cortex-m55, rv32imc"):
        mcu.mcu_target("cortex-a53")
    code, out = run_cli(["run", str(tmp_path), "--qemu", "cortex-a53"])
    assert code == 2 and "'cortex-a53' is not one of 'cortex-m4', 'cortex-m55', 'rv32imc'" in out


def test_qemu_arguments_that_semihosting_cannot_carry_are_refused():
    target = mcu.mcu_target("cortex-m4")
    assert mcu.qemu_command(target, "n.elf", ["/tmp/a.bin"])[-4:] == [
        "-semihosting-config", "enable=on,target=native,arg=network.elf,arg=/tmp/a.bin",
        "-kernel", "n.elf"]
    with pytest.raises(ValueError, match="may not contain commas or spaces"):
        mcu.qemu_command(target, "n.elf", ["/tmp/a,b.bin"])


@needs("rv32imc")
def test_a_failing_run_and_a_wrong_makefile_target_say_why(tmp_path):
    project = build_project(_float_graph(), {}, "floats", ["x", "bias"], ["softmax", "dense"])
    root = project.write(tmp_path / "p")
    target = mcu.mcu_target("rv32imc")
    elf = mcu.build_elf(root, target)
    outputs = [(d, s) for _, d, s in project.outputs]
    # an input one value short: the harness refuses it and exits non-zero
    with pytest.raises(mcu.McuRunError, match="exited with 1: .*input of the wrong size"):
        mcu.run_elf(elf, target, [FLOAT_INPUTS[0].ravel()[:-1], FLOAT_INPUTS[1]], outputs)
    done = subprocess.run(["make", "TARGET=cortex-a53"], cwd=root, capture_output=True,
                          text=True)
    assert done.returncode != 0
    assert "TARGET=cortex-a53 is not one of: host cortex-m4 cortex-m55 rv32imc" in done.stderr
