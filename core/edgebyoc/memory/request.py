"""What a compile asks of the memory stage, built once from the user's options.

``MemoryRequest`` replaces the ``(dfs, memory_budget, ...)`` arguments that each stage used to
turn into a mode of its own: it is checked when it is made (a budget with depth-first planning
turned off, a non-positive budget, a re-computation limit below 1 are errors naming the
option) and handed to the memory stage as it is.

Example::

    >>> request = MemoryRequest.from_options(memory_budget=8_000_000)
    >>> request.mode, request.budget
    (<MemoryMode.BUDGET: 'budget'>, 8000000)
    >>> MemoryRequest.from_options(dfs=False).mode
    <MemoryMode.OFF: 'off'>
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass
from pathlib import Path

from ..errors import CompileError


class MemoryMode(str, enum.Enum):
    """How depth-first planning is used: ``off`` (``--no-dfs``), ``auto`` (the default: where
    it lowers the activation memory by ``AUTO_MIN_GAIN`` at no speed cost the compile can
    tell), ``on`` (``--dfs``: whenever it lowers the peak), ``budget`` (``--memory-budget``:
    just enough to fit)."""

    OFF = "off"
    AUTO = "auto"
    ON = "on"
    BUDGET = "budget"


#: In automatic mode depth-first planning is used only when it lowers the activation memory by
#: at least this share of the untiled peak.
AUTO_MIN_GAIN = 0.2
#: ... and when it runs within this ratio of the untiled build's time: predicted by the
#: target's cost model (C projects), or measured on the host and kept in a tuning record
AUTO_MAX_SLOWDOWN = 1.05


@dataclass(frozen=True)
class MemoryRequest:
    """The memory stage's instructions (see the module docstring).

    ``budget``: bytes the activations must fit (``mode`` ``BUDGET``; for a C project its
    total activation RAM, the caller's buffers included); ``max_recompute``: MACs with
    re-computation over the model's MACs a host plan may reach; ``io_in_arena``: a C
    project's inputs and outputs live in its arena; ``tuning_record``: the file of measured
    decisions (``memory.tuning``) the automatic mode reads; ``tune``: measure what the record
    lacks now and write it there.
    """

    mode: MemoryMode = MemoryMode.AUTO
    budget: int | None = None
    max_recompute: float = 1.5
    io_in_arena: bool = False
    tuning_record: Path | None = None
    tune: bool = False

    @classmethod
    def from_options(cls, dfs: bool | None = None, memory_budget: int | None = None,
                     max_recompute: float = 1.5, io_in_arena: bool = False,
                     tuning_record: str | Path | None = None,
                     tune: bool = False) -> "MemoryRequest":
        """The request of ``compile``'s options, checked (``CompileError`` naming the
        option)."""
        if dfs is False and memory_budget is not None:
            raise CompileError("a memory budget needs depth-first planning: do not combine it "
                               "with dfs=False (--no-dfs)")
        if memory_budget is not None and (isinstance(memory_budget, bool) or not isinstance(
                memory_budget, int) or memory_budget <= 0):
            raise CompileError(f"memory budget {memory_budget!r}: give a positive number of "
                               f"bytes")
        if isinstance(max_recompute, bool) or not isinstance(max_recompute, (int, float)) \
                or not math.isfinite(max_recompute) or max_recompute < 1:
            raise CompileError(f"max_recompute {max_recompute!r}: give a finite number of at "
                               f"least 1 (MACs with re-computation over the model's)")
        if tune and tuning_record is None:
            raise CompileError("tune (--tune) measures into a tuning record: name its file "
                               "(--tuning-record FILE)")
        mode = (MemoryMode.BUDGET if memory_budget is not None else MemoryMode.AUTO
                if dfs is None else MemoryMode.ON if dfs else MemoryMode.OFF)
        return cls(mode, memory_budget, float(max_recompute), bool(io_in_arena),
                   Path(tuning_record) if tuning_record is not None else None, bool(tune))

    @property
    def plans(self) -> bool:
        """Whether depth-first planning is searched at all."""
        return self.mode is not MemoryMode.OFF
