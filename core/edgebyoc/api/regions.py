"""A region as plain values, its BYOC JSON graph, and the wrappers of generated C.

- ``argument_layout(region, replaced_constants)``: what a generated kernel receives, in order
  (each argument's position, kind, parameter, shape and dtype as plain values), so no plugin
  does index arithmetic.
- ``region_graph(region)`` / ``region_json(region)``: the BYOC JSON form (``GRAPH_SCHEMA``,
  checked by ``check_graph``), the payload of ``OutputKind.JSON_GRAPH`` modules.
- ``packed_wrapper(symbol, kernel, num_args)``: TVM's packed signature around
  ``int kernel(DLTensor** args, int num_args)``.

Example::

    >>> source = packed_wrapper("mychip_r0", "mychip_r0_kernel", 3)
    >>> "int mychip_r0_kernel(DLTensor** args, int num_args);" in source
    True
    >>> check_graph({"nodes": [], "heads": []})
    ["'arg_nodes' is not a list"]
"""

from ..codegen.arguments import argument_layout
from ..codegen.external import packed_wrapper
from ..codegen.json_graph import GRAPH_SCHEMA, check_graph, region_graph, region_json
from ._deprecated import deprecated_names

__all__ = ["GRAPH_SCHEMA", "argument_layout", "check_graph", "packed_wrapper", "region_graph",
           "region_json"]

__getattr__ = deprecated_names(__name__, {
    **dict.fromkeys(["Argument", "ArgumentLayout"], "edgebyoc.codegen.arguments"),
    **dict.fromkeys(["compile_options", "include_dirs", "packed_entry_wrapper"],
                    "edgebyoc.codegen.external"),
    **dict.fromkeys(["attrs_dict", "nbytes", "operator_macs", "shape_dtype", "static_shape"],
                    "edgebyoc.relax_info")})
