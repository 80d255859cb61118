"""Workload extraction: a matched pattern as a loop nest (MATCH's layer description)."""

from __future__ import annotations

import functools

from dataclasses import dataclass, field, replace
from typing import Callable, Mapping

from ..target import FrozenMap, Workload

#: the output dimensions the temporal-mapping search tiles; a module with an accumulator
#: (``ExecModule.accumulator_bits``) also gets the reduction loops of ``REDUCTION_DIMS`` it
#: names in ``ExecModule.partial_sum_dims`` tiled, with partial sums in L1
TILED_DIMS = ("K", "OY", "OX")

#: the input-channel dimension, the reduction a module with an accumulator tiles by default
REDUCTION_DIM = "C"

#: the reduction loops that may be tiled with partial sums, in their loop order (outermost
#: first; they nest inside the output loops): filter rows, filter columns, input channels
REDUCTION_DIMS = ("FY", "FX", "C")

#: the dimensions each operand depends on
RELEVANT = {"I": ("C", "OY", "OX", "FY", "FX"), "W": ("K", "C", "FY", "FX"),
            "O": ("K", "OY", "OX")}


@dataclass(frozen=True)
class LayerKind:
    """A kind of layer the MATCH layer template runs: its name, the ``code`` generated code
    sees in ``edgebyoc_layer_t.kind``, and how its operands relate to the loops.

    ``channelwise``: each output channel reads only its own input channel (depthwise, add,
    pooling); ``has_weights``: a constant weight tensor (and bias, multipliers, shifts) tiled
    along K; ``inputs``: activation inputs (2 for an element-wise add); ``reduces``: it
    multiply-accumulates over C (and the window). The core's kinds use codes 0-15; a plugin adds
    its own (code 16 and up) through ``ExecModule.layer_kinds`` with an ``extract`` function
    turning its pattern's ``Workload`` into a ``LoopNest`` of that kind, and handles the code in
    its tile kernel.

    Example, a max pooling kind a plugin runs on its own kernel::

        >>> def extract_max_pool(workload):
        ...     (n, iy, ix, c), _ = workload.inputs[0]
        ...     (_, oy, ox, _), _ = workload.output
        ...     fy, fx = workload.attrs["pool_size"]
        ...     return LoopNest("max_pool", K=c, C=c, OY=oy, OX=ox, FY=fy, FX=fx, IY=iy, IX=ix,
        ...                     stride=tuple(workload.attrs["strides"]))
        >>> MAX_POOL = LayerKind("max_pool", code=16, channelwise=True, ops=("relax.nn.max_pool2d",),
        ...                      extract=extract_max_pool)
        >>> MAX_POOL.code
        16
    """

    name: str
    code: int
    channelwise: bool = False
    has_weights: bool = False
    inputs: int = 1
    reduces: bool = False
    ops: tuple[str, ...] = ()
    extract: Callable[[Workload], "LoopNest | None"] | None = field(default=None, compare=False)

    def __post_init__(self):
        if not self.name.isidentifier():
            raise ValueError(f"layer kind name {self.name!r} must be an identifier")
        if not 0 <= self.code < 1 << 15:
            raise ValueError(f"layer kind {self.name!r}: code {self.code} out of range")


#: The layer kinds of the core's generic template and host emulation (codes 0-15 are the
#: core's; ``templates/edgebyoc_match.h`` names them ``EDGEBYOC_<KIND>``).
CORE_LAYER_KINDS = {kind.name: kind for kind in (
    LayerKind("conv2d", 0, has_weights=True, reduces=True),
    LayerKind("depthwise", 1, channelwise=True, has_weights=True, reduces=True),
    LayerKind("dense", 2, has_weights=True, reduces=True),
    LayerKind("add", 3, channelwise=True, inputs=2),
    LayerKind("pool", 4, channelwise=True, reduces=True),  # average pooling
)}


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
    #: the kind's description when it is not one of ``CORE_LAYER_KINDS`` (a plugin's kind)
    layer_kind: LayerKind | None = None

    def __post_init__(self):
        for name in ("bits", "layouts"):
            object.__setattr__(self, name, FrozenMap(getattr(self, name)))
        for name in ("stride", "dilation", "padding"):
            object.__setattr__(self, name, tuple(int(v) for v in getattr(self, name)))
        if self.layer_kind is None and self.kind not in CORE_LAYER_KINDS:
            raise ValueError(f"layer kind {self.kind!r} is not one of the core's "
                             f"({', '.join(CORE_LAYER_KINDS)}): pass its LayerKind")

    @property
    def description(self) -> LayerKind:
        """The ``LayerKind`` of this nest (the core's, or the plugin's ``layer_kind``)."""
        return self.layer_kind or CORE_LAYER_KINDS[self.kind]

    @property
    def channelwise(self) -> bool:
        """Each output channel reads only its own input channel (depthwise, add, pool)."""
        return self.description.channelwise

    @property
    def has_weights(self) -> bool:
        return self.description.has_weights

    @property
    def inputs(self) -> int:
        """Activation inputs of the layer (2 for an element-wise add)."""
        return self.description.inputs

    @property
    def macs(self) -> int:
        per_output = self.FY * self.FX * (1 if self.channelwise else self.C)
        return self.K * self.OY * self.OX * per_output if self.description.reduces else 0

    def size(self, dim: str) -> int:
        return getattr(self, dim)

    @functools.cached_property
    def loop_sizes(self) -> dict[str, int]:
        """The size of every tiled and reduction loop (K, OY, OX, FY, FX, C), by name."""
        return {dim: getattr(self, dim) for dim in (*TILED_DIMS, *REDUCTION_DIMS)}

    @property
    def planar(self) -> bool:
        """Whether the image activations are channel planes (``layouts`` I / O ``NCHW``, or
        ``NHCW``: planes cut in rows, rows outermost)."""
        return self.layouts.get("I") in ("NCHW", "NHCW")

    @property
    def rows_outermost(self) -> bool:
        """Whether the first rows of an image activation are its first bytes (NHWC, NHCW)."""
        return self.layouts.get("I", "NHWC") != "NCHW"

    def with_activation_layout(self, layout: str) -> "LoopNest":
        """This nest with image activations (``I`` and ``O``) in ``layout`` (``"NHWC"``,
        ``"NCHW"`` or ``"NHCW"``, ``ExecModule.activation_layout``); a dense layer's rows are
        the same in each and keep theirs.

        Example::

            >>> nest = LoopNest("conv2d", K=16, C=8, OY=4, OX=4, IY=4, IX=4)
            >>> nest.with_activation_layout("NCHW").planar
            True
        """
        if self.kind == "dense" or layout == self.layouts.get("I"):
            return self
        return replace(self, layouts={**self.layouts, "I": layout, "O": layout})

    def input_extent(self, oy: int, ox: int, fy: int | None = None,
                     fx: int | None = None) -> tuple[int, int]:
        """Input rows and columns an ``oy x ox`` output tile reads (halo included) through
        ``fy x fx`` filter taps (None: the whole filter; fewer for a tile of the filter
        loops, ``REDUCTION_DIMS``)."""
        fy = self.FY if fy is None else fy
        fx = self.FX if fx is None else fx
        rows = (oy - 1) * self.stride[0] + (fy - 1) * self.dilation[0] + 1
        cols = (ox - 1) * self.stride[1] + (fx - 1) * self.dilation[1] + 1
        rows = min(rows, self.IY + self.padding[0] + self.padding[2])
        cols = min(cols, self.IX + self.padding[1] + self.padding[3])
        if self.planar and ox == self.OX:
            # channel planes: a tile as wide as the output copies whole input rows (one DMA
            # run per row, not a run per row short of the columns a stride skips), and whole
            # NCHW planes when it is as high too (``edgebyoc_input_rows`` in the C header)
            cols = max(cols, self.IX)
            if oy == self.OY and not self.rows_outermost:
                rows = max(rows, self.IY)
        return rows, cols

    @property
    def channel_tiling(self) -> bool:
        """Whether the input channels C may be tiled with partial sums: a layer that
        multiply-accumulates every input channel into each output (conv2d, dense)."""
        return self.has_weights and self.description.reduces and not self.channelwise \
            and self.C > 1

    @property
    def filter_tiling(self) -> bool:
        """Whether the filter rows and columns (FY, FX) may be tiled with partial sums: a
        layer that multiply-accumulates every input channel into each output through a window
        of more than one tap (conv2d)."""
        return self.has_weights and self.description.reduces and not self.channelwise \
            and self.FY * self.FX > 1

    def tileable_reductions(self, allowed: tuple[str, ...] = REDUCTION_DIMS) -> list[str]:
        """The reduction loops of ``allowed`` (``REDUCTION_DIMS``) this nest may tile, in
        loop order: C with ``channel_tiling``, FY / FX (of more than one tap) with
        ``filter_tiling``."""
        return [d for d in REDUCTION_DIMS if d in allowed and self.size(d) > 1 and (
            self.channel_tiling if d == REDUCTION_DIM else self.filter_tiling)]

    def operand_bytes(self, operand: str, k: int, oy: int, ox: int,
                      c: int | None = None, fy: int | None = None,
                      fx: int | None = None) -> int:
        """Bytes of ``operand``'s tile for a ``k x oy x ox`` block of outputs over ``c``
        input channels and ``fy x fx`` filter taps (None: all of C, the whole filter)."""
        if operand == "O":
            return k * oy * ox * self.bits["O"] // 8
        c = self.C if c is None else c
        fy = self.FY if fy is None else fy
        fx = self.FX if fx is None else fx
        if operand == "I":
            rows, cols = self.input_extent(oy, ox, fy, fx)
            channels = k if self.channelwise else c
            return self.inputs * rows * cols * channels * self.bits["I"] // 8
        if not self.has_weights:
            return 0
        per_k = fy * fx * (1 if self.kind == "depthwise" else c)
        return k * per_k * self.bits["W"] // 8

    def to_dict(self) -> dict:
        return {"kind": self.kind, "K": self.K, "C": self.C, "OY": self.OY, "OX": self.OX,
                "FY": self.FY, "FX": self.FX, "IY": self.IY, "IX": self.IX,
                "stride": list(self.stride), "dilation": list(self.dilation),
                "padding": list(self.padding), "bits": dict(self.bits)}


def extract(workload: Workload, weight_layout: str = "OHWI",
            kinds: tuple[LayerKind, ...] = ()) -> LoopNest | None:
    """The loop nest of a matched pattern; ``None`` for operators that are not layers.

    ``kinds`` are a module's own layer kinds (``ExecModule.layer_kinds``): the first whose
    ``ops`` holds the anchor operator and whose ``extract`` answers decides. Otherwise the
    core's kinds read the anchor operator of ``workload``: ``relax.nn.conv2d`` in NHWC
    (``groups == C`` is depthwise), ``relax.matmul`` (dense), ``relax.nn.avg_pool2d`` /
    ``max_pool2d``, and element-wise anchors on NHWC tensors (``add``).

    Example::

        >>> from edgebyoc.api import Workload
        >>> conv = Workload("relax.nn.conv2d", "mychip.accel.conv2d",
        ...                 inputs=(((1, 8, 8, 16), "int32"), ((32, 3, 3, 16), "int8")),
        ...                 output=((1, 8, 8, 32), "int32"),
        ...                 attrs={"data_layout": "NHWC", "kernel_layout": "OHWI", "groups": 1,
        ...                        "strides": [1, 1], "padding": [1, 1, 1, 1]})
        >>> nest = extract(conv)
        >>> nest.kind, nest.K, nest.C, nest.OY, nest.FY, nest.macs
        ('conv2d', 32, 16, 8, 3, 294912)
    """
    for kind in kinds:
        if workload.op in kind.ops and kind.extract is not None:
            nest = kind.extract(workload)
            if nest is not None:
                return nest if nest.layer_kind is not None else replace(nest, layer_kind=kind)
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
