"""Verification: run a compiled model and compare it with a reference executor.

References: onnxruntime for ONNX models; TVM's own default host build (no edgebyoc layouts or
schedules) for TFLite and Relax models, and for ONNX when onnxruntime is not installed.

Integerized compiles (targets whose import transforms turn quantized models into integer
operators, ``edgebyoc.quant``) are checked two ways instead (``IntegerReport``):

1. bit-exact against ``numpy-integer``: the numpy executor of the same integer graph, each
   requantization rounded as the module that runs it does (``ExecModule.requantize_rounding``).
   This proves the generated code (tiling, offsets, DMA, buffering) and decides pass / fail;
2. against the model's int8 reference ``tvm-integer-host``, TVM's host build of that graph with
   TFLite's requantization everywhere: the share of identical outputs and the largest
   difference in LSBs. It must be identical unless a module rounds otherwise; then the report
   names the modules and the largest per-layer deviation, which must stay within 1 LSB.

The model's float-emulated reference (TVM's default build of the dequantize / quantize graph, or
onnxruntime) is reported beside them for information.

Every output must have the reference's shape and element type, and there must be as many
outputs as the reference gives. Error measure, per output: ``max_abs`` = max |out - ref|;
``rel`` = max_abs / max |ref| (the error relative to the output's range, robust to reference
values near zero). Float outputs pass
when ``rel <= rtol`` (default 1e-4), or, for half-precision outputs (float16, bfloat16), within
their own precision when that is coarser: ``rel <= PRECISION_ROUNDINGS * finfo(dtype).eps`` (four roundings: float16
3.9e-3, bfloat16 3.1e-2; a half-precision result computed in a few rounded steps cannot agree
to 1e-4 of its range); integer and boolean outputs must be bit-exact. NaNs must appear in the
same places in both.

Deep float32 networks round differently in every evaluation order: FCN-ResNet50 (2048-channel
convolutions) differs from its float64 result by 1.1e-4 in PyTorch and 0.8e-4 to 1.0e-4 in
onnxruntime, and PyTorch and onnxruntime differ from each other by 1.3e-4. So when an output
misses ``rtol`` against onnxruntime, the reference is evaluated a second time with its graph
optimizations off (other kernels and fusions: another float32 order), and the output's
tolerance becomes ``REFERENCE_SPREAD_FACTOR`` (2) times the relative difference of those two
evaluations when that is larger than ``rtol``: an error within the reference's own float32
spread is rounding, not a wrong operator (which is orders of magnitude larger). The
comparison states the tolerance it applied and why (``OutputComparison.tolerance``,
``reason``). An explicit ``rtol`` (``verify(..., rtol=1e-5)``, ``--rtol``) is applied as it is,
and ``reference_spread=False`` keeps the default ``rtol`` alone.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any, Mapping

import numpy as np

from .errors import EdgebyocError, first_line
from .frontend import ImportedModel, random_inputs

DEFAULT_RTOL = 1e-4

#: an output within this multiple of the reference's own float32 spread passes (see above)
REFERENCE_SPREAD_FACTOR = 2.0


@dataclass
class OutputComparison:
    name: str
    max_abs: float
    rel: float
    exact: bool
    passed: bool
    reason: str = ""
    #: the relative tolerance applied (``rtol``, a half-precision type's, or the reference's
    #: float32 spread times ``REFERENCE_SPREAD_FACTOR``); 0 for integer outputs
    tolerance: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "max_abs": self.max_abs, "rel": self.rel,
                "exact": self.exact, "passed": self.passed, "reason": self.reason,
                "tolerance": self.tolerance}


@dataclass
class Agreement:
    """How often the outputs equal one reference's, and by how much they differ at most: in
    LSBs for integer outputs, as an absolute difference for float (dequantized) ones."""

    reference: str
    identical_share: float
    max_diff: float
    integer: bool = True

    @property
    def max_lsb(self) -> int | None:
        return int(self.max_diff) if self.integer else None

    def describe(self) -> str:
        worst = f"max {self.max_lsb} LSB" if self.integer else f"max abs {self.max_diff:.3g}"
        return f"{100 * self.identical_share:.1f} % identical, {worst}"

    def to_dict(self) -> dict[str, Any]:
        return {"reference": self.reference, "identical_share": self.identical_share,
                "max_diff": self.max_diff, "max_lsb": self.max_lsb}


@dataclass
class IntegerReport:
    """The integer checks of an integerized compile (see the module docstring)."""

    agreements: list[Agreement]
    rounding: dict[str, str]  # module -> its rounding, for modules that do not round as TFLite
    layers_rounded_otherwise: int
    max_layer_lsb: int

    @property
    def passed(self) -> bool:
        exact, model = self.agreements[0], self.agreements[1]
        if exact.max_diff != 0:
            return False
        return model.max_diff == 0 or (bool(self.rounding) and self.max_layer_lsb <= 1)

    @property
    def note(self) -> str:
        if not self.rounding:
            return "every layer requantizes as TFLite specifies"
        modules = ", ".join(f"{m} rounds {r.replace('_', ' ')}" for m, r in self.rounding.items())
        return (f"{modules}: {self.layers_rounded_otherwise} layer(s) differ from TFLite's "
                f"rounding by at most {self.max_layer_lsb} LSB each")

    def to_dict(self) -> dict[str, Any]:
        return {"passed": self.passed, "agreements": [a.to_dict() for a in self.agreements],
                "rounding": dict(self.rounding),
                "layers_rounded_otherwise": self.layers_rounded_otherwise,
                "max_layer_lsb": self.max_layer_lsb, "note": self.note}


@dataclass
class VerifyResult:
    reference: str
    rtol: float
    outputs: list[OutputComparison] = field(default_factory=list)
    integer: IntegerReport | None = None

    @property
    def passed(self) -> bool:
        return all(o.passed for o in self.outputs) and \
            (self.integer is None or self.integer.passed)

    @property
    def max_abs(self) -> float:
        return max((o.max_abs for o in self.outputs), default=0.0)

    @property
    def max_rel(self) -> float:
        return max((o.rel for o in self.outputs), default=0.0)

    def to_dict(self) -> dict[str, Any]:
        return {"reference": self.reference, "rtol": self.rtol, "passed": self.passed,
                "max_abs": self.max_abs, "max_rel": self.max_rel,
                "outputs": [o.to_dict() for o in self.outputs],
                "integer": self.integer.to_dict() if self.integer is not None else None}


#: the roundings of its own type a float output may differ by (``_precision``)
PRECISION_ROUNDINGS = 4


def _precision(dtype) -> float:
    """The relative spacing of ``dtype``'s numbers near 1 (machine epsilon); 0 where unknown."""
    try:
        return float(np.finfo(dtype).eps)
    except (TypeError, ValueError):
        try:
            import ml_dtypes
            return float(ml_dtypes.finfo(dtype).eps)
        except (ImportError, TypeError, ValueError):
            return 0.0


def compare_output(name: str, out: np.ndarray, ref: np.ndarray, rtol: float) -> OutputComparison:
    """Compare one output with its reference under the rules of the module docstring."""
    out, ref = np.asarray(out), np.asarray(ref)
    if out.shape != ref.shape:
        return OutputComparison(name, float("inf"), float("inf"), False, False,
                                f"shape {list(out.shape)} vs reference {list(ref.shape)}")
    if out.dtype != ref.dtype:
        return OutputComparison(name, float("inf"), float("inf"), False, False,
                                f"element type {out.dtype} vs reference {ref.dtype}")
    if out.size == 0:
        return OutputComparison(name, 0.0, 0.0, True, True)
    if ref.dtype.kind in "biu" or out.dtype.kind in "biu":
        diff = np.abs(out.astype(np.float64) - ref.astype(np.float64))
        max_abs = float(diff.max())
        scale = float(np.abs(ref.astype(np.float64)).max()) or 1.0
        exact = max_abs == 0
        return OutputComparison(name, max_abs, max_abs / scale, exact, exact,
                                "" if exact else "integer output is not bit-exact")
    out64, ref64 = out.astype(np.float64), ref.astype(np.float64)
    nan_out, nan_ref = np.isnan(out64), np.isnan(ref64)
    if not np.array_equal(nan_out, nan_ref):
        return OutputComparison(name, float("nan"), float("nan"), False, False,
                                "NaNs differ from the reference")
    finite = ~nan_ref
    inf_mismatch = np.any((np.isinf(out64) | np.isinf(ref64)) & finite & (out64 != ref64))
    if inf_mismatch:
        return OutputComparison(name, float("inf"), float("inf"), False, False,
                                "infinities differ from the reference")
    usable = finite & ~np.isinf(ref64)
    if not usable.any():
        return OutputComparison(name, 0.0, 0.0, True, True)
    diff = np.abs(out64[usable] - ref64[usable])
    max_abs = float(diff.max())
    scale = float(np.abs(ref64[usable]).max())
    rel = max_abs / scale if scale > 0 else max_abs
    # a half-precision output: at least its own precision (the module docstring)
    tolerance = max(rtol, PRECISION_ROUNDINGS * _precision(ref.dtype)) \
        if ref.dtype.itemsize < 4 else rtol
    passed = rel <= tolerance
    return OutputComparison(name, max_abs, rel, max_abs == 0, passed,
                            "" if passed else f"relative error {rel:.3g} > {tolerance:g}"
                            + (f" ({ref.dtype}'s precision)" if tolerance > rtol else ""),
                            tolerance)


def onnxruntime_outputs(onnx_model, inputs: Mapping[str, np.ndarray], threads: int = 2,
                        names: list[str] | None = None,
                        optimized: bool = True) -> dict[str, np.ndarray] | None:
    """Outputs of onnxruntime on ``inputs``, by ``names`` (the compiled model's output names,
    in the graph's order) or the graph's; ``None`` when onnxruntime is not installed.
    ``optimized=False`` turns its graph optimizations off (another float32 evaluation
    order, for the reference's spread)."""
    try:
        import onnxruntime as ort
    except ImportError:
        return None
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.log_severity_level = 3
    if not optimized:
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    try:
        session = ort.InferenceSession(onnx_model.SerializeToString(), options,
                                       providers=["CPUExecutionProvider"])
        values = session.run(None, dict(inputs))
        if names is None or len(names) != len(values):
            names = [o.name for o in session.get_outputs()]
        return dict(zip(names, values))
    except Exception as err:  # noqa: BLE001
        raise EdgebyocError(f"onnxruntime cannot run the reference: {first_line(err)}") from err


def reference_outputs(imported: ImportedModel, inputs: Mapping[str, np.ndarray]
                      ) -> tuple[str, dict[str, np.ndarray]]:
    """(reference name, outputs by name) for ``imported`` on ``inputs``."""
    if imported.format == "onnx" and imported.onnx_model is not None:
        outputs = onnxruntime_outputs(imported.onnx_model, inputs,
                                      names=[s.name for s in imported.outputs])
        if outputs is not None:
            return "onnxruntime", outputs
    from .codegen.host import build_host, host_target
    from .runtime.artifact import HostRunner

    runner = DEFAULT_REFERENCES.get(("default", _model_key(imported)), lambda: HostRunner(
        build_host(imported.mod, host_target(), schedules=False), imported.inputs,
        imported.outputs))
    return "tvm-default-host", runner.run(dict(inputs))


class ReferenceCache:
    """Reference executors built once per imported graph and reused, the ``size`` most
    recent; safe to share between threads. ``verify`` and ``reference_outputs`` use the
    process's ``DEFAULT_REFERENCES``."""

    def __init__(self, size: int = 8):
        self.size = size
        self._entries: dict[tuple, Any] = {}
        self._lock = threading.Lock()

    def get(self, key: tuple, build):
        with self._lock:
            if key in self._entries:
                return self._entries[key]
        from .session import TVM_LOCK

        with TVM_LOCK:  # outside the cache's lock: building takes seconds
            value = build()
        with self._lock:
            if len(self._entries) >= self.size and key not in self._entries:
                self._entries.pop(next(iter(self._entries)))
            return self._entries.setdefault(key, value)


#: the reference executors of this process (every compile of one model shares them)
DEFAULT_REFERENCES = ReferenceCache()


def _model_key(imported: ImportedModel) -> int:
    """The structural hash of the imported graph (constants included)."""
    import tvm_ffi

    return int(tvm_ffi.structural_hash(imported.mod))


def verify(compiled, inputs: Mapping[str, np.ndarray] | None = None,
           rtol: float | None = None, seed: int = 0,
           reference: Mapping[str, np.ndarray] | None = None, reference_name: str = "given",
           reference_spread: bool | None = None) -> tuple[VerifyResult, dict[str, np.ndarray]]:
    """Run ``compiled`` (a ``CompiledModel`` from ``edgebyoc.compile``) and compare.

    ``inputs`` default to seeded random ones; ``reference`` (outputs by name or in order)
    replaces the reference executor; ``rtol`` defaults to ``DEFAULT_RTOL``;
    ``reference_spread``: a float output that misses ``rtol`` against onnxruntime may pass
    within the reference's own float32 spread (the module docstring), by default only when
    ``rtol`` is not given (an explicit ``rtol`` is applied as it is). Returns the result and
    the compiled model's outputs.
    """
    if reference_spread is None:
        reference_spread = rtol is None
    rtol = DEFAULT_RTOL if rtol is None else rtol
    if inputs is None:
        inputs = random_inputs(compiled.inputs, seed)
    outputs = compiled.run(dict(inputs))
    integer = None
    if reference is None and compiled.imported is not None and integerized(compiled):
        integer, reference = _integer_checks(compiled, inputs, outputs)
        reference_name = "numpy-integer"
    if reference is None:
        if compiled.imported is None:
            raise EdgebyocError("verify needs the model: compile it, or pass reference outputs")
        reference_name, reference = reference_outputs(compiled.imported, inputs)
    result = VerifyResult(reference_name, rtol)
    ref_values = list(reference.values()) if isinstance(reference, Mapping) else list(reference)
    ref_by_name = dict(reference) if isinstance(reference, Mapping) else {}
    if len(ref_values) != len(outputs):
        raise EdgebyocError(f"the model has {len(outputs)} output(s), the reference "
                            f"{reference_name} gave {len(ref_values)}")
    for index, (name, value) in enumerate(outputs.items()):
        ref = ref_by_name.get(name, ref_values[index])
        result.outputs.append(compare_output(name, value, ref, rtol))
    if reference_spread and reference_name == "onnxruntime":
        _within_reference_spread(result, compiled.imported, inputs, reference)
    result.integer = integer
    return result, outputs


def _within_reference_spread(result: VerifyResult, imported: ImportedModel,
                             inputs: Mapping[str, np.ndarray],
                             reference: Mapping[str, np.ndarray]) -> None:
    """Re-judge the float outputs that missed ``rtol`` against onnxruntime's own float32
    spread: its outputs with graph optimizations off against those with them on."""
    reference_list = list(reference.values())
    missed = [i for i, c in enumerate(result.outputs)
              if not c.passed and np.isfinite(c.rel) and c.reason.startswith("relative error")]
    if not missed:
        return
    other = onnxruntime_outputs(imported.onnx_model, inputs,
                                names=[s.name for s in imported.outputs], optimized=False)
    if other is None:
        return
    other_values = list(other.values())
    for i in missed:
        comparison = result.outputs[i]
        ours_ref = reference.get(comparison.name, reference_list[i])
        spread = compare_output(comparison.name,
                                np.asarray(other.get(comparison.name, other_values[i])),
                                np.asarray(ours_ref), result.rtol).rel
        tolerance = REFERENCE_SPREAD_FACTOR * spread
        if not np.isfinite(tolerance) or tolerance <= comparison.tolerance:
            continue
        comparison.tolerance = tolerance
        comparison.passed = comparison.rel <= tolerance
        within = "within" if comparison.passed else "beyond"
        comparison.reason = (f"relative error {comparison.rel:.3g} {within} "
                             f"{REFERENCE_SPREAD_FACTOR:g}x onnxruntime's own float32 spread "
                             f"({spread:.3g}, graph optimizations on against off)")


def _requantize_modules(compiled) -> list[str]:
    """The module of every requantization of the integer graph, in program order."""
    from .quant.integerize import REQUANTIZE

    return [row["module"] for row in compiled.report["operators"]
            if str(row.get("callee", "")).startswith(REQUANTIZE)]


def integerized(compiled) -> bool:
    """Whether ``compiled`` went through integerization (it holds integer requantizations)."""
    from .quant.integerize import QADD, REQUANTIZE

    return any(str(row.get("callee", "")).startswith((REQUANTIZE, QADD))
               for row in compiled.report["operators"])


def _agreement(name: str, outputs: Mapping[str, np.ndarray], reference: list) -> Agreement:
    same = total = 0
    worst, integer = 0.0, True
    for out, ref in zip(outputs.values(), reference):
        out = np.asarray(out)
        integer &= out.dtype.kind in "biu"
        diff = np.abs(out.astype(np.float64) - np.asarray(ref, dtype=np.float64).reshape(out.shape))
        same, total = same + int((diff == 0).sum()), total + diff.size
        worst = max(worst, float(diff.max(initial=0)))
    return Agreement(name, same / total if total else 1.0, worst, integer)


def _integer_host(graph, compiled):
    """(graph, TVM's host build of it): the integer graph and its int8 host reference."""
    from .codegen.host import build_host, host_target
    from .runtime.artifact import HostRunner

    return graph, HostRunner(build_host(graph, host_target(), schedules=False), compiled.inputs,
                             compiled.outputs)


def _integer_checks(compiled, inputs, outputs):
    """(IntegerReport, numpy-integer outputs) of an integerized compile."""
    from .pipeline import prepare
    from .plugins import default_registry
    from .quant.arith import ROUND_TFLITE, ROUNDING_MODES
    from .quant.reference import run_reference

    registry = compiled._registry or default_registry()
    target = registry.target(compiled.report["target"]["name"])
    imported = compiled.imported
    graph, runner = DEFAULT_REFERENCES.get(("integer", target.name, _model_key(imported)),
                                           lambda: _integer_host(
        prepare(imported.mod, target, registry), compiled))
    modules = {m.name: m for m in target.modules}
    rounding, otherwise = {}, {}
    for index, module in enumerate(_requantize_modules(compiled)):
        mode = modules[module].requantize_rounding if module in modules else "tflite"
        rounding[index] = ROUNDING_MODES[mode]
        if rounding[index] != ROUND_TFLITE:
            otherwise[module] = mode
    values = [np.asarray(inputs[s.name]) for s in compiled.inputs]
    deviation: dict[int, int] = {}
    exact = run_reference(graph, values, rounding, deviation)
    host = list(runner.run(dict(inputs)).values())
    _, model = reference_outputs(compiled.imported, inputs)
    model_name = "onnxruntime" if compiled.imported.format == "onnx" else "tvm-default-host"
    agreements = [_agreement("numpy-integer", outputs, exact),
                  _agreement("tvm-integer-host", outputs, host),
                  _agreement(f"{model_name} (float-emulated quantization)", outputs,
                             list(model.values()))]
    report = IntegerReport(agreements, otherwise, len(deviation),
                           max(deviation.values(), default=0))
    return report, exact


def region_host_outputs(region, args) -> list[np.ndarray]:
    """Run an offloaded ``Region`` on the host through TVM (its composite functions lifted and
    built like the rest of the host code) on ``args`` (its parameters in order): the
    reference a plugin's engine for that region is checked against."""
    import tvm
    from tvm import relax

    function = region.function.without_attr("Codegen").with_attr("global_symbol", "main")
    mod = relax.transform.LambdaLift()(tvm.IRModule({"main": function}))
    for gv, func in list(mod.functions.items()):
        if func.attrs and "Composite" in func.attrs:
            mod[gv] = func.without_attr("Composite").without_attr("Primitive")
    vm = relax.VirtualMachine(tvm.compile(mod, target="llvm"), tvm.cpu())
    out = vm["main"](*[tvm.runtime.tensor(np.array(a, copy=True, order="C")) for a in args])
    return [out.numpy()] if hasattr(out, "numpy") else [o.numpy() for o in out]
