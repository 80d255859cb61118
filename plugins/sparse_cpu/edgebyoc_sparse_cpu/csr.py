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

    def tap_offset(self, c: int, ky: int, kx: int) -> int:
        """Where the reconstructed input for weight (c, ky, kx) starts (output position 0, 0):
        channel ``c``'s planes, of the phases read only (``phases_h``, ``phases_w``).

        Example: a 1x1 convolution of stride 2 over 8x8 reads one phase of 4x4 a channel::

            >>> Geometry(3, 8, 8, 4, 1, 1, 4, 4, 2, 2, 0, 0, 1, 1).tap_offset(2, 0, 0)
            32
        """
        y, x = ky * self.dilation_h, kx * self.dilation_w
        rows, cols = self.phases_h, self.phases_w
        phase = (c * len(rows) + rows.index(y % self.stride_h)) * len(cols) \
            + cols.index(x % self.stride_w)
        return phase * self.phase_size + (y // self.stride_h) * self.phase_cols \
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
    out_channels, channels_per_group = weight.shape[:2]
    per_group = out_channels // groups
    values, offsets, row_ptr = [], [], [0]
    for k in range(out_channels):
        first_channel = (k // per_group) * channels_per_group
        row = []
        # HWC order: kernel position outer, input channel inner
        for ky in range(weight.shape[2]):
            for kx in range(weight.shape[3]):
                for c in range(channels_per_group):
                    w = weight[k, c, ky, kx]
                    if w != 0:
                        row.append((geometry.tap_offset(first_channel + c, ky, kx), w))
        if aligned:
            row.sort(key=lambda entry: entry[0] % SHIFTS)  # stable: HWC within a group
            shifts = [offset % SHIFTS for offset, _ in row]
            row = [(offset - offset % SHIFTS, w) for offset, w in row]
            row_ptr.extend(len(values) + sum(1 for s in shifts if s <= shift)
                           for shift in range(SHIFTS))
        else:
            row_ptr.append(len(values) + len(row))
        offsets.extend(offset for offset, _ in row)
        values.extend(w for _, w in row)
    per_row = SHIFTS if aligned else 1
    order = np.argsort(-np.diff(np.asarray(row_ptr)[::per_row]), kind="stable")
    return (np.asarray(values, np.float32), np.asarray(offsets, np.int32),
            np.asarray(row_ptr, np.int32), order.astype(np.int32))


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
