"""MATCH-style targets (Hamdi et al.): loop nests, schedule search, the generic layer template.

A MATCH module has a memory hierarchy (``ExecModule.memory_levels``, innermost first), a
spatial mapping and a cost model (``edgebyoc_cost`` pricing a ``Schedule``). The core extracts
each matched layer's ``LoopNest`` (``extract``), searches its temporal mapping (``search``)
and hands the best ``Schedule`` to ``edgebyoc_codegen``, where ``layer_codegen`` renders the
generic layer template (``templates/match_layer.c.mako``) against the module's API bindings.

- data: ``LoopNest``, ``LayerKind`` (a module adds its own kinds through
  ``ExecModule.layer_kinds``), ``Schedule``, ``IntegerLayer``;
- search: ``search`` and ``schedule_cost`` (a module's whole cost hook around its model);
- code: ``layer_codegen`` (all of a region's codegen), ``module_weights``,
  ``slice_major_weights`` (since 2.8), ``tile_major_weights`` (since 2.9: a weight buffer
  holding one tile of the filter and / or of C), ``weight_channel_stride``, ``layer_files``,
  ``translation_unit``, ``core_file``;
- API bindings: ``host_binding`` (the core's host emulation, ``edgebyoc_match_host.h``).

The C interface of the layer template (``templates/edgebyoc_match.h``)::

    int <symbol>(const int8_t* l2_in, const int8_t* l2_in2, const int8_t* l2_w,
                 const int32_t* l2_bias, const int32_t* l2_mult, const int32_t* l2_shift,
                 int8_t* l2_out);       /* 0 on success */
    /* the computation API a binding provides, one output tile t: */
    int kernel(const edgebyoc_layer_t* L, const int8_t* in, edgebyoc_box_t ib,
               const int8_t* in2, const int8_t* w, const int32_t* bias, const int32_t* mult,
               const int32_t* shift, edgebyoc_box_t wb, int8_t* out, edgebyoc_box_t ob,
               edgebyoc_box_t t);
    /* a module with partial sums (ExecModule.accumulator_bits = 32), for layers whose input
       channels (or, with ExecModule.partial_sum_dims, filter rows / columns) are cut:
       channels c0..c0+nc of tile t into its int32 sums acc, requantized into out when last
       (edgebyoc_partial_kernel_t); a filter tile arrives as L = edgebyoc_filter_window(...):
       a layer of that filter size, its padding shifted by the tile's offset */
    int kernel_partial(const edgebyoc_layer_t* L, const int8_t* in, edgebyoc_box_t ib,
                       const int8_t* w, int w_c0, int w_cstride, const int32_t* bias,
                       const int32_t* mult, const int32_t* shift, edgebyoc_box_t wb,
                       int32_t* acc, int c0, int nc, int first, int last, int8_t* out,
                       edgebyoc_box_t ob, edgebyoc_box_t t);

Activations are NHWC int8 in L2; weights K-major OHWI with ``w_cstride`` bytes per tap (or
tile-major, ``tile_major_weights``, when the schedule copies one tile of the filter or one
slice of C at a time); bias,
multipliers and shifts int32 per output channel. See docs/plugin-guide.md for the whole
interface.

Example, a schedule search with a toy cost model::

    >>> from edgebyoc.api import Cost
    >>> nest = LoopNest("conv2d", K=32, C=16, OY=16, OX=16, FY=3, FX=3, IY=16, IX=16,
    ...                 padding=(1, 1, 1, 1))
    >>> price = lambda s: Cost(s.iterations * 100 + sum(c * b / 8 for c, b, _ in
    ...                                                 s.transfers.values()))
    >>> result = search(nest, 8 * 1024, price, {"K": 16})
    >>> result.schedule.l1_bytes <= 8 * 1024, result.schedule.tiles["K"] % 16
    (True, 0)
"""

from ..codegen.layer import (IntegerLayer, core_file, host_binding, layer_codegen, layer_files,
                             module_weights, schedule_cost, slice_major_weights,
                             tile_major_weights, translation_unit, weight_channel_stride)
from ..dse import LayerKind, LoopNest, Schedule, search
from ._deprecated import deprecated_names

__all__ = ["IntegerLayer", "LayerKind", "LoopNest", "Schedule", "core_file",
           "host_binding", "layer_codegen", "layer_files", "module_weights", "schedule_cost",
           "search", "slice_major_weights", "tile_major_weights", "translation_unit",
           "weight_channel_stride"]

__getattr__ = deprecated_names(__name__, {
    **dict.fromkeys(["GENERIC_APIS", "HOST_HEADER", "api_header", "api_names", "expand_includes",
                     "integer_layer", "layer_fields", "render_layer"], "edgebyoc.codegen.layer"),
    **dict.fromkeys(["CORE_LAYER_KINDS", "SearchResult", "exhaustive", "extract",
                     "spatial_unrolling"], "edgebyoc.dse"),
    **dict.fromkeys(["RELEVANT", "TILED_DIMS"], "edgebyoc.dse.workload")})
