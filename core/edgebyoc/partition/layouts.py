"""Activation layouts at region boundaries (BYOC paper, section 3.2; MATCH's network
transformations): a module whose hardware reads its image activations channel-planar
(``ExecModule.activation_layout = "NCHW"``, e.g. DIANA's digital array) receives them so.

The model stays channels-last (NHWC) everywhere else. For each offloaded region of such a
module, every 4-D tensor argument computed at run time and a 4-D tensor result cross the
boundary as NCHW:

- the region function takes NCHW parameters and returns NCHW; inside, it starts with
  ``permute_dims`` back to the NHWC its composites were matched in and ends with one to NCHW,
  so the function still computes what it did (the host build and ``region_check`` run it as
  is, and a code generator reads its layer through those permutes);
- in ``main``, the arguments are permuted to NCHW before the call and the result back to NHWC
  after it, except where a permute would undo another: between two such regions (a region's
  NCHW result feeds the next one directly), at an NCHW model input the import made NHWC, at
  an NCHW model output. What remains runs on the host, at the boundary with host operators
  (``permute_dims`` is a host step of the C project); dead permutes are removed.

Constant 4-D arguments (a convolution's weights) keep their layout: weights are the code
generator's business (``CodegenOutput.replaced_constants``).
"""

from __future__ import annotations

from typing import Any

import tvm
from tvm import relax

#: axes of ``permute_dims`` from NHWC to NCHW and back
TO_NCHW = (0, 3, 1, 2)
TO_NHWC = (0, 2, 3, 1)
#: the layouts a module may ask for (``ExecModule.activation_layout``)
ACTIVATION_LAYOUTS = ("NHWC", "NCHW")


def _image(ty) -> bool:
    """Whether a type is a 4-D tensor of known shape (an image activation)."""
    shape = getattr(ty, "shape", None)
    return isinstance(ty, relax.TensorType) and hasattr(shape, "values") and \
        len(shape.values) == 4


def _permuted_type(ty, axes):
    return relax.TensorType([ty.shape.values[a] for a in axes], ty.dtype)


def _permute(builder: relax.BlockBuilder, expr, axes, output: bool = False, added=None):
    call = relax.op.permute_dims(expr, list(axes))
    var = builder.emit_output(call) if output else builder.emit(call)
    if added is not None:
        added.append(var)
    return var


def planar_function(func: relax.Function, activations: list[int]) -> relax.Function:
    """``func`` taking its parameters at ``activations`` (indices) as NCHW and returning NCHW
    when its result is a 4-D tensor; the same computation (permutes at its start and end)."""
    params = list(func.params)
    new_params = [relax.Var(p.name, _permuted_type(p.ty, TO_NCHW)) if i in activations
                  else p for i, p in enumerate(params)]
    builder = relax.BlockBuilder()
    attrs = dict(func.attrs) if func.attrs else None
    with builder.function("region", new_params, attrs=attrs, pure=func.is_pure):
        inner = {params[i]: _permute(builder, new_params[i], TO_NHWC) for i in activations}
        body = func.bind_params(inner).body
        for block in body.blocks:
            for binding in block.bindings:
                builder.emit_normalized(binding)
        result = body.body
        if _image(result.ty):
            result = _permute(builder, result, TO_NCHW)
        builder.emit_func_output(result)
    new = builder.get()["region"]  # the builder names it: give back the region's symbol
    symbol = func.attrs.get("global_symbol") if func.attrs else None
    return new.with_attr("global_symbol", symbol) if symbol is not None \
        else new.without_attr("global_symbol")


def activation_arguments(call: relax.Call) -> list[int]:
    """The indices of a region call's 4-D arguments computed at run time."""
    return [i for i, arg in enumerate(call.args)
            if not isinstance(arg, tvm.ir.expr.Constant) and _image(arg.ty)]


@relax.expr_functor.mutator
class _BoundaryPermutes(relax.PyExprMutator):
    """``main`` with NCHW at the boundaries of the regions in ``planar`` (global symbol ->
    indices of its NCHW arguments), permute pairs between two of them removed."""

    def __init__(self, mod: tvm.IRModule, planar: dict[str, list[int]]):
        super().__init__(mod)
        self.planar = planar
        self.planar_source: dict[Any, Any] = {}  # NHWC var -> the NCHW var it was made from
        self.added: list = []  # the permutes emitted

    def _undone(self, expr, axes):
        """The tensor ``expr`` permuted back by ``axes`` without a new operator: the source of
        a permute by the inverse axes (ours or the model's), else ``None``."""
        if axes == TO_NCHW and expr in self.planar_source:
            return self.planar_source[expr]
        bound = self.lookup_binding(expr) if isinstance(expr, relax.Var) else None
        if isinstance(bound, relax.Call) and isinstance(bound.op, tvm.ir.Op) \
                and bound.op.name == "relax.permute_dims" and bound.attrs.axes is not None \
                and tuple(int(a) for a in bound.attrs.axes) == (TO_NHWC if axes == TO_NCHW
                                                                 else TO_NCHW):
            return bound.args[0]
        return None

    def visit_var_binding_(self, binding):
        value = binding.value
        if isinstance(value, relax.Call) and isinstance(value.op, tvm.ir.Op) \
                and value.op.name == "relax.permute_dims" and value.attrs.axes is not None \
                and tuple(int(a) for a in value.attrs.axes) == TO_NCHW:
            # the model's own NHWC -> NCHW (an NCHW output) of a planar region's result
            source = self._undone(self.visit_expr(value.args[0]), TO_NCHW)
            if source is not None and isinstance(binding.var, relax.DataflowVar):
                self.set_var_remap(binding.var, source)
                return
        if not (isinstance(value, relax.Call) and isinstance(value.op, relax.GlobalVar)
                and value.op.name_hint in self.planar):
            super().visit_var_binding_(binding)
            return
        positions = self.planar[value.op.name_hint]
        args = []
        for i, arg in enumerate(value.args):
            arg = self.visit_expr(arg)
            if i in positions:
                source = self._undone(arg, TO_NCHW)
                arg = source if source is not None else _permute(self.builder_, arg, TO_NCHW,
                                                                 added=self.added)
            args.append(arg)
        output = not isinstance(binding.var, relax.DataflowVar)
        callee = self.builder_.get().get_global_var(value.op.name_hint)
        call = relax.Call(callee, args, value.attrs, value.ty_args)
        if not _image(binding.var.ty):
            new = self.builder_.emit_output(call) if output else self.builder_.emit(call)
        else:
            planar = self.builder_.emit(call)
            new = _permute(self.builder_, planar, TO_NHWC, output, self.added)
            self.planar_source[new] = planar
        self.set_var_remap(binding.var, new)


def planar_boundaries(mod: tvm.IRModule, symbols: set[str]) -> tuple[tvm.IRModule, int, int]:
    """(``mod`` with the regions exported as ``symbols`` at NCHW boundaries, the layout
    transforms added on the host, the model's own that became unnecessary); see the module
    docstring. The region functions are found by their ``global_symbol``."""
    main, mod_functions = mod["main"], dict(mod.functions)
    by_name = {}
    for gv, func in mod.functions.items():
        symbol = func.attrs.get("global_symbol") if func.attrs else None
        if isinstance(func, relax.Function) and symbol is not None and str(symbol) in symbols:
            by_name[gv.name_hint] = gv
    calls: dict[str, relax.Call] = {}

    def visit(node):
        if isinstance(node, relax.Call) and isinstance(node.op, relax.GlobalVar) \
                and node.op.name_hint in by_name:
            calls.setdefault(node.op.name_hint, node)

    relax.analysis.post_order_visit(main.body, visit)
    planar = {name: activation_arguments(call) for name, call in calls.items()}
    functions = {gv: func for gv, func in mod.functions.items() if gv.name_hint not in planar}
    builder = relax.BlockBuilder(tvm.IRModule(functions, attrs=mod.attrs))
    for name, positions in planar.items():  # a new GlobalVar: its type is the new signature
        builder.add_func(planar_function(mod_functions[by_name[name]], positions), name)
    mod = builder.get()
    mutator = _BoundaryPermutes(mod, planar)
    mod["main"] = mutator.visit_expr(main)
    mod = relax.transform.DeadCodeElimination(["main"])(mod)
    bound = {b.var for block in mod["main"].body.blocks for b in block.bindings}
    added = sum(1 for var in mutator.added if var in bound)
    removed = _permutes(main) - (_permutes(mod["main"]) - added)
    return mod, added, removed


def _permutes(main: relax.Function) -> int:
    """The ``permute_dims`` calls in ``main``."""
    count = 0

    def visit(node):
        nonlocal count
        if isinstance(node, relax.Call) and isinstance(node.op, tvm.ir.Op) \
                and node.op.name == "relax.permute_dims":
            count += 1

    relax.analysis.post_order_visit(main.body, visit)
    return count
