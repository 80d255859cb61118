"""Static activation arena of deployable C builds: offsets planned by tensor lifetimes.

A deployable network (``codegen.cproject``) runs its steps in a fixed order, so every
intermediate tensor has a known lifetime: from the step that writes it to the last step that
reads it. ``plan_arena`` places the tensors in one byte arena so that no two tensors alive at
the same step overlap, greedily by size (largest first, each at the lowest aligned offset that
does not collide with an already placed tensor whose lifetime overlaps: the greedy-by-size
placement TFLite Micro's planner uses).

The result is checked against two bounds reported with it: ``lower_bound_bytes`` (the largest
sum of sizes alive at one step, which no placement can beat) and ``naive_bytes`` (every tensor
in its own buffer). ``arena_timeline`` gives the same lifetimes as the timeline estimator's
``MemoryTimeline`` (one step per call of the network, the tensors alive at it), so reports and
``--memory-plot`` show deployable builds the way they show the host path; its peak is the
lower bound.

Example::

    >>> plan = plan_arena([ArenaTensor("a", 100, 0, 1), ArenaTensor("b", 50, 1, 2),
    ...                    ArenaTensor("c", 100, 2, 3)])
    >>> plan.offsets["c"], plan.size_bytes
    (0, 176)
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .timeline import MemoryStep, MemoryTimeline


@dataclass(frozen=True)
class ArenaTensor:
    """A tensor of the arena: ``size`` bytes alive from step ``first`` to step ``last``
    (inclusive: written at ``first``, last read at ``last``)."""

    name: str
    size: int
    first: int
    last: int

    def overlaps(self, other: "ArenaTensor") -> bool:
        return self.first <= other.last and other.first <= self.last


@dataclass
class ArenaPlan:
    """Byte offsets of the tensors in an arena of ``size_bytes``."""

    offsets: dict[str, int] = field(default_factory=dict)
    size_bytes: int = 0
    lower_bound_bytes: int = 0
    naive_bytes: int = 0
    alignment: int = 16

    def to_dict(self) -> dict:
        return {"arena_bytes": self.size_bytes, "lower_bound_bytes": self.lower_bound_bytes,
                "naive_bytes": self.naive_bytes, "alignment": self.alignment,
                "tensors": len(self.offsets)}


def _aligned(value: int, alignment: int) -> int:
    return (value + alignment - 1) // alignment * alignment


def lower_bound_bytes(tensors: list[ArenaTensor]) -> int:
    """The largest sum of sizes alive at one step (a sweep over the lifetimes' ends)."""
    events: dict[int, int] = {}
    for t in tensors:
        events[t.first] = events.get(t.first, 0) + t.size
        events[t.last + 1] = events.get(t.last + 1, 0) - t.size
    alive = peak = 0
    for step in sorted(events):
        alive += events[step]
        peak = max(peak, alive)
    return peak


def plan_arena(tensors: list[ArenaTensor], alignment: int = 16, order=None) -> ArenaPlan:
    """Offsets (multiples of ``alignment``) for ``tensors``; see the module docstring.
    ``order``: the sort key of the placement order (default: largest first).

    Each tensor goes below the first placed tensor, in offset order among those whose
    lifetimes overlap its own, that leaves a gap large enough under it (past the aligned
    ends of all before it), else above them all. The placed tensors are numpy arrays, so a
    placement is a few vector operations: a graph of 2,000 parallel branches (every tensor
    alive at once) spent about a minute in Python loops over 36 placement orders."""
    names = [t.name for t in tensors]
    if len(set(names)) != len(names):
        raise ValueError("arena tensors need unique names")
    for t in tensors:
        if t.size < 0 or t.last < t.first:
            raise ValueError(f"arena tensor {t.name}: size {t.size}, steps {t.first}..{t.last}")
    plan = ArenaPlan(alignment=alignment,
                     naive_bytes=sum(_aligned(t.size, alignment) for t in tensors),
                     lower_bound_bytes=lower_bound_bytes(tensors))
    count = len(tensors)
    firsts, lasts = np.empty(count, np.int64), np.empty(count, np.int64)
    starts, ends = np.empty(count, np.int64), np.empty(count, np.int64)  # ends aligned
    for placed, tensor in enumerate(sorted(tensors, key=order or (
            lambda t: (-t.size, t.first, t.name)))):
        alive = (firsts[:placed] <= tensor.last) & (lasts[:placed] >= tensor.first)
        below = np.argsort(starts[:placed][alive], kind="stable")
        start, end = starts[:placed][alive][below], ends[:placed][alive][below]
        # the lowest free offset before each placed tensor: past every aligned end below it
        floor = np.concatenate(([0], np.maximum.accumulate(end)))
        fits = np.flatnonzero(start - floor[:-1] >= tensor.size)
        offset = int(floor[fits[0]] if len(fits) else floor[-1])
        firsts[placed], lasts[placed] = tensor.first, tensor.last
        starts[placed], ends[placed] = offset, _aligned(offset + tensor.size, alignment)
        plan.offsets[tensor.name] = offset
        plan.size_bytes = max(plan.size_bytes, offset + tensor.size)
    plan.size_bytes = _aligned(plan.size_bytes, alignment)
    return plan


def check_arena(tensors: list[ArenaTensor], plan: ArenaPlan) -> None:
    """Raise ``ValueError`` if two tensors alive at the same step share a byte of the arena."""
    for a in tensors:
        oa = plan.offsets[a.name]
        if oa % plan.alignment or oa + a.size > plan.size_bytes:
            raise ValueError(f"arena tensor {a.name} at {oa} (+{a.size}) is misplaced")
    sized = [t for t in tensors if t.size]
    firsts = np.array([t.first for t in sized], np.int64)
    lasts = np.array([t.last for t in sized], np.int64)
    lows = np.array([plan.offsets[t.name] for t in sized], np.int64)
    highs = lows + np.array([t.size for t in sized], np.int64)
    for i, a in enumerate(sized):
        clash = np.flatnonzero((firsts[i + 1:] <= a.last) & (lasts[i + 1:] >= a.first) &
                               (lows[i + 1:] < highs[i]) & (lows[i] < highs[i + 1:]))
        if len(clash):
            raise ValueError(f"arena tensors {a.name} and {sized[i + 1 + clash[0]].name} "
                             f"overlap while alive")


def arena_timeline(tensors: list[ArenaTensor], step_names: list[str]) -> MemoryTimeline:
    """The activation timeline of a network whose step ``i`` (from 1) calls ``step_names[i-1]``:
    at each step, the arena tensors alive then (inputs and outputs are the caller's buffers and
    are not counted)."""
    steps = []
    for index, name in enumerate(step_names, start=1):
        live = [(t.name, t.size) for t in tensors if t.first <= index <= t.last]
        steps.append(MemoryStep(index - 1, name, sum(size for _, size in live), 0, live))
    return MemoryTimeline(steps)
