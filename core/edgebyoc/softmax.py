"""Softmax over the last axis for the host build, in whole SIMD vectors whatever the row length.

TVM's ``topi.nn.fast_softmax`` reduces each row in one loop over its elements; the host rule for
row reductions (``row_schedules.HostRowReductionRule``) vectorises such a loop by cutting the row
in lanes that divide it. Attention rows rarely allow that: 197 tokens (ViT) is prime, 1,500
frames (Whisper) are cut in vectors of 15, which LLVM assembles element by element, and 49
(a Swin window) in vectors of 7. Those rows ran at half onnxruntime's rate or less.

``lane_softmax`` states the row's reductions as ``SOFTMAX_LANES`` partial results over the row's
whole vectors, a short scalar reduction over the remaining elements, and the combination of the
two; ``row_schedules.HostLaneSoftmaxRule`` runs every block of it on one row at a time inside
the parallel loop over rows, the partial reductions and the element-wise blocks in vectors, the
remaining elements of a row in scalar code. The arithmetic is ``fast_softmax``'s
(``topi.fast_exp`` of the row minus its maximum, divided by the row's sum), only summed in a
different order: results equal within float32 rounding; a masked (-inf) score stays exactly 0
and a fully masked row NaN, as with ``fast_softmax``.

Example (a ViT attention row of 197 scores)::

    scores = te.placeholder((1, 12, 197, 197), name="scores")
    probabilities = lane_softmax(scores, axis=-1)  # 12 vectors of 16 and 5 scalars per row
"""

from __future__ import annotations

from tvm import te, tirx, topi

#: The vector of partial results a row's maximum and sum keep (one AVX-512 register of float32,
#: two of AVX2)
SOFTMAX_LANES = 16

#: ``lane_softmax``'s partial reductions over a row's whole vectors: the block names by which
#: ``row_schedules.HostLaneSoftmaxRule`` recognises it
LANE_BLOCKS = ("softmax_lane_max", "softmax_lane_sum")
#: ``lane_softmax``'s blocks that rule inlines into their consumers: the row minus its maximum,
#: and each reduction's lanes combined with its scalar rest
INLINED_BLOCKS = ("softmax_shifted", "softmax_max", "softmax_sum")


def lane_softmax(x: te.Tensor, axis: int = -1) -> te.Tensor:
    """Softmax of ``x`` over ``axis`` (see the module docstring); ``topi.nn.fast_softmax`` where
    the axis is not the last, an extent is symbolic or a row is shorter than one vector."""
    ndim = len(x.shape)
    width = x.shape[-1] if ndim else None
    if ndim < 1 or axis % ndim != ndim - 1 \
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
