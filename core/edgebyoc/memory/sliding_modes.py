"""How a sliding macro-kernel (``sliding.py``) uses the threads, and what its rings hold in
each mode: the execution modes' predicted times in multiply-adds of one thread
(``channels_time``, ``pipelined_time``; ``execution_mode`` picks the fastest), the stages of a
pipelined kernel (``pipeline_stages``), the layers a channel-split kernel splits by columns
(``column_split``), and the rings and step table each mode needs (``ring_windows``,
``schedule_table``, ``local_layers``, ``scratch_bytes``)."""

from __future__ import annotations

import math

import numpy as np

from .sliding_rows import AVX512, accumulator_bytes, block_of, is_blocked, is_depthwise, \
    row_table, tile_columns, window_rows

def schedule_table(layers, band: int = 1, local: frozenset[int] = frozenset()) -> np.ndarray:
    """The table the macro-kernel reads (its ``rows`` parameter): ``row_table``, and for a
    channel-split kernel (``execution_mode``) as many columns more, where row ``s`` column
    ``L + i`` counts the barriers passed once layer ``i``'s rows of step ``s`` are done (a
    barrier follows each layer that has rows in a step: the same count on every thread), or
    is 0 where layer ``i`` needs none: a layer of ``local`` (``local_layers``) when it and
    the next compute one row each in the step."""
    table = row_table(layers, band)
    if execution_mode(layers, band) != "channels":
        return table
    new_rows = table[1:] - table[:-1]
    has_rows = (new_rows > 0).astype("int32")
    for i in local:
        has_rows[(new_rows[:, i] == 1) & (new_rows[:, i + 1] == 1), i] = 0
    passed = np.cumsum(has_rows.reshape(-1)).reshape(has_rows.shape).astype("int32")
    passed *= has_rows
    return np.concatenate([table, np.vstack([passed, np.zeros_like(passed[:1])])], axis=1)


def local_layers(layers, blocked: dict[int, int], band: int = 1) -> frozenset[int]:
    """The layers ``i`` of a channel-split kernel (``execution_mode``) whose next layer is
    depthwise on the same channel blocks (``blocked``: weight parameter -> block), neither
    split by columns (``column_split``): in a step where each computes one row, a task's
    iterations of both are the same channel blocks (a parallel loop of equal extent gives
    task ``t`` the same range, whatever the number of tasks), and a depthwise block reads
    only its own channels, so the kernel passes no barrier between them
    (``schedule_table``). MobileOne-S4 224x224's 22-convolution kernel: 8 such pairs (its
    1x1 layers of 448 channels and the depthwise ones after them), 798 barriers a run without,
    595 with."""
    if execution_mode(layers, band) != "channels":
        return frozenset()
    split = column_split(layers)
    return frozenset(
        i for i, (layer, after) in enumerate(zip(layers, layers[1:]))
        if is_depthwise(after) and not split[i] and not split[i + 1]
        and layer.out_shape[1] == after.out_shape[1]
        and blocked.get(layer.weight) is not None
        and blocked.get(layer.weight) == blocked.get(after.weight))


#: Bytes of a parallel macro-kernel's barrier state (``sliding.sliding_source``'s ``sync``:
#: two int32 counters).
SYNC_BYTES = 8


def scratch_bytes(layers, itemsize: int = 4, band: int = 1) -> int:
    """Bytes of the ring buffers, all alive while the macro-kernel runs, of the accumulator
    rows (``accumulator_bytes``) and, in a parallel mode, of its barrier state
    (``SYNC_BYTES``). Not the register tiles: a stack buffer under
    ``sliding_rows.STACK_BUFFER_BYTES`` that LLVM keeps in registers."""
    sync = SYNC_BYTES if execution_mode(layers, band) != "serial" else 0
    return ring_bytes(layers, itemsize, band) + sum(accumulator_bytes(layers, itemsize)) + sync


def ring_bytes(layers, itemsize: int = 4, band: int = 1) -> int:
    """Bytes of the ring buffers of the intermediate layers (``ring_windows``)."""
    return sum(layer.out_shape[1] * window * layer.out_shape[3] * itemsize
               for layer, window in zip(layers, ring_windows(layers, band)))


#: Threads a parallel macro-kernel is written for: a pipelined one runs this many stages of
#: its layers, each one step behind the one before; a channel-split one shares each layer's
#: rows by channel blocks among them.
PIPELINE_STAGES = 2


def _macs(layer) -> int:
    return math.prod(layer.out_shape) * math.prod(layer.weight_shape[1:])


#: A barrier's cost counted in multiply-adds of one thread. The spin barrier
#: (``spin_barrier``) takes about 0.1 us when the threads arrive together; a step of a
#: macro-kernel costs more per barrier: its threads do not arrive together, and its parallel
#: loop starts again. Measured (AVX-512 Intel Xeon, 2 threads, 3,000 interleaved rounds):
#: ResNet-8's 32x32 kernel split by columns, in bands of 1, 2, 4 and 8 rows (64, 32, 16 and
#: 8 barriers), ran 0.29-0.35 us faster per barrier saved: about 20,000 multiply-adds of one
#: thread at the 65 G a second its untiled convolutions run per core.
BARRIER_MACS = 1 << 14

#: The largest predicted time of a parallel kernel, as a fraction of the serial one, for
#: which ``execution_mode`` runs it in parallel.
PARALLEL_MAX_TIME = 0.8


def execution_mode(layers, band: int = 1) -> str:
    """How a sliding macro-kernel uses the threads, whichever is predicted fastest:
    ``"channels"`` (each layer's rows of a step split over the threads by channel blocks, a
    barrier after each layer: ``channels_time``), ``"pipeline"`` (``pipeline_stages``, one
    barrier per step: ``pipelined_time``), or ``"serial"`` (the calling thread) unless a
    parallel mode predicts at most ``PARALLEL_MAX_TIME`` of the serial time."""
    return _mode_and_time(layers, band)[0]


def predicted_time(layers, band: int = 1) -> int:
    """The predicted time of a sliding macro-kernel in bands of ``band`` rows, in
    multiply-adds of one thread: that of its ``execution_mode`` (the serial time is its
    multiply-adds).

    Example: ResNet-8's first two 3x3 convolutions (16 channels, 32x32), 4.7 M multiply-adds,
    0.65 of them in bands of one row (pipelined: 33 barriers, a thread idle in the first and
    last step), 0.53 in bands of eight (split by columns: 8 barriers)::

        >>> from edgebyoc.memory.sliding_rows import Layer
        >>> layer = Layer(1, None, None, None, (1, 1), (1, 1, 1, 1), (1, 1), 1,
        ...               (1, 16, 32, 32), (1, 16, 32, 32), (16, 16, 3, 3))
        >>> [predicted_time([layer, layer], band) for band in (1, 8)]
        [3063808, 2506752]
    """
    return _mode_and_time(layers, band)[1]


#: ``_mode_and_time`` by the layers' geometry (``_geometry_key``) and band: the planner asks
#: for the same kernels under every limit it tries, and building a kernel asks for its source,
#: rings, step table and barrier, so callers need not hand the mode around (MobileOne-S4
#: 500x500 ``--dfs`` on an Intel Xeon: 912 asks, 412 kernels predicted in 0.62 s; about 0.7 s
#: of a 23-32 s compile saved).
_MODES: dict[tuple, tuple[str, int]] = {}
_MODES_LIMIT = 4096


def _geometry_key(layers) -> tuple:
    """What the time models read of each layer (a ``Layer`` or a planner's ``ConvUnit``)."""
    return tuple((tuple(layer.strides), tuple(layer.padding), tuple(layer.dilation),
                  layer.groups, tuple(layer.in_shape), tuple(layer.out_shape),
                  tuple(layer.weight_shape)) for layer in layers)


def _mode_and_time(layers, band: int) -> tuple[str, int]:
    key = (_geometry_key(layers), band)
    found = _MODES.get(key)  # one lookup: compiles in other threads may clear the cache
    if found is None:
        if len(_MODES) >= _MODES_LIMIT:
            _MODES.clear()
        found = _MODES[key] = _predicted_mode_and_time(layers, band)
    return found


def _predicted_mode_and_time(layers, band: int) -> tuple[str, int]:
    total = sum(_macs(layer) for layer in layers)
    times = {"channels": channels_time(layers, band)}
    if len(layers) >= PIPELINE_STAGES:
        times["pipeline"] = pipelined_time(layers, band)
    mode = min(times, key=times.get)
    return (mode, times[mode]) if times[mode] <= PARALLEL_MAX_TIME * total else \
        ("serial", total)


def _row_macs(layer) -> int:
    return _macs(layer) // max(layer.out_shape[0] * layer.out_shape[2], 1)


def _channel_units(layer) -> int:
    """The parallel iterations of one row of a layer: its channel blocks (``block_of``, at
    AVX-512's width whatever the target: the mode also sizes the rings and the step schedule
    the planner counts, which stay the same for every target), or its channels when it is not
    blocked."""
    return -(-layer.out_shape[1] // block_of(layer)) if is_blocked(layer) else \
        layer.out_shape[1]


def channels_time(layers, band: int = 1) -> int:
    """The channel-split kernel's predicted time in multiply-adds of one thread: per step and
    layer with new rows, the share of them the busiest thread takes, plus a barrier. A row
    is shared out in channel units (``_channel_units``), or for a layer split by columns
    (``column_split``) in two column halves."""
    table = row_table(layers, band).tolist()  # Python ints, as in pipelined_time
    shares = [_row_shares(layer, by_columns)
              for layer, by_columns in zip(layers, column_split(layers))]
    time = 0
    for step in range(len(table) - 1):
        for i, (per_row, unit_macs) in enumerate(shares):
            units = (table[step + 1][i] - table[step][i]) * per_row
            if units:
                time += -(-units // PIPELINE_STAGES) * unit_macs + BARRIER_MACS
    return time


def _row_shares(layer, by_columns: bool) -> tuple[int, int]:
    """(the parallel units a row of ``layer`` is shared out in, the multiply-adds of the
    largest): its channel units, or when split by columns its column parts
    (``column_parts``, in AVX-512's register tiles whatever the target, as ``_channel_units``:
    a row of one tile is one part, 8 columns of 32 channels are parts of 7 and 1)."""
    if by_columns:
        width = layer.out_shape[3]
        parts = column_parts(width, tile_columns(block_of(layer), *AVX512))
        return len(parts), _row_macs(layer) * max(hi - lo for lo, hi in parts) // width
    return _channel_units(layer), _row_macs(layer) // _channel_units(layer)


def pipelined_time(layers, band: int = 1) -> int:
    """The pipelined kernel's predicted time in multiply-adds of one thread: per iteration
    the busiest stage's rows (each stage a step behind the one before) plus a barrier. Rows
    of a deep layer come every few steps, so the stages' loads differ from step to step."""
    table = row_table(layers, band).tolist()  # Python ints: large kernels overflow int32
    per_row = [_row_macs(layer) for layer in layers]
    stages = pipeline_stages(layers)
    steps = len(table) - 1
    time = 0
    for it in range(steps + len(stages) - 1):
        loads = [sum((table[it - t + 1][i] - table[it - t][i]) * per_row[i] for i in members)
                 for t, members in enumerate(stages) if 0 <= it - t < steps]
        time += max(loads) + BARRIER_MACS
    return time


def pipeline_stages(layers) -> list[list[int]]:
    """The layers (indices) of each stage of a pipelined macro-kernel: ``PIPELINE_STAGES``
    contiguous runs, each ending at the layer that brings its running sum of multiply-adds
    closest to its share of the total."""
    macs = [_macs(layer) for layer in layers]
    total = sum(macs)
    stages, current, done = [], [], 0
    for i, value in enumerate(macs):
        current.append(i)
        done += value
        target = (len(stages) + 1) * total / PIPELINE_STAGES
        layers_left, stages_left = len(macs) - i - 1, PIPELINE_STAGES - len(stages) - 1
        if stages_left and layers_left and (
                layers_left == stages_left or
                abs(target - done) <= abs(done + macs[i + 1] - target)):
            stages.append(current)
            current = []
    return stages + [current]


def ring_windows(layers, band: int = 1) -> list[int]:
    """The rows of each intermediate layer's ring (``window_rows``); in a pipelined
    macro-kernel a stage's last layer keeps ``band`` more rows (the next stage reads them a
    step later, while it writes the next step's rows)."""
    windows = window_rows(layers, band)
    if execution_mode(layers, band) == "pipeline":
        for stage in pipeline_stages(layers)[:-1]:
            windows[stage[-1]] += band
    return windows


#: A layer of a channel-split kernel with at most this many bytes of weights splits its rows
#: over the threads by column halves (``column_split``); each core then reads all its
#: weights, which a heavier layer's channel blocks share out. On the Intel Xeon of
#: docs/performance.md, 2 threads, forced depth-first against untiled: 4 x 1x1 of 192
#: channels at 56x56 (147 KB each) 1.26x -> 1.08x; 4 x 1x1 of 448 channels at 28x28 (803 KB
#: each) 1.12x split by channels, 1.40x by columns; MobileOne-S4 224x224 1.18x -> 1.12x and
#: 500x500 1.09x -> 1.04x (both builds in one process, the order rotated).
COLUMN_SPLIT_MAX_WEIGHT_BYTES = 256 << 10


def column_split(layers) -> list[bool]:
    """Per layer of a channel-split kernel (``execution_mode`` ``"channels"``), whether its
    rows are split over the threads by column halves (``column_parts``) rather than by
    channel blocks: so that each core writes whole columns of every channel, which the next
    layer split by columns reads back on the same core (split by channel blocks, each core
    writes part of every row's channels and the next layer reads the whole row, half of it
    from the other core's cache). A layer with at most ``COLUMN_SPLIT_MAX_WEIGHT_BYTES`` of
    weights is split by columns; a depthwise layer after the first follows the layer before
    it (by channels, it reads only its own channels of its producer's rows); a heavier layer
    keeps the channel split, which shares out its weights.

    Example: a 1x1 of 448 channels (803 KB of weights), a depthwise layer, a 1x1 to 64::

        [False, False, True]
    """
    split: list[bool] = []
    for i, layer in enumerate(layers):
        if is_depthwise(layer) and i > 0:
            split.append(split[-1])
        else:
            split.append(math.prod(layer.weight_shape) * 4 <= COLUMN_SPLIT_MAX_WEIGHT_BYTES)
    return split


def column_parts(width: int, columns: int) -> list[tuple[int, int]]:
    """The two column ranges ``column_split`` shares a row of ``width`` out in: the first
    half rounded up to whole register tiles of ``columns`` (one range when that is the row).

    Example::

        >>> column_parts(28, 7), column_parts(56, 7), column_parts(5, 7)
        ([(0, 14), (14, 28)], [(0, 28), (28, 56)], [(0, 5)])
    """
    mid = -(-(-(-width // 2)) // columns) * columns
    return [(0, mid), (mid, width)] if mid < width else [(0, width)]
