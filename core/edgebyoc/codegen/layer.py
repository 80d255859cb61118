"""MATCH-style layer code generation: an integerized region as one tiled C layer function.

``integer_layer`` reads a one-layer region of an integerized model (``edgebyoc.quant``): which
region parameters are activations, weights, bias, requantization multipliers / shifts and
parameters, with their compile-time values. ``render_layer`` fills the core's generic layer
template (``match_layer.c.mako``, MATCH's Fig. 3) with the layer, the schedule from
``edgebyoc.dse`` and the module's API names. ``api_header`` writes an ``ApiBinding`` as the
``#define`` header that binds the generic names for one flavour, so the same layer code
compiles against the ``host`` and the ``soc`` binding.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from importlib import resources
from typing import Any

import numpy as np
import tvm
from tvm import relax

from ..dse import LoopNest, extract
from ..quant.integerize import QADD, REQUANTIZE
from .render import render_core_template

KIND_CODES = {"conv2d": 0, "depthwise": 1, "dense": 2, "add": 3, "pool": 4}  # pool: average
#: the generic API names the layer template calls (MATCH's four families)
GENERIC_APIS = {"platform": ("setup", "shutdown"), "memory": ("l1_alloc", "l1_free",
                                                              "dma_in_3d", "dma_out_3d"),
                "synchronization": ("dma_wait", "compute_wait"), "computation": ("kernel",)}


@dataclass
class IntegerLayer:
    """One integer layer of a region, with the region parameter each operand comes from."""

    nest: LoopNest
    inputs: list[int]  # region parameter indices of the activations (1, or 2 for add)
    roles: dict[str, int] = field(default_factory=dict)  # weight / bias / mult / shift / ...
    weight: np.ndarray | None = None
    kernel_layout: str = ""
    bias: np.ndarray | None = None
    multiplier: np.ndarray | None = None
    shift: np.ndarray | None = None
    zp_in: int = 0
    zp_out: int = 0
    low: int = -128
    high: int = 127
    add_params: np.ndarray | None = None

    def weights_ohwi(self) -> np.ndarray:
        """The weights as int8 [K][FY][FX][C] (depthwise: C = 1; dense: [K][C])."""
        w = self.weight
        if self.nest.kind == "dense":
            return np.ascontiguousarray(w.T).astype(np.int8)
        layout = self.kernel_layout
        if self.nest.kind == "depthwise":
            channel, other = ("O", "I") if w.shape[layout.index("O")] == self.nest.K \
                else ("I", "O")
            w = np.transpose(w, [layout.index(a) for a in (channel, "H", "W", other)])
            return np.ascontiguousarray(w.reshape(w.shape[:3])).astype(np.int8)
        w = np.transpose(w, [layout.index(a) for a in "OHWI"])
        return np.ascontiguousarray(w).astype(np.int8)


def _composite_call(region):
    """The call of the region's composite function and that function."""
    calls = []

    def visit(node):
        if isinstance(node, relax.Call) and isinstance(node.op, (relax.Function, relax.Var)):
            calls.append(node)

    relax.analysis.post_order_visit(region.function.body, visit)
    bound = {}
    for block in region.function.body.blocks:
        for binding in block.bindings:
            bound[binding.var] = binding.value
    for call in calls:
        func = bound.get(call.op, call.op)
        if isinstance(func, relax.Function) and func.attrs and "Composite" in func.attrs:
            return call, func
    raise ValueError(f"region {region.symbol} has no composite function")


def integer_layer(region) -> IntegerLayer:
    """The integer layer of a one-composite region (conv2d / depthwise / dense / add)."""
    if len(region.composites) != 1:
        raise ValueError(f"region {region.symbol} holds {len(region.composites)} layers; "
                         f"one-layer regions only")
    composite = region.composites[0]
    nest = extract(composite.workload)
    if nest is None:
        raise ValueError(f"region {region.symbol}: {composite.workload.op} is not a layer")
    if composite.workload.op == "relax.nn.max_pool2d":
        raise ValueError(f"region {region.symbol}: max pooling has no integer layer form yet")
    call, func = _composite_call(region)
    params = list(region.function.params)
    where = {}  # composite parameter -> region parameter index
    for cparam, arg in zip(func.params, call.args):
        if isinstance(arg, relax.Var) and arg in params:
            where[cparam] = params.index(arg)

    def value(expr):
        if isinstance(expr, tvm.ir.expr.Constant):
            return expr.value.numpy()
        index = where.get(expr)
        return None if index is None else region.constants.get(index)

    bindings = {b.var: b.value for blk in func.body.blocks for b in blk.bindings}
    layer = IntegerLayer(nest=nest, inputs=[])
    for var, val in bindings.items():
        if not (isinstance(val, relax.Call) and isinstance(val.op, tvm.ir.Op)):
            continue
        name = val.op.name
        if name == "relax.call_tir":
            callee = val.args[0].name_hint
            args = list(val.args[1].fields)
            if callee.startswith(REQUANTIZE):
                for role, arg in zip(("bias", "multiplier", "shift", "params"), args[1:]):
                    layer.roles[role] = where.get(arg, -1)
                layer.bias, layer.multiplier, layer.shift = (value(a) for a in args[1:4])
                zp_out, low, high, _ = (int(v) for v in value(args[4]))
                layer.zp_out, layer.low, layer.high = zp_out, low, high
            elif callee.startswith(QADD):
                layer.inputs = [where[a] for a in args[:2]]
                layer.roles["params"] = where.get(args[2], -1)
                layer.add_params = value(args[2])
        elif name in ("relax.nn.conv2d", "relax.matmul"):
            layer.roles["weight"] = where.get(val.args[1], -1)
            layer.weight = value(val.args[1])
            layer.kernel_layout = str(val.attrs.kernel_layout) if name != "relax.matmul" else ""
        elif name == "relax.subtract":
            layer.roles["zero_point"] = where.get(val.args[1], -1)
            layer.zp_in = int(np.asarray(value(val.args[1])).reshape(()))
        elif name == "relax.astype" and isinstance(val.args[0], relax.Var) \
                and val.args[0] in where:
            layer.inputs = [where[val.args[0]]]
    if not layer.inputs:
        raise ValueError(f"region {region.symbol}: no activation input found")
    return layer


def layer_fields(layer: IntegerLayer, rounding: int) -> dict[str, Any]:
    n = layer.nest
    return {"kind": KIND_CODES[n.kind], "K": n.K, "C": n.C, "OY": n.OY, "OX": n.OX,
            "FY": n.FY, "FX": n.FX, "IY": n.IY, "IX": n.IX, "sy": n.stride[0],
            "sx": n.stride[1], "pad_top": n.padding[0], "pad_left": n.padding[1],
            "zp_in": layer.zp_in, "zp_out": layer.zp_out, "low": layer.low,
            "high": layer.high, "rounding": rounding}


def render_layer(symbol: str, module: str, layer: IntegerLayer, schedule, api: dict[str, str],
                 weight_bytes_per_k: int, rounding: int, description: str = "") -> str:
    """The C layer function ``symbol`` (see ``match_layer.c.mako`` for its signature)."""
    nest = layer.nest
    dims = ("K", "OY", "OX")
    sched = {"tiles": [schedule.tiles[d] for d in dims],
             "trips": [schedule.trips(d) for d in dims],
             "order": [dims.index(d) for d in schedule.order],
             "fill": dict(schedule.fill), "double_buffer": schedule.double_buffer}
    cover = {op: schedule.covered(op) for op in ("I", "W", "O")}
    rows, cols = nest.input_extent(cover["I"]["OY"], cover["I"]["OX"])
    channels = cover["I"]["K"] if nest.channelwise else nest.C
    buffers = {"I_one": rows * cols * channels, "W_k": cover["W"]["K"],
               "W_data": cover["W"]["K"] * weight_bytes_per_k,
               "O": cover["O"]["K"] * cover["O"]["OY"] * cover["O"]["OX"]}
    buffers["I"] = buffers["I_one"] * (2 if nest.kind == "add" else 1)
    buffers["W"] = (buffers["W_data"] + 12 * buffers["W_k"]) if nest.has_weights else 0
    missing = [g for names in GENERIC_APIS.values() for g in names if g not in api]
    if missing:
        raise ValueError(f"the API binding of {module} lacks {', '.join(missing)}")
    return render_core_template(
        "match_layer.c.mako", symbol=symbol, module=module, layer=layer_fields(layer, rounding),
        add_params=None if layer.add_params is None else [int(v) for v in layer.add_params],
        schedule=sched, buffers=buffers, weight_bytes_per_k=weight_bytes_per_k,
        has_weights=nest.has_weights, two_inputs=nest.kind == "add", api=api,
        description=description or f"{nest.kind} on {module}")


def api_names(prefix: str) -> dict[str, str]:
    """Generic API name -> the ``prefix``-ed name layer code calls (bound by ``api_header``)."""
    return {generic: f"{prefix}_{generic}" for names in GENERIC_APIS.values()
            for generic in names}


def api_header(binding, prefix: str) -> str:
    """``#define <prefix>_<generic> <bound name>`` for every API family of ``binding``."""
    lines = [f"/* {prefix}: API binding, flavour {binding.flavour} (generated) */"]
    lines += [f'#include "{h}"' for h in binding.headers]
    for family in GENERIC_APIS:
        for generic, bound in sorted(getattr(binding, family).items()):
            lines.append(f"#define {prefix}_{generic} {bound}")
    return "\n".join(lines) + "\n"


def core_header(name: str = "edgebyoc_match.h") -> str:
    """The text of a file the core ships beside its templates (C headers, the C project's
    harness and Makefile)."""
    return resources.files("edgebyoc.templates").joinpath(name).read_text()
