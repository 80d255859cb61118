"""Flash and RAM of the deployable C projects on real MCU instruction sets, from the ELF.

For the four int8 MLPerf Tiny networks on gap9, diana and mcu (a plain MCU: every layer
as the core's portable kernels), untiled (``--no-dfs
--io-in-arena``) and streamed depth-first (``--dfs --io-in-arena``): the C project built
bare-metal for Cortex-M4 (QEMU mps2-an386), Cortex-M55 (mps3-an547) and RV32IMC (QEMU virt)
with ``make TARGET=...``, run under QEMU on a seeded input and compared with the artifact
(bit-exact), its flash (code, constants) and RAM (.data + .bss + the painted stack's high-water
mark) from the ELF, beside TensorFlow Lite Micro's arena (../shared/notes/facts.md) and Arm
Vela's "Total SRAM used" for Ethos-U55-128 with ``--optimise Size`` (its cascading is its
own depth-first scheme; run when ``vela`` is installed, ``pip install ethos-u-vela``,
otherwise the figures measured in facts.md). The accelerator's L1, which the C project's
host emulation of gap9's and diana's modules uses, is a memory of its own on those chips and
is given apart.

Run: python benchmarks/mcu_memory.py [--no-record]
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import edgebyoc
from edgebyoc.codegen.mcu import MCU_TARGETS, missing_tools

sys.path.insert(0, str(Path(__file__).resolve().parent))
from record import markdown_table, record  # noqa: E402

MODELS = Path(__file__).resolve().parents[2] / "shared" / "models" / "mlperf_tiny"
NETWORKS = [("ResNet-8", "pretrainedResnet_quant"), ("MobileNetV1-0.25 VWW", "vww_96_int8"),
            ("DS-CNN", "kws_ref_model"), ("AutoEncoder", "ad01_int8")]
#: TensorFlow Lite Micro's arena head (inputs and outputs included), ../shared/notes/facts.md
TFLM_ARENA = {"pretrainedResnet_quant": 49_152, "vww_96_int8": 73_728, "kws_ref_model": 16_000,
              "ad01_int8": 768}
#: Vela 5.2's SRAM for Ethos-U55-128 with --optimise Size (KiB), facts.md, when not installed
VELA_FACTS_KIB = {"pretrainedResnet_quant": 35.00, "vww_96_int8": 48.00,
                  "kws_ref_model": 15.62, "ad01_int8": 0.75}
MODES = [("untiled", False), ("--dfs", True)]


def vela_sram(file: str) -> tuple[float, str]:
    """(Vela's "Total SRAM used" in KiB, where the figure comes from)."""
    if shutil.which("vela") is None:
        return VELA_FACTS_KIB[file], "facts.md"
    with tempfile.TemporaryDirectory() as scratch:
        done = subprocess.run(["vela", "--accelerator-config", "ethos-u55-128", "--optimise",
                               "Size", "--output-dir", scratch, str(MODELS / f"{file}.tflite")],
                              capture_output=True, text=True, check=True)
    return float(re.search(r"Total SRAM used\s+([\d.]+) KiB", done.stdout).group(1)), "vela"


def main(record_results: bool = True) -> None:
    missing = sorted({t for target in MCU_TARGETS.values() for t in missing_tools(target)})
    if missing:
        sys.exit(f"needs {', '.join(missing)}: apt-get install "
                 f"{' '.join(sorted({p for t in MCU_TARGETS.values() for p in t.packages}))}")
    rows, checks, vela_source = [], 0, set()
    for label, file in NETWORKS:
        vela_kib, source = vela_sram(file)
        vela_source.add(source)
        for target in ("gap9", "diana", "mcu"):
            for mode, dfs in MODES:
                compiled = edgebyoc.compile(str(MODELS / f"{file}.tflite"), target=target,
                                            dfs=dfs, io_in_arena=True)
                arena = compiled.project.total_activation_bytes
                for isa in MCU_TARGETS:
                    run, comparison = compiled.check_on_qemu(isa, seed=0)
                    checks += 1
                    m = run.memory
                    assert all(exact for _, exact, _ in comparison), (file, target, isa)
                    rows.append([label, target, mode, isa, f"{m.flash_bytes:,}", f"{arena:,}",
                                 f"{m.static_ram_bytes:,}", f"{m.stack_used:,}",
                                 f"{m.ram_bytes:,}", f"{m.l1:,}", f"{TFLM_ARENA[file]:,}",
                                 f"{m.ram_bytes / TFLM_ARENA[file]:.2f}x",
                                 f"{vela_kib:.2f}", f"{m.ram_bytes / (vela_kib * 1024):.2f}x",
                                 f"{run.seconds:.2f}"])
                    print(" | ".join(rows[-1]), flush=True)
    headers = ["network", "target", "mode", "MCU", "flash (B)", "arena (B)",
               ".data+.bss (B)", "stack (B)", "RAM (B)", "accelerator L1 (B)",
               "TFLM arena (B)", "RAM / TFLM", "Vela U55 SRAM (KiB)", "RAM / Vela",
               "QEMU run (s)"]
    table = markdown_table(headers, rows)
    print(table)
    notes = (
        f"Each row: the compile's C project (`--io-in-arena`: inputs and outputs in the arena, "
        f"as TFLite Micro keeps them) built by its Makefile with `make TARGET=<MCU>` "
        f"(-O2 -Wall -Wextra -Werror; newlib-nano on Arm, picolibc on RISC-V), run under QEMU "
        f"with semihosting on a seeded input: all {checks} runs bit-exact with the artifact. "
        f"flash = .text + .rodata + .data's initial values (the weights are .rodata); "
        f"RAM = .data + .bss (the arena, under 1 kB of harness and library state: the "
        f"semihosting command line's 512 B buffer, libc's) + the stack's high-water mark "
        f"(a painted stack read back after the run). Accelerator L1: the emulated scratchpad "
        f"of gap9's and diana's modules (gap9's 128 kB cluster L1; diana's 832 kB includes "
        f"its analog array's weight memory), a memory of its own on those chips, in its own "
        f"ELF section; mcu has none. TFLM arena: TensorFlow Lite Micro's arena head, inputs and "
        f"outputs "
        f"included, without its interpreter's stack and objects. Vela: \"Total SRAM used\" for "
        f"Ethos-U55-128, `--optimise Size` (cascading) "
        f"({'run here' if vela_source == {'vela'} else 'figures of facts.md'}). The "
        f"AutoEncoder's dense layers need 768 B of activations at once (640 inputs and 128 "
        f"outputs), the same as TFLite Micro's arena: with the stack beside it no build of it "
        f"fits in 768 B.")
    if record_results:
        record("mcu_memory", "## C projects on Cortex-M and RISC-V: flash and RAM from the ELF"
               "\n\n" + table + "\n\n" + notes)


if __name__ == "__main__":
    main(record_results="--no-record" not in sys.argv)
