"""Offline weight transform: CSR rows per output channel, mapped to the reconstructed features.

For output channel k the non-zero weights w[k, c, ky, kx] are stored in the paper's HWC order
(ky, kx, c). Each one becomes a value and an *offset* into the reconstructed feature map (see
``kernel.c``): the position, in one flattened buffer, where the input element it multiplies for
output (0, 0) lives. Output channels are bucket-sorted by non-zero count (descending) and dealt
round-robin to the threads, so each thread gets the same amount of work.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Geometry:
    """Shapes of one convolution and of its reconstructed input."""

    channels: int
    height: int
    width: int
    out_channels: int
    kernel_h: int
    kernel_w: int
    out_h: int
    out_w: int
    stride_h: int
    stride_w: int
    pad_top: int
    pad_left: int
    dilation_h: int
    dilation_w: int

    @property
    def phase_rows(self) -> int:
        """Rows of one stride phase of the padded input."""
        return (self.out_h - 1) + ((self.kernel_h - 1) * self.dilation_h) // self.stride_h + 1

    @property
    def phase_cols(self) -> int:
        """Columns of one phase row; the output row is computed over this padded width."""
        return (self.out_w - 1) + ((self.kernel_w - 1) * self.dilation_w) // self.stride_w + 1

    @property
    def phase_size(self) -> int:
        return self.phase_rows * self.phase_cols

    @property
    def in_place(self) -> bool:
        """Whether the kernel reads the input as it is: a 1x1, stride-1, unpadded
        convolution's input is its own reconstruction (nothing is copied)."""
        return (self.kernel_h, self.kernel_w, self.stride_h, self.stride_w, self.pad_top,
                self.pad_left) == (1, 1, 1, 1, 0, 0) and \
            (self.out_h, self.out_w) == (self.height, self.width)

    @property
    def plane_stride(self) -> int:
        """Floats from one phase plane to the next: ``phase_size``, rounded up to whole
        16-float vectors for a 1x1 convolution that reconstructs its input (not ``in_place``),
        whose only tap then reads every channel's run from a 64-byte boundary (the
        reconstruction's base is aligned).

        Example: a 1x1 of stride 2 from 14x14 onto 7x7 keeps 49 floats a plane at a stride of
        64; a 3x3's taps start at other columns, its planes stay packed::

            >>> Geometry(8, 14, 14, 8, 1, 1, 7, 7, 2, 2, 0, 0, 1, 1).plane_stride
            64
            >>> Geometry(8, 7, 7, 8, 3, 3, 7, 7, 1, 1, 1, 1, 1, 1).plane_stride
            81
        """
        if (self.kernel_h, self.kernel_w) == (1, 1) and not self.in_place:
            return -(-self.phase_size // 16) * 16
        return self.phase_size

    @property
    def planes_floats(self) -> int:
        """Floats of the reconstruction's phase planes, every channel's, ``plane_stride``
        apart (the reconstruction buffer's tail follows them: ``plugin.reconstruction_floats``).

        Example: 8 channels of one 7x7 phase, at a stride of 64::

            >>> Geometry(8, 14, 14, 8, 1, 1, 7, 7, 2, 2, 0, 0, 1, 1).planes_floats
            512
        """
        return self.channels * self.phases * self.plane_stride

    @property
    def phases_h(self) -> tuple[int, ...]:
        """The row phases (input rows modulo the stride) some kernel row reads: a 1x1
        convolution of stride 2 reads one of two, its reconstruction holds only that one."""
        return tuple(sorted({ky * self.dilation_h % self.stride_h
                             for ky in range(self.kernel_h)}))

    @property
    def phases_w(self) -> tuple[int, ...]:
        """The column phases some kernel column reads (``phases_h``)."""
        return tuple(sorted({kx * self.dilation_w % self.stride_w
                             for kx in range(self.kernel_w)}))

    @property
    def phases(self) -> int:
        """Phase planes per input channel in the reconstruction."""
        return len(self.phases_h) * len(self.phases_w)

    def inside_columns(self, px: int) -> tuple[int, int]:
        """The columns [lo, hi) of phase ``px``'s rows that read inside the input (column
        ``j * stride_w + px - pad_left``); the others are padding (zeros).

        Example: 3 columns of padding on each side of 8 at stride 2 (7 phase columns): phase
        1 reads input columns 0, 2, 4, 6 at its columns 1 to 4, phase 0 columns 1, 3, 5, 7 at
        2 to 5::

            >>> g = Geometry(1, 8, 8, 1, 7, 7, 4, 4, 2, 2, 3, 3, 1, 1)
            >>> g.phase_cols, g.inside_columns(1), g.inside_columns(0)
            (7, (1, 5), (2, 6))
        """
        lo = max(0, -(-(self.pad_left - px) // self.stride_w))
        hi = min(self.phase_cols, (self.width - 1 + self.pad_left - px) // self.stride_w + 1)
        return lo, max(lo, hi)

    def tap_offsets(self, c: np.ndarray, ky: np.ndarray, kx: np.ndarray) -> np.ndarray:
        """Where the reconstructed input for each weight (c, ky, kx) of the arrays ``c``,
        ``ky``, ``kx`` starts (output position 0, 0), int64: channel ``c``'s planes, of the
        phases read only (``phases_h``, ``phases_w``), ``plane_stride`` apart.

        Example: a 1x1 convolution of stride 2 over 8x8 reads one phase of 4x4 a channel::

            >>> Geometry(3, 8, 8, 4, 1, 1, 4, 4, 2, 2, 0, 0, 1, 1).tap_offsets(
            ...     [0, 2], [0, 0], [0, 0]).tolist()
            [0, 32]
        """
        y, x = np.asarray(ky) * self.dilation_h, np.asarray(kx) * self.dilation_w
        rows, cols = self.phases_h, self.phases_w
        row_of = np.zeros(self.stride_h, np.int64)
        row_of[list(rows)] = np.arange(len(rows))
        col_of = np.zeros(self.stride_w, np.int64)
        col_of[list(cols)] = np.arange(len(cols))
        phase = (np.asarray(c, np.int64) * len(rows) + row_of[y % self.stride_h]) * len(cols) \
            + col_of[x % self.stride_w]
        return phase * self.plane_stride + (y // self.stride_h) * self.phase_cols \
            + x // self.stride_w


def to_csr(weight: np.ndarray, geometry: Geometry, groups: int = 1, aligned: bool = False
           ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(values, offsets, row_ptr, order) of ``weight`` (OIHW) for the sparse kernel.

    With ``groups``, output channel k reads the input channels of its group: the offsets point
    into those channels of the reconstructed features, nothing else changes (depthwise included).
    ``order`` lists the output channels heaviest first (a bucket sort by non-zero count); the
    kernel deals them round-robin to however many threads run it, which balances the work.

    With ``aligned`` (``cost.aligned_runs``), each row's non-zeros are grouped by their
    offset modulo 16 (``SHIFTS`` groups, in HWC order within each), every offset is rounded
    down to a multiple of 16 (the group gives the shift back), and ``row_ptr`` has ``SHIFTS``
    entries a row: group (k, s) runs from ``row_ptr[k * SHIFTS + s]`` to the next entry.

    Example: one output channel, three input channels of a 1x5 map::

        >>> w = np.array([1, 2, 3], np.float32).reshape(1, 3, 1, 1)
        >>> g = Geometry(3, 1, 5, 1, 1, 1, 1, 5, 1, 1, 0, 0, 1, 1)
        >>> to_csr(w, g)[1].tolist(), to_csr(w, g, aligned=True)[1].tolist()
        ([0, 5, 10], [0, 0, 0])
        >>> to_csr(w, g, aligned=True)[2].tolist()[:7]
        [0, 1, 1, 1, 1, 1, 2]
    """
    out_channels, channels_per_group, kernel_h, kernel_w = weight.shape
    # the non-zeros row by row in HWC order: kernel position outer, input channel inner
    k, ky, kx, c = np.nonzero(weight.transpose(0, 2, 3, 1))
    values = weight[k, c, ky, kx].astype(np.float32)
    offsets = geometry.tap_offsets(k // (out_channels // groups) * channels_per_group + c,
                                   ky, kx)
    if aligned:
        shifts = offsets % SHIFTS
        by_group = np.lexsort((np.arange(len(k)), shifts, k))  # stable: HWC within a group
        values, offsets = values[by_group], offsets[by_group] - shifts[by_group]
        counts = np.bincount(k * SHIFTS + shifts, minlength=out_channels * SHIFTS)
    else:
        counts = np.bincount(k, minlength=out_channels)
    row_ptr = np.concatenate([[0], np.cumsum(counts)])
    per_row = SHIFTS if aligned else 1
    order = np.argsort(-np.diff(row_ptr[::per_row]), kind="stable")
    return (values, offsets.astype(np.int32), row_ptr.astype(np.int32), order.astype(np.int32))


#: Groups of an aligned row (``to_csr``): a run's offset modulo 16 floats, 64 bytes.
SHIFTS = 16


def rows_ascend(offsets: np.ndarray, row_ptr: np.ndarray) -> bool:
    """Whether every row's offsets ascend: true of a 1x1 convolution's rows (one kernel
    position, input channels in order), whose runs past the input's end the kernel's tail
    then finds among each row's last (``templates/spardr_conv.c.mako``).

    Example::

        >>> rows_ascend(np.array([0, 5, 9, 2, 3]), np.array([0, 3, 5]))
        True
        >>> rows_ascend(np.array([0, 9, 5]), np.array([0, 3]))
        False
    """
    steps = np.diff(offsets) > 0
    starts = np.zeros(len(steps), bool)
    inner = np.asarray(row_ptr[1:-1]) - 1  # a step into the next row's first non-zero
    starts[inner[(inner >= 0) & (inner < len(steps))]] = True
    return bool(np.all(steps | starts))
