"""Sliding macro-kernels in the Relax module: each fused conv chain the plan slides becomes a
``call_tir`` of its sliding-window PrimFunc (``sliding.sliding_primfunc``), its constant
weights re-laid out in blocks, its row schedule a constant. Where the tensors around a kernel
are channels-last it reads them (and writes its output) in NHWC itself: the transposes the
layout conversion left around it then cancel (``rewrites.inverse_permutes``). A parallel
kernel calls the spin barrier, whose C source the built module then carries among its external
modules (``spin_barrier.with_sync_library``), compiled and linked into the host library with
TVM's code."""

from __future__ import annotations

from typing import Any

import tvm
from tvm import relax

from ..rewrites import permute_axes
from ..schedules import simd_lanes, vector_registers
from .dfs import Tile
from .sliding import nhwc_capable, sliding_primfunc
from .sliding_rows import AVX512, blocked_weight
from .spin_barrier import SYNC_ATTR

#: the transposes the host build's layout conversion puts before and after an NCHW operator
TO_NCHW, TO_NHWC = [0, 3, 1, 2], [0, 2, 3, 1]


@relax.expr_functor.mutator
class _CallTir(relax.PyExprMutator):
    """Calls of the fused chain functions in ``table`` (name -> (PrimFunc global var,
    ``SlidingKernel``)) become ``call_tir`` of their PrimFunc, blocked weights re-laid out;
    the arguments a kernel reads in NHWC are transposed to it, and an NHWC result back to
    NCHW (each transpose then meets its inverse: ``rewrites.inverse_permutes``)."""

    def __init__(self, mod, table):
        super().__init__(mod)
        self.table = table

    def visit_call_(self, call):
        call = super().visit_call_(call)
        if not (isinstance(call.op, tvm.ir.GlobalVar) and call.op.name_hint in self.table):
            return call
        prim, kernel = self.table[call.op.name_hint]
        args = [relax.const(blocked_weight(arg.value.numpy(), kernel.blocked[i]))
                if i in kernel.blocked else
                self.builder_.emit(relax.op.permute_dims(arg, TO_NHWC))
                if i in kernel.nhwc_params else arg
                for i, arg in enumerate(call.args)] + [relax.const(kernel.rows)]
        if not kernel.nhwc_output:
            return relax.call_tir(prim, relax.Tuple(args), call.ty)
        n, c, h, w = call.ty.shape.values
        result = self.builder_.emit(relax.call_tir(
            prim, relax.Tuple(args), relax.TensorType([n, h, w, c], call.ty.dtype)))
        return relax.op.permute_dims(result, TO_NCHW)


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


def _nhwc_layouts(main: relax.Function, capable: dict[str, frozenset[int]]
                  ) -> dict[str, tuple[frozenset[int], bool]]:
    """Per sliding kernel (``capable``: name -> the parameters it can read in NHWC): the
    parameters to read in NHWC (a transpose of an NHWC tensor, or the NHWC output of another
    kernel) and whether to write its output in NHWC (every reader transposes it to NHWC or is
    a kernel reading it in NHWC), the same at every call."""
    values = {b.var: b.value for block in main.body.blocks for b in block.bindings}
    calls = {var: value for var, value in values.items() if isinstance(value, relax.Call)
             and isinstance(value.op, tvm.ir.GlobalVar) and value.op.name_hint in capable}
    readers: dict[Any, list[tuple[Any, int]]] = {var: [] for var in calls}

    def visit(expr):
        if isinstance(expr, relax.Call):
            for position, arg in enumerate(expr.args):
                if arg in readers:
                    readers[arg].append((expr, position))

    relax.analysis.post_order_visit(main.body, visit)

    def reads_nhwc(reader, position) -> bool:
        if permute_axes(reader) == TO_NHWC:
            return True
        return isinstance(reader.op, tvm.ir.GlobalVar) and \
            position in capable.get(reader.op.name_hint, frozenset())

    layouts: dict[str, tuple[frozenset[int], bool]] = {}
    for var, call in calls.items():
        name = call.op.name_hint
        nhwc_out = bool(readers[var]) and all(reads_nhwc(r, p) for r, p in readers[var])
        params = frozenset(i for i in capable[name] if i < len(call.args) and (
            permute_axes(values.get(call.args[i])) == TO_NCHW or (
                call.args[i] in calls and all(reads_nhwc(r, p)
                                              for r, p in readers[call.args[i]]))))
        if name in layouts:  # called again: what every call allows
            params, nhwc_out = params & layouts[name][0], nhwc_out and layouts[name][1]
        layouts[name] = (params, nhwc_out)
    return layouts


def lower_sliding_kernels(mod: tvm.IRModule, plan, prefix: str,
                          target: tvm.target.Target | None = None) -> tvm.IRModule:
    """Replace each fused macro-kernel whose tile is sliding (composite ``<prefix><index>``)
    by its sliding-window PrimFunc, its register tiles sized for ``target``'s vector
    registers (AVX-512's when ``None``), in NHWC where the tensors around it are
    (``_nhwc_layouts``; ``rewrites.inverse_permutes`` then removes the transposes). A chain
    ``sliding_primfunc`` declines keeps its fused function and becomes a tiled kernel of the
    same band (the plan's tile changes, so its re-computation is counted); the depth-first
    rule then schedules it."""
    wanted = {f"{prefix}{index}": kernel for index, kernel in enumerate(plan.kernels)
              if kernel.tile.sliding}
    chains = {gv.name_hint: (gv, func, wanted[str(func.attrs["Composite"])])
              for gv, func in mod.functions.items()
              if isinstance(func, relax.Function) and func.attrs and "Composite" in func.attrs
              and str(func.attrs["Composite"]) in wanted}
    constants = _constant_params(mod["main"])
    layouts = _nhwc_layouts(mod["main"], {name: nhwc_capable(func)
                                          for name, (_, func, _) in chains.items()})
    simd = AVX512 if target is None else (simd_lanes(target), vector_registers(target))
    table = {}
    builder = relax.BlockBuilder(mod)  # add_func gives the PrimFuncs typed global vars
    for name, (gv, func, kernel) in chains.items():
        params, nhwc_output = layouts.get(name, (frozenset(), False))
        lowered = sliding_primfunc(func, constants.get(name, frozenset()), params, nhwc_output,
                                   simd, kernel.tile.rows)
        if lowered is None:  # tiled in row bands instead, and counted so (re-computation)
            kernel.tile = Tile(kernel.tile.rows, kernel.tile.cols)
            continue
        # the fused function's name lists every op of the chain: the composite name is short
        symbol = f"{func.attrs['Composite']}_{len(kernel.units)}conv_sliding"
        prim = lowered.prim.with_attr("global_symbol", symbol)
        if lowered.synchronized:
            prim = prim.with_attr(SYNC_ATTR, True)
        table[name] = (builder.add_func(prim, symbol), lowered)
    if not table:
        return mod
    mod = builder.get()
    # the bindings the rewrite left unused (a fused call, a transpose only it read): removed
    mod["main"] = relax.analysis.remove_all_unused(_CallTir(mod, table).visit_expr(mod["main"]))
    return tvm.IRModule({gv: func for gv, func in mod.functions.items()
                         if gv.name_hint not in table}, attrs=mod.attrs)

