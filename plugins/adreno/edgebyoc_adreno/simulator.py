"""A texture-cache simulator: the stand-in device on which TMModel's picks are checked.

**This is a simulation, not a measurement of any GPU.** It models one shader processor's L1
texture cache as the device file describes it:

* texels are grouped in 2-D blocks of ``cache_line_texels`` (one cache line each), a line key
  being (texture, block x, block y);
* the cache is fully associative with ``C = texture_cache_bytes / line bytes`` lines and LRU
  replacement;
* the warps resident on the shader processor (one occupancy group: ``tmmodel.occupancy``) issue
  their read instructions in lock-step, round-robin one instruction per warp; the 32/64 threads
  of a warp instruction touch a set of distinct lines, each looked up once: the instruction
  costs ``hit_cycles`` when all hit, else ``hit_cycles + miss_cycles * ceil(misses /
  parallel_fills)``;
* warps of an occupancy group run concurrently (its time is its slowest warp's), occupancy
  groups one after the other, shader processors in parallel (TMModel section 3.2.2), so the
  kernel takes ``waves x`` the time of the first occupancy group of shader processor 0, whose
  work groups are those the round-robin dispatch gives it.

The inner loop is C (compiled once per machine with the system's C compiler into the user's
cache directory, loaded with ctypes).
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import subprocess
import tempfile
from functools import lru_cache
from pathlib import Path

import numpy as np

from .kernels import Config, Kernel
from .tmmodel import DeviceSpec, loop_iterations, resident_warps, thread_trace, waves

_SOURCE = r"""
#include <stdint.h>
#include <stdlib.h>
/* keys [warps][steps][width] (-1: no read); returns the slowest warp's cycles */
double edgebyoc_texsim(const int64_t* keys, int warps, int steps, int width, int lines,
                       double hit, double miss, int fills, double* warp_cycles,
                       int64_t* hits_out, int64_t* misses_out) {
    int64_t* tags = malloc(sizeof(int64_t) * lines);
    int64_t* used = malloc(sizeof(int64_t) * lines);
    int64_t table[256];  /* the distinct lines of one warp instruction (open addressing) */
    int64_t clock = 0, hits = 0, misses_total = 0;
    for (int i = 0; i < lines; ++i) { tags[i] = -1; used[i] = -1; }
    for (int w = 0; w < warps; ++w) warp_cycles[w] = 0;
    for (int s = 0; s < steps; ++s) {
        for (int w = 0; w < warps; ++w) {
            const int64_t* step = keys + ((int64_t)w * steps + s) * width;
            int distinct = 0, misses = 0;
            for (int i = 0; i < 256; ++i) table[i] = -1;
            for (int t = 0; t < width; ++t) {
                int64_t key = step[t];
                if (key < 0) continue;
                uint64_t h = ((uint64_t)key * 0x9E3779B97F4A7C15ull) >> 56;
                while (table[h] >= 0 && table[h] != key) h = (h + 1) & 255;
                if (table[h] == key) continue;
                table[h] = key;
                ++distinct;
                int found = -1, victim = 0;
                for (int i = 0; i < lines; ++i) {
                    if (tags[i] == key) { found = i; break; }
                    if (used[i] < used[victim]) victim = i;
                }
                ++clock;
                if (found >= 0) { used[found] = clock; ++hits; }
                else { tags[victim] = key; used[victim] = clock; ++misses; }
            }
            if (distinct == 0) continue;
            misses_total += misses;
            warp_cycles[w] += hit + (misses ? miss * ((misses + fills - 1) / fills) : 0.0);
        }
    }
    double slowest = 0;
    for (int w = 0; w < warps; ++w) if (warp_cycles[w] > slowest) slowest = warp_cycles[w];
    free(tags); free(used);
    *hits_out = hits; *misses_out = misses_total;
    return slowest;
}
"""


@lru_cache(maxsize=None)
def _library():
    digest = hashlib.sha256(_SOURCE.encode()).hexdigest()[:16]
    cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "edgebyoc"
    cache.mkdir(parents=True, exist_ok=True)
    library = cache / f"adreno_texsim_{digest}.so"
    if not library.exists():
        with tempfile.TemporaryDirectory() as tmp:
            source = Path(tmp) / "texsim.c"
            source.write_text(_SOURCE)
            built = Path(tmp) / "texsim.so"
            compiler = os.environ.get("CC", "cc")
            try:
                subprocess.run([compiler, "-O2", "-shared", "-fPIC", "-o", str(built),
                                str(source)], check=True, capture_output=True, text=True)
            except (OSError, subprocess.CalledProcessError) as err:
                raise RuntimeError(f"adreno simulator: cannot compile its C core with "
                                   f"{compiler!r}: {getattr(err, 'stderr', '') or err}") from err
            os.replace(built, library)  # atomic: concurrent builders agree
    lib = ctypes.CDLL(str(library))
    lib.edgebyoc_texsim.restype = ctypes.c_double
    lib.edgebyoc_texsim.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_int, ctypes.c_int,
                                    ctypes.c_int, ctypes.c_double, ctypes.c_double,
                                    ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p,
                                    ctypes.c_void_p]
    return lib


def run_warps(keys: np.ndarray, device: DeviceSpec) -> tuple[float, int, int]:
    """Simulate warps issuing ``keys`` ``[warps, steps, threads]`` (-1: no read) into one
    shader processor's cache; returns (slowest warp's cycles, hits, misses)."""
    keys = np.ascontiguousarray(keys, np.int64)
    warps, steps, width = keys.shape
    cycles = np.zeros(max(warps, 1), np.float64)
    hits, misses = ctypes.c_int64(), ctypes.c_int64()
    sim = device.simulator
    slowest = _library().edgebyoc_texsim(
        keys.ctypes.data, warps, steps, width, device.cache_lines,
        float(sim.get("hit_cycles", 1)), float(sim.get("miss_cycles", 7)),
        int(sim.get("parallel_fills", 4)), cycles.ctypes.data, ctypes.byref(hits),
        ctypes.byref(misses))
    return slowest, hits.value, misses.value


def line_keys(source: np.ndarray, x: np.ndarray, y: np.ndarray, valid: np.ndarray,
              device: DeviceSpec) -> np.ndarray:
    """Cache-line keys of texel reads (-1 where ``valid`` is false)."""
    lw, lh = device.cache_line_texels
    keys = (source.astype(np.int64) << 44) | ((y // lh).astype(np.int64) << 22) | (x // lw)
    return np.where(valid, keys, -1)


def first_wave_threads(kernel: Kernel, config: Config, device: DeviceSpec) -> np.ndarray:
    """Grid positions ``[warps, warp size, 3]`` of the threads of the first occupancy group on
    shader processor 0 (``tmmodel.resident_warps``)."""
    wx, wy = config.warp
    lane = np.arange(wx * wy)
    return np.stack([np.stack([x0 + lane % wx, y0 + lane // wx, np.full(wx * wy, z)], axis=-1)
                     for x0, y0, z in resident_warps(kernel, config, device)])


def simulate(kernel: Kernel, config: Config, device: DeviceSpec,
             max_steps: int | None = 4096) -> float:
    """Simulated cycles of ``kernel`` in ``config``: the first occupancy group of shader
    processor 0 times the waves (a kernel longer than ``max_steps`` read instructions is
    simulated for the whole main-loop iterations that fit and scaled to all of them)."""
    threads = first_wave_threads(kernel, config, device)
    warps, size, _ = threads.shape
    flat = threads.reshape(-1, 3)
    full = loop_iterations(kernel)
    iterations = full
    if max_steps is not None:  # whole iterations: the reads per iteration are the same
        per_iteration = len(thread_trace(kernel, config, flat[:1, 0], flat[:1, 1],
                                         flat[:1, 2], 1).source)
        iterations = min(full, max(1, max_steps // per_iteration))
    trace = thread_trace(kernel, config, flat[:, 0], flat[:, 1], flat[:, 2], iterations)
    steps = trace.x.shape[1]
    keys = line_keys(trace.source[None, :], trace.x, trace.y, trace.valid, device)
    keys = keys.reshape(warps, size, steps).transpose(0, 2, 1)
    cycles, _, _ = run_warps(keys, device)
    return cycles * full / iterations * waves(kernel, config, device)
