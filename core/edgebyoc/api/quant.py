"""int8 models: integerization, TFLite's requantization arithmetic, patterns of integer layers.

int8 TFLite files and QDQ ONNX models import as ``dequantize -> float op -> quantize``.
``Integerize`` (an ``import``-stage pass) rewrites those chains into int8 operators with the
requantization ``f(x) = (x * M + B) >> S`` (``REQUANTIZE``, ``QADD`` name their kernels);
``Rounding`` names how a module rounds it. The arithmetic functions compute exactly what the
generated code does, in numpy; the pattern helpers build a plugin's pattern table.

Example::

    >>> m, s = quantize_multiplier(0.0021)
    >>> int(requantize([[1000]], [0], [m], [s], zero_point=5, low=-128, high=127)[0, 0])
    7
"""

from ..quant.arith import (ADD_LEFT_SHIFT, Rounding, add_parameters,
                           multiply_by_quantized_multiplier, quantize_multiplier,
                           quantize_multipliers, quantized_add, requantize)
from ..quant.integerize import QADD, REQUANTIZE, Integerize, integerize
from ..quant.patterns import (NHWC_LAYOUTS, add_pattern, avg_pool_check, avg_pool_pattern,
                              channels_last, conv2d_geometry, conv2d_pattern, dense_pattern,
                              int8_import_passes, int8_input, matched_call, require_integer,
                              requantized)

__all__ = ["ADD_LEFT_SHIFT", "Integerize", "NHWC_LAYOUTS", "QADD", "REQUANTIZE", "Rounding",
           "add_parameters", "add_pattern", "avg_pool_check", "avg_pool_pattern",
           "channels_last", "conv2d_geometry", "conv2d_pattern", "dense_pattern",
           "int8_import_passes", "int8_input",
           "integerize", "matched_call", "multiply_by_quantized_multiplier",
           "quantize_multiplier", "quantize_multipliers", "quantized_add", "require_integer",
           "requantize", "requantized"]
