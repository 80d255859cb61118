"""Run-time bound checks in every host kernel: the ``safe`` build (``--safe``).

TVM 0.27's own switch, ``tirx.instrument_bound_checkers``, instruments nothing on the s_tir
path the host build takes: it reads buffer-bound annotations only TE's old lowering wrote
(apache/tvm#17311). So the safe build checks on its own: ``instrument_bounds`` rewrites every
PrimFunc, after scheduling and before lowering, so that each buffer store is preceded by an
assertion that its indices, and the indices of every load its value reads, lie inside their
buffers' shapes. An index the arithmetic analyzer proves in range (a loop or block variable
over its extent, the overwhelming majority) gets no check; what remains are indices computed
from data, such as a gather's, and the checks of loads inside ``if_then_else`` hold only where
that branch is taken (padding reads). A failed check ends the run with "index out of bounds"
before the access; nothing is read or written outside a tensor.

Example: ``B[v_i, v_j] = A[I[v_i], v_j]`` (``A`` 4x3) becomes::

    assert 0 <= I[v_i] and I[v_i] < 4, "... index out of bounds ..."
    B[v_i, v_j] = A[I[v_i], v_j]
"""

from __future__ import annotations

import contextlib
from typing import Any

import tvm
import tvm.sym
import tvm_ffi
from tvm import tirx

__all__ = ["instrument_bounds"]

_IF_THEN_ELSE = tvm.ir.Op.get("prim.if_then_else")


class _Checks:
    """The bound conditions of one function: loop and block variables bound in an analyzer."""

    def __init__(self, name: str):
        self.name = name
        self.analyzer = tvm.sym.Analyzer()
        self.added = 0

    def bind_loops(self, stmt) -> None:
        if isinstance(stmt, tirx.For):
            self.analyzer.bind(stmt.loop_var, tvm.ir.Range.from_min_extent(stmt.min, stmt.extent))
        elif isinstance(stmt, tvm.s_tir.SBlock):
            for iter_var in stmt.iter_vars:
                self.analyzer.bind(iter_var.var, iter_var.dom)

    def inside(self, buffer, indices) -> list:
        """Conditions (not provably true) that ``indices`` lie inside ``buffer`` (a buffer
        variable with a shape)."""
        conditions = []
        shape = getattr(buffer, "shape", None)
        if shape is None or len(indices) != len(shape):
            return conditions
        for index, extent in zip(indices, shape):
            dtype = str(getattr(index, "ty", ""))
            if isinstance(index, tirx.Ramp) or not dtype.startswith(("int", "uint")):
                continue
            condition = tirx.And(index >= tirx.const(0, dtype),
                                 index < tirx.Cast(dtype, extent))
            if not self.analyzer.can_prove(condition):
                conditions.append(condition)
        return conditions

    def loads(self, expr) -> list:
        """Conditions for every load of ``expr``, each under the branch conditions it sits
        in (``if_then_else`` reads only the branch it takes)."""
        found: list = []
        guards: list = []

        def on_call(call, visitor):
            if not call.op.same_as(_IF_THEN_ELSE):
                return visitor.default_visit(call)
            condition, then_value, else_value = call.args
            visitor.visit(condition)
            for guard, branch in ((condition, then_value), (tirx.Not(condition), else_value)):
                guards.append(guard)
                visitor.visit(branch)
                guards.pop()
            return None

        def on_load(load, visitor):
            with contextlib.ExitStack() as scopes:  # proved where the branch is taken
                for guard in guards:
                    scopes.enter_context(self.analyzer.constraint_scope(guard))
                unproven = self.inside(load.source, load.indices)
            for condition in unproven:
                for guard in reversed(guards):
                    condition = tirx.Or(tirx.Not(guard), condition)
                found.append(condition)
            return visitor.default_visit(load)

        tvm_ffi.structural_visit(expr, [(tvm.ir.expr.Call, on_call),
                                        (tvm.ir.expr.TensorLoad, on_load)])
        return found

    def guarded(self, store) -> Any:
        conditions = self.inside(store.buffer, store.indices) + self.loads(store.value) + \
            [c for index in store.indices for c in self.loads(index)]
        if not conditions:
            return store
        condition = conditions[0]
        for more in conditions[1:]:
            condition = tirx.And(condition, more)
        self.added += 1
        message = (f"index out of bounds in kernel {self.name} (storing to "
                   f"{store.buffer.name}): refusing to read or write outside a tensor")
        # the FFI constructor directly: 0.27's Python wrapper passes its arguments swapped
        check = tvm.tirx._ffi_api.AssertStmt(condition, tvm.ir.StringImm("RuntimeError"),
                                             [tvm.ir.StringImm(message)], None)
        return tirx.SeqStmt([check, store])


def _instrument(function, name: str):
    checks = _Checks(name)

    def on_scope(stmt, mutator):
        checks.bind_loops(stmt)
        return mutator.default_mutate(stmt)

    def on_store(store, mutator):
        return checks.guarded(store)

    body = tvm_ffi.structural_mutate(function.body, [
        ((tirx.For, tvm.s_tir.SBlock), on_scope), (tirx.BufferStore, on_store)])
    return function.with_body(body) if checks.added else function, checks.added


@tvm.transform.module_pass(opt_level=0, name="edgebyoc.InstrumentBounds")
def instrument_bounds(mod, _ctx):
    """Every PrimFunc of ``mod`` with its unproven accesses checked (see the module
    docstring)."""
    updated = {}
    for gv, function in mod.functions.items():
        if isinstance(function, tirx.PrimFunc):
            instrumented, added = _instrument(function, gv.name_hint)
            if added:
                updated[gv] = instrumented
    if not updated:
        return mod
    mod = tvm.IRModule(dict(mod.functions), attrs=mod.attrs)
    for gv, function in updated.items():
        mod[gv] = function
    return mod
