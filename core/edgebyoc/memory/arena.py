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


def plan_arena(tensors: list[ArenaTensor], alignment: int = 16, order=None) -> ArenaPlan:
    """Offsets (multiples of ``alignment``) for ``tensors``; see the module docstring.
    ``order``: the sort key of the placement order (default: largest first)."""
    names = [t.name for t in tensors]
    if len(set(names)) != len(names):
        raise ValueError("arena tensors need unique names")
    for t in tensors:
        if t.size < 0 or t.last < t.first:
            raise ValueError(f"arena tensor {t.name}: size {t.size}, steps {t.first}..{t.last}")
    plan = ArenaPlan(alignment=alignment,
                     naive_bytes=sum(_aligned(t.size, alignment) for t in tensors))
    steps = sorted({s for t in tensors for s in (t.first, t.last)})
    plan.lower_bound_bytes = max((sum(t.size for t in tensors if t.first <= s <= t.last)
                                  for s in steps), default=0)
    placed: list[tuple[int, ArenaTensor]] = []
    for tensor in sorted(tensors, key=order or (lambda t: (-t.size, t.first, t.name))):
        offset = 0
        for start, other in sorted((p for p in placed if p[1].overlaps(tensor)),
                                   key=lambda p: p[0]):
            if start - offset >= tensor.size:
                break  # the gap below ``other`` holds the tensor
            offset = max(offset, _aligned(start + other.size, alignment))
        placed.append((offset, tensor))
        plan.offsets[tensor.name] = offset
        plan.size_bytes = max(plan.size_bytes, offset + tensor.size)
    plan.size_bytes = _aligned(plan.size_bytes, alignment)
    return plan


def check_arena(tensors: list[ArenaTensor], plan: ArenaPlan) -> None:
    """Raise ``ValueError`` if two tensors alive at the same step share a byte of the arena."""
    for i, a in enumerate(tensors):
        oa = plan.offsets[a.name]
        if oa % plan.alignment or oa + a.size > plan.size_bytes:
            raise ValueError(f"arena tensor {a.name} at {oa} (+{a.size}) is misplaced")
        for b in tensors[i + 1:]:
            ob = plan.offsets[b.name]
            if a.overlaps(b) and oa < ob + b.size and ob < oa + a.size and a.size and b.size:
                raise ValueError(f"arena tensors {a.name} and {b.name} overlap while alive")


def arena_timeline(tensors: list[ArenaTensor], step_names: list[str]) -> MemoryTimeline:
    """The activation timeline of a network whose step ``i`` (from 1) calls ``step_names[i-1]``:
    at each step, the arena tensors alive then (inputs and outputs are the caller's buffers and
    are not counted)."""
    steps = []
    for index, name in enumerate(step_names, start=1):
        live = [(t.name, t.size) for t in tensors if t.first <= index <= t.last]
        steps.append(MemoryStep(index - 1, name, sum(size for _, size in live), 0, live))
    return MemoryTimeline(steps)
