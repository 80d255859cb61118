"""The mcu target: a plain microcontroller (Cortex-M4, Cortex-M55 or RV32IMC) without an
accelerator, as TensorFlow Lite Micro serves them.

Every layer of an integerized int8 model runs on the processor as the C project's portable
kernels (the core's host kernels: convolutions with their requantization fused, depthwise,
dense, quantized add, pooling, softmax), in one static arena, streamed depth-first in row
bands with ``--dfs`` like the accelerator targets' projects; no module, no DMA, no L1 apart
from RAM. ``isa`` selects the instruction set the cost model prices (instructions per
operator, ``cost.py``, fitted to QEMU's instruction counts by ``benchmarks/mcu_icount.py``)
and the one ``--qemu`` checks by default in the tests; the project itself builds for all
three (``make TARGET=cortex-m4|cortex-m55|rv32imc``).

Network transformations: integerization at the ``import`` stage
(``edgebyoc.api.quant.int8_import_passes``: int8 operators with (x * M + B) >> S
requantization, activations channels-last); float models are refused there.
"""

from __future__ import annotations

from edgebyoc.api import Cost, Target, TargetOption, hookimpl
from edgebyoc.api.quant import int8_import_passes

from . import cost

ISAS = ("cortex-m4", "cortex-m55", "rv32imc")

TARGET = Target(
    name="mcu",
    description="plain Cortex-M / RISC-V microcontroller: int8 layers as portable C",
    modules=(), c_project=True, api_version="2.5",
    options=(
        TargetOption("isa", str, "cortex-m4",
                     "instruction set the cost model prices (instructions per operator)",
                     choices=ISAS),
    ),
)


@hookimpl
def edgebyoc_targets():
    return [TARGET]


@hookimpl
def edgebyoc_transforms(target, stage):
    return int8_import_passes(target.name) if stage == "import" else []


@hookimpl
def edgebyoc_host_cost(target, workload, options):
    # every operator runs on the MCU's core: its instructions, taken as cycles (CPI 1)
    instructions = cost.host_instructions(workload, (options or {}).get("isa", "cortex-m4"))
    return Cost(latency_cycles=instructions, breakdown={"instructions": instructions})
