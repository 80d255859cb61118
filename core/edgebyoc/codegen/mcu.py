"""A C project on a real MCU instruction set: built bare-metal by its Makefile
(``make TARGET=cortex-m4|cortex-m55|rv32imc``, files under ``mcu/``), run under QEMU with
semihosting, its flash and RAM read from the ELF.

Each ``McuTarget`` names its cross compiler, its QEMU board and the Debian packages that
provide them. ``build_elf`` runs the project's Makefile where it was written, ``run_elf`` runs the
ELF on raw input files (the harness ``mcu/edgebyoc_mcu_main.c`` reads them over semihosting
and prints the stack's high-water mark), ``elf_memory`` sums its sections. ``run_on_qemu`` does
the three for a project's files and inputs; the harness also counts the instructions the
network's run executes (QEMU's ``-icount``; per step with ``profile=True``)::

    run = run_on_qemu(project.project_files(), "cortex-m4", [x], outputs=[("int8", (1, 10))])
    run.outputs[0], run.memory.ram_bytes, run.memory.flash_bytes

RAM is what the device's main memory holds during a run: ``.data`` + ``.bss`` (the arena, the
harness's input and output buffers, the libraries' state) + the stack's high-water mark. The
emulated accelerator L1 of a MATCH module (``.edgebyoc_l1``, the scratchpad the host emulation
uses) is a memory of its own on such a chip and is reported apart (``l1_bytes``).
"""

from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Mapping, Sequence

import numpy as np

from ..errors import EdgebyocError


class McuToolsMissing(EdgebyocError):
    """A cross compiler or QEMU is not installed: the message names the Debian packages."""


class McuRunError(EdgebyocError):
    """The bare-metal build or its run under QEMU failed (message: the tool's last lines)."""


@dataclass(frozen=True)
class McuTarget:
    """An instruction set the generated project cross-builds for, and the board it runs on."""

    name: str
    description: str
    compiler: str
    size_tool: str
    qemu: str
    board: str
    packages: tuple[str, ...]


_ARM = ("gcc-arm-none-eabi", "libnewlib-arm-none-eabi", "qemu-system-arm")
_RISCV = ("gcc-riscv64-unknown-elf", "picolibc-riscv64-unknown-elf", "qemu-system-misc")

#: The bare-metal targets of ``make TARGET=...`` (``templates/mcu/edgebyoc_mcu.mk``).
MCU_TARGETS: dict[str, McuTarget] = {
    "cortex-m4": McuTarget("cortex-m4", "Arm Cortex-M4F (Armv7E-M), QEMU mps2-an386",
                           "arm-none-eabi-gcc", "arm-none-eabi-size", "qemu-system-arm",
                           "mps2-an386", _ARM),
    "cortex-m55": McuTarget("cortex-m55", "Arm Cortex-M55 (Armv8.1-M), QEMU mps3-an547",
                            "arm-none-eabi-gcc", "arm-none-eabi-size", "qemu-system-arm",
                            "mps3-an547", _ARM),
    "rv32imc": McuTarget("rv32imc", "32-bit RISC-V RV32IMC, QEMU virt",
                         "riscv64-unknown-elf-gcc", "riscv64-unknown-elf-size",
                         "qemu-system-riscv32", "virt", _RISCV),
}

#: Seconds a QEMU run may take before it is stopped (the MLPerf Tiny networks take < 1 s).
QEMU_TIMEOUT = 120.0


def mcu_target(name: str) -> McuTarget:
    """The ``McuTarget`` called ``name``; ``ValueError`` naming the known ones otherwise."""
    try:
        return MCU_TARGETS[name]
    except KeyError:
        raise ValueError(f"unknown MCU target {name!r}: one of "
                         f"{', '.join(MCU_TARGETS)}") from None


def missing_tools(target: McuTarget) -> list[str]:
    """The programs of ``target`` not on PATH (make, the cross compiler, size, QEMU)."""
    return [tool for tool in ("make", target.compiler, target.size_tool, target.qemu)
            if shutil.which(tool) is None]


def check_tools(target: McuTarget) -> None:
    """``McuToolsMissing`` naming the Debian packages if a tool of ``target`` is missing."""
    missing = missing_tools(target)
    if missing:
        raise McuToolsMissing(
            f"{target.name} builds need {', '.join(missing)}: install the Debian packages "
            f"{' '.join(target.packages)} (apt-get install {' '.join(target.packages)})")


@dataclass(frozen=True)
class ElfMemory:
    """Bytes of a bare-metal ELF per kind of memory (from its section headers) and of the
    stack a run used (painted stack, measured under QEMU; -1 if not run)."""

    target: str
    text: int
    rodata: int
    data: int
    bss: int
    l1: int
    stack_reserved: int
    stack_used: int = -1

    @property
    def flash_bytes(self) -> int:
        """Code, constants and .data's initial values: what the image puts in flash."""
        return self.text + self.rodata + self.data

    @property
    def static_ram_bytes(self) -> int:
        """.data and .bss: the RAM the linker places (arena, I/O buffers, library state)."""
        return self.data + self.bss

    @property
    def ram_bytes(self) -> int:
        """The main memory a run needs: .data + .bss + the stack's high-water mark."""
        return self.static_ram_bytes + max(self.stack_used, 0)

    def to_dict(self) -> dict:
        return {**asdict(self), "flash_bytes": self.flash_bytes,
                "static_ram_bytes": self.static_ram_bytes, "ram_bytes": self.ram_bytes,
                "l1_bytes": self.l1}


#: Which of ``size -A``'s sections count as what (everything else is debug information).
_SECTION_KINDS = {".text": "text", ".ARM.exidx": "text", ".rodata": "rodata",
                  ".data": "data", ".tdata": "data", ".tbss_space": "bss", ".bss": "bss",
                  ".edgebyoc_l1": "l1", ".stack": "stack_reserved"}


def elf_memory(elf: str | Path, target: McuTarget, stack_used: int = -1) -> ElfMemory:
    """The sections of ``elf`` summed per kind (the toolchain's ``size -A``)."""
    done = subprocess.run([target.size_tool, "-A", str(elf)], capture_output=True, text=True)
    if done.returncode != 0:
        raise McuRunError(f"{target.size_tool} -A {elf} failed: {done.stderr.strip()[-500:]}")
    sums = dict.fromkeys(("text", "rodata", "data", "bss", "l1", "stack_reserved"), 0)
    for line in done.stdout.splitlines():
        fields = line.split()
        if len(fields) >= 2 and fields[0] in _SECTION_KINDS and fields[1].isdigit():
            sums[_SECTION_KINDS[fields[0]]] += int(fields[1])
    return ElfMemory(target=target.name, stack_used=stack_used, **sums)


def build_elf(directory: str | Path, target: McuTarget, jobs: int = 2,
              stack_bytes: int | None = None, profile: bool = False) -> Path:
    """``make TARGET=<target>`` in the project written at ``directory``; the ELF's path. With
    ``profile`` (``PROFILE=1``) the run also counts each step's instructions."""
    check_tools(target)
    command = ["make", "-s", f"-j{jobs}", f"TARGET={target.name}"]
    if stack_bytes is not None:
        command.append(f"STACK_BYTES={stack_bytes}")
    if profile:
        command.append("PROFILE=1")
    done = subprocess.run(command, cwd=directory, capture_output=True, text=True)
    if done.returncode != 0:
        raise McuRunError(f"make TARGET={target.name} failed in {directory}:\n"
                          f"{done.stderr[-4000:]}")
    return Path(directory) / f"build-{target.name}{'-profile' if profile else ''}" / "network.elf"


_STACK_LINE = re.compile(r"edgebyoc-stack-bytes (\d+)")
_INSTRUCTIONS_LINE = re.compile(r"edgebyoc-instructions (\d+)")
_STEP_LINES = re.compile(r"edgebyoc-step (\d+)\s+edgebyoc-step-instructions (\d+)")


def qemu_command(target: McuTarget, elf: str | Path, arguments: Sequence[str]) -> list[str]:
    """The QEMU command line that runs ``elf`` with ``arguments`` on the command line the
    harness reads (semihosting), as the Makefile's ``run-qemu`` does: with ``-icount
    shift=0``, one instruction a virtual nanosecond, so the harness's counts are exact."""
    for argument in arguments:
        if "," in argument or " " in argument:
            raise ValueError(f"{argument!r}: QEMU's semihosting arguments may not contain "
                             f"commas or spaces")
    machine = ["qemu-system-riscv32", "-M", "virt", "-bios", "none"] \
        if target.qemu == "qemu-system-riscv32" else [target.qemu, "-M", target.board]
    config = ",".join(["enable=on", "target=native", "arg=network.elf",
                       *(f"arg={a}" for a in arguments)])
    return [*machine, "-icount", "shift=0", "-display", "none", "-monitor", "none",
            "-serial", "none",
            "-semihosting-config", config, "-kernel", str(elf)]


@dataclass
class ElfRun:
    """What a run of a bare-metal ELF under QEMU gave: the outputs, the stack's high-water
    mark (bytes), the instructions ``edgebyoc_network_run`` executed, those of each step
    (step number -> instructions; a profiled build only) and the wall time (seconds)."""

    outputs: list[np.ndarray]
    stack_bytes: int
    instructions: int
    step_instructions: dict[int, int]
    seconds: float


def run_elf(elf: str | Path, target: McuTarget, inputs: Sequence[np.ndarray],
            outputs: Sequence[tuple[str, Sequence[int]]],
            timeout: float = QEMU_TIMEOUT) -> ElfRun:
    """Run ``elf`` under QEMU on ``inputs``; the outputs come as ``outputs``' (dtype, shape)."""
    check_tools(target)
    with tempfile.TemporaryDirectory(prefix="edgebyoc-qemu-") as scratch:
        paths = []
        for index, value in enumerate(inputs):
            path = Path(scratch, f"in{index}.bin")
            np.ascontiguousarray(value).tofile(path)
            paths.append(str(path))
        results = [str(Path(scratch, f"out{index}.bin")) for index in range(len(outputs))]
        started = time.perf_counter()
        try:
            done = subprocess.run(qemu_command(target, elf, paths + results),
                                  stdin=subprocess.DEVNULL,
                                  capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            raise McuRunError(f"{elf} on QEMU {target.board} did not finish in "
                              f"{timeout:g} s") from None
        seconds = time.perf_counter() - started
        log = (done.stdout + done.stderr).strip()
        if done.returncode != 0:
            raise McuRunError(f"{elf} on QEMU {target.board} exited with {done.returncode}: "
                              f"{log[-2000:] or 'no output'}")
        stack, count = _STACK_LINE.search(log), _INSTRUCTIONS_LINE.search(log)
        if stack is None or count is None:
            raise McuRunError(f"{elf} on QEMU {target.board} did not report its stack and "
                              f"instructions: {log[-2000:] or 'no output'}")
        values = []
        for path, (dtype, shape) in zip(results, outputs):
            value = np.fromfile(path, dtype=dtype)
            if value.size != int(np.prod(shape, dtype=np.int64)):
                raise McuRunError(f"{elf} wrote {value.size} values for an output of shape "
                                  f"{tuple(shape)}")
            values.append(value.reshape(shape))
        steps = {int(m.group(1)): int(m.group(2)) for m in _STEP_LINES.finditer(log)}
        return ElfRun(values, int(stack.group(1)), int(count.group(1)), steps, seconds)


@dataclass
class QemuRun:
    """A project built for an MCU and run under QEMU: its outputs and what it used."""

    target: str
    board: str
    outputs: list[np.ndarray]
    memory: ElfMemory
    seconds: float
    #: instructions edgebyoc_network_run executed (QEMU -icount; to 40 on Cortex-M)
    instructions: int = 0
    #: step number -> its instructions (``profile=True`` only)
    step_instructions: dict[int, int] = field(default_factory=dict)

    def to_dict(self) -> dict:
        return {"target": self.target, "board": self.board, "seconds": round(self.seconds, 3),
                "instructions": self.instructions, **self.memory.to_dict()}


def run_on_qemu(files: Mapping[str, str], target: str, inputs: Sequence[np.ndarray],
                outputs: Sequence[tuple[str, Sequence[int]]],
                directory: str | Path | None = None, jobs: int = 2,
                profile: bool = False) -> QemuRun:
    """Write a project's ``files`` (relative path -> text) into ``directory`` (a scratch
    folder if None), build it for ``target`` (``profile``: counting each step's
    instructions), run it on ``inputs``; the run and the ELF's memory."""
    mcu = mcu_target(target)
    check_tools(mcu)
    with tempfile.TemporaryDirectory(prefix="edgebyoc-mcu-") as scratch:
        root = Path(directory) if directory is not None else Path(scratch)
        for name, text in files.items():
            (root / name).parent.mkdir(parents=True, exist_ok=True)
            (root / name).write_text(text)
        elf = build_elf(root, mcu, jobs, profile=profile)
        run = run_elf(elf, mcu, inputs, outputs)
        return QemuRun(target=mcu.name, board=mcu.board, outputs=run.outputs,
                       memory=elf_memory(elf, mcu, run.stack_bytes), seconds=run.seconds,
                       instructions=run.instructions, step_instructions=run.step_instructions)
