"""The mcu target's cost model: instructions a layer's portable C kernel executes, per ISA.

A host operator's instructions are a dot product of its features with the ISA's constants:

    instructions = Σ_f constants[isa][f] * features(workload)[f]

with the features

- ``conv_macs``: MACs of a convolution (standard, depthwise or grouped): the innermost loop
  over the input channels of a group;
- ``conv_taps``: output elements x filter taps (FY x FX): the kernel's loop over the filter
  window, its bounds checks and addressing, per tap (a depthwise convolution has one MAC a
  tap, a standard one as many as its input channels);
- ``conv_outputs``: output elements of the convolutions (the requantization epilogue, the
  loop set-up per output, the zero-point handling the C project fuses into the kernel);
- ``dense_macs``: MACs of a dense layer (matmul; the C project fuses it with its zero point
  and requantization into a 1x1 convolution kernel);
- ``elements``: output elements of every other operator that computes (casts, zero-point
  subtraction, requantization, quantized add, clip, pooling (its input elements), quantize /
  dequantize, softmax);
- ``operators``: one per operator that runs a kernel (views such as reshape cost nothing).

The constants are not guessed: ``benchmarks/mcu_icount.py`` compiles calibration networks
(one-layer int8 networks of each kernel at several shapes, a residual convolution net and
MobileNetV1s at small sizes, none of the MLPerf Tiny networks), runs each C project under
QEMU with ``-icount`` (instructions counted exactly on RISC-V, to 40 on Cortex-M) and fits the constants by non-negative least squares on relative
error; it writes them to ``icount.json`` beside this file with the date, QEMU's version and
the fit's errors. An in-order MCU runs about one instruction a cycle: the target reports
instructions as its cycles (CPI 1, an assumption, not measured).
"""

from __future__ import annotations

import json
import math
from functools import lru_cache
from importlib import resources

FEATURES = ("conv_macs", "conv_taps", "conv_outputs", "dense_macs", "elements", "operators")

#: Operators that move no data in the C project (views of their input).
VIEWS = {"reshape", "squeeze", "expand_dims", "flatten"}


def features(workload) -> dict[str, float]:
    """The features of one host operator (``Workload`` with ``pattern`` ``host.<op>``)."""
    op = workload.pattern.removeprefix("host.")
    out = math.prod(workload.output[0]) if workload.output[0] else 1
    values = dict.fromkeys(FEATURES, 0.0)
    if op.split(".")[-1] in VIEWS:
        return values
    values["operators"] = 1.0
    if op == "nn.conv2d":
        layout = str(workload.attrs.get("kernel_layout", "OIHW"))
        weight = workload.inputs[1][0]
        values["conv_macs"] = float(workload.macs)
        values["conv_taps"] = float(out * weight[layout.index("H")] * weight[layout.index("W")])
        values["conv_outputs"] = float(out)
    elif op in ("matmul", "nn.dense"):
        values["dense_macs"] = float(workload.macs)
        values["elements"] = float(out)
    elif op in ("nn.avg_pool2d", "nn.max_pool2d"):
        values["elements"] = float(math.prod(workload.inputs[0][0]))
    else:
        values["elements"] = float(out)
    return values


@lru_cache(maxsize=None)
def calibration() -> dict:
    """``icount.json``: per ISA, the fitted constants and where they come from."""
    return json.loads(resources.files("edgebyoc_mcu").joinpath("icount.json").read_text())


def constants(isa: str) -> dict[str, float]:
    return calibration()["isas"][isa]["constants"]


def host_instructions(workload, isa: str) -> float:
    """Predicted instructions of ``workload`` on ``isa``."""
    table = constants(isa)
    return sum(table[name] * value for name, value in features(workload).items())
