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
and odd sizes use the same clipped bounds; padding is a bounds check on the read, so no padded
copy exists.

TVM 0.27's ``rolling_buffer`` primitive cannot express this (it keeps the region ``compute_at``
gave each producer before its consumer rolled, so windows grow with depth, and no producer can
be placed after a rolled consumer), so ``sliding_primfunc`` writes the loop nest directly as a
TVMScript PrimFunc: per step, per layer, its new row, output channels in parallel, each row
accumulated in a thread-local row buffer (x innermost, vectorizable), bias and ReLU / clip
applied once when the row is stored. The PrimFunc takes the fused Relax function's
parameters (data, then each weight and bias where the function has them) and the output, and is
marked scheduled, so the host's schedule rules leave it as it is.
"""

from __future__ import annotations

from dataclasses import dataclass

import tvm
from tvm import relax, tirx


@dataclass(frozen=True)
class Layer:
    """One convolution of a sliding macro-kernel, with the epilogue applied when it is read."""

    weight: int  # parameter index of the weight
    bias: int | None  # parameter index of the (1, K, 1, 1) bias
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
    (a residual add, a non-NCHW convolution)."""
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
                layers.append(dict(weight=param_index(args[1]), bias=None, activation=None,
                                   strides=tuple(int(s) for s in attrs.strides),
                                   padding=tuple(int(p) for p in attrs.padding),
                                   dilation=tuple(int(d) for d in attrs.dilation),
                                   groups=int(attrs.groups), in_shape=_shape(args[0].ty),
                                   out_shape=_shape(call.ty),
                                   weight_shape=_shape(args[1].ty)))
            elif name == "relax.add" and layers and layers[-1]["bias"] is None \
                    and layers[-1]["activation"] is None:
                other = args[1] if args[0].same_as(current) else args[0]
                if param_index(other) is None or _shape(other.ty)[-2:] != (1, 1):
                    return None  # a residual add: not a sliding chain
                layers[-1]["bias"] = param_index(other)
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


def _next_end(layer, producer, produced: int) -> int:
    """Rows of ``layer`` computable once its producer has ``produced`` rows (all of them when
    the producer is complete: the rows below read zero padding)."""
    if produced >= producer.out_shape[2]:
        return layer.out_shape[2]
    s, p, d, k, _, _ = _geometry(layer)
    return max(0, min(layer.out_shape[2], (produced - 1 + p - (k - 1) * d) // s + 1))


def row_ends(layers) -> list[list[int]]:
    """Rows of each layer computed after each step: every layer computes at most one row per
    step, as soon as its inputs allow (one row at a time keeps every window at its filter's
    height, also at the bottom border where all inputs are ready at once); steps run until the
    last layer is complete."""
    ends, row = [], [0] * len(layers)
    while row[-1] < layers[-1].out_shape[2]:
        new = [min(layers[0].out_shape[2], row[0] + 1)]
        for i, (producer, layer) in enumerate(zip(layers, layers[1:]), start=1):
            new.append(min(row[i] + 1, _next_end(layer, producer, new[-1])))
        ends.append(new)
        row = new
    return ends


def window_rows(layers) -> list[int]:
    """Ring rows each intermediate layer needs (the last layer writes the output directly):
    in every step the rows its consumer reads, from the top of the consumer's first new row
    up to the producer's last computed row."""
    windows = [1] * (len(layers) - 1)
    before = [0] * len(layers)
    for after in row_ends(layers):
        for i in range(len(layers) - 1):
            if after[i + 1] > before[i + 1]:
                s, p, _, _, _, _ = _geometry(layers[i + 1])
                first_needed = max(0, before[i + 1] * s - p)
                windows[i] = max(windows[i], after[i] - min(first_needed, after[i]))
        before = after
    return windows


def scratch_bytes(layers, itemsize: int = 4) -> int:
    """Bytes of the ring buffers, all alive while the macro-kernel runs, and of the accumulator
    row (one layer's at a time: TVM's storage rewriting shares them)."""
    rings = sum(layer.out_shape[1] * window * layer.out_shape[3] * itemsize
                for layer, window in zip(layers, window_rows(layers)))
    return rings + max(layer.out_shape[3] for layer in layers) * itemsize


def sliding_source(layers: list[Layer], param_shapes: list[tuple[int, ...]],
                   dtype: str = "float32") -> str:
    """The TVMScript of the sliding macro-kernel (see the module docstring)."""
    windows = window_rows(layers) + [None]
    zero = f"T.{dtype}(0)"
    lines = ["@T.prim_func", "def main(" + ", ".join(
        [f"p{i}: T.Buffer({tuple(shape)}, \"{dtype}\")" for i, shape in enumerate(param_shapes)]
        + [f"out: T.Buffer({tuple(layers[-1].out_shape)}, \"{dtype}\")"]) + "):",
        '    T.func_attr({"tirx.noalias": True, "tirx.is_scheduled": True})']
    for i, layer in enumerate(layers[:-1]):
        _, k, _, width = layer.out_shape
        lines.append(f"    ring{i} = T.decl_buffer((1, {k}, {windows[i]}, {width}), "
                     f"\"{dtype}\")")
    lines.append(f"    done = T.decl_buffer(({len(layers)},), \"int32\")")
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
        pt, pl = layer.padding[0], layer.padding[1]
        if i == 0:
            end = f"T.min({height}, done[0] + 1)"
        else:
            end = (f"T.min(done[{i}] + 1, T.if_then_else(e{i - 1} >= {height_in}, {height}, "
                   f"T.max(0, T.min({height}, T.floordiv(e{i - 1} - 1 + {pt - (fy - 1) * dy}, "
                   f"{sy}) + 1))))")
        target = "out[0, k, r, x]" if i == len(layers) - 1 else \
            f"ring{i}[0, k, r % {windows[i]}, x]"
        channel = f"k // {og} * {cg} + c" if layer.groups > 1 else "c"
        y, xx = f"r * {sy} - {pt} + ry * {dy}", f"x * {sx} - {pl} + rx * {dx}"
        source = f"p0[0, {channel}, {y}, {xx}]" if i == 0 else \
            f"ring{i - 1}[0, {channel}, ({y}) % {windows[i - 1]}, {xx}]"
        inside = f"0 <= {y} and {y} < {height_in} and 0 <= {xx} and {xx} < {width_in}"
        value = target if layer.bias is None else f"{target} + p{layer.bias}[0, k, 0, 0]"
        if layer.activation and layer.activation[0] == "relu":
            value = f"T.max({value}, {zero})"
        elif layer.activation:
            value = (f"T.min(T.max({value}, T.{dtype}({layer.activation[1]!r})), "
                     f"T.{dtype}({layer.activation[2]!r}))")
        # a row of one output channel accumulates in a thread-local row (x innermost, so the
        # multiply-adds vectorize), then is stored once with its bias and activation
        accumulated = value.replace(target, "acc[x]")
        lines += [
            f"        e{i} = {end}",
            f"        for r in range(done[{i}], e{i}):",
            f"            for k in T.parallel({k}):",
            f"                acc = T.decl_buffer(({width},), \"{dtype}\")",
            f"                for x in range({width}):",
            f"                    acc[x] = {zero}",
            f"                for c, ry, rx in T.grid({cg}, {fy}, {fx}):",
            f"                    for x in range({width}):",
            f"                        acc[x] = acc[x] + T.if_then_else({inside}, "
            f"{source}, {zero}) * p{layer.weight}[k, c, ry, rx]",
            f"                for x in range({width}):",
            f"                    {target} = {accumulated}",
            f"        done[{i}] = e{i}"]
    return "\n".join(lines) + "\n"


def sliding_primfunc(func: relax.Function) -> tirx.PrimFunc | None:
    """The sliding-window PrimFunc of a fused conv chain (its parameters, then the output), or
    ``None`` when the chain is not one (see ``layers_of``)."""
    layers = layers_of(func)
    dtype = str(func.params[0].ty.dtype)
    if layers is None or dtype != "float32" or \
            any(str(p.ty.dtype) != dtype for p in func.params):
        return None
    source = sliding_source(layers, [_shape(p.ty) for p in func.params], dtype)
    return tvm.script.from_source(source)


@relax.expr_functor.mutator
class _CallTir(relax.PyExprMutator):
    """Calls of the fused chain functions in ``table`` become ``call_tir`` of their PrimFunc."""

    def __init__(self, mod, table):
        super().__init__(mod)
        self.table = table

    def visit_call_(self, call):
        call = super().visit_call_(call)
        if isinstance(call.op, tvm.ir.GlobalVar) and call.op.name_hint in self.table:
            return relax.call_tir(self.table[call.op.name_hint], relax.Tuple(list(call.args)),
                                  call.ty)
        return call


def lower_sliding_kernels(mod: tvm.IRModule, plan, prefix: str) -> tvm.IRModule:
    """Replace each fused macro-kernel whose tile is sliding (composite ``<prefix><index>``)
    by its sliding-window PrimFunc. A chain ``sliding_primfunc`` declines keeps its fused
    function and becomes a tiled kernel of the same band (the plan's tile changes, so its
    re-computation is counted); the depth-first rule then schedules it."""
    wanted = {f"{prefix}{index}": kernel for index, kernel in enumerate(plan.kernels)
              if kernel.tile.sliding}
    table = {}
    builder = relax.BlockBuilder(mod)  # add_func gives the PrimFuncs typed global vars
    for gv, func in list(mod.functions.items()):
        if not (isinstance(func, relax.Function) and func.attrs and "Composite" in func.attrs):
            continue
        kernel = wanted.get(str(func.attrs["Composite"]))
        if kernel is None:
            continue
        prim = sliding_primfunc(func)
        if prim is None:  # tiled in row bands instead, and counted so (re-computation)
            from .dfs import Tile

            kernel.tile = Tile(kernel.tile.rows, kernel.tile.cols)
            continue
        name = f"{gv.name_hint}_sliding"
        table[gv.name_hint] = builder.add_func(prim.with_attr("global_symbol", name), name)
    if not table:
        return mod
    mod = builder.get()
    mod["main"] = _CallTir(mod, table).visit_expr(mod["main"])
    return tvm.IRModule({gv: func for gv, func in mod.functions.items()
                         if gv.name_hint not in table}, attrs=mod.attrs)
