"""Exact-size storages after TVM's static memory planning (every edgebyoc host build).

``StaticPlanBlockMemory`` reuses a freed storage for a later tensor and, when that tensor is
larger, grows the storage: the storage is then allocated at the larger size for its whole life,
also while it holds the smaller, earlier tensor. Around depth-first macro-kernels this matters:
a small cut tensor read by a macro-kernel can sit in a storage later grown for a large tensor
(MobileOne-S4: a 1.84 MB tensor in a 3.67 MB storage, at the peak); without DFS too
(MobileOne-S4: 44.26 MB -> 40.39 MB).

The other way round, a storage planned for a large tensor and reused for smaller ones stays
at the large size while it holds them (VWW: the channels-last copy of its 96x96x3 input,
110,592 bytes, later held a 36,864-byte tensor at the depth-first build's peak, and the untiled
build's peak was 262,848 bytes instead of 221,568).

``exact_size_storages`` rewrites ``main`` so that every storage has its tensor's size: where a
tensor's size differs from that of the storage the plan gave it (larger or smaller), a new
storage of its own size is allocated right there, and the rest of that storage's tensors use
the new one (tensors of equal size keep sharing it). Tensors of one planned storage never live
at the same time (that is what the plan guarantees), so the old storage is dead when the new
one is allocated: the peak can only go down. Storages whose tensors have non-zero offsets are
left as they are.

``arena_storages`` then (after the timeline is recorded on the exact-size storages) carves the
planned tensors from one arena per run at offsets planned from their lifetimes: TVM's pooled
allocator reuses a freed storage only for a request of the same size, so many storages of many
sizes made a run hold, and its kernels touch, far more memory than the timeline's peak.
"""

from __future__ import annotations

import math
import random

import numpy as np
import tvm
from tvm import relax

from .arena import ArenaTensor, check_arena, plan_arena


def _tensor_bytes(call) -> int | None:
    shape = call.args[2]
    if not isinstance(shape, relax.ShapeExpr) or \
            not all(isinstance(d, tvm.tirx.IntImm) for d in shape.values):
        return None
    dtype = call.args[3].value if hasattr(call.args[3], "value") else call.args[3]
    return math.prod(int(d) for d in shape.values) * np.dtype(str(dtype)).itemsize


def _storage_bytes(call) -> int | None:
    size = call.args[0].values[0] if isinstance(call.args[0], relax.ShapeExpr) else None
    return int(size) if isinstance(size, tvm.tirx.IntImm) else None


def _offset(call) -> int:
    """The byte offset an ``alloc_tensor`` carves its tensor at."""
    return int(getattr(call.args[1], "value", call.args[1]))


def _op(value) -> str:
    return value.op.name if isinstance(value, relax.Call) and isinstance(value.op, tvm.ir.Op) \
        else ""


def exact_size_storages(mod: tvm.IRModule) -> tvm.IRModule:
    """``mod`` with every storage of ``main`` at its tensors' size (see the module docstring)."""
    main = mod["main"]
    bindings = [b for block in main.body.blocks for b in block.bindings]
    storages = {b.var: b.value for b in bindings if _op(b.value) == "relax.memory.alloc_storage"}
    tensors: dict = {}
    for b in bindings:
        if _op(b.value) == "relax.memory.alloc_tensor" and b.value.args[0] in storages:
            tensors.setdefault(b.value.args[0], []).append(b.value)
    splittable = set()
    for storage, calls in tensors.items():
        sizes = [_tensor_bytes(c) for c in calls]
        offsets_zero = all(_offset(c) == 0 for c in calls)
        if None in sizes or not offsets_zero or _storage_bytes(storages[storage]) is None:
            continue
        if len(set(sizes)) > 1:  # grown for a later tensor, or holding smaller ones
            splittable.add(storage)
    if not splittable:
        return mod

    @relax.expr_functor.mutator
    class _Split(relax.PyExprMutator):
        def __init__(self):
            super().__init__(mod)
            self.current: dict = {}  # planned storage -> (storage var in the new function, bytes)

        def visit_var_binding_(self, binding):
            value = binding.value
            if _op(value) == "relax.memory.alloc_storage" and binding.var in splittable:
                return  # allocated at its first tensor, at that tensor's size
            if _op(value) == "relax.memory.alloc_tensor" and value.args[0] in splittable:
                planned = value.args[0]
                need = _tensor_bytes(value)
                storage, size = self.current.get(planned, (None, 0))
                if storage is None or size != need:
                    template = storages[planned]
                    storage = self.builder_.emit(relax.Call(
                        template.op, [relax.ShapeExpr([need])] + list(template.args[1:]),
                        template.attrs, template.ty_args), planned.name)
                    self.current[planned] = (storage, need)
                new = relax.Call(value.op, [storage] + list(value.args[1:]), value.attrs,
                                 value.ty_args)
                self.set_var_remap(binding.var, self.builder_.emit(new, binding.var.name))
                return
            super().visit_var_binding_(binding)

    out = mod.clone()
    out["main"] = _Split().visit_expr(main)
    return out


@tvm.transform.module_pass(opt_level=0, name="edgebyoc.ExactSizeStorages")
def ExactSizeStorages(mod, _ctx):  # noqa: N802 - a pass, named like TVM's
    """``exact_size_storages`` as a pass (right after ``StaticPlanBlockMemory``)."""
    return exact_size_storages(mod)


# -- one arena per device and scope -------------------------------------------------------------

#: offsets of tensors carved from an arena are multiples of this (TVM's ``kAllocAlignment``:
#: the kernels may use aligned vector loads)
ARENA_ALIGNMENT = 64


#: the placement orders ``arena_storages`` tries, keeping the smallest arena: largest first
#: (TFLite Micro's), longest-lived first, last to die first, first written first (on
#: MobileNetV2 at 96x96, width 0.5: 589,824 bytes largest first, 552,960 longest-lived first,
#: the lower bound)
PLACEMENT_ORDERS = (None, lambda t: (t.first - t.last, -t.size, t.name),
                    lambda t: (-t.last, -t.size, t.name), lambda t: (t.first, -t.size, t.name))


#: seeded random placement orders tried after ``PLACEMENT_ORDERS`` while the arena is above
#: the lower bound (ResNet-18: every fixed order 8.03 MB, the seventh shuffle 7.23 MB, the
#: lower bound)
SHUFFLED_ORDERS = 32


def _smallest_arena(tensors: list):
    """The smallest ``plan_arena`` of ``tensors`` over ``PLACEMENT_ORDERS`` and then up to
    ``SHUFFLED_ORDERS`` seeded shuffles, stopping at the lower bound (deterministic)."""
    best = min((plan_arena(tensors, ARENA_ALIGNMENT, order) for order in PLACEMENT_ORDERS),
               key=lambda plan: plan.size_bytes)
    shuffler = random.Random(0)
    for _ in range(SHUFFLED_ORDERS):
        if best.size_bytes <= best.lower_bound_bytes:
            break
        rank = {t.name: shuffler.random() for t in tensors}
        trial = plan_arena(tensors, ARENA_ALIGNMENT, lambda t: rank[t.name])
        if trial.size_bytes < best.size_bytes:
            best = trial
    return best


def _aliased(expr, keys: dict) -> set:
    """The tensors ``expr`` mentions, through the variables ``keys`` maps to what they may
    alias."""
    found: set = set()

    def visit(node):
        if isinstance(node, relax.Var) and node in keys:
            found.update(keys[node])

    relax.analysis.post_order_visit(expr, visit)
    return found


def _arena_tensors(bindings, storages: dict, returned) -> tuple[dict, dict]:
    """(tensor var -> ``ArenaTensor`` of its binding-index lifetime, tensor var -> its
    storage) for the ``alloc_tensor`` bindings carved at offset 0 from a static-size storage of
    ``storages``. A tensor's life ends at the last binding that mentions it or anything
    derived from it: every variable bound to an expression that mentions a tensor is taken to
    alias it (a view, a tuple, an in-place result), so a lifetime is never cut short. Tensors
    the function returns (or that something it returns aliases) are left out."""
    keys: dict = {}  # var -> ids of the tensors it may alias
    first: dict = {}
    last: dict = {}
    carved: dict = {}
    sizes: dict = {}
    for index, (var, value) in enumerate(bindings):
        if _op(value) == "relax.memory.alloc_tensor" and value.args[0] in storages:
            size = _tensor_bytes(value)
            if _offset(value) == 0 and size is not None:
                keys[var] = {var}
                first[var] = last[var] = index
                carved[var], sizes[var] = value.args[0], size
                continue
        mentioned = _aliased(value, keys)
        for key in mentioned:
            last[key] = index
        if mentioned:
            keys[var] = mentioned
    escaped = _aliased(returned, keys)
    items = {var: ArenaTensor(var.name + f"#{i}", sizes[var], first[var], last[var])
             for i, var in enumerate(carved) if var not in escaped}
    return items, {var: carved[var] for var in items}


def _storage_kind(call) -> tuple:
    """What two storages must share to be one arena: the device and the memory scope (the
    dtype an ``alloc_storage`` names is a hint: a storage holds bytes, and tensors of any
    dtype are carved from it)."""
    return tuple(str(arg) for arg in call.args[1:3])


def arena_storages(mod: tvm.IRModule) -> tuple[tvm.IRModule, int]:
    """(``mod`` with the tensors of ``main``'s static storages carved from one arena per
    device and memory scope at offsets planned by their lifetimes, the arenas' bytes).

    TVM's VM allocates each storage from a pool that hands a freed buffer back only to a
    request of the same (page-rounded) size, so storages of many sizes, each freed after its
    last tensor, leave the pool holding far more than the timeline's peak, and every run
    writes its activations over that much memory: with exact-size storages the kernels of a
    MobileNetV2 run touched 32.4 MB (weights included; 23.2 MB with TVM's own storages) for a
    6.02 MB timeline peak, and the run was 5 % slower. One arena per run is allocated once
    (the pool returns it at the next run) and reused by offset, as TFLite Micro's planner
    does (``memory.arena.plan_arena``, the smallest over several placement orders,
    ``_smallest_arena``): the memory a run holds is the arena, and what the kernels touch
    stays within it. Tensors at non-zero offsets already, of data-dependent sizes, or that
    the function returns (or something it returns may alias) keep their storages."""
    main = mod["main"]
    bindings = [(b.var, b.value) for block in main.body.blocks for b in block.bindings]
    storages = {var: value for var, value in bindings
                if _op(value) == "relax.memory.alloc_storage" and _storage_bytes(value)}
    items, storage_of = _arena_tensors(bindings, storages, main.body.body)
    groups: dict[tuple, list] = {}
    for var, storage in storage_of.items():
        groups.setdefault(_storage_kind(storages[storage]), []).append(var)
    plans = {}
    for kind, tensors in groups.items():
        if len(tensors) < 2:
            continue
        listed = [items[var] for var in tensors]
        plan = _smallest_arena(listed)
        check_arena(listed, plan)
        plans[kind] = (plan, set(tensors))
    if not plans:
        return mod, 0
    # a storage whose tensors all moved to an arena is no longer allocated
    moved = {var for _, tensors in plans.values() for var in tensors}
    still_used = {value.args[0] for var, value in bindings
                  if _op(value) == "relax.memory.alloc_tensor" and var not in moved}
    emptied = {storage_of[var] for var in moved} - still_used
    first_storage = {kind: next(var for var, value in bindings if var in storages and
                                _storage_kind(value) == kind) for kind in plans}

    @relax.expr_functor.mutator
    class _Carve(relax.PyExprMutator):
        def __init__(self):
            super().__init__(mod)
            self.arenas: dict = {}

        def visit_var_binding_(self, binding):
            value = binding.value
            if binding.var in storages:
                kind = _storage_kind(value)
                if kind in plans and first_storage[kind].same_as(binding.var):
                    self.arenas[kind] = self.builder_.emit(relax.Call(
                        value.op, [relax.ShapeExpr([plans[kind][0].size_bytes])] +
                        list(value.args[1:]), value.attrs, value.ty_args), "arena")
                if binding.var in emptied:
                    return
            if binding.var in moved:
                kind = _storage_kind(storages[storage_of[binding.var]])
                plan = plans[kind][0]
                offset = plan.offsets[items[binding.var].name]
                carved = self.builder_.emit(relax.Call(
                    value.op, [self.arenas[kind], tvm.tirx.IntImm("int64", offset)] +
                    list(value.args[2:]), value.attrs, value.ty_args), binding.var.name)
                if offset:  # the kernels take tensors at their data pointer (byte_offset 0):
                    # a view whose pointer is advanced (on the CPU no copy is made)
                    carved = self.builder_.emit(relax.op.memory.ensure_zero_offset(carved),
                                                binding.var.name)
                self.set_var_remap(binding.var, carved)
                return
            super().visit_var_binding_(binding)

    out = mod.clone()
    out["main"] = _Carve().visit_expr(main)
    return out, sum(plan.size_bytes for plan, _ in plans.values())


class ActivationArena:
    """A pass (right after the timeline is recorded) that applies ``arena_storages``; the
    bytes of the arenas it planned (0: none) go to ``recorder.arena_bytes`` when a
    ``memory.timeline.TimelineRecorder`` is given."""

    def __init__(self, recorder=None):
        self.recorder = recorder

    def pass_(self) -> tvm.transform.Pass:
        @tvm.transform.module_pass(opt_level=0, name="edgebyoc.ActivationArena")
        def _arena(mod, _ctx):
            mod, planned = arena_storages(mod)
            if self.recorder is not None:
                self.recorder.arena_bytes = planned
            return mod

        return _arena
