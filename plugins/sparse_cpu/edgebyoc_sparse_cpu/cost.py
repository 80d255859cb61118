"""The cost model deciding, per convolution, between the sparse kernel and the dense host path.

Rates measured on this project's 2-core x86 machine (benchmarks/sparse_conv.py prints the
times they come from, before the host schedules' channel tiles of whole vectors): the dense host
path sustains
DENSE_MACS_PER_SECOND (ResNet-like channel counts vs Table II's odd ones); the sparse kernel
streams SPARSE_MACS_PER_SECOND multiply-adds (one per non-zero and output position, computed over
the phase width) after reconstructing the input at RECONSTRUCT_PER_SECOND.
"""

from __future__ import annotations

from .csr import Geometry

#: the dense host path vectorises 32 output channels at a time: much faster when they divide
DENSE_MACS_PER_SECOND = {True: 60e9, False: 8e9}
SPARSE_MACS_PER_SECOND = 20e9
RECONSTRUCT_PER_SECOND = 1.5e9
LAUNCH_SECONDS = 10e-6


def dense_host_seconds(g: Geometry, groups: int = 1) -> float:
    macs = g.out_channels * g.out_h * g.out_w * g.channels // groups * g.kernel_h * g.kernel_w
    return macs / DENSE_MACS_PER_SECOND[g.out_channels % 32 == 0]


def reads_in_place(g: Geometry) -> bool:
    """Whether the kernel reads the input as it is (a 1x1, stride-1, unpadded convolution's
    input is its own reconstruction: nothing is copied)."""
    return (g.kernel_h, g.kernel_w, g.stride_h, g.stride_w, g.pad_top, g.pad_left) == \
        (1, 1, 1, 1, 0, 0) and (g.out_h, g.out_w) == (g.height, g.width)


def sparse_seconds(g: Geometry, nnz: int) -> float:
    """The sparse kernel's time: one parallel launch streaming every non-zero over the output
    plane, after the input's reconstruction unless it reads it in place."""
    stream = nnz * g.out_h * g.phase_cols / SPARSE_MACS_PER_SECOND
    reconstruct = 0.0 if reads_in_place(g) else \
        g.channels * g.stride_h * g.stride_w * g.phase_size / RECONSTRUCT_PER_SECOND
    return stream + reconstruct + LAUNCH_SECONDS
