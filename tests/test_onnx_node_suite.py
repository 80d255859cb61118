"""A third of the ONNX backend node-test suite through compile + verify on the host target.

Runs in a child process so that a crash (the process dying) is told apart from a failure. Every
case must end as passed or as a clear edgebyoc error; none may be a mismatch (a compiled wrong
result: values, element types and the number of outputs are compared) or an unexpected
exception. Figures measured with apache-tvm 0.27.0.post1 on this slice (every third case,
628): 375 passed, 253 clear errors (operators TVM does not import, non-tensor inputs, dynamic
operands, and since #26 the semantics and element types TVM's importer lacks, refused instead
of compiled wrong: training-mode BatchNorm, LayerNormalization's extra outputs, antialiased
Resize, float8 casts, ...); 310 passed before the static shape folding (onnx_fold), the max /
min reductions over infinities and half-precision outputs compared within their precision.
375 was measured with shape inference propagating data and again after folding moved to rounds
without it (data propagation materialised a 10^10-element ConstantOfShape). The whole suite:
1,106 / 1,884 passed since the folding, no mismatch (docs/performance.md).
"""

import collections
import json
import subprocess
import sys

import pytest

EXPECTED_PASSED = 375


@pytest.mark.slow
def test_node_suite_slice():
    process = subprocess.run(
        [sys.executable, "-m", "edgebyoc.testing.node_suite", "--start", "0", "--step", "3"],
        capture_output=True, text=True, timeout=900)
    rows = [json.loads(line) for line in process.stdout.splitlines() if line.startswith("{")]
    started = [r["name"] for r in rows if r["status"] == "started"]
    finished = [r for r in rows if r["status"] != "started"]
    assert process.returncode == 0, (f"crashed in {started[-1] if started else '?'}: "
                                     f"{process.stderr[-2000:]}")
    assert len(finished) == len(started) == 628
    counts = collections.Counter(r["status"] for r in finished)
    unexpected = [r for r in finished if r["status"] == "unexpected"]
    assert not unexpected, unexpected[:5]
    assert counts["passed"] >= EXPECTED_PASSED, counts
    assert counts["mismatch"] == 0, [r for r in finished if r["status"] == "mismatch"]
    for row in finished:
        if row["status"] == "error":
            assert row["reason"] and "Traceback" not in row["reason"]
