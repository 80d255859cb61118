"""Small ONNX model builders with seeded random weights, for tests and benchmarks.

The networks are built with ``onnx.helper`` only (no torch), so any environment that can import
edgebyoc can build them. Shapes follow the published architectures; weights are random, which is
all a compiler test needs. Batch norm is folded into the convolutions, as exporters do for
inference graphs.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 17


class GraphBuilder:
    """Accumulates nodes and initializers; names every value uniquely."""

    def __init__(self, seed: int = 0):
        self.rng = np.random.default_rng(seed)
        self.nodes: list[onnx.NodeProto] = []
        self.initializers: list[onnx.TensorProto] = []
        self._counter = 0

    def name(self, prefix: str) -> str:
        self._counter += 1
        return f"{prefix}_{self._counter}"

    def const(self, array: np.ndarray, prefix: str = "w") -> str:
        name = self.name(prefix)
        self.initializers.append(numpy_helper.from_array(array, name))
        return name

    def op(self, op_type: str, inputs: list[str], **attrs) -> str:
        out = self.name(op_type.lower())
        self.nodes.append(helper.make_node(op_type, inputs, [out], name=out, **attrs))
        return out

    def conv(self, x: str, cin: int, cout: int, kernel: int, stride: int = 1, groups: int = 1,
             relu: bool = True, relu6: bool = False, sparsity: float = 0.0) -> str:
        fan_in = cin // groups * kernel * kernel
        weight = self.rng.normal(0, np.sqrt(2.0 / fan_in), (cout, cin // groups, kernel, kernel))
        if sparsity:  # unstructured pruning: a seeded random mask, scaled to keep the variance
            weight = weight * (self.rng.random(weight.shape) >= sparsity) / np.sqrt(1 - sparsity)
        bias = self.rng.normal(0, 0.1, cout)
        pad = kernel // 2
        y = self.op("Conv", [x, self.const(weight.astype(np.float32)),
                             self.const(bias.astype(np.float32), "b")],
                    kernel_shape=[kernel, kernel], strides=[stride, stride],
                    pads=[pad, pad, pad, pad], group=groups)
        if relu6:
            return self.op("Clip", [y, self.const(np.array(0, np.float32), "lo"),
                                    self.const(np.array(6, np.float32), "hi")])
        return self.op("Relu", [y]) if relu else y

    def dense(self, x: str, cin: int, cout: int) -> str:
        weight = self.rng.normal(0, np.sqrt(1.0 / cin), (cin, cout)).astype(np.float32)
        bias = self.rng.normal(0, 0.1, cout).astype(np.float32)
        return self.op("Gemm", [x, self.const(weight), self.const(bias, "b")])

    def model(self, x_name: str, x_shape: list[int], y: str, y_shape: list[int],
              graph_name: str) -> onnx.ModelProto:
        graph = helper.make_graph(
            self.nodes, graph_name,
            [helper.make_tensor_value_info(x_name, TensorProto.FLOAT, x_shape)],
            [helper.make_tensor_value_info(y, TensorProto.FLOAT, y_shape)],
            self.initializers)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)],
                                  producer_name="edgebyoc.testing")
        model.ir_version = 8
        onnx.checker.check_model(model)
        return model


def resnet18(image_size: int = 224, num_classes: int = 1000, seed: int = 0) -> onnx.ModelProto:
    """ResNet-18 (He et al.), inference form with BN folded: 11.7 M parameters at 1000 classes."""
    g = GraphBuilder(seed)
    x = g.conv("input", 3, 64, 7, stride=2)
    x = g.op("MaxPool", [x], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    cin = 64
    for stage, cout in enumerate([64, 128, 256, 512]):
        for block in range(2):
            stride = 2 if stage > 0 and block == 0 else 1
            y = g.conv(x, cin, cout, 3, stride=stride)
            y = g.conv(y, cout, cout, 3, relu=False)
            shortcut = x if stride == 1 and cin == cout else g.conv(x, cin, cout, 1, stride=stride,
                                                                   relu=False)
            x = g.op("Relu", [g.op("Add", [y, shortcut])])
            cin = cout
    x = g.op("GlobalAveragePool", [x])
    x = g.op("Flatten", [x], axis=1)
    y = g.dense(x, 512, num_classes)
    return g.model("input", [1, 3, image_size, image_size], y, [1, num_classes], "resnet18")


def mobilenet_v1(image_size: int = 224, num_classes: int = 1000, width: float = 0.25,
                 seed: int = 0) -> onnx.ModelProto:
    """MobileNetV1 (Howard et al.): a strided 3x3 convolution, then 13 depthwise-separable
    blocks (3x3 depthwise, 1x1 pointwise, ReLU), global pooling and a dense classifier; the
    MLPerf Tiny VWW network is this at width 0.25 and 96x96. The global pooling is an
    AveragePool over the whole last map (as TFLite's MobileNets have it), which int8 targets
    integerize."""
    def channels(c: int) -> int:
        return max(8, int(c * width))

    # (stride of the depthwise convolution, output channels): the paper's Table 1
    blocks = [(1, 64), (2, 128), (1, 128), (2, 256), (1, 256), (2, 512)] + [(1, 512)] * 5 + \
        [(2, 1024), (1, 1024)]
    g = GraphBuilder(seed)
    cin = channels(32)
    x = g.conv("input", 3, cin, 3, stride=2)
    for stride, c in blocks:
        x = g.conv(x, cin, cin, 3, stride=stride, groups=cin)
        x = g.conv(x, cin, channels(c), 1)
        cin = channels(c)
    side = image_size
    for stride in [2] + [s for s, _ in blocks]:
        side = (side - 1) // stride + 1
    x = g.op("AveragePool", [x], kernel_shape=[side, side], strides=[side, side])
    x = g.op("Flatten", [x], axis=1)
    y = g.dense(x, cin, num_classes)
    return g.model("input", [1, 3, image_size, image_size], y, [1, num_classes],
                   "mobilenet_v1")


def mobilenet_v2(image_size: int = 224, num_classes: int = 1000, width: float = 1.0,
                 seed: int = 0) -> onnx.ModelProto:
    """MobileNetV2 (Sandler et al.): inverted residual blocks with ReLU6, BN folded."""
    def channels(c: float) -> int:
        return max(8, int(c * width + 4) // 8 * 8)

    # (expansion t, output channels c, repeats n, first stride s), the paper's Table 2
    settings = [(1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1),
                (6, 160, 3, 2), (6, 320, 1, 1)]
    g = GraphBuilder(seed)
    cin = channels(32)
    x = g.conv("input", 3, cin, 3, stride=2, relu6=True)
    for t, c, n, s in settings:
        cout = channels(c)
        for i in range(n):
            stride = s if i == 0 else 1
            hidden = cin * t
            y = g.conv(x, cin, hidden, 1, relu6=True) if t != 1 else x
            y = g.conv(y, hidden, hidden, 3, stride=stride, groups=hidden, relu6=True)
            y = g.conv(y, hidden, cout, 1, relu=False)
            x = g.op("Add", [x, y]) if stride == 1 and cin == cout else y
            cin = cout
    last = channels(1280) if width > 1.0 else 1280
    x = g.conv(x, cin, last, 1, relu6=True)
    x = g.op("GlobalAveragePool", [x])
    x = g.op("Flatten", [x], axis=1)
    y = g.dense(x, last, num_classes)
    return g.model("input", [1, 3, image_size, image_size], y, [1, num_classes],
                   "mobilenet_v2")


def efficientnet_b0(image_size: int = 224, num_classes: int = 1000,
                    seed: int = 0) -> onnx.ModelProto:
    """EfficientNet-B0 (Tan and Le): MBConv blocks with squeeze-and-excitation (reduction 4 of
    the block's input channels) and SiLU (``x * sigmoid(x)``, as exporters write it), BN
    folded: 5.3 M parameters, 0.39 G MACs at 224x224."""
    g = GraphBuilder(seed)

    def silu(x: str) -> str:
        return g.op("Mul", [x, g.op("Sigmoid", [x])])

    def squeeze_excite(x: str, channels: int, squeezed: int) -> str:
        s = g.op("GlobalAveragePool", [x])
        s = silu(g.conv(s, channels, squeezed, 1, relu=False))
        s = g.op("Sigmoid", [g.conv(s, squeezed, channels, 1, relu=False)])
        return g.op("Mul", [x, s])

    # (expansion, kernel, output channels, repeats, first stride): the paper's Table 1
    settings = [(1, 3, 16, 1, 1), (6, 3, 24, 2, 2), (6, 5, 40, 2, 2), (6, 3, 80, 3, 2),
                (6, 5, 112, 3, 1), (6, 5, 192, 4, 2), (6, 3, 320, 1, 1)]
    x = silu(g.conv("input", 3, 32, 3, stride=2, relu=False))
    cin = 32
    for t, k, c, n, s in settings:
        for i in range(n):
            stride = s if i == 0 else 1
            hidden = cin * t
            y = silu(g.conv(x, cin, hidden, 1, relu=False)) if t != 1 else x
            y = silu(g.conv(y, hidden, hidden, k, stride=stride, groups=hidden, relu=False))
            y = squeeze_excite(y, hidden, max(1, cin // 4))
            y = g.conv(y, hidden, c, 1, relu=False)
            x = g.op("Add", [x, y]) if stride == 1 and cin == c else y
            cin = c
    x = silu(g.conv(x, cin, 1280, 1, relu=False))
    x = g.op("GlobalAveragePool", [x])
    x = g.op("Flatten", [x], axis=1)
    y = g.dense(x, 1280, num_classes)
    return g.model("input", [1, 3, image_size, image_size], y, [1, num_classes],
                   "efficientnet_b0")


def small_convnet(image_size: int = 16, seed: int = 0) -> onnx.ModelProto:
    """A four-layer conv net that compiles in a few seconds: the example model of quick tests."""
    g = GraphBuilder(seed)
    x = g.conv("input", 3, 8, 3)
    x = g.conv(x, 8, 16, 3, stride=2)
    x = g.op("MaxPool", [x], kernel_shape=[2, 2], strides=[2, 2])
    x = g.op("GlobalAveragePool", [x])
    x = g.op("Flatten", [x], axis=1)
    y = g.dense(x, 16, 10)
    return g.model("input", [1, 3, image_size, image_size], y, [1, 10], "small_convnet")


def mobileone_s4(image_size: int = 500, num_classes: int = 1000, seed: int = 0
                 ) -> onnx.ModelProto:
    """MobileOne-S4 (Vasu et al.) in its reparameterised inference form.

    Stage widths 64 x 3.0, 128 x 3.5, 256 x 3.5, 512 x 4.0 (192, 448, 896, 2048) after a 64-channel
    stem; depths 2, 8, 10, 1; each block is a depthwise 3x3 conv then a pointwise 1x1 conv, each
    with bias and ReLU; squeeze-and-excitation (global average pool, 1x1 reduce to 1/16 with ReLU,
    1x1 expand with sigmoid, scale) in the last 5 blocks of stage 3 and in stage 4.
    """
    g = GraphBuilder(seed)

    def block(x, cin, cout, kernel, stride, groups, se):
        y = g.conv(x, cin, cout, kernel, stride=stride, groups=groups, relu=not se)
        if se:
            squeezed = g.op("GlobalAveragePool", [y])
            squeezed = g.conv(squeezed, cout, max(1, int(cout * 0.0625)), 1)
            squeezed = g.conv(squeezed, max(1, int(cout * 0.0625)), cout, 1, relu=False)
            y = g.op("Relu", [g.op("Mul", [y, g.op("Sigmoid", [squeezed])])])
        return y

    x = block("input", 3, 64, 3, 2, 1, False)
    cin = 64
    for width, depth, se_blocks in ((192, 2, 0), (448, 8, 0), (896, 10, 5), (2048, 1, 1)):
        for index in range(depth):
            se = index >= depth - se_blocks
            x = block(x, cin, cin, 3, 2 if index == 0 else 1, cin, se)
            x = block(x, cin, width, 1, 1, 1, se)
            cin = width
    x = g.op("GlobalAveragePool", [x])
    x = g.op("Flatten", [x], axis=1)
    y = g.dense(x, cin, num_classes)
    return g.model("input", [1, 3, image_size, image_size], y, [1, num_classes], "mobileone_s4")


def resnet50(image_size: int = 224, num_classes: int = 1000, sparsity: float = 0.0,
             seed: int = 0) -> onnx.ModelProto:
    """ResNet-50 (bottleneck blocks 3-4-6-3), BN folded; ``sparsity`` prunes every conv's
    weights with a seeded unstructured mask (the stem and the classifier stay dense)."""
    g = GraphBuilder(seed)
    x = g.conv("input", 3, 64, 7, stride=2)
    x = g.op("MaxPool", [x], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    cin = 64
    for stage, (width, blocks) in enumerate(((64, 3), (128, 4), (256, 6), (512, 3))):
        for block in range(blocks):
            stride = 2 if stage > 0 and block == 0 else 1
            y = g.conv(x, cin, width, 1, sparsity=sparsity)
            y = g.conv(y, width, width, 3, stride=stride, sparsity=sparsity)
            y = g.conv(y, width, width * 4, 1, relu=False, sparsity=sparsity)
            shortcut = x if block > 0 else g.conv(x, cin, width * 4, 1, stride=stride,
                                                  relu=False, sparsity=sparsity)
            x = g.op("Relu", [g.op("Add", [y, shortcut])])
            cin = width * 4
    x = g.op("GlobalAveragePool", [x])
    x = g.op("Flatten", [x], axis=1)
    y = g.dense(x, cin, num_classes)
    return g.model("input", [1, 3, image_size, image_size], y, [1, num_classes], "resnet50")


class _TransformerBuilder(GraphBuilder):
    """``GraphBuilder`` with the blocks of a pre-norm transformer encoder, in the operators
    PyTorch's ONNX exporter writes for them (opset 17): ``LayerNormalization``, ``MatMul`` +
    ``Add`` linear layers, multi-head attention through ``Reshape`` / ``Transpose`` /
    ``MatMul`` / ``Softmax``, and the ``Erf`` form of GELU."""

    def linear(self, x: str, cin: int, cout: int) -> str:
        weight = self.rng.normal(0, np.sqrt(1.0 / cin), (cin, cout)).astype(np.float32)
        bias = self.rng.normal(0, 0.02, cout).astype(np.float32)
        return self.op("Add", [self.op("MatMul", [x, self.const(weight)]), self.const(bias, "b")])

    def layer_norm(self, x: str, dim: int) -> str:
        scale = (1 + self.rng.normal(0, 0.1, dim)).astype(np.float32)
        bias = self.rng.normal(0, 0.1, dim).astype(np.float32)
        return self.op("LayerNormalization", [x, self.const(scale, "g"), self.const(bias, "b")],
                       axis=-1, epsilon=1e-6)

    def gelu(self, x: str) -> str:
        root2 = self.const(np.array(np.sqrt(2.0), np.float32), "c")
        one, half = (self.const(np.array(v, np.float32), "c") for v in (1.0, 0.5))
        erf = self.op("Erf", [self.op("Div", [x, root2])])
        return self.op("Mul", [self.op("Mul", [x, self.op("Add", [erf, one])]), half])

    def shape(self, dims: list[int]) -> str:
        return self.const(np.array(dims, np.int64), "shape")

    def attention(self, x: str, tokens: int, dim: int, heads: int) -> str:
        head = dim // heads

        def split_heads(y):  # [1, T, D] -> [1, H, T, d]
            y = self.op("Reshape", [y, self.shape([1, tokens, heads, head])])
            return self.op("Transpose", [y], perm=[0, 2, 1, 3])

        q, k, v = (split_heads(self.linear(x, dim, dim)) for _ in range(3))
        kt = self.op("Transpose", [k], perm=[0, 1, 3, 2])
        scores = self.op("Div", [self.op("MatMul", [q, kt]),
                                 self.const(np.array(np.sqrt(head), np.float32), "c")])
        y = self.op("MatMul", [self.op("Softmax", [scores], axis=-1), v])
        y = self.op("Reshape", [self.op("Transpose", [y], perm=[0, 2, 1, 3]),
                                self.shape([1, tokens, dim])])
        return self.linear(y, dim, dim)

    def encoder_block(self, x: str, tokens: int, dim: int, heads: int, mlp: int) -> str:
        x = self.op("Add", [x, self.attention(self.layer_norm(x, dim), tokens, dim, heads)])
        y = self.linear(self.gelu(self.linear(self.layer_norm(x, dim), dim, mlp)), mlp, dim)
        return self.op("Add", [x, y])


def transformer_encoder(tokens: int = 128, dim: int = 768, heads: int = 12, mlp: int = 3072,
                        layers: int = 4, seed: int = 0) -> onnx.ModelProto:
    """A BERT-base-shaped encoder (hidden 768, 12 heads, MLP 3072) of ``layers`` pre-norm
    blocks over ``tokens`` embedded tokens: input ``input`` [1, tokens, dim] float32, output
    the last hidden states after a final layer norm."""
    g = _TransformerBuilder(seed)
    x = "input"
    for _ in range(layers):
        x = g.encoder_block(x, tokens, dim, heads, mlp)
    y = g.layer_norm(x, dim)
    return g.model("input", [1, tokens, dim], y, [1, tokens, dim], "transformer_encoder")


def vit(image_size: int = 224, patch: int = 16, dim: int = 384, depth: int = 12,
        heads: int = 6, mlp: int = 1536, num_classes: int = 1000, seed: int = 0
        ) -> onnx.ModelProto:
    """A Vision Transformer (Dosovitskiy et al.); the defaults are ViT-S/16: 16x16 patches
    embedded by a strided convolution, a class token, learned position embeddings, 12 pre-norm
    blocks of width 384 with 6 heads, the class token's final layer norm into the classifier
    (197 tokens at 224x224: an extent no power of two divides)."""
    g = _TransformerBuilder(seed)
    grid = image_size // patch
    tokens = grid * grid + 1
    weight = g.rng.normal(0, np.sqrt(1.0 / (3 * patch * patch)), (dim, 3, patch, patch))
    x = g.op("Conv", ["input", g.const(weight.astype(np.float32)),
                      g.const(g.rng.normal(0, 0.02, dim).astype(np.float32), "b")],
             kernel_shape=[patch, patch], strides=[patch, patch])
    x = g.op("Transpose", [g.op("Reshape", [x, g.shape([1, dim, grid * grid])])], perm=[0, 2, 1])
    cls = g.const(g.rng.normal(0, 0.02, (1, 1, dim)).astype(np.float32), "cls")
    x = g.op("Concat", [cls, x], axis=1)
    x = g.op("Add", [x, g.const(g.rng.normal(0, 0.02, (1, tokens, dim)).astype(np.float32),
                                "pos")])
    for _ in range(depth):
        x = g.encoder_block(x, tokens, dim, heads, mlp)
    x = g.layer_norm(x, dim)
    x = g.op("Gather", [x, g.const(np.array(0, np.int64), "index")], axis=1)
    y = g.dense(x, dim, num_classes)
    return g.model("input", [1, 3, image_size, image_size], y, [1, num_classes], "vit")
