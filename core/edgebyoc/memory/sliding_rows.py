"""The row schedule of a sliding (line-buffer) macro-kernel (``sliding.py``): its layers as
read from a fused chain function (``layers_of``), the rows each layer computes in each step
of a band (``row_ends``), the ring rows each intermediate map needs (``window_rows``), and how
a convolution's output channels are blocked for its register tiles (``block_of``,
``blocked_weight``). How the threads share the steps, and what that costs, is
``sliding_modes.py``; the kernel's code, ``sliding.py``."""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np
import tvm
from tvm import relax

from ..schedules import max_row_block

#: (float32 SIMD lanes, vector registers) of AVX-512, the default target of ``sliding_source``
AVX512 = (16, 32)


@dataclass(frozen=True)
class Layer:
    """One convolution of a sliding macro-kernel, with the epilogue applied when it is read."""

    weight: int  # parameter index of the weight
    bias: int | None  # parameter index of the (1, K, 1, 1) bias
    residual: int | None  # parameter index of a residual operand (1, K, H, W), added after bias
    activation: tuple | None  # ("relu",) or ("clip", low, high)
    strides: tuple[int, int]
    padding: tuple[int, int, int, int]
    dilation: tuple[int, int]
    groups: int
    in_shape: tuple[int, ...]
    out_shape: tuple[int, ...]
    weight_shape: tuple[int, ...]


def shape_of(ty) -> tuple[int, ...]:
    """The static shape of a tensor type."""
    return tuple(int(d) for d in ty.shape.values)


def layers_of(func: relax.Function) -> list[Layer] | None:
    """The convolutions of a fused chain function, or ``None`` if it holds something else
    (a non-NCHW convolution, an add of a computed tensor). A residual add reads a tensor
    computed before the chain: a parameter of the function, which the kernel reads row by row
    as it stores the layer's rows."""
    def param_index(expr) -> int | None:
        for i, param in enumerate(func.params):
            if expr.same_as(param):
                return i
        return None

    layers: list[dict] = []
    current = func.params[0]
    for block in func.body.blocks:
        for binding in block.bindings:
            call = binding.value
            if not isinstance(call, relax.Call) or not isinstance(call.op, tvm.ir.Op):
                return None
            name, args = call.op.name, list(call.args)
            if not args[0].same_as(current) and not (name == "relax.add"
                                                     and args[1].same_as(current)):
                return None
            if name == "relax.nn.conv2d":
                attrs = call.attrs
                if str(attrs.data_layout) != "NCHW" or str(attrs.kernel_layout) != "OIHW" \
                        or param_index(args[1]) is None:
                    return None
                layers.append(dict(weight=param_index(args[1]), bias=None, residual=None,
                                   activation=None,
                                   strides=tuple(int(s) for s in attrs.strides),
                                   padding=tuple(int(p) for p in attrs.padding),
                                   dilation=tuple(int(d) for d in attrs.dilation),
                                   groups=int(attrs.groups), in_shape=shape_of(args[0].ty),
                                   out_shape=shape_of(call.ty),
                                   weight_shape=shape_of(args[1].ty)))
            elif name == "relax.add" and layers and layers[-1]["activation"] is None \
                    and layers[-1]["residual"] is None:
                other = args[1] if args[0].same_as(current) else args[0]
                if param_index(other) is None:
                    return None
                if shape_of(other.ty) == layers[-1]["out_shape"]:
                    layers[-1]["residual"] = param_index(other)
                elif shape_of(other.ty) == (1, layers[-1]["out_shape"][1], 1, 1) \
                        and layers[-1]["bias"] is None:
                    layers[-1]["bias"] = param_index(other)
                else:
                    return None
            elif name == "relax.nn.relu" and layers and layers[-1]["activation"] is None:
                layers[-1]["activation"] = ("relu",)
            elif name == "relax.clip" and layers and layers[-1]["activation"] is None:
                layers[-1]["activation"] = ("clip", float(args[1].value), float(args[2].value))
            else:
                return None
            current = binding.var
    if len(layers) < 2 or not func.body.body.same_as(current):
        return None
    return [Layer(**layer) for layer in layers]


def _geometry(layer) -> tuple[int, int, int, int, int, int]:
    """(stride, padding top, dilation, filter rows, output rows, input rows) along the rows."""
    return (layer.strides[0], layer.padding[0], layer.dilation[0], layer.weight_shape[2],
            layer.out_shape[2], layer.in_shape[2])


def row_ends(layers, band: int = 1) -> list[list[int]]:
    """Rows of each layer computed after each step: every layer computes at most ``band``
    rows per step, as soon as its inputs allow (a bounded band keeps every window at its
    filter's height plus the band, also at the bottom border where all inputs are ready at
    once); steps run until the last layer is complete."""
    return [list(step) for step in _row_ends(_geometries(layers), band)]


def window_rows(layers, band: int = 1) -> list[int]:
    """Ring rows each intermediate layer needs (the last layer writes the output directly):
    in every step the rows its consumer reads, from the top of the consumer's first new row
    up to the producer's last computed row."""
    return list(_window_rows(_geometries(layers), band))


def _geometries(layers) -> tuple:
    return tuple(_geometry(layer) for layer in layers)


def _next_end(geometry, produced: int, producer_rows: int) -> int:
    """Rows of a layer of ``geometry`` computable once its producer (``producer_rows`` rows in
    all) has ``produced`` rows (all of them when the producer is complete: the rows below read
    zero padding)."""
    s, p, d, k, rows, _ = geometry
    if produced >= producer_rows:
        return rows
    return max(0, min(rows, (produced - 1 + p - (k - 1) * d) // s + 1))


@functools.lru_cache(maxsize=4096)
def _row_ends(geometries: tuple, band: int = 1) -> tuple[tuple[int, ...], ...]:
    # the simulation depends on the row geometry only; the planner asks for the same chains
    # under every memory limit it tries, hence the cache
    last_rows = geometries[-1][4]
    ends, row = [], [0] * len(geometries)
    while row[-1] < last_rows:
        new = [min(geometries[0][4], row[0] + band)]
        for i in range(1, len(geometries)):
            new.append(min(row[i] + band,
                           _next_end(geometries[i], new[-1], geometries[i - 1][4])))
        ends.append(tuple(new))
        row = new
    return tuple(ends)


@functools.lru_cache(maxsize=4096)
def _window_rows(geometries: tuple, band: int = 1) -> tuple[int, ...]:
    windows = [1] * (len(geometries) - 1)
    before = (0,) * len(geometries)
    for after in _row_ends(geometries, band):
        for i in range(len(geometries) - 1):
            if after[i + 1] > before[i + 1]:
                s, p = geometries[i + 1][:2]
                first_needed = max(0, before[i + 1] * s - p)
                windows[i] = max(windows[i], after[i] - min(first_needed, after[i]))
        before = after
    return tuple(windows)


def row_table(layers, band: int = 1) -> np.ndarray:
    """The row schedule (the first columns of ``schedule_table``): row ``s`` holds the
    rows of each layer computed before step ``s`` (``row_ends``; zeros before the first)."""
    return np.array([[0] * len(layers)] + row_ends(layers, band), dtype="int32")


#: A 1x1 convolution whose weights for one channel block (``block_of``) exceed this many bytes
#: sums its input channels in chunks (``channel_chunk``) over a row's register tiles.
CHANNEL_CHUNK_MIN_BYTES = 32 * 1024

#: The most bytes of weights a chunk of input channels takes for one channel block: a
#: chunk stays in L1 while the row's register tiles all read it.
CHANNEL_CHUNK_BYTES = 16 * 1024


def channel_chunk(layer: Layer, block: int, itemsize: int = 4) -> int:
    """Input channels a blocked 1x1 convolution adds up over all of a row's register tiles
    before it reads the next ones (0: each tile reads all of them).

    A tile reads its channel block's weights of every input channel; with more than
    ``CHANNEL_CHUNK_MIN_BYTES`` of them the next tile of the row reads them again from
    beyond L1, and at one row a step from beyond L2 where a kernel's weights do not fit it.
    In chunks of at most ``CHANNEL_CHUNK_BYTES`` of weights (the largest divisor of the
    input channels from 32 up), a chunk serves every tile of the row from L1 while the
    partial sums wait in a row buffer (``sliding._chunked_columns``). Measured (Intel Xeon,
    AVX-512, 2 threads, forced depth-first in bands of one row, three runs): four 1x1
    convolutions of 448 channels at 28x28 1.13-1.18x the untiled time with every channel per
    tile, 1.08-1.11x in chunks of 112; MobileOne-S4 224x224's 22-convolution kernel 1.33-1.36x
    its untiled convolutions' time, 1.30x in chunks (same outputs to the bit); at 500x500
    1.16-1.17x either way.

    Example: 448 input channels by blocks of 32 (57 kB) take chunks of 112 (14 kB); 192 (24
    kB) are read whole::

        >>> wide = Layer(1, None, None, None, (1, 1), (0, 0, 0, 0), (1, 1), 1,
        ...              (1, 448, 28, 28), (1, 448, 28, 28), (448, 448, 1, 1))
        >>> narrow = Layer(1, None, None, None, (1, 1), (0, 0, 0, 0), (1, 1), 1,
        ...                (1, 192, 28, 28), (1, 448, 28, 28), (448, 192, 1, 1))
        >>> channel_chunk(wide, 32), channel_chunk(narrow, 32)
        (112, 0)
    """
    channels = layer.weight_shape[1]
    if layer.groups != 1 or tuple(layer.weight_shape[2:]) != (1, 1) or \
            channels * block * itemsize <= CHANNEL_CHUNK_MIN_BYTES:
        return 0
    most = CHANNEL_CHUNK_BYTES // (block * itemsize)
    return max((size for size in range(32, min(most, channels - 1) + 1)
                if channels % size == 0), default=0)


def accumulator_bytes(layers, itemsize: int = 4) -> tuple[int, int]:
    """(the blocked accumulator, the widest of the other grouped convolutions' rows). A
    blocked convolution's register tiles store straight into its ring or NHWC output; only a
    last layer writing an NCHW output gathers its row first (``block_of`` channels wide,
    counted whatever the layout and at AVX-512's block, the widest: the planner runs before
    layouts and the target's tiles are chosen). TVM's storage
    rewriting shares the grouped rows, and may merge the two: both are counted, an upper
    bound. The blocked accumulator counts also the widest row of partial sums of a 1x1
    convolution summing its input channels in chunks (``channel_chunk``)."""
    last = layers[-1]
    blocked = last.out_shape[3] * block_of(last) if is_blocked(last) else 0
    blocked += max((layer.out_shape[3] * block_of(layer) for layer in layers
                    if is_blocked(layer) and channel_chunk(layer, block_of(layer), itemsize)),
                   default=0)
    grouped = max((layer.out_shape[3] for layer in layers if not is_blocked(layer)),
                  default=0)
    return blocked * itemsize, grouped * itemsize


#: Output channels a regular (ungrouped) convolution computes together: its weights are
#: re-laid out as (K / BLOCK, C, R, S, BLOCK) so one source value multiplies a vector of BLOCK
#: weights (one AVX-512 register of float32).
BLOCK = 16


def block_of(layer: Layer, lanes: int = AVX512[0]) -> int:
    """Output channels a blocked convolution's register tile holds, for a target of ``lanes``
    float32 SIMD lanes: two vectors when its channels come in an even number of such pairs
    (the threads share them evenly), else at most ``BLOCK``; a depthwise one reads its source
    channels as a vector too, so its block divides its channels (no padded channel is read).
    Two vectors are 32 channels on AVX-512 (``tile_columns``: 7 columns, 14 of its 32
    registers) and 16 on AVX2, where 32 channels would leave room for only 2 columns (8
    accumulators; MobileOne-S4 at 500x500 forced depth-first ran 1.49x the untiled time with
    them, 1.07x with 16 channels in tiles of 5 columns, AMD EPYC Zen 2).

    Example (AVX-512, then AVX2)::

        >>> wide = Layer(1, None, None, None, (1, 1), (0, 0, 0, 0), (1, 1), 1,
        ...              (1, 448, 9, 9), (1, 448, 9, 9), (448, 448, 1, 1))
        >>> block_of(wide, 16), block_of(wide, 8)
        (32, 16)
    """
    k, pair = layer.out_shape[1], 2 * lanes
    if k % (2 * pair) == 0:
        return pair
    if is_depthwise(layer):
        return next(b for b in (BLOCK, 8, 4, 2, 1) if k % b == 0)
    return min(BLOCK, pair)


def is_depthwise(layer: Layer) -> bool:
    """One input channel per output channel (groups = input channels = output channels)."""
    return layer.groups > 1 and layer.groups == layer.in_shape[1] == layer.out_shape[1]


def is_blocked(layer: Layer) -> bool:
    """Whether the layer computes ``block_of`` channels per iteration from blocked weights
    (``blocked_weight``): regular and depthwise convolutions (other grouped ones a channel
    per iteration)."""
    return layer.groups == 1 or is_depthwise(layer)


def blocked_weight(weight, block: int = BLOCK):
    """``weight`` (K, C, R, S) as (ceil(K / block), C, R, S, block), zero-padded channels."""
    k = weight.shape[0]
    groups = -(-k // block)
    padded = np.zeros((groups * block,) + weight.shape[1:], weight.dtype)
    padded[:k] = weight
    return np.ascontiguousarray(
        padded.reshape((groups, block) + weight.shape[1:]).transpose(0, 2, 3, 4, 1))


#: Vector registers a sliding kernel's register tile leaves free (``tile_columns``). In a
#: macro-kernel of many layers LLVM keeps loop-invariant vectors live across the tile loops;
#: AVX2 tiles of 6 columns of 16 channels (15 of its 16 registers) then spilled: MobileOne-S4
#: 224x224's 22-convolution kernel took 30 ms with them, 20 ms with 5 columns and 22.8 ms with
#: 2 columns of 32 channels (AMD EPYC Zen 2, 2 threads, interleaved).
SPARE_REGISTERS = 2

#: TVM 0.27 puts a kernel's "global" buffer of constant size on the stack (where LLVM keeps a
#: register tile in registers) only under this many bytes (``kMaxStackAlloca``); a larger one
#: it takes from its workspace pool, a call in and out per tile
STACK_BUFFER_BYTES = 1024


def tile_columns(block: int, lanes: int, registers: int) -> int:
    """Output columns a blocked convolution's register tile holds: as many as keep its
    accumulators (``block / lanes`` vectors a column), its weight vectors and a source
    broadcast in the ``registers`` vector registers less ``SPARE_REGISTERS``, up to 8
    (``schedules.max_row_block``), and the float32 tile under ``STACK_BUFFER_BYTES``.
    AVX-512 keeps 8 columns of 16 channels and 7 of 32 (8 would be exactly 1 kB); AVX2 (16
    registers of 8 lanes) 5 columns of 16 channels (10 accumulators: Zen 2's two FMA pipes
    of 5 cycles' latency want 10 independent chains), 2 of 32.

    Example::

        >>> tile_columns(16, 16, 32), tile_columns(32, 16, 32)
        (8, 7)
        >>> tile_columns(16, 8, 16), tile_columns(32, 8, 16)
        (5, 2)
    """
    columns = max_row_block(registers - SPARE_REGISTERS, max(1, block // lanes))
    return max(1, min(columns, (STACK_BUFFER_BYTES - 1) // (block * 4)))
