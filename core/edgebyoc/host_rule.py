"""The base of edgebyoc's dlight rules for the host CPU, and what they share.

Every host rule (``schedules``, ``row_schedules``, ``memory.dfs``) subclasses ``HostRule``: its
``schedule`` runs only on PrimFuncs built for an LLVM target, and returns a ``s_tir.Schedule``
or ``None`` to leave the function to the next rule. A rule that finds a shape it does not
handle part way through raises ``Unschedulable`` and catches it in ``schedule``.

Example::

    class DoubleBufferRule(HostRule):
        def schedule(self, func, target):
            sch = s_tir.Schedule(func)
            ...
            return sch
"""

from __future__ import annotations

from tvm import s_tir, tirx
from tvm.s_tir.dlight.cpu.base import CPUScheduleRule
from tvm.target import Target


def loop_extent(sch: s_tir.Schedule, loop) -> int | None:
    """The extent of ``loop`` as an int, ``None`` where it is symbolic."""
    extent = sch.get(loop).extent
    return int(extent) if isinstance(extent, tirx.IntImm) else None


class Unschedulable(Exception):
    """The function's shape is outside what the rule handles."""


class HostRule(CPUScheduleRule):
    """Base of edgebyoc's CPU rules: ``schedule`` runs only on PrimFuncs for an LLVM target."""

    def apply(self, func, target: Target, _: bool):
        if not isinstance(func, tirx.PrimFunc) or not self.is_target_available(target):
            return None
        return self.schedule(func, target)

    def schedule(self, func: tirx.PrimFunc, target: Target):
        """The scheduled ``func``, or ``None`` where the rule does not apply to it."""
        raise NotImplementedError
