"""Activation layouts at region boundaries (BYOC paper, section 3.2; MATCH's network
transformations): a module whose hardware reads its image activations in another layout than
channels-last (``ExecModule.activation_layout``, e.g. DIANA's digital array in channel planes)
receives them so.

The model stays channels-last (NHWC) everywhere else. The layouts a module may ask for
(``LAYOUT_AXES``): ``"NCHW"`` (whole channel planes) and ``"NHCW"`` (rows outermost, then the
row of each channel plane: the planes of one row together, so the first rows of the tensor
are its first bytes, as in NHWC; what lets depth-first streaming write a chain's output over
its input's dead rows). For each offloaded region of such a module, every 4-D tensor argument
computed at run time and a 4-D tensor result cross the boundary in that layout:

- the region function takes parameters in the layout and returns it; inside, it starts with
  ``permute_dims`` back to the NHWC its composites were matched in and ends with one to the
  layout, so the function still computes what it did (the host build and ``region_check``
  run it as is, and a code generator reads its layer through those permutes);
- in ``main``, the arguments are permuted to the layout before the call and the result back
  to NHWC after it, except where a permute would undo another: between two regions of the
  same layout (a region's result feeds the next one directly), at a model input the import
  made NHWC from that layout, at a model output in that layout. What remains runs on the
  host, at the boundary with host operators (``permute_dims`` is a host step of the C
  project), once per tensor however many regions read it; dead permutes are removed.

Constant 4-D arguments (a convolution's weights) keep their layout: weights are the code
generator's business (``CodegenOutput.replaced_constants``).
"""

from __future__ import annotations

from typing import Any

import tvm
from tvm import relax

#: the axes of ``permute_dims`` from NHWC to each layout a module may ask for
#: (``ExecModule.activation_layout``)
LAYOUT_AXES = {"NHWC": (0, 1, 2, 3), "NCHW": (0, 3, 1, 2), "NHCW": (0, 1, 3, 2)}


def to_layout(layout: str) -> tuple[int, ...]:
    """The axes of ``permute_dims`` from NHWC to ``layout``."""
    return LAYOUT_AXES[layout]


def from_layout(layout: str) -> tuple[int, ...]:
    """The axes of ``permute_dims`` from ``layout`` back to NHWC (the inverse permutation)."""
    axes = LAYOUT_AXES[layout]
    return tuple(axes.index(i) for i in range(len(axes)))


def _composes_to_identity(first, then) -> bool:
    """Whether permuting by ``first`` and then by ``then`` gives the tensor back."""
    return all(first[then[i]] == i for i in range(len(then)))


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


def planar_function(func: relax.Function, activations: list[int],
                    layout: str = "NCHW") -> relax.Function:
    """``func`` taking its parameters at ``activations`` (indices) in ``layout`` and returning
    ``layout`` when its result is a 4-D tensor; the same computation (permutes at its start
    and end)."""
    to, back = to_layout(layout), from_layout(layout)
    params = list(func.params)
    new_params = [relax.Var(p.name, _permuted_type(p.ty, to)) if i in activations
                  else p for i, p in enumerate(params)]
    builder = relax.BlockBuilder()
    attrs = dict(func.attrs) if func.attrs else None
    with builder.function("region", new_params, attrs=attrs, pure=func.is_pure):
        inner = {params[i]: _permute(builder, new_params[i], back) for i in activations}
        body = func.bind_params(inner).body
        for block in body.blocks:
            for binding in block.bindings:
                builder.emit_normalized(binding)
        result = body.body
        if _image(result.ty):
            result = _permute(builder, result, to)
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
    """``main`` with the regions in ``planar`` (global symbol -> (indices of its activation
    arguments, their layout)) called in their layout, permute pairs that undo each other
    removed."""

    def __init__(self, mod: tvm.IRModule, planar: dict[str, tuple[list[int], str]]):
        super().__init__(mod)
        self.planar = planar
        # NHWC var -> (the var in a layout it was made from, the axes from NHWC to it)
        self.planar_source: dict[Any, Any] = {}
        self.added: list = []  # the permutes emitted
        # (argument, axes, its permute) of the current block: a tensor two regions read in
        # a layout is permuted once
        self.permuted: list = []

    def visit_dataflow_block_(self, block):
        self.permuted = []  # a block's vars are not seen outside it
        return super().visit_dataflow_block_(block)

    def visit_binding_block_(self, block):
        self.permuted = []
        return super().visit_binding_block_(block)

    def _permuted(self, arg, axes):
        """``arg`` permuted by ``axes``: the permute this block already emitted, else a new
        one."""
        for source, done, var in self.permuted:
            if done == axes and source.same_as(arg):
                return var
        var = _permute(self.builder_, arg, axes, added=self.added)
        self.permuted.append((arg, axes, var))
        return var

    def _undone(self, expr, axes):
        """The tensor ``expr`` permuted by ``axes`` without a new operator: the source of a
        permute that ``axes`` undoes (ours or the model's), else ``None``."""
        source = self.planar_source.get(expr)
        if source is not None and source[1] == axes:
            return source[0]
        bound = self.lookup_binding(expr) if isinstance(expr, relax.Var) else None
        if isinstance(bound, relax.Call) and isinstance(bound.op, tvm.ir.Op) \
                and bound.op.name == "relax.permute_dims" and bound.attrs.axes is not None \
                and _composes_to_identity(tuple(int(a) for a in bound.attrs.axes), axes):
            return bound.args[0]
        return None

    def visit_var_binding_(self, binding):
        value = binding.value
        if isinstance(value, relax.Call) and isinstance(value.op, tvm.ir.Op) \
                and value.op.name == "relax.permute_dims" and value.attrs.axes is not None:
            # the model's own NHWC -> layout (an output in that layout) of a region's result
            axes = tuple(int(a) for a in value.attrs.axes)
            source = self._undone(self.visit_expr(value.args[0]), axes) \
                if axes in LAYOUT_AXES.values() else None
            if source is not None and isinstance(binding.var, relax.DataflowVar):
                self.set_var_remap(binding.var, source)
                return
        if not (isinstance(value, relax.Call) and isinstance(value.op, relax.GlobalVar)
                and value.op.name_hint in self.planar):
            super().visit_var_binding_(binding)
            return
        positions, layout = self.planar[value.op.name_hint]
        to = to_layout(layout)
        args = []
        for i, arg in enumerate(value.args):
            arg = self.visit_expr(arg)
            if i in positions:
                source = self._undone(arg, to)
                arg = source if source is not None else self._permuted(arg, to)
            args.append(arg)
        output = not isinstance(binding.var, relax.DataflowVar)
        callee = self.builder_.get().get_global_var(value.op.name_hint)
        call = relax.Call(callee, args, value.attrs, value.ty_args)
        if not _image(binding.var.ty):
            new = self.builder_.emit_output(call) if output else self.builder_.emit(call)
        else:
            planar = self.builder_.emit(call)
            new = _permute(self.builder_, planar, from_layout(layout), output, self.added)
            self.planar_source[new] = (planar, to)
        self.set_var_remap(binding.var, new)


def planar_boundaries(mod: tvm.IRModule, symbols: "dict[str, str] | set[str]"
                      ) -> tuple[tvm.IRModule, int, int]:
    """(``mod`` with the regions exported as ``symbols`` (global symbol -> its activation
    layout; a set means NCHW) at boundaries in their layout, the layout transforms added on
    the host, the model's own that became unnecessary); see the module docstring. The region
    functions are found by their ``global_symbol``."""
    if not isinstance(symbols, dict):
        symbols = {symbol: "NCHW" for symbol in symbols}
    main, mod_functions = mod["main"], dict(mod.functions)
    by_name, layout_of = {}, {}
    for gv, func in mod.functions.items():
        symbol = func.attrs.get("global_symbol") if func.attrs else None
        if isinstance(func, relax.Function) and symbol is not None and str(symbol) in symbols:
            by_name[gv.name_hint] = gv
            layout_of[gv.name_hint] = symbols[str(symbol)]
    calls: dict[str, relax.Call] = {}

    def visit(node):
        if isinstance(node, relax.Call) and isinstance(node.op, relax.GlobalVar) \
                and node.op.name_hint in by_name:
            calls.setdefault(node.op.name_hint, node)

    relax.analysis.post_order_visit(main.body, visit)
    planar = {name: (activation_arguments(call), layout_of[name])
              for name, call in calls.items()}
    functions = {gv: func for gv, func in mod.functions.items() if gv.name_hint not in planar}
    builder = relax.BlockBuilder(tvm.IRModule(functions, attrs=mod.attrs))
    for name, (positions, layout) in planar.items():  # a new GlobalVar: the new signature
        builder.add_func(planar_function(mod_functions[by_name[name]], positions, layout),
                         name)
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
