"""Depth-first (DFS) tiling of macro-kernels (DFS paper, sections III-A and III-B).

A *macro-kernel* is a chain of convolutions (each with its bias and activation) fused into one
PrimFunc. Its depth-first schedule computes the last convolution's output tile by tile; inside
each tile loop every producer convolution computes just the region its consumer needs
(``compute_at``; padding and the element-wise epilogues are inlined into the reads, so no padded
copy exists), and each intermediate buffer is re-indexed modulo that region's extent
(``transform_layout``) so that it shrinks from the full feature map to one tile plus its halo. Halos are recomputed by neighbouring tiles (the
re-computation the planner bounds); border tiles are clipped by TVM's predicates. Results are
unchanged: each output element is computed by the same arithmetic in the same order.

Only NCHW macro-kernels are handled; the grouping of a model into macro-kernels and the choice of
tile sizes live in ``planner.py``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from tvm import s_tir, tirx
from tvm.target import Target

from ..host_rule import HostRule

_REDUCE = 2  # IterVar type of reduction iterators (tirx.IterVar.CommReduce)


@dataclass(frozen=True)
class Tile:
    """Output tile of a macro-kernel, in rows and columns of its last feature map.

    ``sliding``: full-width row bands computed as sliding windows (``sliding.py``: ring
    buffers, no re-computation) instead of tiles that recompute their halos."""

    rows: int
    cols: int
    sliding: bool = False


def _is_reduction(sch: s_tir.Schedule, block) -> bool:
    return any(int(iv.iter_type) == _REDUCE for iv in sch.get(block).iter_vars)


def is_macro_kernel(func: tirx.PrimFunc) -> bool:
    """Whether ``func`` holds two or more convolution blocks (a fused conv chain)."""
    sch = s_tir.Schedule(func)
    try:
        blocks = sch.get_child_blocks(sch.get_sblock("root"))
    except RuntimeError:  # a hand-written kernel without blocks
        return False
    return sum(1 for b in blocks if _is_reduction(sch, b)
               and "conv" in sch.get(b).name_hint) >= 2


def depth_first_schedule(func: tirx.PrimFunc, tile: Tile) -> s_tir.Schedule:
    """The depth-first schedule of a macro-kernel (see the module docstring)."""
    sch = s_tir.Schedule(func)
    root = sch.get_sblock("root")
    blocks = sch.get_child_blocks(root)
    epilogues = [b for b in blocks if not _is_reduction(sch, b)
                 and not sch.get(b).name_hint.startswith("pad_temp")]
    for block in epilogues[:-1]:  # bias and activation run inside their consumers
        sch.compute_inline(block)
    # no padded copies: each convolution reads its producer through a bounds check (and
    # recomputes the producer's bias and activation on the fly), so only the convolution
    # outputs need tile buffers
    for block in sch.get_child_blocks(root):
        if sch.get(block).name_hint.startswith("pad_temp"):
            sch.compute_inline(block)
    output = sch.get_child_blocks(root)[-1]
    loops = sch.get_loops(output)
    if len(loops) != 4:
        raise ValueError(f"macro-kernel output has {len(loops)} loops, expected NCHW")
    n, c, h, w = loops
    h_outer, h_inner = sch.split(h, [None, tile.rows])
    w_outer, w_inner = sch.split(w, [None, tile.cols])
    sch.reorder(n, h_outer, w_outer, c, h_inner, w_inner)
    producers = sch.get_child_blocks(root)[:-1]
    for block in reversed(producers):
        sch.compute_at(block, w_outer, preserve_unit_loops=True)
    # the channels of one tile are independent: split them over the cores
    sch.parallel(c)
    for block in sch.get_child_blocks(root)[:-1]:
        sch.parallel(sch.get_loops(block)[4])  # n, h_outer, w_outer, then its own n, c, ...
    for block in sch.get_child_blocks(root)[:-1]:
        own = sch.get_loops(block)[3:]  # below the tile loops: n, c, h, w (, reductions)
        rows, cols = int(sch.get(own[2]).extent), int(sch.get(own[3]).extent)
        shape = [int(d) for d in sch.get(block).writes[0].source.shape]
        if rows < shape[2] or cols < shape[3]:
            sch.transform_layout(block, ("write", 0),
                                 _modulo(rows if rows < shape[2] else None,
                                         cols if cols < shape[3] else None))
    return sch


def _modulo(rows: int | None, cols: int | None):
    # within one tile iteration a producer writes at most rows x cols consecutive positions, so
    # the modulo map is injective there; the next iteration may overwrite them. A dimension the
    # region already spans whole is left as it is.
    def index_map(n, c, h, w):
        return (n, c, h % rows if rows else h, w % cols if cols else w)

    return index_map


class DepthFirstRule(HostRule):
    """Applies ``depth_first_schedule`` to macro-kernels, with the tile ``tile_for`` chooses."""

    def __init__(self, tile_for: Callable[[tirx.PrimFunc], Tile | None]):
        self.tile_for = tile_for

    def schedule(self, func: tirx.PrimFunc, target: Target):
        if not is_macro_kernel(func):
            return None
        tile = self.tile_for(func)
        if tile is None:
            return None
        return depth_first_schedule(func, tile)


def output_shape(func: tirx.PrimFunc) -> tuple[int, ...]:
    """Shape of a PrimFunc's output (its last parameter, destination-passing style)."""
    return tuple(int(d) for d in func.params[-1].ty.shape)
