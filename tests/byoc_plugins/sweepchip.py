"""Test plugin for sweeps: one target with options that change its cost model.

``sweepchip``: module ``graph`` (JSON graph run by the numpy engine) takes conv + bias + relu;
its cost is ``macs / lanes + 100`` cycles, the host's ``4 * macs + elements`` cycles, at
100 MHz, so MACs per cycle grows with the option ``lanes``. ``stall_s`` makes the compile
sleep that long (a point that times out); with ``SWEEPCHIP_STALL_MARKERS`` set to a folder, a
stalling compile first writes a file there (so a test knows the point is running).
"""

import os
import time
from pathlib import Path

from tvm.relax.dpl import is_const, is_op, wildcard

from edgebyoc.api import (CodegenOutput, Cost, ExecModule, OutputKind, PatternEntry,
                          RuntimeLoader, Target, TargetOption, hookimpl)
from edgebyoc.api.regions import region_json

from numpy_engine import GraphEngine

GRAPH = ExecModule("graph", "numpy graph engine", output_kind=OutputKind.JSON_GRAPH)
TARGET = Target("sweepchip", "a numpy graph engine whose width is an option", modules=(GRAPH,),
                clock_hz=100e6,
                options=(TargetOption("lanes", int, 4, "MACs per cycle", minimum=1, maximum=64),
                         TargetOption("stall_s", float, 0.0, "seconds to sleep while "
                                      "compiling", minimum=0.0)))


@hookimpl
def edgebyoc_targets():
    return [TARGET]


@hookimpl
def edgebyoc_patterns(target, module, options):
    markers = os.environ.get("SWEEPCHIP_STALL_MARKERS")
    if markers and options["stall_s"] > 0:
        (Path(markers) / f"stalling-{os.getpid()}").write_text("")
    time.sleep(options["stall_s"])
    conv = is_op("relax.nn.conv2d")(wildcard(), is_const())
    relu = is_op("relax.nn.relu")(is_op("relax.add")(conv, is_const()))
    return [PatternEntry("conv2d_bias_relu", relu, {"conv": conv})]


@hookimpl
def edgebyoc_cost(target, module, workload, options):
    return Cost(workload.macs / options["lanes"] + 100)


@hookimpl
def edgebyoc_host_cost(target, workload):
    elements = 1
    for extent in workload.output[0]:
        elements *= extent
    return Cost(4 * workload.macs + elements)


@hookimpl
def edgebyoc_codegen(target, module, region):
    return CodegenOutput(OutputKind.JSON_GRAPH, region.symbol, graph_json=region_json(region),
                         loader_kind="sweepchip.numpy")


@hookimpl
def edgebyoc_runtime_loaders():
    return [RuntimeLoader("sweepchip.numpy", GraphEngine)]
