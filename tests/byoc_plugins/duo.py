"""Test plugin with every output kind and two competing modules.

Targets:
- ``duo``: module ``csrc`` (C source, a naive NCHW conv+bias+relu kernel, one pattern per region,
  20000 cycles of launch overhead then 64 MACs per cycle) and module ``graph`` (BYOC JSON graph
  run by a numpy engine, 4 cycles per MAC). Small convolutions go to ``graph``, large ones to
  ``csrc``: the crossover is near 85 k MACs.
- ``duo_tight``: ``graph`` only, regions limited to 6 kB of weights plus boundary activations.
- ``blobchip``: module ``blob``, a zlib-compressed graph as a custom binary blob.
- ``nhwcchip``: ``graph`` asking for NHWC / OHWI convolutions.
- ``qchip``: ``qgraph``, partial int8 quantization of its regions; its engine computes
  convolutions and dense layers in integer arithmetic.
"""

import zlib

from tvm.relax.dpl import is_const, is_op, wildcard

from edgebyoc.api import (CodegenOutput, Cost, ExecModule, OutputKind, PatternEntry,
                          QuantizationSpec, RuntimeLoader, Target, hookimpl)
from edgebyoc.api.regions import packed_wrapper, region_json

from numpy_engine import GraphEngine

CSRC = ExecModule("csrc", "naive C kernels", output_kind=OutputKind.C_SOURCE, max_region_ops=3)
GRAPH = ExecModule("graph", "numpy graph engine", output_kind=OutputKind.JSON_GRAPH, priority=1)
TIGHT = ExecModule("graph", "numpy graph engine, small memory",
                   output_kind=OutputKind.JSON_GRAPH, region_memory_bytes=6000)
BLOB = ExecModule("blob", "zlib blob engine", output_kind=OutputKind.BLOB)
QGRAPH = ExecModule("qgraph", "int8 numpy graph engine", output_kind=OutputKind.JSON_GRAPH,
                    quantization=QuantizationSpec("int8"))
NHWC = ExecModule("graph", "numpy graph engine, channels last",
                  output_kind=OutputKind.JSON_GRAPH,
                  layouts={"relax.nn.conv2d": ("NHWC", "OHWI")})


@hookimpl
def edgebyoc_targets():
    return [Target("duo", "C kernels and a numpy graph engine, chosen by cost",
                   modules=(CSRC, GRAPH), clock_hz=100e6),
            Target("duo_tight", "numpy graph engine with 6 kB regions", modules=(TIGHT,)),
            Target("blobchip", "zlib blob engine", modules=(BLOB,)),
            Target("nhwcchip", "numpy graph engine on NHWC / OHWI", modules=(NHWC,)),
            Target("qchip", "int8 numpy graph engine", modules=(QGRAPH,)),
            Target("cproj", "C kernels, deployed as a C project", modules=(CSRC,),
                   c_project=True)]


def _conv(layout_ok):
    conv = is_op("relax.nn.conv2d")(wildcard(), is_const())
    return conv, layout_ok


def _nchw_dense(ctx):
    conv = ctx.annotated_expr["conv"]
    return conv.attrs.data_layout == "NCHW" and conv.attrs.groups == 1


@hookimpl
def edgebyoc_patterns(target, module):
    conv = is_op("relax.nn.conv2d")(wildcard(), is_const())
    bias = is_op("relax.add")(conv, is_const())
    relu = is_op("relax.nn.relu")(bias)
    conv_bias_relu = PatternEntry("conv2d_bias_relu", relu, {"conv": conv},
                                  check=_nchw_dense if module.name == "csrc" else None)
    if module.name == "csrc":
        return [conv_bias_relu]
    matmul = is_op("relax.matmul")(wildcard(), is_const())
    table = [conv_bias_relu,
             PatternEntry("conv2d_bias", bias, {"conv": conv}),
             PatternEntry("dense_bias", is_op("relax.add")(matmul, is_const())),
             PatternEntry("max_pool2d", is_op("relax.nn.max_pool2d")(wildcard()))]
    for op in ("relu", "sigmoid"):
        name = f"relax.nn.{op}" if op == "relu" else f"relax.{op}"
        table.append(PatternEntry(op, is_op(name)(wildcard())))
    table.append(PatternEntry("permute_dims", is_op("relax.permute_dims")(wildcard())))
    table.append(PatternEntry("reshape", is_op("relax.reshape")(wildcard(), wildcard())))
    table.append(PatternEntry("scale", is_op("relax.multiply")(wildcard(), is_const())))
    return table


@hookimpl
def edgebyoc_host_cost(target, workload):
    if target.name != "duo":
        return None
    elements = 1
    for extent in workload.output[0]:
        elements *= extent
    assert workload.pattern.startswith("host.")
    return Cost(10 * workload.macs + elements)


@hookimpl
def edgebyoc_cost(target, module, workload, schedule):
    if module.name == "csrc":
        cycles = 20000 + workload.macs / 64
        return Cost(cycles, energy=workload.macs * 1.0, breakdown={"launch": 20000})
    if module.name == "graph" and target.name == "duo":
        return Cost(workload.macs / 4 + 100, energy=workload.macs * 5.0)
    return None


C_KERNEL = """
#include <dlpack/dlpack.h>
#define AT(t) ((float*)((char*)(t)->data + (t)->byte_offset))
int kernel_{symbol}(DLTensor** t, int n) {{
  const float* x = AT(t[0]); const float* w = AT(t[1]); const float* b = AT(t[2]);
  float* y = AT(t[3]);
  (void)n;
  for (int k = 0; k < {K}; ++k)
    for (int oy = 0; oy < {OH}; ++oy)
      for (int ox = 0; ox < {OW}; ++ox) {{
        float acc = b[k];
        for (int c = 0; c < {C}; ++c)
          for (int ky = 0; ky < {KH}; ++ky)
            for (int kx = 0; kx < {KW}; ++kx) {{
              int iy = oy * {SH} - {PT} + ky * {DH};
              int ix = ox * {SW} - {PL} + kx * {DW};
              if (iy >= 0 && iy < {H} && ix >= 0 && ix < {W})  /* w: OHWI, packed offline */
                acc += x[(c * {H} + iy) * {W} + ix] * w[((k * {KH} + ky) * {KW} + kx) * {C} + c];
            }}
        y[(k * {OH} + oy) * {OW} + ox] = acc > 0.0f ? acc : 0.0f;
      }}
  return 0;
}}
"""


def _c_source(region):
    (composite,) = region.composites
    attrs = composite.workload.attrs
    (_, c, h, w), _ = composite.workload.inputs[0]
    (k, _, kh, kw), _ = composite.workload.inputs[1]
    (_, _, oh, ow), _ = composite.workload.output
    code = C_KERNEL.format(symbol=region.symbol, K=k, C=c, H=h, W=w, KH=kh, KW=kw, OH=oh, OW=ow,
                           SH=attrs["strides"][0], SW=attrs["strides"][1],
                           DH=attrs["dilation"][0], DW=attrs["dilation"][1],
                           PT=attrs["padding"][0], PL=attrs["padding"][1])
    return code + packed_wrapper(region.symbol, f"kernel_{region.symbol}",
                                 len(region.function.params) + 1)


@hookimpl
def edgebyoc_codegen(target, module, region, schedule, context):
    if module.name == "csrc":
        # the kernel reads OHWI weights: transposed once here, the artifact stores only them
        weight_index = region.constant_params[0]
        ohwi = region.constants[weight_index].transpose(0, 2, 3, 1).copy()
        return CodegenOutput(OutputKind.C_SOURCE, region.symbol, c_source=_c_source(region),
                             replaced_constants={weight_index: (ohwi,)})
    if module.name == "blob":
        return CodegenOutput(OutputKind.BLOB, region.symbol,
                             blob=zlib.compress(region_json(region).encode()),
                             loader_kind="blobchip.zlib")
    return CodegenOutput(OutputKind.JSON_GRAPH, region.symbol, graph_json=region_json(region),
                         loader_kind="duo.numpy")


@hookimpl
def edgebyoc_runtime_loaders():
    return [RuntimeLoader("duo.numpy", GraphEngine),
            RuntimeLoader("blobchip.zlib",
                          lambda blob, constants: GraphEngine(zlib.decompress(blob).decode(),
                                                              constants))]
