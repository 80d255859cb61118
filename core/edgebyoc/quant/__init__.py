"""Integer (int8) inference support shared by the int8 targets.

``arith`` holds the requantization arithmetic (TFLite's integer multiplier, shift and rounding,
written as MATCH's ``f(x) = (x * M + B) >> S``) in numpy; ``integerize`` the Relax pass that turns
the dequantize -> op -> quantize chains of int8 TFLite and QDQ ONNX imports into integer operators;
``reference`` a plain numpy executor of the integer operators, the reference generated int8 code
is checked against bit for bit.
"""
