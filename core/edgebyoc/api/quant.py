"""int8 models: integerization, TFLite's requantization arithmetic, patterns of integer layers.

int8 TFLite files and QDQ ONNX models import as ``dequantize -> float op -> quantize``.
``Integerize`` (an ``import``-stage pass) rewrites those chains into int8 operators with the
requantization ``f(x) = (x * M + B) >> S``; ``Rounding`` names how a module rounds it. The
arithmetic functions compute exactly what the generated code does, in numpy; the pattern
helpers build a plugin's pattern table.

Example::

    >>> m, s = quantize_multipliers([0.0021])
    >>> int(requantize([[1000]], [0], m, s, zero_point=5, low=-128, high=127)[0, 0])
    7
"""

from ..quant.arith import Rounding, quantize_multipliers, requantize
from ..quant.integerize import Integerize
from ..quant.patterns import (add_pattern, avg_pool_check, avg_pool_pattern, conv2d_geometry,
                              conv2d_pattern, dense_pattern, int8_import_passes, matched_call)
from ._deprecated import deprecated_names

__all__ = ["Integerize", "Rounding", "add_pattern", "avg_pool_check", "avg_pool_pattern",
           "conv2d_geometry", "conv2d_pattern", "dense_pattern", "int8_import_passes",
           "matched_call", "quantize_multipliers", "requantize"]

__getattr__ = deprecated_names(__name__, {
    **dict.fromkeys(["ADD_LEFT_SHIFT", "add_parameters", "multiply_by_quantized_multiplier",
                     "quantize_multiplier", "quantized_add"], "edgebyoc.quant.arith"),
    **dict.fromkeys(["QADD", "REQUANTIZE", "integerize"], "edgebyoc.quant.integerize"),
    **dict.fromkeys(["NHWC_LAYOUTS", "channels_last", "int8_input", "require_integer",
                     "requantized"], "edgebyoc.quant.patterns")})
