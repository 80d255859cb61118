"""gap9 code generation: one tiled C layer function per region, through the core's MATCH
layer template, compiled against the ``host`` binding into the artifact (run and verified here)
and emitted against the ``soc`` binding (GAP9 SDK names) for the real chip."""

from __future__ import annotations

from importlib import resources

import numpy as np
from edgebyoc.codegen.cproject import expand_includes
from edgebyoc.codegen.external import packed_wrapper
from edgebyoc.codegen.layer import api_header, api_names, core_header, integer_layer, render_layer
from edgebyoc.quant.arith import ROUNDING_MODES
from edgebyoc.target import ApiBinding, CodegenOutput, OutputKind

MODULES = ("cluster", "ne16")


def rounding_of(module: str) -> int:
    """The requantization rounding mode of ``module`` (its ``requantize_rounding``)."""
    from .plugin import TARGET

    return ROUNDING_MODES[TARGET.module(module).requantize_rounding]

_SOC_NAMES = {
    "cluster": {"setup": "gap9_soc_cluster_open", "shutdown": "gap9_soc_cluster_close",
                "kernel": "gap9_soc_cluster_kernel"},
    "ne16": {"setup": "gap9_soc_ne16_open", "shutdown": "gap9_soc_ne16_close",
             "kernel": "gap9_soc_ne16_kernel"},
}


def binding(module: str, flavour: str) -> ApiBinding | None:
    """The API names of ``module`` for ``flavour`` (``host``: emulation; ``soc``: GAP9 SDK)."""
    if module not in MODULES or flavour not in ("host", "soc"):
        return None
    if flavour == "host":
        return ApiBinding(
            flavour="host",
            platform={"setup": "gap9_host_setup", "shutdown": "gap9_host_shutdown"},
            memory={"l1_alloc": "gap9_host_l1_alloc", "l1_free": "gap9_host_l1_free",
                    "dma_in_3d": "gap9_host_dma_copy_3d", "dma_out_3d": "gap9_host_dma_copy_3d"},
            synchronization={"dma_wait": "gap9_host_dma_wait",
                             "compute_wait": "gap9_host_compute_wait"},
            computation={"kernel": f"gap9_host_{module}_kernel"},
            headers=("gap9_host.h",))
    names = _SOC_NAMES[module]
    return ApiBinding(
        flavour="soc",
        platform={"setup": names["setup"], "shutdown": names["shutdown"]},
        memory={"l1_alloc": "gap9_soc_l1_alloc", "l1_free": "gap9_soc_l1_free",
                "dma_in_3d": "gap9_soc_dma_in_3d", "dma_out_3d": "gap9_soc_dma_out_3d"},
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
    """The layer function ``symbol`` with its binding for ``flavour``, as one self-contained
    translation unit, and the weights it reads."""
    weights = module_weights(module, layer) if layer.nest.has_weights else None
    files = layer_files(module, symbol, layer, schedule, l1_bytes, weights)
    return translation_unit(files, symbol, flavour), weights


def translation_unit(files: dict[str, str], symbol: str, flavour: str) -> str:
    """``layers/<symbol>.c`` of ``files`` with every header inlined (``flavour``'s binding)."""
    return expand_includes(files[f"layers/{symbol}.c"],
                           {**files, "include/edgebyoc_match.h": core_header()},
                           ["", "include/", f"bindings/{flavour}/"])


def layer_files(module: str, symbol: str, layer, schedule, l1_bytes: int,
                weights: np.ndarray | None, entry: str = "") -> dict[str, str]:
    """The project files of one layer: ``layers/<symbol>.c`` (flavour-independent: generic API
    names only, plus ``entry`` code), its API binding per flavour under ``bindings/host`` and
    ``bindings/soc``, and the gap9 platform headers under ``include/``. ``weights`` are the
    layer's weights in the module's layout (``module_weights``), ``None`` without weights."""
    per_k = int(weights[0].size) if weights is not None else 0
    prefix = f"{symbol}_api"
    body = render_layer(symbol, module, layer, schedule, api_names(prefix), per_k,
                        rounding_of(module), f"{layer.nest.kind} on gap9 {module}")
    return {
        f"layers/{symbol}.c": (f"#include <stdint.h>\n#include <stddef.h>\n"
                               f'#include "{prefix}.h"\n\n{body}{entry}'),
        f"bindings/host/{prefix}.h": (f"#ifndef GAP9_L1_BYTES\n#define GAP9_L1_BYTES {l1_bytes}\n"
                                      f"#endif\n" + api_header(binding(module, "host"), prefix)),
        f"bindings/soc/{prefix}.h": api_header(binding(module, "soc"), prefix),
        "include/gap9_host.h": header("gap9_host.h"),
        "include/gap9_soc.h": header("gap9_soc.h"),
    }


def generate(module, region, schedule, context) -> CodegenOutput:
    layer = integer_layer(region)
    if schedule is None:
        raise ValueError(f"{region.symbol}: no schedule (the core's search did not run)")
    options = context.get("options", {})
    l1_bytes = int(float(options.get("l1_kb", 128)) * 1024)
    weights = module_weights(module.name, layer) if layer.nest.has_weights else None
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
            return f"({cast})data[{position[index]}]"
        return "NULL"

    inputs = layer.inputs + [None]
    call = ", ".join([arg(inputs[0], "const int8_t*"),
                      arg(inputs[1], "const int8_t*") if inputs[1] is not None else "NULL",
                      arg("weight", "const int8_t*"), arg("bias", "const int32_t*"),
                      arg("multiplier", "const int32_t*"), arg("shift", "const int32_t*"),
                      f"(int8_t*)data[{output}]"])
    symbol = region.symbol
    entry = (f"\n/* the region's entry: data = its arguments' and output's data pointers */\n"
             f"#ifdef __cplusplus\nextern \"C\" int {symbol}_entry(void* const* data);\n#endif\n"
             f"int {symbol}_entry(void* const* data) {{\n  return {symbol}_layer({call});\n}}\n")
    files = layer_files(module.name, f"{symbol}_layer", layer, schedule, l1_bytes, weights,
                        entry)
    source = translation_unit(files, f"{symbol}_layer", "host")
    kernel = (f"\nint {symbol}_kernel(DLTensor** args, int num_args) {{\n"
              f"  void* data[{count}];\n  int i;\n"
              f"  for (i = 0; i < num_args && i < {count}; ++i)\n"
              f"    data[i] = (char*)args[i]->data + args[i]->byte_offset;\n"
              f"  return {symbol}_entry(data);\n}}\n")
    source += packed_wrapper(symbol, f"{symbol}_kernel", count) + kernel
    return CodegenOutput(OutputKind.C_SOURCE, symbol=symbol, c_source=source,
                         replaced_constants=replaced, c_entry=f"{symbol}_entry",
                         project_files=files)


SDK_CMAKE = """# {name}: the deployable network for the GAP9 SDK (generated by edgebyoc; CMake flow of
# the SDK, `soc` binding: PMSIS cluster DMA and team, NE16 jobs). Not built on this machine (no
# SDK): the host-emulation build of the same sources is the Makefile.
# Link the library into your application and call edgebyoc_network_run() from the cluster
# entry (network.h: inputs, outputs, arena size).
cmake_minimum_required(VERSION 3.19)
include($ENV{{GAP_SDK_HOME}}/utils/cmake/setup.cmake)
project(edgebyoc_network C)
add_library(edgebyoc_network STATIC
{sources})
target_include_directories(edgebyoc_network PUBLIC
    ${{CMAKE_CURRENT_LIST_DIR}} ${{CMAKE_CURRENT_LIST_DIR}}/include
    ${{CMAKE_CURRENT_LIST_DIR}}/bindings/soc)
target_compile_options(edgebyoc_network PRIVATE -O3 -Wall -Wextra)
"""


def sdk_build_files(target, options, sources) -> dict[str, str]:
    """The GAP9 SDK build file of the deployable project (``edgebyoc_project_files``)."""
    listed = "".join(f"    ${{CMAKE_CURRENT_LIST_DIR}}/{s}\n" for s in sources)
    return {"CMakeLists.txt": SDK_CMAKE.format(name=target.name, sources=listed)}
