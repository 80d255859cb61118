"""The host build: a Relax module compiled for this machine's CPU through TVM's LLVM backend.

The pipeline is TVM's CPU pipeline (``relax.backend.cpu_generic``) with two additions when
``schedules`` is on: convolutions are converted to channels-last layouts before legalization
(constant weights are transposed once, at compile time, by ``FoldConstant``), and the fused
PrimFuncs get the default CPU schedules of ``edgebyoc.schedules``. With ``schedules=False`` it is
TVM's default build: the reference the verify command compares TFLite and Relax models against.

One semantic fix, in both: an average pooling of integers (TVM's TFLite importer turns int8
``AVERAGE_POOL_2D`` into ``astype(int32) -> avg_pool2d -> astype(int8)``) divides its window
sums rounding half away from zero, as TFLite and TFLite Micro do; TVM's own legalization
truncates towards zero, which differs by up to 1 LSB per pooled value and, through the layers
after it, by tens of LSBs in MLPerf Tiny's ResNet-8 and DS-CNN outputs.
"""

from __future__ import annotations

import logging
import platform
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import tvm
from tvm import relax
from tvm.s_tir import dlight
from tvm.relax.backend.cpu_generic import pipeline as cpu_generic

from ..memory.dfs import DepthFirstRule, output_shape
from ..memory.planner import DFS_PREFIX, fuse_macro_kernels
from ..memory.sliding_lowering import lower_sliding_kernels
from ..memory.spin_barrier import with_sync_library
from ..memory.storage import ActivationArena, ExactSizeStorages
from ..concat import concat_copies
from ..const_fold import fold_constants
from ..nms import fast_nms
from ..packing import pack_constant_weights
from ..rewrites import (border_tap_convolutions, clip_as_min_max, fast_erf, fast_sigmoid,
                        fast_softmax, fast_tanh, inverse_permutes, pad_conv_channels,
                        scalar_min_max, small_integer_powers, symbolic_extents)
from ..winograd import winograd_convolutions
from .bounds import instrument_bounds
from ..schedules import HOST_LAYOUTS, host_schedule_pass, padded_channels, simd_lanes

log = logging.getLogger(__name__)


@lru_cache(maxsize=None)
def host_cpu() -> str:
    """LLVM's name for this machine's CPU (e.g. ``"skylake-avx512"``)."""
    return str(tvm.target.Target.from_device(tvm.cpu()).attrs.get("mcpu", "generic"))


#: LLVM features set on x86 hosts. TVM 0.27's LLVM miscompiles AVX-512 masked scatter stores
#: (ONNX node test ``test_tile``: garbage on skylake-avx512 .. emeraldrapids, exact with
#: ``+prefer-no-scatter``); none of edgebyoc's schedules needs a scatter.
X86_SAFETY_FEATURES = ("+prefer-no-scatter",)


def host_target(cpu: str | None = None, num_cores: int | None = None) -> tvm.target.Target:
    """The LLVM target for the host path; ``cpu="generic"`` builds a portable library."""
    config: dict[str, Any] = {"kind": "llvm", "mcpu": cpu or host_cpu()}
    if platform.machine().lower() in ("x86_64", "amd64"):
        config["mattr"] = list(X86_SAFETY_FEATURES)
    if num_cores:
        config["num-cores"] = num_cores
    return tvm.target.Target(config)


def host_pipeline(target: tvm.target.Target, schedules: bool = True,
                  constants=None, memory=None, dfs=None, safe: bool = False
                  ) -> tvm.transform.Pass:
    """TVM's CPU Relax pipeline, plus the host layouts and schedules when ``schedules``.

    With a ``ConstantTable`` as ``constants``, every tensor constant left after legalization
    (and after the folding of layout changes into the weights) becomes a parameter of ``main``
    recorded in that table: the artifact's metadata owns it, the library holds no copy. With a
    ``TimelineRecorder`` as ``memory``, the activation memory timeline is recorded right after
    TVM's static memory planning (and ``memory.storage``'s exact-size storages, in
    edgebyoc's builds; ``schedules=False`` stays TVM's default build); edgebyoc's builds
    then carve the planned tensors from one arena per run (``memory.storage.arena_storages``,
    its bytes in the recorder's ``arena_bytes``). With a ``DfsPlan`` as
    ``dfs``, its macro-kernels are fused into one PrimFunc each and scheduled depth-first
    (``memory/``). ``safe`` checks every kernel's unproven accesses at run time
    (``codegen.bounds``).
    """

    @tvm.transform.module_pass(opt_level=0, name="edgebyoc.HostPipeline")
    def _pipeline(mod: tvm.IRModule, _ctx) -> tvm.IRModule:
        mod = relax.transform.DecomposeOpsForInference()(mod)
        mod = round_integer_average_pooling(mod)
        if schedules:  # a clamp the importer wrote as TIR calls fuses as one operator
            mod = scalar_min_max(fold_constants(mod))
        first_rules = []
        tiled = dfs is not None and dfs.kernels
        if tiled:
            mod = fuse_macro_kernels(mod, dfs)
        if schedules:  # a clamp the layout conversion would leave between two transposes
            mod = _channels_last(border_tap_convolutions(clip_as_min_max(mod)))
        if tiled:  # after the layout conversion: a kernel between NHWC tensors reads NHWC
            mod = inverse_permutes(lower_sliding_kernels(mod, dfs, DFS_PREFIX, target))
            tiles = dfs.tiles
            first_rules.append(DepthFirstRule(lambda f: tiles.get(output_shape(f))))
        if schedules and _calls_any(mod, HOST_LAYOUTS):
            # the transposed weights folded, odd output channels padded to whole vectors
            lanes = simd_lanes(target)
            mod = pad_conv_channels(lambda channels: padded_channels(channels, lanes))(
                fold_constants(mod))
            if not tiled:  # a depth-first build saves memory: its convolutions stay direct
                mod = winograd_convolutions(lanes)(mod)
        if schedules:  # after the layout conversion, which a TIR sigmoid would stop
            for rewrite in (small_integer_powers, fast_sigmoid, fast_tanh, fast_erf,
                            fast_softmax):  # libm's scalar calls as vectorisable code
                mod = rewrite(mod)
            mod = fast_nms(mod)  # one sweep kernel (TVM's NMS: quadratic, a launch per box)
            mod = concat_copies(mod)  # a copy loop per input, not a select per element
        passes = cpu_generic.library_dispatch_passes(target)
        legalize = cpu_generic.legalize_passes(target)
        annotated = [p.info.name for p in legalize].index("AnnotateTIROpPattern") + 1
        # a legalized operator whose result's extents are data-dependent (TVM's NMS) leaves
        # the operators after it without shapes: symbolic extents, then those legalized too
        passes += [legalize[0], symbolic_extents, relax.transform.LegalizeOps()] + \
            legalize[1:annotated] + [unfused_symbolic_kernels] + legalize[annotated:]
        if schedules:  # the weights each kernel reads in channel-tile blocks
            passes.append(pack_constant_weights(target, DFS_PREFIX))
        if constants is not None:
            passes.append(constants.lift_pass())
        if schedules or first_rules:
            passes.append(host_schedule_pass(*first_rules, inline_padding=(
                dfs.padding_limit if first_rules else False))
                          if schedules else dlight.ApplyDefaultSchedule(*first_rules))
        if safe:  # after scheduling, on the loops the kernels run
            passes.append(instrument_bounds)
        passes += cpu_generic.dataflow_lower_passes(target)
        finalize = cpu_generic.finalize_passes(target)
        planned = [p.info.name for p in finalize].index("StaticPlanBlockMemory") + 1
        ours = bool(schedules or first_rules)  # edgebyoc's build, not TVM's default one
        # every storage at its tensor's size, the timeline recorded on those, then the
        # tensors carved from one arena per run, reused by offset
        after_planning = [ExactSizeStorages] if ours else []
        if memory is not None:
            after_planning.append(memory.pass_())
        if ours:
            after_planning.append(ActivationArena(memory).pass_())
        finalize = finalize[:planned] + after_planning + finalize[planned:]
        passes += finalize
        with target:
            mod = tvm.transform.Sequential(passes)(mod)
        return with_sync_library(mod) if tiled else mod

    return _pipeline


#: TVM's ``OpPatternKind`` of a kernel fusion leaves alone
_OPAQUE = 8


@tvm.transform.module_pass(opt_level=0, name="edgebyoc.UnfusedSymbolicKernels")
def unfused_symbolic_kernels(mod: tvm.IRModule, _ctx) -> tvm.IRModule:
    """Kernels whose tensors have symbolic extents (data-dependent ones: a detector's
    post-processing) marked opaque, so ``FuseOps`` leaves them unfused: TVM 0.27's ``FuseTIR``
    fails on a fused group whose kernels share a symbolic extent ("VarRemapGet(source) ==
    nullptr" in RenewDefs). Models with static shapes are not changed."""
    updates = {}
    for gv, func in mod.functions_items():
        if not isinstance(func, tvm.tirx.PrimFunc):
            continue
        symbolic = any(not isinstance(d, tvm.tirx.IntImm) for p in func.params
                       for d in (getattr(p.ty, "shape", None) or ()))
        if symbolic:
            updates[gv] = func.with_attr("op_pattern", _OPAQUE)
    for gv, func in updates.items():
        mod[gv] = func
    return mod


def _calls_any(mod: tvm.IRModule, op_names) -> bool:
    found = []

    def visit(expr):
        if isinstance(expr, relax.Call) and isinstance(expr.op, tvm.ir.Op) \
                and expr.op.name in op_names:
            found.append(expr)

    for func in mod.functions.values():
        if isinstance(func, relax.Function):
            relax.analysis.post_order_visit(func.body, visit)
    return bool(found)


def _channels_last(mod: tvm.IRModule) -> tvm.IRModule:
    """``ConvertLayout`` to ``HOST_LAYOUTS``; a model it cannot convert, or without an operator
    to convert outside the depth-first macro-kernels, keeps its layouts.

    TVM 0.27's layout inference rejects some operators (e.g. ``stack`` on 1-d tensors); the
    schedules still apply to such models, only without the channels-last benefit. Depth-first
    macro-kernels (``memory.planner``) are not converted (the sliding ones then read and write
    NHWC where their neighbours do: ``memory.sliding_lowering``).
    """
    # the depth-first macro-kernels are scheduled in NCHW: ConvertLayout must not rewrite
    # their insides, so it sees the module without them (their callers convert their
    # arguments back to NCHW, as for any call it does not know)
    kept = {gv: func for gv, func in mod.functions.items()
            if isinstance(func, relax.Function) and func.attrs and "Composite" in func.attrs
            and str(func.attrs["Composite"]).startswith(DFS_PREFIX)}
    visible = tvm.IRModule({gv: f for gv, f in mod.functions.items() if gv not in kept},
                           attrs=mod.attrs)
    if not _calls_any(visible, HOST_LAYOUTS):  # only macro-kernels' convolutions: none to convert
        return mod
    try:
        converted = relax.transform.ConvertLayout(HOST_LAYOUTS)(visible)
    except Exception as err:  # noqa: BLE001 - an optimisation must not fail the compile
        log.info("channels-last conversion skipped: %s", str(err).strip().splitlines()[-1])
        return mod
    try:  # a tensor converted back for two calls ConvertLayout does not know: one transpose
        converted = relax.transform.EliminateCommonSubexpr(call_only=True)(converted)
    except Exception as err:  # noqa: BLE001 - the conversion stands without it
        log.info("repeated layout conversions kept: %s", str(err).strip().splitlines()[-1])
    functions = dict(converted.functions)
    functions.update(kept)
    return tvm.IRModule(functions, attrs=converted.attrs)


def _rounding_avg_pool2d(data, **pool):
    """TFLite's integer average pooling: sum / count rounded half away from zero.

    TOPI's average pooling of ``2 * data`` gives t = trunc(2 * sum / count); the rounded
    quotient is then sign(t) * ((|t| + 1) // 2) (TOPI keeps its padding and divisor rules)."""
    from tvm import te, tirx as tir, topi

    doubled = te.compute(data.shape, lambda *i: data(*i) * tir.const(2, data.dtype),
                         name="doubled")
    halves = topi.nn.pool2d(doubled, pool_type="avg", **pool)

    def rounded(*index):
        t = halves(*index)
        magnitude = tir.truncdiv(tir.Select(t < 0, -t, t) + tir.const(1, halves.dtype),
                                 tir.const(2, halves.dtype))
        return tir.Select(t < 0, -magnitude, magnitude)

    return te.compute(halves.shape, rounded, name="round_half_away")


@relax.expr_functor.mutator
class _IntegerAveragePooling(relax.PyExprMutator):
    """Integer ``avg_pool2d`` calls as ``_rounding_avg_pool2d`` (see the module docstring)."""

    def __init__(self, mod: tvm.IRModule):
        super().__init__(mod)
        self.mod_ = mod
        self.changed = False

    def visit_call_(self, call):  # noqa: N802 - TVM's visitor name
        call = self.visit_expr_post_order(call)
        dtype = str(getattr(call.ty, "dtype", ""))
        if not (isinstance(call.op, tvm.ir.Op) and call.op.name == "relax.nn.avg_pool2d"
                and dtype.startswith(("int", "uint"))
                and str(call.attrs.out_layout) in ("", str(call.attrs.layout))):
            return call
        attrs = call.attrs
        self.changed = True
        return self.builder_.call_te(
            _rounding_avg_pool2d, call.args[0], kernel=attrs.pool_size, stride=attrs.strides,
            dilation=attrs.dilation, padding=attrs.padding, ceil_mode=attrs.ceil_mode,
            layout=attrs.layout, count_include_pad=attrs.count_include_pad,
            primfunc_name_hint="avg_pool2d_round_half_away")

    def transform(self) -> tvm.IRModule:
        for gv, func in self.mod_.functions_items():
            if isinstance(func, relax.Function) and not (
                    func.attrs and ("Composite" in func.attrs or "Codegen" in func.attrs)):
                self.builder_.update_func(gv, self.visit_expr(func))
        return self.builder_.get() if self.changed else self.mod_


def round_integer_average_pooling(mod: tvm.IRModule) -> tvm.IRModule:
    """``mod`` whose integer average poolings round as TFLite's (see the module docstring)."""
    return _IntegerAveragePooling(mod).transform()


def build_host(mod: tvm.IRModule, target: tvm.target.Target, schedules: bool = True,
               constants=None, memory=None, dfs=None, safe: bool = False):
    """Compile ``mod`` for the CPU; returns a ``tvm.runtime.Executable`` (VM bytecode and
    kernels)."""
    return tvm.compile(mod, target=target, relax_pipeline=host_pipeline(
        target, schedules, constants, memory, dfs, safe))


@dataclass(frozen=True)
class HostBuild:
    """How the host library is built: the LLVM CPU (``None``: this machine's), edgebyoc's
    schedules or TVM's default loops, run-time bound checks (``codegen.bounds``)."""

    cpu: str | None = None
    schedules: bool = True
    safe: bool = False

    @property
    def llvm_cpu(self) -> str:
        return self.cpu or host_cpu()

    def to_dict(self) -> dict[str, Any]:
        return {"cpu": self.llvm_cpu, "schedules": self.schedules,
                "machine": platform.machine(), "safe": self.safe}


@dataclass(frozen=True)
class LoweredLibrary:
    """A host library after the Relax pipeline (``host_pipeline``), before code generation:
    ``module`` (Relax VM functions and scheduled kernels), the ``constants`` it lifted, the
    ``memory`` recorder holding its activation timeline, and the ``target``.
    ``build_lowered`` makes it an executable. The memory stage lowers each depth-first
    candidate once to measure its peak and builds the chosen one from that lowering."""

    module: tvm.IRModule
    constants: Any  # runtime.constants.ConstantTable
    memory: Any  # memory.timeline.TimelineRecorder
    target: tvm.target.Target


def lower_library(mod: tvm.IRModule, build: HostBuild, dfs=None) -> LoweredLibrary:
    """``mod`` through the host's Relax pipeline as ``build`` says, with the depth-first plan
    ``dfs`` (or none); ``build_lowered`` of the result is ``build_library(mod, build, dfs)``."""
    from ..memory.timeline import TimelineRecorder
    from ..runtime.constants import ConstantTable

    target = host_target(build.llvm_cpu)
    constants, memory = ConstantTable(), TimelineRecorder(target)
    pipeline = host_pipeline(target, build.schedules, constants, memory, dfs, build.safe)
    with target:
        lowered = pipeline(mod)
    return LoweredLibrary(lowered, constants, memory, target)


def build_lowered(lowered: LoweredLibrary):
    """(executable, its constant table, its activation timeline recorder) of a lowered
    library: the code generation ``tvm.compile`` does after the Relax pipeline."""
    executable = tvm.compile(lowered.module, target=lowered.target, relax_pipeline=None)
    return executable, lowered.constants, lowered.memory


def build_library(mod: tvm.IRModule, build: HostBuild, dfs=None):
    """(executable, its constant table, its activation timeline recorder): the host library
    of ``mod`` as ``build`` says, with the depth-first plan ``dfs`` (or none)."""
    return build_lowered(lower_library(mod, build, dfs))
