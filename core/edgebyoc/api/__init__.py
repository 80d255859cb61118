"""``edgebyoc.api``: the public, versioned plugin API. Plugins import this namespace only.

Everything a backend plugin needs is here, covered by ``API_VERSION`` (a plugin declares the
version it was written for in ``Target.api_version``, e.g. ``"2.5"``; undeclared counts as
2.3; the core refuses another major or a newer minor and says what changed). Every other
module of the core is private to plugins and may change without notice; one allow-list
(``[tool.edgebyoc] plugin_imports`` in pyproject.toml, checked by scripts/lint_imports.py)
keeps plugins inside this namespace. Names exported until 2.3 and no longer listed stay
importable with a ``DeprecationWarning`` until 3.0.

- ``edgebyoc.api``: ``hookimpl`` (the marker of hook implementations, see
  ``edgebyoc.hookspecs`` for the hooks), the target data model (``Target``, ``ExecModule``,
  ``MemoryLevel``, ``TargetOption``, ``PatternEntry``, ``Workload``, ``Cost``,
  ``ApiBinding``, ``CodegenContext``, ``Region``, ``CodegenOutput``, ...) and the errors a
  plugin raises (``CompileError``, ``TargetError``, ``PluginError``); since 2.6 the cost
  constants ``edgebyoc calibrate`` may fit (``CalibrationParameter``, declared in
  ``Target.calibration``), ``calibrated_constants(target, options)``, their values in force,
  and ``Calibration``, the calibration file a plugin's own measuring tool writes.
- ``edgebyoc.api.regions``: a region as plain values: its argument layout, shapes, dtypes and
  attributes, the BYOC JSON graph with its schema, the TVM FFI wrappers of generated C.
- ``edgebyoc.api.match``: MATCH-style targets: loop nests, the schedule search, the integer
  layer, the generic layer template, API bindings and the core's host emulation.
- ``edgebyoc.api.quant``: int8 models: integerization, requantization arithmetic, the
  ``Rounding`` modes, patterns of integer layers and the int8 ``import`` passes.
- ``edgebyoc.api.testing``: the conformance suite and helpers for a plugin's tests.

A minimal plugin::

    >>> from edgebyoc.api import ExecModule, Target, hookimpl
    >>> @hookimpl
    ... def edgebyoc_targets():
    ...     return [Target("mychip", "my edge SoC", modules=(ExecModule("accel"),))]
    >>> edgebyoc_targets()[0].modules[0].name
    'accel'
"""

from ..calibration import Calibration, calibrated_constants
from ..errors import CompileError, PluginError, TargetError
from ..hookspecs import hookimpl
from ..target import (API_VERSION, ApiBinding, Availability, CalibrationParameter,
                      CodegenContext, CodegenOutput,
                      Composite, Cost, ExecModule, MemoryLevel, OutputKind, PatternEntry,
                      QuantizationSpec, Region, RowWindow, RuntimeLoader, Target, TargetOption,
                      Workload)
from ._deprecated import deprecated_names

__all__ = ["API_VERSION", "ApiBinding", "Availability", "Calibration", "CalibrationParameter",
           "CodegenContext", "CodegenOutput",
           "CompileError", "Composite", "Cost", "ExecModule", "MemoryLevel",
           "OutputKind", "PatternEntry", "PluginError", "QuantizationSpec", "Region", "RowWindow",
           "RuntimeLoader", "Target", "TargetError", "TargetOption", "Workload",
           "calibrated_constants", "hookimpl"]

__getattr__ = deprecated_names(__name__, {"FrozenMap": "edgebyoc.target",
                                          "api_major": "edgebyoc.target",
                                          "EdgebyocError": "edgebyoc.errors"})
