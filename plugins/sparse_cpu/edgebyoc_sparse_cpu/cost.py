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


def sparse_seconds(g: Geometry, nnz: int) -> float:
    stream = nnz * g.out_h * g.phase_cols / SPARSE_MACS_PER_SECOND
    reconstruct = g.channels * g.stride_h * g.stride_w * g.phase_size / RECONSTRUCT_PER_SECOND
    return stream + reconstruct + 2 * LAUNCH_SECONDS
