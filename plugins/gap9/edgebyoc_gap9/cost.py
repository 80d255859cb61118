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
  ``ADD_CYCLES`` per element per core. When the schedule cuts the input channels (the
  cluster's ``accumulator_bits=32``: int32 partial sums in L1), or on the cluster the filter
  rows and columns too (its im2col kernels take any window: ``partial_sum_dims`` C, FY, FX),
  each slice is a call over its channels and taps, storing and loading the sums
  (``ACC_CYCLES`` per output each) and requantizing after the last slice only (NE16 alike: it
  streams the 32-bit partial sums out and back in, normalizing and quantizing after the last
  slice; its slices are multiples of 16 channels, its filter whole: 3x3 or 1x1).
* NE16 L_ops: the NE16 latency model the paper cites (PLiNIO's ``ne16_latency``, after the
  NE16 hardware documentation): 3x3x32 output and 5x5x16 input buffers, a FIFO latency of 6,
  4 shifters, 8 adders and 4 multipliers in the normalisation/quantisation stage, 256 bits per
  cycle of streamer bandwidth; weights are processed bit-serially for 3x3 (8 cycles per bit
  plane), in one pass for 1x1; depthwise 3x3 only. Each job costs ``NE16_JOB_CYCLES`` of
  register programming by a cluster core.
* Host fallback (the fabric controller running TVM's generic C): ``host_cycles_per_mac`` per
  MAC and ``host_cycles_per_element`` per output element.

What the paper's models leave out, as calibration parameters (``PARAMETERS``; their defaults
give the paper's cost model unchanged, the shipped calibration ``calibration/
match_table_iv.json`` fits them to MATCH's board figures, see benchmarks/gap9_table_iv.py):

* ``cluster_efficiency``, ``cluster_dw_efficiency``, ``ne16_efficiency``: the kernels' measured
  throughput against the model (L_ops is divided by it). MATCH VI-A measured 91 % (convolution)
  and 88 % (depthwise) of the estimate on the cluster, 83 % and 77 % on NE16, for its best
  64-channel micro-benchmarks; whole networks run smaller layers.
* ``cluster_layer_cycles``, ``ne16_layer_cycles``: the fixed cost of offloading one layer that
  the per-tile models do not see: the fabric controller forking the cluster team and joining it,
  programming the layer's DMA descriptors and the layer template's set-up (NE16: the job's
  register set-up and start through a cluster core). Not given in the paper: fitted.
* ``cluster_tile_cycles``, ``ne16_tile_cycles``: the layer template's cost per tile (loop
  control, DMA programming and the wait at each tile boundary). Not given in the paper: fitted.
* ``host_cycles_per_mac``, ``host_cycles_per_element``: the fabric controller running TVM's
  generic C. Defaults: an assumption (a single-issue RISC-V core, about 8 cycles per int8 MAC
  with loads and index arithmetic); the shipped calibration fits them on the NE16+CPU rows
  (DS-CNN's first layer and the autoencoder's dense layers run there).

The L2 -> L1 transfers are already in L_mem; the four networks' weights and activations fit
GAP9's 1.5 MB L2, so nothing moves from L3 (the external RAM) during inference.
"""

from __future__ import annotations

import math

from edgebyoc.api import CalibrationParameter, Cost

# Each constant's source; "assumption" where the paper gives none (the calibration's
# efficiency and overhead parameters absorb what these leave out).
CLOCK_HZ = 260e6  # MATCH VI: both SoCs measured at 260 MHz
DMA_BYTES_PER_CYCLE = 8.0  # assumption: GAP9's cluster DMA, 64-bit L2 port
DMA_CHUNK_CYCLES = 27  # MATCH V-B: 27 cycles per contiguous chunk
CLUSTER_CORES = 8  # MATCH V-B: the 8-core cluster
SDOTP_STEP_CYCLES = 14  # assumption: 8 sdotp of a 4x2 block plus its operand loads
# assumption: loading or storing one int32 partial sum of the L1 accumulator (C cut in slices)
ACC_CYCLES = 1
IM2COL_BYTES_PER_CYCLE = 4.0  # assumption: one 32-bit load/store pair per cycle
REQUANT_CYCLES = 6  # assumption: multiply, add, shift, clip per output
CLUSTER_CALL_CYCLES = 150  # assumption: team fork and barrier per kernel call
DW_MAC_CYCLES = 1.5  # assumption: depthwise without SIMD over the window
ADD_CYCLES = 3  # assumption: two loads and a requantized store per element
NE16_JOB_CYCLES = 120  # assumption: NE16 register programming per job

#: the constants ``edgebyoc calibrate`` fits (see the module docstring)
PARAMETERS = (
    CalibrationParameter("cluster_efficiency", 1.0, 0.05, 1.0, "",
                         "cluster convolution kernels' throughput against the model",
                         "MATCH VI-A: 91 % of the estimate (best 64-channel convolution)"),
    CalibrationParameter("cluster_dw_efficiency", 1.0, 0.05, 1.0, "",
                         "cluster depthwise kernels' throughput against the model",
                         "MATCH VI-A: 88 % of the estimate (best 64-channel depthwise)"),
    CalibrationParameter("cluster_layer_cycles", 0.0, 0.0, 200_000.0, "cycles",
                         "fixed cost of one layer on the cluster (fork/join, DMA set-up)",
                         "assumption: not in the paper, fitted"),
    CalibrationParameter("cluster_tile_cycles", 0.0, 0.0, 50_000.0, "cycles",
                         "layer template's cost per cluster tile", "assumption: fitted"),
    CalibrationParameter("ne16_efficiency", 1.0, 0.05, 1.0, "",
                         "NE16 throughput against the NE16 latency model",
                         "MATCH VI-A: 83 % (convolution) / 77 % (depthwise) of the estimate"),
    CalibrationParameter("ne16_layer_cycles", 0.0, 0.0, 200_000.0, "cycles",
                         "fixed cost of one layer on NE16 (job set-up and start)",
                         "assumption: not in the paper, fitted"),
    CalibrationParameter("ne16_tile_cycles", 0.0, 0.0, 50_000.0, "cycles",
                         "layer template's cost per NE16 tile", "assumption: fitted"),
    CalibrationParameter("host_cycles_per_mac", 8.0, 1.0, 40.0, "cycles",
                         "fabric controller, TVM's generic C, per MAC",
                         "assumption: single-issue RISC-V, ~8 cycles per int8 MAC"),
    CalibrationParameter("host_cycles_per_element", 4.0, 0.0, 100.0, "cycles",
                         "fabric controller, TVM's generic C, per output element",
                         "assumption"),
)
DEFAULTS = {p.name: p.default for p in PARAMETERS}

# NE16 model constants: the NE16 latency model of PLiNIO (ne16_latency), which MATCH V-B cites
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


def cluster_tile_cycles(nest, k: int, oy: int, ox: int, c: int | None = None,
                        last: bool = True, taps: int | None = None) -> float:
    """Cluster L_ops of one innermost tile of ``k x oy x ox`` outputs over ``c`` input channels
    (None: all of C) and ``taps`` filter taps (None: the whole filter); with C or the filter
    cut in slices (partial sums in the int32 accumulator), every slice but the ``last``
    stores its sums (``ACC_CYCLES`` per output) instead of requantizing, and every slice but
    the first loads them."""
    rows_per_core = math.ceil(oy / CLUSTER_CORES)
    c = nest.C if c is None else c
    taps = nest.FY * nest.FX if taps is None else taps
    partial = c < nest.C or taps < nest.FY * nest.FX
    finish = REQUANT_CYCLES if last else ACC_CYCLES
    if nest.kind == "conv2d":
        window = c * taps
        blocks = rows_per_core * math.ceil(ox / 2) * math.ceil(k / 4)
        compute = blocks * math.ceil(window / 4) * SDOTP_STEP_CYCLES
        im2col = rows_per_core * math.ceil(ox / 2) * 2 * window / IM2COL_BYTES_PER_CYCLE
        outputs = rows_per_core * ox * k
        return CLUSTER_CALL_CYCLES + compute + im2col + outputs * (
            finish + (ACC_CYCLES if partial else 0))
    if nest.kind == "depthwise":
        macs = rows_per_core * ox * k * nest.FY * nest.FX
        return CLUSTER_CALL_CYCLES + macs * DW_MAC_CYCLES + rows_per_core * ox * k * REQUANT_CYCLES
    if nest.kind == "dense":
        per_core = math.ceil(k / CLUSTER_CORES)
        return CLUSTER_CALL_CYCLES + per_core * (math.ceil(c / 4) * 2 + finish + (
            ACC_CYCLES if partial else 0))
    if nest.kind == "add":
        return CLUSTER_CALL_CYCLES + rows_per_core * ox * k * ADD_CYCLES
    if nest.kind == "pool":
        return CLUSTER_CALL_CYCLES + rows_per_core * ox * k * (nest.FY * nest.FX + REQUANT_CYCLES)
    raise ValueError(f"no cluster model for {nest.kind}")


def ne16_tile_cycles(nest, k: int, oy: int, ox: int, c: int | None = None,
                     last: bool = True) -> float:
    """NE16 L_ops of one innermost tile (the NE16 latency model, see the module docstring)
    over ``c`` input channels (None: all of C); with C cut in slices, every slice streams
    the previous partial sums in and, but the ``last``, streams its int32 sums out instead
    of normalizing and quantizing them."""
    c = nest.C if c is None else c
    partial = c < nest.C
    depthwise = nest.kind == "depthwise"
    one_by_one = (nest.FY, nest.FX) == (1, 1)
    in_k = NE16_INPUT_BUFFER[2]
    out_k = in_k if depthwise else NE16_OUTPUT_BUFFER[2]
    h_out, w_out = NE16_OUTPUT_BUFFER[0], NE16_OUTPUT_BUFFER[1]
    in_h, in_w = NE16_INPUT_BUFFER[0], NE16_INPUT_BUFFER[1]
    load = (10 + h_out * w_out * math.ceil(in_k * 8 / NE16_STREAM_BITS)) if one_by_one else \
        (NE16_FIFO + in_h * in_w * math.ceil(in_k * 8 / NE16_STREAM_BITS))
    streamout = 3 + h_out * w_out * math.ceil(out_k * 8 / NE16_STREAM_BITS) + 1
    streamout32 = 3 + h_out * w_out * math.ceil(out_k * 32 / NE16_STREAM_BITS) + 1

    def normquant(kk):
        return 9 + math.ceil(kk * 4 / NE16_MULTIPLIERS)  # 32-bit scale: 4 bytes per channel

    def matrixvec(kk):
        return NE16_FIFO + (kk if one_by_one else kk * 8)

    def iteration(kk):
        if depthwise:
            return load + (NE16_FIFO + kk) + matrixvec(kk) + 2 + normquant(kk) + streamout
        n_in = math.ceil(c / in_k)
        finish = normquant(kk) + streamout if last else streamout32
        return n_in * (load + NE16_FIFO + matrixvec(kk) + 2) + finish + (
            streamout32 if partial else 0)

    channels = k
    body, rest = divmod(channels, out_k)
    spatial = math.ceil(oy / h_out) * math.ceil(ox / w_out)
    return NE16_JOB_CYCLES + spatial * (body * iteration(out_k) + (iteration(rest) if rest else 0))


def host_cycles(workload, constants=None) -> float:
    """The fabric controller running the layer through TVM's generic C."""
    k = constants or DEFAULTS
    elements = math.prod(workload.output[0]) if workload.output[0] else 0
    return workload.macs * k["host_cycles_per_mac"] + elements * k["host_cycles_per_element"]


def price(module_name: str, nest, schedule, constants=None) -> Cost:
    """The cost of ``schedule`` on ``module_name``: L = max(L_ops / efficiency, L_mem) when
    double-buffered (transfers overlap compute), their sum otherwise, plus the layer's and
    the tiles' fixed costs; ``constants``: the calibration in force (default: the model's
    own, ``DEFAULTS``)."""
    k = constants or DEFAULTS
    tile = schedule.tiles
    if module_name == "cluster":
        model = cluster_tile_cycles
        efficiency = k["cluster_dw_efficiency" if nest.kind == "depthwise" else
                       "cluster_efficiency"]
    else:
        model, efficiency = ne16_tile_cycles, k["ne16_efficiency"]
    slices = schedule.reduction_trips
    if slices > 1:  # partial sums: every slice accumulates, the last requantizes
        c = schedule.tile("C")
        taps = {"taps": schedule.tile("FY") * schedule.tile("FX")} \
            if module_name == "cluster" else {}  # NE16's filter stays whole
        per_output_tile = (slices - 1) * model(nest, tile["K"], tile["OY"], tile["OX"], c,
                                               last=False, **taps) + \
            model(nest, tile["K"], tile["OY"], tile["OX"], c, last=True, **taps)
        ops = schedule.iterations // slices * per_output_tile
    else:
        ops = schedule.iterations * model(nest, tile["K"], tile["OY"], tile["OX"])
    mem = dma_cycles(schedule)
    measured_ops = ops / efficiency
    overhead = k[f"{module_name}_layer_cycles"] + \
        schedule.iterations * k[f"{module_name}_tile_cycles"]
    total = (max(measured_ops, mem) if schedule.double_buffer else measured_ops + mem) + overhead
    return Cost(latency_cycles=total, breakdown={"L_ops": ops, "L_mem": mem,
                                                 "efficiency": efficiency,
                                                 "overhead": overhead})
