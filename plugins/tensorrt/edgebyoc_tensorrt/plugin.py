"""The tensorrt target: the BYOC paper's TensorRT case study (Chen et al., section 4.1).

Naming contract: one execution module, ``trt``; one pattern per operator of TensorRT's set
(``ops.CHECKS``), ``tensorrt.trt.<op>`` (``tensorrt.trt.conv2d``, ``tensorrt.trt.add``, ...),
each with TensorRT's constraints as its check (the refusal's reason is in the report). Adjacent
matches merge greedily into regions; a region without multiply-accumulates falls back to the
host (the paper's cost function ``CalcMAC(graph) > 0``; Table 2). Each region becomes one BYOC
JSON graph (``edgebyoc.api.regions.region_graph``); its constants stay in the artifact's
metadata.

Options: ``runtime`` (``tensorrt``: engines built with the TensorRT Python API and cached on
disk; ``onnxruntime``: the same graphs as ONNX run by onnxruntime, CPU here, CUDA or TensorRT
execution providers with ``onnxruntime-gpu``), ``fp16`` (half precision at region boundaries;
TensorRT's FP16 kernels), ``max_workspace_mb`` (the builder's workspace),
``build_at_compile_time`` (build and cache the engines while compiling).
"""

from __future__ import annotations

import json

import numpy as np
from tvm.relax.dpl import is_op, wildcard

from edgebyoc.api import (Availability, CodegenOutput, ExecModule, OutputKind, PatternEntry,
                          RuntimeLoader, Target, TargetOption, hookimpl)
from edgebyoc.api.regions import region_graph
from edgebyoc.api.transforms import scalar_min_max

from . import ops
from .runtime import OnnxRuntimeEngine, TensorRTEngine, tensorrt_missing

MODULE = ExecModule("trt", "TensorRT engines built from JSON subgraphs",
                    output_kind=OutputKind.JSON_GRAPH, min_region_macs=1)
TARGET = Target(
    "tensorrt", "NVIDIA TensorRT: JSON subgraphs built into cached engines (BYOC case study)",
    modules=(MODULE,), api_version="2.4",
    options=(
        TargetOption("runtime", str, "tensorrt", "what runs the subgraphs",
                     choices=("tensorrt", "onnxruntime")),
        TargetOption("fp16", bool, False, "half precision at region boundaries and in the "
                     "engines"),
        TargetOption("max_workspace_mb", int, 1024, "TensorRT builder workspace in MB",
                     minimum=1, maximum=1 << 20),
        TargetOption("build_at_compile_time", bool, False, "build and cache the TensorRT "
                     "engines while compiling"),
    ))
LOADERS = {"tensorrt": "tensorrt.engine", "onnxruntime": "tensorrt.onnxruntime"}


@hookimpl
def edgebyoc_targets():
    return [TARGET]


@hookimpl
def edgebyoc_availability():
    reason = tensorrt_missing()
    if reason is None:
        return Availability(True)
    return Availability(True, f"TensorRT runtime missing ({reason}): compiling works, running "
                              f"needs --option runtime=onnxruntime")


def _check(ctx):
    return ops.check(ctx.matched_expr)


@hookimpl
def edgebyoc_patterns(target, module, options):
    return [PatternEntry(op.rsplit(".", 1)[1], _pattern(op), check=_check) for op in ops.CHECKS]


def _pattern(op: str):
    """``op`` with any arguments, at each arity it is called with."""
    calls = [is_op(op)(*[wildcard() for _ in range(n)]) for n in ops.arities(op)]
    pattern = calls[0]
    for other in calls[1:]:
        pattern = pattern | other
    return pattern


@hookimpl
def edgebyoc_transforms(target, stage):
    return [scalar_min_max] if stage == "pre_partition" else []


@hookimpl
def edgebyoc_codegen(target, module, region, schedule, context):
    options = context.options
    payload = json.dumps({"graph": region_graph(region),
                          "precision": "fp16" if options["fp16"] else "fp32",
                          "max_workspace_mb": options["max_workspace_mb"]})
    if options["build_at_compile_time"] and options["runtime"] == "tensorrt":
        args = [region.constants.get(i, np.zeros(p.ty.shape.values and
                                                 [int(d) for d in p.ty.shape.values],
                                                 np.float32))
                for i, p in enumerate(region.function.params)]
        TensorRTEngine(payload, {})(*args)  # builds the engine into the on-disk cache
    return CodegenOutput(OutputKind.JSON_GRAPH, region.symbol, graph_json=payload,
                         loader_kind=LOADERS[options["runtime"]])


@hookimpl
def edgebyoc_runtime_loaders():
    return [RuntimeLoader("tensorrt.engine", TensorRTEngine),
            RuntimeLoader("tensorrt.onnxruntime", OnnxRuntimeEngine)]
