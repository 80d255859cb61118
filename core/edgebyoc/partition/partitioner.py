"""The partitioner: candidates -> cost-based dispatch -> regions -> fused region functions."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field, replace
from math import inf
from typing import Any

import tvm
from tvm import relax
from tvm.relax.transform import FusionPattern

from ..errors import PLUGIN_FAULTS, PluginError
from ..relax_info import attrs_dict, nbytes, operator_macs, shape_dtype
from ..session import CompileSession
from ..target import Composite, Cost, ExecModule, PatternEntry, Target, Workload
from .layouts import planar_boundaries

#: Composite names are ``<REGION_PREFIX><k>.<target>.<module>.<pattern>``: TVM's
#: MergeCompositeFunctions groups composites by the part before the first dot, so each planned
#: region gets its own prefix and merges into exactly one function.
REGION_PREFIX = "edgebyocregion"



@dataclass(eq=False)
class Candidate:
    """A place where one module's pattern matches and its checks accept."""

    module: ExecModule
    entry: PatternEntry
    name: str
    vars: frozenset
    order: int  # index of the first covered binding: candidates sort in program order
    anchor: Any
    workload: Workload
    cost: Cost | None = None
    reason: str = ""
    schedule: Any = None  # the dse.Schedule found for modules with a memory hierarchy
    unfit: str = ""  # why no schedule fits the module's memory (then it is not offloaded)

    @property
    def size(self) -> int:
        return len(self.vars)


@dataclass(eq=False)
class RegionInfo:
    """A region formed by merging; offloaded or fallen back to the host, with the reason."""

    index: int
    module: str
    candidates: list[Candidate]
    macs: int = 0
    memory_bytes: int = 0
    offloaded: bool = True
    reason: str = ""
    symbols: list[str] = field(default_factory=list)
    quantization: dict[str, Any] | None = None  # scales, when the module quantizes its regions
    activation_layout: str = "NHWC"  # of the 4-D activations crossing its boundary

    @property
    def ops(self) -> int:
        return sum(c.size for c in self.candidates)

    @property
    def predicted_cycles(self) -> float | None:
        costs = [c.cost.latency_cycles for c in self.candidates if c.cost is not None]
        return sum(costs) if len(costs) == len(self.candidates) and costs else None

    def to_dict(self) -> dict[str, Any]:
        return {"index": self.index, "module": self.module, "operators": self.ops,
                "patterns": [c.name for c in self.candidates], "macs": self.macs,
                "memory_bytes": self.memory_bytes, "offloaded": self.offloaded,
                "reason": self.reason, "symbols": self.symbols,
                "predicted_cycles": self.predicted_cycles, "quantization": self.quantization,
                "activation_layout": self.activation_layout,
                "schedules": [c.schedule.to_dict() if c.schedule is not None else None
                              for c in self.candidates],
                "breakdown": [dict(c.cost.breakdown) if c.cost is not None else None
                              for c in self.candidates]}


@dataclass
class PartitionResult:
    mod: tvm.IRModule
    regions: list[RegionInfo]
    operators: list[dict[str, Any]]
    #: symbol -> (RegionInfo, Region dataclass handed to codegen) for offloaded functions
    functions: dict[str, Any] = field(default_factory=dict)
    #: seconds spent in schedule searches
    search_seconds: float = 0.0
    #: (``permute_dims`` the core put in ``main`` at NCHW region boundaries, the model's own
    #: that became unnecessary there; ``layouts.planar_boundaries``)
    layout_transforms: tuple[int, int] = (0, 0)
    #: ``cost(module, workload, schedule)``: the module's ``Cost`` of a workload under a given
    #: schedule through the compile's cost cache and the checks dispatch makes (the memory
    #: stage prices streamed bands with it); ``None`` for a partition made without one
    cost: Any = None
    #: the priced parts of the network, each ``(module or None for the host, workload,
    #: schedule or None)``: offloaded candidates and host operators (the calibration fit
    #: re-prices these, ``calibration_fit``)
    priced: list[tuple[Any, Workload, Any]] = field(default_factory=list)

    @property
    def offloaded_regions(self) -> list[RegionInfo]:
        return [r for r in self.regions if r.offloaded]


# -- program analysis ---------------------------------------------------------------------------

class Program:
    """Bindings of ``main`` in order, with producer / consumer relations between them."""

    def __init__(self, main: relax.Function):
        self.bindings: list[tuple[Any, Any]] = []
        for block in main.body.blocks:
            for binding in block.bindings:
                self.bindings.append((binding.var, binding.value))
        self.index = {var: i for i, (var, _) in enumerate(self.bindings)}
        self.value = dict(self.bindings)
        self.consumers: dict[Any, set] = {var: set() for var, _ in self.bindings}
        self.producers: dict[Any, set] = {var: set() for var, _ in self.bindings}
        for var, value in self.bindings:
            for used in _used_vars(value):
                if used in self.consumers:
                    self.consumers[used].add(var)
                    self.producers[var].add(used)
        self.outputs = set(_used_vars(main.body.body))

    def op_calls(self):
        for var, value in self.bindings:
            if isinstance(value, relax.Call) and isinstance(value.op, tvm.ir.Op):
                yield var, value


def _used_vars(expr) -> list:
    found = []

    def visit(node):
        if isinstance(node, relax.Var):
            found.append(node)

    relax.analysis.post_order_visit(expr, visit)
    return found


def _is_constant(expr) -> bool:
    return isinstance(expr, tvm.ir.expr.Constant)


#: MAC-free operators that are a layer of their own (the anchor of a pattern holding them)
LAYER_OPS = ("relax.nn.avg_pool2d", "relax.nn.max_pool2d")


def workload_of(calls: list, pattern: str) -> Workload:
    """The workload of a matched pattern from its operator calls (program order)."""
    mac_calls = [c for c in calls if operator_macs(c) > 0]
    layers = [c for c in calls if c.op.name in LAYER_OPS]
    anchor = mac_calls[0] if mac_calls else layers[0] if layers else calls[-1]
    args = list(anchor.args[1].fields) if anchor.op.name == "relax.call_tir" \
        and isinstance(anchor.args[1], relax.Tuple) else list(anchor.args)  # a kernel's args
    inputs = tuple(shape_dtype(arg.ty) for arg in args if hasattr(arg, "ty")
                   and hasattr(arg.ty, "dtype"))
    constant_bytes = sum(nbytes(arg.ty) for call in calls for arg in call.args
                         if _is_constant(arg))
    return Workload(op=anchor.op.name, pattern=pattern, inputs=inputs,
                    output=shape_dtype(anchor.ty), attrs=attrs_dict(anchor.attrs),
                    macs=sum(operator_macs(c) for c in calls), constant_bytes=constant_bytes,
                    bits=_operand_bits(calls, anchor))


def _operand_bits(calls: list, anchor) -> dict[str, int]:
    """Value widths of a match's input, anchor constant and output (see ``Workload.bits``)."""
    def bits(dtype: str) -> int:
        return tvm.DataType(dtype).bits if dtype else 0

    produced = {id(c) for c in calls}
    bits_of = {}
    for call in calls:
        entering = [a for a in call.args if isinstance(a, relax.Var) and hasattr(a.ty, "dtype")
                    and id(a) not in produced]
        if entering:
            bits_of["I"] = bits(str(entering[0].ty.dtype))
            break
    for arg in anchor.args:
        if _is_constant(arg) and hasattr(arg.ty, "dtype"):
            dtype = str(arg.ty.dtype)
            width = bits(dtype)
            if dtype.startswith("int") and width > 8:
                value = arg.value.numpy()
                for narrow in (8, 16):
                    if value.size and value.min() >= -(1 << (narrow - 1)) \
                            and value.max() < (1 << (narrow - 1)):
                        width = narrow
                        break
            bits_of["W"] = width
            break
    if hasattr(calls[-1].ty, "dtype"):
        bits_of["O"] = bits(str(calls[-1].ty.dtype))
    return bits_of


# -- the partitioner ----------------------------------------------------------------------------

class Partitioner:
    def __init__(self, target: Target, registry, cost_metric: str = "latency",
                 options: dict[str, Any] | None = None, session: CompileSession | None = None):
        if cost_metric not in ("latency", "energy"):
            raise ValueError(f"cost metric {cost_metric!r}: use 'latency' or 'energy'")
        self.target, self.registry, self.metric = target, registry, cost_metric
        self.session = session or CompileSession(target.name)
        self.options = dict(options if options is not None else target.resolve_options(None))
        #: binding var -> {module: why its pattern check refused the operator}
        self.refusals: dict[Any, dict[str, str]] = {}
        #: time spent in schedule searches (seconds)
        self.search_seconds = 0.0
        self.host_priced: list[tuple[Any, Workload, Any]] = []  # price_host_operators

    # patterns ---------------------------------------------------------------------------------

    def patterns(self, module: ExecModule) -> list[tuple[str, PatternEntry]]:
        entries = []
        for item in self.registry.call(self.target.name, "edgebyoc_patterns",
                                       target=self.target, module=module,
                                       options=self.options) or []:
            for entry in (item if isinstance(item, (list, tuple)) else [item]):
                if not isinstance(entry, PatternEntry):
                    raise PluginError(f"target {self.target.name!r}, module {module.name!r}: "
                                      f"edgebyoc_patterns returned a {type(entry).__name__}, "
                                      f"not a PatternEntry")
                entries.append((f"{self.target.name}.{module.name}.{entry.name}", entry))
        # discoverable through TVM's registry under their documented names (for the compile)
        self.session.register_patterns([(name, e.pattern, dict(e.annotations), e.check)
                                        for name, e in entries])
        return entries

    # candidates -------------------------------------------------------------------------------

    def candidates(self, mod: tvm.IRModule, program: Program) -> list[Candidate]:
        found: list[Candidate] = []
        for module in self.target.modules:
            entries = self.patterns(module)
            if not entries:
                continue
            errors: list[BaseException] = []
            fusion = [FusionPattern(name, entry.pattern, dict(entry.annotations),
                                    self._recorder(module, name, entry, program, found, errors))
                      for name, entry in entries]
            relax.transform.FuseOpsByPattern(fusion, bind_constants=False,
                                             annotate_codegen=False)(mod)
            if errors:
                raise PluginError(f"target {self.target.name!r}, module {module.name!r}: a "
                                  f"pattern check raised {type(errors[0]).__name__}: "
                                  f"{errors[0]}") from errors[0]
        return found

    def _recorder(self, module, name, entry, program, found, errors):
        def check(ctx) -> bool:
            try:
                covered = frozenset(v for v in ctx.matched_bindings.keys() if v in program.index)
                if not covered:
                    return False
                verdict = entry.check(ctx) if entry.check is not None else True
                if isinstance(verdict, str):  # refused, with the reason the report shows
                    for var in covered:
                        self.refusals.setdefault(var, {})[module.name] = verdict
                    return False
                if not verdict:
                    return False
                calls = [program.value[v] for v in sorted(covered, key=program.index.get)
                         if isinstance(program.value[v], relax.Call)
                         and isinstance(program.value[v].op, tvm.ir.Op)]
                for call in calls:
                    verdict = self.registry.call(self.target.name, "edgebyoc_annotate",
                                                 target=self.target, module=module, call=call,
                                                 options=self.options)
                    if verdict is False:
                        return False
                order = min(program.index[v] for v in covered)
                workload = workload_of(calls, name)
                mac_vars = [v for v in sorted(covered, key=program.index.get)
                            if isinstance(program.value[v], relax.Call)
                            and isinstance(program.value[v].op, tvm.ir.Op)
                            and operator_macs(program.value[v]) > 0]
                anchor = mac_vars[0] if mac_vars else max(covered, key=program.index.get)
                found.append(Candidate(module, entry, name, covered, order, anchor, workload))
            except PLUGIN_FAULTS as err:  # reported after the pass
                errors.append(err)
            return False  # a dry run: record, fuse nothing

        return check

    # dispatch ---------------------------------------------------------------------------------

    def cost(self, candidate: Candidate) -> Cost | None:
        key = (self.target.name, candidate.module.name, candidate.workload.key(),
               tuple(sorted((k, str(v)) for k, v in self.options.items())))
        cost, candidate.schedule, candidate.unfit = self.session.cost(
            key, lambda: self._price(candidate.module, candidate.workload))
        return cost

    def price_host_operators(self, rows: list) -> None:
        """Set ``predicted_cycles`` of each ``(row, call)`` left on the host from the plugin's
        ``edgebyoc_host_cost`` (``None`` where it has no model, and for the built-in host target,
        which no plugin owns; a plugin target without modules, a plain MCU, prices them all)."""
        for row, call in rows:
            cost = None
            if self.registry.owner(self.target.name):
                workload = workload_of([call], "host." + row["op"])
                self.host_priced.append((None, workload, None))
                cost = self.session.cost(
                    ("host", self.target.name, workload.key(),
                     tuple(sorted((k, str(v)) for k, v in self.options.items()))),
                    lambda: self.registry.call(self.target.name, "edgebyoc_host_cost",
                                               target=self.target, workload=workload,
                                               options=self.options))
                if cost is not None and not isinstance(cost, Cost):
                    raise PluginError(f"target {self.target.name!r}: edgebyoc_host_cost "
                                      f"returned a {type(cost).__name__}, not a Cost")
            row["predicted_cycles"] = None if cost is None else float(cost.latency_cycles)

    def schedule_cost(self, module: ExecModule, workload: Workload, schedule) -> Cost | None:
        """``module``'s cost of ``workload`` under ``schedule`` (e.g. one row band of a layer
        streamed depth-first), cached in the compile's session like every other answer."""
        key = ("schedule", self.target.name, module.name, workload.key(), schedule,
               tuple(sorted((k, str(v)) for k, v in self.options.items())))
        return self.session.cost(key, lambda: self._call_cost(module, workload, schedule))

    def _call_cost(self, module: ExecModule, workload: Workload, schedule) -> Cost | None:
        cost = self.registry.call(self.target.name, "edgebyoc_cost", target=self.target,
                                  module=module, workload=workload, schedule=schedule,
                                  options=self.options)
        if cost is not None and not isinstance(cost, Cost):
            raise PluginError(f"target {self.target.name!r}: edgebyoc_cost returned a "
                              f"{type(cost).__name__}, not a Cost")
        return cost

    def _price(self, module: ExecModule, workload: Workload):
        """(cost, schedule, why nothing fits): the schedule search for modules with a memory
        hierarchy, the cost hook's default schedule otherwise. Cached per workload."""
        from ..dse import extract, search

        nest = extract(workload) if len(module.memory_levels) >= 2 else None
        if nest is None:
            return self._call_cost(module, workload, None), None, ""
        nest = nest.with_activation_layout(module.activation_layout)
        inner = module.memory_levels[:-1]
        capacity = inner[0].capacity(self.options) if len(inner) == 1 else {
            level.name: (level.capacity(self.options), level.operands) for level in inner}
        result = search(nest, capacity, lambda s: self._call_cost(module, workload, s),
                        dict(module.spatial_mapping), inner[0].double_buffering,
                        getattr(module, "accumulator_bits", 0),
                        tuple(getattr(module, "partial_sum_dims", ("C",))))
        self.search_seconds += result.seconds
        if result.schedule is None:
            sizes = " and ".join(f"{level.name} ({level.capacity(self.options) / 1024:g} kB)"
                                 for level in inner)
            return None, None, (f"no schedule fits {sizes}: the smallest needs "
                                f"{result.smallest_l1 / 1024:.1f} kB")
        return result.cost, result.schedule, ""

    def _metric(self, cost: Cost | None) -> float:
        if cost is None:
            return inf
        value = cost.latency_cycles if self.metric == "latency" else cost.energy
        return inf if value is None else float(value)

    def dispatch(self, candidates: list[Candidate]) -> list[Candidate]:
        """One candidate per anchor, without overlaps, in program order."""
        module_rank = {m.name: i for i, m in enumerate(self.target.modules)}
        by_anchor: dict[Any, list[Candidate]] = {}
        for candidate in candidates:
            by_anchor.setdefault(candidate.anchor, []).append(candidate)
        taken: set = set()
        chosen: list[Candidate] = []
        for anchor in sorted(by_anchor, key=lambda a: min(c.order for c in by_anchor[a])):
            preferred: dict[str, Candidate] = {}
            for candidate in sorted(by_anchor[anchor],
                                    key=lambda c: (-c.size, -c.entry.priority)):
                if candidate.module.name in preferred or candidate.vars & taken:
                    continue
                preferred[candidate.module.name] = candidate  # the module's largest free match
            if not preferred:
                continue
            options = []
            for option in preferred.values():
                option.cost = self.cost(option)
                if option.unfit:  # the module cannot hold the layer: its next best chance
                    for var in option.vars:
                        self.refusals.setdefault(var, {})[option.module.name] = option.unfit
                else:
                    options.append(option)
            if not options:
                continue
            options.sort(key=lambda c: (self._metric(c.cost), -c.module.priority,
                                        module_rank[c.module.name]))
            best = options[0]
            if len(options) > 1:
                others = ", ".join(f"{o.module.name} {_describe_cost(o.cost, self.metric)}"
                                   for o in options[1:])
                best.reason = (f"pattern {best.name}; {self.metric} "
                               f"{_describe_cost(best.cost, self.metric)} beats {others}")
            else:
                best.reason = f"pattern {best.name}" + (
                    f"; {_describe_cost(best.cost, self.metric)}" if best.cost else "")
            chosen.append(best)
            taken |= best.vars
        return sorted(chosen, key=lambda c: c.order)

    # regions ----------------------------------------------------------------------------------

    def regions(self, chosen: list[Candidate], program: Program) -> list[RegionInfo]:
        owner: dict[Any, RegionInfo] = {}
        regions: list[RegionInfo] = []
        for candidate in chosen:
            producers = {p for v in candidate.vars for p in program.producers[v]} - candidate.vars
            merged = False
            for region in sorted({owner[p] for p in producers if p in owner},
                                 key=lambda r: r.index):
                if region.module == candidate.module.name and \
                        self._can_merge(region, candidate, program):
                    region.candidates.append(candidate)
                    for v in candidate.vars:
                        owner[v] = region
                    merged = True
                    break
            if not merged:
                region = RegionInfo(len(regions), candidate.module.name, [candidate])
                regions.append(region)
                for v in candidate.vars:
                    owner[v] = region
        for region in regions:
            module = self.target.module(region.module)
            region.macs = sum(c.workload.macs for c in region.candidates)
            region.memory_bytes = _region_memory(region, program)
            if region.macs < module.min_region_macs:
                region.offloaded = False
                region.reason = (f"fallback to host: the region has {region.macs} MACs "
                                 f"(module {module.name} offloads regions of at least "
                                 f"{module.min_region_macs})")
        return regions

    def _can_merge(self, region: RegionInfo, candidate: Candidate, program: Program) -> bool:
        module = self.target.module(region.module)
        if module.max_region_ops and region.ops + candidate.size > module.max_region_ops:
            return False
        if module.max_region_composites and \
                len(region.candidates) + 1 > module.max_region_composites:
            return False
        if module.region_memory_bytes:
            trial = RegionInfo(-1, region.module, region.candidates + [candidate])
            if _region_memory(trial, program) > module.region_memory_bytes:
                return False
        return not _creates_cycle(region, candidate, program)

    # fuse -------------------------------------------------------------------------------------

    def fuse(self, mod: tvm.IRModule, regions: list[RegionInfo], program: Program):
        accepted: dict[str, set[frozenset]] = {}
        entries: dict[str, PatternEntry] = {}
        for region in regions:
            if not region.offloaded:
                continue
            for candidate in region.candidates:
                name = f"{REGION_PREFIX}{region.index}.{candidate.name}"
                accepted.setdefault(name, set()).add(candidate.vars)
                entries[name] = candidate.entry
        if not accepted:
            return mod

        def exact(name):
            def check(ctx) -> bool:
                covered = frozenset(v for v in ctx.matched_bindings.keys() if v in program.index)
                return covered in accepted[name]
            return check

        fusion = [FusionPattern(name, entries[name].pattern, dict(entries[name].annotations),
                                exact(name)) for name in accepted]
        mod = relax.transform.FuseOpsByPattern(fusion, bind_constants=False,
                                               annotate_codegen=False)(mod)
        return relax.transform.MergeCompositeFunctions()(mod)


def _describe_cost(cost: Cost | None, metric: str) -> str:
    if cost is None:
        return "(no cost model)"
    value = cost.latency_cycles if metric == "latency" else cost.energy
    unit = "cycles" if metric == "latency" else "energy units"
    return f"{value:.4g} {unit}" if value is not None else "(no energy model)"


def _region_memory(region: RegionInfo, program: Program) -> int:
    """Bytes a region touches: its constants plus the activations crossing its boundary."""
    inside = set().union(*(c.vars for c in region.candidates))
    constants = sum(c.workload.constant_bytes for c in region.candidates)
    boundary = 0
    for var in inside:
        value = program.value[var]
        for used in _used_vars(value):
            if used not in inside:
                boundary += nbytes(used.ty)
        if (program.consumers[var] - inside) or var in program.outputs:
            boundary += nbytes(var.ty)
    return constants + boundary


def _creates_cycle(region: RegionInfo, candidate: Candidate, program: Program) -> bool:
    """Whether a path leaves the region and re-enters it at the candidate (no merge then)."""
    inside = set().union(*(c.vars for c in region.candidates))
    group = inside | candidate.vars
    queue = deque(c for v in inside for c in program.consumers[v] if c not in group)
    seen = set(queue)
    while queue:
        var = queue.popleft()
        for consumer in program.consumers[var]:
            if consumer in candidate.vars:
                return True
            if consumer not in group and consumer not in seen:
                seen.add(consumer)
                queue.append(consumer)
    return False


def _composites_of(function) -> list:
    found = []

    def visit(node):
        if isinstance(node, relax.Function) and node.attrs and "Composite" in node.attrs:
            found.append(node)

    relax.analysis.post_order_visit(function.body, visit)
    return found


def partition_module(mod: tvm.IRModule, target: Target, registry,
                     cost_metric: str = "latency", token: str = "0",
                     options: dict[str, Any] | None = None,
                     session: CompileSession | None = None) -> PartitionResult:
    """Partition ``mod`` for ``target``; see the package docstring.

    Region functions export ``<target>_<module>_r<k>_<token>``: ``token`` (a digest of model
    and options) keeps the symbols of two compiled models apart in one process.
    """
    from ..relax_info import operator_table
    from ..target import Region

    operators = operator_table(mod)
    partitioner = Partitioner(target, registry, cost_metric, options, session)
    program = Program(mod["main"])
    candidates = partitioner.candidates(mod, program) if target.modules else []
    chosen = partitioner.dispatch(candidates)
    regions = partitioner.regions(chosen, program)
    fused = partitioner.fuse(mod, regions, program)

    by_index = {r.index: r for r in regions}
    functions: dict[str, Any] = {}
    for gv, func in list(fused.functions.items()):
        codegen = func.attrs.get("Codegen") if func.attrs else None
        if not codegen or not str(codegen).startswith(REGION_PREFIX):
            continue
        region = by_index[int(str(codegen)[len(REGION_PREFIX):])]
        symbol = f"{target.name}_{region.module}_r{region.index}_{token}"
        if region.symbols:
            symbol += f"_{len(region.symbols)}"
        fused[gv] = func.with_attr("Codegen", target.name).with_attr("global_symbol", symbol)
        region.symbols.append(symbol)
        composites = []
        members = sorted(region.candidates, key=lambda c: c.order)
        for composite in _composites_of(func):
            full = str(composite.attrs["Composite"]).split(".", 1)[1]
            own = workload_of([b.value for blk in composite.body.blocks for b in blk.bindings
                               if isinstance(b.value, relax.Call)
                               and isinstance(b.value.op, tvm.ir.Op)], full)
            # the candidate this function was fused from: its name and shapes (calls of one
            # pattern on equal shapes may share one composite function, so the functions are
            # fewer than the candidates, and their order is no guide)
            candidate = next((c for c in members if c.name == full
                              and (c.workload.inputs, c.workload.output, c.workload.attrs)
                              == (own.inputs, own.output, own.attrs)), None)
            workload = candidate.workload if candidate is not None else own
            composites.append(Composite(full, full.rsplit(".", 1)[1], composite, workload,
                                        candidate.schedule if candidate is not None else None))
        # the constant parameters are filled in at codegen, after partial quantization
        functions[symbol] = (region, Region(symbol, region.module, fused[gv], tuple(composites)))
    modules = {m.name: m for m in target.modules}
    planar = {symbol: modules[info.module].activation_layout
              for symbol, (info, _) in functions.items()
              if modules[info.module].activation_layout != "NHWC"}
    layout_transforms = (0, 0)
    if planar:
        fused, *layout_transforms = planar_boundaries(fused, planar)
        rewritten = {str(f.attrs["global_symbol"]): f for f in fused.functions.values()
                     if isinstance(f, relax.Function) and f.attrs
                     and "global_symbol" in f.attrs}
        for symbol, layout in planar.items():
            info, region = functions[symbol]
            info.activation_layout = layout
            functions[symbol] = (info, replace(region, function=rewritten[symbol],
                                               activation_layout=layout))
    for region in regions:
        if region.offloaded and len(region.symbols) > 1:
            region.reason = (f"split into {len(region.symbols)} functions by "
                             f"MergeCompositeFunctions to avoid a cycle")

    owner = {v: (region, c) for region in regions for c in region.candidates for v in c.vars}
    row_of, call_of = {}, {}
    for row, (var, call) in zip(operators, program.op_calls()):
        row_of[var], call_of[var] = row, call
    for var, row in row_of.items():
        if var in owner:
            region, candidate = owner[var]
            if region.offloaded:
                refused = "".join(f"; {module} refused: {why}" for module, why
                                  in partitioner.refusals.get(var, {}).items()
                                  if module != region.module)
                row.update(module=region.module, region=region.index,
                           reason=candidate.reason + refused)
            else:
                row.update(module="host", region=region.index, reason=region.reason)
        elif var in partitioner.refusals:
            row.update(module="host", region=None, reason="; ".join(
                f"{module}: {why}" for module, why in partitioner.refusals[var].items()))
        else:
            row.update(module="host", region=None,
                       reason="host target" if not target.modules else
                       "no pattern of " + ", ".join(m.name for m in target.modules) + " matched")
    partitioner.price_host_operators(
        [(row, call_of[var]) for var, row in row_of.items() if row["module"] == "host"])
    priced = [(c.module, c.workload, c.schedule) for r in regions if r.offloaded
              for c in r.candidates]
    return PartitionResult(fused, regions, operators, functions,
                           round(partitioner.search_seconds, 3), tuple(layout_transforms),
                           partitioner.schedule_cost, priced + partitioner.host_priced)
