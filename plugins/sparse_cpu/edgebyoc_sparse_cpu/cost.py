"""The cost model deciding, per convolution, between the sparse kernel and the dense host path.

The sparse kernel (``templates/spardr_conv.c.mako``) walks the output plane (computed over the
phase width) in register chunks of ``chunk_size`` positions; for every chunk and output channel
each non-zero streams its input run through the chunk's accumulators, 16 floats a vector. Its
time is a launch, a cost per vector and per chunk of every non-zero's run (``run_shape``), and
the input's reconstruction unless it reads the input in place. The dense host path (edgebyoc's
CPU schedules) runs at one rate of multiply-adds, another on the 3x3 layers it computes as
Winograd F(2x2, 3x3). The constants were fitted by ``benchmarks/sparse_cost_fit.py`` (Table
II's 13 layers and ResNet-50's convolutions at 85 % sparsity, each timed as a user runs it),
one set per vector ISA (``CONSTANTS``). A CPU of the same ISA shifts both paths' rates
alike, which keeps the choice, not the absolute times.

AVX-512: refitted on 2026-12-07 on a 2-core Intel Xeon (LLVM ``rocketlake``) after the kernel
broadcast each weight with one instruction (it had built the vector lane by lane through the
stack, a stall per non-zero), dealt the plane to chunks evenly, read long rows' runs from
64-byte boundaries (``aligned_runs``, their own constant per vector) and reconstructed only
the stride phases the kernel reads: the model picks the faster path on all 25 layers, and the
kernel wins on every one of them, ResNet-50's 7x7 layers too (the constants before, from a
Zen 5 and the old kernel, kept those dense). AVX2: fitted on a Zen 3 before these changes, so
they underrate the kernel there; refit on an AVX2 machine.
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
#: seconds per 16-float vector of a non-zero's run, the same for runs read from 64-byte
#: boundaries (``aligned_runs``: AVX-512 only, AVX2's repeats ``per_vector``), seconds per
#: register chunk of a run, per reconstructed
#: float, the dense host path's multiply-adds per second (a convolution compiled alone, its
#: NCHW <-> NHWC transposes included: what a layer between two sparse regions pays) and its
#: rate on the 3x3 convolutions the host computes as Winograd F(2x2, 3x3) (``winograd``).
#: AVX-512: an Intel Xeon (2026-12-07, see above; right on 25 of 25 layers). AVX2: a Zen 3
#: EPYC (2026-12-06, the kernel before the one-instruction broadcast; right on 20 of 25
#: layers), where the AVX-512 constants of then offloaded 80 % of a ResNet-50's
#: multiply-adds at 85 % to the sparse kernel, slower there than the dense build (2.2x
#: onnxruntime's time end to end): on AVX2 the kernel streams half the floats per
#: instruction, and the Winograd layers run at 1.7x the other layers' dense rate.
CONSTANTS = {
    "avx512": {"launch": 1.6e-04, "per_vector": 4.63e-10, "per_aligned_vector": 2.52e-10,
               "per_chunk": 0.0, "reconstruct": 8.91e-10, "dense": 8.54e10,
               "dense_winograd": 1.22e11},
    "avx2": {"launch": 2.52e-04, "per_vector": 2.7e-09, "per_aligned_vector": 2.7e-09,
             "per_chunk": 3.18e-10,
             "reconstruct": 1.38e-09, "dense": 4.07e10, "dense_winograd": 6.74e10},
}
ISA = "avx512" if _has_avx512() else "avx2"
LAUNCH_SECONDS = CONSTANTS[ISA]["launch"]
SECONDS_PER_VECTOR = CONSTANTS[ISA]["per_vector"]
SECONDS_PER_ALIGNED_VECTOR = CONSTANTS[ISA]["per_aligned_vector"]
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


def plane_vectors(g: Geometry) -> int:
    """16-float vectors of one non-zero's run: the output plane over the phase width."""
    return -(-g.out_h * g.phase_cols // 16)


def chunk_size(g: Geometry, aligned: bool = False) -> int:
    """The positions one register chunk holds: the plane's 16-float vectors dealt evenly to
    as few chunks of at most ``CHUNK`` as hold them (CV12's 20x20 plane over the phase width,
    440 positions: two chunks of 224, not two of 256 that compute 72 positions for nothing);
    of at most ``ALIGNED_MAX_VECTORS`` vectors for ``aligned`` runs (``aligned_runs``).

    Example::

        >>> g = Geometry(288, 20, 20, 288, 3, 3, 20, 20, 1, 1, 1, 1, 1, 1)
        >>> g.out_h * g.phase_cols, chunk_size(g) == (224 if CHUNK == 256 else 112)
        (440, True)
    """
    most = ALIGNED_MAX_VECTORS * 16 if aligned else CHUNK
    vectors = plane_vectors(g)
    chunks = -(-vectors * 16 // most)
    return -(-vectors // chunks) * 16


#: The fewest whole register chunks a plane must have for the kernel's tasks to share it
#: instead of the output channels (``spatial_chunk_size``): an input read in place, a
#: reconstructed one (each task then reconstructs its own rows too, and reads a few rows of
#: its neighbour's: ResNet-50's 3x3 layers at 28x28, 4 chunks, ran 1.03-1.04x slower so).
SPATIAL_MIN_CHUNKS = 4
SPATIAL_MIN_RECONSTRUCTED_CHUNKS = 8


def spatial_chunk_size(g: Geometry, aligned: bool = False) -> int | None:
    """The register chunk of a kernel whose tasks share the output plane, each computing every
    output channel over its own chunks; ``None`` where they share the output channels, each
    reading the whole input. The plane is shared by a convolution that does not widen its
    input (no more output than input channels: ResNet's 1x1 reductions and 3x3 layers) with
    at least ``SPATIAL_MIN_CHUNKS`` whole chunks read in place, or an even number of at least
    ``SPATIAL_MIN_RECONSTRUCTED_CHUNKS`` of ``chunk_size`` (``aligned`` or not) over its
    reconstruction, whose rows the tasks then share the same way. Read in place, the plane's
    whole vectors are dealt to an even number of equal chunks; the vectors left over (a 28x28
    plane's last one) are the kernel's tail, shared by output channel.

    Why: each task then reads only its part of the input and writes only its part of the
    output, where shared channels make every task read the whole input, half of it written by
    the other core. Measured in ResNet-50 at 85 % (2 threads, 40 interleaved rounds, the
    Relax VM timing each kernel): its 256 -> 64 reductions at 56x56 0.38 -> 0.25 ms, 512 ->
    128 at 28x28 0.29 -> 0.27 ms, 64 -> 64 0.12 -> 0.10 ms, its 3x3 layers at 56x56 0.93x;
    its 1x1 expansions (64 -> 256, 128 -> 512 and the shortcut added) ran 1.0-1.2x slower
    so, and keep shared channels.

    Example (AVX-512's ``CHUNK`` of 256)::

        >>> g = Geometry(256, 56, 56, 64, 1, 1, 56, 56, 1, 1, 0, 0, 1, 1)
        >>> spatial_chunk_size(g) == (224 if CHUNK == 256 else 112)  # 14 chunks of 4 rows
        True
    """
    if g.out_channels > g.channels:
        return None
    if not g.in_place:
        chunk = chunk_size(g, aligned)
        chunks = -(-g.out_h * g.phase_cols // chunk)
        shared = chunks >= SPATIAL_MIN_RECONSTRUCTED_CHUNKS and chunks % 2 == 0
        return chunk if shared else None
    vectors = g.out_h * g.out_w // 16  # whole vectors: a run read in place may not pass the end
    chunks = -(-vectors * 16 // CHUNK)
    chunks += chunks % 2
    if chunks < SPATIAL_MIN_CHUNKS:
        return None
    return vectors // chunks * 16


#: The least non-zeros a row (an output channel) has on average for ``aligned_runs``: the
#: kernel folds each of a row's up to 16 groups into the chunk's sums (a lane shift per
#: vector), which a few non-zeros per group do not pay for. Measured in a C model of the loop
#: (AVX-512 Intel Xeon, one core, 15 vectors a run, runs spread over 780 kB): 1.13x faster
#: with 16 non-zeros a row, 1.36x with 32, 1.51x with 190; over 23 kB (in L1) 0.80x with 16,
#: 0.98x with 32, 1.12x with 64. In the kernel (2 threads, 100 interleaved rounds): CV5 (61 a
#: row, 13 vectors, 1x1 stride 2) 0.93x, CV13 (60, 16 vectors, 3x3) 1.10x; CV1 (277) 1.12x,
#: CV11 (190) 1.39x.
ALIGNED_MIN_NONZEROS = 64

#: The least non-zeros a row has on average for ``aligned_runs`` when its runs are short (at
#: most ``PAIRED_MAX_VECTORS`` vectors, a 7x7 map's, which otherwise take two sets of sums):
#: an aligned run reads a vector more, a quarter more of 4. Measured (2 threads, 80
#: interleaved rounds): ResNet-50's last 3x3 convolutions (512 channels, 691 non-zeros a row)
#: 1.20x faster aligned, its 1x1 stride-2 shortcut onto 7x7 (154 a row) 0.94x.
ALIGNED_SHORT_MIN_NONZEROS = 256

#: The most vectors of an aligned run's chunk: its sums and one group's (a vector more) in
#: the 32 registers beside the weight (16 vectors spilled: 1.50 G useful multiply-adds a
#: second against 2.05 with 15 in the C model above).
ALIGNED_MAX_VECTORS = 15


def aligned_runs(g: Geometry, nnz: int) -> bool:
    """Whether the kernel reads every non-zero's run from 64-byte boundaries: with AVX-512,
    for a convolution whose input it reconstructs (the reconstruction's base is aligned; an
    input read in place may not be), with at least ``ALIGNED_MIN_NONZEROS`` non-zeros a row,
    and ``ALIGNED_SHORT_MIN_NONZEROS`` for runs of at most ``PAIRED_MAX_VECTORS``.
    Each row's non-zeros are grouped by their run's offset modulo 16 (``csr.to_csr``'s
    ``aligned``); a group reads one vector more per run, from the boundary below, and its
    sums are shifted into the chunk's once per group. A run that starts anywhere crosses a
    cache line with every 64-byte load: in the C model, runs spread over 234 kB (CV11's
    chunk window is about 260 kB) gave 1.31 G useful vector multiply-adds a second
    unaligned and 2.05 grouped so."""
    vectors = plane_vectors(g)
    per_row = nnz / max(g.out_channels, 1)
    return ISA == "avx512" and not g.in_place and per_row >= ALIGNED_MIN_NONZEROS and \
        (vectors > PAIRED_MAX_VECTORS or per_row >= ALIGNED_SHORT_MIN_NONZEROS)


#: The most 16-float vectors a run may have for the kernel to add every other non-zero into
#: a second set of sums (``templates/spardr_conv.c.mako``): two FMA units of 4 cycles'
#: latency keep 8 chains of multiply-adds in flight, which a run of fewer vectors alone does
#: not give; both sets and the two broadcast weights must fit the registers. AVX-512: 7 (one
#: register a vector, 32 of them); AVX2: 3 (two registers a vector, 16 of them).
PAIRED_MAX_VECTORS = 7 if ISA == "avx512" else 3


def run_shape(g: Geometry, aligned: bool = False) -> tuple[int, int]:
    """(16-float vectors, register chunks) of one non-zero's run over the output plane, in
    chunks for ``aligned`` runs or not (``aligned_runs``), or those of a shared plane
    (``spatial_chunk_size``)."""
    chunk = spatial_chunk_size(g, aligned) or chunk_size(g, aligned)
    return plane_vectors(g), -(-g.out_h * g.phase_cols // chunk)


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


def sparse_seconds(g: Geometry, nnz: int) -> float:
    """The sparse kernel's time: one parallel launch streaming every non-zero's run over the
    output plane, after the input's reconstruction unless it reads it in place."""
    aligned = aligned_runs(g, nnz)
    vectors, chunks = run_shape(g, aligned)
    per_vector = SECONDS_PER_ALIGNED_VECTOR if aligned else SECONDS_PER_VECTOR
    stream = nnz * (vectors * per_vector + chunks * SECONDS_PER_CHUNK)
    reconstruct = 0.0 if g.in_place else \
        g.channels * g.phases * g.phase_size * RECONSTRUCT_SECONDS
    return LAUNCH_SECONDS + stream + reconstruct
