"""ONNX ``NonMaxSuppression`` on the host as one kernel: a sweep, or a kept list.

TVM's kernel (``topi.vision.all_class_non_max_suppression``) compares every kept box with
every box after it in score order, a thread-pool launch per kept box: quadratic in the boxes
of a class. A detector exported with torchvision's batched NMS puts all its classes into one
class whose boxes are shifted apart (the "coordinate trick"): SSDlite320 sends about 27,000
boxes through one class, and TVM's kernel took 417 of the model's 579 ms.

Boxes that do not overlap along x have an IoU of 0 and cannot suppress each other (for an IoU
threshold of 0 or more), so ``sweep_kernel`` compares a kept box only with the boxes whose x
ranges can reach its own: the boxes are sorted once by their left edge, and from the kept
box's place in that order the kernel walks right while a left edge is left of its right edge,
and left while the running maximum of the right edges (a prefix maximum in that order) is
right of its left edge. Greedy NMS is unchanged: boxes taken in descending score order (ties
by index, as TVM's stable sort leaves them), a box kept unless a kept box of higher score
overlaps it by more than the IoU threshold, at most the per-class limit kept. The classes of
a batch run in parallel.

A small per-class limit (at most ``KEPT_LIST_LIMIT``, a YOLO export's 100 or 300) takes
``kept_list_kernel`` instead: each box in score order compared with the boxes kept so far,
onnxruntime's loop, which stops at the limit where the sweep would go on suppressing boxes
the limit never reaches. Both choose the same boxes.

Semantics are onnxruntime's and the ONNX reference's, which ``verify`` compares with: corner
order free (``[y1, x1, y2, x2]`` as any diagonal pair), a box suppressed when its IoU is
greater than the threshold (TVM's kernel: greater or equal), a box with no area suppresses
nothing, a score must be greater than the score threshold. ``center_point_box`` boxes reach
the operator as corners (TVM's converter turns them).
"""

from __future__ import annotations

import tvm
from tvm import relax
from tvm.script import tirx as T

from .rewrites import rewrite_functions

__all__ = ["fast_nms", "kept_list_kernel", "sweep_kernel"]

_OPERATOR = "relax.vision.all_class_non_max_suppression"
#: the largest per-class limit run by ``kept_list_kernel`` (above: ``sweep_kernel``). A box
#: costs the kept-list loop at most ``limit`` comparisons, and the loop stops at the limit;
#: the sweep suppresses eagerly, also boxes the limit never reaches
KEPT_LIST_LIMIT = 1024


@T.macro
def _iou_above(geometry, b, p, q, iou_threshold, flags, slot):
    # flags[slot] = 1 if boxes p and q (geometry columns) overlap by more than the threshold,
    # onnxruntime's test: areas and union positive, intersection / union > threshold
    flags[slot] = T.int64(0)
    width = T.min(geometry[b, 1, p], geometry[b, 1, q]) - \
        T.max(geometry[b, 0, p], geometry[b, 0, q])
    height = T.min(geometry[b, 3, p], geometry[b, 3, q]) - \
        T.max(geometry[b, 2, p], geometry[b, 2, q])
    if width > T.float32(0) and height > T.float32(0):
        union = geometry[b, 4, p] + geometry[b, 4, q] - width * height
        if geometry[b, 4, p] > T.float32(0) and geometry[b, 4, q] > T.float32(0) and \
                union > T.float32(0) and width * height / union > T.float32(iou_threshold):
            flags[slot] = T.int64(1)


@T.macro
def _suppress(geometry, rank, by_left, b, bc, p, q, r, iou_threshold, flags):
    # box q (left-edge order) loses to kept box p if it comes later in score order and
    # overlaps p by more than the threshold
    m = T.Cast("int64", by_left[b, q])
    if rank[bc, m] > r:
        _iou_above(geometry, b, p, q, iou_threshold, flags, 2)
        if flags[2] == T.int64(1):
            rank[bc, m] = T.int64(-1)


@T.macro
def _fill_geometry(geometry, boxes, b, p, k):
    # column p of the geometry: box k's left, right, top, bottom and area (corners in any
    # order, ``[y1, x1, y2, x2]``)
    geometry[b, 0, p] = T.min(boxes[b, k, 1], boxes[b, k, 3])
    geometry[b, 1, p] = T.max(boxes[b, k, 1], boxes[b, k, 3])
    geometry[b, 2, p] = T.min(boxes[b, k, 0], boxes[b, k, 2])
    geometry[b, 3, p] = T.max(boxes[b, k, 0], boxes[b, k, 2])
    geometry[b, 4, p] = (geometry[b, 1, p] - geometry[b, 0, p]) * \
        (geometry[b, 3, p] - geometry[b, 2, p])


@T.macro
def _write_selected(selected, total, kept, kept_count, batch, classes):
    # the kept boxes as ONNX's rows [batch, class, box], class by class
    total[0] = T.int64(0)
    for bc in range(batch * classes):
        for i in range(kept_count[bc]):
            selected[total[0] + i, 0] = bc // classes
            selected[total[0] + i, 1] = bc % classes
            selected[total[0] + i, 2] = kept[bc, i]
        total[0] = total[0] + kept_count[bc]


def _kernel_constants(limit, iou_threshold, score_threshold) -> tuple[int, float, float]:
    # the limit within int32 (no class keeps more boxes than that), the thresholds as floats
    return max(0, min(int(limit), 2**31 - 1)), float(iou_threshold), float(score_threshold)


def sweep_kernel(limit: int, iou_threshold: float, score_threshold: float) -> tvm.tirx.PrimFunc:
    """The sweep kernel for one ``NonMaxSuppression``'s constants (see the module docstring).

    Arguments (B batches, C classes, N boxes, all symbolic): ``boxes`` (B, N, 4) float32,
    ``scores`` (B, C, N) float32, ``order`` (B, C, N) int32 (each class's boxes by descending
    score), ``by_left`` (B, N) int32 (the boxes by ascending left edge); results: ``selected``
    (B * C * N, 3) int64 (rows ``[batch, class, box]``, class by class, the first ``total[0]``
    valid) and ``total`` (1,) int64.
    """
    limit, iou_threshold, score_threshold = _kernel_constants(limit, iou_threshold,
                                                              score_threshold)

    # the body indexes in int64 (the extents are int64); scratch: box geometry in left-edge
    # order (left, right, top, bottom, area, running max of right), each box's place in that
    # order, and per class: each box's rank in score order (-1: not a candidate or
    # suppressed), the kept boxes and their count
    @T.prim_func(private=True, check_well_formed=False)
    def nms(var_boxes: T.handle, var_scores: T.handle, var_order: T.handle,
            var_by_left: T.handle, var_selected: T.handle, var_total: T.handle):
        T.func_attr({"tir.noalias": True})
        batch, classes, count = T.int64(), T.int64(), T.int64()
        boxes = T.match_buffer(var_boxes, (batch, count, 4), "float32")
        scores = T.match_buffer(var_scores, (batch, classes, count), "float32")
        order = T.match_buffer(var_order, (batch, classes, count), "int32")
        by_left = T.match_buffer(var_by_left, (batch, count), "int32")
        selected = T.match_buffer(var_selected, (batch * classes * count, 3), "int64")
        total = T.match_buffer(var_total, (1,), "int64")
        geometry = T.alloc_buffer((batch, 6, count), "float32")
        place = T.alloc_buffer((batch, count), "int64")
        rank = T.alloc_buffer((batch * classes, count), "int64")
        kept = T.alloc_buffer((batch * classes, count), "int64")
        kept_count = T.alloc_buffer((batch * classes,), "int64")
        for b in range(batch):
            for p in range(count):
                k = T.Cast("int64", by_left[b, p])
                place[b, k] = p
                _fill_geometry(geometry, boxes, b, p, k)
                if p == 0:
                    geometry[b, 5, p] = geometry[b, 1, p]
                else:
                    geometry[b, 5, p] = T.max(geometry[b, 5, p - 1], geometry[b, 1, p])
        for bc in T.parallel(batch * classes):
            b = bc // classes
            c = bc % classes
            walk = T.alloc_buffer((3,), "int64", scope="local")
            for k in range(count):
                rank[bc, k] = T.int64(-1)
            for r in range(count):
                if scores[b, c, T.Cast("int64", order[b, c, r])] > T.float32(score_threshold):
                    rank[bc, T.Cast("int64", order[b, c, r])] = r
            walk[1] = T.int64(0)  # boxes kept so far
            for r in range(count):
                k = T.Cast("int64", order[b, c, r])
                if rank[bc, k] == r and walk[1] < T.int64(limit):
                    kept[bc, walk[1]] = k
                    walk[1] = walk[1] + T.int64(1)
                    p = place[b, k]
                    # right, while a left edge is left of this box's right edge (TIR's
                    # ``and`` does not short-circuit: the bound is its own test)
                    walk[0] = p + T.int64(1)
                    while walk[0] < count:
                        if geometry[b, 0, walk[0]] < geometry[b, 1, p]:
                            _suppress(geometry, rank, by_left, b, bc, p, walk[0], r,
                                      iou_threshold, walk)
                            walk[0] = walk[0] + T.int64(1)
                        else:
                            walk[0] = count
                    # left, while the right edges so far reach right of its left edge
                    walk[0] = p - T.int64(1)
                    while walk[0] >= T.int64(0):
                        if geometry[b, 5, walk[0]] > geometry[b, 0, p]:
                            _suppress(geometry, rank, by_left, b, bc, p, walk[0], r,
                                      iou_threshold, walk)
                            walk[0] = walk[0] - T.int64(1)
                        else:
                            walk[0] = T.int64(-1)
            kept_count[bc] = walk[1]
        _write_selected(selected, total, kept, kept_count, batch, classes)

    return nms


def kept_list_kernel(limit: int, iou_threshold: float,
                     score_threshold: float) -> tvm.tirx.PrimFunc:
    """The kernel for a small per-class limit (at most ``KEPT_LIST_LIMIT``): each box, in
    descending score order, compared with the boxes kept so far (onnxruntime's loop), the
    class done once ``limit`` are kept. Arguments and results as ``sweep_kernel``'s, without
    ``by_left``."""
    limit, iou_threshold, score_threshold = _kernel_constants(limit, iou_threshold,
                                                              score_threshold)

    @T.prim_func(private=True, check_well_formed=False)
    def nms(var_boxes: T.handle, var_scores: T.handle, var_order: T.handle,
            var_selected: T.handle, var_total: T.handle):
        T.func_attr({"tir.noalias": True})
        batch, classes, count = T.int64(), T.int64(), T.int64()
        boxes = T.match_buffer(var_boxes, (batch, count, 4), "float32")
        scores = T.match_buffer(var_scores, (batch, classes, count), "float32")
        order = T.match_buffer(var_order, (batch, classes, count), "int32")
        selected = T.match_buffer(var_selected, (batch * classes * count, 3), "int64")
        total = T.match_buffer(var_total, (1,), "int64")
        geometry = T.alloc_buffer((batch, 5, count), "float32")
        kept = T.alloc_buffer((batch * classes, count), "int64")
        kept_count = T.alloc_buffer((batch * classes,), "int64")
        for b in range(batch):
            for k in range(count):
                _fill_geometry(geometry, boxes, b, k, k)
        for bc in T.parallel(batch * classes):
            b = bc // classes
            c = bc % classes
            # 0: the kept box compared with, 1: boxes kept so far, 2: overlaps too much
            walk = T.alloc_buffer((3,), "int64", scope="local")
            walk[1] = T.int64(0)
            for r in range(count):
                k = T.Cast("int64", order[b, c, r])
                if walk[1] < T.int64(limit) and scores[b, c, k] > T.float32(score_threshold):
                    walk[2] = T.int64(0)
                    walk[0] = T.int64(0)
                    while walk[0] < walk[1]:
                        _iou_above(geometry, b, kept[bc, walk[0]], k, iou_threshold, walk, 2)
                        if walk[2] == T.int64(1):
                            walk[0] = walk[1]
                        else:
                            walk[0] = walk[0] + T.int64(1)
                    if walk[2] == T.int64(0):
                        kept[bc, walk[1]] = k
                        walk[1] = walk[1] + T.int64(1)
            kept_count[bc] = walk[1]
        _write_selected(selected, total, kept, kept_count, batch, classes)

    return nms


@relax.expr_functor.mutator
class _FastNms(relax.PyExprMutator):
    def visit_call_(self, call):
        call = super().visit_call_(call)
        if not (isinstance(call.op, tvm.ir.Op) and call.op.name == _OPERATOR):
            return call
        constants = _constant_arguments(call)
        if constants is None or not constants[1] >= 0.0 or \
                str(call.attrs.output_format) != "onnx":  # below 0, boxes apart suppress
            return call
        boxes, scores = call.args[0], call.args[1]
        if boxes.ty.dtype != "float32" or scores.ty.dtype != "float32" or \
                boxes.ty.ndim != 3 or scores.ty.ndim != 3:
            return call
        bb = self.builder_
        order = bb.emit(relax.op.argsort(scores, axis=2, descending=True, dtype="int32"))
        if constants[0] <= KEPT_LIST_LIMIT:
            kernel, arguments = kept_list_kernel(*constants), [boxes, scores, order]
        else:
            left_edges = bb.emit(relax.op.min(relax.op.strided_slice(
                boxes, axes=[2], begin=[1], end=[4], strides=[2]), axis=2))
            by_left = bb.emit(relax.op.argsort(left_edges, axis=1, dtype="int32"))
            kernel = sweep_kernel(*constants)
            arguments = [boxes, scores, order, by_left]
        batch, count, _ = boxes.ty.shape.values
        classes = scores.ty.shape.values[1]
        result = bb.emit(relax.call_tir(
            bb.add_func(kernel, "edgebyoc_nms"), arguments,
            out_ty=[relax.TensorType([batch * classes * count, 3], "int64"),
                    relax.TensorType([1], "int64")]))
        selected, total = bb.emit(result[0]), bb.emit(result[1])
        kept = tvm.tirx.Var("nms_kept", "int64")
        bb.match_cast(bb.emit(relax.op.tensor_to_shape(total)), relax.ShapeType([kept]))
        trimmed = bb.emit(relax.op.strided_slice(selected, axes=[0], begin=[0], end=[kept],
                                                 assume_inbound=True))
        return relax.Tuple([trimmed, total])


def _constant_arguments(call) -> tuple[int, float, float] | None:
    """The limit, IoU threshold and score threshold of an NMS call, if all are constants."""
    values = []
    for arg in call.args[2:5]:
        if not isinstance(arg, tvm.ir.expr.Constant):
            return None
        values.append(arg.value.numpy().reshape(-1)[0].item())
    return int(values[0]), float(values[1]), float(values[2])


@tvm.transform.module_pass(opt_level=0, name="edgebyoc.FastNms")
def fast_nms(mod, _ctx):
    """Every ONNX-format ``all_class_non_max_suppression`` on float32 boxes and scores with
    constant limit and thresholds and an IoU threshold of 0 or more, through
    ``kept_list_kernel`` (a limit of at most ``KEPT_LIST_LIMIT``) or ``sweep_kernel`` (after
    argsorts for the score and left-edge orders): the same selected rows as onnxruntime,
    trimmed to those kept."""
    return rewrite_functions(_FastNms(mod))
