"""A numpy interpreter of the core's BYOC JSON graphs: the runtime of the test plugins.

It is deliberately independent of TVM: what it computes comes from the graph alone, so a match
with the host build shows that partitioning, serialization, constants and run-time binding are
right.
"""

import json

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view


def conv2d(x, w, attrs, exact=False):
    layout, kernel_layout = attrs["data_layout"], attrs["kernel_layout"]
    if layout == "NHWC":
        x = x.transpose(0, 3, 1, 2)
    w = w.transpose([kernel_layout.index(a) for a in "OIHW"])
    top, left, bottom, right = attrs["padding"]
    x = np.pad(x, ((0, 0), (0, 0), (top, bottom), (left, right)))
    sh, sw = attrs["strides"]
    dh, dw = attrs["dilation"]
    groups = attrs["groups"]
    o, i, kh, kw = w.shape
    windows = sliding_window_view(x, ((kh - 1) * dh + 1, (kw - 1) * dw + 1), axis=(2, 3))
    windows = windows[:, :, ::sh, ::sw, ::dh, ::dw]  # n, c, oh, ow, kh, kw
    n, c, oh, ow = windows.shape[:4]
    windows = windows.reshape(n, groups, c // groups, oh, ow, kh, kw)
    w = w.reshape(groups, o // groups, i, kh, kw)
    out = np.einsum("ngchwij,gocij->ngohw", windows, w, optimize=not exact).reshape(n, o, oh, ow)
    out = out if exact else out.astype(np.float32)
    return out.transpose(0, 2, 3, 1) if layout == "NHWC" else out


def max_pool2d(x, attrs):
    layout = attrs["layout"]
    if layout == "NHWC":
        x = x.transpose(0, 3, 1, 2)
    top, left, bottom, right = attrs["padding"]
    x = np.pad(x, ((0, 0), (0, 0), (top, bottom), (left, right)), constant_values=-np.inf)
    ph, pw = attrs["pool_size"]
    sh, sw = attrs["strides"]
    out = sliding_window_view(x, (ph, pw), axis=(2, 3))[:, :, ::sh, ::sw].max(axis=(4, 5))
    return out.transpose(0, 2, 3, 1) if layout == "NHWC" else out


def quantize(x, scale):
    """TVM's R.quantize with zero point 0: round half to even, clip to int8."""
    return np.clip(np.round(x / np.float32(scale)), -128, 127).astype(np.int8)


def dequantize(q, scale):
    return q.astype(np.float32) * np.float32(scale)


OPS = {
    "relax.quantize": lambda a, attrs: quantize(a[0], a[1]),
    "relax.dequantize": lambda a, attrs: dequantize(a[0], a[1]),
    "relax.nn.conv2d": lambda a, attrs: conv2d(a[0], a[1], attrs),
    "relax.add": lambda a, attrs: a[0] + a[1],
    "relax.multiply": lambda a, attrs: a[0] * a[1],
    "relax.subtract": lambda a, attrs: a[0] - a[1],
    "relax.nn.relu": lambda a, attrs: np.maximum(a[0], 0),
    "relax.sigmoid": lambda a, attrs: 1 / (1 + np.exp(-a[0])),
    "relax.nn.max_pool2d": lambda a, attrs: max_pool2d(a[0], attrs),
    "relax.matmul": lambda a, attrs: a[0] @ a[1],
    "relax.permute_dims": lambda a, attrs: np.transpose(a[0], attrs["axes"]),
    "relax.reshape": lambda a, attrs: a[0].reshape(a[1]),
}


def integer_conv2d(q_x, s_x, q_w, s_w, attrs):
    """int8 x int8 -> exact integer accumulation, then one float32 rescale."""
    acc = conv2d(q_x.astype(np.int64), q_w.astype(np.int64), attrs, exact=True)
    return acc.astype(np.float32) * (np.float32(s_x) * np.float32(s_w))


def run_body(body, inputs, quantized=None):
    """Run a kernel's operators; ``quantized[i]`` = (int values, scale) of a dequantized input.

    A convolution whose data and weights both come straight from dequantized int8 tensors runs
    in integer arithmetic (``integer_conv2d``).
    """
    quantized = quantized or {}
    results = []
    for position, op in enumerate(body):
        refs = op["args"]
        if op["op"] == "relax.nn.conv2d" and all(kind == "param" and value in quantized
                                                 for kind, value in refs[:2]):
            (q_x, s_x), (q_w, s_w) = quantized[refs[0][1]], quantized[refs[1][1]]
            results.append(integer_conv2d(q_x, s_x, q_w, s_w, op["attrs"]))
            continue
        args = []
        for kind, value in op["args"]:
            args.append(inputs[value] if kind == "param" else results[value]
                        if kind == "op" else np.float32(value) if kind == "scalar"
                        else tuple(value))
        result = np.asarray(OPS[op["op"]](args, op["attrs"]))
        results.append(result if result.dtype == np.int8 else result.astype(np.float32))
    return results[-1]


class GraphEngine:
    """Executes one region graph; built once per artifact load by the loader."""

    builds = 0  # how many engines were built in this process (tests check the caching)

    def __init__(self, graph_json, constants):
        GraphEngine.builds += 1
        self.graph = json.loads(graph_json)
        self.constant_names = sorted(constants)

    def __call__(self, *args):
        graph = self.graph
        values = {}
        for node_index, value in zip(graph["arg_nodes"], args):
            values[node_index] = value
        dequantized = {}  # node -> (int8 values, scale) of a dequantize node's input
        for index, node in enumerate(graph["nodes"]):
            if index in values:
                continue
            inputs = [values[i] for i, _, _ in node["inputs"]]
            body = node["attrs"]["body"]
            if node["op"] == "relax.dequantize":
                dequantized[index] = (inputs[0], body[0]["args"][1][1])
            quantized = {k: dequantized[i] for k, (i, _, _) in enumerate(node["inputs"])
                         if i in dequantized}
            values[index] = run_body(body, inputs, quantized)
        outputs = [values[i] for i, _, _ in graph["heads"]]
        return outputs if len(outputs) > 1 else outputs[0]
