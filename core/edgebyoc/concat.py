"""Concatenations on the host as one copy loop per input, with their element-wise epilogue.

TVM lowers ``concat`` to one loop over the output whose every element selects its input by a
chain of ``if_then_else`` on the concatenation axis: a branch per input per element, which
LLVM cannot vectorise. DenseNet concatenates up to 32 tensors before each of its 58 dense
layers and normalises the result (batch norm, then ReLU): those kernels were 36.5 of the
85 ms DenseNet-121 spent in kernels on a Zen 3 (onnxruntime's concatenations: 8 ms).

``concat_copies`` replaces each ``concat`` of tensors with static shapes (in the host build's
Relax functions; offloaded and composite functions are left alone, and so are models whose
tensors have data-dependent extents: a detector's post-processing) by a call of
``concat_kernel``: the output's rows (the axes before the concatenation axis) in parallel, and
in each row one loop per input copying its slice, contiguous and vectorisable. Element-wise
operators after the concatenation whose other operand is a constant (the batch norm's
subtract / divide / multiply / add, ReLU, a clamp's minimum and maximum: ``EPILOGUE_OPERATORS``)
are computed in the same loops, each input's elements with the constants' slice at its place,
when each intermediate result has no other use: one pass over the memory instead of a select
per element and a second kernel. The result is the same tensor, element for element (the same
operators, in the same order, on the same values).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import tvm
from tvm import relax, tirx
from tvm.script.ir_builder import IRBuilder
from tvm.tirx.script import builder as T

from .relax_info import static_shape
from .rewrites import rewrite_functions
from .schedules import MIN_PARALLEL_ROWS, PARALLEL_ELEMENTS

__all__ = ["EPILOGUE_OPERATORS", "EpilogueStep", "concat_copies", "concat_kernel"]

#: Relax operators computed in a concatenation's copy loops, as TIR on (value, constant);
#: ``divide`` only for floats (an integer division's rounding is the operator's own)
EPILOGUE_OPERATORS = {
    "relax.add": lambda a, b: a + b,
    "relax.subtract": lambda a, b: a - b,
    "relax.multiply": lambda a, b: a * b,
    "relax.divide": lambda a, b: a / b,
    "relax.maximum": tirx.max,
    "relax.minimum": tirx.min,
}
#: operators of one tensor computed in the copy loops
UNARY_EPILOGUE_OPERATORS = {"relax.nn.relu"}


@dataclass(frozen=True)
class EpilogueStep:
    """One element-wise operator after a concatenation: ``operator`` (a key of
    ``EPILOGUE_OPERATORS`` or ``UNARY_EPILOGUE_OPERATORS``), the shape of its constant operand
    (``None`` for a unary operator), and whether the constant is its first operand
    (``c - x``)."""

    operator: str
    constant_shape: tuple[int, ...] | None = None
    constant_first: bool = False


def _int64(value: int) -> tirx.IntImm:
    return tirx.IntImm("int64", value)


def _unravel(index, extents: list[int]) -> list:
    """The indices along ``extents`` of the flat ``index`` (row-major); the outermost axis of
    more than one element takes the quotient as it is (it is in range)."""
    outermost = next((axis for axis, extent in enumerate(extents) if extent != 1), None)
    indices = []
    for axis in reversed(range(len(extents))):
        if extents[axis] == 1:
            indices.append(_int64(0))
            continue
        if axis == outermost:
            indices.append(index)
            continue
        indices.append(tirx.floormod(index, extents[axis]))
        index = tirx.floordiv(index, extents[axis])
    return indices[::-1]


def _buffer_argument(name: str, shape, dtype: str):
    return T.arg(name, T.buffer([_int64(e) for e in shape], dtype, buffer_name=name))


def _broadcast_index(shape: tuple[int, ...], output_index: list) -> list:
    """The index into a constant of ``shape`` (numpy broadcasting against the output) that
    pairs with the output element at ``output_index``."""
    offset = len(output_index) - len(shape)
    return [_int64(0) if extent == 1 else output_index[offset + axis]
            for axis, extent in enumerate(shape)]


def _epilogue_value(value, dtype: str, steps, constants, output_index):
    """``value`` (the element at ``output_index``) through the epilogue ``steps``, each with
    its constant's buffer (``None`` for a unary step)."""
    for step, constant in zip(steps, constants):
        if step.constant_shape is None:  # ReLU
            value = tirx.max(value, tirx.const(0, dtype))
            continue
        operand = constant[tuple(_broadcast_index(step.constant_shape, output_index))]
        first, second = (operand, value) if step.constant_first else (value, operand)
        value = EPILOGUE_OPERATORS[step.operator](first, second)
    return value


def concat_kernel(part_shapes: list[tuple[int, ...]], axis: int, dtype: str,
                  epilogue: tuple[EpilogueStep, ...] = ()) -> tirx.PrimFunc:
    """The PrimFunc concatenating tensors of ``part_shapes`` along ``axis``, then applying
    ``epilogue`` to every element.

    Arguments: the parts, then one constant per epilogue step that has one (in step order),
    then the output. The output's rows (the axes before ``axis``) run in parallel when there
    are at least ``MIN_PARALLEL_ROWS`` of them and ``PARALLEL_ELEMENTS`` elements; each row
    copies the parts in turn, each part's slice one loop.

    >>> f = concat_kernel([(1, 4, 4, 8), (1, 4, 4, 16)], 3, "float32")
    >>> [(p.name, [int(e) for e in p.shape]) for p in f.params]
    [('part0', [1, 4, 4, 8]), ('part1', [1, 4, 4, 16]), ('concatenated', [1, 4, 4, 24])]
    """
    shape = list(part_shapes[0])
    shape[axis] = sum(part[axis] for part in part_shapes)
    rows, row_length = math.prod(shape[:axis]), math.prod(shape[axis:])
    parallel = rows >= MIN_PARALLEL_ROWS and rows * row_length >= PARALLEL_ELEMENTS
    with IRBuilder() as builder:
        with T.prim_func(private=True):
            T.func_name("concat_parts")
            T.func_attr({"tir.noalias": True, "tirx.is_scheduled": True})
            parts = [_buffer_argument(f"part{k}", part, dtype)
                     for k, part in enumerate(part_shapes)]
            constants = [_buffer_argument(f"constant{k}", step.constant_shape, dtype)
                         if step.constant_shape is not None else None
                         for k, step in enumerate(epilogue)]
            output = _buffer_argument("concatenated", shape, dtype)
            loop = T.parallel if parallel else T.serial
            with loop(_int64(0), _int64(rows)) as row:
                leading = _unravel(row, shape[:axis])
                offset = 0
                for part, part_shape in zip(parts, part_shapes):
                    if not math.prod(part_shape):  # an empty part: nothing to copy
                        continue
                    with T.serial(_int64(0), _int64(math.prod(part_shape[axis:]))) as element:
                        trailing = _unravel(element, list(part_shape[axis:]))
                        placed = leading + [trailing[0] + offset] + trailing[1:]
                        value = _epilogue_value(part[tuple(leading + trailing)], dtype, epilogue,
                                                constants, placed)
                        T.buffer_store(output, value, placed)
                    offset += part_shape[axis]
    return builder.get()


def _static_shape(expr) -> tuple[int, ...] | None:
    shape = static_shape(expr.ty)
    return None if shape is None else tuple(shape)


def _operator_name(expr) -> str | None:
    if isinstance(expr, relax.Call) and isinstance(expr.op, tvm.ir.Op):
        return expr.op.name
    return None


@dataclass
class _Concatenation:
    """A ``concat`` to replace: its parts, axis and dtype, its epilogue (steps and their
    constants) and the call whose result the kernel gives (the last step's, or the
    ``concat`` itself)."""

    parts: list
    axis: int
    dtype: str
    shape: tuple[int, ...]
    steps: list[EpilogueStep]
    constants: list
    last_call: relax.Call


def _epilogue_step(call, value_var, shape, dtype):
    """``call`` as the next step after ``value_var`` (a tensor of ``shape``), with its constant,
    or ``None`` where it is not an epilogue operator of that value."""
    name = _operator_name(call)
    if _static_shape(call) != shape or str(call.ty.dtype) != dtype:
        return None
    if name in UNARY_EPILOGUE_OPERATORS and call.args[0].same_as(value_var):
        return EpilogueStep(name), None
    if name not in EPILOGUE_OPERATORS or len(call.args) != 2 or \
            (name == "relax.divide" and not dtype.startswith(("float", "bfloat"))):
        return None
    first, second = call.args
    for constant, other, constant_first in ((second, first, False), (first, second, True)):
        if isinstance(constant, tvm.ir.expr.Constant) and other.same_as(value_var) and \
                str(constant.ty.dtype) == dtype:
            constant_shape = _static_shape(constant)
            if constant_shape is not None and len(constant_shape) <= len(shape):
                return EpilogueStep(name, constant_shape, constant_first), constant
    return None


def _concatenations(block) -> list[_Concatenation]:
    """The static ``concat`` calls of a dataflow block with the epilogue each can take: the
    element-wise steps after it whose every intermediate has no other use."""
    uses: dict = {}
    users: dict = {}

    def count(node):
        if isinstance(node, relax.Var):
            uses[node] = uses.get(node, 0) + 1

    for binding in block.bindings:
        value = binding.value
        relax.analysis.post_order_visit(value, count)
        if isinstance(value, relax.Call):
            for argument in value.args:
                if isinstance(argument, relax.Var):
                    users.setdefault(argument, []).append(binding)
    found = []
    for binding in block.bindings:
        call = binding.value
        if _operator_name(call) != "relax.concat" or not isinstance(call.args[0], relax.Tuple):
            continue
        shape, parts = _static_shape(call), list(call.args[0].fields)
        if shape is None or not math.prod(shape) or len(parts) < 2 or \
                any(_static_shape(p) is None for p in parts):
            continue
        dtype = str(call.ty.dtype)
        concatenation = _Concatenation(parts, int(call.attrs.axis) % len(shape), dtype, shape,
                                       [], [], call)
        value_var = binding.var
        while uses.get(value_var, 0) == 1 and len(users.get(value_var, [])) == 1:
            user = users[value_var][0]
            step = _epilogue_step(user.value, value_var, shape, dtype)
            if step is None:
                break
            concatenation.steps.append(step[0])
            if step[1] is not None:
                concatenation.constants.append(step[1])
            concatenation.last_call, value_var = user.value, user.var
        found.append(concatenation)
    return found


def _calls(mod: tvm.IRModule) -> list:
    calls: list = []
    for func in mod.functions.values():
        if isinstance(func, relax.Function):
            relax.analysis.post_order_visit(
                func.body, lambda node: calls.append(node) if isinstance(node, relax.Call)
                else None)
    return calls


def _data_dependent(call) -> bool:
    """Whether ``call``'s result is a tensor of unknown or symbolic extents."""
    return isinstance(call.ty, relax.TensorType) and _static_shape(call) is None


@relax.expr_functor.mutator
class _ConcatCopies(relax.PyExprMutator):
    def __init__(self, mod: tvm.IRModule):
        super().__init__(mod)
        self.replaced: dict = {}  # the last call of each concatenation -> _Concatenation
        for func in mod.functions.values():
            if isinstance(func, relax.Function) and isinstance(func.body, relax.SeqExpr) \
                    and not (func.attrs and ("Composite" in func.attrs
                                             or "Codegen" in func.attrs)):
                for block in func.body.blocks:
                    if isinstance(block, relax.DataflowBlock):
                        for concatenation in _concatenations(block):
                            self.replaced[concatenation.last_call] = concatenation

    def visit_call_(self, call):
        concatenation = self.replaced.get(call)
        if concatenation is None:
            return super().visit_call_(call)
        kernel = concat_kernel([_static_shape(p) for p in concatenation.parts],
                               concatenation.axis, concatenation.dtype,
                               tuple(concatenation.steps))
        kernel_var = self.builder_.add_func(kernel, "concat_parts")
        arguments = [self.visit_expr(p) for p in concatenation.parts] + concatenation.constants
        return relax.call_tir(kernel_var, arguments, relax.TensorType(
            concatenation.shape, concatenation.dtype))


@tvm.transform.module_pass(opt_level=0, name="edgebyoc.ConcatCopies")
def concat_copies(mod, _ctx):
    """Every static ``concat`` of the module's own Relax functions, with the element-wise
    epilogue it can take, as a call of ``concat_kernel`` (see the module docstring); the
    intermediates left without use are removed."""
    calls = _calls(mod)
    if not any(_operator_name(node) == "relax.concat" for node in calls):
        return mod
    if any(_data_dependent(node) for node in calls):
        # a detector's post-processing (symbolic extents, TVM's NMS): left to TVM's lowering,
        # whose later passes expect its bindings as the importer wrote them
        return mod
    # a batch norm's decomposition leaves its result as a tuple's field: a plain variable
    mod = relax.transform.DeadCodeElimination()(relax.transform.CanonicalizeBindings()(mod))
    mutator = _ConcatCopies(mod)
    if not mutator.replaced:
        return mod
    return relax.transform.DeadCodeElimination()(rewrite_functions(mutator))
