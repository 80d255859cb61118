"""Softmax over the last axis for the host build, in whole SIMD vectors whatever the row length.

TVM's ``topi.nn.fast_softmax`` reduces each row in one loop over its elements; the host rule for
row reductions (``schedules.HostRowReductionRule``) vectorises such a loop by cutting the row
in lanes that divide it. Attention rows rarely allow that: 197 tokens (ViT) is prime, 1,500
frames (Whisper) are cut in vectors of 15, which LLVM assembles element by element, and 49
(a Swin window) in vectors of 7. Those rows ran at half onnxruntime's rate or less.

``lane_softmax`` states the row's reductions as ``SOFTMAX_LANES`` partial results over the row's
whole vectors, a short scalar reduction over the remaining elements, and the combination of the
two; ``HostLaneSoftmaxRule`` runs every block of it on one row at a time inside the parallel
loop over rows, the partial reductions and the element-wise blocks in vectors, the remaining
elements of a row in scalar code. The arithmetic is ``fast_softmax``'s (``topi.fast_exp`` of
the row minus its maximum, divided by the row's sum), only summed in a different order:
results equal within float32 rounding; a masked (-inf) score stays exactly 0 and a fully masked
row NaN, as with ``fast_softmax``.

Example (a ViT attention row of 197 scores)::

    scores = te.placeholder((1, 12, 197, 197), name="scores")
    probabilities = lane_softmax(scores, axis=-1)  # 12 vectors of 16 and 5 scalars per row
"""

from __future__ import annotations

import logging

from tvm import s_tir, te, tirx, topi
from tvm.s_tir.dlight.cpu.base import CPUScheduleRule
from tvm.target import Target

log = logging.getLogger(__name__)

#: The vector of partial results a row's maximum and sum keep (one AVX-512 register of float32,
#: two of AVX2)
SOFTMAX_LANES = 16

#: Block names ``HostLaneSoftmaxRule`` recognises (``lane_softmax``'s partial reductions)
LANE_BLOCKS = ("softmax_lane_max", "softmax_lane_sum")


def lane_softmax(x: te.Tensor, axis: int = -1) -> te.Tensor:
    """Softmax of ``x`` over ``axis`` (see the module docstring); ``topi.nn.fast_softmax`` where
    the axis is not the last, an extent is symbolic, a row is shorter than one vector or
    ``x`` is one row (``HostLaneSoftmaxRule`` runs rows in parallel: one would compute the
    row's sums once per element)."""
    ndim = len(x.shape)
    width = x.shape[-1]
    if ndim < 2 or axis % ndim != ndim - 1 \
            or any(not isinstance(e, tirx.IntImm) for e in x.shape) \
            or int(width) < SOFTMAX_LANES:
        return topi.nn.fast_softmax(x, axis)
    rows = tuple(x.shape[:-1])
    vectors, tail = divmod(int(width), SOFTMAX_LANES)

    def row_reduction(values: te.Tensor, reducer, name: str) -> te.Tensor:
        vector = te.reduce_axis((0, vectors), name="vector")
        lanes = te.compute(
            (*rows, SOFTMAX_LANES),
            lambda *i: reducer(values[(*i[:-1], vector * SOFTMAX_LANES + i[-1])], axis=vector),
            name=f"softmax_lane_{name}")
        lane = te.reduce_axis((0, SOFTMAX_LANES), name="lane")
        total = te.compute(rows, lambda *i: reducer(lanes[(*i, lane)], axis=lane),
                           name=f"softmax_row_{name}")
        if not tail:
            return total
        element = te.reduce_axis((0, tail), name="element")
        rest = te.compute(
            rows, lambda *i: reducer(values[(*i, vectors * SOFTMAX_LANES + element)],
                                     axis=element), name=f"softmax_tail_{name}")
        combine = tirx.max if name == "max" else (lambda a, b: a + b)
        return te.compute(rows, lambda *i: combine(total(*i), rest(*i)),
                          name=f"softmax_{name}")

    maximum = row_reduction(x, te.max, "max")
    shifted = te.compute(x.shape, lambda *i: x(*i) - maximum(*i[:-1]), name="softmax_shifted")
    exponent = topi.fast_exp(shifted)
    total = row_reduction(exponent, te.sum, "sum")
    return te.compute(x.shape, lambda *i: exponent(*i) / total(*i[:-1]), name="softmax_norm",
                      tag="softmax_output")


class HostLaneSoftmaxRule(CPUScheduleRule):
    """Schedules ``lane_softmax``: rows in a parallel loop, every block computed on one row
    inside it (the row's exponentials stay in L1), the partial reductions and the element-wise
    blocks in vectors of ``SOFTMAX_LANES``, a row's last elements after its whole vectors.
    One of the host build's dlight rules (``schedules.host_schedule_pass``)."""

    def apply(self, func, target: Target, _: bool):
        if not isinstance(func, tirx.PrimFunc) or not self.is_target_available(target):
            return None
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
            if name in ("softmax_shifted", "softmax_max", "softmax_sum"):
                sch.compute_inline(block)
        blocks = sch.get_child_blocks(root)
        loops = sch.get_loops(blocks[-1])
        width = int(sch.get(loops[-1]).extent)  # lane_softmax's extents are constants
        row = sch.fuse(*loops[:-1]) if len(loops) > 2 else loops[0]
        sch.parallel(row)
        for block in reversed(blocks[:-1]):
            sch.compute_at(block, row, preserve_unit_loops=True)
        for block in sch.get_child_blocks(row):
            name = sch.get(block).name_hint
            inner = sch.get_loops(block)[1:]
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
