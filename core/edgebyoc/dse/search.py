"""Temporal-mapping search over a module's two-level memory hierarchy (MATCH, IV-B).

A *schedule* of a ``LoopNest`` on a module with an inner memory (L1) and an outer one (L2):

* ``tiles``: the tile size of K, OY and OX (multiples of the module's spatial unrolling, or the
  whole dimension; a tile need not divide its dimension: the last tile of a loop takes what is
  left, as MATCH's padded mapping does); for a module with an accumulator (``accumulator_bits``:
  int32 partial sums in L1) also of the reduction loops it names (``partial_sum_dims``: C, the
  input channels, of conv2d and dense layers; FY and FX, the filter rows and columns, of
  conv2d layers; divisors of their dimension);
* ``order``: the tile loops, outermost first (loops of one iteration left out); the tiled
  reduction loops are always the innermost, in the order FY, FX, C: an output tile
  accumulates over every reduction tile (its partial sums in the accumulator,
  ``accumulator_bytes``) and is requantized once, after the last. A weight buffer holds one
  tile of each tiled filter loop (it is filled inside them): the template lays the weights
  out tile by tile;
* ``fill``: per operand, the loop depth at which its L1 buffer is filled (0: once, before all
  loops; ``len(order)``: every innermost iteration). A buffer filled above one of its operand's
  relevant loops holds several tiles: fewer, larger transfers for more L1 (MATCH / LOMA's
  *uneven* mapping: each operand tiled at its own level);
* ``double_buffer``: transfers overlap compute (two buffers for every operand moved in the
  loop).

``Schedule.transfers`` gives per operand (count, bytes, contiguous chunks) and ``iterations``
the innermost compute calls; the plugin's cost hook prices them. ``search`` prunes whole
tilings by a lower bound (each operand moved once, in one chunk, the compute as it is) priced
by the same hook, so it returns the optimum ``exhaustive`` finds as long as the cost grows
with transfer counts, bytes and chunks, which the tests check on random workloads.
"""

from __future__ import annotations

import itertools
import functools
import math
import time
from dataclasses import dataclass, field
from typing import Callable, Mapping

from ..target import FrozenMap
from .workload import REDUCTION_DIM, REDUCTION_DIMS, RELEVANT, TILED_DIMS, LoopNest

OPERANDS = ("I", "W", "O")


def spatial_unrolling(size: int, optimal: int) -> tuple[int, str, int]:
    """MATCH's rule for a dimension the module unrolls ``optimal`` times in hardware.

    Returns (unrolling, mode, padded size): the optimal unrolling when it divides ``size``;
    otherwise the largest divisor ``D < optimal`` of ``size`` (*reduced parallelism*) when it
    needs as many temporal iterations as padding ``size`` to a multiple of ``optimal`` would,
    else padding.
    """
    if optimal <= 1 or size % optimal == 0:
        return optimal, "exact", size
    reduced = max(d for d in range(1, optimal) if size % d == 0)
    if size // reduced == math.ceil(size / optimal):
        return reduced, "reduced", size
    return optimal, "padded", math.ceil(size / optimal) * optimal


@dataclass(frozen=True)
class Schedule:
    """One temporal mapping of ``nest`` (see the module docstring); frozen and hashable.

    Fields:
        nest: the ``LoopNest`` scheduled.
        tiles: tile size per tiled dimension ``{"K": k, "OY": oy, "OX": ox}`` (the whole
            dimension when it is not tiled; a loop's last tile is smaller when the tile does
            not divide the dimension: ``trips`` rounds up, the transfers and buffers count
            full tiles), and ``"C"`` / ``"FY"`` / ``"FX"`` when the input channels / filter
            rows / filter columns are tiled (a divisor of the dimension; absent: all of it
            in every tile).
        order: the tile loops, outermost first, leaving out loops of one iteration; tiled
            reduction loops come last, FY, FX then C (partial sums of one output tile, then
            the next tile).
        fill: per operand ``"I"`` / ``"W"`` / ``"O"``, the loop depth at which its L1 buffer
            is filled (0: once, before every loop; ``len(order)``: every innermost iteration).
        double_buffer: transfers of the operands moved inside the loops overlap compute (two
            L1 buffers each).
        spatial: per unrolled dimension (any of the module's ``spatial_mapping``: K, C, OY,
            OX, FY, FX), MATCH's (unrolling, mode, padded size) with mode ``"exact"``,
            ``"reduced"`` or ``"padded"`` (see ``spatial_unrolling``).
        accumulator_bits: the width of the module's partial sums (``ExecModule.
            accumulator_bits``); with C tiled, one output tile of them sits in L1
            (``accumulator_bytes``, counted with the output's memory).
        weights_resident: the weights are already in the module's weight memory (a later
            call of a layer a streamed chain keeps there, ``ExecModule.weight_memory``):
            ``transfers["W"]`` counts no transfer; the buffer still takes its bytes.

    Derived: ``trips(dim)``, ``tile(dim)``, ``iterations`` (innermost compute calls),
    ``reduction_trips`` (the reduction tiles each output tile accumulates over, 1 without
    partial sums), ``covered(operand)`` (the K / OY / OX / FY / FX / C extent one buffer
    spans), ``buffer_bytes(operand)``,
    ``accumulator_bytes``, ``transfers`` (operand -> (count, bytes, contiguous chunks)),
    ``l1_bytes`` (the footprint).

    Example::

        >>> nest = LoopNest("conv2d", K=32, C=16, OY=8, OX=8, FY=3, FX=3, IY=8, IX=8,
        ...                 padding=(1, 1, 1, 1))
        >>> s = Schedule(nest, tiles={"K": 16, "OY": 8, "OX": 8}, order=("K",),
        ...              fill={"I": 0, "W": 1, "O": 1}, double_buffer=True)
        >>> s.iterations, s.transfers["W"], s.l1_bytes
        (2, (2, 2496, 1), 8640)
    """

    nest: LoopNest
    tiles: Mapping[str, int]
    order: tuple[str, ...]
    fill: Mapping[str, int]
    double_buffer: bool
    spatial: Mapping[str, tuple[int, str, int]] = field(default_factory=dict)
    accumulator_bits: int = 0
    weights_resident: bool = False

    def __post_init__(self):
        for name in ("tiles", "fill", "spatial"):
            object.__setattr__(self, name, FrozenMap(getattr(self, name)))
        object.__setattr__(self, "order", tuple(self.order))
        # every loop dimension's tile, read millions of times by the search (not a field:
        # equality, hashing and ``replace`` see the fields only)
        tiles, sizes = self.tiles.get, self.nest.loop_sizes
        tile_of = {dim: tiles(dim, size) for dim, size in sizes.items()}
        object.__setattr__(self, "_tile_of", tile_of)
        object.__setattr__(self, "_trips_of", {dim: -(-size // tile_of[dim])
                                               for dim, size in sizes.items()})

    def tile(self, dim: str) -> int:
        """The tile size of ``dim`` (the whole dimension when it is not tiled)."""
        tile = self._tile_of.get(dim)
        return self.tiles.get(dim, self.nest.size(dim)) if tile is None else tile

    def trips(self, dim: str) -> int:
        """Iterations of ``dim``'s tile loop (the last tile takes what is left)."""
        trips = self._trips_of.get(dim)
        return -(-self.nest.size(dim) // self.tile(dim)) if trips is None else trips

    @property
    def iterations(self) -> int:
        return math.prod(self.trips(d) for d in self.order)

    @property
    def reduction_trips(self) -> int:
        """The reduction tiles (of C, FY and FX) one output tile accumulates over."""
        return math.prod(self.trips(d) for d in REDUCTION_DIMS)

    def covered(self, operand: str) -> dict[str, int]:
        """Extent of K, OY, OX, FY, FX and C one buffer of ``operand`` spans (the loops
        inside its fill)."""
        extent = dict(self._tile_of)
        sizes = self.nest.loop_sizes
        for dim in self.order[self.fill[operand]:]:  # loops outside the fill: one tile
            extent[dim] = sizes[dim]
        return extent

    @property
    def accumulator_bytes(self) -> int:
        """Bytes of the L1 partial sums of one output tile (0 unless a reduction loop is
        tiled)."""
        if self.reduction_trips <= 1:
            return 0
        return self.tile("K") * self.tile("OY") * self.tile("OX") * self.accumulator_bits // 8

    def buffer_bytes(self, operand: str) -> int:
        """Bytes of one L1 buffer of ``operand`` (``covered`` extent; padded spatial
        unrolling; the weights' bias, multipliers and shifts)."""
        return self._buffer_sizes[operand]

    @functools.cached_property
    def _buffer_sizes(self) -> dict[str, int]:  # once per schedule: the search reads them often
        return {operand: self._buffer_size(operand) for operand in OPERANDS}

    def _buffer_size(self, operand: str) -> int:
        e = self.covered(operand)
        k = e["K"]
        oy, ox = e["OY"], e["OX"]
        for dim, (_, mode, padded) in self.spatial.items():
            if dim in TILED_DIMS and mode == "padded" and e[dim] == self.nest.size(dim) \
                    and operand == "O":
                if dim == "K":
                    k = padded
                elif dim == "OY":
                    oy = padded
                else:
                    ox = padded
        extra = 12 * k if operand == "W" and self.nest.has_weights else 0  # bias, M, shift
        return self.nest.operand_bytes(operand, k, oy, ox, e["C"], e["FY"], e["FX"]) + extra

    def moves(self, operand: str) -> bool:
        """Whether ``operand`` is transferred inside the loop nest (more than once)."""
        return self.transfers[operand][0] > 1

    @functools.cached_property
    def transfers(self) -> dict[str, tuple[int, int, int]]:
        """Per operand: (number of transfers, bytes per transfer, contiguous chunks each);
        computed once per schedule (the search reads it several times per candidate)."""
        result = {}
        for operand in OPERANDS:
            size = self.buffer_bytes(operand)
            if size == 0:
                result[operand] = (0, 0, 0)
                continue
            count = 0 if operand == "W" and self.weights_resident else \
                math.prod(self.trips(d) for d in self.order[:self.fill[operand]])
            result[operand] = (count, size, self.chunks(operand))
        return result

    def chunks(self, operand: str) -> int:
        """Contiguous pieces of one transfer of ``operand``: weights are one (K-major, or
        slice-major when the buffer holds one slice of C, as ``layer_codegen`` lays them);
        activations in the nest's layout (``LoopNest.layouts``), NHWC rows of channels or
        NCHW (``LoopNest.planar``) rows of one channel plane."""
        nest, e = self.nest, self.covered(operand)
        if operand == "W":  # K-major, or slice-major when one slice of C is copied at a time
            return 1            # (layer_codegen's slice_major_weights): one run either way
        if nest.kind == "dense":
            return 1
        if nest.planar:
            return self._planar_chunks(operand, e)
        if operand == "O":
            channels_whole = e["K"] == nest.K
            if not channels_whole:
                return e["OY"] * e["OX"]
            return 1 if e["OX"] == nest.OX else e["OY"]
        rows, cols = nest.input_extent(e["OY"], e["OX"], e["FY"], e["FX"])
        channels_whole = nest.C == (e["K"] if nest.channelwise else e["C"])
        if not channels_whole:
            return nest.inputs * rows * cols
        return nest.inputs * (1 if cols >= nest.IX else rows)

    def _planar_chunks(self, operand: str, e: Mapping[str, int]) -> int:
        """``chunks`` for channel planes: a run per row of each channel. NCHW: whole rows of
        a channel are one run, whole planes of consecutive channels one run. NHCW (rows
        outermost): whole rows of consecutive channels are one run per row, of every channel
        one run."""
        nest = self.nest
        if operand == "O":
            channels, rows, cols, height, width = e["K"], e["OY"], e["OX"], nest.OY, nest.OX
            total = nest.K
        else:
            rows, cols = nest.input_extent(e["OY"], e["OX"], e["FY"], e["FX"])
            channels = e["K"] if nest.channelwise else e["C"]
            height, width = nest.IY, nest.IX
            total = nest.C
        inputs = nest.inputs if operand == "I" else 1
        if cols < width:
            return inputs * channels * rows
        if nest.rows_outermost:
            return inputs * (1 if channels == total else rows)
        return inputs * (channels if rows < height else 1)

    def operand_l1_bytes(self, operand: str) -> int:
        """Inner-memory bytes of ``operand``: its buffer, twice when double-buffered (the
        output's with the partial-sum accumulator)."""
        size = self.buffer_bytes(operand)
        extra = self.accumulator_bytes if operand == "O" else 0
        return size * (2 if self.double_buffer and self.moves(operand) else 1) + extra

    @functools.cached_property
    def l1_bytes(self) -> int:
        return sum(self.operand_l1_bytes(operand) for operand in OPERANDS)

    def fits(self, capacity: "int | Mapping[str, tuple[int, tuple[str, ...]]]") -> bool:
        """Whether the buffers fit ``capacity``: bytes of one inner memory holding every
        operand, or per inner memory (name -> (bytes, operands it holds))."""
        if isinstance(capacity, int):
            return self.l1_bytes <= capacity
        return all(sum(self.operand_l1_bytes(o) for o in operands) <= size
                   for size, operands in capacity.values())

    def to_dict(self) -> dict:
        return {"dims": {d: self.nest.size(d) for d in (*TILED_DIMS, *REDUCTION_DIMS)},
                "tiles": dict(self.tiles), "order": list(self.order), "fill": dict(self.fill),
                "double_buffer": self.double_buffer, "iterations": self.iterations,
                "l1_bytes": self.l1_bytes,
                "transfers": {k: list(v) for k, v in self.transfers.items()},
                "spatial": {k: list(v) for k, v in self.spatial.items()},
                "accumulator_bytes": self.accumulator_bytes}


@dataclass(frozen=True)
class SearchResult:
    """The best schedule, its price, how many candidates were priced and the search time."""

    schedule: Schedule | None
    cost: object
    evaluated: int
    seconds: float
    smallest_l1: int  # the smallest L1 footprint of any candidate (why nothing fitted)


def _tile_options(nest: LoopNest, dim: str, unroll: int) -> list[int]:
    """The tile sizes searched for ``dim``: a reduction (C, FY, FX) in divisors (equal
    slices of the partial sums); K, OY and OX, for each trip count, the smallest multiple of
    ``unroll`` that needs no more trips (a larger tile with as many trips only takes more
    L1), or the whole dimension."""
    size = nest.size(dim)
    if dim in REDUCTION_DIMS:
        options = [t for t in range(1, size + 1)
                   if size % t == 0 and (t % unroll == 0 or t == size)]
        return options or [size]
    options = set()
    for trips in range(1, size + 1):
        tile = -(-size // trips)
        options.add(min(size, -(-tile // unroll) * unroll))
    return sorted(options)


def _tilings(nest: LoopNest, spatial: Mapping[str, tuple[int, str, int]],
             reductions: tuple[str, ...] = ()):
    """Every tiling of ``nest``: its output loops and the reduction loops ``reductions``."""
    dims = [d for d in TILED_DIMS if nest.size(d) > 1] + list(reductions)
    choices = [_tile_options(nest, d, spatial.get(d, (1,))[0]) for d in dims]
    for combo in itertools.product(*choices):
        tiles = {d: nest.size(d) for d in TILED_DIMS}
        tiles.update(dict(zip(dims, combo)))
        for dim in reductions:
            if tiles[dim] == nest.size(dim):
                del tiles[dim]  # whole: as the schedule of a module without partial sums
        yield tiles


def _loops(nest: LoopNest, tiles: Mapping[str, int]) -> tuple[list[str], list[str]]:
    """The output loops of more than one iteration, and the reduction loops that are cut
    (innermost, in ``REDUCTION_DIMS`` order)."""
    outer = [d for d in TILED_DIMS if -(-nest.size(d) // tiles[d]) > 1]
    inner = [d for d in REDUCTION_DIMS if nest.size(d) // tiles.get(d, nest.size(d)) > 1]
    return outer, inner


def weight_fill_floor(order: tuple[str, ...]) -> int:
    """The shallowest depth a weight buffer may be filled at in a loop ``order``: inside
    every tiled filter loop (FY, FX), so that it holds one tile of the filter, which the
    kernel reads as a filter of that size (0 when the filter is whole)."""
    filters = [i for i, d in enumerate(order) if d in ("FY", "FX")]
    return max(filters) + 1 if filters else 0


def _schedules(nest, tiles, spatial, double_options, accumulator_bits, capacity):
    """Every schedule of a tiling (loop order, fill depths, buffering) whose buffers fit
    ``capacity``. Each operand's buffer size per fill depth is computed
    once per loop order, so the schedules that do not fit cost a sum, not an object."""
    loops, inner = _loops(nest, tiles)
    for order in itertools.permutations(loops):
        order = (*order, *inner)
        depth = len(order)
        natural = {}
        for operand in OPERANDS:
            relevant = [i for i, d in enumerate(order) if d in RELEVANT[operand]
                        or (d == "K" and operand == "I" and nest.channelwise)]
            natural[operand] = (max(relevant) + 1) if relevant else 0
        sizes = {o: [] for o in OPERANDS}
        for f in range(depth + 1):
            probe = Schedule(nest, tiles, order, {o: f for o in OPERANDS}, False, spatial,
                             accumulator_bits)
            for operand in OPERANDS:
                size = probe.buffer_bytes(operand)
                count = math.prod(probe.trips(d) for d in order[:f]) if size else 0
                sizes[operand].append((size, count > 1))
        accumulator = probe.accumulator_bytes if depth else 0
        fills = [range(weight_fill_floor(order) if o == "W" else 0, natural[o] + 1)
                 for o in OPERANDS]
        for fill in itertools.product(*fills):
            for double in double_options:
                if double and depth == 0:
                    continue
                used = {}
                for operand, f in zip(OPERANDS, fill):
                    size, moves = sizes[operand][f]
                    used[operand] = size * (2 if double and moves else 1) + (
                        accumulator if operand == "O" else 0)
                if not _fits(used, capacity):
                    continue
                yield Schedule(nest, tiles, order, dict(zip(OPERANDS, fill)), double, spatial,
                               accumulator_bits)


def _fits(used: Mapping[str, int], capacity) -> bool:
    """``Schedule.fits`` from the operands' L1 bytes."""
    if isinstance(capacity, int):
        return sum(used.values()) <= capacity
    return all(sum(used[o] for o in operands) <= size for size, operands in capacity.values())


def _bound(nest, tiles, spatial, accumulator_bits=0) -> Schedule:
    """A schedule moving every operand once, whole: the lower bound of a tiling's cost."""
    outer, inner = _loops(nest, tiles)
    return _BoundSchedule(nest, tiles, (*outer, *inner), {o: 0 for o in OPERANDS}, True,
                          spatial, accumulator_bits)


def _smallest(nest, tiles, spatial, accumulator_bits=0) -> Schedule:
    """The schedule of a tiling with the smallest footprint: every buffer filled innermost
    (one tile), single-buffered."""
    outer, inner = _loops(nest, tiles)
    order = (*outer, *inner)
    return Schedule(nest, tiles, order, {o: len(order) for o in OPERANDS}, False, spatial,
                    accumulator_bits)


class _BoundSchedule(Schedule):
    def chunks(self, operand: str) -> int:  # noqa: ARG002 - the optimistic case
        return 1


def _spatial(nest: LoopNest, unrolling: Mapping[str, int]) -> dict:
    """MATCH's unrolling rule for every mapped dimension of ``nest`` larger than 1 (the tiled
    ones constrain the tiles; C, FY and FX are priced by the cost hook)."""
    return {d: spatial_unrolling(nest.size(d), u) for d, u in unrolling.items()
            if nest.size(d) > 1}


def _run(nest: LoopNest, capacity, price: Callable[[Schedule], object],
         unrolling: Mapping[str, int], double_buffering: bool, prune: bool,
         accumulator_bits: int = 0, partial_sum_dims: tuple[str, ...] = (REDUCTION_DIM,)
         ) -> SearchResult:
    start = time.perf_counter()
    spatial = _spatial(nest, unrolling)
    doubles = (False, True) if double_buffering else (False,)
    evaluated, smallest = 0, math.inf
    best, best_cost, best_key = None, None, None
    tilings = []
    reductions = tuple(nest.tileable_reductions(tuple(partial_sum_dims))) \
        if accumulator_bits > 0 else ()
    for tiles in _tilings(nest, spatial, reductions):
        # a tiling none of whose schedules fits (not even with every buffer one tile, single-
        # buffered: the smallest footprint it has) is never enumerated
        least = _smallest(nest, tiles, spatial, accumulator_bits)
        smallest = min(smallest, least.l1_bytes)
        if least.fits(capacity):
            tilings.append(tiles)

    def metric(cost) -> float:
        return math.inf if cost is None else float(cost.latency_cycles)

    if prune:
        bounded = []
        for tiles in tilings:
            evaluated += 1
            bounded.append((metric(price(_bound(nest, tiles, spatial, accumulator_bits))),
                            tiles))
        bounded.sort(key=lambda item: item[0])
    else:
        bounded = [(0.0, tiles) for tiles in tilings]
    for bound, tiles in bounded:
        if prune and best_key is not None and bound >= best_key[0]:
            break
        for schedule in _schedules(nest, tiles, spatial, doubles, accumulator_bits, capacity):
            footprint = schedule.l1_bytes
            evaluated += 1
            cost = price(schedule)
            key = (metric(cost), footprint)
            if best_key is None or key < best_key:
                best, best_cost, best_key = schedule, cost, key
    return SearchResult(best, best_cost, evaluated, time.perf_counter() - start,
                        int(smallest) if smallest != math.inf else 0)


def search(nest: LoopNest, capacity: int | Mapping[str, tuple[int, tuple[str, ...]]],
           price: Callable[[Schedule], object], unrolling: Mapping[str, int] | None = None,
           double_buffering: bool = True, accumulator_bits: int = 0,
           partial_sum_dims: tuple[str, ...] = (REDUCTION_DIM,)) -> SearchResult:
    """The cheapest schedule of ``nest`` whose buffers fit ``capacity``: the bytes of one inner
    memory holding every operand, or per inner memory ``{name: (bytes, operands)}`` (e.g. an
    activation L1 holding ``("I", "O")`` beside a private weight memory holding ``("W",)``).

    ``price`` returns a ``Cost`` (or ``None``: not runnable) for a schedule; ``unrolling`` is
    the module's fixed spatial mapping (``{"OY": 8, "OX": 2, "K": 4}``); ``accumulator_bits``
    the module's partial-sum width (``ExecModule.accumulator_bits``; 0: no reduction loop is
    tiled) and ``partial_sum_dims`` the reduction loops it may tile then
    (``ExecModule.partial_sum_dims``: any of C, FY, FX).
    Ties go to the smaller footprint. ``SearchResult.schedule`` is ``None`` when nothing fits.
    """
    return _run(nest, capacity, price, unrolling or {}, double_buffering, prune=True,
                accumulator_bits=accumulator_bits, partial_sum_dims=partial_sum_dims)


def exhaustive(nest: LoopNest, capacity: int | Mapping[str, tuple[int, tuple[str, ...]]],
               price: Callable[[Schedule], object],
               unrolling: Mapping[str, int] | None = None,
               double_buffering: bool = True, accumulator_bits: int = 0,
               partial_sum_dims: tuple[str, ...] = (REDUCTION_DIM,)) -> SearchResult:
    """``search`` without pruning: every candidate priced (the reference for tests)."""
    return _run(nest, capacity, price, unrolling or {}, double_buffering, prune=False,
                accumulator_bits=accumulator_bits, partial_sum_dims=partial_sum_dims)
