"""Winograd F(2x2, 3x3) convolutions on the host.

A 3x3 convolution with stride 1 computes each 2x2 block of outputs from a 4x4 patch of its
input. Winograd's minimal filtering (Lavin and Gray, "Fast Algorithms for Convolutional
Neural Networks", 2016) does that with 16 products per input and output channel pair instead
of 36: the patch is transformed (``V = B^T d B``, additions only), multiplied element by
element with the transformed filter (``U = G g G^T``, computed once, at compile time) and
summed over the input channels, which for all patches at once is 16 independent matrix
products ``M[k] = V[k] @ U[k]`` ([patches, Cin] by [Cin, Cout]), and the products are
transformed back (``Y = A^T M A``, additions only). The matrix products run on the host's
matmul schedule; the two transforms are memory-bound passes with vectors along the channels.

``winograd_convolutions`` rewrites the host build's channels-last 3x3 convolutions with
constant weights where this pays (``WINOGRAD_MIN_CHANNELS`` channels in and out, an output of at
least ``WINOGRAD_MIN_PIXELS`` pixels, transformed weights of at most
``WINOGRAD_MAX_WEIGHT_BYTES``: a layer that streams its weights from memory, like ResNet-18's
last stage, would read 16/9 as many). Measured on one AVX-512 core pair (2 threads), a
convolution with bias and ReLU: 64 channels at 56x56 0.476 -> 0.281 ms, 128 at 28x28
0.446 -> 0.222 ms, 256 at 14x14 0.607 -> 0.272 ms.

Numerics: the transforms reorder float32 sums; against a direct convolution the largest
difference is about 2e-6 of the output's largest magnitude (64 to 512 input channels), within
verify's default tolerance. The intermediate tensors (16 values per 2x2 block and channel, in
and out) make the layer's working memory about 4x its input plus 4x its output while it runs;
a build with a depth-first plan (whose point is memory) keeps all its convolutions direct.

The output transform is left unscheduled and fuses with the layer's bias, activation and
residual add (``FuseOps``); ``schedules.HostWinogradOutputRule`` then schedules the fused
kernel one 2x2 block at a time, its four outputs unrolled and channels in vectors.
"""

from __future__ import annotations

import numpy as np
import tvm
from tvm import relax, s_tir, te, tirx

from .rewrites import rewrite_functions
from .schedules import WINOGRAD_OUTPUT_BLOCK

#: the fewest input and output channels a convolution needs for the rewrite. Measured alone
#: (2 threads, TVM's timer, kernels warm), smaller layers gain too: 32 channels at 56x56 0.127
#: -> 0.071 ms, 48 at 28x28 0.080 -> 0.043, 64 at 14x14 0.030 -> 0.017, 64 at 7x7 0.0097 ->
#: 0.0089; but the rewrite makes one kernel three (two more thread-pool launches, about 5 us
#: each inside a model), and the small layers are those of the MCU-sized networks whose
#: depth-first builds (direct convolutions) are compared with the untiled one. Not tuned
#: further yet.
WINOGRAD_MIN_CHANNELS = 64
#: the fewest output pixels (height x width) a convolution needs (see above; a
#: 7x7 map is computed as 8x8, a quarter of the work on padding)
WINOGRAD_MIN_PIXELS = 14 * 14
#: the most bytes of transformed weights (16 x Cin x Cout float32) a rewritten layer may read
WINOGRAD_MAX_WEIGHT_BYTES = 5 << 20
#: the name of the output transform's block (``HostWinogradOutputRule`` recognises it)
OUTPUT_BLOCK = WINOGRAD_OUTPUT_BLOCK
#: the name of the input transform's block
INPUT_BLOCK = "winograd_input"
#: TVM's ``OpPatternKind`` that ``FuseOps`` leaves alone
_OPAQUE = 8

#: F(2x2, 3x3): the filter transform G (4x3)
FILTER_TRANSFORM = np.array([[1.0, 0.0, 0.0], [0.5, 0.5, 0.5], [0.5, -0.5, 0.5],
                             [0.0, 0.0, 1.0]])


def transformed_weights(hwio: np.ndarray) -> np.ndarray:
    """``U[4 * e + n, i, o] = (G g G^T)[e, n]`` for the 3x3 filter ``g`` of input channel ``i``
    and output channel ``o`` of ``hwio`` ([3, 3, Cin, Cout]), computed in float64, returned in
    ``hwio``'s dtype: [16, Cin, Cout].

    Example::

        >>> transformed_weights(np.ones((3, 3, 1, 1), np.float32))[:, 0, 0].reshape(4, 4)[0]
        array([1. , 1.5, 0.5, 1. ], dtype=float32)
    """
    g = FILTER_TRANSFORM
    u = np.einsum("ea,nb,abio->enio", g, g, hwio.astype(np.float64))
    return u.reshape(16, hwio.shape[2], hwio.shape[3]).astype(hwio.dtype)


def _wide(*extents: int) -> tuple:
    """Extents as int64 immediates, as Relax's legalized kernels declare their buffers (FuseTIR
    maps buffers of one tensor to one type)."""
    return tuple(tirx.IntImm("int64", int(e)) for e in extents)


def _input_rows(k, values):
    """Row ``k`` of ``B^T`` (F(2x2, 3x3)) applied to the four ``values``: additions only."""
    v0, v1, v2, v3 = values
    return tirx.Select(k == 0, v0 - v2, tirx.Select(k == 1, v1 + v2, tirx.Select(
        k == 2, v2 - v1, v1 - v3)))


def _output_rows(a, values):
    """Row ``a`` of ``A^T`` (F(2x2, 3x3)) applied to the four ``values``."""
    v0, v1, v2, v3 = values
    return tirx.Select(a == 0, v0 + v1 + v2, v1 - v2 - v3)


def input_transform(batch: int, height: int, width: int, channels: int, dtype: str,
                    vector: int) -> tirx.PrimFunc:
    """The scheduled PrimFunc ``(x [N, H, W, C]) -> V [16, P, C]``: ``V[4 e + n, p]`` is
    ``(B^T d B)[e, n]`` for the 4x4 patch ``d`` of block ``p`` (zero outside the image: the
    convolution's padding of 1), ``P = N * ceil(H / 2) * ceil(W / 2)``; parallel over the
    blocks, the 16 values unrolled, ``vector`` channels at a time."""
    rows, cols = (height + 1) // 2, (width + 1) // 2
    x = te.placeholder(_wide(batch, height, width, channels), dtype, name="x")

    def patch(p, i, j, c):
        y = (p // cols) % rows * 2 + i - 1
        z = p % cols * 2 + j - 1
        inside = tirx.all(y >= 0, y < height, z >= 0, z < width)
        return tirx.if_then_else(inside, x[p // (rows * cols), y, z, c],
                                 tirx.const(0.0, dtype))

    def value(k, p, c):
        columns = [_input_rows(k // 4, [patch(p, i, j, c) for i in range(4)])
                   for j in range(4)]
        return _input_rows(k % 4, columns)

    v = te.compute(_wide(16, batch * rows * cols, channels), value, name=INPUT_BLOCK)
    sch = s_tir.Schedule(te.create_prim_func([x, v]))
    k, p, c = sch.get_loops(sch.get_sblock(INPUT_BLOCK))
    row, column = sch.split(k, [4, 4])
    c_outer, c_inner = sch.split(c, [None, vector])
    sch.reorder(p, c_outer, row, column, c_inner)
    sch.parallel(p)
    sch.unroll(row)
    sch.unroll(column)
    sch.vectorize(c_inner)
    return sch.mod["main"].without_attr("global_symbol").with_attrs(
        {"tirx.is_scheduled": True, "op_pattern": _OPAQUE})


def output_transform(batch: int, height: int, width: int, channels: int,
                     dtype: str) -> tirx.PrimFunc:
    """The PrimFunc ``(M [16, P, C]) -> y [N, H, W, C]``: each output is its 2x2 block's
    ``(A^T M A)`` entry (left unscheduled: it fuses with the layer's epilogue first)."""
    rows, cols = (height + 1) // 2, (width + 1) // 2
    m = te.placeholder(_wide(16, batch * rows * cols, channels), dtype, name="m")

    def value(n, y, z, c):
        p = (n * rows + y // 2) * cols + z // 2
        per_column = [_output_rows(y % 2, [m[4 * e + col, p, c] for e in range(4)])
                      for col in range(4)]
        return _output_rows(z % 2, per_column)

    out = te.compute(_wide(batch, height, width, channels), value, name=OUTPUT_BLOCK)
    return te.create_prim_func([m, out]).without_attr("global_symbol")


def _static_shape(ty) -> list[int] | None:
    shape = getattr(ty, "shape", None)
    if not isinstance(shape, relax.ShapeExpr):
        return None
    values = [getattr(d, "value", None) for d in shape.values]
    return None if None in values else [int(v) for v in values]


def eligible(call, lanes: int) -> bool:
    """Whether ``call`` (a ``relax.nn.conv2d``) is a channels-last 3x3 convolution, stride and
    dilation 1, padding 1, one group, float32 with constant weights, large enough for the
    rewrite (see the module docstring), its channels whole vectors of ``lanes`` or half."""
    attrs, weight = call.attrs, call.args[1]
    if str(attrs.data_layout) != "NHWC" or str(attrs.kernel_layout) != "HWIO" or \
            str(attrs.out_layout) not in ("NHWC", "") or int(attrs.groups) != 1 or \
            not isinstance(weight, tvm.ir.expr.Constant):
        return False
    if [int(s) for s in attrs.strides] != [1, 1] or \
            [int(d) for d in attrs.dilation] != [1, 1] or \
            [int(p) for p in attrs.padding] != [1, 1, 1, 1]:
        return False
    shape = _static_shape(call.args[0].ty)
    if shape is None or len(shape) != 4 or str(weight.value.dtype) != "float32" or \
            str(call.args[0].ty.dtype) != "float32" or \
            str(attrs.out_dtype) not in ("float32", "", "void", "None"):
        return False
    _, height, width, channels = shape
    filter_shape = tuple(weight.value.shape)
    if filter_shape[:3] != (3, 3, channels):
        return False
    outputs = filter_shape[3]
    vector = max(lanes // 2, 1)
    return min(channels, outputs) >= WINOGRAD_MIN_CHANNELS and \
        height * width >= WINOGRAD_MIN_PIXELS and \
        channels % vector == 0 and outputs % vector == 0 and \
        16 * channels * outputs * 4 <= WINOGRAD_MAX_WEIGHT_BYTES


@relax.expr_functor.mutator
class _WinogradConvolutions(relax.PyExprMutator):
    def __init__(self, mod, lanes: int):
        super().__init__(mod)
        self.lanes = lanes
        self.kernels: dict = {}

    def _kernel(self, name: str, build, *key):
        if (name, key) not in self.kernels:
            self.kernels[(name, key)] = self.builder_.add_func(build(*key), name)
        return self.kernels[(name, key)]

    def visit_call_(self, call):
        call = super().visit_call_(call)
        if not (isinstance(call.op, tvm.ir.Op) and call.op.name == "relax.nn.conv2d") or \
                not eligible(call, self.lanes):
            return call
        batch, height, width, channels = _static_shape(call.args[0].ty)
        weights = call.args[1].value.numpy()
        outputs = weights.shape[3]
        blocks = batch * ((height + 1) // 2) * ((width + 1) // 2)
        vector = self.lanes if channels % self.lanes == 0 else self.lanes // 2
        to_blocks = self._kernel("winograd_input", input_transform, batch, height, width,
                                 channels, "float32", vector)
        from_blocks = self._kernel("winograd_output", output_transform, batch, height, width,
                                   outputs, "float32")
        transformed = self.builder_.emit(relax.call_tir(
            to_blocks, (call.args[0],), relax.TensorType((16, blocks, channels), "float32")))
        products = self.builder_.emit(relax.op.matmul(
            transformed, relax.const(transformed_weights(weights))))
        return relax.call_tir(from_blocks, (products,), relax.TensorType(
            (batch, height, width, outputs), "float32"))


def winograd_convolutions(lanes: int) -> tvm.transform.Pass:
    """The module pass rewriting eligible convolutions (``eligible``) as Winograd F(2x2, 3x3):
    input transform, 16 matrix products with the transformed constant weights, output
    transform (see the module docstring); ``lanes`` is the target's float32 SIMD width."""

    @tvm.transform.module_pass(opt_level=0, name="edgebyoc.WinogradConvolutions")
    def _pass(mod, _ctx):
        return rewrite_functions(_WinogradConvolutions(mod, lanes))

    return _pass
