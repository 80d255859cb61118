"""The host build's rules for row-wise normalisations: softmax, layer norm and RMS norm.

Attention, layer norm and RMS norm reduce each row of a tensor over its last axis, then scale
the row by the results. TVM's default loops make a full-size pass over the tensor per block;
these rules make the rows the parallel loop and run every block of a row inside it, so the row
stays in L1, with the reductions and the element-wise blocks in SIMD vectors:

- ``HostLaneSoftmaxRule`` schedules ``softmax.lane_softmax`` (the host build's softmax over
  the last axis): 16 lanes of partial results over a row's whole vectors, its last
  ``width % 16`` elements in scalar code, whatever the row length (197 tokens, 1,500 frames);
- ``HostRowReductionRule`` schedules any other PrimFunc of row reductions and element-wise
  blocks between them (layer norm, RMS norm, a softmax built from ONNX primitives), in lanes
  that divide the row (``row_lanes``);
- ``ReductionOverRowsOnly`` passes what neither takes (symbolic extents) to TVM's own
  reduction rule, where that rule's schedule computes each element once.

All are dlight rules in ``schedules.host_schedule_pass``. They change loop structure, not
results: a reduction sums in vector lanes (float32 rounding of a reordered sum).
"""

from __future__ import annotations

import logging
import math

import tvm
from tvm import s_tir, tirx
from tvm.s_tir import dlight
from tvm.s_tir.dlight.analysis import normalize_prim_func
from tvm.target import Target

from .host_rule import HostRule, Unschedulable, loop_extent
from .softmax import INLINED_BLOCKS, LANE_BLOCKS, SOFTMAX_LANES

log = logging.getLogger(__name__)


#: the widest partial-sum vector a row reduction keeps (``HostRowReductionRule``)
MAX_ROW_LANES = 16


def row_lanes(extent: int) -> int | None:
    """The lanes a row of ``extent`` elements is cut in: its largest divisor from
    ``MAX_ROW_LANES`` down to 4 (1,500 keys: 15), so no row needs a guarded tail."""
    return next((lanes for lanes in range(MAX_ROW_LANES, 3, -1) if extent % lanes == 0), None)


class HostRowReductionRule(HostRule):
    """Row-wise normalisations: a PrimFunc of several reductions over the last axis and the
    element-wise blocks between them (softmax, layer and RMS norm), as the importer's
    operators lower to it.

    TVM's default loops make a full-size pass per block (softmax: max, exp, sum, divide, each
    over the whole 6 x 1,500 x 1,500 attention scores of Whisper's encoder: 11.4 ms a call).
    Here the rows are the parallel loop and every block runs inside it on one row, which stays
    in L1; each reduction keeps partial results in a vector of lanes (``rfactor``) and the
    element-wise blocks are vectorised (3.1 ms a call). Single-use element-wise blocks are
    inlined into their consumer. Where a block would then be recomputed for every row (a
    reduction over columns whose extents happen to equal the rows'), the rule declines.
    """

    def schedule(self, func: tirx.PrimFunc, target: Target):
        sch = s_tir.Schedule(func)
        try:
            return self._schedule(sch)
        except (Unschedulable, s_tir.ScheduleError, RuntimeError) as err:
            log.debug("row reduction schedule declined: %s", err)
            return None

    @staticmethod
    def _check_rows(sch, blocks, rows: list[int], width: int) -> None:
        """Every block computes whole rows: its leading iterators span ``rows``, then a
        reduction reduces its last one (of ``width``, unit axes kept between), an element-wise
        block has one more of ``width`` or 1, or none."""
        reductions = 0
        for block in blocks:
            iters = sch.get(block).iter_vars
            kinds = [int(iv.iter_type) for iv in iters]
            extents = [iv.dom.extent for iv in iters]
            if any(not isinstance(e, tirx.IntImm) for e in extents):
                raise Unschedulable("symbolic extents")
            extents = [int(e) for e in extents]
            kept = extents[len(rows):-1]  # a reduction's kept (unit) axes, ``keepdims``
            if kinds[-1:] == [2] and set(kinds[:-1]) == {0} and extents[:len(rows)] == rows \
                    and extents[-1] == width and set(kept) <= {1}:
                reductions += 1
            elif set(kinds) != {0} or extents[:len(rows)] != rows or \
                    extents[len(rows):] not in ([], [1], [width]):
                raise Unschedulable(f"block {sch.get(block).name_hint} is not row-wise")
        if not reductions:
            raise Unschedulable("no reduction over the rows")

    def _schedule(self, sch):
        root = sch.get_sblock("root")
        blocks = sch.get_child_blocks(root)
        output = blocks[-1]
        iters = sch.get(output).iter_vars
        if len(blocks) < 2 or len(iters) < 2 or any(int(iv.iter_type) != 0 for iv in iters):
            raise Unschedulable("the last block is not an element-wise output")
        shape = [iv.dom.extent for iv in iters]
        if any(not isinstance(e, tirx.IntImm) for e in shape):
            raise Unschedulable("symbolic extents")
        rows, width = [int(e) for e in shape[:-1]], int(shape[-1])
        self._check_rows(sch, blocks, rows, width)
        for block in blocks[:-1]:
            if len(sch.get(block).iter_vars) == len(iters) and len(sch.get_consumers(block)) == 1 \
                    and all(int(iv.iter_type) == 0 for iv in sch.get(block).iter_vars):
                sch.compute_inline(block)
        partials = []  # each reduction's lanes of partial results
        for block in sch.get_child_blocks(root)[:-1]:
            if int(sch.get(block).iter_vars[-1].iter_type) == 2 and row_lanes(width):
                _, lane = sch.split(sch.get_loops(block)[-1], [None, row_lanes(width)])
                partials.append(sch.get(sch.rfactor(lane, 0)).name_hint)
        row = _compute_inside_rows(sch, sch.get_loops(output)[:-1],
                                   sch.get_child_blocks(root)[:-1], parallel=True)
        for block in sch.get_child_blocks(row):
            loops = sch.get_loops(block)[1:]
            if sch.get(block).name_hint in partials:  # (lane, 1..., chunk) -> chunk, lane
                sch.reorder(loops[-1], loops[0])
                sch.vectorize(loops[0])
                sch.decompose_reduction(block, loops[-1])
            elif loops and all(int(iv.iter_type) == 0 for iv in sch.get(block).iter_vars) \
                    and loop_extent(sch, loops[-1]) == width and row_lanes(width):
                _, lane = sch.split(loops[-1], [None, row_lanes(width)])
                sch.vectorize(lane)
        if not _iterates_within_domains(sch):  # a reduction over columns: needed by every row
            raise Unschedulable("a block would be recomputed for every row")
        return sch


class HostLaneSoftmaxRule(HostRule):
    """Schedules ``lane_softmax``: rows in a parallel loop, every block computed on one row
    inside it (the row's exponentials stay in L1), the partial reductions and the element-wise
    blocks in vectors of ``SOFTMAX_LANES``, a row's last elements after its whole vectors.
    A 1-D softmax (one row) runs its blocks one after the other on the calling thread."""

    def schedule(self, func: tirx.PrimFunc, target: Target):
        sch = s_tir.Schedule(func)
        try:
            blocks = sch.get_child_blocks(sch.get_sblock("root"))
            if not any(sch.get(b).name_hint.startswith(LANE_BLOCKS) for b in blocks):
                return None
            self._schedule(sch)
        except RuntimeError as err:  # s_tir.ScheduleError included
            log.debug("lane softmax schedule declined: %s", err)
            return None
        return sch

    @staticmethod
    def _schedule(sch: s_tir.Schedule) -> None:
        root = sch.get_sblock("root")
        for block in sch.get_child_blocks(root)[:-1]:
            name = sch.get(block).name_hint
            if name in INLINED_BLOCKS:
                sch.compute_inline(block)
        blocks = sch.get_child_blocks(root)
        loops = sch.get_loops(blocks[-1])
        width = int(sch.get(loops[-1]).extent)  # lane_softmax's extents are constants
        row_loops = 0  # one row (a 1-D softmax): its blocks one after the other, no row loop
        if len(loops) > 1:
            row = _compute_inside_rows(sch, loops[:-1], blocks[:-1], parallel=True)
            blocks, row_loops = sch.get_child_blocks(row), 1
        for block in blocks:
            name = sch.get(block).name_hint
            inner = sch.get_loops(block)[row_loops:]
            if name.startswith(LANE_BLOCKS):  # (unit..., lane, vector) -> vector, lane
                lane, vector = inner[-2:]
                sch.reorder(vector, lane)
                sch.vectorize(lane)
                sch.decompose_reduction(block, vector)
            elif all(int(iv.iter_type) == 0 for iv in sch.get(block).iter_vars) \
                    and inner and int(sch.get(inner[-1]).extent) == width:
                _vectorize_row(sch, inner[-1], width)


def _vectorize_row(sch: s_tir.Schedule, loop, width: int) -> None:
    """An element-wise loop over a row: its whole vectors vectorised, the rest left scalar."""
    whole = width - width % SOFTMAX_LANES
    if whole < width:
        loop = sch.loop_partition(loop, [whole, None])[0]
    sch.vectorize(sch.split(loop, [None, SOFTMAX_LANES])[1])


class ReductionOverRowsOnly(HostRule):
    """TVM's dlight CPU ``Reduction`` rule (``rule``), only where its assumption holds: with
    every block computed inside the output's leading spatial loops (the rows it runs in
    parallel), each block still computes each of its elements once.

    A softmax over a leading axis breaks it: over axis 0 of a 5,000 x 4 tensor the maximum and
    the sum have 4 elements, which every one of the output's 5,000 rows needs, so the rule's
    schedule recomputes them 5,000 times: 188 ms against onnxruntime's 0.055. Declined, such a
    function keeps TVM's default loops, one pass per block (linear in its size)."""

    def __init__(self, rule: dlight.ScheduleRule):
        self.rule = rule

    def schedule(self, func: tirx.PrimFunc, target: Target):
        scheduled = self.rule.apply(func, target, False)
        if scheduled is None or not _computed_once_inside_rows(func):
            return None
        return scheduled


def _computed_once_inside_rows(func: tirx.PrimFunc) -> bool:
    """Whether, with every block of ``func`` computed inside the output block's leading spatial
    loops (as many as every block has, fused), no block iterates more than its domain."""
    sch = s_tir.Schedule(func)
    infos = normalize_prim_func(sch)
    kinds = [info.dom_kind() for info in infos or ()]
    if len(kinds) < 2 or any(not kind.startswith("S") for kind in kinds):
        return False
    rows = min(len(kind) - len(kind.lstrip("S")) for kind in kinds)
    try:
        _compute_inside_rows(sch, sch.get_loops(infos[-1].block_rv)[:rows],
                             [info.block_rv for info in infos[:-1]], parallel=False)
    except s_tir.ScheduleError:
        return False
    return _iterates_within_domains(sch)


def _compute_inside_rows(sch: s_tir.Schedule, row_loops: list, blocks: list, parallel: bool):
    """``row_loops`` (the output block's leading loops) fused into one row loop, run in
    parallel if asked, with every block of ``blocks`` (the producers, in order) computed inside
    it; the row loop."""
    row = sch.fuse(*row_loops) if len(row_loops) > 1 else row_loops[0]
    if parallel:
        sch.parallel(row)
    for block in reversed(blocks):
        sch.compute_at(block, row, preserve_unit_loops=True)
    return row


def _iterates_within_domains(sch: s_tir.Schedule) -> bool:
    """Whether no block of ``sch`` runs more iterations (its loops' extents multiplied) than
    its domain has points: none is recomputed inside a loop of another block."""
    analyzer = tvm.sym.Analyzer()
    for block in sch.get_child_blocks(sch.get_sblock("root")):
        iterations = math.prod((sch.get(loop).extent for loop in sch.get_loops(block)),
                               start=tirx.const(1, "int64"))
        domain = math.prod((iv.dom.extent for iv in sch.get(block).iter_vars),
                           start=tirx.const(1, "int64"))
        if not analyzer.can_prove(iterations <= domain):
            return False
    return True
