"""Macro-kernel partitioning and the choice of depth-first tiles (DFS paper, section III-A).

Chains of convolution units (conv2d with its constant weights, then optionally a constant bias
add, a residual add of a tensor computed before the chain, and a ReLU / clip) where each unit's
result feeds only the next unit are candidates for macro-kernels. Anything else (global pooling,
the squeeze-and-excitation scale, a tensor with several consumers inside the chain) is a hard
barrier: chains end there. A chain is cut into
macro-kernels at local minima of activation size (the cut tensors are the ones materialised), and
every macro-kernel gets an output tile; both are chosen by ``plan_dfs`` under one of two
objectives: the lowest peak within a re-computation budget, or a memory budget met with the
least re-computation.

Two kinds of macro-kernel: tiled (``dfs.py``: 2-D tiles or row bands that recompute their
halos) and sliding windows (``sliding.py``: ring buffers, no re-computation; a residual operand
is read row by row from the tensor computed before the chain). The planner offers both for
every group and the estimator's measurement of each candidate plan decides.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import tvm
from tvm import relax
from tvm.relax.dpl import is_const, is_op, wildcard
from tvm.relax.transform import FusionPattern

from ..const_fold import fold_constants
from ..relax_info import shape_dtype
from . import sliding_modes
from .dfs import Tile

ACTIVATIONS = ("relax.nn.relu", "relax.clip")
DFS_PREFIX = "edgebyoc_dfs"


@dataclass
class ConvUnit:
    """conv2d [+ bias] [+ activation] in NCHW, as one step of a chain."""

    vars: list[Any]  # binding vars: conv, then bias, residual add, activation
    data: Any  # the conv's input
    has_bias: bool
    activation: str | None
    in_shape: tuple[int, ...]
    out_shape: tuple[int, ...]
    weight_shape: tuple[int, ...]
    strides: tuple[int, int]
    padding: tuple[int, int, int, int]
    dilation: tuple[int, int]
    groups: int
    #: a residual add of a tensor computed outside the chain (its position in the add: 0 or 1)
    residual_position: int | None = None

    @property
    def out_var(self):
        return self.vars[-1]

    @property
    def out_bytes(self) -> int:
        return math.prod(self.out_shape) * 4

    @property
    def macs(self) -> int:
        _, cin_per_group, kh, kw = self.weight_shape
        return math.prod(self.out_shape) * cin_per_group * kh * kw

    def input_extent(self, rows: int, cols: int) -> tuple[int, int]:
        """Rows and columns of the (padded) input one output region of rows x cols needs."""
        kh, kw = self.weight_shape[2:]
        return ((rows - 1) * self.strides[0] + (kh - 1) * self.dilation[0] + 1,
                (cols - 1) * self.strides[1] + (kw - 1) * self.dilation[1] + 1)


@dataclass
class MacroKernel:
    units: list[ConvUnit]
    tile: Tile

    @property
    def out_shape(self) -> tuple[int, ...]:
        return self.units[-1].out_shape

    def tiles(self) -> int:
        _, _, h, w = self.out_shape
        return math.ceil(h / self.tile.rows) * math.ceil(w / self.tile.cols)

    def regions(self) -> list[tuple[int, int]]:
        """Output rows x cols each unit computes per tile (clipped to its feature map)."""
        rows, cols = self.tile.rows, self.tile.cols
        regions = []
        for unit in reversed(self.units):
            regions.append((min(rows, unit.out_shape[2]), min(cols, unit.out_shape[3])))
            rows, cols = unit.input_extent(rows, cols)
        return list(reversed(regions))

    def macs(self) -> int:
        """MACs with re-computation: every tile computes its full halo region (sliding
        windows compute every row once)."""
        if self.tile.sliding:
            return sum(unit.macs for unit in self.units)
        return sum(self.tiles() * unit.macs // (unit.out_shape[2] * unit.out_shape[3]) * r * c
                   for unit, (r, c) in zip(self.units, self.regions()))

    def scratch_bytes(self) -> int:
        """The tile buffers live at once: each convolution's accumulator is one tile plus halo
        (padding is read through bounds checks, see ``dfs.py``), and it is dead once the next
        convolution of the tile has read it, so TVM's storage rewriting overlaps the buffers
        of non-adjacent layers: the largest adjacent pair is live at a time."""
        if self.tile.sliding:  # the tile's rows: the band of rows each step computes
            return sliding_modes.scratch_bytes(self.units, band=self.tile.rows)
        sizes = [unit.out_shape[1] * rows * cols * 4
                 for unit, (rows, cols) in zip(self.units, self.regions())]
        return max(a + b for a, b in zip(sizes, sizes[1:])) if len(sizes) > 1 else sizes[0]


@dataclass
class DfsPlan:
    kernels: list[MacroKernel] = field(default_factory=list)
    #: the estimated peak (bytes) the plan was cut for; convolutions outside its macro-kernels
    #: whose input, output and padded copy would exceed it read their padding in place
    #: instead of copying it (``None``: every one of them does)
    peak_limit: int | None = None

    @property
    def padding_limit(self) -> bool | int:
        """``inline_padding`` of ``HostReductionRule`` for the kernels outside the plan."""
        return True if self.peak_limit is None else self.peak_limit

    @property
    def tiles(self) -> dict[tuple[int, ...], Tile]:
        return {k.out_shape: k.tile for k in self.kernels}

    def recompute_factor(self, total_macs: int) -> float:
        """All MACs of the model with DFS re-computation over those without."""
        if not total_macs:
            return 1.0
        extra = sum(k.macs() - sum(u.macs for u in k.units) for k in self.kernels)
        return (total_macs + extra) / total_macs

    def to_dict(self) -> dict[str, Any]:
        return {"peak_limit_bytes": self.peak_limit,
                "macro_kernels": [{"units": len(k.units), "output_shape": list(k.out_shape),
                                   "tile": [k.tile.rows, k.tile.cols], "tiles": k.tiles(),
                                   "sliding": k.tile.sliding,
                                   "scratch_bytes": k.scratch_bytes()} for k in self.kernels]}


def _is_static(ty) -> bool:
    return isinstance(ty, relax.TensorType) and ty.shape is not None and \
        all(isinstance(d, tvm.tirx.IntImm) for d in ty.shape.values)


def find_chains(main: relax.Function) -> list[list[ConvUnit]]:
    """Maximal chains of NCHW convolution units whose links have a single consumer."""
    bindings = [(b.var, b.value) for block in main.body.blocks for b in block.bindings]
    value = dict(bindings)
    consumers: dict[Any, list] = {}
    for var, expr in bindings:
        if isinstance(expr, relax.Call):
            for arg in expr.args:
                if isinstance(arg, relax.Var):
                    consumers.setdefault(arg, []).append(var)
    returned = {main.body.body} if isinstance(main.body.body, relax.Var) else set()

    def only_consumer(var):
        users = consumers.get(var, [])
        return users[0] if len(users) == 1 and var not in returned else None

    def op_name(var) -> str:
        expr = value.get(var)
        return expr.op.name if isinstance(expr, relax.Call) and isinstance(expr.op, tvm.ir.Op) \
            else ""

    units: dict[Any, ConvUnit] = {}  # keyed by the conv var
    for var, expr in bindings:
        if op_name(var) != "relax.nn.conv2d" or not isinstance(expr.args[1], tvm.ir.expr.Constant):
            continue
        attrs = expr.attrs
        if str(attrs.data_layout) != "NCHW" or str(attrs.kernel_layout) != "OIHW" \
                or str(attrs.out_layout) != "NCHW" \
                or not all(_is_static(t) for t in (expr.ty, expr.args[0].ty)):
            continue  # macro-kernels need static shapes
        chain_vars, has_bias, activation, residual = [var], False, None, None
        nxt = only_consumer(var)
        if nxt is not None and op_name(nxt) == "relax.add" and \
                isinstance(value[nxt].args[1], tvm.ir.expr.Constant):
            chain_vars.append(nxt)
            has_bias = True
            nxt = only_consumer(nxt)
        if nxt is not None and op_name(nxt) == "relax.add":
            # a residual: the other operand is a tensor of the output's shape from elsewhere
            lhs, rhs = value[nxt].args
            position = 1 if lhs.same_as(chain_vars[-1]) else 0
            other = rhs if position == 1 else lhs
            if isinstance(other, relax.Var) \
                    and shape_dtype(other.ty)[0] == shape_dtype(expr.ty)[0]:
                chain_vars.append(nxt)
                residual = position
                nxt = only_consumer(nxt)
        if nxt is not None and op_name(nxt) in ACTIVATIONS:
            chain_vars.append(nxt)
            activation = op_name(nxt)
        units[var] = ConvUnit(chain_vars, expr.args[0], has_bias, activation,
                              shape_dtype(expr.args[0].ty)[0],
                              shape_dtype(expr.ty)[0], shape_dtype(expr.args[1].ty)[0],
                              tuple(int(s) for s in attrs.strides),
                              tuple(int(p) for p in attrs.padding),
                              tuple(int(d) for d in attrs.dilation), int(attrs.groups),
                              residual)
    next_unit: dict[Any, ConvUnit] = {}
    has_previous = set()
    for conv_var, unit in units.items():
        user = only_consumer(unit.out_var)
        if user in units and value[user].args[0].same_as(unit.out_var):
            next_unit[conv_var] = units[user]
            has_previous.add(user)
    chains = []
    for conv_var, unit in units.items():
        if conv_var in has_previous:
            continue
        chain = [unit]
        while chain[-1].vars[0] in next_unit:
            chain.append(next_unit[chain[-1].vars[0]])
        if len(chain) >= 2:
            chains.append(chain)
    return chains


_BROADCAST_OPS = ("relax.add", "relax.subtract", "relax.multiply", "relax.divide")


def _has_channels_last_convs(func: relax.Function) -> bool:
    found = []

    def visit(expr):
        if isinstance(expr, relax.Call) and isinstance(expr.op, tvm.ir.Op) \
                and expr.op.name == "relax.nn.conv2d" and str(expr.attrs.data_layout) == "NHWC":
            found.append(expr)

    relax.analysis.post_order_visit(func.body, visit)
    return bool(found)


@relax.expr_functor.mutator
class _FullRankConstants(relax.PyExprMutator):
    """A constant operand of an element-wise op with fewer dimensions than the other operand
    (a TFLite bias of shape (C,)) gets the leading unit dimensions broadcasting gives it, so
    ``ConvertLayout`` can move it to another layout (it leaves lower-rank operands alone)."""

    def visit_call_(self, call):
        call = super().visit_call_(call)
        if not (isinstance(call.op, tvm.ir.Op) and call.op.name in _BROADCAST_OPS):
            return call
        args = list(call.args)
        ranks = [len(a.ty.shape) if isinstance(a.ty, relax.TensorType)
                 and a.ty.shape is not None else None for a in args]
        if None in ranks or ranks[0] == ranks[1]:
            return call
        low = 0 if ranks[0] < ranks[1] else 1
        if not isinstance(args[low], tvm.ir.expr.Constant):
            return call
        value = args[low].value.numpy()
        args[low] = relax.const(value.reshape((1,) * abs(ranks[0] - ranks[1]) + value.shape))
        return relax.Call(call.op, args, call.attrs)


def nchw_variant(mod: tvm.IRModule) -> tvm.IRModule | None:
    """``mod`` with its channels-last (NHWC, e.g. TFLite) convolutions in NCHW, so their chains
    can become macro-kernels; ``None`` when it has none or TVM's ``ConvertLayout`` cannot
    convert it. Only ``main`` is converted; the host build turns the convolutions outside
    macro-kernels back to channels-last."""
    main = mod["main"]
    if not _has_channels_last_convs(main):
        return None
    main = _FullRankConstants(mod).visit_expr(main)
    only_main = tvm.IRModule({mod.get_global_var("main"): main}, attrs=mod.attrs)
    try:
        converted = relax.transform.ConvertLayout({"relax.nn.conv2d": ["NCHW", "OIHW"]})(
            only_main)
        converted = fold_constants(converted)  # the weights transposed by numpy
    except Exception:  # noqa: BLE001 - without the variant the model is simply not tiled
        return None
    functions = {gv: func for gv, func in mod.functions.items() if gv.name_hint != "main"}
    functions[converted.get_global_var("main")] = converted["main"]
    return tvm.IRModule(functions, attrs=mod.attrs)


def _unit_pattern(unit: ConvUnit, data):
    pattern = is_op("relax.nn.conv2d")(data, is_const())
    if unit.has_bias:
        pattern = is_op("relax.add")(pattern, is_const())
    if unit.residual_position == 1:
        pattern = is_op("relax.add")(pattern, wildcard())
    elif unit.residual_position == 0:
        pattern = is_op("relax.add")(wildcard(), pattern)
    if unit.activation == "relax.nn.relu":
        pattern = is_op("relax.nn.relu")(pattern)
    elif unit.activation == "relax.clip":
        pattern = is_op("relax.clip")(pattern, wildcard(), wildcard())
    return pattern


def fuse_macro_kernels(mod: tvm.IRModule, plan: DfsPlan) -> tvm.IRModule:
    """Group each planned macro-kernel into one function that FuseTIR makes one PrimFunc."""
    if not plan.kernels:
        return mod
    patterns = []
    for index, kernel in enumerate(plan.kernels):
        pattern = wildcard()
        for unit in kernel.units:
            pattern = _unit_pattern(unit, pattern)
        wanted = frozenset(v for unit in kernel.units for v in unit.vars)

        def exact(ctx, wanted=wanted):
            return frozenset(ctx.matched_bindings.keys()) == wanted

        patterns.append(FusionPattern(f"{DFS_PREFIX}{index}", pattern, {}, exact))
    # constants stay parameters: FuseTIR rejects constants bound inside a grouped function
    return relax.transform.FuseOpsByPattern(patterns, bind_constants=False,
                                            annotate_codegen=False)(mod)


#: Output tile sizes the planner tries for a macro-kernel (as squares and as full-width bands).
TILE_CHOICES = (4, 8, 16, 32, 64, 128)


def _single_unit_peak(unit: ConvUnit, reads_input_in_place: bool = False) -> int:
    """A conv outside any macro-kernel: its input and output. The build runs it
    channels-last: a model's NCHW input counts too (the convolution reads a channels-last
    copy of it; a macro-kernel reads the input itself), a channels-last one does not
    (``reads_input_in_place``: the caller holds it). Its padded copy of the input is not
    counted: where input, output and copy would exceed the plan's limit, the build reads the
    padding in place instead (``DfsPlan.padding_limit``)."""
    return (0 if reads_input_in_place else math.prod(unit.in_shape) * 4) + unit.out_bytes


def _chains_and_model_inputs(mod: tvm.IRModule):
    """``find_chains`` of ``mod``'s main function, and the chains that read one of the model's
    inputs (whose bytes the caller holds): the first binding of each, mapped to whether an
    untiled convolution reads that input in place (``_single_unit_peak``): ``True`` for a
    channels-last input the NCHW variant (``nchw_variant``) permutes, ``False`` for an NCHW
    one."""
    main = mod["main"]
    chains = find_chains(main)
    params = set(main.params)
    permuted = {b.var: b.value.args[0] for block in main.body.blocks for b in block.bindings
                if isinstance(b.value, relax.Call) and isinstance(b.value.op, tvm.ir.Op)
                and b.value.op.name == "relax.permute_dims" and b.value.attrs.axes is not None
                and [int(a) for a in b.value.attrs.axes] == [0, 3, 1, 2]}
    inputs = {}
    for chain in chains:
        if chain[0].data in params:
            inputs[chain[0].vars[0]] = False
        elif permuted.get(chain[0].data) in params:
            inputs[chain[0].vars[0]] = True
    return chains, inputs


def _group_options(units: list[ConvUnit], chain_input_is_model_input: bool, first: bool):
    """(peak bytes, extra MACs, tile) of every tile for the group ``units``: square tiles, and
    row bands spanning the whole width (halos recomputed along one dimension only)."""
    in_bytes = 0 if (first and chain_input_is_model_input) else math.prod(units[0].in_shape) * 4
    height, width = units[-1].out_shape[2:]
    kernel = MacroKernel(units, Tile(1, width, sliding=True))  # sliding windows: no recompute
    yield in_bytes + units[-1].out_bytes + kernel.scratch_bytes(), 0, kernel.tile
    for size in TILE_CHOICES:
        shapes = {(min(size, height), min(size, width)), (min(size, height), width)}
        for rows, cols in sorted(shapes):
            kernel = MacroKernel(units, Tile(rows, cols))
            extra = kernel.macs() - sum(u.macs for u in units)
            yield in_bytes + units[-1].out_bytes + kernel.scratch_bytes(), extra, kernel.tile
        if size >= max(height, width):
            break  # larger tiles are the same single tile


def tiled_units(kernels: list[MacroKernel]) -> int:
    """The convolutions inside ``kernels`` (the rest of a plan's convolutions run untiled)."""
    return sum(len(kernel.units) for kernel in kernels)


def square_tiled_units(kernels: list[MacroKernel]) -> int:
    """The convolutions inside ``kernels`` computed in tiles that are not sliding windows
    (``dfs.depth_first_schedule``: scalar loops, a parallel region per tile and layer)."""
    return sum(len(kernel.units) for kernel in kernels if not kernel.tile.sliding)


def plan_chain(chain: list[ConvUnit], peak_limit: int, input_is_model_input: bool,
               max_units: int = 32, options: dict | None = None,
               fewest_tiled: bool = False,
               input_read_in_place: bool = False,
               sliding_first: bool = True) -> tuple[list[MacroKernel], int] | None:
    """Cut ``chain`` into macro-kernels and pick tiles: every group's estimated peak within
    ``peak_limit``, the least re-computation; ``None`` when no cut meets the limit.

    Among cuts that re-compute as little, the first found (the longest macro-kernels) or,
    with ``fewest_tiled``, the one with the fewest convolutions inside macro-kernels: a
    convolution whose estimated peak meets the limit on its own then runs as the untiled
    kernel, faster and with its fusions (a squeeze-and-excitation block's convolutions on a
    1x1 map stay fused with its sigmoid and scale).

    ``options`` caches each group's tile options (they do not depend on the limit) across
    calls for the same chain; ``input_read_in_place``: the chain's first convolution, left
    untiled, reads the model's input itself (``_single_unit_peak``). ``sliding_first``: among
    a group's tiles that re-compute as little, sliding windows before smaller square tiles
    (else the smallest memory)."""
    options = {} if options is None else options
    n = len(chain)
    best: list[tuple[int, list[MacroKernel]] | None] = [None] * (n + 1)
    best[0] = (0, [])
    for end in range(1, n + 1):
        for start in range(max(0, end - max_units), end):
            if best[start] is None:
                continue
            extra_so_far, kernels = best[start]
            group = chain[start:end]
            if len(group) == 1:
                if _single_unit_peak(group[0], start == 0 and input_is_model_input
                                     and input_read_in_place) > peak_limit:
                    continue
                option = (extra_so_far, kernels)
            else:
                if (start, end) not in options:
                    options[start, end] = list(_group_options(group, input_is_model_input,
                                                              start == 0))
                fitting = [(extra, peak, tile) for peak, extra, tile in options[start, end]
                           if peak <= peak_limit]
                if not fitting:
                    continue
                # the least re-computation; among equals (e.g. a depthwise + pointwise pair
                # recomputes nothing at any tile) sliding windows, then the smallest memory:
                # square tiles run scalar loops (``square_tiled_units``), and where only
                # they fit a tighter limit, that limit's plan has them
                extra, _, tile = min(fitting, key=lambda item: (
                    item[0], sliding_first and not item[2].sliding, item[1]))
                option = (extra_so_far + extra, kernels + [MacroKernel(group, tile)])
            if best[end] is None or option[0] < best[end][0] or (
                    fewest_tiled and option[0] == best[end][0]
                    and tiled_units(option[1]) < tiled_units(best[end][1])):
                best[end] = option
    if best[n] is None:
        return None
    return best[n][1], best[n][0]


def _plan_for_limit(chains, peak_limit: int, inputs, options: list[dict],
                    fewest_tiled: bool = False,
                    sliding_first: bool = True) -> tuple[DfsPlan, int, int] | None:
    """(the plan of ``plan_chain`` cuts for every chain, its extra MACs, its estimated peak:
    ``estimated_peak``); ``None`` when a chain cannot meet ``peak_limit``."""
    plan, extra = DfsPlan(), 0
    for chain, chain_options in zip(chains, options):
        result = plan_chain(chain, peak_limit, chain[0].vars[0] in inputs,
                            options=chain_options, fewest_tiled=fewest_tiled,
                            input_read_in_place=bool(inputs.get(chain[0].vars[0])),
                            sliding_first=sliding_first)
        if result is None:
            return None
        plan.kernels.extend(result[0])
        extra += result[1]
    return plan, extra, estimated_peak(plan, chains, inputs)


def estimated_peak(plan: DfsPlan, chains, inputs) -> int:
    """The largest estimate among ``plan``'s macro-kernels (``_kernel_peak``) and the
    convolutions of ``chains`` it leaves untiled (``_single_unit_peak``); ``inputs`` as
    ``_chains_and_model_inputs`` gives them."""
    # a unit by its first binding: the plan may come from another ``find_chains`` call
    tiled = {unit.vars[0] for kernel in plan.kernels for unit in kernel.units}
    return max([_kernel_peak(kernel, kernel.units[0].vars[0] in inputs)
                for kernel in plan.kernels] +
               [_single_unit_peak(unit, bool(inputs.get(unit.vars[0])))
                for chain in chains for unit in chain if unit.vars[0] not in tiled],
               default=0)


#: The weights (bytes, float32) below which ``_widest_band`` keeps a sliding kernel's band
#: of one row on a CPU with AVX-512 (``widen_min_weight_bytes``): weights that stay in a
#: core's L2 cache cost little to read again each row, and a band of one row keeps the
#: two-stage pipeline and the smallest rings. Measured (AMD EPYC Zen 5, 2 threads,
#: interleaved): ResNet-8's 32x32 kernel (18 kB of weights) 1.10x the untiled time in bands
#: of one row, 1.14x in bands of two; VWW's 48x48 kernel (3 kB) 1.01x in bands of one, 1.02x
#: in bands of 16. Same-process A/B on an AVX-512 Intel Xeon (2 ms pause per call): ResNet-8
#: 1.11-1.13x in bands of one, 1.14-1.15x in bands of two; VWW 1.01-1.03x against 1.04-1.05x
#: in bands of 16 (docs/performance.md, "The band rule on an AVX-512 Intel").
WIDEN_MIN_WEIGHT_BYTES = 256 * 1024


def widen_min_weight_bytes(target: tvm.target.Target) -> int:
    """The weights below which a sliding kernel keeps bands of one row on ``target``:
    ``WIDEN_MIN_WEIGHT_BYTES`` with AVX-512 (16 float lanes), 0 (every band widens as far as
    the plan's estimate allows) with narrower vectors. Measured on AMD EPYC Zen 3 (AVX2),
    2 threads, the three builds in one process, interleaved, medians: VWW's 48x48 kernel
    0.98-1.01x the untiled time in bands of one row, 0.93-0.96x in bands of 16 (three runs,
    a 2 ms pause each round; back to back 1.10-1.11x against 1.09-1.10x); ResNet-8's 32x32
    kernel 0.84-0.85x in bands of one, 0.80-0.84x in bands of two (two runs).

    Example::

        >>> widen_min_weight_bytes(tvm.target.Target({"kind": "llvm", "mcpu": "znver3"}))
        0
    """
    from ..schedules import simd_lanes

    return WIDEN_MIN_WEIGHT_BYTES if simd_lanes(target) >= 16 else 0


#: How far above the plan's own estimated peak a sliding kernel's band may widen to cut the
#: kernel's predicted time (``_fastest_band``), as a share of that peak. Measured on an
#: AVX-512 Intel Xeon (2 threads, the builds in one process, their order rotated, 3,000
#: rounds), forced depth-first against untiled: ResNet-8's 32x32 kernel 1.18x in bands of one
#: row split by columns, 1.09x in bands of two, 1.05x in four (+2.9 % peak), 1.03x in eight
#: (+8.8 %); VWW's 48x48 kernel (no higher peak) 0.93x in bands of one, 0.90x in four.
BAND_PEAK_ALLOWANCE = 0.10

#: The predicted time (``sliding_modes.predicted_time``) within which ``_fastest_band``
#: takes a narrower band than the fastest one, as a share of the fastest's.
BAND_TIME_MARGIN = 0.02


def widen_bands(mod: tvm.IRModule, plan: DfsPlan,
                min_weight_bytes: int = WIDEN_MIN_WEIGHT_BYTES,
                peak_allowance: float = BAND_PEAK_ALLOWANCE) -> DfsPlan | None:
    """``plan`` with each sliding macro-kernel's band of rows a step widened, or ``None`` when
    no band widens: as far as its estimate stays within the plan's own estimated peak
    (``_widest_band``; a kernel with less than ``min_weight_bytes`` of weights keeps its
    band, ``widen_min_weight_bytes`` gives the target's), or further, to the band its time
    model predicts fastest (``_fastest_band``) within ``peak_allowance`` more than that
    peak, whichever is wider. ``choose_dfs_plan`` keeps the result only if its measured
    peak stays within the same allowance."""
    chains, inputs = _chains_and_model_inputs(mod)
    ceiling = estimated_peak(plan, chains, inputs)
    kernels = []
    for kernel in plan.kernels:
        reads_input = kernel.units[0].vars[0] in inputs
        kernels.append(max(
            _widest_band(kernel, reads_input, ceiling, min_weight_bytes),
            _fastest_band(kernel, reads_input, ceiling * (1 + peak_allowance)),
            key=lambda k: k.tile.rows))
    if all(new.tile == old.tile for new, old in zip(kernels, plan.kernels)):
        return None
    return DfsPlan(kernels, plan.peak_limit)


def _kernel_peak(kernel: MacroKernel, reads_model_input: bool) -> int:
    """A macro-kernel's estimated peak: its input (unless the model's own), output and
    scratch buffers."""
    in_bytes = 0 if reads_model_input else math.prod(kernel.units[0].in_shape) * 4
    return in_bytes + kernel.units[-1].out_bytes + kernel.scratch_bytes()


def _weight_bytes(kernel: MacroKernel) -> int:
    return sum(math.prod(unit.weight_shape) * 4 for unit in kernel.units)


def _widest_band(kernel: MacroKernel, reads_model_input: bool, ceiling: int,
                 min_weight_bytes: int) -> MacroKernel:
    """``kernel`` with sliding windows of the widest band of rows (doubling from one) whose
    estimated peak stays within ``ceiling``, the plan's own estimated peak: a band of
    several rows a step reads each block of weights once for all of them (a 1x1
    convolution of 896 channels on a 14x14 map streamed its 3.2 MB of weights 14 times in
    rows of one), at no more memory than the plan needs elsewhere. A kernel with less than
    ``min_weight_bytes`` of weights keeps its band."""
    if not kernel.tile.sliding or _weight_bytes(kernel) < min_weight_bytes:
        return kernel
    return _bands_within(kernel, reads_model_input, ceiling)[-1]


def _fastest_band(kernel: MacroKernel, reads_model_input: bool,
                  ceiling: float) -> MacroKernel:
    """``kernel`` with sliding windows of the narrowest band (doubling from its own) whose
    predicted time (``sliding_modes.predicted_time``) is within ``BAND_TIME_MARGIN`` of the
    fastest band's, among those whose estimated peak stays within ``ceiling``: a band of
    several rows pays a step's barriers once for all of them, which for small rows (few
    channels, narrow maps) are a large part of the kernel's time."""
    if not kernel.tile.sliding:
        return kernel
    bands = _bands_within(kernel, reads_model_input, ceiling)
    times = [sliding_modes.predicted_time(k.units, k.tile.rows) for k in bands]
    return next(k for k, time in zip(bands, times)
                if time <= min(times) * (1 + BAND_TIME_MARGIN))


def _bands_within(kernel: MacroKernel, reads_model_input: bool,
                  ceiling: float) -> list[MacroKernel]:
    """``kernel`` (sliding), then its sliding windows in bands doubled from its own, up to its
    height, while their estimated peak stays within ``ceiling``."""
    bands, band, height = [kernel], kernel.tile.rows, kernel.out_shape[2]
    while band * 2 <= height:
        band *= 2
        wider = MacroKernel(kernel.units, Tile(band, kernel.tile.cols, sliding=True))
        if _kernel_peak(wider, reads_model_input) > ceiling:
            break
        bands.append(wider)
    return bands


#: the tightest feasible limits for which ``candidate_plans`` adds the plan with the fewest
#: tiled convolutions (each candidate is built once to measure its peak)
FEWEST_TILED_LIMITS = 2


def candidate_plans(mod: tvm.IRModule, limits) -> list[tuple[DfsPlan, int]]:
    """The least-re-computation plans for each estimated chain-peak limit (bytes), with the
    longest macro-kernels and with the fewest tiled convolutions (``plan_chain``),
    deduplicated: the estimate is not the measured peak, so both are candidates (MobileOne-S4
    at 500x500: 7.69 MB with 56 convolutions in 14 macro-kernels, 7.46 MB with the first 22
    in one and the rest untiled). For the ``FEWEST_TILED_LIMITS`` tightest limits, also the
    fewest-tiled cut at the longest plan's own estimated peak (``estimated_peak``): what
    fits under it on its own runs untiled at no cost in memory (MobileOne-S4 224x224: the
    22-convolution kernel alone at 2.33 MB, not 14 kernels at the same peak). At the
    tightest limit, also the plan that takes the smallest tiles where sliding windows
    re-compute as little (``plan_chain``'s ``sliding_first``): square tiles that re-compute
    nothing (a chain of 1x1 convolutions) can be smaller, for a budget that needs them.

    Returns (plan, extra MACs) pairs; limits no plan can meet are skipped.
    """
    chains, inputs = _chains_and_model_inputs(mod)
    if not chains:
        return []
    plans, seen, options = [], {}, [{} for _ in chains]
    longest = {limit: _plan_for_limit(chains, int(limit), inputs, options) for limit in limits}
    feasible = [limit for limit in limits if longest[limit] is not None]
    tightest = sorted(feasible)[:FEWEST_TILED_LIMITS]
    results = []
    for limit in feasible:  # loosest first: a plan keeps the tightest limit that gives it
        results.append((limit, longest[limit], False))
        if limit in tightest:
            results.append((limit, _plan_for_limit(chains, int(limit), inputs, options,
                                                   fewest_tiled=True), False))
            # the fewest tiled at the longest plan's own estimated peak: what fits under it
            # on its own runs untiled, at the same estimate
            ceiling = longest[limit][2]
            refined = _plan_for_limit(chains, ceiling, inputs, options, fewest_tiled=True) \
                if ceiling < limit else None
            if refined is not None:
                results.append((ceiling, refined, True))
    smallest = _plan_for_limit(chains, int(tightest[0]), inputs, options,
                               sliding_first=False) if tightest else None
    if smallest is not None:
        results.append((tightest[0], smallest, False))
    for limit, result, is_refined in results:
        if not result[0].kernels:  # the untiled build, measured as the baseline
            continue
        key = tuple((len(k.units), k.tile, k.out_shape) for k in result[0].kernels)
        if key in seen:  # the tightest limit that gives these kernels; a plan the refined
            # search finds again keeps the limit it already has (its untiled convolutions
            # copy their padding below that limit)
            if not is_refined:
                seen[key][0].peak_limit = int(limit)
        else:
            seen[key] = result
            result[0].peak_limit = int(limit)
            plans.append(result[:2])
    return plans
