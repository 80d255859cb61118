"""Run-time binding of JSON-graph and blob regions to their plugins' loaders.

Each such region is called by the host code as a destination-passing packed function named by
its symbol. At artifact load the core asks the owning plugin for its ``RuntimeLoader`` of the
region's ``loader_kind``, builds the engine once (``load(payload, constants)``) and registers a
packed function under the symbol that converts the arguments to numpy, runs the engine and writes
the outputs in place.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping

import numpy as np

from ..errors import PLUGIN_FAULTS, ArtifactError, EdgebyocError, PluginError, first_line
from ..target import RuntimeLoader


@dataclass(frozen=True)
class ExternalRegion:
    """What the artifact records about one JSON / blob region (``manifest["external"]``)."""

    symbol: str
    module: str
    kind: str
    loader_kind: str
    file: str
    constants: tuple[str, ...]
    num_outputs: int

    def to_dict(self) -> dict[str, Any]:
        return {"symbol": self.symbol, "module": self.module, "kind": self.kind,
                "loader_kind": self.loader_kind, "file": self.file,
                "constants": list(self.constants), "num_outputs": self.num_outputs}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "ExternalRegion":
        return cls(data["symbol"], data["module"], data["kind"], data["loader_kind"],
                   data["file"], tuple(data["constants"]), int(data["num_outputs"]))


def loaders_for(registry, target_name: str) -> dict[str, RuntimeLoader]:
    """The runtime loaders of the plugin owning ``target_name``, by kind."""
    found: dict[str, RuntimeLoader] = {}
    for item in registry.call(target_name, "edgebyoc_runtime_loaders") or []:
        for loader in (item if isinstance(item, (list, tuple)) else [item]):
            if not isinstance(loader, RuntimeLoader):
                raise PluginError(f"target {target_name!r}: edgebyoc_runtime_loaders returned "
                                  f"a {type(loader).__name__}, not a RuntimeLoader")
            found[loader.kind] = loader
    return found


def bind_regions(regions: list[ExternalRegion], payloads: Mapping[str, Any],
                 constants: Mapping[str, np.ndarray],
                 loaders: Mapping[str, RuntimeLoader]) -> dict[str, Callable]:
    """Build every region's engine once and register its packed function; returns the engines."""
    import tvm

    engines = {}
    for region in regions:
        loader = loaders.get(region.loader_kind)
        if loader is None:
            raise ArtifactError(f"region {region.symbol} needs the runtime loader "
                                f"{region.loader_kind!r}, which no active plugin provides "
                                f"(known: {', '.join(loaders) or 'none'})")
        try:
            engine = loader.load(payloads[region.symbol],
                                 {name: constants[name] for name in region.constants})
        except PLUGIN_FAULTS as err:
            raise PluginError(f"loader {region.loader_kind!r} failed on region {region.symbol}: "
                              f"{type(err).__name__}: {first_line(err)}") from err
        engines[region.symbol] = engine
        tvm.register_global_func(region.symbol, _packed(region, engine), override=True)
    return engines


def _packed(region: ExternalRegion, engine: Callable) -> Callable:
    def call(*args):
        inputs = [a.numpy() for a in args[: len(args) - region.num_outputs]]
        outputs = args[len(args) - region.num_outputs:]
        try:
            results = engine(*inputs)
        except PLUGIN_FAULTS as err:  # surfaces through the VM as one error
            raise EdgebyocError(f"region {region.symbol}: the {region.loader_kind} engine "
                                f"failed: {type(err).__name__}: {first_line(err)}") from err
        if region.num_outputs == 1 and not isinstance(results, (list, tuple)):
            results = [results]
        for out, value in zip(outputs, results):
            value = np.asarray(value)
            if tuple(value.shape) != tuple(out.shape):
                raise EdgebyocError(f"region {region.symbol}: engine output shape "
                                    f"{list(value.shape)}, expected {list(out.shape)}")
            out.copyfrom(np.ascontiguousarray(value.astype(out.dtype, copy=False)))

    return call
