"""TMModel (Guan et al., ICS '25, section 4): the texture-memory cost model that picks each
kernel's access patterns, thread tile, work group and warp shape.

For a configuration of a kernel:

1. **thread level** (eq. 1): the reads of one thread (``thread_trace``: the kernel's loop order,
   the configuration's texture layouts) give per texture input a cross-block-stride histogram
   ``H`` (``histogram``): the number of reads, then for each assumed texture block shape
   ``(bw, bh)`` of the calibration the consecutive reads that cross a block boundary along x
   only, along y only, and along both (a stride into a diagonal block: one new block, not
   two). ``L_t(H) = <beta, H>``.
2. **warp level** (eqs. 2-3): ``L_w = sum_i L_t(H_i) * D ** max(0, ceil((sum_i w_i s_i - C) /
   C))`` with ``C`` the texture cache's lines, ``w_i`` the distinct lanes of input i read at
   one instruction by the warps sharing the cache (``warp_lanes``: where the warp shape and
   the work group enter; ``|W|`` for one warp whose threads each read their own lane) and
   ``s_i`` the reuse distance of input i's pattern times the lanes a thread's tile cycles
   through (a thread with a tile of T pixels keeps T times the lines live). Both readings of
   eq. 3 for tiled kernels and concurrent warps are ours; the paper states it per warp.
3. **work-group level** (eqs. 4-6): occupancy ``R / footprint(T)`` warps per shader processor,
   the register footprint of a thread being ``base + 4 * (accumulator texels + operand texels)``;
   ``WGs = prod_j ceil(O_j / (T_j G_j))``; ``L_g = ceil(WGs * warps per group / (SPs *
   occupancy))`` waves.
4. ``L = L_w * L_g`` (eq. 7); ``best`` enumerates the configuration space and takes the
   minimum (ties: the warp widest along a cache line's axis).

``beta`` and ``D`` come from a calibration (``calibrate.py``), the device constants from a
device file (``devices/*.json``, every number with its source).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from .kernels import PATTERNS, Config, Kernel, configurations, reuse_distance


@dataclass(frozen=True)
class DeviceSpec:
    """A GPU description (``devices/<name>.json``): each field is ``{"value", "source"}``."""

    name: str
    warp_size: int
    shader_processors: int
    registers_per_sp: int
    max_warps_per_sp: int
    base_registers: int
    texture_cache_bytes: int
    cache_line_texels: tuple[int, int]
    max_image: tuple[int, int]
    clock_hz: float
    host_gflops: float
    launch_overhead_us: float
    simulator: Mapping[str, float] = field(default_factory=dict, compare=False)
    sources: Mapping[str, str] = field(default_factory=dict, compare=False, repr=False)

    @property
    def cache_lines(self) -> int:
        """``C``: lines of the texture cache (16-byte texels)."""
        lw, lh = self.cache_line_texels
        return self.texture_cache_bytes // (16 * lw * lh)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "DeviceSpec":
        values, sources = {}, {}
        names = [f for f in cls.__dataclass_fields__ if f not in ("name", "simulator",
                                                                    "sources")]
        for name in names:
            if name not in data:
                raise ValueError(f"device {data.get('name', '?')!r}: no {name!r}")
            entry = data[name]
            if not isinstance(entry, Mapping) or "value" not in entry or not entry.get("source"):
                raise ValueError(f"device {data.get('name', '?')!r}: {name!r} needs a value "
                                 f"and its source")
            value = entry["value"]
            values[name] = tuple(value) if isinstance(value, list) else value
            sources[name] = entry["source"]
        simulator = {k: v["value"] for k, v in data.get("simulator", {}).items()}
        return cls(name=data["name"], simulator=simulator, sources=sources, **values)


DEVICES = ("adreno740", "mali_g77", "pocl")


@lru_cache(maxsize=None)
def load_device(name_or_path: str) -> DeviceSpec:
    """A shipped device (``adreno740``, ``mali_g77``, ``pocl``) or a JSON file."""
    path = Path(name_or_path)
    if not path.suffix:
        path = Path(str(resources.files("edgebyoc_adreno") / "devices")) / f"{name_or_path}.json"
        if not path.exists():
            raise ValueError(f"unknown device {name_or_path!r} (shipped: {', '.join(DEVICES)}; "
                             f"or a JSON file)")
    return DeviceSpec.from_dict(json.loads(path.read_text()))


#: the texture block shapes every calibration assumes (distinct widths and heights: the
#: histogram's features stay independent)
BLOCK_SHAPES = ((2, 1), (4, 4))
_SHIPPED_DEFAULT = "adreno740"


def parameter_names(block_shapes=BLOCK_SHAPES) -> list[str]:
    """``beta_reads``, then per block shape ``beta_<w>x<h>_x`` / ``_y`` / ``_xy``, then
    ``thrashing_d``: the calibration parameters in ``beta`` order."""
    names = ["beta_reads"]
    for bw, bh in block_shapes:
        names += [f"beta_{bw}x{bh}_{axis}" for axis in ("x", "y", "xy")]
    return names + ["thrashing_d"]


@dataclass(frozen=True)
class Calibration:
    """``beta`` (one weight per histogram entry: reads, then per block shape the crossings
    along x only, y only and both)
    and ``D`` (the thrashing factor), with how they were obtained."""

    block_shapes: tuple[tuple[int, int], ...]
    beta: tuple[float, ...]
    D: float
    device: str = ""
    fit: Mapping[str, Any] = field(default_factory=dict, compare=False)

    def __post_init__(self):
        if len(self.beta) != 1 + 3 * len(self.block_shapes):
            raise ValueError(f"calibration: {len(self.beta)} beta weights for "
                             f"{len(self.block_shapes)} block shapes (need "
                             f"{1 + 3 * len(self.block_shapes)})")
        if not self.D >= 1.0:
            raise ValueError(f"calibration: D = {self.D} (the thrashing factor is at least 1)")

    def values(self) -> dict[str, float]:
        """The calibration parameters' values (``parameter_names``), as edgebyoc's
        calibration files hold them."""
        return dict(zip(parameter_names(self.block_shapes), [*self.beta, self.D]))

    @classmethod
    def from_values(cls, values: Mapping[str, float], device: str = "",
                    fit: Mapping[str, Any] | None = None) -> "Calibration":
        names = parameter_names()
        return cls(BLOCK_SHAPES, tuple(float(values[n]) for n in names[:-1]),
                   float(values["thrashing_d"]), device, dict(fit or {}))

    def to_dict(self) -> dict[str, Any]:
        """The file ``edgebyoc-adreno calibrate`` writes: edgebyoc's calibration format."""
        return {"format": "edgebyoc-calibration/1", "target": "adreno",
                "values": self.values(), "fit": dict(self.fit), "fitted_on": self.device}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "Calibration":
        if "format" in data:  # edgebyoc's calibration format
            return cls.from_values(data["values"], data.get("fitted_on", ""), data.get("fit"))
        # the format of edgebyoc-adreno before 0.2 (API 2.4)
        return cls(tuple(tuple(b) for b in data["block_shapes"]), tuple(data["beta"]),
                   float(data["D"]), data.get("device", ""), data.get("fit", {}))


def shipped_calibration_path(device: str) -> Path | None:
    """The calibration shipped for a shipped device, ``None`` for another device file."""
    path = Path(str(resources.files("edgebyoc_adreno") / "devices")) / \
        f"{device}.calibration.json"
    return path if Path(device).suffix == "" and path.exists() else None


def _parameters():
    from edgebyoc.api import CalibrationParameter

    default = json.loads(shipped_calibration_path(_SHIPPED_DEFAULT).read_text())["values"]
    source = f"the calibration shipped for {_SHIPPED_DEFAULT} (simulated micro-benchmarks)"
    out = []
    for name in parameter_names():
        if name == "thrashing_d":
            out.append(CalibrationParameter(name, default[name], 1.0, 100.0, "",
                                            "warp-level thrashing factor D (eq. 3)", source))
        else:
            out.append(CalibrationParameter(name, default[name], -1000.0, 1000.0, "cycles",
                                            f"TMModel beta weight {name[5:]} (eq. 1)", source))
    return tuple(out)


#: TMModel's calibration parameters (``edgebyoc calibrate adreno`` fits them to measured
#: latencies; ``edgebyoc-adreno calibrate`` to its micro-benchmarks)
CALIBRATION_PARAMETERS = _parameters()


@lru_cache(maxsize=None)
def load_calibration(name_or_path: str) -> Calibration:
    """A shipped calibration (``<device>`` -> ``devices/<device>.calibration.json``) or a file
    (edgebyoc's calibration format, or the one of edgebyoc-adreno before 0.2)."""
    path = Path(name_or_path)
    if not path.suffix:
        path = shipped_calibration_path(name_or_path)
        if path is None:
            raise ValueError(f"no shipped calibration for {name_or_path!r}; run "
                             f"`edgebyoc-adreno calibrate` and pass the file")
    try:
        return Calibration.from_dict(json.loads(path.read_text()))
    except OSError as err:
        raise ValueError(f"option calibration: cannot read {path} ({err.strerror})") from err
    except (json.JSONDecodeError, KeyError, TypeError) as err:
        raise ValueError(f"option calibration: {path} is not a calibration file "
                         f"({type(err).__name__}: {err})") from err


# --------------------------------------------------------------------------- thread traces

@dataclass
class Trace:
    """The texture reads of ``n`` threads in the kernel's order (SIMT: every thread executes
    the same read instructions): ``source[step]`` the texture input read, ``x``, ``y``
    ``[n, steps]`` its texel, ``valid`` whether the thread really reads (bounds, padding)."""

    source: np.ndarray
    x: np.ndarray
    y: np.ndarray
    valid: np.ndarray


@dataclass
class Reads:
    """The texture reads of ``n`` threads before any layout: ``source[step]`` the input read,
    ``lane`` / ``seq`` ``[n, steps]`` the texel of its logical matrix, ``valid`` whether the
    thread really reads it. Every pattern shares them (``Trace`` maps them to texels)."""

    source: np.ndarray
    lane: np.ndarray
    seq: np.ndarray
    valid: np.ndarray

    def trace(self, layouts) -> Trace:
        x = np.zeros(self.lane.shape, np.int64)
        y = np.zeros(self.lane.shape, np.int64)
        for index, layout in enumerate(layouts):
            cols = self.source == index
            x[:, cols], y[:, cols] = layout.coords(self.lane[:, cols], self.seq[:, cols])
        return Trace(self.source, x, y, self.valid)


def _assemble(slots: Sequence[tuple[int, np.ndarray, np.ndarray, np.ndarray]], n: int
              ) -> Reads:
    """Slots (input, lane, seq, valid) each ``[n, iterations]``, interleaved per iteration."""
    sources = [np.full(lane.shape[1], index) for index, lane, _, _ in slots]
    stack = lambda i: np.stack(  # noqa: E731
        [np.where(slot[3], slot[i], 0) if i < 3 else slot[3] for slot in slots],
        axis=-1).reshape(n, -1)
    return Reads(np.stack(sources, axis=-1).reshape(-1), stack(1), stack(2), stack(3))


def thread_trace(kernel: Kernel, config: Config, tx, ty, tz,
                 iterations: int | None = None) -> Trace:
    """The texel reads of the threads at grid positions ``(tx, ty, tz)`` (equal lengths), of
    the first ``iterations`` iterations of the kernel's main loop (all when ``None``)."""
    layouts = [item.layout(p) for item, p in zip(kernel.inputs, config.patterns)]
    return thread_reads(kernel, config.tile, tx, ty, tz, iterations).trace(layouts)


def loop_iterations(kernel: Kernel) -> int:
    """Iterations of a kernel's main loop (each issues the same reads per tile slot)."""
    if kernel.op == "conv2d":
        fy, fx = kernel.kernel
        return fy * fx * (1 if kernel.kind == "depthwise" else -(-kernel.channels // 4))
    if kernel.op == "matmul":
        return -(-kernel.depth // 4)
    return 3 * -(-kernel.cols // 4)


def thread_reads(kernel: Kernel, tile: tuple[int, int], tx, ty, tz,
                 iterations: int | None = None) -> Reads:
    """The logical reads of the threads at ``(tx, ty, tz)`` for thread tile ``tile`` (the
    first ``iterations`` iterations of the main loop, or all)."""
    limit = loop_iterations(kernel) if iterations is None else iterations
    tx, ty, tz = (np.asarray(v, np.int64).reshape(-1, 1) for v in (tx, ty, tz))
    n = tx.shape[0]
    grid = kernel.grid(tile)
    inside = (tx < grid[0]) & (ty < grid[1]) & (tz < grid[2])
    if kernel.op == "conv2d":
        return _conv_reads(kernel, tile, tx, ty, tz, inside, n, limit)
    if kernel.op == "matmul":
        tn, tm = tile
        k4, n4 = -(-kernel.depth // 4), -(-kernel.cols // 4)
        k4 = min(k4, limit)
        it = np.arange(k4)[None, :]
        slots = []
        for m in range(tm):
            row = ty * tm + m
            slots.append((0, np.broadcast_to(row, (n, k4)), np.broadcast_to(it, (n, k4)),
                          np.broadcast_to(inside & (row < kernel.rows), (n, k4))))
        for j in range(4):
            for c in range(tn):
                col = tx * tn + c
                slots.append((1, np.broadcast_to(col, (n, k4)), it * 4 + j + 0 * col,
                              np.broadcast_to(inside & (col < n4), (n, k4))))
        return _assemble(slots, n)
    # row reductions: three passes over each row's texels, rows of the tile interleaved
    tr = tile[0]
    n4 = -(-kernel.cols // 4)
    passes = 3
    it = np.tile(np.arange(n4), passes)[None, :limit]
    last = (np.arange(passes * n4) >= (passes - 1) * n4)[None, :limit]
    shape = (n, it.shape[1])
    slots = []
    for t in range(tr):
        row = tx * tr + t
        valid = inside & (tx * tr < kernel.rows) & (~last | (row < kernel.rows))
        slots.append((0, np.broadcast_to(np.minimum(row, kernel.rows - 1), shape),
                      np.broadcast_to(it, shape), np.broadcast_to(valid, shape)))
    return _assemble(slots, n)


def _conv_reads(k, tile, tx, ty, tz, inside, n, limit) -> Reads:
    TX, TK = tile
    FY, FX = k.kernel
    (SY, SX), (DY, DX) = k.stride, k.dilation
    top, left = k.padding[:2]
    c4, k4 = -(-k.channels // 4), -(-k.out_channels // 4)
    dw = k.kind == "depthwise"
    fy, fx, cc = np.meshgrid(np.arange(FY), np.arange(FX), np.arange(1 if dw else c4),
                             indexing="ij")
    fy, fx, cc = (a.reshape(1, -1)[:, :limit] for a in (fy, fx, cc))
    iters = fy.shape[1]
    oy, ox0, kg0 = ty, tx * TX, tz * TK
    if k.kind == "deconv":
        ny = oy + top - fy * DY
        iy = ny // SY
        row_ok = (ny >= 0) & (ny % SY == 0) & (iy < k.height)
    else:
        iy = oy * SY + fy * DY - top
        row_ok = (iy >= 0) & (iy < k.height)
    pixels = []
    for t in range(TX):
        if k.kind == "deconv":
            nx = ox0 + t + left - fx * DX
            ix = nx // SX
            ok = row_ok & (ox0 + t < k.out_width) & (nx >= 0) & (nx % SX == 0) & (ix < k.width)
        else:
            ix = (ox0 + t) * SX + fx * DX - left
            ok = row_ok & (ox0 + t < k.out_width) & (ix >= 0) & (ix < k.width)
        pixels.append((iy * k.width + ix, ok & inside & (oy < k.out_height)))
    shape = (n, iters)
    b = lambda a: np.broadcast_to(a, shape)  # noqa: E731
    slots = []
    if dw:
        r = fy * FX + fx
        for tk in range(TK):
            group = kg0 + tk
            slots.append((1, b(group), b(r), b(inside & (group < k4))))
            for lane, ok in pixels:
                slots.append((0, b(lane), b(group), b(ok & (group < k4))))
    else:
        for lane, ok in pixels:
            slots.append((0, b(lane), b(cc), b(ok)))
        for j in range(4):
            for tk in range(TK):
                group = kg0 + tk
                slots.append((1, b(group), b(((fy * FX + fx) * c4 + cc) * 4 + j),
                              b(inside & (group < k4))))
    return _assemble(slots, n)


def representative_thread(kernel: Kernel, tile: tuple[int, int]) -> tuple[int, int, int]:
    """A thread in the middle of the grid (no padding or partial tiles in its reads)."""
    grid = kernel.grid(tile)
    return grid[0] // 2, grid[1] // 2, grid[2] // 2


def histogram(x: np.ndarray, y: np.ndarray, block_shapes) -> np.ndarray:
    """``H`` of one thread's reads of one input: [reads, then per block shape the consecutive
    reads crossing a block boundary along x only, along y only, along both]."""
    features = [float(len(x))]
    for bw, bh in block_shapes:
        if len(x) > 1:
            cx, cy = np.diff(x // bw) != 0, np.diff(y // bh) != 0
            both = int(np.count_nonzero(cx & cy))
            features += [float(np.count_nonzero(cx) - both),
                         float(np.count_nonzero(cy) - both), float(both)]
        else:
            features += [0.0, 0.0, 0.0]
    return np.array(features)


def thread_histograms(kernel: Kernel, config: Config, block_shapes) -> list[np.ndarray]:
    """One ``H`` per texture input for the representative thread."""
    reads = thread_reads(kernel, config.tile, *representative_thread(kernel, config.tile))
    return [_input_histogram(kernel, reads, index, pattern, block_shapes)
            for index, pattern in enumerate(config.patterns)]


def _input_histogram(kernel: Kernel, reads: Reads, index: int, pattern: str, block_shapes
                     ) -> np.ndarray:
    cols = (reads.source == index) & reads.valid[0]
    x, y = kernel.inputs[index].layout(pattern).coords(reads.lane[0][cols], reads.seq[0][cols])
    return histogram(x, y, block_shapes)


# --------------------------------------------------------------------------- the model

_REUSE = {pattern: reuse_distance(pattern) for pattern in PATTERNS}


def lanes_per_thread(kernel: Kernel, config: Config) -> tuple[int, ...]:
    """How many lanes of each texture input one thread reads (its tile's footprint)."""
    if kernel.op == "conv2d":
        tx, tk = config.tile
        return (tx * (tk if kernel.kind == "depthwise" else 1), tk)
    if kernel.op == "matmul":
        tn, tm = config.tile
        return (tm, tn)
    return (config.tile[0],)


def resident_warps(kernel: Kernel, config: Config, device: DeviceSpec
                   ) -> list[tuple[int, int, int]]:
    """The occupancy group of shader processor 0: the grid origin ``(x0, y0, z)`` of each of
    its resident warps (a warp covers ``wx x wy`` grid positions from there). Work groups go
    round-robin to the processors (0, SPs, 2 SPs, ... here), x fastest; a warp holds threads
    numbered consecutively, which the kernels map to a ``wx x wy`` block of the group."""
    gx, gy = config.group
    wx, wy = config.warp
    grid = kernel.grid(config.tile)
    groups_x, groups_y = -(-grid[0] // gx), -(-grid[1] // gy)
    resident = occupancy(kernel, config, device)
    per_group = warps_per_group(config, device)
    out = []
    for group in range(0, work_groups(kernel, config), device.shader_processors):
        bx, rest = group % groups_x, group // groups_x
        by, bz = rest % groups_y, rest // groups_y
        for warp in range(per_group):
            if len(out) == resident:
                return out
            out.append((bx * gx + (warp % (gx // wx)) * wx, by * gy + (warp // (gx // wx)) * wy,
                        bz))
    return out


def warp_lanes(kernel: Kernel, config: Config, device: DeviceSpec) -> tuple[int, ...]:
    """``w_i`` of eq. 3: the distinct lanes of each texture input read at one instruction by
    the warps that run concurrently on a shader processor, i.e. its occupancy group (threads
    sharing a lane share its cache lines; TMModel section 3.2.2: warps of an occupancy group
    execute together on one texture cache). This is where the warp shape and work group
    enter. A convolution's threads each read their own pixel and share one channel group of
    weights per grid z; a MatMul's threads share rows along x and column groups along y; a
    row reduction's threads each read their own row."""
    wx, wy = config.warp
    grid = kernel.grid(config.tile)
    xs, ys, zs, threads = set(), set(), set(), 0
    for x0, y0, z in resident_warps(kernel, config, device):
        cols = range(x0, min(x0 + wx, grid[0]))
        rows = range(y0, min(y0 + wy, grid[1]))
        xs.update(cols), ys.update(rows), zs.add(z)
        threads += len(cols) * len(rows)
    if kernel.op == "conv2d":
        return (max(1, threads), len(zs))
    if kernel.op == "matmul":
        return (max(1, len(ys)), max(1, len(xs)))
    return (max(1, threads),)


def register_footprint(kernel: Kernel, config: Config, device: DeviceSpec) -> int:
    """32-bit registers of one thread: the base, 4 per accumulator texel and 4 per operand
    texel held (TMModel eq. 4's ``Register Footprint(T)``)."""
    a, b = config.tile
    held = sum(lanes_per_thread(kernel, config))
    return device.base_registers + 4 * (a * b + held)


def occupancy(kernel: Kernel, config: Config, device: DeviceSpec) -> int:
    """Warps resident per shader processor (eq. 4), at least one, at most the device's."""
    per_warp = register_footprint(kernel, config, device) * device.warp_size
    return max(1, min(device.max_warps_per_sp, device.registers_per_sp // per_warp))


def work_groups(kernel: Kernel, config: Config) -> int:
    """Eq. 5: work groups of the launch."""
    grid = kernel.grid(config.tile)
    gx, gy = config.group
    return -(-grid[0] // gx) * -(-grid[1] // gy) * grid[2]


def warps_per_group(config: Config, device: DeviceSpec) -> int:
    return -(-config.group[0] * config.group[1] // device.warp_size)


def waves(kernel: Kernel, config: Config, device: DeviceSpec) -> int:
    """Eq. 6: ``L_g``, the occupancy groups executed one after the other."""
    warps = work_groups(kernel, config) * warps_per_group(config, device)
    return -(-warps // (device.shader_processors * occupancy(kernel, config, device)))


@dataclass(frozen=True)
class Prediction:
    """The model's figures for one configuration (``latency`` = ``L``, in the calibration's
    unit: cycles of the device it was fitted on)."""

    config: Config
    latency: float
    thread: float
    warp: float
    waves: int
    occupancy: int

    def to_dict(self) -> dict[str, Any]:
        return {"config": self.config.to_dict(), "latency": self.latency,
                "L_t": self.thread, "L_w": self.warp, "L_g": self.waves,
                "occupancy": self.occupancy}


class TMModel:
    """The model for one device and calibration; histograms are cached per (kernel, patterns,
    tile), so searching many work groups and warps costs little."""

    def __init__(self, device: DeviceSpec, calibration: Calibration):
        self.device, self.calibration = device, calibration
        self.beta = np.array(calibration.beta)
        self._reads: dict[tuple, Reads] = {}
        self._thread: dict[tuple, float] = {}
        self._best: dict[Kernel, Prediction] = {}

    def thread_latency(self, kernel: Kernel, tile: tuple[int, int], index: int, pattern: str
                       ) -> float:
        """``L_t(H_i)`` of texture input ``index`` read with ``pattern`` (cached: the reads
        of a tile are shared by every pattern)."""
        key = (kernel, tile, index, pattern)
        if key not in self._thread:
            if (kernel, tile) not in self._reads:
                self._reads[kernel, tile] = thread_reads(
                    kernel, tile, *representative_thread(kernel, tile))
            h = _input_histogram(kernel, self._reads[kernel, tile], index, pattern,
                                 self.calibration.block_shapes)
            self._thread[key] = float(self.beta @ h)
        return self._thread[key]

    def predict(self, kernel: Kernel, config: Config) -> Prediction:
        """The model's figures for one configuration (eqs. 1-7)."""
        return self._predictions(kernel, [config])[0]

    def _predictions(self, kernel: Kernel, configs: Sequence[Config]) -> list[Prediction]:
        device = self.device
        capacity = device.cache_lines
        groups_of: dict[tuple, tuple[int, int]] = {}
        out = []
        thread_of: dict[tuple, float] = {}
        lanes_of: dict[tuple, tuple[int, ...]] = {}
        exponent_of: dict[tuple, int] = {}
        for config in configs:
            tile = config.tile
            patterns = (tile, config.patterns)
            if patterns not in thread_of:
                thread_of[patterns] = sum(self.thread_latency(kernel, tile, index, pattern)
                                          for index, pattern in enumerate(config.patterns))
            thread = thread_of[patterns]
            shape = (tile, config.group, config.warp)
            if shape not in lanes_of:  # w_i times the lanes a thread cycles through
                lanes_of[shape] = tuple(w * lanes for w, lanes in zip(
                    warp_lanes(kernel, config, device), lanes_per_thread(kernel, config)))
            key = (patterns, shape)
            if key not in exponent_of:
                live = sum(_REUSE[p] * lanes for p, lanes in zip(config.patterns,
                                                                 lanes_of[shape]))
                exponent_of[key] = max(0, math.ceil((live - capacity) / capacity))
            exponent = exponent_of[key]
            warp = thread * self.calibration.D ** exponent
            key = (tile, config.group)
            if key not in groups_of:
                groups_of[key] = (waves(kernel, config, device),
                                  occupancy(kernel, config, device))
            count, resident = groups_of[key]
            out.append(Prediction(config, warp * count, thread, warp, count, resident))
        return out

    @staticmethod
    def _order(prediction: Prediction) -> tuple:
        """Rank: the predicted latency; ties (configurations the equations cannot tell apart,
        e.g. the same threads tiled by other warp shapes) go to the warp widest along x, the
        axis a cache line's texels run along (TMModel Fig. 3), then the widest work group."""
        config = prediction.config
        return (prediction.latency, -config.warp[0], -config.group[0], config.patterns,
                config.tile, config.group)

    def search(self, kernel: Kernel, configs: Sequence[Config] | None = None) -> list[Prediction]:
        """Every configuration's prediction, best first (``_order``)."""
        configs = configs if configs is not None else configurations(
            kernel, self.device.warp_size, self.device.max_image)
        return sorted(self._predictions(kernel, configs), key=self._order)

    def best(self, kernel: Kernel, configs: Sequence[Config] | None = None) -> Prediction:
        """The configuration of least predicted latency (ties: ``_order``); the whole space's
        answer is cached per kernel."""
        if configs is None and kernel in self._best:
            return self._best[kernel]
        found = self._predictions(kernel, configs if configs is not None else configurations(
            kernel, self.device.warp_size, self.device.max_image))
        if not found:
            raise ValueError(f"{kernel.name}: no configuration fits the device's image limits "
                             f"{self.device.max_image}")
        best = min(found, key=self._order)
        if configs is None:
            self._best[kernel] = best
        return best

    def seconds(self, prediction: Prediction) -> float:
        """Predicted run time: ``L`` cycles at the device clock plus the launch overhead."""
        return prediction.latency / self.device.clock_hz + \
            self.device.launch_overhead_us * 1e-6
