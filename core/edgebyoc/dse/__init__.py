"""MATCH's design-space exploration on Relax: workload extraction and temporal-mapping search.

``workload.extract`` turns a matched pattern's ``Workload`` into loop dimensions (``LoopNest``:
N, K, C, OY, OX, FY, FX with IY / IX derived, strides, padding, dilation, operand bit widths and
layouts). ``search.search`` finds the module's best temporal mapping (tiling, loop order, where
each operand's L1 buffer is filled, single or double buffering) under its memory capacity,
priced by the plugin's ``edgebyoc_cost`` hook; ``search.exhaustive`` enumerates the same space
without pruning, the reference the search is tested against.
"""

from .search import Schedule, SearchResult, exhaustive, search, spatial_unrolling
from .workload import CORE_LAYER_KINDS, LayerKind, LoopNest, extract

__all__ = ["CORE_LAYER_KINDS", "LayerKind", "LoopNest", "Schedule", "SearchResult", "exhaustive", "extract", "search",
           "spatial_unrolling"]
