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
"""

from __future__ import annotations

import math

import numpy as np
import tvm
from tvm import relax


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
        offsets_zero = all(int(getattr(c.args[1], "value", c.args[1])) == 0 for c in calls)
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
