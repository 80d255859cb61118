"""The memory stage: one request (``memory.request.MemoryRequest``), one plan, one report entry.

It owns every depth-first decision of a compile:

- for a **C project** (``codegen.cgraph.StepGraph``): the arena of the untiled project, and
  the chains of layers streamed in row bands (``memory.streaming``) for each band size of
  ``STREAM_BANDS``, on the step graph (no project is written to try a band); each candidate's
  predicted cycles come from the modules' cost models through the compile's cost cache
  (``ProjectPricer``: every streamed call priced band by band; with a module's weight
  memory, ``ProjectPricer.streamed`` keeps each chain's weights there and cuts a chain where
  that is faster at the same arena). ``ON``: the smallest
  activation RAM, fewest calls among equals; ``BUDGET``: the widest band whose plan fits;
  ``AUTO``: the widest band that saves ``AUTO_MIN_GAIN`` of the RAM at a predicted latency
  within ``AUTO_MAX_SLOWDOWN`` of the untiled project's.
- for the **host build**: the depth-first plan of its convolution chains (``memory.dfs``,
  measured by the timeline estimator). ``ON`` / ``BUDGET`` use the plan; ``AUTO`` uses it
  only where it saves ``AUTO_MIN_GAIN`` and a tuning record (``memory.tuning``) measured it
  within ``AUTO_MAX_SLOWDOWN`` of the untiled build (``tune`` measures it now and writes the
  record): the host has no cost model of its kernels' speed, and nothing is timed unless asked.
  With a record, ``AUTO`` and ``ON`` try the next plans when the lowest-peak one is too slow
  (``memory.choose_dfs_plan``'s ``slowdown_of``; ``_PlanTimer``, ``_decide_by_speed``).
  Without a record (or with offloaded regions, which it does not time) ``AUTO`` neither
  builds nor measures a candidate (``_not_searched``).

A budget no plan meets is a ``CompileError`` naming the smallest reachable figure. The plan's
``to_dict`` is the report's ``memory`` entry, the same schema for both kinds.
"""

from __future__ import annotations

import json
import os
from collections import OrderedDict
from dataclasses import dataclass, field, replace
from typing import Any, Callable

import tvm

from .codegen.host import (HostBuild, LoweredLibrary, build_library, build_lowered,
                           host_target, lower_library)
from .memory import budget_error, choose_dfs_plan, search_limits, within_slowdown_limit
from .memory.arena import ArenaPlan, ArenaTensor, arena_timeline, plan_arena
from .memory.planner import (DfsPlan, candidate_plans, nchw_variant, tiled_units,
                              widen_min_weight_bytes)
from .memory.request import AUTO_MAX_SLOWDOWN, AUTO_MIN_GAIN, MemoryMode, MemoryRequest
from .memory.streaming import (StreamPlan, WeightOffer, applied_overlaps, arena_items,
                               band_layer, make_chain, plan_chains, resident_layers, stream_plan)
from .memory.timeline import MemoryTimeline
from .memory.tuning import TuningRecord, measure_slowdown, measurement_key
from .target import Cost
from .version import __version__

#: rows per streamed call the C project's planner tries
STREAM_BANDS = (1, 2, 4, 8)


#: The most bytes of lifted constants (weights in their final layouts) the lowerings of
#: measured plans keep for the final build (``LoweredBuilds``): a larger model lowers its
#: chosen plan again rather than holding several copies of its weights.
LOWERED_BUILDS_BYTES = 256 << 20


def _plan_key(dfs: DfsPlan | None) -> tuple:
    """What makes two depth-first plans build alike: each macro-kernel's convolutions (their
    bindings in the searched module) and tile, and the peak limit (``padding_limit``);
    ``()`` for the untiled build."""
    if dfs is None or not dfs.kernels:
        return ()
    return (dfs.peak_limit,) + tuple(
        (tuple(var for unit in kernel.units for var in unit.vars), kernel.tile)
        for kernel in dfs.kernels)


def _recorded_plan(searched, dfs: DfsPlan) -> str:
    """What a tuning record's measurement of ``dfs`` is keyed by: its report entry
    (``DfsPlan.to_dict``) and each macro-kernel's convolutions, by the position of their
    first binding in the searched module's ``main`` (Relax vars do not survive from one
    compile to the next; positions in the same module do). Two plans with the same kernel
    sizes, shapes and tiles over different convolutions are measured apart."""
    bindings = (b.var for block in searched["main"].body.blocks for b in block.bindings)
    position = {var: index for index, var in enumerate(bindings)}
    units = [[position[unit.vars[0]] for unit in kernel.units] for kernel in dfs.kernels]
    return json.dumps({**dfs.to_dict(), "units": units}, sort_keys=True, default=str)


class LoweredBuilds:
    """The host libraries the memory stage lowered to measure their plans' peaks
    (``codegen.host.lower_library``), by plan (``_plan_key``), the newest last, within
    ``limit`` bytes of lifted constants (the oldest dropped first): the chosen plan's
    lowering is then built as it is (``build_lowered``), not lowered a second time (MobileNetV2
    at 96x96, width 0.5, ``--dfs``: 6.8 s against 8.3 s; Intel Xeon)."""

    def __init__(self, limit: int | None = None):
        self.limit = LOWERED_BUILDS_BYTES if limit is None else limit
        self._entries: OrderedDict[tuple, LoweredLibrary] = OrderedDict()

    def add(self, key: tuple, lowered: LoweredLibrary) -> None:
        self._entries.pop(key, None)
        self._entries[key] = lowered
        while self._entries and sum(e.constants.nbytes for e in self._entries.values()) \
                > self.limit:
            self._entries.popitem(last=False)

    def take(self, key: tuple) -> LoweredLibrary | None:
        """The kept lowering of the plan ``key`` (then no longer kept), or ``None``."""
        return self._entries.pop(key, None)

    def build(self, key: tuple, mod: tvm.IRModule, build: HostBuild, dfs: DfsPlan | None):
        """``build_library(mod, build, dfs)``, from the kept lowering of the plan ``key`` when
        there is one (then no longer kept)."""
        lowered = self.take(key)
        return build_lowered(lowered) if lowered is not None else \
            build_library(mod, build, dfs)

    def clear(self) -> None:
        self._entries.clear()

    def __len__(self) -> int:
        return len(self._entries)


@dataclass
class MemoryPlan:
    """The memory stage's decision (see the module docstring).

    ``kind``: ``"host"`` or ``"c_project"``; ``decision``: what decided (the cost model, a
    tuning record, the user's flag, a budget); ``baseline``: the untiled activation timeline;
    ``timeline``: the one of what is built (for the host, recorded by its build).
    Host: ``dfs`` (the plan, possibly empty, with its measurements), ``module`` (the module to
    build: the NCHW variant a plan was searched on), ``builds`` (the host libraries a
    measurement built: the chosen one is reused), ``host_arena_bytes`` (the one arena a run
    of the build allocates for the planned tensors: ``memory.storage.arena_storages``),
    ``lowered`` (the lowerings of the plans measured: the chosen one is built from its own).
    C project: ``chains`` streamed, the arena ``arena`` of ``items``, ``band`` rows per
    call, byte figures, ``extra_cycles`` the streaming adds to the predicted latency and
    ``streamed_regions`` where they come from
    (``StreamedRegion``: one per offloaded region the chains call), ``band_options`` the
    activation RAM (caller's buffers included) of each band size that streams a chain."""

    request: MemoryRequest
    kind: str
    enabled: bool
    reason: str
    decision: str
    baseline: MemoryTimeline | None = None
    timeline: MemoryTimeline | None = None
    dfs: Any = None
    module: Any = None
    builds: dict[str, tuple] = field(default_factory=dict)
    lowered: LoweredBuilds = field(default_factory=LoweredBuilds)
    chains: list = field(default_factory=list)
    arena: ArenaPlan | None = None
    items: list[ArenaTensor] = field(default_factory=list)
    band: int | None = None
    total_bytes: int | None = None
    untiled_total_bytes: int | None = None
    untiled_arena_bytes: int | None = None
    extra_cycles: float | None = None
    chain_entries: list[dict] = field(default_factory=list)
    streamed_regions: list[StreamedRegion] = field(default_factory=list)
    band_options: dict[int, int] = field(default_factory=dict)
    host_arena_bytes: int | None = None

    @property
    def peak_bytes(self) -> int | None:
        if self.kind == "c_project":
            return self.arena.size_bytes if self.arena is not None else None
        return self.timeline.peak_bytes if self.timeline is not None else None

    def to_dict(self) -> dict[str, Any]:
        """The report's ``memory`` entry."""
        entry: dict[str, Any] = {
            "kind": self.kind, "mode": self.request.mode.value, "enabled": self.enabled,
            "reason": self.reason, "decision": self.decision, "peak_bytes": self.peak_bytes,
            "timeline": self.timeline.to_dict() if self.timeline is not None else None,
            "baseline_timeline": self.baseline.to_dict()
            if self.enabled and self.baseline is not None else None,
            "baseline_peak_bytes": self.baseline.peak_bytes if self.baseline else None}
        if self.kind == "host":
            dfs = self.dfs
            entry.update({
                "recompute_factor": round(dfs.recompute, 4) if dfs else 1.0,
                "candidates": [{"peak_mb": p, "recompute": r} for p, r in dfs.candidates]
                if dfs else [],
                "failed_candidates": dfs.failures if dfs else [],
                "measured_slowdown": dfs.slowdown if dfs else None,
                "speed_trials": [trial.to_dict() for trial in dfs.trials] if dfs else [],
                "activation_arena_bytes": self.host_arena_bytes,
                **(dfs.plan.to_dict() if dfs and self.enabled else {"macro_kernels": []})})
        else:
            entry.update({
                "band_rows": self.band, "chains": self.chain_entries, "extra_macs": 0,
                "arena_bytes": self.arena.size_bytes if self.arena else None,
                "untiled_arena_bytes": self.untiled_arena_bytes,
                "total_activation_bytes": self.total_bytes,
                "untiled_total_bytes": self.untiled_total_bytes,
                "predicted_extra_cycles": self.extra_cycles,
                "streamed_regions": [r.to_dict() for r in self.streamed_regions],
                "band_options": [{"band_rows": band, "total_activation_bytes": total}
                                 for band, total in self.band_options.items()]})
        return entry


# -- C projects ---------------------------------------------------------------------------------

@dataclass
class StreamedRegion:
    """What streaming does to one offloaded region's predicted cost: its ``calls`` (bands),
    the predicted ``cycles`` of all of them against ``untiled_cycles`` (the whole layer in
    one call), and, summed over its calls against the whole layer's, the parts of its cost
    model's breakdown that are cycle counts (``parts``: name -> (streamed, untiled); gap9's
    modules give ``L_ops``, ``L_mem`` and ``overhead``, the fixed cost of a call) and the
    weight bytes moved into the module's memory (``weight_bytes``, the same pair: each call
    loads its layer's weights again, unless its chain keeps them in the module's weight
    memory, ``Chain.resident``). The report's ``memory.streamed_regions``."""

    symbol: str
    module: str
    calls: int
    cycles: float
    untiled_cycles: float
    parts: dict[str, tuple[float, float]]
    weight_bytes: tuple[int, int]

    def to_dict(self) -> dict[str, Any]:
        return {"symbol": self.symbol, "module": self.module, "calls": self.calls,
                "cycles": round(self.cycles, 1), "untiled_cycles": round(self.untiled_cycles, 1),
                "parts": {name: [round(a, 1), round(b, 1)] for name, (a, b) in self.parts.items()},
                "weight_bytes": list(self.weight_bytes)}


@dataclass
class StreamCost:
    """The predicted cycles row streaming adds to a C project (``extra_cycles``: the
    streamed regions' calls minus their whole-layer cycles), region by region."""

    extra_cycles: float
    regions: list[StreamedRegion]


def _weight_bytes(schedule) -> int:
    count, size, _ = schedule.transfers.get("W", (0, 0, 0))
    return count * size


def _cycle_parts(cost: Cost) -> dict[str, float]:
    """The entries of ``cost``'s breakdown that are cycle counts (not the efficiency)."""
    return {name: float(value) for name, value in (cost.breakdown or {}).items()
            if isinstance(value, (int, float)) and not isinstance(value, bool)
            and name != "efficiency"}


class ProjectPricer:
    """``pricer(graph, stream)``: the ``StreamCost`` of a C project's streaming, each
    streamed region's calls priced band by band by its module's cost model
    (``memory.streaming.band_layer``: every call reads its halo rows and loads the layer's
    weights again, but for the chain's resident layers, ``Schedule.weights_resident`` after
    their first call) against its whole-layer cycles, through ``partition.cost`` (the compile's
    cost cache); ``None`` where a region cannot be priced so. ``whole``: the untiled
    network's predicted cycles (regions and host operators), or ``None``; ``options``: the
    compile's target options (a weight memory's ``size_option`` sizes it, as it does for the
    schedule search)."""

    def __init__(self, partition, whole_cycles: float | None,
                 options: dict[str, Any] | None = None):
        self.partition, self.whole, self.options = partition, whole_cycles, options

    def _by_symbol(self) -> dict:
        return {symbol: region for region in self.partition.regions for symbol in region.symbols}

    def weight_offers(self, graph) -> dict[int, WeightOffer]:
        """Per step of ``graph`` (record index) whose region runs on a module with a weight
        memory (``ExecModule.weight_memory``): its ``WeightOffer``."""
        if self.partition is None:
            return {}
        by_symbol, offers = self._by_symbol(), {}
        for index, step in enumerate(graph.steps):
            region = by_symbol.get(step.symbol)
            if region is None or len(region.candidates) != 1 or \
                    region.candidates[0].schedule is None:
                continue
            candidate = region.candidates[0]
            level = candidate.module.weight_memory_level()
            if level is not None:
                offers[index] = WeightOffer(
                    step.region.resident_weights, step.region.resident_weight_bytes,
                    candidate.module.name, level.capacity(self.options),
                    candidate.schedule.operand_l1_bytes("W"))
        return offers

    def streamed(self, graph, stream: StreamPlan) -> StreamPlan:
        """``stream`` with each chain's weights kept in its modules' weight memories
        (``streaming.resident_layers``), and, while that lowers the predicted cycles at an
        arena no larger, a chain cut in two (each part keeps its own layers' weights: a
        network's weights rarely all fit one weight memory, a stage's often do). Unchanged
        without a module that has a weight memory, or when the plan cannot be priced."""
        offers = self.weight_offers(graph)
        if not offers or not stream.chains:
            return stream

        def plan(chains) -> StreamPlan:
            return stream_plan(graph.steps, graph.arena,
                               [replace(c, resident=resident_layers(c, offers)) for c in chains],
                               stream.baseline_bytes)

        best = plan(stream.chains)
        cost = self(graph, best)
        while cost is not None:
            trial = self._faster_cut(graph, best, cost.extra_cycles, plan)
            if trial is None:
                break
            best, cost = trial
        return best

    def _faster_cut(self, graph, stream: StreamPlan, extra: float, plan):
        """(plan, cost) of the first cut of one of ``stream``'s chains in two (a part may
        be left unstreamed) whose arena is no larger and predicted extra cycles fewer than
        ``extra``, or ``None``."""
        for chain in stream.chains:
            others = [c for c in stream.chains if c is not chain]
            for cut in range(chain.first, chain.last):
                parts = [c for c in (make_chain(graph.steps, chain.first, cut, chain.band,
                                                graph.viewed),
                                     make_chain(graph.steps, cut + 1, chain.last, chain.band,
                                                graph.viewed)) if c is not None]
                if not parts:
                    continue
                trial = plan(others + parts)
                if trial.arena.size_bytes > stream.arena.size_bytes:
                    continue
                cost = self(graph, trial)
                if cost is not None and cost.extra_cycles < extra - 0.5:
                    return trial, cost
        return None

    def __call__(self, graph, stream: StreamPlan) -> StreamCost | None:
        if self.partition is None or self.partition.cost is None:
            return None
        by_symbol = self._by_symbol()
        resident = {graph.steps[r.index].symbol for c in stream.chains for r in c.resident}
        calls: dict[str, list[tuple[int, int]]] = {}
        for chain in stream.chains:
            for index, y0, y1 in chain.events:
                if graph.steps[index].symbol:
                    calls.setdefault(graph.steps[index].symbol, []).append((y0, y1))
        regions = []
        for symbol, bands in calls.items():
            region = by_symbol.get(symbol)
            if region is None or len(region.candidates) != 1 or \
                    region.predicted_cycles is None or region.candidates[0].schedule is None:
                return None
            priced = self._region(symbol, region, bands, symbol in resident)
            if priced is None:
                return None
            regions.append(priced)
        return StreamCost(sum(r.cycles - r.untiled_cycles for r in regions), regions)

    def _region(self, symbol: str, region, bands, resident: bool) -> StreamedRegion | None:
        """The ``StreamedRegion`` of ``region`` called for ``bands`` ((first, end) rows);
        ``resident``: its weights stay loaded after the first call
        (``Schedule.weights_resident``)."""
        candidate = region.candidates[0]
        whole = self.partition.cost(candidate.module, candidate.workload, candidate.schedule)
        whole_parts = _cycle_parts(whole) if isinstance(whole, Cost) else {}
        cycles, parts, weights = 0.0, dict.fromkeys(whole_parts, 0.0), 0
        for call, (y0, y1) in enumerate(bands):
            workload, schedule = band_layer(candidate.workload, candidate.schedule, y0, y1)
            if resident and call:
                schedule = replace(schedule, weights_resident=True)
            cost = self.partition.cost(candidate.module, workload, schedule)
            if not isinstance(cost, Cost) or cost.latency_cycles is None:
                return None
            cycles += float(cost.latency_cycles)
            weights += _weight_bytes(schedule)
            for name, value in _cycle_parts(cost).items():
                if name in parts:
                    parts[name] += value
        return StreamedRegion(symbol, candidate.module.name, len(bands), cycles,
                              float(region.predicted_cycles),
                              {name: (parts[name], whole_parts[name]) for name in parts},
                              (weights, _weight_bytes(candidate.schedule)))


def _slowdown(extra: float | None, whole: float | None) -> str:
    if whole is None or extra is None or not whole:
        return ""
    return f", predicted latency {(whole + extra) / whole:.2f}x the untiled build's"


def plan_project(graph, request: MemoryRequest, pricer: ProjectPricer,
                 where: str = "") -> MemoryPlan:
    """The arena and depth-first streaming of a C project's step graph (see the module
    docstring); ``CompileError`` when a budget cannot be met."""
    untiled_items = arena_items(graph.arena, graph.steps, [])
    untiled = plan_arena(untiled_items)
    io = graph.io_bytes
    base_total = untiled.size_bytes + io
    baseline = arena_timeline(untiled_items, graph.step_names)
    plan = MemoryPlan(request, "c_project", False, "turned off", "turned off (--no-dfs)",
                      baseline, baseline, arena=untiled, items=untiled_items,
                      total_bytes=base_total, untiled_total_bytes=base_total,
                      untiled_arena_bytes=untiled.size_bytes)
    if request.mode is MemoryMode.OFF:
        return _fits(plan, request, where)
    budget = request.budget if request.mode is MemoryMode.BUDGET else None
    tried = {band: pricer.streamed(graph, plan_chains(graph.steps, graph.arena, graph.viewed,
                                                      band=band, budget=budget, extra_bytes=io))
             for band in STREAM_BANDS}
    usable = [b for b in STREAM_BANDS if tried[b].chains]
    total = {b: tried[b].arena.size_bytes + io for b in usable}
    plan.band_options = dict(total)
    costs: dict[int, StreamCost | None] = {}

    def priced(band: int) -> float | None:
        if band not in costs:
            costs[band] = pricer(graph, tried[band])
        return costs[band].extra_cycles if costs[band] is not None else None

    chosen, decision = None, ""
    if request.mode is MemoryMode.ON:
        best = min(total.values(), default=None)
        chosen = max((b for b in usable if total[b] == best), default=None)
        decision = "forced (--dfs): the smallest activation RAM"
    elif request.mode is MemoryMode.BUDGET:
        fits = [b for b in usable if total[b] <= budget]
        chosen = max(fits) if fits else (min(usable, key=lambda b: (total[b], -b))
                                         if usable else None)
        decision = f"memory budget of {budget} bytes"
    else:
        def fast(band: int) -> bool:
            cost = priced(band)
            return pricer.whole is None or (cost is not None and pricer.whole + cost <=
                                            AUTO_MAX_SLOWDOWN * pricer.whole)

        good = [b for b in usable if fast(b) and total[b] <= (1 - AUTO_MIN_GAIN) * base_total]
        chosen = max(good) if good else None
        decision = "cost model (automatic mode)"
    if chosen is None:
        plan.decision = decision
        plan.reason = "no chain of layers to stream lowers the activation RAM"
        if request.mode is MemoryMode.AUTO and usable:
            smallest = min(usable, key=lambda b: total[b])
            plan.reason = (
                f"automatic mode streams only to save {AUTO_MIN_GAIN:.0%} of the activation "
                f"RAM at a predicted latency within {AUTO_MAX_SLOWDOWN:.2f}x: bands of "
                f"{smallest} row(s) reach {total[smallest]} bytes against {base_total}"
                f"{_slowdown(priced(smallest), pricer.whole)} (--dfs or --memory-budget "
                f"stream anyway)")
        return _fits(plan, request, where)
    stream = tried[chosen]
    applied = applied_overlaps(stream.chains)
    plan.enabled, plan.decision, plan.band = True, decision, chosen
    plan.chains, plan.arena, plan.items = stream.chains, stream.arena, stream.items
    plan.timeline = arena_timeline(stream.items, graph.step_names)
    plan.total_bytes, plan.extra_cycles = total[chosen], priced(chosen)
    plan.streamed_regions = costs[chosen].regions if costs[chosen] is not None else []
    plan.chain_entries = [c.to_dict(graph.steps, c.overlap is not None and c.overlap in applied)
                          for c in stream.chains]
    plan.reason = (f"{len(stream.chains)} chain(s) of layers streamed in bands of {chosen} "
                   f"row(s): {plan.total_bytes} bytes of activation RAM against {base_total} "
                   f"untiled{_slowdown(plan.extra_cycles, pricer.whole)}")
    return _fits(plan, request, where)


def _fits(plan: MemoryPlan, request: MemoryRequest, where: str) -> MemoryPlan:
    """``plan``, or the error of a budget it does not meet."""
    if request.budget is not None and plan.total_bytes > request.budget:
        io = plan.total_bytes - plan.arena.size_bytes
        caller = (f" + {io} bytes of the caller's inputs and outputs (--io-in-arena puts "
                  f"them in the arena)" if io else "")
        raise budget_error(request.budget, f"the C project needs {plan.total_bytes} bytes of "
                                           f"activation RAM: its static arena of "
                                           f"{plan.arena.size_bytes} bytes (at least "
                                           f"{plan.arena.lower_bound_bytes} alive at once)"
                                           f"{caller}; depth-first streaming: {plan.reason}",
                           where)
    return plan


# -- the host build -----------------------------------------------------------------------------

def plan_host(mod, request: MemoryRequest, build: HostBuild, total_macs: int,
              offloaded: bool, inputs, outputs,
              progress: Callable[[str], None] | None = None) -> MemoryPlan:
    """The depth-first plan of the host build (see the module docstring). ``inputs`` /
    ``outputs``: the model's signature (``TensorSpec``), for a tuning measurement;
    ``progress``: told of each plan timed now (``--tune``) and what it measured."""
    plan = MemoryPlan(request, "host", False, "turned off", "turned off (--no-dfs)",
                      module=mod)
    if request.mode is MemoryMode.OFF:
        return plan
    if request.mode is MemoryMode.AUTO and not build.schedules:
        plan.reason = "--no-schedules keeps TVM's default build (--dfs tiles it anyway)"
        plan.decision = "automatic mode"
        return plan
    target = host_target(build.llvm_cpu)
    searched = nchw_variant(mod) or mod
    if request.mode is MemoryMode.AUTO and (offloaded or request.tuning_record is None):
        return _not_searched(plan, searched, offloaded)

    def measure(dfs_plan):
        tiled = dfs_plan is not None and bool(dfs_plan.kernels)
        lowered = lower_library(searched if tiled else mod, build, dfs_plan)
        plan.lowered.add(_plan_key(dfs_plan), lowered)
        return lowered.memory.timeline

    timer = _PlanTimer(request, mod, searched, build, plan.lowered, inputs, outputs,
                       progress) \
        if request.tuning_record is not None and not offloaded \
        and request.mode in (MemoryMode.AUTO, MemoryMode.ON) else None
    choice = choose_dfs_plan(searched, total_macs, measure, request.max_recompute,
                             request.budget,
                             min_gain=AUTO_MIN_GAIN if request.mode is MemoryMode.AUTO else 0.0,
                             mode=request.mode.value,
                             widen_min_weight_bytes=widen_min_weight_bytes(target),
                             slowdown_of=timer.slowdown if timer is not None else None)
    if choice is None:
        plan.reason, plan.decision = "no chain of convolutions to tile", "nothing to plan"
        return plan
    plan.dfs, plan.baseline = choice, choice.baseline
    plan.decision = {MemoryMode.ON: "forced (--dfs)",
                     MemoryMode.BUDGET: f"memory budget of {request.budget} bytes"}.get(
        request.mode, "automatic mode")
    if timer is not None and choice.trials:
        choice = _decide_by_speed(plan, choice, timer)
        plan.dfs = choice
    plan.enabled = bool(choice.plan.kernels)
    plan.reason = choice.reason
    plan.module = searched if plan.enabled else mod
    return plan


def _not_searched(plan: MemoryPlan, searched, offloaded: bool) -> MemoryPlan:
    """``plan`` (the untiled build) with its reason, where the automatic mode has no tuning
    record that could approve a depth-first build (none given, or offloaded regions, which it
    does not time): its candidates are neither built nor measured, each of which is a lowering
    of the whole model (MobileNetV2 at 96x96, width 0.5, on an Intel Xeon: a 6.8 s compile
    with its three measurements, 3.4 s without)."""
    count = len(candidate_plans(searched, search_limits()))
    if not count:
        plan.reason, plan.decision = "no chain of convolutions to tile", "nothing to plan"
    elif offloaded:
        plan.decision = "automatic mode: offloaded regions"
        plan.reason = ("automatic mode uses a depth-first plan only when a tuning record "
                       "measured it within the untiled build's time, which it measures on "
                       "the host build alone, not with offloaded regions (--dfs or "
                       "--memory-budget use it)")
    else:
        plan.decision = "automatic mode: no tuning record"
        plan.reason = (f"automatic mode uses a depth-first host plan only when a tuning record "
                       f"measured it within {AUTO_MAX_SLOWDOWN:.2f}x the untiled build's time: "
                       f"none given, so its {count} candidate plan(s) were neither built nor "
                       f"measured (--tuning-record FILE --tune measures them; --dfs or "
                       f"--memory-budget use one)")
    return plan


class _PlanTimer:
    """Each depth-first plan's build time over the untiled build's (``slowdown``): from the
    tuning record, or, with ``tune``, measured now (both builds run here, ``measure_slowdown``)
    and written there. ``builds`` keeps the libraries measured now, by plan (``_plan_key``;
    ``()`` the untiled one), for the final build to reuse."""

    def __init__(self, request: MemoryRequest, untiled, tiled, build: HostBuild,
                 lowered: LoweredBuilds, inputs, outputs,
                 progress: Callable[[str], None] | None = None):
        self.request, self.untiled, self.tiled, self.build = request, untiled, tiled, build
        self.lowered, self.inputs, self.outputs = lowered, inputs, outputs
        self.progress = progress or (lambda text: None)
        self.timed = 0  # plans measured now
        self.record = TuningRecord(request.tuning_record)
        self.builds: dict[tuple, tuple] = {}
        self.runners: dict[tuple, Any] = {}
        self._hashes: tuple[int, int] | None = None

    def slowdown(self, dfs: DfsPlan) -> float | None:
        if self._hashes is None:  # both modules' hashes, once for all the plans tried
            from tvm_ffi import structural_hash

            self._hashes = structural_hash(self.untiled), structural_hash(self.tiled)
        key = measurement_key(*self._hashes, _recorded_plan(self.tiled, dfs), self.build.llvm_cpu,
                              os.environ.get("TVM_NUM_THREADS", os.cpu_count()),
                              tvm.__version__, __version__)
        ratio = self.record.slowdown(key)
        if ratio is not None or not self.request.tune:
            return ratio
        from .frontend import random_inputs

        self.timed += 1
        what = f"depth-first plan {self.timed} ({_plan_summary(dfs)})"
        self.progress(f"building and timing {what} against the untiled build (--tune)")
        sample = random_inputs(self.inputs, seed=0)
        untiled, tiled = self._runner(None), self._runner(dfs)
        ratio = measure_slowdown(lambda: untiled.run(sample), lambda: tiled.run(sample))
        self.record.store(key, ratio, cpu=self.build.llvm_cpu, edgebyoc=__version__)
        self.progress(f"{what} runs {_ratio(ratio)}")
        return ratio

    @property
    def measured_now(self) -> bool:
        return bool(self.builds)

    def _runner(self, dfs: DfsPlan | None):
        from .runtime.artifact import HostRunner

        key = _plan_key(dfs)
        if key not in self.runners:
            self.builds[key] = self.lowered.build(key, self.tiled if key else self.untiled,
                                                  self.build, dfs)
            executable, constants, _ = self.builds[key]
            self.runners[key] = HostRunner(executable, self.inputs, self.outputs,
                                           list(constants.arrays().values()))
        return self.runners[key]

    def keep_only(self, dfs: DfsPlan | None) -> dict[str, tuple]:
        """The builds ``host_build_of`` reuses: the untiled one and ``dfs``'s, if measured
        now; the other plans' are dropped."""
        kept = {"untiled": self.builds.get(())}
        if dfs is not None:
            kept["tiled"] = self.builds.get(_plan_key(dfs))
        self.builds.clear()
        self.runners.clear()
        return {name: library for name, library in kept.items() if library is not None}


def _plan_summary(dfs: DfsPlan) -> str:
    """A plan in a few words, for progress lines: its convolutions and macro-kernels.

    Example: "22 convolutions in 1 macro-kernel", "9 convolutions in 3 macro-kernels"."""
    convolutions, kernels = tiled_units(dfs.kernels), len(dfs.kernels)
    return f"{convolutions} convolution{'s' * (convolutions != 1)} in {kernels} " \
           f"macro-kernel{'s' * (kernels != 1)}"


def _decide_by_speed(plan: MemoryPlan, choice, timer: _PlanTimer):
    """``choice`` as the tuning record (``timer``) decides it: the automatic mode keeps the
    untiled build unless the chosen plan was measured within ``AUTO_MAX_SLOWDOWN``; ``--dfs``
    keeps its plan either way (the first of those tried that met it, else the lowest peak).
    ``plan.decision`` says what was measured and where, and the other plans tried."""
    source = f"measured now (--tune), written to {timer.record.path}" if timer.measured_now \
        else f"tuning record {timer.record.path}"
    ratio = _ratio(choice.slowdown)
    others = [trial for trial in choice.trials if trial.plan is not choice.plan]
    also = "; also tried: " + ", ".join(f"peak {trial.peak_bytes / 1e6:.3f} MB "
                                        f"{_ratio(trial.slowdown)}" for trial in others) \
        if others else ""
    fast = within_slowdown_limit(choice.slowdown)
    forced = plan.request.mode is MemoryMode.ON
    plan.builds = timer.keep_only(choice.plan if fast or forced else None)
    plan.decision = f"{'forced (--dfs); ' if forced else ''}{source}: {ratio}{also}"
    if fast or forced:
        return choice
    if choice.slowdown is None:
        plan.decision = f"{source}: not measured"
        return _untiled(choice, f"the tuning record {timer.record.path} has no measurement "
                                f"of this plan on this CPU (add --tune to measure it); "
                                f"automatic mode keeps the untiled build")
    unmeasured = any(trial.slowdown is None for trial in others)
    return _untiled(choice, f"the depth-first build (peak {choice.peak_bytes / 1e6:.3f} MB "
                            f"against {choice.baseline_peak_bytes / 1e6:.3f} MB) runs {ratio} "
                            f"({source}){also}; automatic mode accepts up to "
                            f"{AUTO_MAX_SLOWDOWN:.2f}x"
                            f"{' (--tune measures the plans not measured)' if unmeasured else ''}"
                            f" (--dfs or --memory-budget use it)")


def _ratio(slowdown: float | None) -> str:
    """A measured slowdown as the report words it: two decimals, four where two would read as
    the limit itself (1.0523 is "1.0523x", not a "1.05x" that 1.05x rejects)."""
    if slowdown is None:
        return "not measured"
    digits = 4 if f"{slowdown:.2f}" == f"{AUTO_MAX_SLOWDOWN:.2f}" else 2
    return f"{slowdown:.{digits}f}x the untiled build's time"


def _untiled(choice, reason: str):
    """``choice`` without its plan (the untiled build), for ``reason``."""
    return replace(choice, plan=DfsPlan(), peak_bytes=choice.baseline_peak_bytes,
                   recompute=1.0, reason=reason)


def host_build_of(plan: MemoryPlan, build: HostBuild):
    """The host library the plan asks for: the one its measurement built, or the one its
    measurement lowered (``LoweredBuilds``) built, or a new one."""
    kept = plan.builds.get("tiled" if plan.enabled else "untiled")
    dfs = plan.dfs.plan if plan.enabled else None
    library = kept if kept is not None else \
        plan.lowered.build(_plan_key(dfs), plan.module, build, dfs)
    plan.lowered.clear()  # the other plans' lowerings are not built
    return library


__all__ = ["LoweredBuilds", "MemoryPlan", "ProjectPricer", "STREAM_BANDS", "host_build_of",
           "plan_host", "plan_project"]
