"""DIANA cost models, in cycles of the 260 MHz clock MATCH measures at (Hamdi et al., V-A).

Digital accelerator (MATCH, section V-A; the constants MATCH's DIANA model uses):

* the 16x16 PE array unrolls output channels (K) and output columns (OX): a layer is computed
  in *output passes* of 16 channels x 16 columns of one output row, K and OX padded to
  multiples of 16 (``PE_K``, ``PE_OX``); a depthwise layer fills one PE column per channel
  (PLiNIO's DIANA model: ``ceil(K / groups / 16) * C``), so each channel is its own pass;
* ``L_ops``: per pass, one cycle to read the inputs, one per multiply-accumulate step
  (C * FY * FX of them; FY * FX for depthwise), one to write the outputs, plus
  ``ELEMENTWISE_CYCLES`` (23) of requantization / ReLU / storage into the activation memory;
  a fully connected layer unrolls output and input neurons (ceil(K/16) * ceil(C/16) passes of
  one cycle each, 23 cycles per group of 16 outputs); an element-wise add streams 16 x 16
  elements per pass;
* ``L_mem``: every DMA transfer of the schedule, bytes over ``L2_BYTES_PER_CYCLE`` (16) plus
  ``DMA_CHUNK_CYCLES`` (70) per contiguous chunk (MATCH: the overhead is multiplied by the
  number of contiguous sub-blocks);
* blocking DMA: ``L = L_ops + L_mem`` (no double buffering).

Analog in-memory-computing array (MATCH never modelled it; the model of PLiNIO's
``diana_latency.py``, which HTVM's DIANA flow targets):

* ternary weights in a 1152-row x 512-column array (``AIMC_ROWS``, ``AIMC_COLUMNS``): rows hold
  C * FY * FX weights of one output channel, columns the output channels;
* output-x unrolling u in {1, 2, 4, 8}: the largest u with u * K <= 512 and
  (u + FX - 1) * max(64, C) * FY <= 1152 (PLiNIO's rule);
* compute: ceil(K / 512) * ceil(C / 128) * ceil(OX / u) * OY passes of ``AIMC_PASS_NS`` (70 ns,
  18.2 cycles at 260 MHz);
* programming the weights: ``AIMC_LOAD_CYCLES_PER_ROW`` (8) cycles per row (C * FY * FX) each
  time the weights are loaded into the array;
* ``L_mem`` as for the digital accelerator (the same DMA), ``L = L_ops + L_mem``.

Host (the RISC-V control core running TVM's generic C, for layers neither accelerator takes):
``host_cycles_per_mac`` per MAC and ``host_cycles_per_element`` per output element.

What the models leave out, as calibration parameters (``PARAMETERS``; the defaults give the
models above unchanged; the shipped calibration ``calibration/match_table_iii.json`` fits them,
see benchmarks/diana_table_iii.py):

* ``digital_efficiency``, ``digital_dw_efficiency``: the array's measured throughput against
  the model (L_ops is divided by it). MATCH VI-A: 146.12 MACs/cycle for a convolution with
  C = 64 at 32x32, 5 % below the model (0.95); depthwise 77 % of the estimate.
* ``digital_layer_cycles``: the fixed cost of one layer on the accelerator (the RISC-V core
  configuring it, the layer template's set-up, the blocking DMA's programming); not in the
  paper: fitted.
* ``digital_tile_cycles``: the layer template's cost per tile; not in the paper.
* ``weight_bytes_per_cycle``: weights moving from L2 into the accelerator's weight memory
  (default L2's 16 B/cycle, MATCH V-A; the weight memory's write port is not documented).
* ``host_cycles_per_mac``, ``host_cycles_per_element``: defaults from the TVM column of MATCH's
  Table III (2.6 cycles per MAC: ResNet's 12.5 M MACs in 133.1 ms at 260 MHz); the shipped
  calibration fits them to that column's three figures (ResNet, DS-CNN, autoencoder).
"""

from __future__ import annotations

import math

from edgebyoc.api import CalibrationParameter, Cost

CLOCK_HZ = 260e6  # MATCH VI: measured at 260 MHz
PE_K = 16  # MATCH V-A: 16x16 PEs unrolling K and OX
PE_OX = 16  # MATCH V-A
ELEMENTWISE_CYCLES = 23  # MATCH V-A: 23 cycles of element-wise operators and storage per pass
DMA_CHUNK_CYCLES = 70  # MATCH V-A: 70 cycles per contiguous chunk
L2_BYTES_PER_CYCLE = 16.0  # MATCH's DIANA memories: L2 at 16 B/cycle

# the analog array: PLiNIO's diana_latency.py (HTVM's DIANA flow)
AIMC_ROWS = 1152  # PLiNIO: array rows (C * FY * FX)
AIMC_COLUMNS = 512  # PLiNIO: array columns (K)
AIMC_CHANNEL_GROUP = 128  # PLiNIO: input channels per pass
AIMC_PASS_NS = 70.0  # PLiNIO: 70 ns per analog pass
AIMC_LOAD_CYCLES_PER_ROW = 8  # assumption: cycles to program one array row
OX_UNROLLS = (1, 2, 4, 8)  # PLiNIO: output-x unrolling

#: the constants ``edgebyoc calibrate`` fits (see the module docstring)
PARAMETERS = (
    CalibrationParameter("digital_efficiency", 1.0, 0.05, 1.0, "",
                         "digital array's throughput against the model",
                         "MATCH VI-A: 146.12 MACs/cycle, 5 % below the model (C = 64, 32x32)"),
    CalibrationParameter("digital_dw_efficiency", 1.0, 0.05, 1.0, "",
                         "digital array's depthwise throughput against the model",
                         "MATCH VI-A: 77 % of the estimated MACs/cycle (C = 64, 32x32)"),
    CalibrationParameter("digital_layer_cycles", 0.0, 0.0, 200_000.0, "cycles",
                         "fixed cost of one layer on the digital array (configuration, "
                         "template set-up)", "assumption: not in the paper, fitted"),
    CalibrationParameter("digital_tile_cycles", 0.0, 0.0, 50_000.0, "cycles",
                         "layer template's cost per tile", "assumption: fitted"),
    CalibrationParameter("host_cycles_per_mac", 2.6, 0.5, 40.0, "cycles",
                         "RISC-V core, TVM's generic C, per MAC",
                         "MATCH Table III, TVM column: ResNet 133.1 ms for 12.5 M MACs"),
    CalibrationParameter("host_cycles_per_element", 4.0, 0.0, 100.0, "cycles",
                         "RISC-V core, TVM's generic C, per output element", "assumption"),
    CalibrationParameter("weight_bytes_per_cycle", L2_BYTES_PER_CYCLE, 0.5, L2_BYTES_PER_CYCLE,
                         "bytes/cycle", "bandwidth of weight transfers into the weight memory",
                         "MATCH V-A gives L2's 16 B/cycle; the weight memory's own write "
                         "port is not given: fitted"),
)
DEFAULTS = {p.name: p.default for p in PARAMETERS}


def dma_cycles(schedule, weight_bytes_per_cycle: float = L2_BYTES_PER_CYCLE) -> float:
    """``L_mem``: every transfer, bandwidth plus 70 cycles per contiguous chunk (the weights
    at ``weight_bytes_per_cycle``)."""
    return sum(count * (size / (weight_bytes_per_cycle if operand == "W" else
                                L2_BYTES_PER_CYCLE) + DMA_CHUNK_CYCLES * chunks)
               for operand, (count, size, chunks) in schedule.transfers.items())


def digital_tile_cycles(nest, k: int, oy: int, ox: int) -> float:
    """``L_ops`` of one tile of ``k x oy x ox`` outputs on the 16x16 PE array."""
    columns = math.ceil(ox / PE_OX)
    if nest.kind == "dense":
        groups = math.ceil(k / PE_K)
        return groups * math.ceil(nest.C / PE_K) * 3 + groups * ELEMENTWISE_CYCLES
    if nest.kind == "depthwise":
        return k * columns * oy * (nest.FY * nest.FX + 2 + ELEMENTWISE_CYCLES)
    passes = math.ceil(k / PE_K) * columns * oy
    if nest.kind == "add":
        return passes * (3 + ELEMENTWISE_CYCLES)
    return passes * (nest.C * nest.FY * nest.FX + 2 + ELEMENTWISE_CYCLES)


def ox_unroll(nest) -> int:
    """The analog array's output-x unrolling (PLiNIO's rule, see the module docstring)."""
    fitting = [u for u in OX_UNROLLS if u * nest.K <= AIMC_COLUMNS
               and (u + nest.FX - 1) * max(64, nest.C) * nest.FY <= AIMC_ROWS]
    return max(fitting, default=1)


def analog_tile_cycles(nest, k: int, oy: int, ox: int) -> float:
    """Compute cycles of one tile on the analog array (weights already programmed)."""
    passes = math.ceil(k / AIMC_COLUMNS) * math.ceil(nest.C / AIMC_CHANNEL_GROUP) * \
        math.ceil(ox / ox_unroll(nest)) * oy
    return passes * AIMC_PASS_NS * 1e-9 * CLOCK_HZ


def analog_load_cycles(nest) -> float:
    """Cycles to program the array with one output channel block's weights."""
    return AIMC_LOAD_CYCLES_PER_ROW * nest.C * nest.FY * nest.FX


def price(module_name: str, nest, schedule, constants=None) -> Cost:
    """``L = L_ops + L_mem`` of ``schedule`` on ``module_name`` (``digital`` or ``analog``);
    the digital array's L_ops divided by its efficiency, plus the layer's and tiles' fixed
    costs (``constants``: the calibration in force; default the models' own, ``DEFAULTS``)."""
    k = constants or DEFAULTS
    tiles = schedule.tiles
    mem = dma_cycles(schedule, k["weight_bytes_per_cycle"])
    if module_name == "analog":
        loads = schedule.transfers["W"][0]
        ops = schedule.iterations * analog_tile_cycles(nest, tiles["K"], tiles["OY"],
                                                       tiles["OX"])
        ops += loads * analog_load_cycles(nest)
    else:
        ops = schedule.iterations * digital_tile_cycles(nest, tiles["K"], tiles["OY"],
                                                        tiles["OX"])
        efficiency = k["digital_dw_efficiency" if nest.kind == "depthwise" else
                       "digital_efficiency"]
        overhead = k["digital_layer_cycles"] + schedule.iterations * k["digital_tile_cycles"]
        return Cost(latency_cycles=ops / efficiency + mem + overhead,
                    breakdown={"L_ops": ops, "L_mem": mem, "efficiency": efficiency,
                               "overhead": overhead})
    return Cost(latency_cycles=ops + mem, breakdown={"L_ops": ops, "L_mem": mem})


def host_cycles(macs: int, elements: int, constants=None) -> float:
    """The RISC-V core running a layer through TVM's generic C (see the module docstring)."""
    k = constants or DEFAULTS
    return macs * k["host_cycles_per_mac"] + elements * k["host_cycles_per_element"]
