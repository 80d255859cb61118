"""Sliding-window (line-buffer) macro-kernels: depth-first without re-computation (DFS paper,
section III-C: intermediates as sliding windows, modulo-indexed).

A macro-kernel streamed row by row keeps, of every intermediate feature map, only the rows its
consumer still needs, in a ring buffer indexed ``row % window``, and computes each row exactly
once. In every step each layer computes at most one new row, as soon as its producer's rows
allow (``row_ends``); steps run until the last layer is complete. ``window_rows`` is the most
rows a consumer reads in one step, from the top of its first new row to its producer's last
computed row, found by running the steps: a row is only overwritten once no later read needs
it, which is what makes the ring capacity sufficient. One row per step keeps every window at
its filter's height (3 rows under a 3x3, 1 under a 1x1), at the bottom border too. Border rows
and odd sizes use the same clipped bounds; padding is skipped (a row check per filter row, a
static column range per filter column), so no padded copy exists and the inner loops carry no
bounds checks.

TVM 0.27's ``rolling_buffer`` primitive cannot express this (it keeps the region ``compute_at``
gave each producer before its consumer rolled, so windows grow with depth, and no producer can
be placed after a rolled consumer), so ``sliding_primfunc`` writes the loop nest directly as a
TVMScript PrimFunc: per step, per layer, its new row, output channels in parallel, accumulated
in a thread-local buffer; bias, residual operand and ReLU / clip are applied once when the row
is stored. A regular convolution computes ``BLOCK`` output channels per thread from weights
re-laid out at compile time (``blocked_weight``: one input value times a vector of weights); a
grouped or depthwise one a row per channel, x innermost. The PrimFunc takes the fused Relax
function's parameters (data, then each weight, bias and residual operand where the function
has them; the data in NHWC when the model's transpose to NCHW feeds it) and the output, and is
marked scheduled, so the host's schedule rules leave it as it is.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

import numpy as np
import tvm
from tvm import relax, tirx

from .dfs import Tile


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


def _shape(ty) -> tuple[int, ...]:
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
                                   groups=int(attrs.groups), in_shape=_shape(args[0].ty),
                                   out_shape=_shape(call.ty),
                                   weight_shape=_shape(args[1].ty)))
            elif name == "relax.add" and layers and layers[-1]["activation"] is None \
                    and layers[-1]["residual"] is None:
                other = args[1] if args[0].same_as(current) else args[0]
                if param_index(other) is None:
                    return None
                if _shape(other.ty) == layers[-1]["out_shape"]:
                    layers[-1]["residual"] = param_index(other)
                elif _shape(other.ty) == (1, layers[-1]["out_shape"][1], 1, 1) \
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


def row_ends(layers) -> list[list[int]]:
    """Rows of each layer computed after each step: every layer computes at most one row per
    step, as soon as its inputs allow (one row at a time keeps every window at its filter's
    height, also at the bottom border where all inputs are ready at once); steps run until the
    last layer is complete."""
    return [list(step) for step in _row_ends(tuple(_geometry(layer) for layer in layers))]


def window_rows(layers) -> list[int]:
    """Ring rows each intermediate layer needs (the last layer writes the output directly):
    in every step the rows its consumer reads, from the top of the consumer's first new row
    up to the producer's last computed row."""
    return list(_window_rows(tuple(_geometry(layer) for layer in layers)))


def _next_end(geometry, produced: int, producer_rows: int) -> int:
    """Rows of a layer of ``geometry`` computable once its producer (``producer_rows`` rows in
    all) has ``produced`` rows (all of them when the producer is complete: the rows below read
    zero padding)."""
    s, p, d, k, rows, _ = geometry
    if produced >= producer_rows:
        return rows
    return max(0, min(rows, (produced - 1 + p - (k - 1) * d) // s + 1))


@functools.lru_cache(maxsize=4096)
def _row_ends(geometries: tuple) -> tuple[tuple[int, ...], ...]:
    # the simulation depends on the row geometry only; the planner asks for the same chains
    # under every memory limit it tries, hence the cache
    last_rows = geometries[-1][4]
    ends, row = [], [0] * len(geometries)
    while row[-1] < last_rows:
        new = [min(geometries[0][4], row[0] + 1)]
        for i in range(1, len(geometries)):
            new.append(min(row[i] + 1, _next_end(geometries[i], new[-1], geometries[i - 1][4])))
        ends.append(tuple(new))
        row = new
    return tuple(ends)


@functools.lru_cache(maxsize=4096)
def _window_rows(geometries: tuple) -> tuple[int, ...]:
    windows = [1] * (len(geometries) - 1)
    before = (0,) * len(geometries)
    for after in _row_ends(geometries):
        for i in range(len(geometries) - 1):
            if after[i + 1] > before[i + 1]:
                s, p = geometries[i + 1][:2]
                first_needed = max(0, before[i + 1] * s - p)
                windows[i] = max(windows[i], after[i] - min(first_needed, after[i]))
        before = after
    return tuple(windows)


def scratch_bytes(layers, itemsize: int = 4) -> int:
    """Bytes of the ring buffers, all alive while the macro-kernel runs, and of the accumulator
    rows: TVM's storage rewriting shares the rows of layers of one kind, so the widest row of
    the regular convolutions (``BLOCK`` channels wide: their weights are constants in every
    model edgebyoc imports) plus the widest of the grouped ones (``accumulator_bytes``), and the
    register tiles (``register_tile_bytes``)."""
    return (ring_bytes(layers, itemsize) + sum(accumulator_bytes(layers, itemsize))
            + register_tile_bytes(layers, itemsize))


def register_tile_bytes(layers, itemsize: int = 4) -> int:
    """Bytes of the register tiles (``COLUMNS`` x ``BLOCK``) of the regular convolutions that
    have interior columns: stack slots the compiler keeps in registers, counted as TVM
    allocates them (one per layer)."""
    return sum(COLUMNS * BLOCK * itemsize for layer in layers
               if layer.groups == 1 and _interior(layer)[1] > 0)


def ring_bytes(layers, itemsize: int = 4) -> int:
    """Bytes of the ring buffers of the intermediate layers."""
    return sum(layer.out_shape[1] * window * layer.out_shape[3] * itemsize
               for layer, window in zip(layers, window_rows(layers)))


def accumulator_bytes(layers, itemsize: int = 4) -> tuple[int, int]:
    """(widest accumulator of the regular convolutions, of the grouped ones). Storage rewriting
    may also merge the two (when no parallel loop separates them): ``scratch_bytes`` counts
    both, an upper bound."""
    blocked = max((layer.out_shape[3] * BLOCK for layer in layers if layer.groups == 1),
                  default=0)
    grouped = max((layer.out_shape[3] for layer in layers if layer.groups > 1), default=0)
    return blocked * itemsize, grouped * itemsize


#: Multiply-adds a layer's row needs before its channels are split over the cores (measured on
#: the MLPerf Tiny VWW and ResNet-8 networks: parallel small rows ran up to 2x slower).
PARALLEL_MIN_MACS = 1 << 18

#: Output channels a regular (ungrouped) convolution computes together: its weights are
#: re-laid out as (K / BLOCK, C, R, S, BLOCK) so one source value multiplies a vector of BLOCK
#: weights (one AVX-512 register of float32).
BLOCK = 16


def blocked_weight(weight, block: int = BLOCK):
    """``weight`` (K, C, R, S) as (ceil(K / block), C, R, S, block), zero-padded channels."""
    k = weight.shape[0]
    groups = -(-k // block)
    padded = np.zeros((groups * block,) + weight.shape[1:], weight.dtype)
    padded[:k] = weight
    return np.ascontiguousarray(
        padded.reshape((groups, block) + weight.shape[1:]).transpose(0, 2, 3, 4, 1))


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
                   dtype: str = "float32", blocked: frozenset[int] = frozenset(),
                   input_nhwc: bool = False) -> str:
    """The TVMScript of the sliding macro-kernel (see the module docstring). Layers whose
    weight parameter index is in ``blocked`` take their weight as ``blocked_weight`` lays it
    out and compute ``BLOCK`` output channels together. ``input_nhwc``: the kernel reads its
    input in NHWC (the tensor a channels-last model's transpose to NCHW would have copied)."""
    windows = window_rows(layers) + [None]
    zero = f"T.{dtype}(0)"
    shapes = list(param_shapes)
    if input_nhwc:
        n, c, h, w = shapes[0]
        shapes[0] = (n, h, w, c)
    for layer in layers:
        if layer.weight in blocked:
            k, cg, fy, fx = shapes[layer.weight]
            shapes[layer.weight] = (-(-k // BLOCK), cg, fy, fx, BLOCK)
    lines = ["@T.prim_func", "def main(" + ", ".join(
        [f"p{i}: T.Buffer({tuple(shape)}, \"{dtype}\")" for i, shape in enumerate(shapes)]
        + [f"out: T.Buffer({tuple(layers[-1].out_shape)}, \"{dtype}\")"]) + "):",
        '    T.func_attr({"tirx.noalias": True, "tirx.is_scheduled": True})']
    for i, layer in enumerate(layers[:-1]):
        _, k, _, width = layer.out_shape
        lines.append(f"    ring{i} = T.decl_buffer((1, {k}, {windows[i]}, {width}), "
                     f"\"{dtype}\")")
    lines.append(f"    done = T.decl_buffer(({len(layers)},), \"int32\")")
    batch_start = len(lines)  # the rest runs once per image of the batch
    lines.append(f"    for i in range({len(layers)}):")
    lines.append("        done[i] = 0")
    lines.append(f"    for step in range({len(row_ends(layers))}):")
    for i, layer in enumerate(layers):
        _, k, height, width = layer.out_shape
        _, cin, height_in, width_in = layer.in_shape
        _, cg, fy, fx = layer.weight_shape
        og = k // layer.groups
        sy, sx = layer.strides
        dy, dx = layer.dilation
        pt = layer.padding[0]
        if i == 0:
            end = f"T.min({height}, done[0] + 1)"
        else:
            end = (f"T.min(done[{i}] + 1, T.if_then_else(e{i - 1} >= {height_in}, {height}, "
                   f"T.max(0, T.min({height}, T.floordiv(e{i - 1} - 1 + {pt - (fy - 1) * dy}, "
                   f"{sy}) + 1))))")
        is_blocked = layer.weight in blocked
        channel_var = "ko * {BLOCK} + kb".format(BLOCK=BLOCK) if is_blocked else "k"
        target = (f"out[n, {channel_var}, r, x]" if i == len(layers) - 1 else
                  f"ring{i}[0, {channel_var}, r % {windows[i]}, x]")
        channel = f"k // {og} * {cg} + c" if layer.groups > 1 else "c"
        y = f"r * {sy} - {pt} + ry * {dy}"

        def source(column: str) -> str:
            if i == 0 and input_nhwc:
                return f"p0[n, {y}, {column}, {channel}]"
            return (f"p0[n, {channel}, {y}, {column}]" if i == 0 else
                    f"ring{i - 1}[0, {channel}, ({y}) % {windows[i - 1]}, {column}]")

        bias = f"p{layer.bias}[0, {channel_var}, 0, 0]"
        acc = "acc[x, kb]" if is_blocked else "acc[x]"
        value = acc if layer.bias is None else f"{acc} + {bias}"
        if layer.residual is not None:
            value = f"{value} + p{layer.residual}[n, {channel_var}, r, x]"
        if layer.activation and layer.activation[0] == "relu":
            value = f"T.max({value}, {zero})"
        elif layer.activation:
            value = (f"T.min(T.max({value}, T.{dtype}({layer.activation[1]!r})), "
                     f"T.{dtype}({layer.activation[2]!r}))")
        # padding: rows outside the image are skipped once per filter row, columns by the
        # static column range of each filter column; no bounds check in the inner loop
        taps = [_Tap(rx, *_column_range(layer, rx), layer) for rx in range(fx)]
        taps = [tap for tap in taps if tap.hi > tap.lo]
        # a row too small to share: the threads' fork and join would cost more than it saves
        loop = "T.parallel" if k * width * cg * fy * fx >= PARALLEL_MIN_MACS else "range"
        lines += [f"        e{i} = {end}",
                  f"        for r in range(done[{i}], e{i}):"]
        if is_blocked:
            lines += _blocked_row(layer, taps, loop, source, k, width, cg, fy, dtype,
                                  y, height_in)
            lines.append(f"                for kb, x in T.grid({BLOCK}, {width}):")
            if k % BLOCK:  # the padded channels of the last block are not stored
                lines += [f"                    if ko * {BLOCK} + kb < {k}:",
                          f"                        {target} = {value}"]
            else:
                lines.append(f"                    {target} = {value}")
        else:
            # one output channel per thread, its row accumulated with x innermost
            lines += [
                f"            for k in {loop}({k}):",
                f"                acc = T.decl_buffer(({width},), \"{dtype}\")",
                f"                for x in range({width}):",
                f"                    acc[x] = {zero}",
                f"                for c, ry in T.grid({cg}, {fy}):",
                f"                    if 0 <= {y} and {y} < {height_in}:"]
            for tap in taps:
                lines += [
                    f"                        for x0 in range({tap.hi - tap.lo}):",
                    f"                            acc[x0 + {tap.lo}] = acc[x0 + {tap.lo}] + "
                    f"{source(tap.column)} * p{layer.weight}[k, c, ry, {tap.rx}]"]
            lines += [
                f"                for x in range({width}):",
                f"                    {target} = {value}"]
        lines.append(f"        done[{i}] = e{i}")
    lines[batch_start:] = [f"    for n in range({layers[0].in_shape[0]}):"] + [
        "    " + line for line in lines[batch_start:]]
    return "\n".join(lines) + "\n"


#: Output columns a regular convolution keeps in registers (times ``BLOCK`` channels).
COLUMNS = 4


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
    """(first column, number of ``COLUMNS``-wide register tiles) of the output columns where
    every filter column reads inside the image."""
    ranges = [_column_range(layer, rx) for rx in range(layer.weight_shape[3])]
    first, last = max(lo for lo, _ in ranges), min(hi for _, hi in ranges)
    return first, max(0, (last - first) // COLUMNS)


def _blocked_row(layer: Layer, taps: list[_Tap], loop: str, source, k: int, width: int, cg: int,
                 fy: int, dtype: str, y: str, height_in: int) -> list[str]:
    """One row of a regular convolution into ``acc`` (width x BLOCK), ``BLOCK`` output
    channels per thread. Interior columns, where every filter column reads inside the image,
    go ``COLUMNS`` at a time through a register tile (COLUMNS x BLOCK, unrolled: one source
    value times a vector of weights per filter tap); the border columns one at a time over the
    static column range of each filter column."""
    zero = f"T.{dtype}(0)"
    weight = f"p{layer.weight}"
    lines = [f"            for ko in {loop}({-(-k // BLOCK)}):",
             f"                acc = T.decl_buffer(({width}, {BLOCK}), \"{dtype}\")",
             f"                for x, kb in T.grid({width}, {BLOCK}):",
             f"                    acc[x, kb] = {zero}"]
    first, blocks = _interior(layer)
    if blocks > 0:
        x = f"{first} + xb * {COLUMNS} + xi"
        lines += [
            f"                for xb in range({blocks}):",
            f"                    tile = T.decl_buffer(({COLUMNS}, {BLOCK}), \"{dtype}\", "
            f"scope=\"local\")",
            f"                    for xi in T.unroll({COLUMNS}):",
            f"                        for kb in T.vectorized({BLOCK}):",
            f"                            tile[xi, kb] = {zero}",
            f"                    for c, ry in T.grid({cg}, {fy}):",
            f"                        if 0 <= {y} and {y} < {height_in}:"]
        for tap in taps:
            lines += [
                f"                            for xi in T.unroll({COLUMNS}):",
                f"                                for kb in T.vectorized({BLOCK}):",
                f"                                    tile[xi, kb] = tile[xi, kb] + "
                f"{source(tap.input_column(x))} * {weight}[ko, c, ry, {tap.rx}, kb]"]
        lines += [
            f"                    for xi in T.unroll({COLUMNS}):",
            f"                        for kb in T.vectorized({BLOCK}):",
            f"                            acc[{x}, kb] = tile[xi, kb]"]
    # the columns left of and right of the register tiles
    segments = [(0, first), (first + blocks * COLUMNS, width)] if blocks > 0 else [(0, width)]
    border = []
    for start, stop in segments:
        for tap in taps:
            lo, hi = max(start, tap.lo), min(stop, tap.hi)
            if hi > lo:
                border += [
                    f"                            for x0 in range({hi - lo}):",
                    f"                                for kb in T.vectorized({BLOCK}):",
                    f"                                    acc[x0 + {lo}, kb] = acc[x0 + {lo}, kb]"
                    f" + {source(tap.input_column(f'x0 + {lo}'))} * "
                    f"{weight}[ko, c, ry, {tap.rx}, kb]"]
    if border:
        lines += [f"                for c, ry in T.grid({cg}, {fy}):",
                  f"                    if 0 <= {y} and {y} < {height_in}:"]
        lines += [line[4:] for line in border]
    return lines


def sliding_primfunc(func: relax.Function, constant_params: frozenset[int] = frozenset(),
                     input_nhwc: bool = False) -> tuple[tirx.PrimFunc, frozenset[int]] | None:
    """The sliding-window PrimFunc of a fused conv chain (its parameters, then the output) and
    the weight parameters it takes blocked (``blocked_weight``), or ``None`` when the chain is
    not one (see ``layers_of``). Only weights in ``constant_params`` (constant at every call)
    can be blocked: their callers pass the re-laid-out constant."""
    layers = layers_of(func)
    dtype = str(func.params[0].ty.dtype)
    if layers is None or dtype != "float32" or \
            any(str(p.ty.dtype) != dtype for p in func.params):
        return None
    blocked = frozenset(layer.weight for layer in layers
                        if layer.groups == 1 and layer.weight in constant_params)
    source = sliding_source(layers, [_shape(p.ty) for p in func.params], dtype, blocked,
                            input_nhwc)
    return _parsed(source), blocked


@functools.lru_cache(maxsize=256)
def _parsed(source: str) -> tirx.PrimFunc:
    # parsing is most of a plan's lowering time, and the plan search lowers the same
    # macro-kernel in several candidate plans and again in the final build
    return tvm.script.from_source(source)


@relax.expr_functor.mutator
class _CallTir(relax.PyExprMutator):
    """Calls of the fused chain functions in ``table`` (name -> (PrimFunc global var, blocked
    weight parameters)) become ``call_tir`` of their PrimFunc, blocked weights re-laid out."""

    def __init__(self, mod, table):
        super().__init__(mod)
        self.table = table

    def visit_call_(self, call):
        call = super().visit_call_(call)
        if isinstance(call.op, tvm.ir.GlobalVar) and call.op.name_hint in self.table:
            prim, blocked, nhwc_input = self.table[call.op.name_hint]
            args = [relax.const(blocked_weight(arg.value.numpy())) if i in blocked else arg
                    for i, arg in enumerate(call.args)]
            if nhwc_input is not None:
                args[0] = nhwc_input
            return relax.call_tir(prim, relax.Tuple(args), call.ty)
        return call


def _constant_params(main: relax.Function) -> dict[str, frozenset[int]]:
    """Per called global function: the parameter positions that are constants at every call
    in ``main``."""
    found: dict[str, frozenset[int]] = {}

    def visit(expr):
        if isinstance(expr, relax.Call) and isinstance(expr.op, tvm.ir.GlobalVar):
            here = frozenset(i for i, arg in enumerate(expr.args)
                             if isinstance(arg, tvm.ir.expr.Constant))
            name = expr.op.name_hint
            found[name] = found[name] & here if name in found else here

    relax.analysis.post_order_visit(main.body, visit)
    return found


def _nhwc_sources(main: relax.Function) -> dict[str, Any]:
    """Per called global function whose data argument is an NHWC -> NCHW transpose (what
    channels-last models get before a macro-kernel): the NHWC tensor transposed."""
    values = {b.var: b.value for block in main.body.blocks for b in block.bindings}
    found: dict[str, Any] = {}
    for value in values.values():
        if not (isinstance(value, relax.Call) and isinstance(value.op, tvm.ir.GlobalVar)
                and value.args and isinstance(value.args[0], relax.Var)):
            continue
        source = values.get(value.args[0])
        if isinstance(source, relax.Call) and isinstance(source.op, tvm.ir.Op) \
                and source.op.name == "relax.permute_dims" and source.attrs.axes is not None \
                and [int(a) for a in source.attrs.axes] == [0, 3, 1, 2]:
            found[value.op.name_hint] = source.args[0]
    return found


def lower_sliding_kernels(mod: tvm.IRModule, plan, prefix: str) -> tvm.IRModule:
    """Replace each fused macro-kernel whose tile is sliding (composite ``<prefix><index>``)
    by its sliding-window PrimFunc. A chain ``sliding_primfunc`` declines keeps its fused
    function and becomes a tiled kernel of the same band (the plan's tile changes, so its
    re-computation is counted); the depth-first rule then schedules it."""
    wanted = {f"{prefix}{index}": kernel for index, kernel in enumerate(plan.kernels)
              if kernel.tile.sliding}
    constants = _constant_params(mod["main"])
    nhwc = _nhwc_sources(mod["main"])
    table = {}
    builder = relax.BlockBuilder(mod)  # add_func gives the PrimFuncs typed global vars
    for gv, func in list(mod.functions.items()):
        if not (isinstance(func, relax.Function) and func.attrs and "Composite" in func.attrs):
            continue
        kernel = wanted.get(str(func.attrs["Composite"]))
        if kernel is None:
            continue
        nhwc_input = nhwc.get(gv.name_hint)
        lowered = sliding_primfunc(func, constants.get(gv.name_hint, frozenset()),
                                   nhwc_input is not None)
        if lowered is None:  # tiled in row bands instead, and counted so (re-computation)
            kernel.tile = Tile(kernel.tile.rows, kernel.tile.cols)
            continue
        prim, blocked = lowered
        # the fused function's name lists every op of the chain: the composite name is short
        name = f"{func.attrs['Composite']}_{len(kernel.units)}conv_sliding"
        table[gv.name_hint] = (builder.add_func(prim.with_attr("global_symbol", name), name),
                               blocked, nhwc_input)
    if not table:
        return mod
    mod = builder.get()
    # a transpose whose only reader was a macro-kernel now reading NHWC is dead: removed
    mod["main"] = relax.analysis.remove_all_unused(_CallTir(mod, table).visit_expr(mod["main"]))
    return tvm.IRModule({gv: func for gv, func in mod.functions.items()
                         if gv.name_hint not in table}, attrs=mod.attrs)
