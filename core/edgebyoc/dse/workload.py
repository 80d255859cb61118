"""Workload extraction: a matched pattern as a loop nest (MATCH's layer description)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

from ..target import Workload

#: loop dimensions the temporal-mapping search tiles (C and the filter are kept whole: the
#: kernels reduce over them without partial sums)
TILED_DIMS = ("K", "OY", "OX")

#: the dimensions each operand depends on
RELEVANT = {"I": ("C", "OY", "OX"), "W": ("K", "C"), "O": ("K", "OY", "OX")}


@dataclass(frozen=True)
class LoopNest:
    """One layer as loops: ``kind`` is ``conv2d``, ``depthwise``, ``dense``, ``add`` or ``pool``.

    Output ``K x OY x OX`` from input ``C x IY x IX`` through an ``FY x FX`` window; ``stride``,
    ``dilation`` as (y, x), ``padding`` as (top, left, bottom, right); ``bits`` per operand
    (``I``, ``W``, ``O``); ``layouts`` per operand (activations NHWC, weights as the module
    stores them). For depthwise, add and pool, ``C == K`` and each output channel reads only its
    own input channel.
    """

    kind: str
    K: int
    C: int
    OY: int
    OX: int
    FY: int = 1
    FX: int = 1
    IY: int = 1
    IX: int = 1
    stride: tuple[int, int] = (1, 1)
    dilation: tuple[int, int] = (1, 1)
    padding: tuple[int, int, int, int] = (0, 0, 0, 0)
    bits: Mapping[str, int] = field(default_factory=lambda: {"I": 8, "W": 8, "O": 8})
    layouts: Mapping[str, str] = field(default_factory=lambda: {"I": "NHWC", "W": "OHWI",
                                                                 "O": "NHWC"})

    @property
    def channelwise(self) -> bool:
        """Each output channel reads only its own input channel (depthwise, add, pool)."""
        return self.kind in ("depthwise", "add", "pool")

    @property
    def has_weights(self) -> bool:
        return self.kind in ("conv2d", "depthwise", "dense")

    @property
    def macs(self) -> int:
        per_output = self.FY * self.FX * (1 if self.channelwise else self.C)
        return self.K * self.OY * self.OX * per_output if self.kind != "add" else 0

    def size(self, dim: str) -> int:
        return getattr(self, dim)

    def input_extent(self, oy: int, ox: int) -> tuple[int, int]:
        """Input rows and columns an ``oy x ox`` output tile reads (halo included)."""
        rows = (oy - 1) * self.stride[0] + (self.FY - 1) * self.dilation[0] + 1
        cols = (ox - 1) * self.stride[1] + (self.FX - 1) * self.dilation[1] + 1
        return min(rows, self.IY + self.padding[0] + self.padding[2]), \
            min(cols, self.IX + self.padding[1] + self.padding[3])

    def operand_bytes(self, operand: str, k: int, oy: int, ox: int) -> int:
        """Bytes of ``operand``'s tile for a ``k x oy x ox`` block of outputs."""
        if operand == "O":
            return k * oy * ox * self.bits["O"] // 8
        if operand == "I":
            rows, cols = self.input_extent(oy, ox)
            channels = k if self.channelwise else self.C
            inputs = 2 if self.kind == "add" else 1
            return inputs * rows * cols * channels * self.bits["I"] // 8
        if not self.has_weights:
            return 0
        per_k = self.FY * self.FX * (1 if self.kind == "depthwise" else self.C)
        return k * per_k * self.bits["W"] // 8

    def to_dict(self) -> dict:
        return {"kind": self.kind, "K": self.K, "C": self.C, "OY": self.OY, "OX": self.OX,
                "FY": self.FY, "FX": self.FX, "IY": self.IY, "IX": self.IX,
                "stride": list(self.stride), "dilation": list(self.dilation),
                "padding": list(self.padding), "bits": dict(self.bits)}


def extract(workload: Workload, weight_layout: str = "OHWI") -> LoopNest | None:
    """The loop nest of a matched pattern; ``None`` for operators that are not layers.

    Reads the anchor operator of ``workload``: ``relax.nn.conv2d`` in NHWC (``groups == C``
    is depthwise), ``relax.matmul`` (dense), ``relax.nn.avg_pool2d`` / ``max_pool2d``, and
    element-wise anchors on NHWC tensors (``add``).
    """
    out_shape, _ = workload.output
    bits = {"I": 8, "W": 8, "O": 8}
    bits.update({k: v for k, v in workload.bits.items() if v})
    layouts = {"I": "NHWC", "W": weight_layout, "O": "NHWC"}
    attrs = workload.attrs
    if workload.op == "relax.nn.conv2d":
        (n, iy, ix, c), _ = workload.inputs[0]
        if attrs.get("data_layout") != "NHWC" or len(out_shape) != 4 or n != 1:
            return None
        w_shape, _ = workload.inputs[1]
        layout = str(attrs.get("kernel_layout"))
        fy, fx = w_shape[layout.index("H")], w_shape[layout.index("W")]
        groups = int(attrs.get("groups", 1))
        kind = "conv2d" if groups == 1 else "depthwise" if groups == c == out_shape[3] else None
        if kind is None:
            return None
        pad = tuple(int(p) for p in attrs.get("padding", (0, 0, 0, 0)))
        return LoopNest(kind, K=out_shape[3], C=c, OY=out_shape[1], OX=out_shape[2], FY=fy,
                        FX=fx, IY=iy, IX=ix, stride=tuple(attrs.get("strides", (1, 1))),
                        dilation=tuple(attrs.get("dilation", (1, 1))), padding=pad, bits=bits,
                        layouts=layouts)
    if workload.op == "relax.matmul":
        (shape, _), (w_shape, _) = workload.inputs[0], workload.inputs[1]
        if len(shape) != 2 or shape[0] != 1:
            return None
        return LoopNest("dense", K=w_shape[1], C=shape[1], OY=1, OX=1, IY=1, IX=1, bits=bits,
                        layouts={"I": "NC", "W": "KC", "O": "NC"})
    if workload.op in ("relax.nn.avg_pool2d", "relax.nn.max_pool2d"):
        (n, iy, ix, c), _ = workload.inputs[0]
        if attrs.get("layout") != "NHWC":
            return None
        pool = attrs.get("pool_size")
        return LoopNest("pool", K=c, C=c, OY=out_shape[1], OX=out_shape[2], FY=pool[0],
                        FX=pool[1], IY=iy, IX=ix, stride=tuple(attrs.get("strides")),
                        padding=tuple(attrs.get("padding")), bits=bits, layouts=layouts)
    tensors = [shape for shape, _ in workload.inputs if len(shape) == 4]
    if len(out_shape) == 4 and out_shape[0] == 1 and tensors \
            and all(shape == out_shape for shape in tensors):
        _, oy, ox, k = out_shape
        return LoopNest("add", K=k, C=k, OY=oy, OX=ox, IY=oy, IX=ox, bits=bits,
                        layouts=layouts)
    return None
