"""Default CPU schedules for the host path: convolutions, dense layers and pooling.

TVM 0.27's default CPU pipeline schedules no conv2d (plain single-threaded loops, ~57x slower than
PyTorch). This module gives every fused PrimFunc that holds one dominant reduction (conv2d in NHWC,
depthwise conv, dense / matmul, pooling) a register-blocked, vectorised, parallel schedule through
the standard ``tvm.s_tir.Schedule`` primitives, packaged as a dlight ``ScheduleRule`` so that it
runs inside ``ApplyDefaultSchedule`` like TVM's own rules.

The shape it produces, for output ``O[n, y, x, f]`` (channels innermost, see ``HOST_LAYOUTS``)::

    parallel for (n, y, x_outer):              # independent output rows / tiles
      for f_outer:                             # output channels, in vector blocks
        for reductions (ry, rx, c):
          for x_inner (unrolled):              # register block along the row
            for f_inner (vectorised):          # SIMD lanes along contiguous channels
              acc[x_inner, f_inner] += ...
        epilogue (bias, residual add, activation) on the accumulator tile

Padding stays a separate parallel copy (a bounds select per multiply-add costs more, measured
20.5 vs 28.3 ms on ResNet-18); other producers are inlined, and the element-wise epilogue runs on the
accumulator tile, so the full-size accumulator is never materialised. Functions the rule does not
recognise keep TVM's default lowering; the rule never changes results, only loop structure.
"""

from __future__ import annotations

import logging
import math

import tvm
from tvm import s_tir, tirx
from tvm.s_tir import dlight
from tvm.s_tir.dlight.analysis import normalize_prim_func
from tvm.s_tir.dlight.cpu.base import CPUScheduleRule
from tvm.target import Target

log = logging.getLogger(__name__)

#: Layouts the host path converts convolutions to before legalization: channels innermost, so the
#: output-channel loop is contiguous in the output, the weights and (for depthwise) the input.
HOST_LAYOUTS = {"relax.nn.conv2d": ["NHWC", "HWIO"]}

#: Upper bound of the register block along the output row (x_inner * f_inner / lanes accumulators
#: must fit in the vector register file: 8 x 2 = 16 of AVX-512's 32 registers).
MAX_ROW_BLOCK = 8
#: How many SIMD vectors of output channels one tile accumulates.
VECTORS_PER_TILE = 2


def simd_lanes(target: Target, dtype_bits: int = 32) -> int:
    """Number of ``dtype_bits``-wide lanes in the target's widest vector register."""
    keys = " ".join(str(x) for x in target.attrs.get("mattr", []))
    mcpu = str(target.attrs.get("mcpu", ""))
    avx512_cpus = ("skylake-avx512", "cascadelake", "cooperlake", "icelake", "tigerlake",
                   "sapphirerapids", "emeraldrapids", "graniterapids", "znver4", "znver5")
    if "avx512f" in keys or any(mcpu.startswith(c) for c in avx512_cpus):
        bits = 512
    elif "avx2" in keys or mcpu not in ("", "generic"):
        bits = 256
    else:
        bits = 128
    return max(1, bits // dtype_bits)


def _largest_divisor_at_most(n: int, bound: int) -> int:
    return max(d for d in range(1, min(n, bound) + 1) if n % d == 0)


def _extent(sch: s_tir.Schedule, loop) -> int | None:
    extent = sch.get(loop).extent
    return int(extent) if isinstance(extent, tirx.IntImm) else None


class _Unschedulable(Exception):
    """The function's shape is outside what the rule handles."""


class HostRule(CPUScheduleRule):
    """Base of edgebyoc's CPU rules: ``schedule`` runs only on PrimFuncs for an LLVM target."""

    def apply(self, func, target: Target, _: bool):
        if not isinstance(func, tirx.PrimFunc) or not self.is_target_available(target):
            return None
        return self.schedule(func, target)

    def schedule(self, func: tirx.PrimFunc, target: Target):
        raise NotImplementedError


class HostReductionRule(HostRule):
    """Schedules a PrimFunc holding one spatial-reduction block (conv / dense / pool) for the CPU.

    ``inline_padding`` trades speed for memory: the reduction reads its input through a bounds
    check instead of a padded copy (the memory-saving mode of DFS planning). ``True`` for every
    kernel; a number of bytes for the kernels whose input, output and padded copy together
    would exceed it (the depth-first plan's memory limit: smaller kernels keep the faster
    copy); ``False`` never.
    """

    def __init__(self, inline_padding: bool | int = False):
        self.inline_padding = inline_padding

    def _reads_padding_in_place(self, sch, pad_block) -> bool:
        if isinstance(self.inline_padding, bool):
            return self.inline_padding
        func = sch.mod["main"]

        def nbytes(buffer) -> int:  # a Buffer, or a parameter's BufferType
            return math.prod(int(d) for d in buffer.shape) * tvm.DataType(buffer.dtype).bits // 8

        padded = nbytes(sch.get(pad_block).writes[0].source)
        params = [p.ty for p in func.params if hasattr(p.ty, "shape")]
        live = nbytes(params[0]) + nbytes(params[-1]) if params else 0
        return padded + live > self.inline_padding

    def schedule(self, func: tirx.PrimFunc, target: Target):
        sch = s_tir.Schedule(func)
        infos = normalize_prim_func(sch)
        if infos is None:
            return None
        reductions = [b for b in infos if b.is_reduction()]
        if len(reductions) != 1:
            return None
        main = reductions[0]
        kinds = main.dom_kind()
        # spatial loops first, reductions after: the layout of every legalized conv / pool / dense
        if "R" not in kinds or kinds.index("R") != kinds.count("S") or len(kinds) < 2:
            return None
        names = [sch.get(b.block_rv).name_hint for b in infos]
        main_index = names.index(sch.get(main.block_rv).name_hint)
        try:
            self._schedule(sch, infos, main_index, target)
        except (RuntimeError, _Unschedulable) as err:
            # the rule is an optimisation: a function it cannot handle keeps TVM's default loops
            log.debug("host schedule skipped for %s: %s", names, err)
            return None
        return sch

    def _schedule(self, sch, infos, main_index, target):
        main = infos[main_index].block_rv
        # producers (padding, casts) are inlined into the reduction, consumers (bias, residual,
        # activation) into the last block, which then runs on the accumulator tile
        for info in infos[:main_index]:
            if info.is_data_pad(sch) and not self._reads_padding_in_place(sch, info.block_rv):
                # a materialised padded copy is cheaper than a bounds select per multiply-add
                pad_loops = sch.get_loops(info.block_rv)
                sch.parallel(sch.fuse(*pad_loops[:2]))
            else:
                sch.compute_inline(info.block_rv)
        epilogue = None
        consumers = infos[main_index + 1:]
        for info in consumers[:-1]:
            sch.compute_inline(info.block_rv)
        if consumers:
            epilogue = consumers[-1].block_rv

        loops = sch.get_loops(main)
        num_spatial = infos[main_index].dom_kind().count("S")
        spatial, reduction = loops[:num_spatial], loops[num_spatial:]
        lanes = simd_lanes(target)
        channels = _extent(sch, spatial[-1])
        if channels is None:
            raise _Unschedulable("symbolic channel extent")
        tile_channels = lanes * VECTORS_PER_TILE if channels % (lanes * VECTORS_PER_TILE) == 0 \
            else _largest_divisor_at_most(channels, lanes * VECTORS_PER_TILE)
        f_outer, f_inner = sch.split(spatial[-1], [None, tile_channels])
        outer = list(spatial[:-1])
        x_inner = None
        if outer:
            row = _extent(sch, outer[-1])
            if row is not None and row > 1:
                x_outer, x_inner = sch.split(outer[-1], [None, _largest_divisor_at_most(
                    row, MAX_ROW_BLOCK)])
                outer[-1] = x_outer
        inner = ([x_inner] if x_inner is not None else []) + [f_inner]
        sch.reorder(*outer, f_outer, *reduction, *inner)
        if outer:
            sch.parallel(sch.fuse(*outer) if len(outer) > 1 else outer[0])
        if epilogue is not None:
            sch.reverse_compute_at(epilogue, f_outer, preserve_unit_loops=True)
            e_loops = sch.get_loops(epilogue)
            sch.vectorize(e_loops[-1])
        if x_inner is not None:
            sch.unroll(x_inner)
        f_vec_outer, f_vec = sch.split(f_inner, [None, min(lanes, tile_channels)])
        sch.unroll(f_vec_outer)
        # vectorize while the block is still a reduction with init: the decomposed update block
        # no longer passes the compact-dataflow check of ``vectorize``
        sch.vectorize(f_vec)
        if reduction:
            sch.decompose_reduction(main, reduction[0])


class HostInjectiveRule(HostRule):
    """Element-wise and other injective PrimFuncs: every intermediate is inlined into its
    consumer, so none is materialised (a full-size temporary per fused element-wise op is what
    TVM's default lowering keeps). The loops are left to LLVM: parallelising them changed the
    rounding of index arithmetic in some kernels (ONNX node test
    ``test_resize_upsample_sizes_nearest``)."""

    def schedule(self, func: tirx.PrimFunc, target: Target):
        sch = s_tir.Schedule(func)
        try:
            blocks = sch.get_child_blocks(sch.get_sblock("root"))
            if len(blocks) < 2 or any(int(iv.iter_type) != 0 for b in blocks
                                      for iv in sch.get(b).iter_vars):
                return None
            for block in blocks[:-1]:
                sch.compute_inline(block)
        except RuntimeError as err:  # hand-written kernels without blocks, opaque accesses
            log.debug("injective schedule skipped: %s", err)
            return None
        return sch


def host_schedule_pass(*first_rules: dlight.ScheduleRule,
                       inline_padding: bool | int = False) -> tvm.transform.Pass:
    """The dlight pass applying ``first_rules``, the host rules, then TVM's own CPU rules.

    The first rule that schedules a PrimFunc wins (``first_rules``: e.g. depth-first tiling of
    macro-kernels, which must see them before the single-reduction rule declines them).
    """
    return dlight.ApplyDefaultSchedule(*first_rules, HostReductionRule(inline_padding),
                                       HostInjectiveRule(), dlight.cpu.Reduction(),
                                       dlight.cpu.GEMV())
