"""The TensorRT operator set: per Relax operator, the check of TensorRT's constraints (the
reason shown in the report when it refuses), and its translation of a BYOC JSON operation
into ONNX nodes (``to_onnx``) and into TensorRT network layers (``to_tensorrt``).

A converter receives the operation's argument values (graph tensors, or plain values for
scalars, shapes and tuples, see ``edgebyoc.api.regions.GRAPH_SCHEMA``) and its attributes, and
returns the result tensor; TensorRT converters also get the ``tensorrt`` module (or a stand-in
in tests) and the constant arguments' values (``weights``, by argument position). Every operator of ``CHECKS`` has both converters (a test asserts
it), so a missing converter is caught without a GPU.
"""

from __future__ import annotations

from typing import Any, Callable

#: elementwise binary operators: Relax -> (ONNX op, TensorRT ElementWiseOperation name)
BINARY = {"relax.add": ("Add", "SUM"), "relax.subtract": ("Sub", "SUB"),
          "relax.multiply": ("Mul", "PROD"), "relax.divide": ("Div", "DIV"),
          "relax.maximum": ("Max", "MAX"), "relax.minimum": ("Min", "MIN"),
          "relax.power": ("Pow", "POW")}
#: elementwise unary operators: Relax -> (ONNX op, TensorRT layer kind, its operation name)
UNARY = {"relax.nn.relu": ("Relu", "activation", "RELU"),
         "relax.sigmoid": ("Sigmoid", "activation", "SIGMOID"),
         "relax.tanh": ("Tanh", "activation", "TANH"),
         "relax.exp": ("Exp", "unary", "EXP"), "relax.sqrt": ("Sqrt", "unary", "SQRT"),
         "relax.abs": ("Abs", "unary", "ABS"), "relax.negative": ("Neg", "unary", "NEG")}
#: reductions: Relax -> (ONNX op, TensorRT ReduceOperation name)
REDUCE = {"relax.sum": ("ReduceSum", "SUM"), "relax.mean": ("ReduceMean", "AVG"),
          "relax.max": ("ReduceMax", "MAX"), "relax.min": ("ReduceMin", "MIN")}


# -- checks: the TensorRT constraints (True, or why not) -----------------------------------------

def _static(call) -> str | None:
    for expr in [call, *call.args]:
        shape = getattr(getattr(expr, "ty", None), "shape", None)
        if shape is not None and hasattr(shape, "values") and \
                not all(hasattr(d, "value") for d in shape.values):
            return "TensorRT engines here are built for static shapes"
    dtype = str(getattr(call.ty, "dtype", "float32"))
    if dtype not in ("float32", "float16"):
        return f"dtype {dtype}: the TensorRT route runs float32 / float16"
    return None


def _conv(call) -> str | bool:
    attrs = call.attrs
    if str(attrs.data_layout) != "NCHW" or str(attrs.out_layout or "NCHW") != "NCHW":
        return "TensorRT convolutions take NCHW activations"
    return _conv_weights(call)


def _conv_transpose(call) -> str | bool:
    attrs = call.attrs
    if str(attrs.data_layout) != "NCHW" or str(attrs.kernel_layout) != "IOHW":
        return "TensorRT deconvolutions take NCHW / IOHW"
    if any(int(p) for p in attrs.output_padding):
        return "output padding is not supported"
    if any(int(d) != 1 for d in attrs.dilation):
        return "dilated deconvolutions are not supported"
    return _conv_weights(call)


def _conv_weights(call) -> str | bool:
    return True if hasattr(call.args[1], "value") else \
        "TensorRT needs constant convolution weights"


def _pool(call) -> str | bool:
    attrs = call.attrs
    if str(attrs.layout) != "NCHW":
        return "TensorRT pooling takes NCHW"
    if any(int(d) != 1 for d in attrs.dilation):
        return "TensorRT pooling has no dilation"
    if bool(attrs.ceil_mode):
        return "ceil-mode pooling is not supported"
    return True


def _adaptive_pool(call) -> str | bool:
    if str(call.attrs.layout) != "NCHW":
        return "TensorRT pooling takes NCHW"
    out = [int(d) for d in call.ty.shape.values]
    return True if out[2:] == [1, 1] else "adaptive pooling only to 1x1 (global)"


def _binary(call) -> str | bool:
    ranks = [len(a.ty.shape.values) for a in call.args]
    lower = [a for a, r in zip(call.args, ranks) if r < max(ranks)]
    if any(not hasattr(a, "value") for a in lower):  # constants are reshaped when built
        return f"operands of ranks {ranks}: TensorRT broadcasts tensors of equal rank only"
    return True


def _matmul(call) -> str | bool:
    ranks = [len(a.ty.shape.values) for a in call.args]
    return True if min(ranks) >= 2 else "matrix-vector products of rank 1 are not supported"


def _resize(call) -> str | bool:
    attrs = call.attrs
    if str(attrs.layout) != "NCHW":
        return "TensorRT resize takes NCHW"
    if str(attrs.method) not in ("nearest_neighbor", "linear"):
        return f"resize method {attrs.method} is not supported"
    if str(attrs.coordinate_transformation_mode) not in ("asymmetric", "align_corners",
                                                         "half_pixel"):
        return f"coordinate mode {attrs.coordinate_transformation_mode} is not supported"
    return True


def _reduce(call) -> str | bool:
    return True if call.attrs.axis is not None else "reduction over every axis (use a reshape)"


def _slice(call) -> str | bool:
    if len(call.args) > 4 and not isinstance(call.args[4], type(call.args[1])):
        return "strides must be constant"
    return True


def _any(call) -> str | bool:
    return True


CHECKS: dict[str, Callable[[Any], str | bool]] = {
    "relax.nn.conv2d": _conv, "relax.nn.conv2d_transpose": _conv_transpose,
    "relax.matmul": _matmul, "relax.nn.max_pool2d": _pool, "relax.nn.avg_pool2d": _pool,
    "relax.nn.adaptive_avg_pool2d": _adaptive_pool,
    **{op: _binary for op in BINARY}, **{op: _any for op in UNARY},
    "relax.clip": _any, "relax.nn.softmax": _any, "relax.concat": _any, "relax.split": _any,
    "relax.reshape": _any, "relax.permute_dims": _any, "relax.strided_slice": _slice,
    "relax.image.resize2d": _resize, **{op: _reduce for op in REDUCE},
    "relax.nn.layer_norm": _any,
}


#: the arguments each operator is called with (a pattern matches that arity; strided_slice
#: takes its strides optionally)
ARITY = {op: 2 for op in ("relax.nn.conv2d", "relax.nn.conv2d_transpose", "relax.matmul",
                          "relax.reshape", "relax.image.resize2d", *BINARY)}
ARITY.update({"relax.clip": 3, "relax.nn.layer_norm": 3, "relax.strided_slice": (4, 5)})


def arities(op: str) -> tuple[int, ...]:
    """The argument counts ``op`` is matched with (1 unless ``ARITY`` says otherwise)."""
    arity = ARITY.get(op, 1)
    return arity if isinstance(arity, tuple) else (arity,)


def check(call) -> str | bool:
    """TensorRT's verdict on one Relax operator call: True, or why not."""
    return _static(call) or CHECKS[call.op.name](call)


# -- to ONNX -------------------------------------------------------------------------------------

class OnnxBuilder:
    """Accumulates ONNX nodes and constants while a graph is translated."""

    def __init__(self):
        from onnx import helper, numpy_helper

        self.helper, self.numpy_helper = helper, numpy_helper
        self.nodes, self.initializers = [], []
        self._count = 0

    def name(self, prefix: str) -> str:
        self._count += 1
        return f"{prefix}_{self._count}"

    def tensor(self, value) -> str:
        """A graph tensor's name as it is; a plain scalar as a float32 constant."""
        return value if isinstance(value, str) else self.const(value)

    def const(self, value, dtype="float32") -> str:
        import numpy as np

        name = self.name("c")
        self.initializers.append(self.numpy_helper.from_array(np.asarray(value, dtype), name))
        return name

    def node(self, op: str, inputs: list[str], **attrs) -> str:
        out = self.name(op.lower())
        self.nodes.append(self.helper.make_node(op, inputs, [out], **attrs))
        return out

    def nodes_out(self, op: str, inputs: list[str], outputs: int, **attrs) -> list[str]:
        outs = [self.name(op.lower()) for _ in range(outputs)]
        self.nodes.append(self.helper.make_node(op, inputs, outs, **attrs))
        return outs


def _pads(padding) -> list[int]:
    top, left, bottom, right = (int(p) for p in padding)
    return [top, left, bottom, right]


def _onnx_conv(b, a, at):
    inputs = [a[0], a[1]]
    return b.node("Conv", inputs, strides=at["strides"], pads=_pads(at["padding"]),
                  dilations=at["dilation"], group=int(at["groups"]))


def _onnx_conv_transpose(b, a, at):
    return b.node("ConvTranspose", [a[0], a[1]], strides=at["strides"],
                  pads=_pads(at["padding"]), group=int(at["groups"]))


def _onnx_pool(op):
    def convert(b, a, at):
        extra = {"count_include_pad": int(bool(at.get("count_include_pad", False)))} \
            if op == "AveragePool" else {}
        return b.node(op, [a[0]], kernel_shape=at["pool_size"], strides=at["strides"],
                      pads=_pads(at["padding"]), **extra)
    return convert


def _onnx_axes(axes, rank=None):
    return [int(x) for x in (axes if isinstance(axes, (list, tuple)) else [axes])]


def _onnx_clip(b, a, at):
    return b.node("Clip", [a[0], b.const(a[1]), b.const(a[2])])


def _onnx_split(b, a, at):
    axis = int(at["axis"])
    sizes = [o["shape"][axis] for o in at["outputs"]]
    return b.nodes_out("Split", [a[0], b.const(sizes, "int64")], len(sizes), axis=axis)


def _onnx_reshape(b, a, at):
    return b.node("Reshape", [a[0], b.const(a[1], "int64")])


def _onnx_slice(b, a, at):
    axes, begin, end = a[1], a[2], a[3]
    strides = a[4] if len(a) > 4 else [1] * len(axes)
    return b.node("Slice", [a[0], b.const(begin, "int64"), b.const(end, "int64"),
                            b.const(axes, "int64"), b.const(strides, "int64")])


def _onnx_resize(b, a, at):
    mode = "nearest" if at["method"] == "nearest_neighbor" else "linear"
    size = [int(s) for s in a[1]]
    # ONNX's sizes name every axis: the input's batch and channels, then the new height, width
    batch_channels = b.node("Slice", [b.node("Shape", [a[0]]), b.const([0], "int64"),
                                      b.const([2], "int64")])
    sizes = b.node("Concat", [batch_channels, b.const(size, "int64")], axis=0)
    return b.node("Resize", [a[0], "", "", sizes], mode=mode,
                  coordinate_transformation_mode=at["coordinate_transformation_mode"],
                  nearest_mode="floor" if mode == "nearest" else "round_prefer_floor")


def _onnx_reduce(op):
    def convert(b, a, at):
        return b.node(op, [a[0], b.const(_onnx_axes(at["axis"]), "int64")],
                      keepdims=int(bool(at["keepdims"])))
    return convert


def _onnx_layer_norm(b, a, at):
    axes = _onnx_axes(at["axes"])
    return b.node("LayerNormalization", [a[0], a[1], a[2]], axis=min(axes),
                  epsilon=float(at["epsilon"]))


TO_ONNX: dict[str, Callable] = {
    "relax.nn.conv2d": _onnx_conv, "relax.nn.conv2d_transpose": _onnx_conv_transpose,
    "relax.matmul": lambda b, a, at: b.node("MatMul", [a[0], a[1]]),
    "relax.nn.max_pool2d": _onnx_pool("MaxPool"), "relax.nn.avg_pool2d": _onnx_pool(
        "AveragePool"),
    "relax.nn.adaptive_avg_pool2d": lambda b, a, at: b.node("GlobalAveragePool", [a[0]]),
    **{op: (lambda name: lambda b, a, at: b.node(name, [b.tensor(a[0]), b.tensor(a[1])]))(onnx)
       for op, (onnx, _) in BINARY.items()},
    **{op: (lambda name: lambda b, a, at: b.node(name, [a[0]]))(onnx) for op, (onnx, _, _)
       in UNARY.items()},
    "relax.clip": _onnx_clip,
    "relax.nn.softmax": lambda b, a, at: b.node("Softmax", [a[0]], axis=int(at["axis"])),
    "relax.concat": lambda b, a, at: b.node("Concat", list(a[0]), axis=int(at["axis"])),
    "relax.split": _onnx_split,
    "relax.reshape": _onnx_reshape,
    "relax.permute_dims": lambda b, a, at: b.node("Transpose", [a[0]], perm=at["axes"]),
    "relax.strided_slice": _onnx_slice, "relax.image.resize2d": _onnx_resize,
    **{op: _onnx_reduce(onnx) for op, (onnx, _) in REDUCE.items()},
    "relax.nn.layer_norm": _onnx_layer_norm,
}


# -- to TensorRT ---------------------------------------------------------------------------------

def _trt_weights(value):
    import numpy as np

    return np.ascontiguousarray(value, dtype=np.float32)


def _trt_conv(trt, network, a, at, weights):
    kernel = weights[1]
    layer = network.add_convolution_nd(a[0], kernel.shape[0], tuple(kernel.shape[2:]),
                                       _trt_weights(kernel), trt.Weights())
    layer.stride_nd = tuple(at["strides"])
    layer.pre_padding, layer.post_padding = tuple(at["padding"][:2]), tuple(at["padding"][2:])
    layer.dilation_nd = tuple(at["dilation"])
    layer.num_groups = int(at["groups"])
    return layer.get_output(0)


def _trt_conv_transpose(trt, network, a, at, weights):
    kernel = weights[1]
    layer = network.add_deconvolution_nd(a[0], kernel.shape[1] * int(at["groups"]),
                                         tuple(kernel.shape[2:]), _trt_weights(kernel),
                                         trt.Weights())
    layer.stride_nd = tuple(at["strides"])
    layer.pre_padding, layer.post_padding = tuple(at["padding"][:2]), tuple(at["padding"][2:])
    layer.num_groups = int(at["groups"])
    return layer.get_output(0)


def _trt_pool(kind):
    def convert(trt, network, a, at, weights):
        layer = network.add_pooling_nd(a[0], getattr(trt.PoolingType, kind),
                                       tuple(at["pool_size"]))
        layer.stride_nd = tuple(at["strides"])
        layer.pre_padding = tuple(at["padding"][:2])
        layer.post_padding = tuple(at["padding"][2:])
        if kind == "AVERAGE":
            layer.average_count_excludes_padding = not at.get("count_include_pad", False)
        return layer.get_output(0)
    return convert


def _trt_global_pool(trt, network, a, at, weights):
    return network.add_reduce(a[0], trt.ReduceOperation.AVG, 0b1100, True).get_output(0)


def _trt_tensor(network, value, like):
    """A network tensor as it is; a plain scalar as a constant broadcastable to ``like``."""
    if not isinstance(value, (int, float)):
        return value
    import numpy as np

    shape = (1,) * len(like.shape)
    return network.add_constant(shape, np.full(shape, value, np.float32)).get_output(0)


def _trt_rank(network, tensor, rank: int):
    """``tensor`` with leading dimensions of 1 up to ``rank`` (TensorRT broadcasts equal
    ranks only)."""
    shape = tuple(tensor.shape)
    if len(shape) >= rank:
        return tensor
    layer = network.add_shuffle(tensor)
    layer.reshape_dims = (1,) * (rank - len(shape)) + shape
    return layer.get_output(0)


def _trt_binary(name):
    def convert(trt, network, a, at, weights):
        like = a[0] if not isinstance(a[0], (int, float)) else a[1]
        lhs, rhs = _trt_tensor(network, a[0], like), _trt_tensor(network, a[1], like)
        rank = max(len(lhs.shape), len(rhs.shape))
        return network.add_elementwise(_trt_rank(network, lhs, rank),
                                       _trt_rank(network, rhs, rank),
                                       getattr(trt.ElementWiseOperation, name)).get_output(0)
    return convert


def _trt_unary(kind, name):
    def convert(trt, network, a, at, weights):
        if kind == "activation":
            return network.add_activation(a[0], getattr(trt.ActivationType,
                                                        name)).get_output(0)
        return network.add_unary(a[0], getattr(trt.UnaryOperation, name)).get_output(0)
    return convert


def _trt_clip(trt, network, a, at, weights):
    layer = network.add_activation(a[0], trt.ActivationType.CLIP)
    layer.alpha, layer.beta = float(a[1]), float(a[2])
    return layer.get_output(0)


def _trt_softmax(trt, network, a, at, weights):  # noqa: ARG001
    layer = network.add_softmax(a[0])
    layer.axes = 1 << (int(at["axis"]) % len(a[0].shape))
    return layer.get_output(0)


def _trt_concat(trt, network, a, at, weights):  # noqa: ARG001
    layer = network.add_concatenation(list(a[0]))
    layer.axis = int(at["axis"]) % len(a[0][0].shape)
    return layer.get_output(0)


def _trt_split(trt, network, a, at, weights):  # noqa: ARG001
    shape = list(a[0].shape)
    axis = int(at["axis"]) % len(shape)
    outputs, start = [], 0
    for out in at["outputs"]:
        begin = [0] * len(shape)
        begin[axis] = start
        outputs.append(network.add_slice(a[0], begin, out["shape"], [1] * len(shape))
                       .get_output(0))
        start += out["shape"][axis]
    return outputs


def _trt_reshape(trt, network, a, at, weights):  # noqa: ARG001
    layer = network.add_shuffle(a[0])
    layer.reshape_dims = tuple(int(d) for d in a[1])
    return layer.get_output(0)


def _trt_transpose(trt, network, a, at, weights):
    layer = network.add_shuffle(a[0])
    layer.first_transpose = trt.Permutation([int(x) for x in at["axes"]])
    return layer.get_output(0)


def _trt_slice(trt, network, a, at, weights):  # noqa: ARG001
    shape = list(a[0].shape)
    begin, size, stride = [0] * len(shape), list(shape), [1] * len(shape)
    steps = a[4] if len(a) > 4 else [1] * len(a[1])
    for axis, b, e, s in zip(a[1], a[2], a[3], steps):
        axis = int(axis) % len(shape)
        e = min(int(e), shape[axis])
        begin[axis], stride[axis] = int(b), int(s)
        size[axis] = max(0, (e - int(b) + int(s) - 1) // int(s))
    return network.add_slice(a[0], begin, size, stride).get_output(0)


def _trt_resize(trt, network, a, at, weights):
    layer = network.add_resize(a[0])
    layer.shape = tuple(list(a[0].shape[:2]) + [int(s) for s in a[1]])
    layer.resize_mode = trt.InterpolationMode.NEAREST if at["method"] == \
        "nearest_neighbor" else trt.InterpolationMode.LINEAR
    mode = at["coordinate_transformation_mode"]
    layer.coordinate_transformation = {
        "asymmetric": trt.ResizeCoordinateTransformation.ASYMMETRIC,
        "align_corners": trt.ResizeCoordinateTransformation.ALIGN_CORNERS,
        "half_pixel": trt.ResizeCoordinateTransformation.HALF_PIXEL}[mode]
    return layer.get_output(0)


def _trt_reduce(name):
    def convert(trt, network, a, at, weights):
        rank = len(a[0].shape)
        mask = sum(1 << (int(x) % rank) for x in _onnx_axes(at["axis"]))
        return network.add_reduce(a[0], getattr(trt.ReduceOperation, name), mask,
                                  bool(at["keepdims"])).get_output(0)
    return convert


def _trt_layer_norm(trt, network, a, at, weights):  # noqa: ARG001
    rank = len(a[0].shape)
    mask = sum(1 << (int(x) % rank) for x in _onnx_axes(at["axes"]))
    layer = network.add_normalization(a[0], a[1], a[2], mask)
    layer.epsilon = float(at["epsilon"])
    return layer.get_output(0)


TO_TENSORRT: dict[str, Callable] = {
    "relax.nn.conv2d": _trt_conv, "relax.nn.conv2d_transpose": _trt_conv_transpose,
    "relax.matmul": lambda trt, n, a, at, w: n.add_matrix_multiply(
        a[0], trt.MatrixOperation.NONE, a[1], trt.MatrixOperation.NONE).get_output(0),
    "relax.nn.max_pool2d": _trt_pool("MAX"), "relax.nn.avg_pool2d": _trt_pool("AVERAGE"),
    "relax.nn.adaptive_avg_pool2d": _trt_global_pool,
    **{op: _trt_binary(name) for op, (_, name) in BINARY.items()},
    **{op: _trt_unary(kind, name) for op, (_, kind, name) in UNARY.items()},
    "relax.clip": _trt_clip, "relax.nn.softmax": _trt_softmax, "relax.concat": _trt_concat,
    "relax.split": _trt_split, "relax.reshape": _trt_reshape,
    "relax.permute_dims": _trt_transpose, "relax.strided_slice": _trt_slice,
    "relax.image.resize2d": _trt_resize,
    **{op: _trt_reduce(name) for op, (_, name) in REDUCE.items()},
    "relax.nn.layer_norm": _trt_layer_norm,
}
