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
``HOST_CYCLES_PER_MAC`` and ``HOST_CYCLES_PER_ELEMENT``, fitted to the TVM column of MATCH's
Table III (2.6 cycles per MAC give 131.2 ms for ResNet against the measured 133.1 ms for
12.5 M MACs at 260 MHz); not an independent prediction.
"""

from __future__ import annotations

import math

from edgebyoc.api import Cost

CLOCK_HZ = 260e6
PE_K = 16
PE_OX = 16
ELEMENTWISE_CYCLES = 23
DMA_CHUNK_CYCLES = 70
L2_BYTES_PER_CYCLE = 16.0

AIMC_ROWS = 1152
AIMC_COLUMNS = 512
AIMC_CHANNEL_GROUP = 128
AIMC_PASS_NS = 70.0
AIMC_LOAD_CYCLES_PER_ROW = 8
OX_UNROLLS = (1, 2, 4, 8)

HOST_CYCLES_PER_MAC = 2.6
HOST_CYCLES_PER_ELEMENT = 4.0


def dma_cycles(schedule) -> float:
    """``L_mem``: every transfer, bandwidth plus 70 cycles per contiguous chunk."""
    return sum(count * (size / L2_BYTES_PER_CYCLE + DMA_CHUNK_CYCLES * chunks)
               for count, size, chunks in schedule.transfers.values())


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


def price(module_name: str, nest, schedule) -> Cost:
    """``L = L_ops + L_mem`` of ``schedule`` on ``module_name`` (``digital`` or ``analog``)."""
    tiles = schedule.tiles
    mem = dma_cycles(schedule)
    if module_name == "analog":
        loads = schedule.transfers["W"][0]
        ops = schedule.iterations * analog_tile_cycles(nest, tiles["K"], tiles["OY"],
                                                       tiles["OX"])
        ops += loads * analog_load_cycles(nest)
    else:
        ops = schedule.iterations * digital_tile_cycles(nest, tiles["K"], tiles["OY"],
                                                        tiles["OX"])
    return Cost(latency_cycles=ops + mem, breakdown={"L_ops": ops, "L_mem": mem})


def host_cycles(macs: int, elements: int) -> float:
    """The RISC-V core running a layer through TVM's generic C (see the module docstring)."""
    return macs * HOST_CYCLES_PER_MAC + elements * HOST_CYCLES_PER_ELEMENT
