"""Partitioning (BYOC paper, section 3.1; MATCH, section IV-B), done once for every plugin.

    patterns   each module's pattern table, registered in TVM's pattern registry as
               ``<target>.<module>.<pattern>``
    candidates every place a module's pattern matches (and its check and op-level annotations
               accept), found with ``FuseOpsByPattern`` in a dry run
    dispatch   one candidate per layer: the largest pattern of each module, then the module whose
               cost hook predicts the least latency (or energy); ties go to module priority
    regions    adjacent chosen candidates of one module merged greedily into regions, split where
               a module limit (operators, memory) would be broken or a cycle would form; regions
               under the module's MAC threshold fall back to the host
    fuse       ``FuseOpsByPattern`` + ``MergeCompositeFunctions`` build exactly those regions

The output is the partitioned module (region functions carry ``Codegen=<target>``), the region
table and one report row per operator saying where it runs and why.
"""

from .partitioner import PartitionResult, RegionInfo, partition_module

__all__ = ["PartitionResult", "RegionInfo", "partition_module"]
