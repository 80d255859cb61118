"""Constant weights of the host kernels re-laid at compile time in channel-tile blocks.

The host schedules (``schedules.HostReductionRule``) compute a convolution or dense layer one
tile of output channels at a time. In their natural layouts (HWIO for convolutions in the
host's channels-last form, [K, N] for matmuls) the weights of one tile are short runs (the
tile's channels, 128 bytes) a whole row of channels apart, so a kernel whose weights come from
memory (ResNet-18's last stages: 9.4 MB per layer, read once per inference) streams them at a
fraction of the memory bandwidth. ``pack_constant_weights`` gives each such kernel its weights
as ``[channels / tile][...][tile]``: every tile's weights one contiguous run, in the order the
kernel reads them (a 7x7x512 convolution with cold weights: 1.04 -> 0.61 ms on an AVX-512
machine). The PrimFunc's weight buffer is transformed with TVM's ``transform_layout`` and every
call passes the constant re-laid the same way (numpy, once, at compile time), so nothing runs
at inference and the result is unchanged; a kernel called with a weight that is not a
constant at some call keeps its layout.
"""

from __future__ import annotations

import logging
from typing import Callable

import numpy as np
import tvm
from tvm import relax, s_tir, tirx
from tvm.s_tir.dlight.analysis import normalize_prim_func

from .host_rule import loop_extent
from .rewrites import rewrite_functions
from .schedules import channel_tile, simd_lanes, tile_vectors, vector_registers

log = logging.getLogger(__name__)

#: Weights smaller than this keep their layout (they stay in a core's cache either way).
PACK_MIN_BYTES = 16 * 1024


def _packing(func: tirx.PrimFunc, param_index: int, lanes: int, registers: int
             ) -> tuple[tirx.PrimFunc, Callable[[np.ndarray], np.ndarray]] | None:
    """(the PrimFunc with parameter ``param_index`` in channel-tile blocks, the same re-layout
    of a numpy value) when that parameter is the weights of the function's one reduction,
    indexed by its output-channel axis in its last dimension and by no other output axis;
    ``None`` otherwise. The tile is the schedule's (``tile_vectors`` on a target of ``lanes``
    SIMD lanes and ``registers`` vector registers)."""
    sch = s_tir.Schedule(func)
    infos = normalize_prim_func(sch)
    if infos is None:
        return None
    reductions = [b for b in infos if b.is_reduction()]
    if len(reductions) != 1:
        return None
    main = reductions[0]
    kinds = main.dom_kind()
    num_spatial = kinds.count("S")
    if "R" not in kinds or kinds.index("R") != num_spatial:
        return None
    block = sch.get(main.block_rv)
    weights = func.params[param_index]
    reads = [i for i, r in enumerate(block.reads) if r.source.same_as(weights)]
    if len(reads) != 1 or len(weights.ty.shape) < 2:
        return None
    iters = [iv.var for iv in block.iter_vars]
    channel, outputs = iters[num_spatial - 1], iters[:num_spatial - 1]
    indices = [r.min for r in block.reads[reads[0]].region]
    if not (isinstance(indices[-1], tirx.Var) and indices[-1].same_as(channel)):
        return None
    used = [v for index in indices[:-1] for v in tirx.analysis.undefined_vars(index)]
    if any(u.same_as(v) for u in used for v in (channel, *outputs)):
        return None
    shape = [int(d) for d in weights.ty.shape]
    channels = shape[-1]
    # the row extent the schedule reads (``HostReductionRule``: the loop before the channels)
    rows = loop_extent(sch, sch.get_loops(main.block_rv)[num_spatial - 2]) \
        if num_spatial >= 2 else None
    vector, tile = channel_tile(channels, lanes, vectors=tile_vectors(
        kinds.count("R"), lanes, rows, channels, registers))
    nbytes = int(np.prod(shape)) * tvm.DataType(weights.ty.dtype).bits // 8
    if channels <= tile or vector * 2 < lanes or nbytes < PACK_MIN_BYTES:
        return None
    sch.transform_layout(main.block_rv, ("read", reads[0]),
                         lambda *i: (i[-1] // tile, *i[:-1], i[-1] % tile))

    def relayout(value: np.ndarray) -> np.ndarray:
        blocked = value.reshape(*shape[:-1], channels // tile, tile)
        return np.ascontiguousarray(np.moveaxis(blocked, -2, 0))

    return sch.mod["main"], relayout


@relax.expr_functor.mutator
class _PackedArguments(relax.PyExprMutator):
    """Replaces the constant weight arguments of the packed kernels' calls."""

    def __init__(self, mod, packed):
        super().__init__(mod)
        self.packed = packed  # GlobalVar -> (packed function, parameter index, relayout)

    def visit_call_(self, call):
        call = super().visit_call_(call)
        plan = _call_tir_target(call, self.packed)
        if plan is None:
            return call
        function, index, relayout = plan
        args = list(call.args[1].fields)
        args[index] = relax.const(relayout(args[index].value.numpy()))
        return relax.Call(call.op, [function, relax.Tuple(args), *call.args[2:]],
                          call.attrs, call.ty_args)


def _call_tir_target(call, table):
    if isinstance(call.op, tvm.ir.Op) and call.op.name == "relax.call_tir" \
            and isinstance(call.args[0], tvm.ir.GlobalVar) \
            and isinstance(call.args[1], relax.Tuple):
        return table.get(call.args[0])
    return None


def pack_constant_weights(target: tvm.target.Target, skip_prefix: str = "") -> tvm.transform.Pass:
    """The module pass (after legalization and fusion, before constants become parameters):
    every PrimFunc whose one reduction reads a constant weight at all of its calls gets that
    weight in channel-tile blocks (see the module docstring); functions named ``skip_prefix``
    (the depth-first macro-kernels, scheduled by their own rule) are left alone."""
    lanes, registers = simd_lanes(target), vector_registers(target)

    @tvm.transform.module_pass(opt_level=0, name="edgebyoc.PackConstantWeights")
    def _pack(mod: tvm.IRModule, _ctx) -> tvm.IRModule:
        sites: dict = {}  # GlobalVar -> [argument tuple of each call]

        def visit(node):
            if isinstance(node, relax.Call) and isinstance(node.op, tvm.ir.Op) \
                    and node.op.name == "relax.call_tir" \
                    and isinstance(node.args[0], tvm.ir.GlobalVar):
                fields = node.args[1].fields if isinstance(node.args[1], relax.Tuple) else None
                sites.setdefault(node.args[0], []).append(fields)

        for func in mod.functions.values():
            if isinstance(func, relax.Function):
                relax.analysis.post_order_visit(func.body, visit)
        packed = {}
        for gv, calls in sites.items():
            func = mod[gv]
            if not isinstance(func, tirx.PrimFunc) or (
                    skip_prefix and gv.name_hint.startswith(skip_prefix)) or None in calls:
                continue
            constant = [i for i in range(len(calls[0]))
                        if all(isinstance(c[i], tvm.ir.expr.Constant) for c in calls)]
            for index in constant:
                try:
                    plan = _packing(func, index, lanes, registers)
                except (RuntimeError, ValueError) as err:  # a layout TVM cannot transform
                    log.debug("weights of %s not packed: %s", gv.name_hint, err)
                    plan = None
                if plan is not None:
                    packed[gv] = (index, plan[1], plan[0])
                    break
        if not packed:
            return mod
        mutator = _PackedArguments(mod, {})
        for gv, (index, relayout, func) in packed.items():  # a new name: its type changed
            new = mutator.builder_.add_func(func, f"{gv.name_hint}_packed")
            mutator.packed[gv] = (new, index, relayout)
        entries = [gv.name_hint for gv, f in mod.functions_items()
                   if isinstance(f, relax.Function)]
        return relax.transform.DeadCodeElimination(entries)(rewrite_functions(mutator))

    return _pack
