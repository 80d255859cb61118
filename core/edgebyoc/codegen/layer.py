"""MATCH-style layer code generation: an integerized region as one tiled C layer function.

``integer_layer`` reads a one-layer region of an integerized model (``edgebyoc.quant``): which
region parameters are activations, weights, bias, requantization multipliers / shifts and
parameters, with their compile-time values. ``render_layer`` fills the core's generic layer
template (``match_layer.c.mako``, MATCH's Fig. 3) with the layer, the schedule from
``edgebyoc.dse`` and the module's API names. ``api_header`` writes an ``ApiBinding`` as the
``#define`` header that binds the generic names for one flavour, so the same layer code
compiles against the ``host`` and the ``soc`` binding. ``host_binding`` is the core's
host emulation (``edgebyoc_match_host.h``) and ``layer_codegen`` does all of it for one region:
what a MATCH plugin's ``edgebyoc_codegen`` returns. Public through ``edgebyoc.api.match``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from importlib import resources
from typing import Any, Callable, Mapping

import numpy as np
import tvm
from tvm import relax

from ..dse import LoopNest, extract, search
from ..dse.search import weight_fill_floor
from ..dse.workload import REDUCTION_DIMS
from ..quant.arith import ROUNDING_MODES
from ..errors import CompileError
from ..memory.streaming import RESIDENT_ALIGN
from ..quant.integerize import QADD, REQUANTIZE
from ..target import ApiBinding, CodegenOutput, OutputKind, RowWindow
from .arguments import argument_layout
from .external import packed_entry_wrapper
from .render import render_core_template

#: the generic API names the layer template calls (MATCH's four families); a binding without
#: the synchronization family (blocking DMA, synchronous kernels) gets no-op waits
GENERIC_APIS = {"platform": ("setup", "shutdown"), "memory": ("l1_alloc", "l1_free",
                                                              "dma_in_3d", "dma_out_3d"),
                "synchronization": ("dma_wait", "compute_wait"),
                "computation": ("kernel", "kernel_partial")}
#: generic names a binding may leave out: ``kernel_partial`` (``edgebyoc_partial_kernel_t``)
#: is called only by layers whose input channels are tiled (``ExecModule.accumulator_bits``)
OPTIONAL_APIS = ("kernel_partial",)
_NO_OP_WAITS = {"dma_wait": "(transfer) ((void)(transfer))", "compute_wait": "() ((void)0)"}

#: the header of the core's host emulation, shipped beside the templates
HOST_HEADER = "edgebyoc_match_host.h"


@dataclass(frozen=True, eq=False)
class IntegerLayer:
    """One integer layer of a region, with the region parameter each operand comes from.

    ``nest`` is the layer's ``LoopNest``; ``inputs`` the region parameter indices of the
    activations (one, or two for an element-wise add); ``roles`` maps ``"weight"``,
    ``"bias"``, ``"multiplier"``, ``"shift"``, ``"params"``, ``"zero_point"`` to the region
    parameter holding it (-1 when it is a constant inside the composite); ``weight`` (int8
    values in ``kernel_layout``), ``bias``, ``multiplier``, ``shift`` (int32 per output
    channel) their compile-time values; ``zp_in`` / ``zp_out`` the zero points, ``low`` /
    ``high`` the output clamp; ``add_params`` TFLite's ADD parameters
    (``edgebyoc.api.quant.add_parameters``) for an add.

    Example, a 1x1 convolution described by hand (``integer_layer`` reads one from a region)::

        >>> nest = LoopNest("conv2d", K=2, C=3, OY=1, OX=1, IY=1, IX=1)
        >>> layer = IntegerLayer(nest, inputs=(0,), weight=np.arange(6).reshape(2, 1, 1, 3),
        ...                      kernel_layout="OHWI")
        >>> layer.weights_ohwi().shape
        (2, 1, 1, 3)
    """

    nest: LoopNest
    inputs: tuple[int, ...]
    roles: Mapping[str, int] = field(default_factory=dict)
    weight: np.ndarray | None = None
    kernel_layout: str = ""
    bias: np.ndarray | None = None
    multiplier: np.ndarray | None = None
    shift: np.ndarray | None = None
    zp_in: int = 0
    zp_out: int = 0
    low: int = -128
    high: int = 127
    add_params: np.ndarray | None = None

    def weights_ohwi(self) -> np.ndarray:
        """The weights as int8 [K][FY][FX][C] (depthwise: C = 1; dense: [K][C])."""
        w = self.weight
        if self.nest.kind == "dense":
            return np.ascontiguousarray(w.T).astype(np.int8)
        layout = self.kernel_layout
        if self.nest.kind == "depthwise":
            channel, other = ("O", "I") if w.shape[layout.index("O")] == self.nest.K \
                else ("I", "O")
            w = np.transpose(w, [layout.index(a) for a in (channel, "H", "W", other)])
            return np.ascontiguousarray(w.reshape(w.shape[:3])).astype(np.int8)
        w = np.transpose(w, [layout.index(a) for a in "OHWI"])
        return np.ascontiguousarray(w).astype(np.int8)


def _composite_call(region):
    """The call of the region's composite function and that function."""
    calls = []

    def visit(node):
        if isinstance(node, relax.Call) and isinstance(node.op, (relax.Function, relax.Var)):
            calls.append(node)

    relax.analysis.post_order_visit(region.function.body, visit)
    bound = {}
    for block in region.function.body.blocks:
        for binding in block.bindings:
            bound[binding.var] = binding.value
    for call in calls:
        func = bound.get(call.op, call.op)
        if isinstance(func, relax.Function) and func.attrs and "Composite" in func.attrs:
            return call, func, bound
    raise ValueError(f"region {region.symbol} has no composite function")


def _region_source(arg, bound):
    """What a composite argument is in the region function: a parameter, or (an NCHW region,
    ``Region.activation_layout``) the parameter its boundary ``permute_dims`` reads."""
    value = bound.get(arg)
    if isinstance(value, relax.Call) and isinstance(value.op, tvm.ir.Op) \
            and value.op.name == "relax.permute_dims":
        return value.args[0]
    return arg


def integer_layer(region, kinds=()) -> IntegerLayer:
    """The integer layer of a one-composite region (conv2d / depthwise / dense / add / pool,
    or one of the module's own ``kinds``)."""
    if len(region.composites) != 1:
        raise ValueError(f"region {region.symbol} holds {len(region.composites)} layers; "
                         f"one-layer regions only")
    composite = region.composites[0]
    nest = extract(composite.workload, kinds=tuple(kinds))
    if nest is None:
        raise ValueError(f"region {region.symbol}: {composite.workload.op} is not a layer")
    if composite.workload.op == "relax.nn.max_pool2d" and nest.layer_kind is None:
        raise ValueError(f"region {region.symbol}: max pooling has no integer layer form yet")
    nest = nest.with_activation_layout(getattr(region, "activation_layout", "NHWC"))
    call, func, bound = _composite_call(region)
    params = list(region.function.params)
    where = {}  # composite parameter -> region parameter index
    for cparam, arg in zip(func.params, call.args):
        arg = _region_source(arg, bound)
        if isinstance(arg, relax.Var) and arg in params:
            where[cparam] = params.index(arg)

    def value(expr):
        if isinstance(expr, tvm.ir.expr.Constant):
            return expr.value.numpy()
        index = where.get(expr)
        return None if index is None else region.constants.get(index)

    found: dict[str, Any] = {"inputs": [], "roles": {}}
    for blk in func.body.blocks:
        for binding in blk.bindings:
            val = binding.value
            if not (isinstance(val, relax.Call) and isinstance(val.op, tvm.ir.Op)):
                continue
            _read_operand(val, where, value, found)
    if not found["inputs"]:
        raise ValueError(f"region {region.symbol}: no activation input found")
    constant = [i for i in found["inputs"] if i in region.constant_params]
    if nest.planar and constant:
        raise ValueError(f"region {region.symbol}: activation input {constant[0]} is a model "
                         f"constant, which a region in channel planes cannot read (constants "
                         f"keep their layout)")
    return IntegerLayer(nest=nest, **{**found, "inputs": tuple(found["inputs"])})


def _read_operand(val, where, value, found) -> None:
    """What one operator of a composite says about the layer (``integer_layer``)."""
    name, roles = val.op.name, found["roles"]
    if name == "relax.call_tir":
        callee = val.args[0].name_hint
        args = list(val.args[1].fields)
        if callee.startswith(REQUANTIZE):
            for role, arg in zip(("bias", "multiplier", "shift", "params"), args[1:]):
                roles[role] = where.get(arg, -1)
            found["bias"], found["multiplier"], found["shift"] = (value(a) for a in args[1:4])
            zp_out, low, high, _ = (int(v) for v in value(args[4]))
            found.update(zp_out=zp_out, low=low, high=high)
        elif callee.startswith(QADD):
            found["inputs"] = [where[a] for a in args[:2]]
            roles["params"] = where.get(args[2], -1)
            found["add_params"] = value(args[2])
    elif name in ("relax.nn.conv2d", "relax.matmul"):
        roles["weight"] = where.get(val.args[1], -1)
        found["weight"] = value(val.args[1])
        found["kernel_layout"] = str(val.attrs.kernel_layout) if name != "relax.matmul" else ""
    elif name == "relax.subtract":
        roles["zero_point"] = where.get(val.args[1], -1)
        found["zp_in"] = int(np.asarray(value(val.args[1])).reshape(()))
    elif name == "relax.astype" and isinstance(val.args[0], relax.Var) and val.args[0] in where:
        found["inputs"] = [where[val.args[0]]]


def schedule_cost(workload, schedule, price: Callable[[LoopNest, Any], Any], kinds=()):
    """What a MATCH module's ``edgebyoc_cost`` returns, given its model ``price(nest,
    schedule) -> Cost``: the price of ``schedule`` for the workload's loop nest; without a
    schedule (a caller outside the core's search), the price of the best schedule with no
    memory limit; ``None`` when the workload is not a layer (``extract`` with ``kinds``).

    Example (the whole cost hook of a MATCH plugin)::

        @hookimpl
        def edgebyoc_cost(target, module, workload, schedule, options):
            return schedule_cost(workload, schedule,
                                 lambda nest, s: my_model(module.name, nest, s))
    """
    nest = _nest_of(workload, tuple(kinds))
    if nest is None:
        return None
    if schedule is None:
        return search(nest, 1 << 40, lambda s: price(nest, s)).cost
    return price(nest, schedule)


#: the last (workload, kinds, nest) ``schedule_cost`` extracted: the search prices every
#: candidate of one layer with the same ``Workload`` object (frozen), so one entry suffices
_LAST_NEST: tuple = (None, None, None)


def _nest_of(workload, kinds: tuple):
    global _LAST_NEST
    last_workload, last_kinds, nest = _LAST_NEST
    if workload is not last_workload or kinds != last_kinds:
        nest = extract(workload, kinds=kinds)
        _LAST_NEST = (workload, kinds, nest)
    return nest


def weight_channel_stride(nest: LoopNest, align: int = 1) -> int:
    """The distance between two filter taps in the weights: C padded to ``align`` (1 for
    channel-wise kinds, whose taps hold one value)."""
    if nest.channelwise:
        return 1
    return -(-nest.C // align) * align


def module_weights(layer: IntegerLayer, channel_align: int = 1, block: int = 1) -> np.ndarray:
    """The weights in the template's layout: K-major OHWI, input channels zero-padded to a
    multiple of ``channel_align`` (standard convolutions and dense layers); with ``block``
    > 1, output channels zero-padded to a multiple of ``block`` and interleaved by blocks of
    ``block`` (``edgebyoc_layer_t.w_block``: a 16x16 PE array reading 16 output channels'
    weights at once). Returned as (padded K, bytes per output channel), in memory order.

    Example (K = 3 padded to a block of 4: channel j of the block is the fastest axis)::

        >>> w = np.arange(6, dtype=np.int8).reshape(3, 1, 1, 2)  # OHWI, C = 2
        >>> nest = LoopNest("conv2d", K=3, C=2, OY=1, OX=1, IY=1, IX=1)
        >>> layer = IntegerLayer(nest, inputs=(0,), weight=w, kernel_layout="OHWI")
        >>> module_weights(layer, block=4).ravel().tolist()
        [0, 2, 4, 0, 1, 3, 5, 0]
    """
    w = layer.weights_ohwi()
    pad = weight_channel_stride(layer.nest, channel_align) - (
        1 if layer.nest.channelwise else layer.nest.C)
    if pad:
        w = np.pad(w, [(0, 0)] * (w.ndim - 1) + [(0, pad)])
    if block > 1:
        k = w.shape[0]
        padded = -(-k // block) * block
        w = np.pad(w, [(0, padded - k)] + [(0, 0)] * (w.ndim - 1)).reshape(padded, -1)
        per_k = w.shape[1]
        w = w.reshape(padded // block, block, per_k).transpose(0, 2, 1).reshape(padded, per_k)
    return np.ascontiguousarray(w, dtype=np.int8)


def tile_major_weights(weights: np.ndarray, nest: LoopNest, tiles: Mapping[str, int],
                       block: int = 1, channels_sliced: bool = True) -> np.ndarray:
    """``module_weights``' array re-laid for a schedule whose weight buffer holds one tile of
    the reduction loops (``Schedule.tiles`` of FY, FX and, with ``channels_sliced``, C):
    tile-major, the tiles in loop order (FY, FX, C), each holding for every weight block
    (``block`` output channels, interleaved as in ``module_weights``) its ``FY x FX`` taps
    and C channels (the channels of a slice unpadded; all of them keep ``module_weights``'
    padding), so the tile of any range of whole blocks is one contiguous run in L2, laid out
    exactly as the L1 buffer holds it. Shape (tiles, padded K x taps x channels).

    Example (K = 1, a 2x1 filter over C = 2, cut in filter rows)::

        >>> nest = LoopNest("conv2d", K=1, C=2, OY=1, OX=1, FY=2, IY=2, IX=1)
        >>> w = np.arange(4, dtype=np.int8).reshape(1, 4)  # K-major: [k][fy][fx][c]
        >>> tile_major_weights(w, nest, {"FY": 1}, channels_sliced=False).tolist()
        [[0, 1], [2, 3]]
    """
    block = max(1, int(block))
    rows = -(-nest.K // block) * block  # K padded to whole blocks
    stride = weights.size // (rows * nest.FY * nest.FX)  # the channel stride (C padded)
    fy, fx = int(tiles.get("FY", nest.FY)), int(tiles.get("FX", nest.FX))
    c = int(tiles.get("C", nest.C)) if channels_sliced else stride
    w = np.asarray(weights).reshape(rows // block, nest.FY, nest.FX, stride, block)
    if channels_sliced:
        w = w[:, :, :, :nest.C, :]
    w = w.reshape(rows // block, nest.FY // fy, fy, nest.FX // fx, fx, w.shape[3] // c, c,
                  block).transpose(1, 3, 5, 0, 2, 4, 6, 7)
    return np.ascontiguousarray(w.reshape(-1, rows * fy * fx * c), dtype=np.int8)


def slice_major_weights(weights: np.ndarray, nest: LoopNest, c_tile: int,
                        block: int = 1) -> np.ndarray:
    """``tile_major_weights`` for a schedule that copies one slice of ``c_tile`` input
    channels at a time (the filter whole): slice-major, each slice holding for every weight
    block and filter tap its ``c_tile`` channels. Shape (slices, padded K x FY x FX x
    ``c_tile``).

    Example (K = 2, C = 4 in slices of 2, one tap)::

        >>> nest = LoopNest("conv2d", K=2, C=4, OY=1, OX=1, IY=1, IX=1)
        >>> w = np.arange(8, dtype=np.int8).reshape(2, 8 // 2)  # K-major: [k][c]
        >>> slice_major_weights(w, nest, 2).tolist()
        [[0, 1, 4, 5], [2, 3, 6, 7]]
    """
    return tile_major_weights(weights, nest, {"C": c_tile}, block)


def weights_tile_major(schedule) -> bool:
    """Whether ``layer_codegen`` lays the weights out tile-major (``tile_major_weights``) for
    ``schedule``: its weight buffer holds one tile of a tiled reduction loop (it is filled
    inside that loop: a filter tile always, a slice of C when refilled per slice)."""
    order = tuple(schedule.order)
    return any(d in REDUCTION_DIMS and i < schedule.fill["W"] for i, d in enumerate(order))


def layer_fields(layer: IntegerLayer, rounding: int, w_cstride: int | None = None,
                 w_block: int = 1) -> dict[str, Any]:
    """The ``edgebyoc_layer_t`` fields of ``layer`` (see ``templates/edgebyoc_match.h``)."""
    n = layer.nest
    return {"kind": n.description.code, "K": n.K, "C": n.C, "OY": n.OY, "OX": n.OX,
            "FY": n.FY, "FX": n.FX, "IY": n.IY, "IX": n.IX, "sy": n.stride[0],
            "sx": n.stride[1], "pad_top": n.padding[0], "pad_left": n.padding[1],
            "zp_in": layer.zp_in, "zp_out": layer.zp_out, "low": layer.low,
            "high": layer.high, "rounding": rounding,
            "w_cstride": weight_channel_stride(n) if w_cstride is None else w_cstride,
            "w_block": max(1, int(w_block)),
            "act_layout": f"EDGEBYOC_{n.layouts.get('I', 'NHWC') if n.planar else 'NHWC'}"}


def _template_layout(symbol: str, layer: IntegerLayer, schedule, weight_bytes_per_k: int,
                     w_block: int, weights_slice_major: bool) -> tuple[dict, dict]:
    """(the template's ``schedule`` dict, its ``buffers``: bytes of one L1 buffer per
    operand) for ``render_layer``'s arguments."""
    nest = layer.nest
    dims = ("K", "OY", "OX")
    order = tuple(schedule.order)
    outer = [d for d in order if d in dims]
    reductions = [d for d in order if d in REDUCTION_DIMS]
    if schedule.fill["W"] < weight_fill_floor(order):
        raise ValueError(f"{symbol}: the schedule fills the weight buffer outside a tiled "
                         f"filter loop (fill {schedule.fill['W']} < "
                         f"{weight_fill_floor(order)}): it must hold one filter tile")
    tile_major = bool(weights_slice_major) and weights_tile_major(schedule)
    if any(d in ("FY", "FX") for d in reductions) and nest.has_weights and not tile_major:
        raise ValueError(f"{symbol}: the schedule tiles the filter, which needs the weights "
                         f"tile-major in L2 (tile_major_weights, weights_slice_major=True)")
    # per operand I, W and reduction loop: the buffer holds one tile of it (the loop is
    # outside the buffer's fill)
    r_slice = {op: {d: d in reductions and order.index(d) < schedule.fill[op]
                    for d in REDUCTION_DIMS} for op in ("I", "W")}
    sched = {"tiles": [schedule.tile(d) for d in dims],
             "trips": [schedule.trips(d) for d in dims],
             "order": [dims.index(d) for d in outer],
             "fill": dict(schedule.fill), "double_buffer": schedule.double_buffer,
             "reductions": reductions,
             "r_tiles": {d: schedule.tile(d) for d in REDUCTION_DIMS},
             "r_trips": {d: schedule.trips(d) for d in REDUCTION_DIMS},
             "r_slice": r_slice, "w_tile_major": tile_major}
    cover = {op: schedule.covered(op) for op in ("I", "W", "O")}
    rows, cols = nest.input_extent(cover["I"]["OY"], cover["I"]["OX"], cover["I"]["FY"],
                                   cover["I"]["FX"])
    channels = cover["I"]["K"] if nest.channelwise else cover["I"]["C"]
    w_span = cover["W"]["K"]
    if w_block > 1:  # whole blocks: one more when a tile may start inside a block
        w_span = -(-w_span // w_block) * w_block + (
            w_block if schedule.tile("K") % w_block and schedule.trips("K") > 1 else 0)
    w_taps = cover["W"]["FY"] * cover["W"]["FX"]
    w_channels = schedule.tile("C") if r_slice["W"]["C"] else \
        weight_bytes_per_k // max(1, nest.FY * nest.FX)
    w_per_k = w_taps * w_channels if (tile_major or r_slice["W"]["C"]) else weight_bytes_per_k
    sched["w_taps"], sched["w_channels"] = w_taps, w_channels
    sched["w_tile_bytes"] = -(-nest.K // max(1, w_block)) * max(1, w_block) * w_per_k
    buffers = {"I_one": rows * cols * channels, "W_k": cover["W"]["K"],
               "W_data": w_span * w_per_k,
               "O": cover["O"]["K"] * cover["O"]["OY"] * cover["O"]["OX"],
               "acc": schedule.tile("K") * schedule.tile("OY") * schedule.tile("OX")
               if reductions else 0}
    buffers["I"] = buffers["I_one"] * nest.inputs
    buffers["W"] = (buffers["W_data"] + 12 * buffers["W_k"]) if nest.has_weights else 0
    return sched, buffers


def _align(size: int) -> int:
    """``size`` rounded up to ``RESIDENT_ALIGN``: where a resident weight block's int32 arrays
    start after its weights (the block's place in the weight memory is aligned alike)."""
    return -(-size // RESIDENT_ALIGN) * RESIDENT_ALIGN


def keeps_weights_resident(layer: IntegerLayer, schedule) -> bool:
    """Whether the layer template can keep ``layer``'s weights in a weight memory across a
    streamed chain's calls (``CodegenOutput.resident_weights``): it has weights and its
    schedule loads all of them once per call, before every loop (``fill["W"] == 0``)."""
    return layer.nest.has_weights and schedule.fill["W"] == 0


def resident_weight_bytes(symbol: str, layer: IntegerLayer, schedule, weight_bytes_per_k: int,
                          w_block: int = 1, weights_slice_major: bool = False) -> int:
    """Bytes of the layer's resident weight block: its weight buffer, then (aligned to
    ``RESIDENT_ALIGN``) its int32 bias, multipliers and shifts; 0 when it cannot be resident
    (``keeps_weights_resident``). The arguments are ``render_layer``'s."""
    if not keeps_weights_resident(layer, schedule):
        return 0
    _, buffers = _template_layout(symbol, layer, schedule, weight_bytes_per_k, w_block,
                                  weights_slice_major)
    return _align(buffers["W_data"]) + 12 * buffers["W_k"]


def render_layer(symbol: str, module: str, layer: IntegerLayer, schedule, api: dict[str, str],
                 weight_bytes_per_k: int, rounding: int, description: str = "",
                 w_cstride: int | None = None, w_block: int = 1,
                 weights_slice_major: bool = False) -> str:
    """The C layer function ``symbol`` (see ``match_layer.c.mako`` for its signature).

    ``api`` maps every generic name of ``GENERIC_APIS`` to the name the code calls (usually
    ``api_names(prefix)``, bound per flavour by ``api_header``); ``weight_bytes_per_k`` the
    weight bytes of one output channel; ``rounding`` the requantization rounding code
    (``edgebyoc.api.quant.Rounding``); ``w_cstride`` the weights' channel stride when they
    are padded (``weight_channel_stride``); ``w_block`` the output channels interleaved in
    the weights (``module_weights(..., block=)``).
    ``weights_slice_major``: the weights in L2 are ``tile_major_weights`` (a schedule whose
    weight buffer holds one tile of the reduction loops, ``weights_tile_major``, reads the
    tile of a range of whole blocks as one run); otherwise K-major (a schedule that tiles
    the filter needs them tile-major).
    """
    nest = layer.nest
    sched, buffers = _template_layout(symbol, layer, schedule, weight_bytes_per_k, w_block,
                                      weights_slice_major)
    missing = [g for names in GENERIC_APIS.values() for g in names if g not in api]
    if missing:
        raise ValueError(f"the API names of {module} lack {', '.join(missing)}")
    return render_core_template(
        "match_layer.c.mako", symbol=symbol, module=module,
        layer=layer_fields(layer, rounding, w_cstride, w_block),
        add_params=None if layer.add_params is None else [int(v) for v in layer.add_params],
        schedule=sched, buffers=buffers, weight_bytes_per_k=weight_bytes_per_k,
        has_weights=nest.has_weights, resident=keeps_weights_resident(layer, schedule),
        resident_offset=_align(buffers["W_data"]), two_inputs=nest.inputs == 2,
        channelwise=nest.channelwise, planar=nest.planar,
        rows_outer=nest.planar and nest.rows_outermost, api=api,
        description=description or f"{nest.kind} on {module}")


def api_names(prefix: str) -> dict[str, str]:
    """Generic API name -> the ``prefix``-ed name layer code calls (bound by ``api_header``).

    Example::

        >>> api_names("conv0_api")["dma_in_3d"]
        'conv0_api_dma_in_3d'
    """
    return {generic: f"{prefix}_{generic}" for names in GENERIC_APIS.values()
            for generic in names}


def api_header(binding: ApiBinding, prefix: str) -> str:
    """``#define <prefix>_<generic> <bound name>`` for every API family of ``binding``; the
    waits a binding leaves out (blocking DMA, synchronous kernels) become no-ops.

    Example::

        >>> b = ApiBinding("soc", platform={"setup": "chip_open", "shutdown": "chip_close"})
        >>> print(api_header(b, "L0").splitlines()[1])
        #define L0_setup chip_open
    """
    lines = [f"/* {prefix}: API binding, flavour {binding.flavour} (generated) */"]
    lines += [f'#include "{h}"' for h in binding.headers]
    for family in GENERIC_APIS:
        for generic, bound in sorted(getattr(binding, family).items()):
            lines.append(f"#define {prefix}_{generic} {bound}")
    for generic in GENERIC_APIS["synchronization"]:
        if generic not in binding.synchronization:
            lines.append(f"#define {prefix}_{generic}{_NO_OP_WAITS[generic]}")
    return "\n".join(lines) + "\n"


def host_binding() -> ApiBinding:
    """The core's host emulation of a MATCH module (``templates/edgebyoc_match_host.h``):
    a static L1 arena of the module's innermost memory size, memcpy DMA and the reference tile
    kernels computing each layer kind with the layer's rounding and weight channel stride. A
    MATCH plugin returns it for ``flavour == "host"`` unless its hardware computes differently.

    Example::

        >>> host_binding().computation["kernel"]
        'edgebyoc_host_kernel'
    """
    names = {generic: f"edgebyoc_host_{generic}" for names in GENERIC_APIS.values()
             for generic in names}
    names["dma_in_3d"] = names["dma_out_3d"] = "edgebyoc_host_dma_copy_3d"
    return ApiBinding("host", **{family: {g: names[g] for g in generics}
                                 for family, generics in GENERIC_APIS.items()},
                      headers=(HOST_HEADER,))


def core_file(name: str) -> str:
    """The text of a file the core ships beside its templates (``edgebyoc_match.h``,
    ``edgebyoc_match_host.h``, the C project's harness and Makefile)."""
    return resources.files("edgebyoc.templates").joinpath(name).read_text()


def expand_includes(text: str, files: Mapping[str, str], dirs: list[str],
                    seen: set[str] | None = None) -> str:
    """``text`` with every ``#include "x"`` found in ``files`` (under ``dirs``) inlined once."""
    seen = set() if seen is None else seen

    def inline(match):
        for prefix in dirs:
            path = prefix + match.group(1)
            if path in files:
                if path in seen:
                    return ""
                seen.add(path)
                return expand_includes(files[path], files, dirs, seen)
        return match.group(0)

    return re.sub(r'^#include "([^"]+)"[^\n]*$', inline, text, flags=re.M)


def translation_unit(files: Mapping[str, str], path: str, flavour: str) -> str:
    """The project file ``path`` with every header inlined (``flavour``'s binding, the core's
    headers): one self-contained C unit."""
    shipped = {f"include/{name}": core_file(name) for name in ("edgebyoc_match.h", HOST_HEADER)}
    return expand_includes(files[path], {**shipped, **files},
                           ["", "include/", f"bindings/{flavour}/"])


#: The host emulation's L1 of a module that declares no memory levels (the header's default).
DEFAULT_HOST_L1_BYTES = 128 * 1024


def host_l1_bytes(module, options: Mapping[str, Any]) -> int:
    """The bytes the host emulation gives ``module``'s layers as L1: its inner memory levels
    (all but the outermost) for these ``options``, the innermost alone when it has one level,
    ``DEFAULT_HOST_L1_BYTES`` when it declares none."""
    if not module.memory_levels:
        return DEFAULT_HOST_L1_BYTES
    return sum(level.capacity(options) for level in module.memory_levels[:-1]) or \
        module.memory_levels[0].capacity(options)


def _weight_bytes_per_k(nest, weights: np.ndarray | None, w_cstride: int,
                        weights_slice_major: bool) -> int:
    """The weight bytes of one output channel in L2 as ``layer_files`` lays them out."""
    if weights is None:
        return 0
    return nest.FY * nest.FX * w_cstride if weights_slice_major else int(weights[0].size)


def layer_files(module, symbol: str, layer: IntegerLayer, schedule,
                bindings: Mapping[str, ApiBinding | None], options: Mapping[str, Any],
                weights: np.ndarray | None, w_cstride: int, entry: str = "",
                description: str = "", w_block: int = 1,
                weights_slice_major: bool = False) -> dict[str, str]:
    """The C project files of one layer: ``layers/<symbol>.c`` (flavour-independent: generic
    API names only, plus ``entry`` code) and its API binding per flavour under
    ``bindings/<flavour>/<symbol>_api.h`` (the host one sizes the emulated L1 as the module's
    inner memory levels, all but the outermost, for these ``options``). ``weights``: the
    K-major array of ``module_weights``, or with ``weights_slice_major`` the
    ``tile_major_weights`` of it the layer reads in L2 (needed when the schedule's weight
    buffer holds one tile of a reduction loop, ``weights_tile_major``)."""
    nest = layer.nest
    per_k = _weight_bytes_per_k(nest, weights, w_cstride, weights_slice_major)
    prefix = f"{symbol}_api"
    rounding = ROUNDING_MODES[str(module.requantize_rounding)]
    body = render_layer(symbol, module.name, layer, schedule, api_names(prefix), per_k,
                        rounding, description, w_cstride, w_block, weights_slice_major)
    files = {f"layers/{symbol}.c": (f"#include <stdint.h>\n#include <stddef.h>\n"
                                    f'#include "{prefix}.h"\n\n{body}{entry}')}
    for flavour, binding in bindings.items():
        if binding is None:
            continue
        if schedule.reduction_trips > 1 and "kernel_partial" not in binding.computation:
            raise CompileError(f"{symbol}: the schedule tiles a reduction loop (module "
                               f"{module.name!r} declares accumulator_bits), but the "
                               f"{flavour!r} API binding names no 'kernel_partial' "
                               f"(edgebyoc_partial_kernel_t)")
        header = api_header(binding, prefix)
        if flavour == "host" and module.memory_levels:
            header = (f"#ifndef EDGEBYOC_L1_BYTES\n#define EDGEBYOC_L1_BYTES "
                      f"{host_l1_bytes(module, options)}\n#endif\n") + header
        files[f"bindings/{flavour}/{prefix}.h"] = header
    return files


def layer_codegen(module, region, schedule, context, *, weight_channel_align: int = 1,
                  weight_block: int = 1,
                  weights: Callable[[IntegerLayer], np.ndarray] | None = None,
                  platform_files: Mapping[str, str] | None = None,
                  description: str = "") -> CodegenOutput:
    """Everything a MATCH plugin's ``edgebyoc_codegen`` returns for a one-layer region.

    The region is read as an ``IntegerLayer`` (with the module's ``layer_kinds``); its weights
    are laid out K-major OHWI with input channels padded to ``weight_channel_align`` and,
    with ``weight_block`` > 1, output channels padded to a multiple of it and interleaved by
    blocks (``module_weights``; or by ``weights(layer)``, which must then keep that layout),
    then, when the schedule's weight buffer holds one tile of a reduction loop (a filter
    tile, or a slice of the input channels refilled per slice), tile-major
    (``tile_major_weights``: one contiguous run per tile and block range);
    the layer is rendered through the generic template with the module's requantization
    rounding; the API bindings of
    ``context.bindings`` become ``bindings/<flavour>/`` headers; ``platform_files`` (e.g.
    ``{"include/mychip_soc.h": text}``) join the project. The constants are replaced by the
    forms the layer reads (weights, bias, multipliers, shifts; zero points and clamps are
    compiled in). The C source is the ``host`` translation unit with the packed wrapper; the
    C project entry is ``<symbol>_entry``.

    Example (the whole codegen hook of a MATCH plugin whose host flavour is the core's)::

        @hookimpl
        def edgebyoc_codegen(target, module, region, schedule, context):
            return layer_codegen(module, region, schedule, context,
                                 platform_files={"include/mychip_soc.h": SOC_HEADER})
    """
    layer = integer_layer(region, getattr(module, "layer_kinds", ()))
    if schedule is None:
        raise ValueError(f"{region.symbol}: no schedule (the core's search did not run)")
    stride = weight_channel_stride(layer.nest, weight_channel_align)
    array = None
    slice_major = False
    if layer.nest.has_weights:
        array = np.ascontiguousarray(weights(layer) if weights else
                                     module_weights(layer, weight_channel_align,
                                                    weight_block), np.int8)
        # a weight buffer holding one tile of the reduction loops (a filter tile, a slice of
        # C): each tile one run in L2
        slice_major = weights_tile_major(schedule)
        if slice_major:
            array = tile_major_weights(array, layer.nest, schedule.tiles, weight_block,
                                       channels_sliced=schedule.trips("C") > 1 and
                                       schedule.fill["W"] == len(schedule.order))
    new_values = {"weight": array, "bias": layer.bias, "multiplier": layer.multiplier,
                  "shift": layer.shift}
    replaced = {}
    for role, index in layer.roles.items():
        if index in region.constant_params:
            value = new_values.get(role)
            replaced[index] = () if value is None else (np.ascontiguousarray(
                value, dtype=np.int8 if role == "weight" else np.int32),)
    layout = argument_layout(region, replaced)

    def arg(index: int | None, ctype: str) -> str:
        position = None if index is None or index < 0 else layout.position(index)
        return "NULL" if position is None else f"({ctype})data[{position}]"

    inputs = list(layer.inputs) + [None]
    call = ", ".join([arg(inputs[0], "const int8_t*"), arg(inputs[1], "const int8_t*"),
                      arg(layer.roles.get("weight"), "const int8_t*"),
                      arg(layer.roles.get("bias"), "const int32_t*"),
                      arg(layer.roles.get("multiplier"), "const int32_t*"),
                      arg(layer.roles.get("shift"), "const int32_t*"),
                      f"(int8_t*)data[{layout.outputs[0].position}]"])
    symbol = region.symbol
    entry = (f"\n/* the region's entry: data = its arguments' and output's data pointers */\n"
             f"#ifdef __cplusplus\nextern \"C\" int {symbol}_entry(void* const* data);\n#endif\n"
             f"int {symbol}_entry(void* const* data) {{\n  return {symbol}_layer({call}, NULL);\n}}\n")
    windows = _row_windows(layer, layout)
    if windows:
        positions = [layout.position(i) for i in inputs[:2]] + [None]
        rings = ", ".join("0" if p is None else f"rings[{p}]" for p in positions[:2])
        entry += (f"\n/* output rows y0..y1 only, the activations in buffers of rings[i] rows "
                  f"(CodegenOutput.c_entry_rows) */\n"
                  f"#ifdef __cplusplus\nextern \"C\" int {symbol}_rows(void* const* data, int y0, "
                  f"int y1, const int* rings);\n#endif\n"
                  f"int {symbol}_rows(void* const* data, int y0, int y1, const int* rings) {{\n"
                  f"  edgebyoc_band_t band = {{y0, y1, {rings}, "
                  f"rings[{layout.outputs[0].position}]}};\n"
                  f"  return {symbol}_layer({call}, &band);\n}}\n")
    block = weight_block if layer.nest.has_weights else 1
    files = layer_files(module, f"{symbol}_layer", layer, schedule, context.bindings,
                        context.options, array, stride, entry, description, block,
                        slice_major)
    if context.binding("host") is not None:  # a plugin's host binding may build on it too
        files[f"include/{HOST_HEADER}"] = core_file(HOST_HEADER)
    files.update(platform_files or {})
    source = translation_unit(files, f"layers/{symbol}_layer.c", "host")
    source += packed_entry_wrapper(symbol, f"{symbol}_entry", layout.count)
    resident_bytes = 0
    if windows and array is not None:  # the template defines <symbol>_layer_resident
        resident_bytes = resident_weight_bytes(
            f"{symbol}_layer", layer, schedule,
            _weight_bytes_per_k(layer.nest, array, stride, slice_major), block, slice_major)
    return CodegenOutput(OutputKind.C_SOURCE, symbol=symbol, c_source=source,
                         replaced_constants=replaced, c_entry=f"{symbol}_entry",
                         project_files=files,
                         c_entry_rows=f"{symbol}_rows" if windows else None,
                         row_windows=windows,
                         resident_weights=f"{symbol}_layer_resident" if resident_bytes else None,
                         resident_weight_bytes=resident_bytes)


def _row_windows(layer: IntegerLayer, layout) -> tuple[RowWindow, ...]:
    """The ``RowWindow`` of each activation input of a layer the template can run in row
    bands (undilated, a 4-D output); empty for any other layer."""
    nest = layer.nest
    outputs = layout.outputs
    axis = 1 if nest.rows_outermost else 2  # rows before channels (NHWC, NHCW) or planes
    if nest.dilation != (1, 1) or len(outputs) != 1 or len(outputs[0].shape) != 4 or \
            nest.kind == "dense" or outputs[0].shape[axis] != nest.OY:
        return ()
    windows = []
    for index in layer.inputs:
        position = layout.position(index)
        if position is None:
            return ()
        windows.append(RowWindow(position, kernel=nest.FY, stride=nest.stride[0],
                                 pad_top=nest.padding[0], axis=axis) if nest.inputs == 1 else
                       RowWindow(position, axis=axis))
    return tuple(windows)
