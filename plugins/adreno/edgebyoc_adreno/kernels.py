"""The adreno kernels: what each operator reads, how its inputs are laid out in textures, and
the OpenCL C rendered for one configuration.

Every texture input of a kernel is a logical matrix of float4 texels ``[lanes][seq]``: a thread
owns one lane (an input pixel, a matrix row, a group of four output channels) and walks ``seq``
(channels, the reduction) in order. The **access pattern** is how that matrix is stored in the
``image2d_t`` (TMModel, Fig. 3), i.e. which texels a thread's consecutive reads touch:

* ``column`` (cache-line reuse distance 0): ``x = lane, y = seq``: the threads of a warp read
  neighbouring texels of one image row at each step (coalesced);
* ``row`` (reuse distance 1): ``x = seq, y = lane``: each thread walks its own image row;
* ``block2`` / ``block4`` / ``block8`` (reuse distance b): ``x = seq // b, y = lane * b +
  seq % b``: each thread walks a b-texel-tall strip down, then right.

Two-dimensional lanes (an input pixel ``(iy, ix)``) keep ``iy`` on the image's y axis and ``ix``
on its x axis: ``column``: ``(ix, iy + IY * seq)``; ``row``: ``(ix * S + seq, iy)``; block:
``(ix * ceil(S / b) + seq // b, iy * b + seq % b)``.

A ``Config`` fixes the pattern of each texture input, the thread tile (outputs per thread along
each tiled dimension, unrolled), the work-group size and the warp shape: the threads of a work
group are numbered warp by warp and each warp covers a ``wx x wy`` block of the group's output
grid (``wx * wy`` = the device's warp size, or the whole group when smaller).

Outputs are written to plain buffers in the operator's logical (row-major / NCHW) layout; a
region's inputs are packed into their textures by ``pack`` (the host, numpy) and its constant
weights once at compile time.
"""

from __future__ import annotations

import functools
import itertools
import math
from dataclasses import dataclass, field
from importlib import resources
from typing import Callable

import numpy as np
from mako.lookup import TemplateLookup

PATTERNS = ("column", "row", "block2", "block4", "block8")


def reuse_distance(pattern: str) -> int:
    """The cache-line reuse distance ``s`` of a pattern (TMModel section 3.2.1)."""
    return {"column": 0, "row": 1}[pattern] if pattern in ("column", "row") \
        else int(pattern[len("block"):])


def _block(pattern: str) -> int:
    return int(pattern[len("block"):]) if pattern.startswith("block") else 0


@dataclass(frozen=True)
class TextureLayout:
    """Where texel ``(lane, seq)`` of a logical ``[lanes][seq]`` matrix sits in an image2d.

    ``lanes`` is ``(L,)`` or ``(LY, LX)``. A one-dimensional lane goes on the image's x axis for
    ``column`` and on its y axis otherwise, so that every pattern reads as its name says.

    >>> TextureLayout("row", (3,), 5).shape, TextureLayout("column", (3,), 5).shape
    ((3, 5), (5, 3))
    >>> TextureLayout("block2", (3,), 5).coords(np.array([1]), np.array([3]))
    (array([1]), array([3]))
    """

    pattern: str
    lanes: tuple[int, ...]
    seq: int

    def __post_init__(self):
        if self.pattern not in PATTERNS:
            raise ValueError(f"access pattern {self.pattern!r} is not one of "
                             f"{', '.join(PATTERNS)}")

    @property
    def lanes_2d(self) -> tuple[int, int]:
        if len(self.lanes) == 2:
            return self.lanes
        (count,) = self.lanes
        return (1, count) if self.pattern == "column" else (count, 1)

    @property
    def shape(self) -> tuple[int, int]:
        """(height, width) of the image in texels."""
        ly, lx = self.lanes_2d
        b = _block(self.pattern)
        if self.pattern == "column":
            return ly * self.seq, lx
        if self.pattern == "row":
            return ly, lx * self.seq
        return ly * b, lx * -(-self.seq // b)

    def coords(self, lane, seq) -> tuple:
        """Image (x, y) of texels; ``lane`` is flat (``ly * LX + lx``), arrays broadcast."""
        if len(self.lanes) == 2:
            return self._coords(lane // self.lanes[1], lane % self.lanes[1], seq)
        if self.pattern == "column":
            return self._coords(0 * lane, lane, seq)
        return self._coords(lane, 0 * lane, seq)

    def _coords(self, ly, lx, seq):
        LY, _ = self.lanes_2d
        b = _block(self.pattern)
        if self.pattern == "column":
            return lx, ly + LY * seq
        if self.pattern == "row":
            return lx * self.seq + seq, ly
        return lx * -(-self.seq // b) + seq // b, ly * b + seq % b

    def c_macro(self, name: str) -> str:
        """``#define name(ly, lx, s)``: the image coordinate as an OpenCL ``int2``."""
        LY, _ = self.lanes_2d
        b = _block(self.pattern)
        if self.pattern == "column":
            body = f"(int2)((lx), (ly) + {LY} * (s))"
        elif self.pattern == "row":
            body = f"(int2)((lx) * {self.seq} + (s), (ly))"
        else:
            body = f"(int2)((lx) * {-(-self.seq // b)} + (s) / {b}, (ly) * {b} + (s) % {b})"
        return f"#define {name}(ly, lx, s) {body}"

    def image(self, texels: np.ndarray) -> np.ndarray:
        """``texels`` (``[lanes..., seq, 4]``) as the float32 image ``[height][width][4]``."""
        height, width = self.shape
        out = np.zeros((height, width, 4), np.float32)
        LY, LX = self.lanes_2d
        grid = texels.reshape(LY, LX, self.seq, 4)
        ly, lx, s = np.meshgrid(np.arange(LY), np.arange(LX), np.arange(self.seq),
                                indexing="ij")
        x, y = self._coords(ly, lx, s)
        out[y, x] = grid
        return out


def lane_call(layout: TextureLayout, lane: str) -> str:
    """The ``ly, lx`` arguments of a one-dimensional lane for ``layout``'s macro."""
    return f"0, {lane}" if layout.lanes_2d[0] == 1 else f"{lane}, 0"


@dataclass(frozen=True)
class TextureInput:
    """One texture operand of a kernel: its name, lanes and sequence length, and how to build
    its texels from the operand's array (``texels(array) -> [lanes..., seq, 4]``)."""

    name: str
    lanes: tuple[int, ...]
    seq: int
    texels: Callable[[np.ndarray], np.ndarray] = field(compare=False, repr=False)

    def layout(self, pattern: str) -> TextureLayout:
        return TextureLayout(pattern, self.lanes, self.seq)


ACTIVATIONS = ("none", "relu", "clip")


@dataclass(frozen=True)
class Epilogue:
    """What follows the main computation in the same kernel: a bias (per output channel or
    column) and an activation (``clip`` clamps to ``[low, high]``, relu6 included)."""

    bias: bool = False
    activation: str = "none"
    low: float = 0.0
    high: float = 0.0


def _c4(channels: int) -> int:
    return -(-channels // 4)


def _pad_to(array: np.ndarray, axis: int, size: int) -> np.ndarray:
    pad = [(0, 0)] * array.ndim
    pad[axis] = (0, size - array.shape[axis])
    return np.pad(array, pad)


@dataclass(frozen=True)
class Conv2D:
    """A 2-D convolution, NCHW activations: ``kind`` ``conv`` (groups 1, OIHW weights),
    ``depthwise`` (groups = channels, multiplier 1) or ``deconv`` (a transposed convolution,
    IOHW weights, groups 1). ``padding`` is (top, left, bottom, right)."""

    kind: str
    channels: int
    height: int
    width: int
    out_channels: int
    out_height: int
    out_width: int
    kernel: tuple[int, int]
    stride: tuple[int, int] = (1, 1)
    dilation: tuple[int, int] = (1, 1)
    padding: tuple[int, int, int, int] = (0, 0, 0, 0)
    epilogue: Epilogue = Epilogue()

    op = "conv2d"
    tiled = ("OX", "K4")

    @property
    def name(self) -> str:
        return {"conv": f"conv2d_s{self.stride[0]}", "depthwise": "dwconv2d",
                "deconv": f"deconv2d_s{self.stride[0]}"}[self.kind]

    @property
    def macs(self) -> int:
        fy, fx = self.kernel
        per_output = fy * fx * (1 if self.kind == "depthwise" else self.channels)
        if self.kind == "deconv":  # each input pixel scatters into fy * fx outputs
            return self.channels * self.height * self.width * fy * fx * self.out_channels
        return self.out_channels * self.out_height * self.out_width * per_output

    @property
    def inputs(self) -> tuple[TextureInput, ...]:
        c4, k4 = _c4(self.channels), _c4(self.out_channels)
        fy, fx = self.kernel

        def activation(x):  # [C][H][W] -> [H][W][C4][4]
            x = _pad_to(np.asarray(x, np.float32).reshape(self.channels, self.height,
                                                            self.width), 0, 4 * c4)
            return x.reshape(c4, 4, self.height, self.width).transpose(2, 3, 0, 1)

        def weight(w):
            w = np.asarray(w, np.float32)
            if self.kind == "depthwise":  # [C][1][FY][FX] -> [C4][FY*FX][4]
                w = _pad_to(w.reshape(self.channels, fy * fx), 0, 4 * k4)
                return w.reshape(k4, 4, fy * fx).transpose(0, 2, 1)
            if self.kind == "deconv":  # IOHW -> OIHW
                w = w.transpose(1, 0, 2, 3)
            # OIHW -> [K4][FY][FX][C4*4][4]: texel (k4, (fy*FX + fx)*C4*4 + c)
            w = _pad_to(_pad_to(w, 0, 4 * k4), 1, 4 * c4)
            w = w.reshape(k4, 4, 4 * c4, fy, fx).transpose(0, 3, 4, 2, 1)
            return w.reshape(k4, fy * fx * 4 * c4, 4)

        seq = fy * fx if self.kind == "depthwise" else fy * fx * 4 * c4
        return (TextureInput("input", (self.height, self.width), c4, activation),
                TextureInput("weight", (k4,), seq, weight))

    @property
    def output_shape(self) -> tuple[int, ...]:
        return (1, self.out_channels, self.out_height, self.out_width)

    def grid(self, tile: tuple[int, int]) -> tuple[int, int, int]:
        """Threads along (x: output columns, y: output rows, z: channel groups)."""
        return (-(-self.out_width // tile[0]), self.out_height,
                -(-_c4(self.out_channels) // tile[1]))

    def reference(self, x, w, b=None) -> np.ndarray:
        """numpy float64 reference of the kernel (with its epilogue)."""
        x = np.asarray(x, np.float64).reshape(self.channels, self.height, self.width)
        w = np.asarray(w, np.float64)
        fy, fx = self.kernel
        (sy, sx), (dy, dx) = self.stride, self.dilation
        top, left = self.padding[:2]
        out = np.zeros((self.out_channels, self.out_height, self.out_width))
        if self.kind == "deconv":
            for iy, ix in itertools.product(range(self.height), range(self.width)):
                for ky, kx in itertools.product(range(fy), range(fx)):
                    oy, ox = iy * sy - top + ky * dy, ix * sx - left + kx * dx
                    if 0 <= oy < self.out_height and 0 <= ox < self.out_width:
                        out[:, oy, ox] += x[:, iy, ix] @ w[:, :, ky, kx]
        else:
            padded = np.zeros((self.channels, self.height + top + fy * dy + sy * self.out_height,
                               self.width + left + fx * dx + sx * self.out_width))
            padded[:, top:top + self.height, left:left + self.width] = x
            for ky, kx in itertools.product(range(fy), range(fx)):
                patch = padded[:, ky * dy: ky * dy + sy * self.out_height: sy,
                               kx * dx: kx * dx + sx * self.out_width: sx]
                if self.kind == "depthwise":
                    out += patch * w[:, 0, ky, kx][:, None, None]
                else:
                    out += np.einsum("chw,kc->khw", patch, w[:, :, ky, kx])
        if b is not None:
            out += np.asarray(b, np.float64).reshape(-1)[:, None, None]
        return _activate(out, self.epilogue)[None]


@dataclass(frozen=True)
class MatMul:
    """``[rows, depth] @ [depth, cols]`` (leading dimensions of the left operand folded into
    rows), the right operand constant or not; a bias is per column."""

    rows: int
    depth: int
    cols: int
    out_shape: tuple[int, ...] = ()
    epilogue: Epilogue = Epilogue()

    op = "matmul"
    kind = "matmul"
    name = "matmul"
    tiled = ("N4", "M")

    @property
    def macs(self) -> int:
        return self.rows * self.depth * self.cols

    @property
    def inputs(self) -> tuple[TextureInput, ...]:
        k4, n4 = _c4(self.depth), _c4(self.cols)

        def left(a):  # [M][K] -> [M][K4][4]
            a = _pad_to(np.asarray(a, np.float32).reshape(self.rows, self.depth), 1, 4 * k4)
            return a.reshape(self.rows, k4, 4)

        def right(b):  # [K][N] -> [N4][K4*4][4]
            b = np.asarray(b, np.float32).reshape(self.depth, self.cols)
            b = _pad_to(_pad_to(b, 0, 4 * k4), 1, 4 * n4)
            return b.reshape(4 * k4, n4, 4).transpose(1, 0, 2)

        return (TextureInput("lhs", (self.rows,), k4, left),
                TextureInput("rhs", (n4,), 4 * k4, right))

    @property
    def output_shape(self) -> tuple[int, ...]:
        return self.out_shape or (self.rows, self.cols)

    def grid(self, tile: tuple[int, int]) -> tuple[int, int, int]:
        """Threads along (x: column groups, y: rows, z: 1)."""
        return (-(-_c4(self.cols) // tile[0]), -(-self.rows // tile[1]), 1)

    def reference(self, a, b, bias=None) -> np.ndarray:
        out = (np.asarray(a, np.float64).reshape(self.rows, self.depth)
               @ np.asarray(b, np.float64).reshape(self.depth, self.cols))
        if bias is not None:
            out += np.asarray(bias, np.float64).reshape(-1)
        return _activate(out, self.epilogue).reshape(self.output_shape)


@dataclass(frozen=True)
class RowReduction:
    """``softmax`` or ``layernorm`` over the last axis of a ``[rows, cols]`` view; layernorm
    takes gamma and beta (per column) and ``epsilon``."""

    kind: str
    rows: int
    cols: int
    out_shape: tuple[int, ...] = ()
    epsilon: float = 1e-5
    epilogue: Epilogue = Epilogue()

    op = "rows"
    tiled = ("R", "")

    @property
    def name(self) -> str:
        return self.kind

    @property
    def macs(self) -> int:
        return 0

    @property
    def inputs(self) -> tuple[TextureInput, ...]:
        n4 = _c4(self.cols)

        def rows(x):
            x = _pad_to(np.asarray(x, np.float32).reshape(self.rows, self.cols), 1, 4 * n4)
            return x.reshape(self.rows, n4, 4)

        return (TextureInput("input", (self.rows,), n4, rows),)

    @property
    def output_shape(self) -> tuple[int, ...]:
        return self.out_shape or (self.rows, self.cols)

    def grid(self, tile: tuple[int, int]) -> tuple[int, int, int]:
        return (-(-self.rows // tile[0]), 1, 1)

    def reference(self, x, gamma=None, beta=None) -> np.ndarray:
        x = np.asarray(x, np.float64).reshape(self.rows, self.cols)
        if self.kind == "softmax":
            e = np.exp(x - x.max(axis=1, keepdims=True))
            out = e / e.sum(axis=1, keepdims=True)
        else:
            mean = x.mean(axis=1, keepdims=True)
            var = ((x - mean) ** 2).mean(axis=1, keepdims=True)
            out = (x - mean) / np.sqrt(var + self.epsilon)
            out = out * np.asarray(gamma).reshape(-1) + np.asarray(beta).reshape(-1)
        return out.reshape(self.output_shape)


Kernel = Conv2D | MatMul | RowReduction


def _activate(out: np.ndarray, epilogue: Epilogue) -> np.ndarray:
    if epilogue.activation == "relu":
        return np.maximum(out, 0)
    if epilogue.activation == "clip":
        return np.clip(out, epilogue.low, epilogue.high)
    return out


@dataclass(frozen=True)
class Config:
    """One implementation of a kernel: an access pattern per texture input, the thread tile
    (outputs per thread along the kernel's two tiled dimensions), the work-group size
    ``(gx, gy)`` and the warp shape ``(wx, wy)``."""

    patterns: tuple[str, ...]
    tile: tuple[int, int]
    group: tuple[int, int]
    warp: tuple[int, int]

    @property
    def label(self) -> str:
        return (f"{'/'.join(self.patterns)} tile {self.tile[0]}x{self.tile[1]} "
                f"wg {self.group[0]}x{self.group[1]} warp {self.warp[0]}x{self.warp[1]}")

    def to_dict(self) -> dict:
        return {"patterns": list(self.patterns), "tile": list(self.tile),
                "group": list(self.group), "warp": list(self.warp)}

    @classmethod
    def from_dict(cls, data) -> "Config":
        return cls(tuple(data["patterns"]), tuple(data["tile"]), tuple(data["group"]),
                   tuple(data["warp"]))


TILES = (1, 2, 4)
GROUPS_2D = ((8, 8), (16, 8), (16, 16), (32, 8))
GROUPS_1D = ((32, 1), (64, 1), (128, 1), (256, 1))


@functools.lru_cache(maxsize=None)
def warp_shapes(group: tuple[int, int], warp_size: int) -> tuple[tuple[int, int], ...]:
    """The warp shapes that tile a work group of ``group`` threads."""
    gx, gy = group
    size = min(warp_size, gx * gy)
    return tuple((wx, size // wx) for wx in range(1, size + 1)
                 if size % wx == 0 and gx % wx == 0 and gy % (size // wx) == 0)


def configurations(kernel: Kernel, warp_size: int, max_image: tuple[int, int] | None = None
                   ) -> list[Config]:
    """The configuration space the cost model and the simulator search for ``kernel``:
    every pattern per texture input (those whose image fits ``max_image`` = (height, width)),
    thread tiles of 1, 2 and 4 along each tiled dimension, and the work groups and warp shapes
    above."""
    per_input = []
    for item in kernel.inputs:
        fits = [p for p in PATTERNS if max_image is None or
                all(d <= m for d, m in zip(item.layout(p).shape, max_image))]
        per_input.append(fits)
    if kernel.op == "rows":
        tiles = [(t, 1) for t in TILES]
        groups = GROUPS_1D
    else:
        tiles = list(itertools.product(TILES, TILES))
        groups = GROUPS_2D
    out = []
    for patterns in itertools.product(*per_input):
        for tile in tiles:
            for group in groups:
                for warp in warp_shapes(group, warp_size):
                    out.append(Config(patterns, tile, group, warp))
    return out


_LOOKUP = TemplateLookup(directories=[str(resources.files("edgebyoc_adreno") / "templates")],
                         strict_undefined=True)


def render(kernel: Kernel, config: Config, *, name: str = "edgebyoc_kernel",
           warp_size: int = 64, fp16: bool = False) -> str:
    """The OpenCL C of ``kernel`` in ``config`` (fp16: half precision storage and arithmetic,
    for devices with ``cl_khr_fp16``)."""
    layouts = [item.layout(p) for item, p in zip(kernel.inputs, config.patterns)]
    template = _LOOKUP.get_template(f"{kernel.op}.cl.mako")
    return template.render(k=kernel, cfg=config, layouts=layouts, name=name,
                           warp_size=min(warp_size, config.group[0] * config.group[1]),
                           fp16=fp16, lane_call=lane_call, c4=_c4, math=math)


def launch(kernel: Kernel, config: Config) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(global size, local size) of the NDRange."""
    gx, gy = config.group
    grid = kernel.grid(config.tile)
    if kernel.op == "rows":
        return (-(-grid[0] // gx) * gx,), (gx,)
    return ((-(-grid[0] // gx) * gx, -(-grid[1] // gy) * gy, grid[2]), (gx, gy, 1))
