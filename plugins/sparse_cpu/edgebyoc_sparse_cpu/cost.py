"""The cost model deciding, per convolution, between the sparse kernel and the dense host path.

The sparse kernel (``templates/spardr_conv.c.mako``) walks the output plane (computed over the
phase width) in register chunks of ``chunk_size`` positions; for every chunk and output channel
each non-zero streams its input run through the chunk's accumulators, 16 floats a vector. Its
time is a launch, a cost per vector and per chunk of every non-zero's run (``run_shape``), and
the input's reconstruction unless it reads the input in place. The dense host path (edgebyoc's
CPU schedules) runs at one rate of multiply-adds, another on the 3x3 layers it computes as
Winograd F(2x2, 3x3). The constants were fitted by ``benchmarks/sparse_cost_fit.py`` (Table
II's 13 layers and ResNet-50's convolutions at 85 % sparsity, each timed as a user runs it),
one set per vector ISA (``CONSTANTS``): on a 2-core AMD EPYC Zen 5 (AVX-512) the model picks
the faster path on 24 of 25 layers (ResNet-50's last-stage convolutions over 7x7 maps: dense,
a non-zero's run there is too short to pay for itself); on a Zen 3 (AVX2) on 20 of 25, and
there it keeps nearly every layer dense. A CPU of the same ISA shifts both paths' rates
alike, which keeps the choice, not the absolute times.

Refitted on 2026-11-28 with the calling thread pinned (the script's one-thread-per-CPU
protocol), the constants came out as launch 8.69e-05 s, 1.75e-10 s a vector, 9.11e-10 s a
chunk, 2.8e-10 s a reconstructed float and 1.85e11 dense multiply-adds/s: right on 23 of 25
layers, but they offload 94.6 % of ResNet-50's multiply-adds (the last stage too) and the model
then ran 18.3-22.4 ms against 16.7-17.5 ms with the constants below, so these were kept.
"""

from __future__ import annotations

from pathlib import Path

from .csr import Geometry

def _has_avx512() -> bool:
    """Whether the CPU has AVX-512 (``/proc/cpuinfo``; unreadable: no, the smaller register
    chunk every x86-64 with AVX2 holds)."""
    try:
        return " avx512f" in Path("/proc/cpuinfo").read_text()
    except OSError:
        return False


#: the fitted constants per vector ISA (``benchmarks/sparse_cost_fit.py``): launch seconds,
#: seconds per 16-float vector and per register chunk of a non-zero's run, per reconstructed
#: float, the dense host path's multiply-adds per second (a convolution compiled alone, its
#: NCHW <-> NHWC transposes included: what a layer between two sparse regions pays) and its
#: rate on the 3x3 convolutions the host computes as Winograd F(2x2, 3x3) (``winograd``).
#: AVX-512: a Zen 5 EPYC (2026-11-24, see above; one dense rate for every layer then, so
#: the Winograd rate repeats it). AVX2: a Zen 3 EPYC (2026-12-06; right on 20 of 25 layers),
#: where the AVX-512 constants offloaded 80 % of a ResNet-50's multiply-adds at 85 % to the
#: sparse kernel, slower there than the dense build (2.2x onnxruntime's time end to end): on
#: AVX2 the kernel streams half the floats per instruction, and the Winograd layers run at
#: 1.7x the other layers' dense rate.
CONSTANTS = {
    "avx512": {"launch": 5.77e-05, "per_vector": 3.6e-10, "per_chunk": 1.92e-09,
               "reconstruct": 3.21e-10, "dense": 1.13e11, "dense_winograd": 1.13e11},
    "avx2": {"launch": 2.52e-04, "per_vector": 2.7e-09, "per_chunk": 3.18e-10,
             "reconstruct": 1.38e-09, "dense": 4.07e10, "dense_winograd": 6.74e10},
}
ISA = "avx512" if _has_avx512() else "avx2"
LAUNCH_SECONDS = CONSTANTS[ISA]["launch"]
SECONDS_PER_VECTOR = CONSTANTS[ISA]["per_vector"]
SECONDS_PER_CHUNK = CONSTANTS[ISA]["per_chunk"]
RECONSTRUCT_SECONDS = CONSTANTS[ISA]["reconstruct"]
DENSE_MACS_PER_SECOND = CONSTANTS[ISA]["dense"]
DENSE_WINOGRAD_MACS_PER_SECOND = CONSTANTS[ISA]["dense_winograd"]


def _register_chunk() -> int:
    """Output positions accumulated in registers at a time: 16 of AVX-512's 32 vector
    registers, 14 of AVX2's 16 (the 15th holds the non-zero's broadcast weight)."""
    return 256 if ISA == "avx512" else 112


#: measured on Table II (benchmarks/sparse_conv.py): 64 -> 1.56x, 128 -> 1.66x, 256 -> 1.72x
#: geometric-mean speed-up over PyTorch with AVX-512; 256 uses 16 of its 32 vector registers.
#: On AVX2 (a Zen 2 EPYC, 2 threads, ms) 128 positions needed all 16 registers for the sums:
#: CV1 1.52 / 1.35 / 1.76 / 1.73, CV11 8.41 / 7.94 / 8.51 / 9.13, CV12 5.91 / 5.32 / 5.67 /
#: 5.75 with chunks of 128 / 112 / 96 / 64.
CHUNK = _register_chunk()


def chunk_size(g: Geometry) -> int:
    """The positions one register chunk holds: ``CHUNK``, or the whole plane rounded up to
    whole vectors when that is smaller."""
    plane = g.out_h * g.phase_cols
    return min(CHUNK, -(-plane // 16) * 16)


def run_shape(g: Geometry) -> tuple[int, int]:
    """(16-float vectors, register chunks) of one non-zero's run over the output plane."""
    plane = g.out_h * g.phase_cols
    chunk = chunk_size(g)
    return -(-plane // 16), -(-plane // chunk)


def winograd(g: Geometry, groups: int = 1) -> bool:
    """Whether the host build computes the layer as Winograd F(2x2, 3x3) (its rule, see the
    user guide: 3x3, stride, dilation and padding 1, one group, at least 64 channels in and
    out, an output of at least 14 x 14)."""
    return (g.kernel_h, g.kernel_w, g.stride_h, g.stride_w, g.pad_top, g.pad_left, groups) == \
        (3, 3, 1, 1, 1, 1, 1) and (g.dilation_h, g.dilation_w) == (1, 1) and \
        min(g.channels, g.out_channels) >= 64 and g.out_h * g.out_w >= 14 * 14


def dense_host_seconds(g: Geometry, groups: int = 1) -> float:
    macs = g.out_channels * g.out_h * g.out_w * g.channels // groups * g.kernel_h * g.kernel_w
    rate = DENSE_WINOGRAD_MACS_PER_SECOND if winograd(g, groups) else DENSE_MACS_PER_SECOND
    return LAUNCH_SECONDS + macs / rate


def reads_in_place(g: Geometry) -> bool:
    """Whether the kernel reads the input as it is (a 1x1, stride-1, unpadded convolution's
    input is its own reconstruction: nothing is copied)."""
    return (g.kernel_h, g.kernel_w, g.stride_h, g.stride_w, g.pad_top, g.pad_left) == \
        (1, 1, 1, 1, 0, 0) and (g.out_h, g.out_w) == (g.height, g.width)


def sparse_seconds(g: Geometry, nnz: int) -> float:
    """The sparse kernel's time: one parallel launch streaming every non-zero's run over the
    output plane, after the input's reconstruction unless it reads it in place."""
    vectors, chunks = run_shape(g)
    stream = nnz * (vectors * SECONDS_PER_VECTOR + chunks * SECONDS_PER_CHUNK)
    reconstruct = 0.0 if reads_in_place(g) else \
        g.channels * g.stride_h * g.stride_w * g.phase_size * RECONSTRUCT_SECONDS
    return LAUNCH_SECONDS + stream + reconstruct
