"""The metadata module: every model constant owned once by the artifact (BYOC paper, 3.4).

After the host pipeline has folded every compile-time transformation into the constants (layout
changes, quantization of weights), ``lift_constants_pass`` turns each tensor constant of ``main``
into a parameter of ``main``. The constants then live in one file, ``constants.bin`` (each entry
64-byte aligned), described by a table (name, dtype, shape, offset, the sub-modules that read
it) in the manifest. At load time every entry is read once into a pre-allocated runtime tensor
and handed to the host module and to every accelerator sub-module that reads it: no sub-module
embeds a copy.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from math import prod
from pathlib import Path
from typing import Any

import numpy as np
import tvm
from tvm import relax

CONSTANTS_FILE = "constants.bin"
ALIGNMENT = 64
#: Constants with fewer elements stay in the code (scalars of clips, epsilons, ...); empty
#: ones are lifted too: TVM 0.27 writes a zero-size constant into an executable but cannot
#: read it back (a detector's "no boxes" branch returns one)
MIN_LIFTED_ELEMENTS = 2


@dataclass
class ConstantEntry:
    name: str
    array: np.ndarray
    users: list[str] = field(default_factory=list)


class ConstantTable:
    """The lifted constants of one compile, in ``main``'s parameter order after the inputs."""

    def __init__(self):
        self.entries: list[ConstantEntry] = []

    def __len__(self) -> int:
        return len(self.entries)

    @property
    def nbytes(self) -> int:
        return sum(e.array.nbytes for e in self.entries)

    def arrays(self) -> dict[str, np.ndarray]:
        return {e.name: e.array for e in self.entries}

    def lift_pass(self) -> tvm.transform.Pass:
        """A module pass lifting ``main``'s tensor constants to parameters, recorded here."""

        @tvm.transform.module_pass(opt_level=0, name="edgebyoc.LiftConstants")
        def _lift(mod: tvm.IRModule, _ctx) -> tvm.IRModule:
            lifter = _Lifter(mod)
            main = mod["main"]
            body = lifter.visit_expr(main.body)
            params = list(main.params) + [var for var, _ in lifter.lifted]
            mod["main"] = relax.Function(params, body, main.ret_ty, main.is_pure, main.attrs)
            self.entries = [ConstantEntry(var.name, const.value.numpy())
                            for var, const in lifter.lifted]
            self._record_users(mod["main"], [var for var, _ in lifter.lifted])
            return mod

        return _lift

    def _record_users(self, main, lifted_vars) -> None:
        index = {var: i for i, var in enumerate(lifted_vars)}

        def visit(node):
            if not isinstance(node, relax.Call) or not node.args:
                return
            callee = node.args[0]
            if isinstance(callee, tvm.ir.GlobalVar):
                user = f"host:{callee.name_hint}"
            elif isinstance(callee, relax.ExternFunc):
                user = f"external:{callee.global_symbol}"
            else:
                return
            for arg in _flatten_args(node.args[1:]):
                if isinstance(arg, relax.Var) and arg in index:
                    users = self.entries[index[arg]].users
                    if user not in users:
                        users.append(user)

        relax.analysis.post_order_visit(main.body, visit)

    def write(self, directory: Path) -> list[dict[str, Any]]:
        """Write ``constants.bin`` into ``directory``; returns the manifest's table."""
        table, offset = [], 0
        with open(directory / CONSTANTS_FILE, "wb") as handle:
            for entry in self.entries:
                padding = (-offset) % ALIGNMENT
                handle.write(b"\0" * padding)
                offset += padding
                data = np.ascontiguousarray(entry.array)
                handle.write(data.tobytes())
                table.append({"name": entry.name, "dtype": str(data.dtype),
                              "shape": list(data.shape), "offset": offset,
                              "nbytes": int(data.nbytes), "users": entry.users})
                offset += data.nbytes
        return table


def _flatten_args(args) -> list:
    flat = []
    for arg in args:
        if isinstance(arg, relax.Tuple):
            flat.extend(_flatten_args(arg.fields))
        else:
            flat.append(arg)
    return flat


@relax.expr_functor.mutator
class _Lifter(relax.PyExprMutator):
    def __init__(self, mod: tvm.IRModule):
        super().__init__(mod)
        self.lifted: list[tuple[relax.Var, Any]] = []
        self._seen: dict[Any, relax.Var] = {}

    def visit_generic_const_(self, const):
        ty = const.ty
        shape = getattr(ty, "shape", None)
        if shape is None or not hasattr(shape, "values") or \
                0 < prod(int(d) for d in shape.values) < MIN_LIFTED_ELEMENTS:
            return const
        if const in self._seen:
            return self._seen[const]
        var = relax.Var(f"constant_{len(self.lifted)}", ty)
        self._seen[const] = var
        self.lifted.append((var, const))
        return var


def load_constants(directory: Path, table: list[dict[str, Any]]) -> dict[str, np.ndarray]:
    """Read every constant of the table once from ``constants.bin`` (memory-mapped)."""
    if not table:
        return {}
    path = directory / CONSTANTS_FILE
    # (a file of empty constants alone has no bytes to map)
    data = np.memmap(path, dtype=np.uint8, mode="r") if path.stat().st_size else \
        np.zeros(0, np.uint8)
    arrays = {}
    for row in table:
        raw = data[row["offset"]: row["offset"] + row["nbytes"]]
        arrays[row["name"]] = np.frombuffer(raw.tobytes(), dtype=row["dtype"]).reshape(
            row["shape"])
    return arrays
