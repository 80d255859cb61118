"""Verification: run a compiled model and compare it with a reference executor.

References: onnxruntime for ONNX models; TVM's own default host build (no edgebyoc layouts or
schedules) for TFLite and Relax models, and for ONNX when onnxruntime is not installed.

Error measure, per output: ``max_abs`` = max |out - ref|; ``rel`` = max_abs / max |ref| (the
error relative to the output's range, robust to reference values near zero). Float outputs pass
when ``rel <= rtol`` (default 1e-4); integer and boolean outputs must be bit-exact. NaNs must
appear in the same places in both.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

import numpy as np

from .errors import EdgebyocError, first_line
from .frontend import ImportedModel, random_inputs

DEFAULT_RTOL = 1e-4


@dataclass
class OutputComparison:
    name: str
    max_abs: float
    rel: float
    exact: bool
    passed: bool
    reason: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "max_abs": self.max_abs, "rel": self.rel,
                "exact": self.exact, "passed": self.passed, "reason": self.reason}


@dataclass
class VerifyResult:
    reference: str
    rtol: float
    outputs: list[OutputComparison] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return all(o.passed for o in self.outputs)

    @property
    def max_abs(self) -> float:
        return max((o.max_abs for o in self.outputs), default=0.0)

    @property
    def max_rel(self) -> float:
        return max((o.rel for o in self.outputs), default=0.0)

    def to_dict(self) -> dict[str, Any]:
        return {"reference": self.reference, "rtol": self.rtol, "passed": self.passed,
                "max_abs": self.max_abs, "max_rel": self.max_rel,
                "outputs": [o.to_dict() for o in self.outputs]}


def compare_output(name: str, out: np.ndarray, ref: np.ndarray, rtol: float) -> OutputComparison:
    """Compare one output with its reference under the rules of the module docstring."""
    out, ref = np.asarray(out), np.asarray(ref)
    if out.shape != ref.shape:
        return OutputComparison(name, float("inf"), float("inf"), False, False,
                                f"shape {list(out.shape)} vs reference {list(ref.shape)}")
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
    passed = rel <= rtol
    return OutputComparison(name, max_abs, rel, max_abs == 0, passed,
                            "" if passed else f"relative error {rel:.3g} > {rtol:g}")


def onnxruntime_outputs(onnx_model, inputs: Mapping[str, np.ndarray],
                        threads: int = 2) -> dict[str, np.ndarray] | None:
    """Outputs of onnxruntime on ``inputs``; ``None`` when onnxruntime is not installed."""
    try:
        import onnxruntime as ort
    except ImportError:
        return None
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.log_severity_level = 3
    try:
        session = ort.InferenceSession(onnx_model.SerializeToString(), options,
                                       providers=["CPUExecutionProvider"])
        names = [o.name for o in session.get_outputs()]
        return dict(zip(names, session.run(names, dict(inputs))))
    except Exception as err:  # noqa: BLE001
        raise EdgebyocError(f"onnxruntime cannot run the reference: {first_line(err)}") from err


def reference_outputs(imported: ImportedModel, inputs: Mapping[str, np.ndarray]
                      ) -> tuple[str, dict[str, np.ndarray]]:
    """(reference name, outputs by name) for ``imported`` on ``inputs``."""
    if imported.format == "onnx" and imported.onnx_model is not None:
        outputs = onnxruntime_outputs(imported.onnx_model, inputs)
        if outputs is not None:
            return "onnxruntime", outputs
    from .codegen.host import build_host, host_target
    from .runtime.artifact import HostRunner

    executable = build_host(imported.mod, host_target(), schedules=False)
    runner = HostRunner(executable, imported.inputs, imported.outputs)
    return "tvm-default-host", runner.run(dict(inputs))


def verify(compiled, inputs: Mapping[str, np.ndarray] | None = None, rtol: float = DEFAULT_RTOL,
           seed: int = 0, reference: Mapping[str, np.ndarray] | None = None,
           reference_name: str = "given") -> tuple[VerifyResult, dict[str, np.ndarray]]:
    """Run ``compiled`` (a ``CompiledModel`` from ``edgebyoc.compile``) and compare.

    ``inputs`` default to seeded random ones; ``reference`` (outputs by name or in order)
    replaces the reference executor. Returns the result and the compiled model's outputs.
    """
    if inputs is None:
        inputs = random_inputs(compiled.inputs, seed)
    outputs = compiled.run(dict(inputs))
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
    return result, outputs
