"""Requantization arithmetic, exactly as TFLite specifies it, in MATCH's single-shift form.

TFLite requantizes an int32 accumulator ``x`` with a real multiplier ``r`` encoded as an int32
``m`` in [2^30, 2^31) and an exponent ``shift`` (``r = m * 2^(shift - 31)``) through two
roundings: ``SaturatingRoundingDoublingHighMul`` (round half up, ties of negative values towards
zero) then ``RoundingDivideByPOT`` (round half away from zero). Both collapse into one shift:

    p = (x << max(shift, 0)) * m,   S = 31 + max(-shift, 0)
    y = (p + R(p)) >> S             (arithmetic shift)

with ``R = 2^30 + 2^(S-1)`` for ``p >= 0`` and ``R = 2^(S-1) - 2^30`` for ``p < 0`` when
``S > 31``, and ``R = 2^30`` when ``S == 31``. ``ROUND_HALF_UP`` (``R = 2^(S-1)``) is the one-step
rounding of accelerators that cannot do TFLite's (it differs by at most one LSB).
``tflite_multiply_by_quantized_multiplier`` is TFLite's literal two-step algorithm; a test
checks the single-shift form against it.
"""

from __future__ import annotations

import enum
import math

import numpy as np


class Rounding(enum.IntEnum):
    """How a module rounds the requantization ``(x * M + B) >> S``: the value is the code
    generated code receives (``edgebyoc_layer_t.rounding``), ``.spelling`` the
    ``ExecModule.requantize_rounding`` spelling.

    Example::

        >>> Rounding.of("half_up"), int(Rounding.TFLITE), Rounding.HALF_UP.spelling
        (<Rounding.HALF_UP: 1>, 0, 'half_up')
    """

    #: TFLite's MultiplyByQuantizedMultiplier (two roundings, as TFLite's int8 kernels)
    TFLITE = 0
    #: one shift rounding half up (NE16-like accelerators; at most 1 LSB from TFLite's)
    HALF_UP = 1

    @property
    def spelling(self) -> str:
        """The ``ExecModule.requantize_rounding`` name of this mode."""
        return self.name.lower()

    @classmethod
    def of(cls, name: str) -> "Rounding":
        """The mode called ``name`` (``"tflite"`` or ``"half_up"``)."""
        try:
            return cls[str(name).upper()]
        except KeyError:
            raise ValueError(f"unknown rounding {name!r} (known: tflite, half_up)") from None


#: rounding modes of ``requantize`` (the values are what the generated code receives)
ROUND_TFLITE = int(Rounding.TFLITE)
ROUND_HALF_UP = int(Rounding.HALF_UP)
ROUNDING_NAMES = {int(r): r.spelling for r in Rounding}
#: ``ExecModule.requantize_rounding`` names -> rounding modes
ROUNDING_MODES = {name: mode for mode, name in ROUNDING_NAMES.items()}


def quantize_multiplier(real: float) -> tuple[int, int]:
    """TFLite's ``QuantizeMultiplier``: ``real`` as (int32 multiplier in [2^30, 2^31), shift)."""
    if real == 0.0:
        return 0, 0
    if real < 0:
        raise ValueError(f"requantization multiplier {real} is negative")
    significand, shift = math.frexp(real)
    q = int(round(significand * (1 << 31)))
    if q == 1 << 31:
        q //= 2
        shift += 1
    if shift < -31:
        return 0, 0
    if shift > 30:
        raise ValueError(f"requantization multiplier {real} is too large (shift {shift})")
    return q, shift


def quantize_multipliers(reals) -> tuple[np.ndarray, np.ndarray]:
    """``quantize_multiplier`` per channel: int32 multipliers and shifts."""
    pairs = [quantize_multiplier(float(r)) for r in np.asarray(reals, dtype=np.float64).ravel()]
    return (np.array([p[0] for p in pairs], dtype=np.int32),
            np.array([p[1] for p in pairs], dtype=np.int32))


def multiply_by_quantized_multiplier(x, multiplier, shift, rounding: int = ROUND_TFLITE):
    """``x * multiplier * 2^(shift - 31)`` rounded, in the single-shift form (int64 result)."""
    x = np.asarray(x, dtype=np.int64)
    multiplier = np.asarray(multiplier, dtype=np.int64)
    shift = np.asarray(shift, dtype=np.int64)
    left = np.maximum(shift, 0)
    right = np.maximum(-shift, 0)
    p = (x << left) * multiplier
    total = 31 + right
    half = np.left_shift(np.int64(1), total - 1)
    if rounding == ROUND_HALF_UP:
        term = half
    elif rounding == ROUND_TFLITE:
        two30 = np.int64(1 << 30)
        term = np.where(right > 0, np.where(p >= 0, half + two30, half - two30), two30)
    else:
        raise ValueError(f"unknown rounding mode {rounding}")
    return (p + term) >> total


def requantize(acc, bias, multiplier, shift, zero_point: int, low: int, high: int,
               rounding: int = ROUND_TFLITE) -> np.ndarray:
    """int32 accumulators (channels last) to int8: bias, requantization, zero point, clamp."""
    acc = np.asarray(acc, dtype=np.int64) + np.asarray(bias, dtype=np.int64)
    y = multiply_by_quantized_multiplier(acc, multiplier, shift, rounding) + zero_point
    return np.clip(y, low, high).astype(np.int8)


def tflite_multiply_by_quantized_multiplier(x: int, multiplier: int, shift: int) -> int:
    """TFLite's ``MultiplyByQuantizedMultiplier`` step by step (int32 semantics), for tests."""
    left = shift if shift > 0 else 0
    right = 0 if shift > 0 else -shift
    a = int(x) * (1 << left)
    a = (a + 2**31) % 2**32 - 2**31  # int32 wrap, as TFLite's int32 shift
    b = int(multiplier)
    if a == b == -2**31:
        high = 2**31 - 1
    else:
        ab = a * b
        nudge = (1 << 30) if ab >= 0 else 1 - (1 << 30)
        value = ab + nudge
        high = abs(value) // 2**31 * (1 if value >= 0 else -1)  # C division truncates
    mask = (1 << right) - 1
    remainder = high & mask
    threshold = (mask >> 1) + (1 if high < 0 else 0)
    return (high >> right) + (1 if remainder > threshold else 0)


def add_parameters(scale_a: float, zp_a: int, scale_b: float, zp_b: int, scale_out: float,
                   zp_out: int, low: int, high: int) -> np.ndarray:
    """TFLite's int8 ADD parameters (left shift 20) as the int32 vector the kernels read:
    ``[m_a, shift_a, m_b, shift_b, m_out, shift_out, zp_a, zp_b, zp_out, low, high]``."""
    twice_max = 2.0 * max(scale_a, scale_b)
    m_a, s_a = quantize_multiplier(scale_a / twice_max)
    m_b, s_b = quantize_multiplier(scale_b / twice_max)
    m_o, s_o = quantize_multiplier(twice_max / ((1 << ADD_LEFT_SHIFT) * scale_out))
    return np.array([m_a, s_a, m_b, s_b, m_o, s_o, zp_a, zp_b, zp_out, low, high],
                    dtype=np.int32)


#: TFLite's int8 ADD works on inputs shifted left by 20 bits
ADD_LEFT_SHIFT = 20


def quantized_add(a, b, params) -> np.ndarray:
    """TFLite's int8 ADD (with a fused activation as the clamp) on int8 arrays."""
    m_a, s_a, m_b, s_b, m_o, s_o, zp_a, zp_b, zp_out, low, high = (int(v) for v in params)
    a = (np.asarray(a, dtype=np.int64) - zp_a) << ADD_LEFT_SHIFT
    b = (np.asarray(b, dtype=np.int64) - zp_b) << ADD_LEFT_SHIFT
    total = multiply_by_quantized_multiplier(a, m_a, s_a) + \
        multiply_by_quantized_multiplier(b, m_b, s_b)
    y = multiply_by_quantized_multiplier(total, m_o, s_o) + zp_out
    return np.clip(y, low, high).astype(np.int8)
