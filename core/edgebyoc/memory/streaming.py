"""Depth-first planning of a C project: chains of layers streamed in row bands through ring
buffers (issue #18; the DFS paper's sliding windows, section III-C, on an MCU).

A *chain* is a run of consecutive steps of the network (``codegen.cgraph.Step``) that can each
compute a band of output rows: the core's host kernels (convolution with its requantization,
average pooling, requantize, quantized add, clip / ReLU) and offloaded regions whose codegen
gives ``CodegenOutput.c_entry_rows`` (every channels-last MATCH layer through
``edgebyoc.api.match.layer_codegen``). Inside a chain, a tensor that only chain steps read is
never held whole: it lives in a ring buffer of the rows its readers still need, row ``y`` at
row ``y % ring``. Tensors from before the chain are read in place; tensors read after it are
written whole, band by band.

The schedule pulls: the chain's last results (its *sinks*) advance one band of ``band`` rows
at a time, and each step computes the rows asked of it ``band`` rows per call, each call
first having its producers compute the rows it reads (``RowWindow.rows``). With one row per
call every ring holds just its reader's window (3 rows under a 3x3 filter). Every row is
computed once: streaming adds no MACs. Simulating the schedule gives each ring's size: the most rows
between a write and the oldest row a later read still needs.

``plan_chains`` chooses the chains by planning the arena (``memory.arena``) of each
candidate: until nothing lowers it, the candidate chain (any run of streamable steps, a chain
replacing those it overlaps) that gives the smallest arena is added; with a budget it stops
as soon as the total fits. ``codegen.cemit`` writes a chain as one block of network.c: a
table of (step, first row, end row) events and a switch calling each step's row form.
``band_layer`` gives the (workload, schedule) of one band of a MATCH layer, which the memory
stage prices with the module's cost model.
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass, field
from typing import Mapping, Sequence

from .arena import ArenaTensor, lower_bound_bytes, plan_arena
from ..target import RowWindow


@dataclass(frozen=True)
class ResidentLayer:
    """A layer of a chain whose weights stay in its module's weight memory for the whole
    chain (``ExecModule.weight_memory``): the step (record index), its region's
    ``edgebyoc_resident_t`` variable (``CodegenOutput.resident_weights``), the module whose
    weight memory holds them, and their place there (``offset``, ``nbytes``)."""

    index: int
    variable: str
    module: str
    offset: int
    nbytes: int


@dataclass(frozen=True)
class WeightOffer:
    """What a chain's layer on a module with a weight memory offers for residency: its
    ``edgebyoc_resident_t`` ``variable`` and resident ``nbytes`` (empty / 0: it cannot be
    resident), the ``module`` and its weight memory's ``capacity``, and ``buffer_bytes``,
    what its weight buffers take there when it loads them per call."""

    variable: str
    nbytes: int
    module: str
    capacity: int
    buffer_bytes: int


#: a resident layer's place in the weight memory is aligned to this many bytes, and so are
#: its int32 arrays after its weights (``codegen.layer.resident_weight_bytes``)
RESIDENT_ALIGN = 8


def resident_layers(chain: "Chain", offers: Mapping[int, WeightOffer]) -> tuple[ResidentLayer, ...]:
    """The layers of ``chain`` whose weights stay loaded across its bands, per module: the
    most calls saved first, each added while the resident weights plus the largest weight
    buffer of the module's other layers in the chain fit its weight memory; placed one
    after the other from offset 0. ``offers``: per record index (see ``WeightOffer``)."""
    calls: dict[int, int] = {}
    for index, _, _ in chain.events:
        calls[index] = calls.get(index, 0) + 1
    chosen: list[ResidentLayer] = []
    for module in sorted({o.module for i, o in offers.items() if i in calls}):
        members = {i: o for i, o in offers.items() if i in calls and o.module == module}
        capacity = next(iter(members.values())).capacity
        taken: set[int] = set()
        used = 0
        for index in sorted((i for i, o in members.items() if o.variable and calls[i] > 1),
                            key=lambda i: (-(calls[i] - 1) * members[i].nbytes, i)):
            size = -(-members[index].nbytes // RESIDENT_ALIGN) * RESIDENT_ALIGN
            others = max((o.buffer_bytes for i, o in members.items()
                          if i not in taken and i != index), default=0)
            if used + size + others <= capacity:
                chosen.append(ResidentLayer(index, members[index].variable, module, used,
                                            members[index].nbytes))
                taken.add(index)
                used += size
    return tuple(sorted(chosen, key=lambda r: r.index))


@dataclass(frozen=True)
class Chain:
    """Steps ``first`` to ``last`` (indices into the records) streamed in bands of ``band``
    rows of the sinks. ``events`` are (record index, first row, end row) in execution order,
    ``rings`` the rows held by each tensor the chain keeps in a ring (by tensor name)."""

    first: int
    last: int
    band: int
    events: tuple[tuple[int, int, int], ...]
    rings: Mapping[str, int] = field(default_factory=dict)
    #: (input name, output name, offset): the chain's output written over the rows of an
    #: input it has read for the last time, the input placed ``offset`` bytes above it
    overlap: tuple[str, str, int] | None = None
    #: the layers whose weights stay in their module's weight memory for the chain
    resident: tuple[ResidentLayer, ...] = ()

    def to_dict(self, records, overlapped: bool) -> dict:
        """Its report entry; ``overlapped``: its overlap was applied (``applied_overlaps``)."""
        return {"steps": [records[i].number for i in (self.first, self.last)],
                "band_rows": self.band, "calls": len(self.events),
                "rings": dict(self.rings),
                "resident_weights": [{"step": records[r.index].number, "module": r.module,
                                      "offset_bytes": r.offset, "bytes": r.nbytes}
                                     for r in self.resident],
                "overlap": dict(zip(("input", "output", "offset_bytes"), self.overlap))
                if overlapped else None}


@dataclass
class StreamPlan:
    """The chains chosen, the arena they give (``memory.arena.ArenaPlan``) and its items."""

    chains: list[Chain]
    arena: object
    items: list[ArenaTensor]
    baseline_bytes: int

    def to_dict(self, records) -> dict:
        applied = applied_overlaps(self.chains)
        return {"chains": [c.to_dict(records, c.overlap is not None and c.overlap in applied)
                           for c in self.chains],
                "arena_bytes": self.arena.size_bytes, "untiled_arena_bytes": self.baseline_bytes,
                "extra_macs": 0}


def height(tensor) -> int:
    """Rows of a 4-D tensor on its ``row_axis`` (1, NHWC, unless a step reads it in planes;
    1 for a tensor of rank < 4)."""
    return tensor.shape[tensor.base().row_axis or 1] if len(tensor.shape) == 4 else 1


def row_bytes(tensor) -> int:
    return tensor.nbytes // max(height(tensor), 1)


def _streamable(record) -> bool:
    out = record.output
    return record.streamable and len(out.shape) == 4 and out.shape[0] == 1


def chain_valid(records: Sequence, first: int, last: int) -> bool:
    """Whether steps ``first..last`` can be streamed: each streamable, and every tensor a step
    reads that an earlier step of the chain writes read through a row window, as itself (a
    view of another shape has other rows)."""
    written = set()
    for record in records[first:last + 1]:
        if not _streamable(record):
            return False
        windowed = {id(t.base()) for t, _ in record.windows}
        if any(id(t.base()) in written and id(t.base()) not in windowed for t in record.reads):
            return False
        if any(id(t.base()) in written and t.root is not None for t, _ in record.windows):
            return False
        if any(len(t.shape) != 4 for t, _ in record.windows):
            return False
        written.add(id(record.output.base()))
    return True


def internal_tensors(records: Sequence, first: int, last: int, viewed: set[int]) -> set[int]:
    """Ids of the tensors a ring can hold: written by the chain, read only inside it (their
    last reader is a chain step), not the network's output, never seen through a view."""
    end_step = records[last].number
    found = set()
    for record in records[first:last + 1]:
        base = record.output.base()
        if base.kind == "arena" and base.last <= end_step and id(base) not in viewed \
                and base.root is None and record.output is base:
            found.add(id(base))
    return found


def schedule(records: Sequence, first: int, last: int, band: int,
             internal: set[int]) -> tuple[tuple[int, int, int], ...]:
    """The pull schedule of a chain (see the module docstring)."""
    producer = {id(records[i].output.base()): i for i in range(first, last + 1)}
    done = {i: 0 for i in range(first, last + 1)}
    events: list[tuple[int, int, int]] = []

    def need(index: int, rows: int) -> None:
        rows = min(rows, height(records[index].output))
        while done[index] < rows:  # at most ``band`` rows per call
            y0 = done[index]
            y1 = min(rows, y0 + band)
            for tensor, window in records[index].windows:
                source = producer.get(id(tensor.base()))
                if source is not None and source != index:
                    need(source, window.rows(y0, y1, height(tensor))[1])
            events.append((index, y0, y1))
            done[index] = y1

    sinks = [i for i in range(first, last + 1) if id(records[i].output.base()) not in internal]
    tallest = max(height(records[i].output) for i in sinks)
    bands = math.ceil(tallest / band)
    for b in range(bands):
        for sink in sinks:
            need(sink, math.ceil((b + 1) * height(records[sink].output) / bands))
    return tuple(events)


def ring_rows(records: Sequence, events, internal: set[int]) -> dict[str, int]:
    """Rows each internal tensor's ring needs under ``events`` (its height when the ring
    would hold it all)."""
    writes: dict[int, list[tuple[int, int, int]]] = {}  # tensor -> (event, y0, y1)
    reads: dict[int, list[tuple[int, int, int]]] = {}
    tensors = {}
    for e, (index, y0, y1) in enumerate(events):
        record = records[index]
        out = record.output.base()
        if id(out) in internal:
            writes.setdefault(id(out), []).append((e, y0, y1))
            tensors[id(out)] = out
        for tensor, window in record.windows:
            base = tensor.base()
            if id(base) in internal:
                reads.setdefault(id(base), []).append((e, *window.rows(y0, y1, height(base))))
    rings = {}
    for key, tensor in tensors.items():
        need = 1
        tensor_reads = sorted(reads.get(key, []))
        read_events = [er for er, _, _ in tensor_reads]
        # the lowest first row read (of a read of at least one row) from each read on
        lowest = [math.inf] * (len(tensor_reads) + 1)
        for i in range(len(tensor_reads) - 1, -1, -1):
            _, r0, r1 = tensor_reads[i]
            lowest[i] = min(lowest[i + 1], r0) if r1 > r0 else lowest[i + 1]
        for e, y0, y1 in writes[key]:
            need = max(need, y1 - y0)
            later = lowest[bisect.bisect_right(read_events, e)]  # of the reads after e
            if later != math.inf:
                need = max(need, y1 - later)
        for _, r0, r1 in tensor_reads:
            need = max(need, r1 - r0)
        rings[tensor.name] = min(need, height(tensor))
    return rings


def overlap(records: Sequence, first: int, last: int, events, internal: set[int],
            viewed: set[int]) -> tuple[str, str, int] | None:
    """The (input, output, offset) pair of a chain that saves the most bytes when the output
    is written over the input's rows already read for the last time (input ``offset`` bytes
    above the output: output row bytes up to each event's end stay below the input rows that
    event and later ones read), or ``None``. The output is channels-last (in channel planes
    its first rows are not its first bytes); an input in planes counts the rows of its first
    plane, the lowest of its bytes a later read needs."""
    end_step = records[last].number
    produced = {id(records[i].output.base()) for i in range(first, last + 1)}
    inputs, outputs = {}, {}
    for i in range(first, last + 1):
        for tensor, _ in records[i].windows:
            base = tensor.base()
            if id(base) not in produced and base.kind == "arena" and base.root is None and \
                    id(base) not in viewed and base.last <= end_step:
                inputs[id(base)] = base
        base = records[i].output.base()
        if id(base) not in internal and base.kind == "arena" and id(base) not in viewed \
                and base.row_axis == 1:
            outputs[id(base)] = base
    for i in range(first, last + 1):  # read whole by a step: no row of it is dead early
        windowed = {id(t.base()) for t, _ in records[i].windows}
        for tensor in records[i].reads:
            if id(tensor.base()) not in windowed:
                inputs.pop(id(tensor.base()), None)
    best = None
    for x in inputs.values():
        reads = []  # (event, first row of x it reads)
        for e, (index, y0, y1) in enumerate(events):
            for tensor, window in records[index].windows:
                if tensor.base() is x:
                    reads.append((e, window.rows(y0, y1, height(x))[0]))
        # the bytes of one row of x: all of it channels-last, its first plane's in planes
        x_row = row_bytes(x) if (x.row_axis or 1) == 1 else x.nbytes // x.size * x.shape[3]
        for y in outputs.values():
            offset = 0
            for e, (index, y0, y1) in enumerate(events):
                if records[index].output.base() is not y:
                    continue
                later = [r for er, r in reads if er >= e]
                if later:
                    offset = max(offset, y1 * row_bytes(y) - min(later) * x_row)
            offset = -(-offset // 16) * 16  # the arena's alignment
            saving = x.nbytes + y.nbytes - max(offset + x.nbytes, y.nbytes)
            if saving > 0 and (best is None or saving > best[0]):
                best = (saving, (x.name, y.name, offset))
    return None if best is None else best[1]


def make_chain(records: Sequence, first: int, last: int, band: int,
               viewed: set[int]) -> Chain | None:
    """The chain of steps ``first..last`` with its schedule and rings, or ``None`` when it
    cannot be streamed or keeps no tensor in a ring."""
    if last <= first or not chain_valid(records, first, last):
        return None
    internal = internal_tensors(records, first, last, viewed)
    if not internal:
        return None
    events = schedule(records, first, last, band, internal)
    rings = ring_rows(records, events, internal)
    return Chain(first, last, band, events, rings,
                 overlap(records, first, last, events, internal, viewed))


def arena_items(bases: Sequence, records: Sequence, chains: Sequence[Chain]) -> list[ArenaTensor]:
    """The arena tensors with the chains applied: a ring's size is its rows, and a tensor a
    chain reads (writes) lives to the chain's last (from its first) step."""
    spans = []
    for chain in chains:
        numbers = (records[chain.first].number, records[chain.last].number)
        reads = {id(t.base()) for r in records[chain.first:chain.last + 1] for t in r.reads}
        writes = {id(r.output.base()) for r in records[chain.first:chain.last + 1]}
        spans.append((numbers, reads, writes, chain.rings))
    items = {}
    for tensor in bases:
        size, first, last = tensor.nbytes, tensor.first, tensor.last
        for (start, end), reads, writes, rings in spans:
            if tensor.name in rings:
                size = rings[tensor.name] * row_bytes(tensor)
            if id(tensor) in writes:
                first = min(first, start)
            if id(tensor) in reads:
                last = max(last, end)
        items[tensor.name] = ArenaTensor(tensor.name, size, first, last)
    for pair in applied_overlaps(chains):  # an output over its input: one item
        x, y, offset = pair
        a, b = items.pop(x), items.pop(y)
        items[merged_name(pair)] = ArenaTensor(merged_name(pair), max(offset + a.size, b.size),
                                               min(a.first, b.first), max(a.last, b.last))
    return list(items.values())


def applied_overlaps(chains: Sequence[Chain]) -> list[tuple[str, str, int]]:
    """The chains' overlapped pairs, in order, leaving out one that shares a tensor with an
    earlier pair (a chain's output read over by the next chain stays whole)."""
    taken, pairs = set(), []
    for chain in chains:
        if chain.overlap is not None and not taken & set(chain.overlap[:2]):
            taken.update(chain.overlap[:2])
            pairs.append(chain.overlap)
    return pairs


def merged_name(pair: tuple[str, str, int]) -> str:
    """The arena item holding an overlapped (input, output) pair."""
    return f"{pair[0]}+{pair[1]}"


def member_offsets(plan, chains: Sequence[Chain]) -> None:
    """Add the offsets of each overlapped pair's tensors to ``plan.offsets``."""
    for pair in applied_overlaps(chains):
        x, y, offset = pair
        start = plan.offsets[merged_name(pair)]
        plan.offsets[x], plan.offsets[y] = start + offset, start


def plan_chains(records: Sequence, bases: Sequence, viewed: set[int], band: int = 1,
                budget: int | None = None, extra_bytes: int = 0) -> StreamPlan:
    """The chains that give the smallest arena (see the module docstring); with ``budget``
    (bytes of arena plus ``extra_bytes``, the caller's buffers) the first plan that fits."""
    baseline = plan_arena(arena_items(bases, records, []))
    runs, start = [], None
    for i, record in enumerate(list(records) + [None]):
        if record is not None and _streamable(record):
            start = i if start is None else start
        elif start is not None:
            runs.append((start, i - 1))
            start = None
    cache: dict[tuple[int, int], Chain | None] = {}

    def candidate(a: int, b: int) -> Chain | None:
        if (a, b) not in cache:
            cache[(a, b)] = make_chain(records, a, b, band, viewed)
        return cache[(a, b)]

    def size(chains, limit: int) -> int | None:
        """The arena of ``chains``, or ``None`` when its lower bound (the bytes alive at
        once, which no placement beats) is above ``limit``: the placement is skipped."""
        items = arena_items(bases, records, chains)
        if lower_bound_bytes(items) > limit:
            return None
        return plan_arena(items).size_bytes

    chosen: list[Chain] = []
    best = baseline.size_bytes
    while budget is None or best + extra_bytes > budget:
        trial = None
        for a0, b0 in runs:
            for a in range(a0, b0 + 1):
                for b in range(a + 1, b0 + 1):
                    chain = candidate(a, b)
                    if chain is None or chain in chosen:
                        continue
                    kept = [c for c in chosen if c.last < a or c.first > b]
                    # only an arena below ``best`` and no larger than the trial's can win
                    value = size(kept + [chain], best - 1 if trial is None else
                                 min(best - 1, trial[0][0]))
                    if value is None:
                        continue
                    key = (value, len(chain.events))
                    if value < best and (trial is None or key < trial[0]):
                        trial = (key, kept + [chain])
        if trial is None:
            break
        best, chosen = trial[0][0], sorted(trial[1], key=lambda c: c.first)
    return stream_plan(records, bases, chosen, baseline.size_bytes)


def stream_plan(records: Sequence, bases: Sequence, chains: Sequence[Chain],
                baseline_bytes: int) -> StreamPlan:
    """The ``StreamPlan`` of ``chains`` (sorted by their first step): its arena placed."""
    chains = sorted(chains, key=lambda c: c.first)
    items = arena_items(bases, records, chains)
    arena = plan_arena(items)
    member_offsets(arena, chains)
    return StreamPlan(chains, arena, items, baseline_bytes)


def band_layer(workload, schedule, y0: int, y1: int):
    """(workload, schedule) of one call computing output rows ``y0..y1`` of a MATCH layer
    (its ``Workload`` and whole-layer ``dse.Schedule``), for the module's cost model: the
    input rows the band reads with what is left of the padding, the row tile cut to the
    band (the template clips its tiles the same way; a row loop of one trip disappears)."""
    from dataclasses import replace

    from ..dse import Schedule

    nest = schedule.nest
    top, left, bottom, right = nest.padding
    stride, kernel = nest.stride[0], (nest.FY - 1) * nest.dilation[0] + 1
    first, end = RowWindow(0, kernel, stride, top).rows(y0, y1, nest.IY)
    pad_top = max(0, top - y0 * stride)
    pad_bottom = max(0, (y1 - 1) * stride - top + kernel - nest.IY)
    rows = y1 - y0
    band_nest = replace(nest, OY=rows, IY=end - first,
                        padding=(pad_top, left, pad_bottom, right))
    tile = min(rows, schedule.tiles["OY"])  # the template's last tile takes what is left
    order, fill = list(schedule.order), dict(schedule.fill)
    if tile == rows and "OY" in order:
        position = order.index("OY")
        order.pop(position)
        fill = {op: depth - 1 if depth > position else depth for op, depth in fill.items()}
    band_schedule = Schedule(band_nest, {**schedule.tiles, "OY": tile}, tuple(order), fill,
                             schedule.double_buffer, dict(schedule.spatial),
                             schedule.accumulator_bits)
    height_in = nest.IY

    def shape(value):
        dims, dtype = value
        if len(dims) == 4 and dims[1] == height_in:
            dims = (dims[0], end - first, *dims[2:])
        return dims, dtype

    attrs = dict(workload.attrs)
    if len(attrs.get("padding", ())) == 4:
        attrs["padding"] = [pad_top, left, pad_bottom, right]
    out_dims, out_dtype = workload.output
    band_workload = replace(workload, inputs=tuple(shape(v) for v in workload.inputs),
                            output=((out_dims[0], rows, *out_dims[2:]), out_dtype),
                            attrs=attrs, macs=workload.macs * rows // max(nest.OY, 1))
    return band_workload, band_schedule
