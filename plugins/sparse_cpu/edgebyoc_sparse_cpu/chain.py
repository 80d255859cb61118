"""A region's convolutions in the order it runs them, and where each reads and writes.

A region of the spardr module holds one convolution or a chain of them (``MODULE``'s
``max_region_ops`` lets the partitioner merge a ResNet block's layers): its Relax function
calls one composite function a layer. ``region_layers`` reads, for each call, which region
parameter or earlier layer gives the convolution its data, weight, bias and residual, and
whether its output leaves the region; ``workspace_layout`` places the tensors that stay
inside (one buffer each) and the reconstruction buffer the layers take in turn.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import tvm
from tvm import relax

#: where an operand comes from: ("param", region parameter index) or ("layer", layer index)
Source = tuple[str, int]


@dataclass
class Layer:
    """One convolution of a region: its ``composite`` (``edgebyoc.api.Composite``), the
    ``sources`` of its operands (``"data"``, ``"weight"``, ``"bias"``, ``"residual"``; the
    last two only where the pattern has them) and ``output``: the part of the region's
    result it is (``None``: a tensor that stays inside the region)."""

    composite: object
    sources: dict[str, Source] = field(default_factory=dict)
    output: int | None = None


def _composite_calls(function) -> list[tuple[relax.Var, relax.Call, relax.Function]]:
    """(bound variable, call, composite function) of each binding of ``function`` that calls
    a composite function, in order."""
    bound = {b.var: b.value for block in function.body.blocks for b in block.bindings}
    calls = []
    for var, value in bound.items():
        if not isinstance(value, relax.Call):
            continue
        callee = bound.get(value.op, value.op)
        if isinstance(callee, relax.Function) and callee.attrs and "Composite" in callee.attrs:
            calls.append((var, value, callee))
    return calls


def _operands(callee) -> dict[str, int]:
    """The composite's parameter index of the convolution's data, weight, bias and
    residual (the operand added after the bias)."""
    index = {param: i for i, param in enumerate(callee.params)}
    ops = [(b.var, b.value) for block in callee.body.blocks for b in block.bindings
           if isinstance(b.value, relax.Call) and isinstance(b.value.op, tvm.ir.Op)]
    found: dict[str, int] = {}
    chain = set()  # the convolution and what adds to it
    for var, value in ops:
        if value.op.name == "relax.nn.conv2d":
            found["data"], found["weight"] = (index[a] for a in value.args[:2])
            chain.add(var)
        elif value.op.name == "relax.add" and any(a in chain for a in value.args):
            other = next(a for a in value.args if a not in chain)
            found["bias" if "bias" not in found else "residual"] = index[other]
            chain.add(var)
    return found


def region_layers(region) -> list[Layer]:
    """The layers of ``region`` (``edgebyoc.api.Region``) in the order its function calls
    them; ``ValueError`` for a region whose calls do not match its composites or whose
    operands come from anything but its parameters and earlier layers."""
    function = region.function
    params = {param: i for i, param in enumerate(function.params)}
    produced = {}
    layers = []
    for var, call, callee in _composite_calls(function):
        # calls of one pattern on equal shapes may share one composite function
        composite = next((c for c in region.composites if c.function.same_as(callee)), None)
        if composite is None:
            raise ValueError(f"region {region.symbol} calls a composite function it does not "
                             "hold")
        layer = Layer(composite)
        for name, inner in _operands(callee).items():
            argument = call.args[inner]
            if argument in params:
                layer.sources[name] = ("param", params[argument])
            elif argument in produced:
                layer.sources[name] = ("layer", produced[argument])
            else:
                raise ValueError(f"region {region.symbol}: the {name} of {composite.name} "
                                 "is neither a parameter nor an earlier layer's output")
        produced[var] = len(layers)
        layers.append(layer)
    result = function.body.body
    fields = list(result.fields) if isinstance(result, relax.Tuple) else [result]
    for part, value in enumerate(fields):
        if value not in produced:
            raise ValueError(f"region {region.symbol}: result {part} is no layer's output")
        layers[produced[value]].output = part
    return layers


def workspace_layout(tensor_bytes: list[int | None], reconstruction_bytes: int,
                     alignment: int = 64) -> tuple[list[int | None], int | None, int]:
    """Byte offsets in a region's workspace of the tensors that stay inside it
    (``tensor_bytes``: a layer's output size, ``None`` for an output of the region) and of the
    reconstruction buffer (``reconstruction_bytes``, 0: no layer reconstructs), each at a
    multiple of ``alignment``; returns (offsets, the reconstruction's offset, total bytes).
    A chain's tensors are few and mostly alive together, so each gets its own buffer; the
    layers run one at a time, so they share one reconstruction buffer.

    Example::

        >>> workspace_layout([100, None, 64], 200)
        ([0, None, 128], 192, 448)
    """
    offsets: list[int | None] = []
    total = 0
    for size in tensor_bytes:
        if size is None:
            offsets.append(None)
            continue
        offsets.append(total)
        total += -(-size // alignment) * alignment
    reconstruction = None
    if reconstruction_bytes:
        reconstruction = total
        total += -(-reconstruction_bytes // alignment) * alignment
    return offsets, reconstruction, total
