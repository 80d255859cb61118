"""Models for the tensorrt plugin's tests and benchmark, built with ONNX helpers (seeded).

``ssd_like``: the BYOC paper's object-detection case in small: a convolutional backbone with
class and box heads on two feature maps, box decoding (slices, exp, scales by anchors,
concatenations; MAC-free, TensorRT-able) and post-processing with operators TensorRT's table
does not take (TopK, Gather) between MAC-free TensorRT-able steps (clip, scaling).
"""

from __future__ import annotations

import numpy as np
from onnx import helper

from edgebyoc.api.testing import GraphBuilder


def ssd_like(image_size: int = 64, anchors: int = 3, classes: int = 4, keep: int = 8,
             seed: int = 0):
    """An SSD-shaped ONNX model: outputs the ``keep`` best boxes (1 x keep x 4, in pixels)
    and their scores (1 x keep)."""
    g = GraphBuilder(seed)
    x = g.conv("input", 3, 16, 3, stride=2)
    x = g.conv(x, 16, 32, 3, stride=2)
    maps = [g.conv(x, 32, 32, 3)]
    maps.append(g.conv(maps[0], 32, 48, 3, stride=2))
    scores, boxes = [], []
    for feature, channels in zip(maps, (32, 48)):
        for out, kind in ((anchors * classes, scores), (anchors * 4, boxes)):
            head = g.conv(feature, channels, out, 3, relu=False)
            head = g.op("Transpose", [head], perm=[0, 2, 3, 1])
            width = classes if kind is scores else 4
            kind.append(g.op("Reshape", [head, g.const(np.array([1, -1, width], np.int64),
                                                       "shape")]))
    scores = g.op("Sigmoid", [g.op("Concat", scores, axis=1)])
    deltas = g.op("Concat", boxes, axis=1)
    count = sum(anchors * (image_size // s) ** 2 for s in (4, 8))
    rng = np.random.default_rng(seed)
    centers = g.const(rng.random((1, count, 2)).astype(np.float32), "anchor_xy")
    sizes = g.const((0.1 + 0.3 * rng.random((1, count, 2))).astype(np.float32), "anchor_wh")

    def part(start, stop):
        return g.op("Slice", [deltas, g.const(np.array([start], np.int64), "b"),
                              g.const(np.array([stop], np.int64), "e"),
                              g.const(np.array([2], np.int64), "a")])

    xy = g.op("Add", [g.op("Mul", [part(0, 2), sizes]), centers])
    wh = g.op("Mul", [g.op("Exp", [g.op("Mul", [part(2, 4), g.const(np.float32(0.2), "s")])]),
                      sizes])
    half = g.op("Mul", [wh, g.const(np.float32(0.5), "half")])
    decoded = g.op("Concat", [g.op("Sub", [xy, half]), g.op("Add", [xy, half])], axis=2)
    best = g.op("ReduceMax", [scores], axes=[2], keepdims=0)
    top = g.name("topk")
    g.nodes.append(helper.make_node("TopK", [best, g.const(np.array([keep], np.int64), "k")],
                                    [f"{top}_v", f"{top}_i"], axis=1))
    picked = g.op("Gather", [decoded, g.op("Squeeze", [f"{top}_i", g.const(
        np.array([0], np.int64), "sq")])], axis=1)
    clipped = g.op("Clip", [picked, g.const(np.float32(0), "lo"), g.const(np.float32(1), "hi")])
    pixels = g.op("Mul", [clipped, g.const(np.float32(image_size), "px")])
    confidence = g.op("Mul", [f"{top}_v", g.const(np.float32(100), "pct")])
    model = g.model("input", [1, 3, image_size, image_size], pixels, [1, keep, 4], "ssd_like")
    model.graph.output.append(helper.make_tensor_value_info(confidence, 1, [1, keep]))
    return model
