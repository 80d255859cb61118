"""gap9 code generation: one tiled C layer function per region, through the core's MATCH
layer template, compiled against the ``host`` binding into the artifact (run and verified here)
and emitted against the ``soc`` binding (GAP9 SDK names) for the real chip."""

from __future__ import annotations

from importlib import resources

import numpy as np
from edgebyoc.codegen.external import packed_wrapper
from edgebyoc.codegen.layer import api_header, api_names, core_header, integer_layer, render_layer
from edgebyoc.quant.arith import ROUND_HALF_UP, ROUND_TFLITE
from edgebyoc.target import ApiBinding, CodegenOutput, OutputKind

ROUNDING = {"cluster": ROUND_TFLITE, "ne16": ROUND_HALF_UP}

_SOC_NAMES = {
    "cluster": {"setup": "gap9_soc_cluster_open", "shutdown": "gap9_soc_cluster_close",
                "kernel": "gap9_soc_cluster_kernel"},
    "ne16": {"setup": "gap9_soc_ne16_open", "shutdown": "gap9_soc_ne16_close",
             "kernel": "gap9_soc_ne16_kernel"},
}


def binding(module: str, flavour: str) -> ApiBinding | None:
    """The API names of ``module`` for ``flavour`` (``host``: emulation; ``soc``: GAP9 SDK)."""
    if module not in ROUNDING or flavour not in ("host", "soc"):
        return None
    if flavour == "host":
        return ApiBinding(
            flavour="host",
            platform={"setup": "gap9_host_setup", "shutdown": "gap9_host_shutdown"},
            memory={"l1_alloc": "gap9_host_l1_alloc", "l1_free": "gap9_host_l1_free",
                    "dma_copy_3d": "gap9_host_dma_copy_3d"},
            synchronization={"dma_wait": "gap9_host_dma_wait",
                             "compute_wait": "gap9_host_compute_wait"},
            computation={"kernel": f"gap9_host_{module}_kernel"},
            headers=("gap9_host.h",))
    names = _SOC_NAMES[module]
    return ApiBinding(
        flavour="soc",
        platform={"setup": names["setup"], "shutdown": names["shutdown"]},
        memory={"l1_alloc": "gap9_soc_l1_alloc", "l1_free": "gap9_soc_l1_free",
                "dma_copy_3d": "gap9_soc_dma_copy_3d"},
        synchronization={"dma_wait": "gap9_soc_dma_wait",
                         "compute_wait": f"gap9_soc_{module}_wait"},
        computation={"kernel": names["kernel"]},
        headers=("gap9_soc.h",))


def header(name: str) -> str:
    return resources.files("edgebyoc_gap9.templates").joinpath(name).read_text()


def module_weights(module: str, layer) -> np.ndarray:
    """The weights in the module's layout: K-major OHWI (cluster); NE16 pads the input
    channels of standard convolutions and dense layers to a multiple of 16."""
    w = layer.weights_ohwi()
    if module == "ne16" and layer.nest.kind in ("conv2d", "dense"):
        pad = (-w.shape[-1]) % 16
        if pad:
            w = np.pad(w, [(0, 0)] * (w.ndim - 1) + [(0, pad)])
    return np.ascontiguousarray(w, dtype=np.int8)


def layer_source(module: str, symbol: str, layer, schedule, flavour: str,
                 l1_bytes: int) -> tuple[str, np.ndarray | None]:
    """The layer function ``symbol`` with its binding for ``flavour`` and the weights it reads."""
    weights = module_weights(module, layer) if layer.nest.has_weights else None
    per_k = int(weights[0].size) if weights is not None else 0
    prefix = f"{symbol}_api"
    body = render_layer(symbol, module, layer, schedule, api_names(None, prefix), per_k,
                        ROUNDING[module], f"{layer.nest.kind} on gap9 {module}")
    bound = binding(module, flavour)
    defines = api_header(bound, prefix)
    if flavour == "host":  # one self-contained translation unit for the artifact
        defines = defines.replace('#include "gap9_host.h"', header("gap9_host.h").replace(
            '#include "edgebyoc_match.h"', core_header()))
        defines = f"#define GAP9_L1_BYTES {l1_bytes}\n" + defines
    return f"#include <stdint.h>\n#include <stddef.h>\n{defines}\n{body}", weights


def generate(module, region, schedule, context) -> CodegenOutput:
    layer = integer_layer(region)
    if schedule is None:
        raise ValueError(f"{region.symbol}: no schedule (the core's search did not run)")
    options = context.get("options", {})
    l1_bytes = int(float(options.get("l1_kb", 128)) * 1024)
    source, weights = layer_source(module.name, f"{region.symbol}_layer", layer, schedule,
                                   "host", l1_bytes)
    constant = set(region.constant_params)
    replaced, position = {}, {}
    new_values = {"weight": weights, "bias": layer.bias, "multiplier": layer.multiplier,
                  "shift": layer.shift}
    for role, index in layer.roles.items():
        if index in constant:
            value = new_values.get(role)
            replaced[index] = () if value is None else (np.ascontiguousarray(
                value, dtype=np.int8 if role == "weight" else np.int32),)
    count = 0
    for index in range(len(region.function.params)):
        position[index] = count
        count += len(replaced[index]) if index in replaced else 1
    output = count
    count += 1

    def arg(role_or_index, cast):
        index = layer.roles.get(role_or_index, role_or_index) if isinstance(role_or_index, str) \
            else role_or_index
        if isinstance(index, int) and index >= 0 and (index not in replaced or replaced[index]):
            return f"({cast})args[{position[index]}]->data"
        return "NULL"

    inputs = layer.inputs + [None]
    call = ", ".join([arg(inputs[0], "const int8_t*"),
                      arg(inputs[1], "const int8_t*") if inputs[1] is not None else "NULL",
                      arg("weight", "const int8_t*"), arg("bias", "const int32_t*"),
                      arg("multiplier", "const int32_t*"), arg("shift", "const int32_t*"),
                      f"(int8_t*)args[{output}]->data"])
    kernel = (f"\nstatic int {region.symbol}_kernel(DLTensor** args, int num_args) {{\n"
              f"  (void)num_args;\n  return {region.symbol}_layer({call});\n}}\n")
    source += packed_wrapper(region.symbol, f"{region.symbol}_kernel", count)
    source += kernel.replace("static int", "int", 1)
    return CodegenOutput(OutputKind.C_SOURCE, symbol=region.symbol, c_source=source,
                         replaced_constants=replaced)
