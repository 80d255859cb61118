"""Run ONNX backend node tests through ``edgebyoc.compile`` + ``verify`` on the host target.

The cases are generated in memory by ``onnx.backend.test.loader.load_model_tests(kind="node")``
(the onnx wheel ships no data files). Each case compiles its one-node model, runs it on the
case's own inputs and compares with the case's expected outputs (the ONNX reference results).
Integer inputs of at most ``MAX_FROZEN_ELEMENTS`` elements (shape, axes, index operands) are
compiled as constants with the case's values (``constant_inputs``).

Every case ends in one of:

``passed``       compiled, ran and matched within the tolerance
``mismatch``     compiled and ran, outputs differ beyond the tolerance
``error``        a clear ``EdgebyocError`` (unsupported operator, import failure, ...)
``unexpected``   any other exception: a bug, the thing the suite exists to catch

Run as ``python -m edgebyoc.testing.node_suite --step 6`` to print one JSON line per case; the
process boundary lets the caller tell a crash (the process dies) from a failure.
"""

from __future__ import annotations

import argparse
import gc
import importlib
import json
import sys
import warnings
from typing import Iterator

import numpy as np

RTOL = 1e-4
MAX_FROZEN_ELEMENTS = 16


def load_cases():
    from onnx.backend.test.loader import load_model_tests

    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        return sorted(load_model_tests(kind="node"), key=lambda case: case.name)


def run_case(case) -> dict:
    """Compile, run and compare one case; never raises."""
    import edgebyoc
    from edgebyoc.errors import EdgebyocError
    from edgebyoc.plugins import PluginRegistry

    result = {"name": case.name}
    if not case.data_sets:
        return dict(result, status="error", reason="the case has no data set")
    inputs, expected = case.data_sets[0]
    # the loader gives some cases' data as TensorProtos (e.g. Cast's): as the arrays they hold
    inputs, expected = [_array(v) for v in inputs], [_array(v) for v in expected]
    graph_inputs = [v.name for v in case.model.graph.input
                    if v.name not in {i.name for i in case.model.graph.initializer}]
    if any(isinstance(value, (list, tuple, dict)) for value in inputs) \
            or any(isinstance(value, (list, tuple, dict)) for value in expected):
        return dict(result, status="error", reason="sequence / map values are not tensors")
    feed = {name: np.asarray(value) for name, value in zip(graph_inputs, inputs)}
    # small integer inputs are shape / axes / index operands: frozen as constants, as a
    # deployment compile would (TVM's importer needs most of them constant)
    frozen = {k: v for k, v in feed.items()
              if v.dtype.kind in "iu" and v.size <= MAX_FROZEN_ELEMENTS}
    feed = {k: v for k, v in feed.items() if k not in frozen}
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            # the data fix dynamic dimensions, as a user's --input-shape would
            compiled = edgebyoc.compile(case.model, target="host",
                                        input_shapes={k: v.shape for k, v in feed.items()},
                                        constant_inputs=frozen,
                                        registry=PluginRegistry(search_path=[]))
            verdict, _ = edgebyoc.verify(compiled, inputs=feed, rtol=RTOL,
                                         reference=[np.asarray(v) for v in expected],
                                         reference_name="onnx-expected")
    except EdgebyocError as err:
        if _raised_inside_edgebyoc(err.__cause__):
            return dict(result, status="unexpected",
                        reason=f"edgebyoc bug behind: {err}"[:300])
        return dict(result, status="error", reason=str(err).splitlines()[0][:300])
    except Exception as err:  # noqa: BLE001 - this is what the suite looks for
        return dict(result, status="unexpected", reason=f"{type(err).__name__}: {err}"[:300])
    if verdict.passed:
        return dict(result, status="passed")
    reasons = "; ".join(o.reason for o in verdict.outputs if not o.passed)
    return dict(result, status="mismatch", reason=reasons[:300])


def _array(value):
    from onnx import TensorProto, numpy_helper

    return numpy_helper.to_array(value) if isinstance(value, TensorProto) else value


def _raised_inside_edgebyoc(cause: BaseException | None) -> bool:
    """Whether a wrapped exception was raised by edgebyoc's own code (a bug, not a TVM limit)."""
    if cause is None or cause.__traceback__ is None:
        return False
    import edgebyoc
    from pathlib import Path

    package = Path(edgebyoc.__file__).parent
    frame = cause.__traceback__
    while frame.tb_next is not None:
        frame = frame.tb_next
    return Path(frame.tb_frame.f_code.co_filename).is_relative_to(package) \
        and not isinstance(cause, edgebyoc.EdgebyocError)


def iter_slice(start: int, step: int) -> Iterator:
    cases = load_cases()
    yield from cases[start::step]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--start", type=int, default=0, help="index of the first case")
    parser.add_argument("--step", type=int, default=1, help="take every STEP-th case")
    args = parser.parse_args(argv)
    cases = list(iter_slice(args.start, args.step))
    importlib.import_module("edgebyoc")  # loaded before the freeze below

    # what lives for the whole run (the cases, TVM's and onnx's modules) is left out of the
    # collections a failed import makes (``errors.release_tvm_frames``: a full collection per
    # failed case walked all of it, about 0.15 s each)
    gc.freeze()
    for case in cases:
        print(json.dumps({"status": "started", "name": case.name}), flush=True)
        print(json.dumps(run_case(case)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
