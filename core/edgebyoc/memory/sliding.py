"""Sliding-window (line-buffer) macro-kernels: depth-first without re-computation (DFS paper,
section III-C: intermediates as sliding windows, modulo-indexed).

A macro-kernel streamed in bands of rows keeps, of every intermediate feature map, only the
rows its consumer still needs, in a ring buffer indexed ``row % window``, and computes each row
exactly once. In every step each layer computes at most ``band`` new rows (one unless the
planner widened the band, ``planner.widen_bands``), as soon as its producer's rows allow
(``row_ends``); steps run until the last layer is complete. ``window_rows`` is the most rows a
consumer reads in one step, from the top of its first new row to its producer's last computed
row, found by running the steps: a row is only overwritten once no later read needs it, which
is what makes the ring capacity sufficient. A band of R rows a step keeps every window at its
filter's height plus R - 1 (3 rows under a 3x3 with one row a step, 1 under a 1x1), at the
bottom border too. Border rows
and odd sizes use the same clipped bounds; padding is skipped (a row check per filter row, a
static column range per filter column), so no padded copy exists and the inner loops carry no
bounds checks.

TVM 0.27's ``rolling_buffer`` primitive cannot express this (it keeps the region ``compute_at``
gave each producer before its consumer rolled, so windows grow with depth, and no producer can
be placed after a rolled consumer), so ``sliding_primfunc`` writes the loop nest directly as a
TVMScript PrimFunc. The rings are channels-last (row, column, channel). Per step, per layer,
its new row: a regular or depthwise convolution computes ``block_of`` output channels per
iteration from weights re-laid out at compile time (``blocked_weight``), ``tile_columns``
output columns at a time in a register tile (one source value, or for a depthwise layer a vector of
source channels, times a vector of weights; a tile holding border columns lists each column's
in-image filter taps); the tile is stored straight into the ring (or an NHWC output) with the
epilogue (bias, residual operand, ReLU / clip), into an NCHW output through a row
accumulator. A 1x1 layer with more than ``CHANNEL_CHUNK_MIN_BYTES`` of weights a channel
block sums its input channels in chunks over the row's tiles (``sliding_rows.channel_chunk``),
its first tile prefetching the next chunk's weights (``_next_chunk_prefetch``). Other grouped
convolutions compute a row per channel. The step schedule is a read-only table
(``schedule_table``), and the threads are used in one of three ways, whichever
``execution_mode`` predicts fastest: one parallel launch in which each layer's rows are split
by channel blocks, or by column halves for a layer with few weights (``column_split``), with a
barrier after each layer; a pipeline of two stages of layers, each a
step behind the one before, one barrier per step; or the calling thread alone. The barriers
are a spin barrier linked into the host library (``spin_barrier``, about 0.1 us) rather than
TVM's, whose waiting thread yields the core at each check (0.2-0.5 us a barrier, more than a
small row's work). The PrimFunc takes the fused Relax function's parameters (data, then
each weight, bias and residual operand where the function has them; the data and residual
operands in NHWC, and the output too, when the model around the kernels is channels-last), the
row table and the output, and is marked scheduled, so the host's schedule rules leave it as it
is.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np
import tvm
from tvm import relax, tirx

from .sliding_modes import column_parts, column_split, execution_mode, local_layers, \
    pipeline_stages, ring_windows, schedule_table
from .sliding_rows import AVX512, Layer, block_of, channel_chunk, is_blocked, is_depthwise, \
    layers_of, row_ends, shape_of, tile_columns
from .spin_barrier import barrier, joined

def _column_range(layer: Layer, rx: int) -> tuple[int, int]:
    """Output columns [lo, hi) whose input column under filter column ``rx`` is inside the
    image (the others read zero padding and add nothing)."""
    sx, dx, pl = layer.strides[1], layer.dilation[1], layer.padding[1]
    width, width_in = layer.out_shape[3], layer.in_shape[3]
    offset = rx * dx - pl
    lo = max(0, -(offset // sx) if offset < 0 else 0)
    hi = min(width, (width_in - 1 - offset) // sx + 1) if width_in - 1 - offset >= 0 else 0
    return lo, max(lo, hi)


def sliding_source(layers: list[Layer], param_shapes: list[tuple[int, ...]],
                   dtype: str = "float32", blocked: dict[int, int] | None = None,
                   nhwc_params: frozenset[int] = frozenset(), nhwc_output: bool = False,
                   simd: tuple[int, int] = AVX512, band: int = 1,
                   local: frozenset[int] = frozenset()) -> str:
    """The TVMScript of the sliding macro-kernel (see the module docstring) in its execution
    mode (``execution_mode``), its register tiles sized for ``simd`` (the target's float32
    lanes and vector registers, ``tile_columns``), each layer computing up to ``band`` rows
    a step (``row_ends``). Layers whose weight parameter index is a
    key of ``blocked`` take their weight as ``blocked_weight`` lays it out in blocks of the
    value's channels (``block_of``) and compute them together. The parameters in
    ``nhwc_params`` (the data, residual operands) are read in NHWC, the output written in NHWC
    when ``nhwc_output`` (where the tensors around the kernel are channels-last). After the
    layers in ``local`` a barrier is passed only where the step table counts one
    (``local_layers``; the table must be ``schedule_table`` with the same ``local``)."""
    blocked = blocked or {}
    mode = execution_mode(layers, band)
    windows = ring_windows(layers, band)
    shapes = list(param_shapes)
    out_shape = tuple(layers[-1].out_shape)
    for index in nhwc_params:
        n, c, h, w = shapes[index]
        shapes[index] = (n, h, w, c)
    if nhwc_output:
        out_shape = (out_shape[0], out_shape[2], out_shape[3], out_shape[1])
    for layer in layers:
        if layer.weight in blocked:
            k, cg, fy, fx = shapes[layer.weight]
            block = blocked[layer.weight]
            shapes[layer.weight] = (-(-k // block), cg, fy, fx, block)
    steps = len(row_ends(layers, band))
    lines = ["@T.prim_func", "def main(" + ", ".join(
        [f"p{i}: T.Buffer({tuple(shape)}, \"{dtype}\")" for i, shape in enumerate(shapes)]
        + [f"rows: T.Buffer({schedule_table(layers, band).shape}, \"int32\")",
           f"out: T.Buffer({out_shape}, \"{dtype}\")"]) + "):",
        '    T.func_attr({"tirx.noalias": True, "tirx.is_scheduled": True})']
    for i, layer in enumerate(layers[:-1]):
        _, k, _, width = layer.out_shape
        lines.append(f"    ring{i} = T.decl_buffer(({windows[i]}, {width}, {k}), \"{dtype}\")")
    by_columns = column_split(layers) if mode == "channels" else [False] * len(layers)
    # a layer's rows of a step (generated at 12 spaces): its rows x blocks a parallel loop
    bodies = [[line[12:] for line in _layer_rows(layers, i, windows, blocked, nhwc_params,
                                                 nhwc_output, dtype, simd, by_columns[i])]
              for i in range(len(layers))]
    if mode == "pipeline":
        steps_code = _pipelined_steps(layers, bodies, steps)
    else:
        steps_code = joined() if mode == "channels" else []
        steps_code += [f"for step in range({steps}):"]
        for i, body in enumerate(bodies):
            steps_code.append(f"    if rows[step, {i}] < rows[step + 1, {i}]:")
            if mode == "channels":  # the layer's rows, then a barrier (its count: the table's,
                # 0 for none: local_layers)
                steps_code += _indented(body, 8)
                count = f"rows[step, {len(bodies) + i}]"
                steps_code += [f"        if {count} > 0:", "            " + barrier(count)] \
                    if i in local else ["        " + barrier(count)]
            else:
                steps_code += _indented(_on_one_thread(body), 8)
    if mode != "serial":
        lines += ['    sync = T.decl_buffer((2,), "int32")']
    lines.append(f"    for n in range({layers[0].in_shape[0]}):")
    if mode == "serial":
        lines += _indented(steps_code, 8)
    else:  # one parallel launch per image of the batch
        lines += ["        sync[0] = 0", "        sync[1] = 0"]
        lines.append('        with T.attr(0, "pragma_parallel_launch_point", 1):')
        lines += _indented(steps_code, 12)
    return "\n".join(lines) + "\n"


def _pipelined_steps(layers, bodies: list[list[str]], steps: int) -> list[str]:
    """The steps of a pipelined macro-kernel: in iteration ``it`` stage ``t`` (a thread, its
    layers ``pipeline_stages``) computes its layers' rows of step ``it - t``, on one thread
    each, then a barrier."""
    stages = pipeline_stages(layers)
    code = joined() + [f"for it in range({steps + len(stages) - 1}):",
                        f"    for stage in T.parallel({len(stages)}):"]
    for t, members in enumerate(stages):
        code += [f"        if stage == {t} and {t} <= it and it < {steps + t}:",
                 f"            step = T.meta_var(it - {t})"]
        for i in members:
            code.append(f"            if rows[step, {i}] < rows[step + 1, {i}]:")
            code += _indented(_on_one_thread(bodies[i]), 16)
    return code + ["    " + barrier("it + 1")]


def _indented(lines: list[str], spaces: int) -> list[str]:
    """``lines`` (statements starting at column 0) indented by ``spaces``."""
    return [" " * spaces + line for line in lines]


def _on_one_thread(body: list[str]) -> list[str]:
    """A layer's rows (``_layer_rows``) with its parallel loop run by the calling thread."""
    return [line.replace("T.parallel(", "range(") for line in body]


def _stores(target: str, value: str, block: int, k: int, into_output: bool):
    """(``store(first, end)``, ``store_tile(first column, columns)``) of a blocked layer:
    the statements storing ``value`` (of ``acc``) into ``target`` for columns ``first`` to
    ``end``, and those storing a register tile's columns. A ring (channels last) takes the
    tile's vectors as they are; the output (NCHW, ``into_output``) takes the tile through
    ``acc`` and then a channel's row at a time."""
    def store(lo: int, hi: int) -> list[str]:
        loops = (f"kb, xs in T.grid({block}, {hi - lo})" if into_output else
                 f"xs, kb in T.grid({hi - lo}, {block})")
        lines = [f"                for {loops}:",
                 f"                    x = T.meta_var(xs + {lo})"]
        if k % block:  # the padded channels of the last block are not stored
            return lines + [f"                    if ko * {block} + kb < {k}:",
                            f"                        {target} = {value}"]
        return lines + [f"                    {target} = {value}"]

    def store_tile(start: str, columns: int) -> list[str]:
        if into_output:
            return [f"                    for xi in T.unroll({columns}):",
                    f"                        for kb in T.vectorized({block}):",
                    f"                            acc[{start} + xi, kb] = tile[xi, kb]"]
        inner = [f"                        x = T.meta_var({start} + xi)"]
        tiled = value.replace("acc[x, kb]", "tile[xi, kb]")
        if k % block:
            inner += [f"                        for kb in range({block}):",
                      f"                            if ko * {block} + kb < {k}:",
                      f"                                {target} = {tiled}"]
        else:
            inner += [f"                        for kb in T.vectorized({block}):",
                      f"                            {target} = {tiled}"]
        return [f"                    for xi in T.unroll({columns}):"] + inner

    return store, store_tile


def _layer_rows(layers, i: int, windows: list[int], blocked: dict[int, int],
                nhwc_params: frozenset[int], nhwc_output: bool, dtype: str,
                simd: tuple[int, int], by_columns: bool = False) -> list[str]:
    """The statements computing layer ``i``'s rows of a step (``rows[step]`` to
    ``rows[step + 1]``) and storing them with the layer's epilogue (bias, residual operand,
    activation) into its ring, or the output for the last layer (parameters in
    ``nhwc_params`` read in NHWC, the output written in NHWC when ``nhwc_output``); a blocked
    layer's parallel loop split by column halves too when ``by_columns`` (``column_split``)."""
    layer = layers[i]
    zero = f"T.{dtype}(0)"
    k, width, height_in = layer.out_shape[1], layer.out_shape[3], layer.in_shape[2]
    _, cg, fy, fx = layer.weight_shape
    og = k // layer.groups
    sy, dy, pt = layer.strides[0], layer.dilation[0], layer.padding[0]
    is_blocked_here = layer.weight in blocked
    block = blocked[layer.weight] if is_blocked_here else 1
    channel_var = f"ko * {block} + kb" if is_blocked_here else "k"
    last = i == len(layers) - 1
    target = (f"ring{i}[r % {windows[i]}, x, {channel_var}]" if not last else
              f"out[n, r, x, {channel_var}]" if nhwc_output else
              f"out[n, {channel_var}, r, x]")
    channel = (channel_var if is_depthwise(layer) and is_blocked_here else
               f"k // {og} * {cg} + c" if layer.groups > 1 else "c")
    y = f"r * {sy} - {pt} + ry * {dy}"

    def source(column: str) -> str:
        if i == 0 and 0 in nhwc_params:
            return f"p0[n, {y}, {column}, {channel}]"
        return (f"p0[n, {channel}, {y}, {column}]" if i == 0 else
                f"ring{i - 1}[({y}) % {windows[i - 1]}, {column}, {channel}]")

    bias = f"p{layer.bias}[0, {channel_var}, 0, 0]"
    acc = "acc[x, kb]" if is_blocked_here else "acc[x]"
    value = acc if layer.bias is None else f"{acc} + {bias}"
    if layer.residual is not None:
        value = f"{value} + p{layer.residual}" + \
            (f"[n, r, x, {channel_var}]" if layer.residual in nhwc_params else
             f"[n, {channel_var}, r, x]")
    if layer.activation and layer.activation[0] == "relu":
        value = f"T.max({value}, {zero})"
    elif layer.activation:
        value = (f"T.min(T.max({value}, T.{dtype}({layer.activation[1]!r})), "
                 f"T.{dtype}({layer.activation[2]!r}))")
    # padding: rows outside the image are skipped once per filter row, columns by the
    # static column range of each filter column; no bounds check in the inner loop
    taps = [_Tap(rx, *_column_range(layer, rx), layer) for rx in range(fx)]
    taps = [tap for tap in taps if tap.hi > tap.lo]
    # the rows of the step times the channel blocks, shared by the threads
    new_rows = f"rows[step + 1, {i}] - rows[step, {i}]"
    body: list[str] = []
    if is_blocked_here:
        store, store_tile = _stores(target, value, block, k, last and not nhwc_output)
        body += _blocked_row(layer, taps, source, block, dtype, y, new_rows, i, store,
                             store_tile, last and not nhwc_output, tile_columns(block, *simd),
                             by_columns)
    else:
        # one output channel per iteration, its row accumulated with x innermost; the
        # filter rows outer, each checked once, the channel loop inside without a branch
        body += [
            f"            for rk in T.parallel(({new_rows}) * {k}):",
            f"                r = T.meta_var(rows[step, {i}] + rk // {k})",
            f"                k = T.meta_var(rk % {k})",
            f"                acc = T.decl_buffer(({width},), \"{dtype}\")",
            f"                for x in range({width}):",
            f"                    acc[x] = {zero}",
            f"                for ry in range({fy}):",
            f"                    if 0 <= {y} and {y} < {height_in}:",
            f"                        for c in range({cg}):"]
        for tap in taps:
            body += [
                f"                            for x0 in range({tap.hi - tap.lo}):",
                f"                                acc[x0 + {tap.lo}] = acc[x0 + {tap.lo}] + "
                f"{source(tap.column)} * p{layer.weight}[k, c, ry, {tap.rx}]"]
        body += [
            f"                for x in range({width}):",
            f"                    {target} = {value}"]
    return body


@dataclass(frozen=True)
class _Tap:
    """A filter column of a layer: the output columns [lo, hi) it reads inside the image."""

    rx: int
    lo: int
    hi: int
    layer: Layer

    @property
    def column(self) -> str:
        """The input column of output column ``x0 + lo``."""
        return self.input_column(f"x0 + {self.lo}")

    def input_column(self, x: str) -> str:
        """The input column output column ``x`` reads under this filter column."""
        return (f"({x}) * {self.layer.strides[1]} - {self.layer.padding[1]} + "
                f"{self.rx * self.layer.dilation[1]}")


def _interior(layer: Layer) -> tuple[int, int]:
    """The output columns [first, end) where every filter column reads inside the image (the
    register tiles' columns)."""
    ranges = [_column_range(layer, rx) for rx in range(layer.weight_shape[3])]
    first, last = max(lo for lo, _ in ranges), min(hi for _, hi in ranges)
    return first, max(first, last)


def _blocked_row(layer: Layer, taps: list[_Tap], source, block: int, dtype: str, y: str,
                 new_rows: str, index: int, store, store_tile, whole_row: bool,
                 columns: int, by_columns: bool = False) -> list[str]:
    """The rows of a step of a blocked convolution (``is_blocked``), ``block`` output channels
    per parallel iteration, through register tiles of ``columns`` (``_columns``) stored by
    ``store_tile(first column, columns)``; ``by_columns``: each iteration one of the row's
    column halves (``sliding_modes.column_parts``), the first half's iterations first (a
    parallel loop gives each thread a contiguous run of them). When ``whole_row`` the tiles
    store into ``acc`` (width x block) and ``store(first, end)`` then stores the row's columns
    from it."""
    channel_blocks = -(-layer.out_shape[1] // block)
    width = layer.out_shape[3]
    # channel block major: a thread's blocks each serve all the step's rows while their
    # weights are in cache (a band of several rows re-reads them from there). ``ko`` and
    # ``r`` are bound once per iteration (a let, ``T.bind``, not ``T.meta_var``): inlined,
    # the division by the step's row count ran in every reduction step (a residual block of
    # 16 channels at 32x32 forced depth-first 1.21x the untiled time on one thread, 1.02x
    # bound; Intel Xeon, AVX-512). Assigned as ``T.int32(...)`` they would be scalar buffers,
    # which TVM 0.27 takes from its workspace pool at every iteration
    parts = column_parts(width, columns) if by_columns else [(0, width)]
    per_part = f"({new_rows}) * {channel_blocks}"
    if len(parts) == 1:  # split by channel blocks alone
        lines = [f"            for rk in T.parallel({per_part}):",
                 f"                ko = T.bind(rk // ({new_rows}))",
                 f"                r = T.bind(rows[step, {index}] + rk % ({new_rows}))"]
    else:
        # (rk mod (blocks x rows)) div rows, and mod rows, spelled without the outer mod:
        # LLVM took 5.5 s instead of 0.4 s to compile ResNet-8's kernel with it
        lines = [f"            for rk in T.parallel({per_part} * {len(parts)}):",
                 f"                part = T.bind(rk // ({per_part}))",
                 f"                ko = T.bind(rk // ({new_rows}) % {channel_blocks})",
                 f"                r = T.bind(rows[step, {index}] + rk % ({new_rows}))"]
    if whole_row:
        lines += [f"                acc = T.decl_buffer(({width}, {block}), \"{dtype}\")"]
    for number, (lo, hi) in enumerate(parts):
        body = _columns(layer, taps, source, block, dtype, y, store_tile, columns, lo, hi)
        body += store(lo, hi) if whole_row else []
        lines += body if len(parts) == 1 else \
            [f"                if part == {number}:"] + _indented(body, 4)
    return lines


def _columns(layer: Layer, taps: list[_Tap], source, block: int, dtype: str, y: str,
             store_tile, columns: int, first: int = 0, end: int | None = None) -> list[str]:
    """A row's columns ``first`` to ``end`` (default: all) of a blocked convolution in register
    tiles of ``columns`` columns (the last one narrower) stored by ``store_tile``: a run of
    tiles inside the interior (``_interior``) loops over one tile's code; a tile with border
    columns spells out each column's filter columns that read inside the image
    (``_border_tile``), so no bounds check runs and a narrow row still fills its tiles."""
    weight = f"p{layer.weight}"
    height_in, width = layer.in_shape[2], layer.out_shape[3]
    cg, fy = layer.weight_shape[1:3]
    inner_lo, inner_hi = _interior(layer)
    end = width if end is None else end  # the columns [first, end) of the row
    tiles = [(lo, min(lo + columns, end)) for lo in range(first, end, columns)]
    chunk = channel_chunk(layer, block, np.dtype(dtype).itemsize)
    if chunk and inner_lo <= first and end <= inner_hi:
        prefetch = _next_chunk_prefetch(weight, chunk, cg // chunk,
                                        -(-layer.out_shape[1] // block), block,
                                        np.dtype(dtype).itemsize)
        return _chunked_columns(taps, source, weight, block, dtype, y, height_in, fy, tiles,
                                chunk, cg // chunk, store_tile, prefetch)
    lines, index = [], 0
    while index < len(tiles):
        lo, hi = tiles[index]
        if not inner_lo <= lo < hi <= inner_hi:
            lines += ["                for xb in range(1):"]
            lines += _border_tile(taps, source, weight, block, dtype, y, height_in, cg, fy,
                                  range(lo, hi), store_tile)
            index += 1
            continue
        run = 1  # the interior tiles of this width that follow
        while index + run < len(tiles) and tiles[index + run][1] <= inner_hi and \
                tiles[index + run][1] - tiles[index + run][0] == hi - lo:
            run += 1
        lines += [f"                for xb in range({run}):"]
        lines += _register_tile(taps, source, weight, block, dtype, y, height_in, cg, fy,
                                hi - lo, f"{lo} + xb * {columns}", store_tile)
        index += run
    return lines


#: LLVM's prefetch locality for the weights of a 1x1 convolution's next input-channel chunk
#: (``_next_chunk_prefetch``): 2, ``prefetcht1``, into L2. MobileOne-S4 224x224 forced
#: depth-first (Intel Xeon, AVX-512, 2 threads, 60-100 interleaved rounds): 1.11-1.18x the
#: untiled time without, 1.09-1.10x with locality 2, 1.10-1.11x with 3 (into L1).
PREFETCH_LOCALITY = 2


def _next_chunk_prefetch(weight: str, chunk: int, chunks: int, channel_blocks: int,
                         block: int, itemsize: int) -> list[str]:
    """Statements at a chunked 1x1 convolution's reduction depth (``_chunked_columns``: input
    channel ``c`` of chunk ``cc``, channel block ``ko``) that prefetch, in the row's first
    register tile, the weights the row reads next: input channel ``c`` of the next chunk, or
    of the next channel block's first chunk after the last. One row step passes over all the
    weights of a kernel's layers, more than L2 where channels are chunked, so each chunk
    otherwise arrives from L3 while its first tile waits; the rest of its tiles read it from
    L1. A prefetch never faults, and computes nothing: the results are the same to the bit."""
    last = chunks - 1
    channel = f"T.if_then_else(cc < {last}, c + {chunk}, c - {chunk * last})"
    channel_block = f"T.if_then_else(cc < {last}, ko, T.min(ko + 1, {channel_blocks - 1}))"
    lines = ["                                if xb == 0:"]
    for offset in range(0, block * itemsize, 64):  # each cache line of the block's weights
        address = f"T.address_of({weight}[{channel_block}, {channel}, 0, 0, {offset // itemsize}])"
        lines.append(f"                                    T.evaluate(T.call_llvm_intrin("
                     f"\"void\", \"llvm.prefetch.p0\", {address}, 0, {PREFETCH_LOCALITY}, 1))")
    return lines


def _chunked_columns(taps: list[_Tap], source, weight: str, block: int, dtype: str, y: str,
                     height_in: int, fy: int, tiles: list[tuple[int, int]], chunk: int,
                     chunks: int, store_tile, prefetch: list[str]) -> list[str]:
    """A row's register ``tiles`` (all inside the image) of a 1x1 convolution that sums its
    input channels ``chunk`` at a time over every tile (``channel_chunk``): the partial sums
    wait in ``psum`` (the row's columns by ``block`` channels) between chunks, and the last
    chunk's tiles are stored by ``store_tile``. The same additions in the same order as
    ``_register_tile``'s (the same results to the bit). ``prefetch``: statements at the
    reduction depth (``_next_chunk_prefetch``)."""
    first = tiles[0][0]
    runs: list[tuple[int, int, int]] = []  # (first column, tile width, tiles)
    for lo, hi in tiles:
        if runs and runs[-1][1] == hi - lo:
            runs[-1] = (runs[-1][0], hi - lo, runs[-1][2] + 1)
        else:
            runs.append((lo, hi - lo, 1))
    lines = [f"                psum = T.decl_buffer(({tiles[-1][1] - first}, {block}), "
             f"\"{dtype}\")",
             f"                for cc in range({chunks}):"]
    for lo, columns, count in runs:
        start = f"{lo} + xb * {columns}"
        kept = f"psum[{start} - {first} + xi, kb]"
        body = [f"                for xb in range({count}):"]
        body += _tile_start(columns, block, dtype, y, height_in, chunk, fy,
                            initial=f"T.if_then_else(cc == 0, T.{dtype}(0), {kept})",
                            channel="ci")
        body += [f"                                c = T.meta_var(cc * {chunk} + ci)"]
        body += prefetch if lo == first else []  # the row's first run of tiles
        body += _tap_products(taps, source, weight, block, columns, start)
        body += [f"                    if cc < {chunks - 1}:",
                 f"                        for xi in T.unroll({columns}):",
                 f"                            for kb in T.vectorized({block}):",
                 f"                                {kept} = tile[xi, kb]",
                 "                    else:"]
        body += _indented(store_tile(start, columns), 4)
        lines += _indented(body, 4)
    return lines


def _register_tile(taps: list[_Tap], source, weight: str, block: int, dtype: str, y: str,
                   height_in: int, cg: int, fy: int, columns: int, start: str,
                   store_tile) -> list[str]:
    """A register tile of ``columns`` output columns from ``start`` by ``block`` channels
    (unrolled: one source value times a vector of weights per filter tap), stored by
    ``store_tile``; the statements of a loop over ``xb`` (the caller's)."""
    return _tile_start(columns, block, dtype, y, height_in, cg, fy) + \
        _tap_products(taps, source, weight, block, columns, start) + store_tile(start, columns)


def _tap_products(taps: list[_Tap], source, weight: str, block: int, columns: int,
                  start: str) -> list[str]:
    """A register tile's products at its reduction loop's depth: for each filter tap, each
    of the ``columns`` columns from ``start`` times the tap's vector of ``block`` weights of
    channel ``c``."""
    x = f"{start} + xi"
    return [line for tap in taps for line in (
        f"                                for xi in T.unroll({columns}):",
        f"                                    for kb in T.vectorized({block}):",
        f"                                        tile[xi, kb] = tile[xi, kb] + "
        f"{source(tap.input_column(x))} * {weight}[ko, c, ry, {tap.rx}, kb]")]


def _border_tile(taps: list[_Tap], source, weight: str, block: int, dtype: str, y: str,
                 height_in: int, cg: int, fy: int, columns: range, store_tile) -> list[str]:
    """A register tile of the ``columns`` (some of them border columns) by ``block``
    channels, each column spelled out with the filter columns that read inside the image (no
    bounds check runs), stored by ``store_tile``."""
    lines = _tile_start(len(columns), block, dtype, y, height_in, cg, fy)
    products = []
    for xi, column in enumerate(columns):
        products += [
            line for tap in taps if tap.lo <= column < tap.hi for line in (
                f"                                for kb in T.vectorized({block}):",
                f"                                    tile[{xi}, kb] = tile[{xi}, kb] + "
                f"{source(tap.input_column(str(column)))} * {weight}[ko, c, ry, {tap.rx}, kb]")]
    if not products:  # no filter column reads inside the image: the tile stays zero
        lines[-3:] = []
    return lines + products + store_tile(str(columns.start), len(columns))


def _tile_start(columns: int, block: int, dtype: str, y: str, height_in: int, cg: int,
                fy: int, initial: str | None = None, channel: str = "c") -> list[str]:
    """A register tile's declaration, zeroing (or ``initial``, an expression of ``xi`` and
    ``kb``) and reduction loop header over ``cg`` channels named ``channel`` (to be followed
    by its products at the reduction loop's depth). The filter rows are the outer loop, each
    checked once, so the channel loop inside runs no branch and LLVM keeps the tile in
    registers across it: with the check inside one loop over (channel, filter row) it
    stored a 2-vector tile's accumulators to the stack at every step (a residual block of
    64 channels at 16x16 1.36x the untiled time on one thread, 1.01x with this order; Intel
    Xeon, AVX-512). The tile is a "global" buffer, which TVM 0.27 puts on the stack (and
    LLVM in registers) under 1 kB (``tile_columns`` keeps it there); a "local" one it took
    from its workspace pool at every tile (MobileOne-S4's depthwise layers at about half
    speed, ResNet-8 forced depth-first 1.12x the untiled time against 0.96x; AMD EPYC Zen
    3, AVX2)."""
    return [
        f"                    tile = T.decl_buffer(({columns}, {block}), \"{dtype}\")",
        f"                    for xi in T.unroll({columns}):",
        f"                        for kb in T.vectorized({block}):",
        f"                            tile[xi, kb] = {initial or f'T.{dtype}(0)'}",
        f"                    for ry in range({fy}):",
        f"                        if 0 <= {y} and {y} < {height_in}:",
        f"                            for {channel} in range({cg}):"]


@dataclass(frozen=True)
class SlidingKernel:
    """A fused conv chain lowered to its sliding-window PrimFunc (``sliding_primfunc``):
    the weight parameters it takes blocked with their blocks (``blocked_weight``,
    ``block_of``), its row schedule (``schedule_table``), the parameters it reads in NHWC and
    whether it writes its output in NHWC, and whether it calls the spin barrier (a parallel
    kernel: its library must link ``spin_barrier.SYNC_SOURCE``)."""

    prim: tirx.PrimFunc
    blocked: dict[int, int]
    rows: np.ndarray
    nhwc_params: frozenset[int]
    nhwc_output: bool
    synchronized: bool = False


def nhwc_capable(func: relax.Function) -> frozenset[int]:
    """The parameters of a fused conv chain a sliding kernel can read in NHWC: its data and
    residual operands (empty when the chain is not one)."""
    layers = layers_of(func)
    return frozenset() if layers is None else _nhwc_capable(layers)


def _nhwc_capable(layers: list[Layer]) -> frozenset[int]:
    return frozenset({0} | {layer.residual for layer in layers if layer.residual is not None})


def sliding_primfunc(func: relax.Function, constant_params: frozenset[int] = frozenset(),
                     nhwc_params: frozenset[int] = frozenset(),
                     nhwc_output: bool = False,
                     simd: tuple[int, int] = AVX512, band: int = 1) -> SlidingKernel | None:
    """The sliding-window PrimFunc of a fused conv chain (its parameters, the schedule
    ``schedule_table``, then the output; ``nhwc_params``, a subset of ``nhwc_capable``, read in
    NHWC, the output written in NHWC when ``nhwc_output``; register tiles sized for ``simd``,
    the target's float32 lanes and vector registers; up to ``band`` rows of each layer a
    step), or ``None`` when the chain is
    not one (see ``layers_of``). Only weights in ``constant_params`` (constant at every call)
    can be blocked: their callers pass the re-laid-out constant."""
    layers = layers_of(func)
    dtype = str(func.params[0].ty.dtype)
    if layers is None or dtype != "float32" or \
            any(str(p.ty.dtype) != dtype for p in func.params):
        return None
    blocked = {layer.weight: block_of(layer, simd[0]) for layer in layers
               if is_blocked(layer) and layer.weight in constant_params}
    nhwc_params = frozenset(nhwc_params) & _nhwc_capable(layers)
    local = local_layers(layers, blocked, band)  # the same for the code and its table
    source = sliding_source(layers, [shape_of(p.ty) for p in func.params], dtype, blocked,
                            nhwc_params, nhwc_output, simd, band, local)
    table = schedule_table(layers, band, local)
    return SlidingKernel(_parsed(source), blocked, table, nhwc_params, nhwc_output,
                         execution_mode(layers, band) != "serial")


@functools.lru_cache(maxsize=256)
def _parsed(source: str) -> tirx.PrimFunc:
    # parsing is most of a plan's lowering time, and the plan search lowers the same
    # macro-kernel in several candidate plans and again in the final build
    return tvm.script.from_source(source)
