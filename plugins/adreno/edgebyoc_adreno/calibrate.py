"""Calibration: TMModel's micro-benchmarks (section 3), run on a device, and the least-squares
fit of ``beta`` and ``D``.

1. **2-D random-stride chase** (section 3.1, steps I-IV): each run draws a multinomial over the
   strides ``0..4`` for x and for y (a random Dirichlet, so every run has its own mix),
   walks ``steps`` texels of an image with them, and times one thread reading them as a
   dependent chain. Its histogram ``H`` (``tmmodel.histogram`` under the calibration's block
   shapes) and latency form one row; ``beta`` is the least-squares solution of ``H beta = L``
   and the report gives the k-fold cross-validated R^2.
2. **Warp scalability** (section 3.2.1): ``|W|`` threads each stream their own data with a
   pattern of reuse distance ``s``; ``log D`` is the least-squares slope of ``log(L_W / L_1)``
   over the thrashing exponent ``max(0, ceil((|W| s - C) / C))``.

Devices: ``SimulatedDevice`` (``simulator.py`` configured by a device file: the calibration the
cost model uses for that device's simulation) and ``OpenCLDevice`` (the first OpenCL device
through pyopencl: PoCL here, where the figures describe a CPU's software image reads and no
accuracy is claimed; a phone's GPU elsewhere).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from .tmmodel import BLOCK_SHAPES, Calibration, DeviceSpec, histogram
STRIDES = (0, 1, 2, 3, 4)
CHASE_IMAGE = (512, 512)  # (height, width) of the chase image, larger than any cache


@dataclass(frozen=True)
class StrideRun:
    """One micro-benchmark run: its texel coordinates and the multinomials that drew them."""

    x: np.ndarray
    y: np.ndarray
    px: tuple[float, ...]
    py: tuple[float, ...]


def stride_runs(runs: int, steps: int, seed: int = 0) -> list[StrideRun]:
    """Step I: ``runs`` random-stride walks of ``steps`` texels (wrapping in ``CHASE_IMAGE``)."""
    rng = np.random.default_rng(seed)
    height, width = CHASE_IMAGE
    out = []
    for _ in range(runs):
        px, py = rng.dirichlet(np.ones(len(STRIDES)) * 0.7, size=2)
        dx = rng.choice(STRIDES, size=steps, p=px)
        dy = rng.choice(STRIDES, size=steps, p=py)
        x = np.concatenate([[0], np.cumsum(dx[1:])]) % width
        y = np.concatenate([[0], np.cumsum(dy[1:])]) % height
        out.append(StrideRun(x, y, tuple(px), tuple(py)))
    return out


def streaming_keys(threads: int, reuse: int, steps: int) -> tuple[np.ndarray, np.ndarray]:
    """Step of section 3.2.1: texel (x, y) ``[threads, steps]`` of threads each walking its own
    ``reuse``-tall strip (reuse distance ``reuse``; 1 is row-major), strips far apart."""
    seq = np.arange(steps)[None, :]
    lane = np.arange(threads)[:, None]
    x = seq // reuse
    y = lane * reuse * 4 + seq % reuse  # 4x apart: no two threads share a line
    return x + 0 * lane, y


class SimulatedDevice:
    """The micro-benchmarks timed by the texture-cache simulator of ``spec``."""

    def __init__(self, spec: DeviceSpec):
        self.spec = spec
        self.name = f"simulation of {spec.name}"

    def chase(self, run: StrideRun) -> float:
        from .simulator import line_keys, run_warps

        keys = line_keys(np.zeros(1, np.int64), run.x[:, None], run.y[:, None],
                         np.ones((len(run.x), 1), bool), self.spec)
        return run_warps(keys[None], self.spec)[0]

    def stream(self, threads: int, reuse: int, steps: int) -> float:
        from .simulator import line_keys, run_warps

        x, y = streaming_keys(threads, reuse, steps)
        keys = line_keys(np.zeros(1, np.int64), x, y, np.ones_like(x, bool), self.spec)
        return run_warps(keys.T[None], self.spec)[0]


_CHASE_KERNEL = r"""
__constant sampler_t SAMPLER = CLK_NORMALIZED_COORDS_FALSE | CLK_ADDRESS_CLAMP | CLK_FILTER_NEAREST;
__kernel void chase(__read_only image2d_t image, __global const int2* coords, int steps,
                    __global float* out) {
    const int lane = get_global_id(0);
    float4 value = (float4)(0);
    for (int i = 0; i < steps; ++i) {
        /* value.x is always 0: the add makes each read depend on the previous one */
        const int2 at = coords[lane * steps + i] + (int2)((int)value.x, 0);
        value = read_imagef(image, SAMPLER, at);
    }
    out[lane] = value.y;
}
"""


class OpenCLDevice:
    """The micro-benchmarks as OpenCL kernels on the first device (median of ``repeats``
    timed launches after a discarded first one: PoCL compiles per work-group size then)."""

    def __init__(self, repeats: int = 3):
        from .runtime import device

        self.dev = device()
        self.name = self.dev.name
        self.repeats = repeats
        self.kernel = self.dev.cl.Kernel(self.dev.build(_CHASE_KERNEL), "chase")
        self.image = self.dev.image(np.zeros((*CHASE_IMAGE, 4), np.float32))

    def _time(self, coords: np.ndarray, threads: int, steps: int) -> float:
        cl = self.dev.cl
        flat = np.ascontiguousarray(coords.reshape(-1, 2), np.int32)
        buffer = self.dev.buffer(flat.view(np.float32))
        out = cl.Buffer(self.dev.context, cl.mem_flags.WRITE_ONLY, 4 * threads)
        times = []
        for _ in range(self.repeats + 1):
            self.kernel.set_args(self.image, buffer, np.int32(steps), out)
            event = cl.enqueue_nd_range_kernel(self.dev.queue, self.kernel, (threads,),
                                               (threads,))
            event.wait()
            times.append((event.profile.end - event.profile.start) * 1e-9)
        return float(np.median(times[1:])) * self.dev.device.max_clock_frequency * 1e6

    def chase(self, run: StrideRun) -> float:
        coords = np.stack([run.x, run.y], axis=-1)[None]
        return self._time(coords, 1, len(run.x))

    def stream(self, threads: int, reuse: int, steps: int) -> float:
        x, y = streaming_keys(threads, reuse, steps)
        height, width = CHASE_IMAGE
        return self._time(np.stack([x % width, y % height], axis=-1), threads, steps)


def fit_beta(features: np.ndarray, latencies: np.ndarray, folds: int = 5
             ) -> tuple[np.ndarray, float, float]:
    """Least-squares ``beta`` of ``features @ beta = latencies``, its R^2 on the data and the
    ``folds``-fold cross-validated R^2 (predictions of each fold from the others' fit)."""
    beta, *_ = np.linalg.lstsq(features, latencies, rcond=None)
    total = float(np.sum((latencies - latencies.mean()) ** 2)) or 1.0
    r2 = 1.0 - float(np.sum((features @ beta - latencies) ** 2)) / total
    predicted = np.empty_like(latencies)
    order = np.arange(len(latencies))
    for fold in range(folds):
        test = order % folds == fold
        part, *_ = np.linalg.lstsq(features[~test], latencies[~test], rcond=None)
        predicted[test] = features[test] @ part
    r2_cv = 1.0 - float(np.sum((predicted - latencies) ** 2)) / total
    return beta, r2, r2_cv


ONSET = 4  # the largest thrashing exponent D is fitted on


def fit_thrashing(points: Sequence[tuple[int, float]]) -> float:
    """``D`` from (thrashing exponent, latency ratio) points: ``log ratio = e log D``, least
    squares through the origin over the points with ``0 < e <= ONSET``, at least 1. Past the
    onset of thrashing every read misses and the slowdown saturates, which no single D
    describes; fitting the onset keeps D about the configurations a search compares."""
    onset = [p for p in points if 0 < p[0] <= ONSET] or [p for p in points if p[0] > 0]
    e = np.array([p[0] for p in onset], float)
    ratio = np.array([p[1] for p in onset], float)
    if not len(e):
        return 1.0
    log_d = float(np.sum(e * np.log(np.maximum(ratio, 1e-12))) / np.sum(e * e))
    return max(1.0, math.exp(log_d))


def calibrate(device, spec: DeviceSpec, runs: int = 60, steps: int = 2048, seed: int = 0,
              block_shapes=BLOCK_SHAPES, progress=None) -> Calibration:
    """Run both micro-benchmarks on ``device`` and fit ``beta`` and ``D``; ``spec`` gives the
    cache size ``C`` and warp size the thrashing fit needs. ``progress(done, total)`` is
    called after each measurement."""
    chases = stride_runs(runs, steps, seed)
    warp_sizes = [w for w in (1, 2, 4, 8, 16, 32, 64, 128) if w <= spec.warp_size]
    reuses = (1, 2, 4, 8)
    total = runs + len(reuses) * len(warp_sizes)
    done = 0
    features, latencies = [], []
    for run in chases:
        features.append(histogram(run.x, run.y, block_shapes))
        latencies.append(device.chase(run))
        done += 1
        if progress:
            progress(done, total)
    features, latencies = np.array(features), np.array(latencies)
    beta, r2, r2_cv = fit_beta(features, latencies)
    capacity = spec.cache_lines
    points = []
    stream_steps = 256
    for reuse in reuses:
        single = device.stream(1, reuse, stream_steps)
        for threads in warp_sizes:
            exponent = max(0, math.ceil((threads * reuse - capacity) / capacity))
            points.append((exponent, device.stream(threads, reuse, stream_steps) / single))
            done += 1
            if progress:
                progress(done, total)
    fit: dict[str, Any] = {"runs": runs, "steps": steps, "seed": seed, "r2": round(r2, 4),
                           "r2_cv": round(r2_cv, 4), "thrashing_points": len(points),
                           "measured_on": device.name}
    return Calibration(tuple(tuple(b) for b in block_shapes), tuple(float(b) for b in beta),
                       fit_thrashing(points), spec.name, fit)
