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

    def tap_offset(self, c: int, ky: int, kx: int) -> int:
        """Where the reconstructed input for weight (c, ky, kx) starts (output position 0, 0)."""
        y, x = ky * self.dilation_h, kx * self.dilation_w
        phase = (c * self.stride_h + y % self.stride_h) * self.stride_w + x % self.stride_w
        return phase * self.phase_size + (y // self.stride_h) * self.phase_cols \
            + x // self.stride_w


def to_csr(weight: np.ndarray, geometry: Geometry, groups: int = 1
           ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(values, offsets, row_ptr, order) of ``weight`` (OIHW) for the sparse kernel.

    With ``groups``, output channel k reads the input channels of its group: the offsets point
    into those channels of the reconstructed features, nothing else changes (depthwise included).
    ``order`` lists the output channels heaviest first (a bucket sort by non-zero count); the
    kernel deals them round-robin to however many threads run it, which balances the work.
    """
    out_channels, channels_per_group = weight.shape[:2]
    per_group = out_channels // groups
    values, offsets, row_ptr = [], [], [0]
    for k in range(out_channels):
        first_channel = (k // per_group) * channels_per_group
        # HWC order: kernel position outer, input channel inner
        for ky in range(weight.shape[2]):
            for kx in range(weight.shape[3]):
                for c in range(channels_per_group):
                    w = weight[k, c, ky, kx]
                    if w != 0:
                        values.append(w)
                        offsets.append(geometry.tap_offset(first_channel + c, ky, kx))
        row_ptr.append(len(values))
    order = np.argsort(-np.diff(row_ptr), kind="stable")
    return (np.asarray(values, np.float32), np.asarray(offsets, np.int32),
            np.asarray(row_ptr, np.int32), order.astype(np.int32))


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
