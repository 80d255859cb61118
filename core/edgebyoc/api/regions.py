"""A region as plain values, its BYOC JSON graph, and the wrappers of generated C.

- ``argument_layout(region, replaced_constants)``: what a generated kernel receives, in order
  (``Argument``: position, kind, parameter, shape, dtype), so no plugin does index arithmetic.
- ``shape_dtype(ty)``, ``static_shape(ty)``, ``nbytes(ty)``, ``attrs_dict(attrs)``,
  ``operator_macs(call)``: Relax types, attributes and MAC counts as Python values.
- ``region_graph(region)`` / ``region_json(region)``: the BYOC JSON form (``GRAPH_SCHEMA``,
  checked by ``check_graph``), the payload of ``OutputKind.JSON_GRAPH`` modules.
- ``packed_wrapper(symbol, kernel, num_args)``: TVM's packed signature around
  ``int kernel(DLTensor** args, int num_args)``; ``packed_entry_wrapper(symbol, entry,
  num_args)`` the same around a C project entry ``int entry(void* const* data)``.
- ``include_dirs()`` / ``compile_options(cpu)``: how the core compiles generated C.

Example::

    >>> from tvm import relax
    >>> shape_dtype(relax.TensorType((1, 16, 8, 8), "float32"))
    ((1, 16, 8, 8), 'float32')
    >>> nbytes(relax.TensorType((1, 16, 8, 8), "int8"))
    1024
"""

from ..codegen.arguments import Argument, ArgumentLayout, argument_layout
from ..codegen.external import (compile_options, include_dirs, packed_entry_wrapper,
                                packed_wrapper)
from ..codegen.json_graph import GRAPH_SCHEMA, check_graph, region_graph, region_json
from ..relax_info import attrs_dict, nbytes, operator_macs, shape_dtype, static_shape

__all__ = ["Argument", "ArgumentLayout", "GRAPH_SCHEMA", "argument_layout", "attrs_dict",
           "check_graph", "compile_options", "include_dirs", "nbytes", "operator_macs",
           "packed_entry_wrapper", "packed_wrapper", "region_graph", "region_json",
           "shape_dtype", "static_shape"]
