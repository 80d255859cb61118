"""The data model plugins fill in: targets, execution modules, memory levels, costs, API bindings.

A *target* is a set of hardware *execution modules* (MATCH, Hamdi et al., section IV): an 8-core
cluster, a convolution accelerator, a GPU, ... Each module owns a memory hierarchy, a pattern table,
annotation predicates, a cost model, network transformations and a code generation backend. The
module's pattern table, predicates, cost model, transformations and codegen are provided through the
hooks of ``edgebyoc.hookspecs``; the static description of the target and its modules is the
dataclasses below, returned by ``edgebyoc_targets``.

Every dataclass is frozen, so plugins cannot mutate each other's data. The static descriptions
(``Target``, ``ExecModule``, ``MemoryLevel``, ``TargetOption``, ``QuantizationSpec``,
``Workload``, ``Cost``, ``ApiBinding``, ``CodegenContext``) are also hashable: their mapping
fields are stored as ``FrozenMap`` and may be used as cache keys. ``Region``, ``Composite`` and
``CodegenOutput`` carry Relax functions and numpy arrays and are not hashable.

Example, a plugin with one accelerator module::

    from edgebyoc.target import Target, ExecModule, MemoryLevel, OutputKind, TargetOption

    ACCEL = ExecModule(
        name="accel",
        description="16x16 PE array, int8",
        memory_levels=(MemoryLevel("L1", size_bytes=64 * 1024, read_bytes_per_cycle=16,
                                   write_bytes_per_cycle=16),
                       MemoryLevel("L2", size_bytes=512 * 1024, read_bytes_per_cycle=8,
                                   write_bytes_per_cycle=8)),
        output_kind=OutputKind.C_SOURCE,
    )
    TARGET = Target(name="mychip", description="My edge SoC", modules=(ACCEL,),
                    options=(TargetOption("l1_kb", int, 64, "L1 size in kB"),))
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Mapping

#: Version of the plugin contract (``edgebyoc.api``: hooks, dataclasses and helpers). A plugin
#: declares the version it was written for in ``Target.api_version``; the core loads plugins of
#: its own major version and of an equal or older minor (minor versions only add optional
#: things), and refuses another major or a newer minor with a message (``api_mismatch``).
API_VERSION = "2.10"

#: The version a plugin that declares no ``api_version`` is taken as written for: 2.3, the last
#: contract in which the field defaulted to the core's own version (so every plugin written
#: until then keeps loading).
UNDECLARED_API_VERSION = "2.3"

#: The layouts an execution module may store its image activations in
#: (``ExecModule.activation_layout``; ``"NHCW"`` is new in API 2.3).
ACTIVATION_LAYOUTS = ("NHWC", "NCHW", "NHCW")

#: What each major version changed, quoted when the core refuses a plugin of an older major.
API_CHANGES = {
    2: "plugins import only edgebyoc.api (hookimpl, data model, regions, match, quant, "
       "testing); edgebyoc_codegen receives a CodegenContext instead of a dict; MATCH "
       "helpers moved to edgebyoc.api.match and the host-emulation tile kernels into the core "
       "header edgebyoc_match_host.h",
}

#: What each minor version of the current major added, quoted when a plugin needs a newer one.
API_MINOR_CHANGES = {
    1: "Target.clock_hz and the edgebyoc_host_cost hook",
    2: "CodegenOutput.c_entry_rows and row_windows (RowWindow)",
    3: "the activation layout NHCW",
    4: "Target.api_version is declared by the plugin (undeclared: 2.3); the API lists only what "
       "plugins use (the other 2.3 names stay importable with a DeprecationWarning until 3.0)",
    5: "edgebyoc.api.testing.missing_mcu_tools, for tests that build a C project for Cortex-M "
       "or RISC-V and run it under QEMU (CompiledModel.check_on_qemu)",
    6: "Target.calibration (CalibrationParameter) and Target.default_calibration, the option "
       "calibration and edgebyoc.api.calibrated_constants: cost constants fitted to measured "
       "latencies by `edgebyoc calibrate`",
    7: "ExecModule.accumulator_bits: input channels tiled with int32 partial sums",
    8: "tiles that need not divide their dimension; layer_files(weights_slice_major=)",
    9: "ExecModule.partial_sum_dims: filter rows and columns tiled with partial sums",
    10: "ExecModule.weight_memory and CodegenOutput.resident_weights: a depth-first C "
        "project keeps a chain's weights in the module's weight memory across its row bands; "
        "Schedule.weights_resident",
}


def api_version_tuple(version: str) -> tuple[int, int]:
    """``"MAJOR.MINOR"`` as a pair of ints; ``ValueError`` naming the string otherwise."""
    parts = str(version).split(".")
    try:
        if len(parts) != 2:
            raise ValueError
        return int(parts[0]), int(parts[1])
    except ValueError as err:
        raise ValueError(f"api_version {version!r} is not of the form MAJOR.MINOR") from err


def api_major(version: str) -> int:
    """The major number of a ``"MAJOR.MINOR"`` contract version string."""
    return api_version_tuple(version)[0]


def api_mismatch(target: "Target") -> str | None:
    """Why this core cannot load ``target`` (another major, or a newer minor than
    ``API_VERSION``, with what changed), or ``None`` when it can.

    >>> api_mismatch(Target("chip", api_version="2.0")) is None
    True
    >>> print(api_mismatch(Target("chip", api_version="2.99")))  # doctest: +ELLIPSIS
    target 'chip' was written for plugin API 2.99; this edgebyoc speaks 2... (a newer minor
    version): upgrade edgebyoc (pip install 'edgebyoc>=2.99,<3')
    """
    major, minor = api_version_tuple(target.declared_api_version)
    own_major, own_minor = api_version_tuple(API_VERSION)
    head = (f"target {target.name!r} was written for plugin API {target.declared_api_version}; "
            f"this edgebyoc speaks {API_VERSION}")
    if major < own_major:
        changes = "; ".join(f"{v}.0: {API_CHANGES[v]}" for v in sorted(API_CHANGES)
                            if major < v <= own_major)
        return head + (f" (changed in {changes})" if changes else "") + \
            f": port the plugin to API {API_VERSION}"
    if major > own_major or minor > own_minor:
        return head + (" (a newer minor version)" if major == own_major
                       else " (another major version)") + \
            f": upgrade edgebyoc (pip install 'edgebyoc>={major}.{minor},<{major + 1}')"
    return None


def _freeze(value: Any) -> Any:
    """A hashable form of ``value``: mappings as sorted item tuples, lists as tuples."""
    if isinstance(value, Mapping):
        return tuple(sorted((str(k), _freeze(v)) for k, v in value.items()))
    if isinstance(value, (list, tuple)):
        return tuple(_freeze(v) for v in value)
    return value


class FrozenMap(Mapping):
    """A read-only, hashable mapping: what the data model stores its mapping fields as.

    It reads like the dict it was made from (``m["K"]``, ``m.get``, ``dict(m)``, ``==`` with a
    dict) and hashes by content, list values included::

        >>> m = FrozenMap({"OY": 8, "K": 4})
        >>> m["OY"], dict(m) == {"OY": 8, "K": 4}, m == {"K": 4, "OY": 8}
        (8, True, True)
        >>> hash(m) == hash(FrozenMap({"K": 4, "OY": 8}))
        True
    """

    __slots__ = ("_data", "_hash")

    def __init__(self, data: Mapping[Any, Any] | None = None):
        self._data = dict(data or {})
        self._hash = None

    def __getitem__(self, key):
        return self._data[key]

    # the dict's own methods, not ``Mapping``'s generic ones (each a Python call per key:
    # the schedule search reads its schedules' maps millions of times)
    def get(self, key, default=None):
        return self._data.get(key, default)

    def __contains__(self, key) -> bool:
        return key in self._data

    def keys(self):
        return self._data.keys()

    def items(self):
        return self._data.items()

    def values(self):
        return self._data.values()

    def __iter__(self) -> Iterator:
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)

    def __hash__(self) -> int:
        if self._hash is None:
            self._hash = hash(_freeze(self._data))
        return self._hash

    def __eq__(self, other) -> bool:
        return isinstance(other, Mapping) and dict(self._data) == dict(other)

    def __repr__(self) -> str:
        return repr(self._data)

    def __reduce__(self):
        return FrozenMap, (self._data,)


def _freeze_fields(obj: Any, *names: str) -> None:
    """Store the mapping fields ``names`` of a frozen dataclass as ``FrozenMap``."""
    for name in names:
        value = getattr(obj, name)
        if not isinstance(value, FrozenMap):
            object.__setattr__(obj, name, FrozenMap(value))


class OutputKind(enum.Enum):
    """What a module's code generator produces (BYOC paper, section 3.3)."""

    #: C / C++ source compiled and linked into the artifact's host library
    C_SOURCE = "c_source"
    #: a JSON graph executed at run time by a runtime loader the plugin provides
    JSON_GRAPH = "json_graph"
    #: an opaque binary blob (an engine, a command stream) with the plugin's loader
    BLOB = "blob"


@dataclass(frozen=True)
class MemoryLevel:
    """One level of a module's memory hierarchy, innermost (closest to compute) first.

    ``size_bytes`` is the capacity available to one layer; ``read_bytes_per_cycle`` and
    ``write_bytes_per_cycle`` the bandwidth towards the next outer level, as a description only:
    the core's schedule search does not price transfers itself (the plugin's ``edgebyoc_cost``
    does, from ``Schedule.transfers``), so a cost model that wants them reads them from here
    (gap9 passes its DMA's 8 B/cycle to both); ``operands`` the operands
    (``"I"`` input, ``"W"`` weights, ``"O"`` output) this level holds; ``double_buffering`` whether
    transfers into this level can overlap compute; ``size_option`` names a target option (in
    kB) that overrides ``size_bytes`` for one compile (``--option l1_kb=16``).
    """

    name: str
    size_bytes: int
    read_bytes_per_cycle: float = 1.0
    write_bytes_per_cycle: float = 1.0
    operands: tuple[str, ...] = ("I", "W", "O")
    double_buffering: bool = False
    size_option: str = ""

    def capacity(self, options: Mapping[str, Any] | None = None) -> int:
        """Bytes available for one compile: ``size_option`` (kB) if set, else ``size_bytes``."""
        if self.size_option and options and options.get(self.size_option) is not None:
            return int(float(options[self.size_option]) * 1024)
        return self.size_bytes

    def __post_init__(self):
        if self.size_bytes <= 0:
            raise ValueError(f"memory level {self.name!r}: size_bytes must be positive")


@dataclass(frozen=True)
class ExecModule:
    """A hardware execution module of a target (MATCH's "execution module").

    ``priority`` breaks cost ties between modules (higher wins); ``spatial_mapping`` gives the loop
    dimensions the module unrolls in hardware (e.g. ``{"OY": 8, "OX": 2, "K": 4}``, or
    ``{"K": 64, "C": 64}`` for a K x C systolic array): any of ``SPATIAL_DIMS`` (K, C, OY, OX,
    FY, FX) with a positive integer factor, anything else a ``ValueError`` naming the allowed
    ones. The schedule search keeps tiles of K, OY and OX multiples of their unrolling, and
    every schedule carries MATCH's unrolling rule applied to each mapped dimension
    (``Schedule.spatial``: exact, reduced parallelism or padded) for the cost hook to price
    the array's utilization (e.g. C = 48 on a 64-wide C axis runs at 48 / 64).

    Region rules (BYOC paper, section 3.1, cost-based partitioning): ``max_region_ops`` limits
    how many operators one offloaded region may hold and ``region_memory_bytes`` how many bytes of
    weights plus boundary activations it may touch (0: no limit; a region over a limit is split);
    a region with fewer than ``min_region_macs`` multiply-accumulates stays on the host (default
    1: MAC-free regions fall back, the TensorRT case study's rule; 0 offloads everything);
    ``max_region_composites`` limits the matched patterns per region (1: one layer per region,
    MATCH's granularity; 0: no limit).

    Schedule search (MATCH): a module with two memory levels or more (innermost first, the
    last one the outer memory the layer's tensors live in) gets ``edgebyoc.api.match.search``
    run for each matched layer over its inner levels (every level but the last; each holds
    the operands of its ``MemoryLevel.operands``, e.g. an activation L1 for ``I`` and ``O``
    beside a private weight memory for ``W``), with ``spatial_mapping`` as the fixed
    unrolling and the cost hook pricing every candidate schedule; the best schedule reaches
    the codegen hook. A layer no schedule fits stays on the host, and the report says so.

    Boundary processing (section 3.2): ``layouts`` asks for operator layouts, in the form of
    ``relax.transform.ConvertLayout`` (``{"relax.nn.conv2d": ["NHWC", "OHWI"]}``); the core
    converts before partitioning, so layout conversions sit at region boundaries and constant
    weights are transformed once, at compile time. ``quantization`` asks for partial quantization
    of the module's regions (see ``QuantizationSpec``).

    Integer arithmetic: ``requantize_rounding`` is how the module's hardware rounds the
    requantization f(x) = (x * M + B) >> S of integerized models (``edgebyoc.quant``):
    ``"tflite"`` (TFLite's MultiplyByQuantizedMultiplier, the default) or ``"half_up"`` (one
    shift rounding half up, as NE16 does; at most 1 LSB from TFLite's per layer). ``verify``
    builds its integer reference with each layer's rounding and names the modules that
    deviate from TFLite's.

    Layer kinds: ``layer_kinds`` adds the module's own ``edgebyoc.api.match.LayerKind``s to
    the core's (conv2d, depthwise, dense, add, pool) for workload extraction and the layer
    template (see ``LayerKind``).

    Partial sums (since API 2.7): ``accumulator_bits=32`` says the module can accumulate an
    output tile over slices of the input channels in an int32 accumulator in L1 and
    requantize it once, after the last slice. The schedule search may then tile C of conv2d
    and dense layers too (``Schedule.tiles["C"]``, the C loop innermost, the accumulator in
    ``Schedule.accumulator_bytes`` counted with the output's memory), so a layer whose
    weights for every input channel do not fit L1 still runs on the module; the layer
    template calls the binding's ``kernel_partial`` (``edgebyoc_partial_kernel_t`` in
    ``edgebyoc_match.h``; the host emulation has one) for such layers, so every flavour's
    binding must name it, and the cost hook must price ``Schedule.tile("C")`` channels per
    tile call. 0 (the default): C stays whole, as for plugins written before 2.7.
    ``partial_sum_dims`` (since API 2.9) names the reduction loops the search may then cut:
    ``("C",)`` by default; adding ``"FY"`` / ``"FX"`` lets it tile the filter rows / columns
    of conv2d layers too (MATCH's full loop nest: a layer with large filters or few input
    channels, e.g. DS-CNN's 10x4 first convolution over one channel, fits a small L1). The
    kernel then sees each filter tile as a layer of that filter size whose padding is shifted
    by the tile's offset (``edgebyoc_filter_window`` in ``edgebyoc_match.h``; the host
    emulation needs nothing more), and the cost hook prices ``Schedule.reduction_trips``
    calls per output tile of ``Schedule.tile("FY") x tile("FX")`` taps. Anything but C, FY
    and FX is a ``ValueError``. Example::

        >>> ExecModule("npu", accumulator_bits=32, partial_sum_dims=("C", "FY", "FX")
        ...            ).partial_sum_dims
        ('C', 'FY', 'FX')

    Activation layout: ``activation_layout`` is how the module's hardware stores the image
    (4-D) activations its regions read and write in the outer memory: ``"NHWC"`` (default,
    the model's channels-last layout), ``"NCHW"`` (whole channel planes) or ``"NHCW"``
    (channel planes cut in rows, rows outermost: row y of plane c at ``(y * C + c) * W``; the
    planes of one row together, so the first rows of a tensor are its first bytes, which
    lets depth-first streaming of the C project write a chain's output over its input's dead
    rows, as in NHWC). With a planar layout the core passes those tensors across the region
    boundary in it (``Region.activation_layout``): the region function takes and returns
    that layout, ``main`` permutes at boundaries with host operators and not at all between
    two regions of the layout, the schedule search counts contiguous DMA chunks for it
    (``LoopNest.layouts``) and the layer template copies channel planes into the inner
    memory (the kernel always sees a tile as channel planes). Weights keep the layout the
    code generator gives them. Example::

        >>> ExecModule("digital", activation_layout="NHCW").activation_layout
        'NHCW'
        >>> ExecModule("digital", activation_layout="NCHW").activation_layout
        'NCHW'

    Weights kept across calls (since API 2.10): ``weight_memory`` names one of the module's
    ``memory_levels`` that holds only weights (``operands=("W",)``) and keeps what it holds
    between calls, e.g. an accelerator's private weight SRAM. A depth-first C project
    (``edgebyoc.memory.streaming``) calls each layer of a streamed chain once per band of
    rows; with a weight memory the memory stage gives the chain's layers whose weights are
    loaded once per call (``CodegenOutput.resident_weights``) a place in it for the whole
    chain, as many as fit beside the largest weight buffer of the chain's other layers, and
    only the first call of such a layer loads them (the cost hook sees the later calls'
    schedules with ``Schedule.weights_resident``: no weight transfer). Empty (the default):
    every call loads its weights, as before 2.10. Example::

        >>> wmem = MemoryLevel("WMEM", 64 * 1024, operands=("W",))
        >>> l1 = MemoryLevel("L1", 256 * 1024, operands=("I", "O"))
        >>> ExecModule("digital", memory_levels=(l1, wmem, MemoryLevel("L2", 512 * 1024)),
        ...            weight_memory="WMEM").weight_memory_level().size_bytes
        65536
    """

    name: str
    description: str = ""
    memory_levels: tuple[MemoryLevel, ...] = ()
    output_kind: OutputKind = OutputKind.C_SOURCE
    priority: int = 0
    spatial_mapping: Mapping[str, int] = field(default_factory=dict)
    max_region_ops: int = 0
    region_memory_bytes: int = 0
    min_region_macs: int = 1
    max_region_composites: int = 0
    layouts: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    quantization: "QuantizationSpec | None" = None
    requantize_rounding: str = "tflite"
    layer_kinds: tuple[Any, ...] = ()
    activation_layout: str = "NHWC"
    accumulator_bits: int = 0
    partial_sum_dims: tuple[str, ...] = ("C",)
    weight_memory: str = ""

    def weight_memory_level(self) -> "MemoryLevel | None":
        """The ``MemoryLevel`` named by ``weight_memory``, or ``None`` without one."""
        return next((m for m in self.memory_levels if m.name == self.weight_memory), None) \
            if self.weight_memory else None

    def __post_init__(self):
        _check_spatial_mapping(self.name, self.spatial_mapping)
        if self.weight_memory:
            level = self.weight_memory_level()
            if level is None or level is self.memory_levels[-1] or \
                    tuple(level.operands) != ("W",):
                raise ValueError(
                    f"module {self.name!r}: weight_memory {self.weight_memory!r} must name an "
                    f"inner memory level of the module holding only weights (operands "
                    f"('W',)); its levels are "
                    f"{', '.join(m.name for m in self.memory_levels) or 'none'}")
        if self.accumulator_bits not in (0, 32):
            raise ValueError(f"module {self.name!r}: accumulator_bits must be 0 (no partial "
                             f"sums) or 32 (int32 partial sums), not {self.accumulator_bits!r}")
        dims = (self.partial_sum_dims,) if isinstance(self.partial_sum_dims, str) else \
            tuple(self.partial_sum_dims)
        wrong = [d for d in dims if d not in PARTIAL_SUM_DIMS]
        if wrong:
            raise ValueError(f"module {self.name!r}: partial_sum_dims {wrong[0]!r} is not a "
                             f"reduction loop the search can tile (allowed: "
                             f"{', '.join(PARTIAL_SUM_DIMS)})")
        object.__setattr__(self, "partial_sum_dims", dims)
        _freeze_fields(self, "spatial_mapping", "layouts")
        object.__setattr__(self, "layouts", FrozenMap(
            {op: tuple(wanted) for op, wanted in self.layouts.items()}))
        if not self.name or "." in self.name:
            raise ValueError(f"module name {self.name!r} must be non-empty and contain no '.'")
        object.__setattr__(self, "memory_levels", tuple(self.memory_levels))
        object.__setattr__(self, "layer_kinds", tuple(self.layer_kinds))
        if str(self.requantize_rounding) not in ("tflite", "half_up"):
            raise ValueError(f"module {self.name!r}: requantize_rounding must be 'tflite' or "
                             f"'half_up', not {self.requantize_rounding!r}")
        if self.activation_layout not in ACTIVATION_LAYOUTS:
            raise ValueError(f"module {self.name!r}: activation_layout must be one of "
                             f"{', '.join(map(repr, ACTIVATION_LAYOUTS))}, not "
                             f"{self.activation_layout!r}")


#: the reduction loops ``ExecModule.partial_sum_dims`` may name: input channels, filter rows,
#: filter columns
PARTIAL_SUM_DIMS = ("C", "FY", "FX")

#: the loop dimensions ``ExecModule.spatial_mapping`` may unroll: output channels, input
#: channels, output rows and columns, filter rows and columns
SPATIAL_DIMS = ("K", "C", "OY", "OX", "FY", "FX")


def _check_spatial_mapping(module: str, mapping: Mapping[str, int]) -> None:
    """``ValueError`` naming the dimension or factor of ``mapping`` that is not allowed."""
    if not isinstance(mapping, Mapping):
        raise ValueError(f"module {module!r}: spatial_mapping must map loop dimensions to "
                         f"factors, not {type(mapping).__name__}")
    for dim, factor in mapping.items():
        if dim not in SPATIAL_DIMS:
            raise ValueError(f"module {module!r}: spatial_mapping dimension {dim!r} is not a "
                             f"loop dimension (allowed: {', '.join(SPATIAL_DIMS)})")
        if isinstance(factor, bool) or not isinstance(factor, int) or factor < 1:
            raise ValueError(f"module {module!r}: spatial_mapping[{dim!r}] = {factor!r} must "
                             f"be a positive integer (the times the hardware unrolls {dim})")


@dataclass(frozen=True)
class QuantizationSpec:
    """Partial quantization of a module's regions (BYOC paper, Figure 4a).

    The core quantizes every float tensor entering a region of the module (activations with a
    scale and zero point from calibration data, constant weights once at compile time, per
    tensor, symmetric) and dequantizes every tensor leaving it. Inside, the region's function
    receives ``dtype`` tensors and starts with ``dequantize`` / ends with ``quantize``: the same
    dequantize -> op -> quantize form pre-quantized (QDQ ONNX, int8 TFLite) models arrive in.
    """

    dtype: str = "int8"

    def __post_init__(self):
        if self.dtype != "int8":
            raise ValueError(f"partial quantization supports int8, not {self.dtype!r}")


@dataclass(frozen=True)
class TargetOption:
    """A user-settable option of a target (``--option name=value`` on the command line).

    Every value is checked, given or default: ``minimum`` / ``maximum`` bound numbers
    (inclusive); ``choices`` lists the allowed values; with ``multiple`` the value is a
    comma-separated list of ``choices`` (each at most once; empty allowed unless
    ``minimum`` is 1, then at least one). A bad value is a ``ValueError`` naming the option
    and what is allowed.

    Example::

        >>> size = TargetOption("l1_kb", int, 256, "L1 in kB", minimum=8, maximum=256)
        >>> size.check(size.parse("64"))
        64
        >>> size.check(4)
        Traceback (most recent call last):
        ...
        ValueError: option l1_kb: 4 is out of range (8 to 256)
        >>> mods = TargetOption("modules", str, "a,b", choices=("a", "b"), multiple=True)
        >>> mods.check("b, a"), mods.items("b, a")
        ('b, a', ('b', 'a'))
    """

    name: str
    type: type
    default: Any
    help: str = ""
    minimum: float | None = None
    maximum: float | None = None
    choices: tuple[Any, ...] = ()
    multiple: bool = False

    def __post_init__(self):
        object.__setattr__(self, "choices", tuple(self.choices))

    def allowed(self) -> str:
        """What the option accepts, in words (shown by errors and ``edgebyoc plugins``)."""
        if self.choices:
            listed = ", ".join(str(c) for c in self.choices)
            return f"a comma-separated subset of {listed}" if self.multiple else f"one of {listed}"
        if self.minimum is not None or self.maximum is not None:
            low = "-inf" if self.minimum is None else f"{self.minimum:g}"
            high = "inf" if self.maximum is None else f"{self.maximum:g}"
            return f"{self.type.__name__} from {low} to {high}"
        if self.type is bool:
            return "true or false"
        return f"any {self.type.__name__}"

    def items(self, value: Any) -> tuple[str, ...]:
        """The entries of a ``multiple`` option's value."""
        return tuple(part.strip() for part in str(value).split(",") if part.strip())

    def check(self, value: Any) -> Any:
        """``value`` when it is allowed; ``ValueError`` naming the option otherwise."""
        if self.multiple:
            parts = self.items(value)
            bad = [p for p in parts if p not in self.choices]
            if bad or len(set(parts)) != len(parts) or (self.minimum and not parts):
                least = ", at least one" if self.minimum else ""
                raise ValueError(f"option {self.name}: {value!r} is not allowed "
                                 f"(allowed: {self.allowed()}{least})")
            return value
        if self.choices and value not in self.choices:
            raise ValueError(f"option {self.name}: {value!r} is not allowed "
                             f"(allowed: {self.allowed()})")
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            if value != value or (self.minimum is not None and value < self.minimum) or \
                    (self.maximum is not None and value > self.maximum):
                raise ValueError(f"option {self.name}: {value!r} is out of range ("
                                 + self.allowed().split(" from ", 1)[-1] + ")")
        return value

    def coerce(self, value: Any) -> Any:
        """``value`` as this option's type: text is parsed (``parse``), an integral float
        becomes an int option's int, an int a float option's float; any other type (a table,
        a date, a list, a bool for a number) and a number that is not finite are a
        ``ValueError`` naming the option."""
        if isinstance(value, str):
            value = self.parse(value)
        kind = self.type
        if kind is bool:
            ok = isinstance(value, bool)
        elif kind is int:
            if isinstance(value, float) and value.is_integer():
                value = int(value)
            ok = isinstance(value, int) and not isinstance(value, bool)
        elif kind is float:
            ok = isinstance(value, (int, float)) and not isinstance(value, bool)
            value = float(value) if ok else value
        else:
            ok = isinstance(value, kind)
        if not ok:
            article = "an" if kind.__name__[:1] in "aeiou" else "a"
            raise ValueError(f"option {self.name}: {value!r} ({type(value).__name__}) is not "
                             f"{article} {kind.__name__} (allowed: {self.allowed()})")
        if isinstance(value, float) and not math.isfinite(value):
            raise ValueError(f"option {self.name}: {value!r} is not a finite number")
        return value

    def parse(self, text: str) -> Any:
        """Convert the command-line text of this option to its type, with a clear error."""
        if self.type is bool:
            lowered = text.strip().lower()
            if lowered in ("1", "true", "yes", "on"):
                return True
            if lowered in ("0", "false", "no", "off"):
                return False
            raise ValueError(f"option {self.name}: {text!r} is not a boolean")
        try:
            return self.type(text)
        except (TypeError, ValueError) as err:
            raise ValueError(f"option {self.name}: {text!r} is not a valid "
                             f"{self.type.__name__}") from err


@dataclass(frozen=True)
class CalibrationParameter:
    """A cost-model constant a plugin lets ``edgebyoc calibrate`` fit (since API 2.6).

    ``default`` is the value used when no calibration gives one (the uncalibrated model);
    ``lower`` / ``upper`` bound the fit (inclusive; a calibration file outside them is
    refused); ``unit`` and ``description`` say what it is, ``source`` where the default comes
    from (a paper's section or table, a datasheet, or ``"assumption"``). The plugin reads the
    values in force with ``edgebyoc.api.calibrated_constants(target, options)``.

    Example::

        >>> overhead = CalibrationParameter("setup", 0.0, 0.0, 1e4, "cycles",
        ...                                 "fixed cost of offloading one layer", "assumption")
        >>> overhead.check(2e4)
        Traceback (most recent call last):
        ...
        ValueError: calibration parameter setup: 20000.0 is outside its bounds (0.0 to 10000.0)
    """

    name: str
    default: float
    lower: float
    upper: float
    unit: str = ""
    description: str = ""
    source: str = "assumption"

    def __post_init__(self):
        if not self.name.replace("_", "").isalnum():
            raise ValueError(f"calibration parameter name {self.name!r} must be alphanumeric "
                             f"(underscores allowed)")
        if not (math.isfinite(self.lower) and math.isfinite(self.upper)
                and self.lower <= self.default <= self.upper and self.lower < self.upper):
            raise ValueError(f"calibration parameter {self.name}: needs finite bounds with "
                             f"lower <= default <= upper and lower < upper, not "
                             f"{self.lower} <= {self.default} <= {self.upper}")

    def check(self, value: Any) -> float:
        """``value`` as a float within the bounds; ``ValueError`` naming the parameter
        otherwise."""
        try:
            number = float(value)
        except (TypeError, ValueError) as err:
            raise ValueError(f"calibration parameter {self.name}: {value!r} is not a "
                             f"number") from err
        if not (math.isfinite(number) and self.lower <= number <= self.upper):
            raise ValueError(f"calibration parameter {self.name}: {number!r} is outside its "
                             f"bounds ({self.lower} to {self.upper})")
        return number


#: The option the core adds to every target that declares ``Target.calibration`` (unless the
#: plugin declares its own ``calibration`` option): a calibration file from
#: ``edgebyoc calibrate``; empty for the plugin's ``default_calibration``, ``uncalibrated``
#: for the parameters' defaults.
CALIBRATION_OPTION = TargetOption(
    "calibration", str, "",
    "a calibration file from `edgebyoc calibrate` (empty: the plugin's shipped calibration; "
    "'uncalibrated': the cost models' defaults)")


@dataclass(frozen=True)
class Target:
    """A compilation target: a named set of execution modules plus the host CPU as fallback.

    ``api_version`` is the contract version the plugin was written against (see ``API_VERSION``;
    set it to the version of the ``edgebyoc.api`` you wrote the plugin for, e.g. ``"2.5"``).
    ``None`` (the default) means not declared and is taken as ``"2.3"``
    (``UNDECLARED_API_VERSION``); ``declared_api_version`` gives the effective value.
    ``c_project``: the target deploys as a standalone C project (MATCH-style: network.c/.h,
    weights, a static activation arena, the regions' layer code, a gcc Makefile and the
    plugin's SDK build files, see ``edgebyoc.codegen.cproject``). The artifact then runs that
    C (host binding) instead of the TVM host build, and keeps the project in ``c_project/``;
    every region must give a ``CodegenOutput.c_entry``. A network the project cannot express
    keeps the TVM host build, and the report says why.
    ``clock_hz`` (since API 2.1): the clock the cost models' cycles count, e.g. ``260e6``; the
    report then gives predicted latencies in ms beside the cycles. ``None``: cycles only.
    ``calibration`` (since API 2.6): the cost constants ``edgebyoc calibrate`` may fit to
    measured latencies (``CalibrationParameter``); declaring any adds the option
    ``calibration`` (``CALIBRATION_OPTION``) unless the plugin declares its own option of
    that name (whose value must then be empty or a calibration file). ``default_calibration``:
    the path of a calibration file the plugin ships (e.g. fitted to published board figures),
    or a function of the compile's options giving it (e.g. one file per device), used when the
    option is empty; ``None``: the parameters' defaults.
    """

    name: str
    description: str = ""
    modules: tuple[ExecModule, ...] = ()
    options: tuple[TargetOption, ...] = ()
    api_version: str | None = None
    c_project: bool = False
    clock_hz: float | None = None
    calibration: tuple[CalibrationParameter, ...] = ()
    default_calibration: str | Callable[[Mapping[str, Any]], str | None] | None = None

    def __post_init__(self):
        if not self.name or not self.name.replace("_", "").isalnum():
            raise ValueError(f"target name {self.name!r} must be alphanumeric (underscores allowed)")
        names = [m.name for m in self.modules]
        if len(set(names)) != len(names):
            raise ValueError(f"target {self.name!r} declares a module name twice: {names}")
        if self.clock_hz is not None and not (isinstance(self.clock_hz, (int, float))
                                              and 0 < self.clock_hz < float("inf")):
            raise ValueError(f"target {self.name!r}: clock_hz must be a positive number of "
                             f"hertz, not {self.clock_hz!r}")
        if self.api_version is not None:
            if not isinstance(self.api_version, str):
                raise ValueError(f"target {self.name!r}: api_version must be a string "
                                 f"\"MAJOR.MINOR\", not {self.api_version!r}")
            api_version_tuple(self.api_version)
        object.__setattr__(self, "calibration", tuple(self.calibration))
        names = [p.name for p in self.calibration]
        if len(set(names)) != len(names):
            raise ValueError(f"target {self.name!r} declares a calibration parameter twice: "
                             f"{names}")
        if self.calibration and "calibration" not in {o.name for o in self.options}:
            object.__setattr__(self, "options", tuple(self.options) + (CALIBRATION_OPTION,))

    @property
    def declared_api_version(self) -> str:
        """The API version the plugin was written for: ``api_version``, or ``"2.3"`` when the
        plugin declares none (``UNDECLARED_API_VERSION``)."""
        return self.api_version if self.api_version is not None else UNDECLARED_API_VERSION

    def module(self, name: str) -> ExecModule:
        """The execution module called ``name``; KeyError naming the known ones otherwise."""
        for module in self.modules:
            if module.name == name:
                return module
        raise KeyError(f"target {self.name!r} has no module {name!r} "
                       f"(modules: {', '.join(m.name for m in self.modules) or 'none'})")

    def resolve_options(self, given: Mapping[str, Any] | None) -> dict[str, Any]:
        """Defaults overlaid with ``given`` (strings are parsed), every value checked
        (``TargetOption.check``); unknown names and bad values are a ``ValueError``."""
        known = {o.name: o for o in self.options}
        resolved = {o.name: o.default for o in self.options}
        for key, value in (given or {}).items():
            if key not in known:
                raise ValueError(f"target {self.name!r} has no option {key!r} "
                                 f"(options: {', '.join(known) or 'none'})")
            resolved[key] = known[key].coerce(value)
        for key, value in resolved.items():
            known[key].check(value)
        return resolved


@dataclass(frozen=True)
class PatternEntry:
    """One row of a module's pattern table.

    ``name`` is the short name (``"conv2d_bias_relu"``); the core registers it as
    ``<target>.<module>.<name>`` in TVM's ``pattern_registry``. ``pattern`` is a Relax
    ``DFPattern``; ``annotations`` maps names to sub-patterns the check reads; ``check`` receives a
    ``tvm.relax.transform.PatternCheckContext`` and returns whether the match is supported (dtypes,
    layouts, shapes, attributes): ``True``, ``False``, or a string saying why not, which the
    report shows for the operators left on the host. Larger patterns are tried first;
    ``priority`` orders patterns of equal size.
    """

    name: str
    pattern: Any
    annotations: Mapping[str, Any] = field(default_factory=dict)
    check: Callable[[Any], bool | str] | None = None
    priority: int = 0


@dataclass(frozen=True)
class Workload:
    """One matched pattern as the cost model sees it.

    ``op`` is the anchor operator (the one carrying the MACs, e.g. ``"relax.nn.conv2d"``, or the
    pattern's root), ``pattern`` the full pattern name, ``inputs`` the (shape, dtype) of the
    anchor's arguments, ``output`` that of its result, ``attrs`` the anchor's attributes (strides,
    padding, groups, layouts, ...), ``macs`` the multiply-accumulates of the whole match and
    ``constant_bytes`` the size of the constants it reads. ``bits`` gives the width of the
    values the match reads and writes, ``{"I": 8, "W": 8, "O": 8}`` for an int8 convolution
    even where the Relax graph widens them to int32 before the anchor (integerized models):
    ``I`` is the first tensor entering the match, ``W`` the anchor's constant (the narrowest
    integer type holding its values), ``O`` the match's result.
    """

    op: str
    pattern: str
    inputs: tuple[tuple[tuple[int, ...], str], ...]
    output: tuple[tuple[int, ...], str]
    attrs: Mapping[str, Any] = field(default_factory=dict)
    macs: int = 0
    constant_bytes: int = 0
    bits: Mapping[str, int] = field(default_factory=dict)

    def __post_init__(self):
        _freeze_fields(self, "attrs", "bits")
        object.__setattr__(self, "inputs", tuple((tuple(s), str(d)) for s, d in self.inputs))
        object.__setattr__(self, "output", (tuple(self.output[0]), str(self.output[1])))

    def key(self) -> tuple:
        """Hashable identity for caching costs: pattern, shapes, dtypes and attributes."""
        return (self.pattern, self.inputs, self.output, _freeze(self.attrs), _freeze(self.bits))


@dataclass(frozen=True)
class Composite:
    """One matched pattern inside a region: its full name, short name, Relax function,
    workload and the schedule the search found for it (``edgebyoc.dse.Schedule``, or ``None``
    for modules without a memory hierarchy)."""

    name: str
    pattern: str
    function: Any
    workload: Workload
    schedule: Any = None


@dataclass(frozen=True)
class Region:
    """An offloaded region as the codegen hook receives it.

    ``function`` is the merged Relax function (its parameters: the region's inputs, then the
    constants it reads, all passed at run time, never embedded); ``symbol`` the name the
    generated code must export; ``composites`` the matched patterns inside, in order;
    ``constant_params`` the indices of the parameters that are model constants and
    ``constants`` their values (numpy arrays by parameter index), for code generators that
    compute their own form of them once (``CodegenOutput.replaced_constants``);
    ``activation_layout`` the layout of the 4-D activations crossing its boundary (its module's
    ``ExecModule.activation_layout``): with ``"NCHW"`` (``"NHCW"``) the function's 4-D
    run-time parameters and its 4-D result are NCHW (NHCW), and its body permutes them to and
    from the NHWC its composites were matched in.
    """

    symbol: str
    module: str
    function: Any
    composites: tuple[Composite, ...]
    constant_params: tuple[int, ...] = ()
    constants: Mapping[int, Any] = field(default_factory=dict)
    activation_layout: str = "NHWC"


@dataclass(frozen=True)
class Cost:
    """What a module's cost model predicts for one workload under one schedule.

    ``latency_cycles`` is the figure dispatch minimises by default; ``energy`` (any consistent
    unit, e.g. pJ) when the model has one; ``breakdown`` the per-term parts (e.g.
    ``{"L_ops": 1200, "L_mem": 800}``) shown in the report.
    """

    latency_cycles: float
    energy: float | None = None
    breakdown: Mapping[str, float] = field(default_factory=dict)

    def __post_init__(self):
        _freeze_fields(self, "breakdown")


@dataclass(frozen=True)
class ApiBinding:
    """The names generated layer code calls, bound per module and flavour (MATCH's code APIs).

    Each family maps generic names used by the core's templates (``"dma_copy_2d"``,
    ``"wait_all"``, ``"kernel_conv2d"``) to the symbols of the platform: ``platform`` (setup /
    shutdown), ``memory`` (allocation, DMA transfers), ``synchronization`` (barriers, waits) and
    ``computation`` (kernels). ``headers`` are included by generated code; ``sources`` and
    ``include_dirs`` are compiled with it.
    """

    flavour: str
    platform: Mapping[str, str] = field(default_factory=dict)
    memory: Mapping[str, str] = field(default_factory=dict)
    synchronization: Mapping[str, str] = field(default_factory=dict)
    computation: Mapping[str, str] = field(default_factory=dict)
    headers: tuple[str, ...] = ()
    sources: tuple[str, ...] = ()
    include_dirs: tuple[str, ...] = ()

    def __post_init__(self):
        _freeze_fields(self, "platform", "memory", "synchronization", "computation")
        for name in ("headers", "sources", "include_dirs"):
            object.__setattr__(self, name, tuple(getattr(self, name)))

    def names(self) -> dict[str, str]:
        """Every bound name of the four families in one mapping (generic name -> symbol)."""
        return {**self.platform, **self.memory, **self.synchronization, **self.computation}


@dataclass(frozen=True)
class CodegenContext:
    """What ``edgebyoc_codegen`` receives besides the region: the compile's settings.

    ``options`` are the target's options for this compile (parsed, defaults filled in);
    ``bindings`` the module's ``ApiBinding`` per flavour (``"host"``, ``"soc"``; ``None`` where
    the plugin gives none), as ``edgebyoc_runtime_apis`` returned them; ``region_index`` the
    index of the region in the partition report (``report["regions"][i]``).

    Example::

        >>> ctx = CodegenContext(options={"l1_kb": 64}, bindings={"host": None, "soc": None})
        >>> ctx.options["l1_kb"], ctx.binding("host"), ctx.region_index
        (64, None, 0)
    """

    options: Mapping[str, Any] = field(default_factory=dict)
    bindings: Mapping[str, "ApiBinding | None"] = field(default_factory=dict)
    region_index: int = 0

    def __post_init__(self):
        _freeze_fields(self, "options", "bindings")

    def binding(self, flavour: str) -> "ApiBinding | None":
        """The ``ApiBinding`` of ``flavour`` (``None`` when the plugin gives none)."""
        return self.bindings.get(flavour)


@dataclass(frozen=True)
class RowWindow:
    """How a region's output rows read the rows of one activation argument.

    Output row ``y`` reads the input rows ``y * stride - pad_top`` to
    ``y * stride - pad_top + kernel - 1``, clipped to the input (rows outside it are
    padding): a convolution's or pooling's height window (``kernel`` counts the dilated
    filter's rows); ``kernel=1, stride=1, pad_top=0`` is an element-wise operand. ``position``
    is the argument's index in ``data`` of ``CodegenOutput.c_entry_rows``; ``axis`` the
    rows' axis in the argument and in the output: 1 for channels-last (NHWC) and for planes
    cut in rows (NHCW), 2 for whole channel planes (NCHW, where a ring of R rows holds R rows
    of every plane).

    Example (a 3x3 convolution, stride 2, one row of top padding, input at ``data[0]``)::

        >>> RowWindow(0, kernel=3, stride=2, pad_top=1).rows(4, 6, height=16)
        (7, 12)
    """

    position: int
    kernel: int = 1
    stride: int = 1
    pad_top: int = 0
    axis: int = 1

    def __post_init__(self):
        if self.axis not in (1, 2) or self.kernel < 1 or self.stride < 1 or self.pad_top < 0:
            raise ValueError(f"row window {self}: axis 1 or 2, kernel and stride >= 1, "
                             f"pad_top >= 0")

    def rows(self, y0: int, y1: int, height: int) -> tuple[int, int]:
        """The input rows ``[first, end)`` output rows ``[y0, y1)`` read, clipped to
        ``height``."""
        first = max(0, y0 * self.stride - self.pad_top)
        end = min(height, (y1 - 1) * self.stride - self.pad_top + self.kernel)
        return first, max(first, end)


@dataclass(frozen=True)
class CodegenOutput:
    """What a module's code generator returns for one offloaded region.

    Exactly one payload matches ``kind``: ``c_source`` (a translation unit exporting ``symbol``
    with the TVM FFI packed signature), ``graph_json`` (the BYOC JSON graph: nodes with
    op / name / inputs / attrs, arg_nodes, heads) or ``blob`` (bytes read back by the plugin's
    ``RuntimeLoader`` of ``loader_kind``). The region's constants are not part of the payload:
    they arrive as arguments at run time (and through the loader's ``constants``), owned once by
    the artifact's metadata.

    ``replaced_constants`` lets the generated code take its constants in its own form, computed
    once at compile time (a weight layout, int8 packing, a sparse format): it maps the index of a
    constant parameter of the region (see ``Region.constant_params``) to the arrays passed in its
    place, in order. The region's arguments are then its parameters with each replaced one
    expanded into its arrays, then its outputs; the metadata owns the new arrays instead.

    For targets that deploy as a C project (``Target.c_project``), a C-source region also gives
    ``c_entry``: the name of a function ``int c_entry(void* const* data)`` (C linkage, 0 on
    success) that ``c_source`` and the project's files define; ``data`` holds the data pointers
    of the region's arguments as above, then its outputs. ``project_files`` (relative path ->
    text) are the files the region adds to the project: its layer source under ``layers/``
    (``.c`` files there are compiled), headers under ``include/``, and per-flavour binding
    headers under ``bindings/<flavour>/`` (the host-emulation build uses ``bindings/host``).
    Regions may give the same path only with the same text.

    ``c_entry_rows`` (since API 2.2, optional) lets a depth-first C project stream the region
    in row bands (``edgebyoc.memory.streaming``): the name of a function
    ``int c_entry_rows(void* const* data, int y0, int y1, const int* rings)`` computing only
    output rows ``y0`` to ``y1 - 1`` of its single 4-D output (``RowWindow.axis``), where
    ``rings[i]``
    is the number of rows the buffer ``data[i]`` holds (0: the whole tensor; fewer: a ring
    buffer, row ``y`` at row ``y % rings[i]``). ``row_windows`` says, per activation
    argument, which input rows an output row reads (``RowWindow``); the project calls the
    entry only once those rows are in place. ``edgebyoc.api.match.layer_codegen`` gives both
    for convolution, depthwise, add and pooling layers, channels-last or in planes.

    ``resident_weights`` (since API 2.10, optional, with ``c_entry_rows`` and a module's
    ``ExecModule.weight_memory``) lets a streamed chain load the layer's weights once for all
    its bands: the name of a global ``edgebyoc_resident_t`` (``edgebyoc_match.h``: a
    ``base`` pointer and a ``loaded`` flag, ``{NULL, 0}`` at start) that the region's C
    defines, and ``resident_weight_bytes`` the bytes its weights (with their bias and
    requantization arrays) take at ``base``. The project sets ``base`` to the layer's place
    in the weight memory and ``loaded`` to 0 when the chain starts and ``base`` back to NULL
    when it ends; while ``base`` is set, the row entry reads its weights there, loading them
    only when ``loaded`` is 0 (then setting it). ``layer_codegen`` gives it for layers whose
    schedule loads all weights once per call (``Schedule.fill["W"] == 0``).
    """

    kind: OutputKind
    symbol: str
    c_source: str | None = None
    graph_json: str | None = None
    blob: bytes | None = None
    loader_kind: str | None = None
    replaced_constants: Mapping[int, tuple[Any, ...]] = field(default_factory=dict)
    c_entry: str | None = None
    project_files: Mapping[str, str] = field(default_factory=dict)
    c_entry_rows: str | None = None
    row_windows: tuple[RowWindow, ...] = ()
    resident_weights: str | None = None
    resident_weight_bytes: int = 0

    def __post_init__(self):
        payload = {OutputKind.C_SOURCE: self.c_source, OutputKind.JSON_GRAPH: self.graph_json,
                   OutputKind.BLOB: self.blob}[self.kind]
        if payload is None:
            raise ValueError(f"codegen output {self.symbol!r} of kind {self.kind.value} "
                             f"has no {self.kind.value} payload")
        if self.c_entry_rows and (not self.c_entry or not self.row_windows):
            raise ValueError(f"codegen output {self.symbol!r}: c_entry_rows needs a c_entry and "
                             f"the row_windows of its activation arguments")
        if self.resident_weights and (not self.c_entry_rows or self.resident_weight_bytes <= 0):
            raise ValueError(f"codegen output {self.symbol!r}: resident_weights needs a "
                             f"c_entry_rows and the positive resident_weight_bytes")
        if self.kind is not OutputKind.C_SOURCE and not self.loader_kind:
            raise ValueError(f"codegen output {self.symbol!r}: {self.kind.value} needs a "
                             f"loader_kind naming the plugin's RuntimeLoader")


@dataclass(frozen=True)
class RuntimeLoader:
    """Turns a JSON graph or blob back into something callable when an artifact is loaded.

    ``load(payload, constants)`` receives the payload (str for JSON, bytes for blobs) and a mapping
    of constant name to numpy array, and returns a callable taking the region's input arrays and
    returning its output arrays. Expensive engines are built here, once per artifact load.
    """

    kind: str
    load: Callable[[Any, Mapping[str, Any]], Callable[..., Any]]


@dataclass(frozen=True)
class Availability:
    """Whether a plugin can work on this machine (a missing SDK or device makes it unavailable);
    an available plugin's ``reason`` is a note ``edgebyoc plugins`` shows beside its status."""

    available: bool
    reason: str = ""


#: The built-in target: the whole model on the CPU through TVM, no plugin involved.
HOST_TARGET = Target(name="host", description="the host CPU through TVM's LLVM backend")
