"""The 13 convolution layers of the SparDR paper's Table II, and model builders for them."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper, numpy_helper

#: name: (C_in, H, W, C_out, kernel, padding, stride, sparsity) as in Table II
TABLE_II = {
    "CV1": (179, 14, 14, 179, 3, 1, 1, 0.827797),
    "CV2": (179, 14, 14, 716, 1, 0, 1, 0.831005),
    "CV3": (179, 28, 28, 179, 3, 1, 2, 0.827987),
    "CV4": (2048, 7, 7, 358, 1, 0, 1, 0.881186),
    "CV5": (358, 28, 28, 716, 1, 0, 2, 0.829097),
    "CV6": (358, 7, 7, 2048, 1, 0, 1, 0.881133),
    "CV7": (44, 56, 56, 44, 1, 0, 1, 0.871384),
    "CV8": (716, 14, 14, 2048, 1, 0, 2, 0.879547),
    "CV9": (89, 28, 28, 89, 3, 1, 1, 0.832793),
    "CV10": (512, 14, 14, 512, 3, 1, 1, 0.900000),
    "CV11": (192, 40, 40, 192, 3, 1, 1, 0.890501),
    "CV12": (288, 20, 20, 288, 3, 1, 1, 0.878399),
    "CV13": (96, 80, 80, 96, 3, 1, 1, 0.928204),
}


def sparse_weight(shape, sparsity: float, rng) -> np.ndarray:
    """Random weights with a seeded unstructured mask of the given sparsity."""
    weight = rng.standard_normal(shape).astype(np.float32) * np.float32(
        np.sqrt(2.0 / np.prod(shape[1:])))
    weight[rng.random(shape) < sparsity] = 0.0
    return weight


def conv_layer(c_in: int, h: int, w: int, c_out: int, kernel: int, pad: int, stride: int,
               sparsity: float, dilation: int = 1, relu: bool = True, seed: int = 0,
               weight: np.ndarray | None = None, groups: int = 1) -> onnx.ModelProto:
    """One sparse conv (+ bias, + ReLU) as an ONNX model, input ``x`` 1 x C x H x W."""
    rng = np.random.default_rng(seed)
    weight = sparse_weight((c_out, c_in // groups, kernel, kernel), sparsity, rng) \
        if weight is None else weight
    bias = rng.standard_normal(c_out).astype(np.float32) * np.float32(0.1)
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["conv"], kernel_shape=[kernel, kernel],
                              strides=[stride, stride], pads=[pad] * 4,
                              dilations=[dilation, dilation], group=groups)]
    out = "conv"
    if relu:
        nodes.append(helper.make_node("Relu", ["conv"], ["y"]))
        out = "y"
    extent = dilation * (kernel - 1) + 1
    oh, ow = (h + 2 * pad - extent) // stride + 1, (w + 2 * pad - extent) // stride + 1
    graph = helper.make_graph(nodes, "sparse_conv",
                              [helper.make_tensor_value_info("x", 1, [1, c_in, h, w])],
                              [helper.make_tensor_value_info(out, 1, [1, c_out, oh, ow])],
                              [numpy_helper.from_array(weight, "w"),
                               numpy_helper.from_array(bias, "b")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8  # what onnxruntime, the reference executor, reads
    return model
