"""Default CPU schedules for the host path: convolutions, dense layers, pooling, row norms.

TVM 0.27's default CPU pipeline schedules no conv2d (plain single-threaded loops, ~57x slower than
PyTorch). This module gives every fused PrimFunc that holds one dominant reduction (conv2d in NHWC,
depthwise conv, dense / matmul, pooling) a register-blocked, vectorised, parallel schedule through
the standard ``tvm.s_tir.Schedule`` primitives, packaged as a dlight ``ScheduleRule`` so that it
runs inside ``ApplyDefaultSchedule`` like TVM's own rules.

The shape it produces, for output ``O[n, y, x, f]`` (channels innermost, see ``HOST_LAYOUTS``)::

    parallel for (n, y, x_outer):              # independent output rows / tiles
      padded copy of the input rows this tile reads (the thread's own buffer)
      for f_outer:                             # output channels, in vector blocks
        for reductions (ry, rx, c):
          for x_inner (unrolled):              # register block along the row
            for f_inner (vectorised):          # SIMD lanes along contiguous channels
              acc[x_inner, f_inner] += ...
        epilogue (bias, residual add, activation) on the accumulator tile

The vector width comes from the target's features as LLVM knows them (``simd_lanes``) and the
channel tile is whole vectors (``channel_tile``: 144 channels are 9 vectors of 16, not tiles
of 24 with tails; an odd count of vectors tiles in pairs with a guarded last tile,
``guarded_channel_tile``). A layer whose weights outgrow a core's L1 cache and its input
(``WEIGHT_STREAM_BYTES``) puts the channel tiles outermost instead, so each thread streams
its weights once; where one channel tile's weights still outgrow it (``TILE_WEIGHT_BYTES``:
FCN-ResNet50's 3x3 head, 2,048 input channels), its input channels go in blocks, each block's
weights staying cached while every output position accumulates them in the output tile.
Padding is copied per parallel tile, inside the one parallel region of the kernel (a bounds
select per multiply-add costs more, measured 20.5 vs 28.3 ms on ResNet-18; a whole padded copy in a
parallel region of its own costs a second thread-pool wake-up per layer, ResNet-18 21.7 vs
27.1 ms without spinning threads). A depthwise convolution or a pooling does only a window's
few multiply-adds per input element, so its copy would cost as much as its work: it reads the
padding in place, with its filter row's taps unrolled so that each input column is loaded
once for the taps reading it (MobileNetV2 2.57 -> 2.32 ms). Other producers are inlined,
and the element-wise epilogue runs on the accumulator tile, so the full-size accumulator is
never materialised. Row-wise
normalisations (softmax, layer and RMS norm: several reductions over the last axis) run one
row at a time in a parallel loop, in vectors (``row_schedules``). Functions the rules do
not recognise keep TVM's default lowering; the rules change loop structure, not results (a row
reduction sums in vector lanes: float32 rounding of a reordered sum).
"""

from __future__ import annotations

import logging
import math
import platform

import tvm
from tvm import s_tir, tirx
from tvm.s_tir import dlight
from tvm.s_tir.dlight.analysis import normalize_prim_func
from tvm.s_tir.dlight.cpu.base import CPUScheduleRule
from tvm.sym.pattern import detect_linear_equation
from tvm.target import Target

from .host_rule import HostRule, Unschedulable, loop_extent
from .row_schedules import HostLaneSoftmaxRule, HostRowReductionRule, ReductionOverRowsOnly

log = logging.getLogger(__name__)

#: Layouts the host path converts convolutions to before legalization: channels innermost, so the
#: output-channel loop is contiguous in the output, the weights and (for depthwise) the input.
HOST_LAYOUTS = {"relax.nn.conv2d": ["NHWC", "HWIO"], "relax.nn.conv1d": ["NWC", "WIO"]}

#: Upper bound of the register block along the output row; ``max_row_block`` lowers it where
#: the block's accumulators would not fit in the target's vector registers (8 x 2 = 16 of
#: AVX-512's 32 registers; AVX2 has 16, so 6 x 2).
MAX_ROW_BLOCK = 8
#: A channel axis tiled in half vectors (its widest power-of-two divisor is half the SIMD
#: width) is padded to whole vectors when that adds at most 1 / this of the work.
MAX_HALF_VECTOR_PADDING = 16
#: A depthwise convolution's or pooling's filter row up to this many taps is unrolled with
#: the register block, so that LLVM loads each input column once for all the taps reading it.
MAX_UNROLLED_TAPS = 7
#: How many SIMD vectors of output channels one tile accumulates.
VECTORS_PER_TILE = 2
#: ... on a target with 16 vector registers (AVX2), for a row no block of 2-vector tiles
#: divides (a 7x7 map: blocks of 4, the second guarded): 4 vectors in blocks of
#: ``max_row_block(16, 4)`` = 2 rows. The guarded block of 4 rows kept its accumulators on the
#: stack and branched inside the reduction loop. AMD EPYC Zen 3, 2 threads, per kernel (hot):
#: 160 -> 960 at 7x7 0.161 -> 0.100 ms (onnxruntime 0.113), 960 -> 320 0.34 -> 0.22 ms,
#: ResNet-18's 512 -> 512 3x3 at 7x7 2.40 -> 1.74 ms; whole models against onnxruntime:
#: MobileNetV2 1.04x -> 0.95x, EfficientNet-B0 1.03x -> 0.95x, ResNet-18 1.01x -> 0.87x.
SHORT_ROW_VECTORS = 4
#: ... in a dense layer or matmul (one reduction axis) on a target with 32 vector registers
#: (AVX-512): 8 rows x 3 vectors = 24 accumulators, 11 loads per 24 multiply-adds against 10
#: per 16 (BERT-base's 128 x 768 x 3072 layer: 0.93x the time of 2 vectors, 2 threads).
DENSE_VECTORS_PER_TILE = 3
#: Weights over this many bytes (more than a core's L1 data cache holds beside the rows it
#: works on) and over the activations' size are streamed once per channel tile rather than
#: re-read from L2 for every row of outputs: each tile's weights stay in L1 while every row
#: passes them, and the smaller activations are what is re-read. 1 MiB (L2-sized) before:
#: EfficientNet-B0 1.03x -> 0.95x and MobileNetV3-Large 1.00x -> 0.92x onnxruntime, the 1x1
#: convolutions of 7x7 and 14x14 maps (192 x 1152: 0.9 MB of weights); ResNet-18, ViT-S/16
#: and BERT within noise (the Xeon of docs/performance.md, interleaved A/B, 2 threads).
WEIGHT_STREAM_BYTES = 64 << 10
#: A streamed convolution whose channel tile has more weights than this splits its input
#: channels into blocks of at most this many bytes of weights (``_input_channel_block``)
TILE_WEIGHT_BYTES = 128 << 10
#: the fewest output positions (a tile's loops outside the channels) that share such a block
MIN_BLOCKED_POSITIONS = 64
#: the fewest channel tiles such a convolution needs: they are then its only parallel loop
MIN_BLOCKED_TILES = 4
#: A streamed stride-1 convolution with a filter window over fewer than
#: ``MIN_BLOCKED_POSITIONS`` register blocks of outputs (a 7x7 or 8x8 map) accumulates its
#: input channels in blocks of this many, every output of the tile passing each block's
#: weights before the next (``_input_channel_block``; 0 leaves such kernels unblocked). On the
#: Xeon of docs/performance.md, 2 threads, per kernel: 512 -> 512 at 7x7 1.69-1.74 -> 1.30-1.37
#: ms (blocks of 4: 1.39-1.47, 16: 1.56, 1: 1.69), 448 -> 384 at 8x8 1.50 -> 1.13 ms, 256 ->
#: 256 at 7x7 0.51 -> 0.41 ms; strided and 1x1 convolutions measured no better or slower.
SMALL_MAP_CHANNEL_BLOCK = 2


def simd_lanes(target: Target, dtype_bits: int = 32) -> int:
    """Number of ``dtype_bits``-wide lanes in the target's widest vector register, from the
    features LLVM gives the target's CPU and attributes (``-mcpu=rocketlake`` has AVX-512,
    ``znver3`` AVX2, ``+avx512f`` in ``mattr`` adds it; ``generic`` x86-64 has SSE2).

    Example::

        >>> simd_lanes(Target({"kind": "llvm", "mcpu": "rocketlake"}))
        16
        >>> simd_lanes(Target({"kind": "llvm", "mcpu": "znver3"}))
        8
    """
    from tvm.target import codegen

    bits = 128
    try:
        if codegen.target_has_features("avx512f", target):
            bits = 512
        elif codegen.target_has_features("avx2", target) or \
                codegen.target_has_features("avx", target):
            bits = 256
    except (RuntimeError, ValueError):  # a target LLVM cannot describe
        pass
    return max(1, bits // dtype_bits)


def vector_registers(target: Target) -> int:
    """Number of SIMD registers a register tile can use: 32 with AVX-512 (zmm0-31) and on
    AArch64 (v0-v31); 16 on x86 without AVX-512 (ymm0-15 or xmm0-15), on 32-bit Arm NEON
    (q0-15) and where LLVM cannot describe the target.

    Example::

        >>> vector_registers(Target({"kind": "llvm", "mcpu": "skylake-avx512"}))
        32
        >>> vector_registers(Target({"kind": "llvm", "mcpu": "znver2"}))
        16
        >>> vector_registers(Target({"kind": "llvm", "mtriple": "aarch64-linux-gnu"}))
        32
    """
    from tvm.target import codegen

    triple = str(target.attrs.get("mtriple", "") or platform.machine()).lower()
    try:
        if codegen.target_has_features("avx512f", target) or (
                triple.startswith(("aarch64", "arm64")) and
                codegen.target_has_features("neon", target)):
            return 32
    except (RuntimeError, ValueError):  # a target LLVM cannot describe
        pass
    return 16


def max_row_block(registers: int, vectors: int) -> int:
    """The widest register block along the output row (at most ``MAX_ROW_BLOCK``) whose
    accumulators, ``vectors`` per position, fit in ``registers`` beside the ``vectors``
    weight vectors and the one input broadcast of each multiply-add step. Blocks of 8 on
    AVX2 (16 registers) needed 16 accumulators and spilled them to the stack every step:
    ResNet-18 1.69x -> 0.94x onnxruntime's time with blocks of at most 6 (AMD EPYC, Zen 2,
    2 threads).

    Example (AVX-512 and AVX2, tiles of 2 and 3 vectors)::

        >>> max_row_block(32, 2), max_row_block(32, 3), max_row_block(16, 2), max_row_block(16, 3)
        (8, 8, 6, 4)
    """
    return max(1, min(MAX_ROW_BLOCK, (registers - vectors - 1) // max(vectors, 1)))


def tile_vectors(reductions: int, lanes: int, rows: int | None, channels: int | None,
                 registers: int = 32) -> int:
    """The most SIMD vectors of output channels a register tile accumulates (``channel_tile``'s
    ``vectors``) on a target with ``registers`` vector registers (``vector_registers``).

    - ``DENSE_VECTORS_PER_TILE`` for a kernel with one reduction axis (a dense layer or
      matmul: no filter window) on 512-bit vectors (``lanes`` 16: AVX-512, 32 registers)
      whose ``rows`` (the output axis before the channels) are whole register blocks of
      ``MAX_ROW_BLOCK`` and whose ``channels`` are whole vectors. Measured on the Xeon of
      docs/performance.md (x @ W, W 768 x 3072, 2 threads, against 2 vectors): 128, 192 or
      200 rows (blocks of 8) 0.90-0.95x the time, 196 rows (blocks of 7) 1.01x, 197 rows
      (blocks of 6, the last guarded) 1.05-1.10x.
    - ``SHORT_ROW_VECTORS`` on fewer than 32 registers for a row of at most ``MAX_ROW_BLOCK``
      positions that no block of ``VECTORS_PER_TILE``-vector tiles divides (a 7x7 map on
      AVX2: blocks of 4, the second guarded), where the channels are whole tiles of them.
    - else ``VECTORS_PER_TILE``.

    Example (BERT's 128 tokens; ViT's 197; a classifier's one row; a convolution; a 7x7 map
    of 960 or 1,000 channels on AVX2)::

        >>> [tile_vectors(1, 16, rows, 768) for rows in (128, 197, 1)]
        [3, 2, 2]
        >>> tile_vectors(3, 16, 56, 96), tile_vectors(1, 8, 128, 768)
        (2, 2)
        >>> tile_vectors(3, 8, 7, 960, registers=16), tile_vectors(3, 8, 7, 1000, registers=16)
        (4, 2)
    """
    dense = reductions == 1 and lanes >= 16 and rows is not None and channels is not None
    if dense and rows % MAX_ROW_BLOCK == 0 and channels % lanes == 0:
        return DENSE_VECTORS_PER_TILE
    if registers < 32 and rows is not None and 1 < rows <= MAX_ROW_BLOCK and \
            channels is not None and channels % (SHORT_ROW_VECTORS * lanes) == 0 and \
            rows % row_block(rows, max_row_block(registers, VECTORS_PER_TILE)) != 0:
        return SHORT_ROW_VECTORS
    return VECTORS_PER_TILE


def channel_tile(channels: int, lanes: int, per_channel: bool = False,
                 vectors: int = VECTORS_PER_TILE) -> tuple[int, int]:
    """(vector, tile): the SIMD width of the channel loop, the widest power of two up to
    ``lanes`` that divides ``channels`` (no tail, no masked lanes), and the channels one
    register tile accumulates: the largest multiple of it dividing ``channels`` up to
    ``vectors`` full vectors (``tile_vectors``).

    ``per_channel``: the kernel's window reads its input at its own output channel (a
    depthwise convolution or a pooling); its tile is then a power-of-two number of vectors.
    Three vectors of 8 lanes (24, 72 or 120 channels on AVX-512) ran such a window 3-5x
    slower than one vector (a 5x5 depthwise layer of 120 channels at 28x28: 0.35 -> 0.064 ms
    on the Xeon of docs/performance.md), where a convolution's broadcast input keeps them fast.

    Example (AVX-512, 16 fp32 lanes: 144 channels are 9 vectors of 16, not tiles of 24)::

        >>> channel_tile(144, 16), channel_tile(96, 16), channel_tile(24, 16), channel_tile(3, 16)
        ((16, 16), (16, 32), (8, 24), (1, 3))
        >>> channel_tile(72, 16, per_channel=True), channel_tile(96, 16, per_channel=True)
        ((8, 8), (16, 32))
        >>> channel_tile(768, 16, vectors=3), channel_tile(512, 16, vectors=3)
        ((16, 48), (16, 32))
    """
    vector = 1
    while vector * 2 <= lanes and channels % (vector * 2) == 0:
        vector *= 2
    limit = max(vector, lanes * vectors)
    tile = max(t for t in range(vector, min(channels, limit) + 1, vector) if channels % t == 0
               and (not per_channel or (t // vector) & (t // vector - 1) == 0))
    return vector, tile


def guarded_channel_tile(channels: int, lanes: int, vector: int, tile: int,
                         vectors: int = VECTORS_PER_TILE) -> int:
    """The output channels one register tile accumulates where ``channel_tile``'s exact
    ``tile`` is a single full vector of an odd count (112 channels are 7 vectors of 16: no
    tile of 2 or 3 divides them): ``vectors`` vectors, the last tile guarded down to the
    vectors left (112: 32, 32, 32 and 16). Every vector stays full; only the last tile is
    narrower. A one-vector tile loads an input broadcast per multiply-add (EfficientNet-B0's
    1x1 convolution 672 -> 112 at 14x14: 0.235 -> 0.191 ms on the Xeon of
    docs/performance.md, 2 threads). Other tiles, and half-vector channels, are returned as
    they are; the caller keeps exact tiles where an input is read at its own output channel
    (``channel_tile``'s ``per_channel``) and where the row blocks are guarded (``row_block``).

    Example (7 vectors in tiles of 2 or 3; 96 channels already tile in 2; 40 channels are
    half vectors)::

        >>> guarded_channel_tile(112, 16, 16, 16), guarded_channel_tile(112, 16, 16, 16, 3)
        (32, 48)
        >>> guarded_channel_tile(96, 16, 16, 32), guarded_channel_tile(40, 16, 8, 8)
        (32, 8)
    """
    if vector < lanes or tile != vector or channels // vector < 2:
        return tile
    return vector * min(vectors, channels // vector)


def _buffer_bytes(buffer) -> int:
    """The size in bytes of a TIR ``Buffer`` or of a parameter's ``BufferType`` (a static
    shape)."""
    return math.prod(int(d) for d in buffer.shape) * tvm.DataType(buffer.dtype).bits // 8


def _largest_divisor_at_most(n: int, bound: int) -> int:
    return max(d for d in range(1, min(n, bound) + 1) if n % d == 0)


#: The smallest register block along the output row worth keeping: a row no divisor of which
#: from here to ``MAX_ROW_BLOCK`` divides is cut in blocks with a smaller last one instead
#: (197 tokens: blocks of 6 and a last of 5, not 197 blocks of 1).
MIN_ROW_BLOCK = 4


def row_block(row: int, bound: int = MAX_ROW_BLOCK) -> int:
    """The register block along an output row of ``row`` positions: its largest divisor up to
    ``bound`` (``max_row_block``) when that is at least ``MIN_ROW_BLOCK``, else the block from
    ``MIN_ROW_BLOCK`` to ``bound`` that wastes the fewest positions in its last, guarded block
    (larger on ties): a prime row keeps a full register block.

    Example (56 and 14 divide; 197 and 22 get guarded tails; AVX2's bound of 6 last)::

        >>> row_block(56), row_block(14), row_block(197), row_block(22), row_block(3)
        (8, 7, 6, 8, 3)
        >>> row_block(56, 6), row_block(14, 6), row_block(7, 6), row_block(197, 6)
        (4, 5, 4, 6)
    """
    if row <= bound:
        return row
    divisor = _largest_divisor_at_most(row, bound)
    lowest = min(MIN_ROW_BLOCK, bound)
    if divisor >= lowest:
        return divisor
    return min(range(lowest, bound + 1), key=lambda b: (-(-row // b) * b - row, -b))


def padded_channels(channels: int, lanes: int) -> int | None:
    """The channel extent a kernel is computed over when ``channels`` would leave SIMD lanes
    idle: the next multiple of ``lanes`` when the widest power of two dividing ``channels``
    is under half a vector (197 tokens: 208 on AVX-512, not scalar code), or is half a vector
    and the padding adds at most ``1 / MAX_HALF_VECTOR_PADDING`` of the work (1,000 classes:
    1,008, full vectors for 0.8 % more; 24 or 120 channels stay in half vectors);
    ``None`` when ``channels`` vectorises as it is (or is under one vector).

    Example::

        >>> padded_channels(197, 16), padded_channels(1000, 16), padded_channels(96, 16)
        (208, 1008, None)
        >>> padded_channels(120, 16), padded_channels(24, 16)
        (None, None)
    """
    if channels <= lanes:
        return None
    vector = channel_tile(channels, lanes)[0]
    padded = -(-channels // lanes) * lanes
    if vector >= lanes:
        return None
    if vector * 2 >= lanes and (padded - channels) * MAX_HALF_VECTOR_PADDING > channels:
        return None
    return padded


#: An odd number of vectors from ``padded_channels`` is rounded up to whole register tiles
#: (``VECTORS_PER_TILE``) when that adds at most 1 / this of the padded work
MAX_TILE_PADDING = 8


def einsum_channel_padding(channels: int, lanes: int) -> int:
    """The multiple an einsum's output channels are padded to at run time (``pad_einsum``, its
    operands copied per call): whole vectors (``padded_channels``), or whole register tiles
    of ``VECTORS_PER_TILE`` vectors where the vectors would be odd and the extra vector adds at
    most ``1 / MAX_TILE_PADDING`` of the work. An odd count keeps a tile of one vector
    (``channel_tile``); attention's scores over 197 keys (13 vectors) then ran at half the
    rate of 14 vectors in tiles of two (ViT-B/16, Q x K^T: 20 -> 40 GMAC/s on the Xeon).

    Example::

        >>> einsum_channel_padding(197, 16), einsum_channel_padding(1000, 16)
        (32, 32)
        >>> einsum_channel_padding(40, 16), einsum_channel_padding(23, 16)
        (16, 16)
    """
    vectors = -(-channels // lanes)
    tile = lanes * VECTORS_PER_TILE
    if vectors % VECTORS_PER_TILE and vectors >= MAX_TILE_PADDING:
        return tile
    return lanes


class HostReductionRule(HostRule):
    """Schedules a PrimFunc holding one spatial-reduction block (conv / dense / pool) for the CPU.

    ``inline_padding`` trades speed for memory: the reduction reads its input through a bounds
    check instead of a padded copy (the memory-saving mode of DFS planning). ``True`` for every
    kernel; a number of bytes for the kernels whose input, output and padded copy together
    would exceed it (the depth-first plan's memory limit: smaller kernels keep the faster
    copy); ``False`` never.
    """

    def __init__(self, inline_padding: bool | int = False):
        self.inline_padding = inline_padding

    def _reads_padding_in_place(self, sch, pad_block) -> bool:
        if isinstance(self.inline_padding, bool):
            return self.inline_padding
        func = sch.mod["main"]
        padded = _buffer_bytes(sch.get(pad_block).writes[0].source)
        params = [p.ty for p in func.params if hasattr(p.ty, "shape")]
        live = _buffer_bytes(params[0]) + _buffer_bytes(params[-1]) if params else 0
        return padded + live > self.inline_padding

    def schedule(self, func: tirx.PrimFunc, target: Target):
        sch = s_tir.Schedule(func)
        infos = normalize_prim_func(sch)
        if infos is None:
            return None
        reductions = [b for b in infos if b.is_reduction()]
        if len(reductions) != 1:
            return None
        main = reductions[0]
        kinds = main.dom_kind()
        # spatial loops first, reductions after: the layout of every legalized conv / pool / dense
        if "R" not in kinds or kinds.index("R") != kinds.count("S") or len(kinds) < 2:
            return None
        main_name = sch.get(main.block_rv).name_hint
        sch, einsum_pads = _pad_channel_axis(sch, main, target)
        if einsum_pads is not None:
            infos = normalize_prim_func(sch)
        names = [sch.get(b.block_rv).name_hint for b in infos]
        main_index = names.index(main_name)
        try:
            self._schedule(sch, infos, main_index, target, einsum_pads or ())
        except (RuntimeError, Unschedulable) as err:
            # the rule is an optimisation: a function it cannot handle keeps TVM's default loops
            log.debug("host schedule skipped for %s: %s", names, err)
            return None
        return sch

    def _schedule(self, sch, infos, main_index, target, einsum_pads=()):
        main = infos[main_index].block_rv
        # producers (padding, casts) are inlined into the reduction, consumers (bias, residual,
        # activation) into the last block, which then runs on the accumulator tile; the
        # operands ``_pad_channel_axis`` padded are copied once, in loops of their own
        pads = []
        num_spatial = infos[main_index].dom_kind().count("S")
        per_channel = False  # a depthwise convolution or a pooling (see _reads_per_channel)
        for info in infos[:main_index]:
            if sch.get(info.block_rv).name_hint in einsum_pads:
                loops = sch.get_loops(info.block_rv)
                sch.parallel(sch.fuse(*loops[:2]) if len(loops) > 1 else loops[0])
            elif info.is_data_pad(sch) and _reads_per_channel(
                    sch, main, info.block_rv, num_spatial - 1):
                # the copy would cost about as much as the few multiply-adds per element: the
                # window reads the padding in place (c32 112x112 depthwise: 0.073 -> 0.057 ms)
                per_channel = True
                sch.compute_inline(info.block_rv)
            elif info.is_data_pad(sch) and not self._reads_padding_in_place(sch, info.block_rv):
                # a padded copy is cheaper than a bounds select per multiply-add; it is made
                # per parallel tile below (the rows the tile reads, in the thread's own buffer)
                pads.append(info.block_rv)
            else:
                sch.compute_inline(info.block_rv)
        epilogue, broadcast = self._split_consumers(sch, main, infos[main_index + 1:])

        loops = sch.get_loops(main)
        spatial, reduction = loops[:num_spatial], loops[num_spatial:]
        lanes, registers = simd_lanes(target), vector_registers(target)
        channels = loop_extent(sch, spatial[-1])
        if channels is None or channels < 1:
            raise Unschedulable("symbolic or empty channel extent")
        group = _channels_per_group(sch.get(main), num_spatial - 1)
        if group is not None and group >= 4:  # a vector within one group: broadcast inputs
            lanes = min(lanes, group & -group)
        outer = list(spatial[:-1])
        row = loop_extent(sch, outer[-1]) if outer else None
        # padded channels keep the tile ``pack_constant_weights`` chose for the unpadded ones
        vectors = VECTORS_PER_TILE if einsum_pads else \
            tile_vectors(len(reduction), lanes, row, channels, registers)
        vector, exact_tile = channel_tile(channels, lanes, per_channel, vectors)
        # a guarded channel tile inside guarded row blocks ran slower than one-vector tiles
        # (SqueezeNet's classifier, 1,000 channels padded to 63 vectors on a 13x13 map of
        # blocks of 7: 1.44 -> 2.59 ms): the channel guard only where the rows divide
        block = row_block(row, max_row_block(registers, vectors)) \
            if row is not None and row > 1 else None
        rows_guarded = block is not None and row % block != 0
        tile_channels = exact_tile if per_channel or rows_guarded else guarded_channel_tile(
            channels, lanes, vector, exact_tile, vectors)
        if tile_channels == exact_tile:
            f_outer, f_inner = sch.split(spatial[-1], [None, tile_channels])
            f_vec_outer, f_vec = sch.split(f_inner, [None, vector])
        else:  # whole vectors, the last tile guarded (fewer vectors)
            f_vectors, f_vec = sch.split(spatial[-1], [None, vector])
            f_outer, f_vec_outer = sch.split(f_vectors, [None, tile_channels // vector])
        x_inner = None
        if outer:
            if block is not None:  # a guarded last block where no block divides
                x_outer, x_inner = sch.split(outer[-1], [None, block])
                outer[-1] = x_outer
        inner = ([x_inner] if x_inner is not None else []) + [f_vec_outer, f_vec]
        streams = _streams_weights(sch, main)
        blocked = _input_channel_block(sch, main, reduction, outer, tile_channels) \
            if streams and (loop_extent(sch, f_outer) or 0) >= MIN_BLOCKED_TILES else None
        init_at = reduction[0] if reduction else None
        panel = None if streams else _row_panel(sch, main, reduction, outer, channels)
        if blocked is not None:
            # a channel tile's weights outgrow the cache too: its input channels in blocks
            # whose weights stay cached while every output position accumulates them
            c_outer, c_inner = sch.split(reduction[-1], [None, blocked])
            reduction = [*reduction[:-1], c_inner]
            sch.reorder(f_outer, c_outer, *outer, *reduction, *inner)
            tile_loop = parallel = f_outer
            sch.parallel(f_outer)
            init_at = c_outer
        elif streams:
            # weights larger than a core's cache: each thread streams its channel tiles'
            # weights once over every output position, instead of every thread reading all
            # the weights once per row of outputs
            sch.reorder(f_outer, *outer, *reduction, *inner)
            tile_loop = parallel = sch.fuse(f_outer, *outer)
            sch.parallel(tile_loop)
        elif panel is not None:
            # weights over L2 that every row block would read again: a panel of row blocks
            # passes each block of the reduction's weights (all channels) before the next
            rows_per_panel, k_block = panel
            k_outer, k_inner = sch.split(reduction[-1], [None, k_block])
            p_outer, p_inner = sch.split(outer[-1], [None, rows_per_panel])
            reduction = [*reduction[:-1], k_inner]
            sch.reorder(*outer[:-1], p_outer, k_outer, p_inner, f_outer, *reduction, *inner)
            tile_loop = parallel = sch.fuse(*outer[:-1], p_outer)
            sch.parallel(parallel)
            init_at = k_outer
        else:
            sch.reorder(*outer, f_outer, *reduction, *inner)
            parallel = None
            tile_loop = f_outer
            if outer and not pads and _few_row_blocks(sch, outer):
                # the channel tiles join the parallel loop (a padded copy would then be made
                # once per tile: kernels with one keep their rows)
                parallel = tile_loop = sch.fuse(*outer, f_outer)
                sch.parallel(parallel)
            elif outer:
                parallel = sch.fuse(*outer) if len(outer) > 1 else outer[0]
                sch.parallel(parallel)
        for pad in pads:
            if parallel is not None and not streams:  # one parallel region per kernel
                sch.compute_at(pad, parallel, preserve_unit_loops=True)
            else:  # streamed weights: every channel tile reads the same rows; copy them once
                sch.parallel(sch.fuse(*sch.get_loops(pad)[:2]))
        if epilogue is not None:
            sch.reverse_compute_at(epilogue, tile_loop, preserve_unit_loops=True)
            e_loops = sch.get_loops(epilogue)
            try:  # a padded channel tile's epilogue is guarded (the padding is not written):
                sch.vectorize(e_loops[-1])  # LLVM's loop vectoriser takes it, remainder too
            except RuntimeError as err:
                log.debug("epilogue left to LLVM's vectoriser: %s", str(err).splitlines()[0])
        if broadcast is not None:
            self._broadcast_loops(sch, broadcast, lanes)
        if x_inner is not None:
            sch.unroll(x_inner)
            taps = loop_extent(sch, reduction[-1]) if reduction else None
            if per_channel and taps is not None and taps <= MAX_UNROLLED_TAPS:
                # the filter row's taps unrolled with the register block's columns: column
                # x + tap is loaded once for every (column, tap) pair that reads it (c32
                # 112x112 depthwise: 0.057 -> 0.042 ms)
                sch.unroll(reduction[-1])
        sch.unroll(f_vec_outer)
        # vectorize while the block is still a reduction with init: the decomposed update block
        # no longer passes the compact-dataflow check of ``vectorize``
        sch.vectorize(f_vec)
        if init_at is not None:
            sch.decompose_reduction(main, init_at)

    @staticmethod
    def _split_consumers(sch, main, consumers) -> tuple:
        """(epilogue, broadcast): the element-wise blocks after the reduction, each chain
        inlined into its last block. The epilogue runs on the accumulator tile. A consumer
        that writes more elements than the reduction (a squeeze-and-excitation scale times its
        feature map) starts the broadcast part, which gets loops of its own after the
        reduction: on the tile it would run serially, once per tile, and recompute the
        epilogue (a sigmoid) for every element it broadcasts to."""
        blocks = [info.block_rv for info in consumers]
        size = _written_elements(sch, main)
        wider = next((i for i, block in enumerate(blocks)
                      if size is not None and (_written_elements(sch, block) or 0) > size),
                     None)
        chains = [blocks, []] if wider is None else [blocks[:wider], blocks[wider:]]
        for chain in chains:
            for block in chain[:-1]:
                sch.compute_inline(block)
        return tuple(chain[-1] if chain else None for chain in chains)

    @staticmethod
    def _broadcast_loops(sch, block, lanes: int) -> None:
        """A broadcast consumer's own loops: rows over the threads, channels in vectors."""
        HostInjectiveRule._parallel_rows(sch, block)
        channels = loop_extent(sch, sch.get_loops(block)[-1])
        vector = channel_tile(channels, lanes)[0] if channels else 1
        if vector > 1:
            inner = sch.split(sch.get_loops(block)[-1], [None, vector])[1]
            try:
                sch.vectorize(inner)
            except RuntimeError as err:
                log.debug("broadcast left to LLVM's vectoriser: %s", str(err).splitlines()[0])


def _written_elements(sch, block) -> int | None:
    """The elements of the buffer ``block`` writes, when its shape is static."""
    shape = sch.get(block).writes[0].source.shape
    if not all(isinstance(d, tirx.IntImm) for d in shape):
        return None
    return math.prod(int(d) for d in shape)


def _reads_per_channel(sch, main, pad_block, channel_axis: int) -> bool:
    """Whether ``main`` reads the padded input that ``pad_block`` writes at its own output
    channel (the last index is the block's channel iterator): a depthwise convolution or a
    pooling, which does a few multiply-adds (the window's taps) per input element, where a
    convolution does a window times its input channels."""
    padded = sch.get(pad_block).writes[0].source
    block = sch.get(main)
    channel = block.iter_vars[channel_axis].var
    for region in block.reads:
        if region.source.same_as(padded):
            last = region.region[-1]
            return isinstance(last.min, tirx.Var) and last.min.same_as(channel) and \
                isinstance(last.extent, tirx.IntImm) and int(last.extent) == 1
    return False


def _channels_per_group(block, channel_axis: int) -> int | None:
    """The output channels of one group of a grouped convolution: the ``k`` of the input
    channel index ``f // k * c + r`` its block reads (``f`` its output channel iterator), else
    ``None``. A vector of output channels within one group reads one input channel per
    reduction step, broadcast; across groups each lane reads its own (a gather)."""
    channel = block.iter_vars[channel_axis].var
    found = []

    def visit(expr) -> None:
        if isinstance(expr, tirx.FloorDiv) and expr.a.same_as(channel) and \
                isinstance(expr.b, tirx.IntImm):
            found.append(int(expr.b.value))
        for name in ("a", "b"):
            operand = getattr(expr, name, None)
            if operand is not None:
                visit(operand)

    for region in block.reads:
        for axis in region.region:
            visit(axis.min)
    return min(found) if found else None


def _pad_channel_axis(sch, main, target) -> tuple:
    """(schedule, names of the operand copies it adds, or None): for a reduction whose output
    channels (its last spatial axis) ``padded_channels`` would leave most lanes idle, a copy
    of ``sch`` with the computation padded to whole vectors along that axis (TVM's
    ``pad_einsum``: the operands that axis indexes are copied into padded buffers and the
    result copied back, so every vector of the main loop is full); ``sch`` itself when the
    axis vectorises as it is or the block is not an einsum (a convolution's windowed input)."""
    loops = sch.get_loops(main.block_rv)
    num_spatial = main.dom_kind().count("S")
    channels = loop_extent(sch, loops[num_spatial - 1])
    padded = None if channels is None else padded_channels(channels, simd_lanes(target))
    if padded is None:
        return sch, None
    trial = sch.copy()
    before = {trial.get(b).name_hint for b in trial.get_child_blocks(trial.get_sblock("root"))}
    padding = [1] * len(main.dom_kind())  # the channel axis to whole vectors or tiles
    padding[num_spatial - 1] = einsum_channel_padding(channels, simd_lanes(target))
    try:
        trial.pad_einsum(trial.get_sblock(sch.get(main.block_rv).name_hint), padding)
    except (RuntimeError, ValueError) as err:
        log.debug("channel axis of %d not padded: %s", channels, err)
        return sch, None
    after = {trial.get(b).name_hint for b in trial.get_child_blocks(trial.get_sblock("root"))}
    return trial, frozenset(after - before)


def _input_channel_block(sch, main, reduction, outer, tile_channels: int) -> int | None:
    """The input channels per block of a streamed convolution (filter rows, columns and
    input channels as its reductions, the loops ``outer`` outside its channel tile): where
    at least ``MIN_BLOCKED_POSITIONS`` output positions share them and a channel tile has
    more weights than ``TILE_WEIGHT_BYTES``, the largest divisor of the input channels that
    keeps a block's weights within it; where fewer do, ``SMALL_MAP_CHANNEL_BLOCK`` for a
    stride-1 filter window (``_row_stride``); else None (unblocked)."""
    extents = [loop_extent(sch, loop) for loop in reduction]
    positions = [loop_extent(sch, loop) for loop in outer]
    if len(extents) != 3 or None in extents or None in positions:
        return None
    if math.prod(positions) < MIN_BLOCKED_POSITIONS:
        if SMALL_MAP_CHANNEL_BLOCK < 1 or extents[0] * extents[1] == 1 or \
                _row_stride(sch, main) != 1:
            return None
        block = _largest_divisor_at_most(extents[2], SMALL_MAP_CHANNEL_BLOCK)
        return block if 1 < block < extents[2] else None
    per_channel = extents[0] * extents[1] * tile_channels * 4
    if per_channel * extents[2] <= TILE_WEIGHT_BYTES:
        return None
    block = _largest_divisor_at_most(extents[2], max(1, TILE_WEIGHT_BYTES // per_channel))
    return block if 1 < block < extents[2] else None


#: A dense layer (one reduction axis) with more weights than this, and more rows still (so
#: not streamed), runs panels of row blocks in parallel (``_row_panel``): every row block
#: read all the weights from beyond L2 before. Whisper's encoder (1500 tokens), 1536 -> 384:
#: 15.8 -> 11.0 ms a layer (onnxruntime 9.6), the encoder 340 -> 321 ms (the Xeon of
#: docs/performance.md, 2 threads; panels of 8 row blocks and 256 KiB blocks: 11.9 ms)
PANEL_WEIGHT_BYTES = 1 << 20
#: A panel passes the weights in blocks of the reduction of at most this many bytes (all
#: channels), each over all its rows before the next
PANEL_K_BLOCK_BYTES = 512 << 10
#: the most row blocks in a panel (the largest divisor of the row blocks up to this)
PANEL_ROW_BLOCKS = 16


def _row_panel(sch, main, reduction, outer, channels: int) -> tuple[int, int] | None:
    """(row blocks per panel, reduction block) for a dense layer whose weights are over
    ``PANEL_WEIGHT_BYTES`` and not streamed, where both split (into at least 2 row blocks
    and 2 reduction blocks), else None."""
    reads = sch.get(main).reads
    if len(reduction) != 1 or not outer or len(reads) < 2 or PANEL_ROW_BLOCKS < 2:
        return None
    nbytes = _buffer_bytes(reads[1].source)
    depth, row_blocks = loop_extent(sch, reduction[0]), loop_extent(sch, outer[-1])
    if nbytes <= PANEL_WEIGHT_BYTES or depth is None or row_blocks is None:
        return None
    k_block = _largest_divisor_at_most(depth, max(1, PANEL_K_BLOCK_BYTES // (channels * 4)))
    rows_per_panel = _largest_divisor_at_most(row_blocks, PANEL_ROW_BLOCKS)
    if not 1 < k_block < depth or rows_per_panel < 2:
        return None
    return rows_per_panel, k_block


def _row_stride(sch, block) -> int | None:
    """The step along a convolution's input row between neighbouring outputs (its stride):
    the coefficient of the output row's index (the spatial axis before the channels) in the
    block's first read, or None where that index is not linear in it.

    Example (an output column ``v_w`` read at ``v_w * 2 + v_kw``): 2."""
    node = sch.get(block)
    spatial = [iv.var for iv in node.iter_vars if iv.iter_type == tirx.IterVar.DataPar]
    if len(spatial) < 2 or not node.reads:
        return None
    for axis in node.reads[0].region:  # the input axis the output row indexes
        coefficients = detect_linear_equation(axis.min, [spatial[-2]])
        if len(coefficients) != 2 or not isinstance(coefficients[0], tirx.IntImm):
            return None
        if int(coefficients[0]) != 0:
            return int(coefficients[0])
    return None


#: A kernel with fewer register blocks of output rows than this runs its channel tiles in
#: parallel with them: a 7x7 map's 7 rows on 2 threads left one thread idle for an eighth of
#: the kernel (EfficientNet-B0's 1x1 convolutions at 7x7: the model 0.96-0.98x the time, 2
#: threads, in two interleaved runs against the kernel's rows alone).
MIN_PARALLEL_ROW_BLOCKS = 8


def _few_row_blocks(sch, outer) -> bool:
    """Whether the loops ``outer`` (a tile's loops outside its channels) run fewer than
    ``MIN_PARALLEL_ROW_BLOCKS`` iterations in all."""
    extents = [loop_extent(sch, loop) for loop in outer]
    return None not in extents and math.prod(extents) < MIN_PARALLEL_ROW_BLOCKS


def _streams_weights(sch, block) -> bool:
    """Whether the block's second operand (a convolution's or dense layer's weights) is over
    ``WEIGHT_STREAM_BYTES`` and larger than its first (the activations): then the channel
    tiles go outermost (``HostReductionRule``)."""
    reads = sch.get(block).reads
    if len(reads) < 2:
        return False
    weights, data = _buffer_bytes(reads[1].source), _buffer_bytes(reads[0].source)
    return weights > WEIGHT_STREAM_BYTES and weights > data


#: the output elements from which an element-wise kernel (``HostInjectiveRule``) runs in
#: parallel, over its rows (all axes but the last), when it has at least ``MIN_PARALLEL_ROWS``
PARALLEL_ELEMENTS = 1 << 15
MIN_PARALLEL_ROWS = 4


def _rounded_variables(block) -> set | None:
    """The names of the block's variables that a float value converted to an integer depends
    on (a resize's output coordinates: scaled, then rounded to input indices), an empty set
    where every index and condition is computed in integers; None where the block is not one
    store or has an expression node this does not know.

    Example (TVM's NCHW bilinear resize: the rows and columns are rounded, the channel not)::

        >>> from tvm import te, topi
        >>> image = te.placeholder((1, 21, 16, 16), name="image")
        >>> resized = topi.image.resize2d(image, [0.0] * 4, (256, 256), method="linear")
        >>> sch = s_tir.Schedule(te.create_prim_func([image, resized]))
        >>> block = sch.get(sch.get_child_blocks(sch.get_sblock("root"))[0])
        >>> [iv.var.name for iv in block.iter_vars], sorted(_rounded_variables(block))
        (['v_i0', 'v_i1', 'v_i2', 'v_i3'], ['v_i2', 'v_i3'])
    """
    body = block.body
    if not isinstance(body, tirx.BufferStore):
        return None
    rounded: set = set()

    def floating(expr) -> bool:
        return str(expr.ty) != "bool" and tvm.DataType(str(expr.ty)).type_code not in (
            tvm.DataTypeCode.INT, tvm.DataTypeCode.UINT)

    def visit(expr, converted: bool) -> bool:
        """Walks ``expr``, recording variables under a float-to-integer conversion;
        False on an unknown node."""
        if isinstance(expr, tirx.Var):
            if converted:
                rounded.add(expr.name)
            return True
        if isinstance(expr, (tirx.IntImm, tirx.FloatImm)):
            return True
        if isinstance(expr, tvm.ir.TensorLoad):
            return all(visit(index, converted) for index in expr.indices)
        if isinstance(expr, tirx.Cast):
            return visit(expr.value, converted or (
                not floating(expr) and floating(expr.value)))
        if isinstance(expr, tvm.ir.Call):
            return all(visit(arg, converted) for arg in expr.args)
        if isinstance(expr, tirx.Select):
            return all(visit(e, converted)
                       for e in (expr.condition, expr.true_value, expr.false_value))
        operands = [getattr(expr, name, None) for name in ("a", "b")]
        if any(operand is None for operand in operands):
            return False  # not a binary operator: an unknown node
        return all(visit(operand, converted) for operand in operands)

    known = visit(body.value, False) and all(visit(index, False) for index in body.indices)
    return rounded if known else None


class HostInjectiveRule(HostRule):
    """Element-wise and other injective PrimFuncs: every intermediate is inlined into its
    consumer, so none is materialised (a full-size temporary per fused element-wise op is what
    TVM's default lowering keeps). The loops are left to LLVM: parallelising them changed the
    rounding of index arithmetic in some kernels (ONNX node test
    ``test_resize_upsample_sizes_nearest``); those of at least ``PARALLEL_ELEMENTS`` elements
    that convert no float to an index (``_rounded_variables`` finds none: transposes, a
    concatenation's epilogue where ``concat.concat_copies`` leaves it) split their rows over the
    threads; those that do (resizes) run an outer loop no rounded coordinate depends on in
    parallel, unfused (a resize to an NCHW output, over its channels)."""

    def schedule(self, func: tirx.PrimFunc, target: Target):
        sch = s_tir.Schedule(func)
        try:
            blocks = sch.get_child_blocks(sch.get_sblock("root"))
            if not blocks or any(int(iv.iter_type) != 0 for b in blocks
                                 for iv in sch.get(b).iter_vars):
                return None
            for block in blocks[:-1]:
                sch.compute_inline(block)
            parallel = self._parallel_rows(sch, blocks[-1])
        except RuntimeError as err:  # hand-written kernels without blocks, opaque accesses
            log.debug("injective schedule skipped: %s", err)
            return None
        return sch if len(blocks) > 1 or parallel else None

    @staticmethod
    def _parallel_rows(sch, block) -> bool:
        loops = sch.get_loops(block)
        extents = [loop_extent(sch, loop) for loop in loops]
        if len(loops) < 2 or None in extents or math.prod(extents) < PARALLEL_ELEMENTS \
                or math.prod(extents[:-1]) < MIN_PARALLEL_ROWS:
            return False
        node = sch.get(block)
        rounded = _rounded_variables(node)
        if rounded is None:
            return False
        if not rounded:
            sch.parallel(sch.fuse(*loops[:-1]))
            return True
        # rounded coordinates: only an outer loop none of them depends on runs in parallel,
        # as it is (not fused), so every coordinate is computed by the same code as before
        # (a bilinear resize to an NCHW output: its channels; DeepLabV3's 21 x 256 x 256
        # output 3.3 -> 1.8 ms on 2 threads; DeepLabV3-MobileNetV3 1.04x -> 0.97x and
        # LR-ASPP 1.09x -> 0.97x onnxruntime, interleaved A/B)
        if not _bound_to_loops(sch, loops):
            return False
        for loop, iter_var, extent in zip(loops[:-1], node.iter_vars, extents):
            if iter_var.var.name in rounded:
                return False
            if extent >= MIN_PARALLEL_ROWS:
                sch.parallel(loop)
                return True
            if extent != 1:
                return False
        return False


def _bound_to_loops(sch, loops) -> bool:
    """Whether the block directly inside ``loops`` binds its iteration variables to the loop
    variables, one each and in order (its ``iter_vars[i]`` is ``loops[i]``)."""
    realize = sch.get(loops[-1]).body
    return isinstance(realize, s_tir.stmt.SBlockRealize) and \
        len(realize.iter_values) == len(loops) and \
        all(value.same_as(sch.get(loop).loop_var)
            for value, loop in zip(realize.iter_values, loops))


#: the block name of a Winograd convolution's output transform (``winograd.output_transform``)
WINOGRAD_OUTPUT_BLOCK = "winograd_output"


class HostWinogradOutputRule(HostRule):
    """The output transform of a Winograd convolution (``winograd``) with the element-wise
    epilogue ``FuseOps`` put after it (bias, activation, residual add): every block is inlined
    into the last, which runs one 2x2 block of outputs at a time (its four outputs unrolled, so
    the transform's row selections fold to constants), parallel over rows of blocks, the
    channels in vectors."""

    def schedule(self, func: tirx.PrimFunc, target: Target):
        sch = s_tir.Schedule(func)
        try:
            blocks = sch.get_child_blocks(sch.get_sblock("root"))
            if not any(sch.get(b).name_hint.startswith(WINOGRAD_OUTPUT_BLOCK) for b in blocks):
                return None
            for block in blocks[:-1]:
                sch.compute_inline(block)
            loops = sch.get_loops(blocks[-1])
            extents = [loop_extent(sch, loop) for loop in loops]
            if len(loops) != 4 or None in extents:
                return None
            batch, rows, columns, channels = loops
            vector = channel_tile(extents[3], simd_lanes(target))[0]
            row_outer, row_inner = sch.split(rows, [None, 2])
            column_outer, column_inner = sch.split(columns, [None, 2])
            channel_outer, channel_inner = sch.split(channels, [None, vector])
            sch.reorder(batch, row_outer, column_outer, channel_outer, row_inner, column_inner,
                        channel_inner)
            sch.parallel(sch.fuse(batch, row_outer))
            sch.unroll(row_inner)
            sch.unroll(column_inner)
            sch.vectorize(channel_inner)
        except RuntimeError as err:
            log.debug("winograd output schedule skipped: %s", err)
            return None
        return sch


def host_schedule_pass(*first_rules: dlight.ScheduleRule,
                       inline_padding: bool | int = False) -> tvm.transform.Pass:
    """The dlight pass applying ``first_rules``, the host rules, then TVM's own CPU rules.

    The first rule that schedules a PrimFunc wins (``first_rules``: e.g. depth-first tiling of
    macro-kernels, which must see them before the single-reduction rule declines them).
    """
    return dlight.ApplyDefaultSchedule(*first_rules, HostLaneSoftmaxRule(),
                                       HostReductionRule(inline_padding),
                                       HostRowReductionRule(), HostWinogradOutputRule(),
                                       HostInjectiveRule(),
                                       Declining(ReductionOverRowsOnly(dlight.cpu.Reduction())),
                                       Declining(dlight.cpu.GEMV()))


class Declining(CPUScheduleRule):
    """One of TVM's dlight rules, declining (``None``: the next rule, or TVM's default loops)
    where its analysis fails instead of failing the build: TVM 0.27's GEMV rule asserts on a
    reduction it normalises to no reduction loop (MobileViT's attention, after folding)."""

    def __init__(self, rule: dlight.ScheduleRule):
        self.rule = rule

    def apply(self, func, target: Target, tunable: bool):
        try:
            return self.rule.apply(func, target, tunable)
        except (AssertionError, RuntimeError, ValueError, IndexError) as err:
            log.debug("%s declined: %s: %s", type(self.rule).__name__, type(err).__name__, err)
            return None
