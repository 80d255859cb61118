"""Memory planning (DFS paper): the activation memory timeline estimator (``timeline``),
depth-first tiling of macro-kernels of the host build (``dfs``: tiles recomputing halos;
``sliding``: ring-buffer sliding windows, put in the module by ``sliding_lowering``, their
threads synchronised by ``spin_barrier``), their partitioning and tile choice (``planner``),
the search that picks a plan by measuring it (``choose_dfs_plan``), exact-size storages after
TVM's static planning (``storage``), the static arena of deployable C builds (``arena``) and
their depth-first streaming in row bands (``streaming``), the request a compile makes of the
memory stage (``request``) and the tuning record of measured decisions (``tuning``). The
stage itself, which decides with all of them, is ``edgebyoc.memory_stage``.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field, replace
from typing import Callable

import tvm

from ..errors import CompileError, first_line
from .planner import (BAND_PEAK_ALLOWANCE, WIDEN_MIN_WEIGHT_BYTES, DfsPlan, candidate_plans,
                      square_tiled_units, tiled_units, widen_bands)
from .timeline import MemoryTimeline

log = logging.getLogger(__name__)

#: Estimated chain-peak limits (MB) the search tries, from loose to tight.
LIMITS_MB = (64, 48, 32, 24, 20, 16, 14, 12, 11, 10, 9.5, 9, 8.5, 8, 7.5, 7, 6.5, 6, 5, 4, 3, 2,
             1.5, 1, 0.75, 0.5, 0.25)


from .request import AUTO_MAX_SLOWDOWN, AUTO_MIN_GAIN  # noqa: E402  (re-exported)

#: Without a memory budget, a plan that re-computes more MACs (halos of square tiles) is
#: taken over one that re-computes less only when its measured peak is lower by more than
#: this share. Square-tiled macro-kernels run far slower than their MAC count says (scalar
#: loops): a forced build of 2 x (depthwise, 1x1) at 448 channels and 63x63 took square tiles
#: (1.32x MACs) for a peak of 7.47 MB against the sliding plan's 7.68 MB, and ran 53x the
#: untiled time; four 1x1 convolutions of 448 channels at 28x28 took 4x4 tiles (no
#: re-computation) for a peak 2 % under the sliding plan's and ran 41x. So without a budget
#: square tiles are candidates only where no other plan lowers the peak (``choose_dfs_plan``).
RECOMPUTE_MIN_GAIN = 0.05


def search_limits(memory_budget: int | None = None) -> list[float]:
    """The estimated chain-peak limits (bytes) the plan search tries, loose to tight:
    ``LIMITS_MB``, and a budget is a limit too (where sliding windows do not fit it, square
    tiles may)."""
    return sorted({mb * 1e6 for mb in LIMITS_MB} |
                  ({float(memory_budget)} if memory_budget is not None else set()),
                  reverse=True)


def _preference(measured) -> tuple:
    """The order among measured plans (plan, peak, re-computation factor) that qualify: the
    least re-computation, then the fewest convolutions in square tiles (sliding windows run
    the host's register tiles, square tiles scalar loops), then the lowest peak, then the
    fewest tiled convolutions."""
    plan, peak, factor = measured
    return factor, square_tiled_units(plan.kernels), peak, tiled_units(plan.kernels)


@dataclass
class DfsChoice:
    """The chosen plan with what it measured; ``plan`` is empty when DFS is not used
    (``reason`` says why)."""

    plan: DfsPlan
    peak_bytes: int
    recompute: float
    baseline: MemoryTimeline  # the untiled build's timeline
    candidates: list[tuple[float, float]]  # (peak MB, recompute factor) of every plan measured
    mode: str = "on"  # "auto" (the default), "on" (--dfs) or "budget" (--memory-budget)
    reason: str = ""
    failures: list[str] = field(default_factory=list)  # plans TVM could not build, and why
    #: with a tuning record: the plan's build time over the untiled build's
    slowdown: float | None = None
    #: with a tuning record: the plans tried for speed, in order (``_fast_enough``)
    trials: list["PlanTrial"] = field(default_factory=list)

    @property
    def baseline_peak_bytes(self) -> int:
        return self.baseline.peak_bytes


def budget_error(memory_budget: int, smallest: str, where: str = "") -> CompileError:
    """The error of a memory budget below the smallest peak edgebyoc reaches (``smallest``
    says what that peak is and how it is reached; ``where``, e.g. " on target gap9")."""
    return CompileError(f"memory budget {memory_budget / 1e6:.3f} MB is below the smallest "
                        f"peak edgebyoc can reach for this model{where}: {smallest}")


def build_failure(err: BaseException, limit: int = 200) -> str:
    """Why TVM could not build a plan, in one short line: a schedule primitive's error keeps
    its kind and its "Error message", not the IR it prints around them.

    Example::

        >>> build_failure(RuntimeError("ScheduleError: An error occurred in the schedule "
        ...     "primitive 'compute-inline'. The IR with diagnostic is: # ... many lines ... "
        ...     "Error message: The block s_tir.SBlock#0 is an output block"))
        "ScheduleError in 'compute-inline': The block s_tir.SBlock#0 is an output block"
    """
    text = first_line(err)
    if "Error message:" in text:
        kind = text.split(":", 1)[0] if text.split(":", 1)[0].isidentifier() else "error"
        primitive = text.split("schedule primitive ", 1)[1].split(".", 1)[0] \
            if "schedule primitive " in text else ""
        text = f"{kind}{f' in {primitive}' if primitive else ''}: " \
            f"{text.rsplit('Error message:', 1)[1].strip()}"
    return text if len(text) <= limit else text[:limit - 3] + "..."


def choose_dfs_plan(mod: tvm.IRModule, total_macs: int,
                    measure: Callable[[DfsPlan | None], MemoryTimeline],
                    max_recompute: float = 1.5,
                    memory_budget: int | None = None,
                    min_gain: float = 0.0, mode: str = "on",
                    widen_min_weight_bytes: int = WIDEN_MIN_WEIGHT_BYTES,
                    slowdown_of: Callable[[DfsPlan], float | None] | None = None,
                    ) -> DfsChoice | None:
    """Pick the DFS plan by measuring candidates with the timeline estimator.

    Without ``memory_budget``: the lowest measured peak among plans within ``max_recompute``
    (plans with square tiles only when no plan without them lowers the peak: they run
    scalar loops, ``square_tiled_units``), except that a plan re-computing more MACs must be
    lower by more than ``RECOMPUTE_MIN_GAIN`` than one re-computing less or one with fewer
    convolutions in square tiles (among the plans within that share of the lowest peak:
    ``_preference``);
    the untiled build is a candidate, and a plan is used only when its peak is below the
    untiled one by more than ``min_gain`` (a share of the untiled peak; ``AUTO_MIN_GAIN`` in
    automatic mode). With a budget: the least re-computation whose measured peak fits (then
    the fewest convolutions in square tiles, the lowest peak, the fewest tiled ones);
    ``CompileError`` naming the smallest achievable peak when none does. ``None`` when the
    model has no convolution chain to tile (nothing is measured then, unless a budget asks
    for the peak to be checked). The chosen plan then leaves out the macro-kernels it needs
    for no lower a measured peak (``_without_needless_kernels``), and its sliding kernels
    take bands of several rows a step (``widen_bands``): as wide as the plan's estimated peak
    allows where their weights are ``widen_min_weight_bytes`` or more
    (``planner.widen_min_weight_bytes`` gives the host CPU's), or as wide as their time model
    asks within ``BAND_PEAK_ALLOWANCE`` more; kept if the measured peak rises by at most that
    allowance and stays within the budget and, with ``min_gain``, below the untiled peak by
    that share.

    ``slowdown_of`` (a plan's build time over the untiled build's, ``None`` when unknown: the
    memory stage's tuning record) makes the choice speed-aware (``_fast_enough``): when the
    chosen plan runs slower than ``AUTO_MAX_SLOWDOWN``, the other measured plans that lower
    the untiled peak by ``AUTO_MIN_GAIN`` are tried, lowest peak first, and the first that
    runs within it is taken; the returned choice lists every plan tried (``trials``).
    """
    plans = candidate_plans(mod, search_limits(memory_budget))
    if not plans and memory_budget is None:
        return None
    baseline = measure(None)
    measured = [(DfsPlan(), baseline.peak_bytes, 1.0)]
    failures = []
    for plan, _ in plans:
        factor = plan.recompute_factor(total_macs)
        if memory_budget is None and factor > max_recompute:
            continue  # known to be out of bounds without building it
        try:
            measured.append((plan, measure(plan).peak_bytes, factor))
        except Exception as err:  # noqa: BLE001 - a plan TVM cannot build is not a candidate
            failures.append(f"{len(plan.kernels)} macro-kernels: {build_failure(err)}")
            log.warning("depth-first plan with %d macro-kernels dropped: %s",
                        len(plan.kernels), build_failure(err))
    candidates = [(round(peak / 1e6, 3), round(factor, 3)) for _, peak, factor in measured]
    reason = f"{len(failures)} plan(s) failed to build ({failures[0]})" if failures and \
        len(measured) == 1 else ""
    if memory_budget is None:
        fitting = [m for m in measured if m[2] <= max_recompute]
        if any(m[0].kernels and not square_tiled_units(m[0].kernels)
               and m[1] < baseline.peak_bytes for m in fitting):
            # square tiles run scalar loops: only where nothing else lowers the peak
            fitting = [m for m in fitting if not square_tiled_units(m[0].kernels)]
        lowest = min(m[1] for m in fitting)
        near = [m for m in fitting if m[1] <= lowest / (1 - RECOMPUTE_MIN_GAIN)]
        plan, peak, factor = min(near, key=_preference)
        if plan.kernels and peak > baseline.peak_bytes * (1 - min_gain):
            reason = (f"the best depth-first plan lowers the peak only from "
                      f"{baseline.peak_bytes / 1e6:.3f} to {peak / 1e6:.3f} MB (automatic "
                      f"mode wants at least {min_gain:.0%}; --dfs forces it)")
            plan, peak, factor = measured[0]
        elif not plan.kernels and not reason:
            reason = ("no depth-first plan within the re-computation limit lowers the peak "
                      f"(a plan that re-computes MACs must lower it by more than "
                      f"{RECOMPUTE_MIN_GAIN:.0%})"
                      if len(measured) > 1 else
                      f"every depth-first plan exceeds {max_recompute}x MACs")
    else:
        fitting = [m for m in measured if m[1] <= memory_budget]
        if not fitting:
            smallest = min(measured, key=lambda m: m[1])
            raise budget_error(memory_budget, f"{smallest[1] / 1e6:.3f} MB (depth-first plan "
                                              f"with {smallest[2]:.2f}x MACs)"
                               if smallest[0].kernels else
                               f"{smallest[1] / 1e6:.3f} MB (no convolution chain to tile "
                               f"depth-first)")
        plan, peak, factor = min(fitting, key=_preference)
        if not plan.kernels:
            reason = "the untiled build already meets the memory budget"
    choice = DfsChoice(plan, peak, factor, baseline, candidates, mode, reason, failures)
    if not plan.kernels:
        return choice

    def refined(plan: DfsPlan, peak: int) -> tuple[DfsPlan, int, float]:
        plan, peak = _without_needless_kernels(plan, peak, measure, candidates, total_macs)
        factor = plan.recompute_factor(total_macs)
        limit = min(peak * (1 + BAND_PEAK_ALLOWANCE),
                    memory_budget if memory_budget is not None else math.inf,
                    baseline.peak_bytes * (1 - min_gain) if min_gain else math.inf)
        return (*_with_wider_bands(mod, plan, peak, measure, candidates, factor,
                                   widen_min_weight_bytes, limit), factor)

    if slowdown_of is None:
        plan, peak, factor = refined(plan, peak)
        return replace(choice, plan=plan, peak_bytes=peak, recompute=factor)
    others = [m for m in fitting if m[0].kernels and m[0] is not plan
              and m[1] <= baseline.peak_bytes * (1 - AUTO_MIN_GAIN)
              and square_tiled_units(m[0].kernels) <= square_tiled_units(plan.kernels)]
    return _fast_enough(choice, [(plan, peak)] + [m[:2] for m in sorted(others, key=_preference)],
                        refined, slowdown_of)


#: The most depth-first plans a speed-aware choice (``_fast_enough``) tries: each is built and
#: timed once when the tuning record lacks it (``--tune``).
SPEED_TRIALS = 3


@dataclass
class PlanTrial:
    """A plan the speed-aware choice tried: its measured peak and its build time over the
    untiled build's (``None``: the tuning record has no measurement of it)."""

    plan: DfsPlan
    peak_bytes: int
    recompute: float
    slowdown: float | None

    def to_dict(self) -> dict:
        return {"peak_bytes": self.peak_bytes, "slowdown": self.slowdown}


def _fast_enough(choice: DfsChoice, ranked: list[tuple[DfsPlan, int]], refined,
                 slowdown_of) -> DfsChoice:
    """``choice`` with the first plan of ``ranked`` (its first is the memory rule's) that runs
    within ``AUTO_MAX_SLOWDOWN`` of the untiled build, each ``refined`` (needless kernels
    left out, bands widened) before it is timed by ``slowdown_of``; at most ``SPEED_TRIALS``,
    stopping at one the record has no measurement of. When none is fast enough: the first
    (the lowest peak; the caller decides whether to keep it). A plan with every macro-kernel
    of one measured too slow (the same convolutions in one kernel) is not tried: it keeps
    what made that one slow (MobileOne-S4 224x224 on an AVX-512 Xeon: its 2.33 MB plan, one
    kernel of 22 convolutions, measured 1.13x; a candidate that adds ten kernels to it is
    skipped, and a plan tiling the first six convolutions, 2.81 MB, measured 0.99x)."""
    trials: list[PlanTrial] = []
    for plan, peak in ranked:
        if len(trials) == SPEED_TRIALS:
            break
        if any(_tiles_every_kernel_of(plan, slow.plan) for slow in trials):
            continue
        plan, peak, factor = refined(plan, peak)
        trials.append(PlanTrial(plan, peak, factor, slowdown_of(plan)))
        if trials[-1].slowdown is None or within_slowdown_limit(trials[-1].slowdown):
            break
    fast = trials[-1] if within_slowdown_limit(trials[-1].slowdown) else trials[0]
    return replace(choice, plan=fast.plan, peak_bytes=fast.peak_bytes,
                   recompute=fast.recompute, slowdown=fast.slowdown, trials=trials)


def within_slowdown_limit(slowdown: float | None) -> bool:
    """Whether a measured slowdown (``None``: not measured) is within ``AUTO_MAX_SLOWDOWN``."""
    return slowdown is not None and slowdown <= AUTO_MAX_SLOWDOWN


def _tiles_every_kernel_of(plan: DfsPlan, other: DfsPlan) -> bool:
    """Whether each of ``other``'s macro-kernels has its convolutions in one of ``plan``'s."""
    groups = {tuple(map(id, kernel.units)) for kernel in plan.kernels}
    return all(tuple(map(id, kernel.units)) in groups for kernel in other.kernels)


#: The most macro-kernels ``_without_needless_kernels`` tries to leave out (one build and
#: measurement each), the deepest first.
PRUNE_TRIALS = 6


def _without_needless_kernels(plan: DfsPlan, peak: int, measure, candidates: list,
                              total_macs: int) -> tuple[DfsPlan, int]:
    """The chosen ``plan`` without the macro-kernels whose convolutions can run untiled at no
    higher a measured peak, tried one at a time from the deepest (at most
    ``PRUNE_TRIALS``; each plan measured is listed among the candidates). The planner's
    estimate counts each untiled convolution's input and output alone and so misses
    tensors live beside them (a residual block's input), which makes a shallow kernel
    necessary where the estimate says it is not, and cuts deeper chains the measured peak
    never reaches: ResNet-8 (MLPerf Tiny) measures 0.139 MB with one sliding kernel in its
    32x32 stage as with one in each of its three stages, whose two deeper kernels added
    10 % to its run time (AMD EPYC Zen 5)."""
    kept, kept_peak = list(plan.kernels), peak
    for kernel in list(reversed(plan.kernels))[:PRUNE_TRIALS]:
        trial = [k for k in kept if k is not kernel]
        if not trial:  # the untiled build: measured already, no lower
            continue
        reduced = replace(plan, kernels=trial)
        try:
            reduced_peak = measure(reduced).peak_bytes
        except Exception as err:  # noqa: BLE001 - the plan with the kernel stands
            log.warning("leaving out a macro-kernel failed to build: %s", build_failure(err))
            continue
        candidates.append((round(reduced_peak / 1e6, 3),
                           round(reduced.recompute_factor(total_macs), 3)))
        if reduced_peak <= peak:
            kept, kept_peak = trial, reduced_peak
    return (plan, peak) if len(kept) == len(plan.kernels) else \
        (replace(plan, kernels=kept), kept_peak)


def _with_wider_bands(mod, plan: DfsPlan, peak: int, measure, candidates: list,
                      factor: float, min_weight_bytes: int,
                      peak_limit: float) -> tuple[DfsPlan, int]:
    """The chosen ``plan`` with its sliding kernels' bands widened (``widen_bands``) when
    that measures a peak within ``peak_limit`` (the widened plan is then listed among the
    candidates), else ``plan`` as it was."""
    widened = widen_bands(mod, plan, min_weight_bytes)
    if widened is None:
        return plan, peak
    try:
        widened_peak = measure(widened).peak_bytes
    except Exception as err:  # noqa: BLE001 - the plan with one-row bands stands
        log.warning("wider bands dropped: %s", build_failure(err))
        return plan, peak
    candidates.append((round(widened_peak / 1e6, 3), round(factor, 3)))
    return (widened, widened_peak) if widened_peak <= peak_limit else (plan, peak)
