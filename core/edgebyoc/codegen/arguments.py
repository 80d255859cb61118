"""The argument layout of an offloaded region: what a generated kernel receives, in order.

A region is called destination-passing style: its parameters in order (inputs and the
constants it reads; a constant the codegen replaced expanded into its replacement arrays, or
dropped when replaced by none), then its outputs. ``argument_layout`` spells that list out so
that no plugin does index arithmetic.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

import numpy as np
from tvm import relax

from ..relax_info import shape_dtype


@dataclass(frozen=True)
class Argument:
    """One argument of a region's call.

    ``position``: its index in the call (``args[position]`` of the packed function,
    ``data[position]`` of a C project's ``c_entry``); ``kind``: ``"input"`` (an activation),
    ``"constant"`` (a model constant passed as it is), ``"replacement"`` (one array of a
    constant the codegen replaced, ``part`` saying which) or ``"output"``; ``param``: the
    region parameter it stands for (``None`` for outputs; for outputs ``part`` is the output
    index); ``shape`` and ``dtype`` as plain values.
    """

    position: int
    kind: str
    param: int | None
    part: int
    shape: tuple[int, ...]
    dtype: str


@dataclass(frozen=True)
class ArgumentLayout:
    """Every argument of a region's call, in order (see ``argument_layout``)."""

    arguments: tuple[Argument, ...]

    @property
    def count(self) -> int:
        """How many arguments the call passes (inputs, constants, replacements, outputs)."""
        return len(self.arguments)

    def of_param(self, param: int) -> tuple[Argument, ...]:
        """The arguments standing for region parameter ``param`` (empty when it was replaced
        by no array)."""
        return tuple(a for a in self.arguments if a.param == param)

    def position(self, param: int, part: int = 0) -> int | None:
        """Where parameter ``param`` (its ``part``-th replacement array) is passed; ``None``
        when the codegen dropped it."""
        for argument in self.of_param(param):
            if argument.part == part:
                return argument.position
        return None

    @property
    def outputs(self) -> tuple[Argument, ...]:
        return tuple(a for a in self.arguments if a.kind == "output")


def argument_layout(region, replaced_constants: Mapping[int, tuple[Any, ...]] | None = None
                    ) -> ArgumentLayout:
    """The call arguments of ``region`` once ``replaced_constants`` (the codegen's
    ``CodegenOutput.replaced_constants``) is applied.

    Example: a conv region with parameters (x, weight, bias) whose codegen replaces the
    weight by two arrays (values, offsets) and drops the bias::

        layout = argument_layout(region, {1: (values, offsets), 2: ()})
        [(a.position, a.kind, a.param, a.part) for a in layout.arguments]
        # [(0, 'input', 0, 0), (1, 'replacement', 1, 0), (2, 'replacement', 1, 1),
        #  (3, 'output', None, 0)]
    """
    replaced = dict(replaced_constants or {})
    constant = set(region.constant_params)
    arguments: list[Argument] = []
    for index, param in enumerate(region.function.params):
        if index in replaced:
            for part, array in enumerate(replaced[index]):
                array = np.asarray(array)
                arguments.append(Argument(len(arguments), "replacement", index, part,
                                          tuple(array.shape), str(array.dtype)))
            continue
        shape, dtype = shape_dtype(param.ty)
        arguments.append(Argument(len(arguments), "constant" if index in constant else "input",
                                  index, 0, shape, dtype))
    ret = region.function.ret_ty
    for part, ty in enumerate(ret.fields if isinstance(ret, relax.TupleType) else [ret]):
        shape, dtype = shape_dtype(ty)
        arguments.append(Argument(len(arguments), "output", None, part, shape, dtype))
    return ArgumentLayout(tuple(arguments))
