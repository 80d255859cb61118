"""GAP9 cost models (MATCH, section V-B): L = max(L_ops, L_mem) with asynchronous DMA.

Every figure is in cycles of the 260 MHz clock the paper measures at.

* L_mem (both modules): per transfer, bytes / DMA bandwidth plus ``DMA_CHUNK_CYCLES`` (27, the
  paper's figure) per contiguous chunk. The cluster DMA moves ``DMA_BYTES_PER_CYCLE`` (8) bytes
  per cycle between L2 and the shared L1.
* Cluster L_ops (PULP-NN-like kernels, spatial mapping OY=8 over the cores, OX=2 and K=4 in
  each core's 4x2 register block): per 4x2 block the inner loop does ``ceil(C*FY*FX / 4)``
  steps of 8 four-way int8 dot products (``SDOTP_STEP_CYCLES`` each: the 8 ``sdotp`` plus
  operand loads); im2col copies ``C*FY*FX`` bytes per output pair at
  ``IM2COL_BYTES_PER_CYCLE``; requantization costs ``REQUANT_CYCLES`` per output; each kernel
  call pays ``CLUSTER_CALL_CYCLES`` (team fork, barrier). Depthwise runs without SIMD over the
  window (``DW_MAC_CYCLES`` per MAC), dense splits K over the 8 cores, add costs
  ``ADD_CYCLES`` per element per core.
* NE16 L_ops: the NE16 latency model the paper cites (PLiNIO's ``ne16_latency``, after the
  NE16 hardware documentation): 3x3x32 output and 5x5x16 input buffers, a FIFO latency of 6,
  4 shifters, 8 adders and 4 multipliers in the normalisation/quantisation stage, 256 bits per
  cycle of streamer bandwidth; weights are processed bit-serially for 3x3 (8 cycles per bit
  plane), in one pass for 1x1; depthwise 3x3 only. Each job costs ``NE16_JOB_CYCLES`` of
  register programming by a cluster core.
* Host fallback (the fabric controller running TVM's generic C): ``HOST_CYCLES_PER_MAC`` and
  ``HOST_CYCLES_PER_ELEMENT``. These two are fitted to the paper's CPU-only column of Table IV
  (ResNet: 342.72 ms for 12.5 M MACs) and are therefore not an independent prediction.
"""

from __future__ import annotations

import math

from edgebyoc.api import Cost

CLOCK_HZ = 260e6
DMA_BYTES_PER_CYCLE = 8.0
DMA_CHUNK_CYCLES = 27
CLUSTER_CORES = 8
SDOTP_STEP_CYCLES = 14
IM2COL_BYTES_PER_CYCLE = 4.0
REQUANT_CYCLES = 6
CLUSTER_CALL_CYCLES = 150
DW_MAC_CYCLES = 1.5
ADD_CYCLES = 3
NE16_JOB_CYCLES = 120
HOST_CYCLES_PER_MAC = 7.1
HOST_CYCLES_PER_ELEMENT = 4.0

# NE16 model constants (see the module docstring)
NE16_INPUT_BUFFER = (5, 5, 16)
NE16_OUTPUT_BUFFER = (3, 3, 32)
NE16_FIFO = 6
NE16_MULTIPLIERS = 4
NE16_STREAM_BITS = 256


def dma_cycles(schedule) -> float:
    """L_mem: every transfer of the schedule, bandwidth plus per-chunk overhead."""
    total = 0.0
    for count, size, chunks in schedule.transfers.values():
        total += count * (size / DMA_BYTES_PER_CYCLE + DMA_CHUNK_CYCLES * chunks)
    return total


def cluster_tile_cycles(nest, k: int, oy: int, ox: int) -> float:
    """Cluster L_ops of one innermost tile of ``k x oy x ox`` outputs."""
    rows_per_core = math.ceil(oy / CLUSTER_CORES)
    if nest.kind == "conv2d":
        window = nest.C * nest.FY * nest.FX
        blocks = rows_per_core * math.ceil(ox / 2) * math.ceil(k / 4)
        compute = blocks * math.ceil(window / 4) * SDOTP_STEP_CYCLES
        im2col = rows_per_core * math.ceil(ox / 2) * 2 * window / IM2COL_BYTES_PER_CYCLE
        requant = rows_per_core * ox * k * REQUANT_CYCLES
        return CLUSTER_CALL_CYCLES + compute + im2col + requant
    if nest.kind == "depthwise":
        macs = rows_per_core * ox * k * nest.FY * nest.FX
        return CLUSTER_CALL_CYCLES + macs * DW_MAC_CYCLES + rows_per_core * ox * k * REQUANT_CYCLES
    if nest.kind == "dense":
        per_core = math.ceil(k / CLUSTER_CORES)
        return CLUSTER_CALL_CYCLES + per_core * (math.ceil(nest.C / 4) * 2 + REQUANT_CYCLES)
    if nest.kind == "add":
        return CLUSTER_CALL_CYCLES + rows_per_core * ox * k * ADD_CYCLES
    if nest.kind == "pool":
        return CLUSTER_CALL_CYCLES + rows_per_core * ox * k * (nest.FY * nest.FX + REQUANT_CYCLES)
    raise ValueError(f"no cluster model for {nest.kind}")


def ne16_tile_cycles(nest, k: int, oy: int, ox: int) -> float:
    """NE16 L_ops of one innermost tile (the NE16 latency model, see the module docstring)."""
    depthwise = nest.kind == "depthwise"
    one_by_one = (nest.FY, nest.FX) == (1, 1)
    in_k = NE16_INPUT_BUFFER[2]
    out_k = in_k if depthwise else NE16_OUTPUT_BUFFER[2]
    h_out, w_out = NE16_OUTPUT_BUFFER[0], NE16_OUTPUT_BUFFER[1]
    in_h, in_w = NE16_INPUT_BUFFER[0], NE16_INPUT_BUFFER[1]
    load = (10 + h_out * w_out * math.ceil(in_k * 8 / NE16_STREAM_BITS)) if one_by_one else \
        (NE16_FIFO + in_h * in_w * math.ceil(in_k * 8 / NE16_STREAM_BITS))
    streamout = 3 + h_out * w_out * math.ceil(out_k * 8 / NE16_STREAM_BITS) + 1

    def normquant(kk):
        return 9 + math.ceil(kk * 4 / NE16_MULTIPLIERS)  # 32-bit scale: 4 bytes per channel

    def matrixvec(kk):
        return NE16_FIFO + (kk if one_by_one else kk * 8)

    def iteration(kk):
        if depthwise:
            return load + (NE16_FIFO + kk) + matrixvec(kk) + 2 + normquant(kk) + streamout
        n_in = math.ceil(nest.C / in_k)
        return n_in * (load + NE16_FIFO + matrixvec(kk) + 2) + normquant(kk) + streamout

    channels = k
    body, rest = divmod(channels, out_k)
    spatial = math.ceil(oy / h_out) * math.ceil(ox / w_out)
    return NE16_JOB_CYCLES + spatial * (body * iteration(out_k) + (iteration(rest) if rest else 0))


def host_cycles(workload) -> float:
    """The fabric controller running the layer through TVM's generic C."""
    elements = math.prod(workload.output[0]) if workload.output[0] else 0
    return workload.macs * HOST_CYCLES_PER_MAC + elements * HOST_CYCLES_PER_ELEMENT


def price(module_name: str, nest, schedule) -> Cost:
    """The cost of ``schedule`` on ``module_name``: L = max(L_ops, L_mem) when double-buffered
    (transfers overlap compute), L_ops + L_mem otherwise."""
    tile = schedule.tiles
    model = cluster_tile_cycles if module_name == "cluster" else ne16_tile_cycles
    ops = schedule.iterations * model(nest, tile["K"], tile["OY"], tile["OX"])
    mem = dma_cycles(schedule)
    total = max(ops, mem) if schedule.double_buffer else ops + mem
    return Cost(latency_cycles=total, breakdown={"L_ops": ops, "L_mem": mem})
