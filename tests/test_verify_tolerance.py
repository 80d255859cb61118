"""verify's float tolerance: ``rtol``, widened to twice onnxruntime's own float32 spread (its
outputs with graph optimizations off against on) when that is larger, stated per output."""

import sys

import numpy as np
import pytest

import edgebyoc.verify  # noqa: F401 - the module (``edgebyoc.verify`` is also the function)
from edgebyoc import compile, verify
from edgebyoc.testing.models import small_convnet

verify_module = sys.modules["edgebyoc.verify"]


@pytest.fixture(scope="module")
def compiled():
    return compile(small_convnet(), progress=False)


def _skewed_reference(monkeypatch, error: float, spread: float):
    """onnxruntime's optimized outputs off from ours by ``error`` of their range, its
    unoptimized outputs off from the optimized ones by ``spread``."""
    real = verify_module.onnxruntime_outputs
    calls = []

    def fake(model, inputs, threads=2, names=None, optimized=True):
        calls.append(optimized)
        outputs = real(model, inputs, threads, names)
        skewed = {}
        for name, value in outputs.items():
            scale = np.abs(value).max()
            shifted = value + np.float32(error * scale) * (value == value.max())
            skewed[name] = shifted if optimized else \
                shifted + np.float32(spread * scale) * (value == value.min())
        return skewed

    monkeypatch.setattr(verify_module, "onnxruntime_outputs", fake)
    return calls


def test_an_error_within_the_references_own_spread_passes_and_says_so(compiled, monkeypatch):
    calls = _skewed_reference(monkeypatch, error=1.5e-4, spread=1e-4)
    result, _ = verify(compiled, seed=0)
    output = result.outputs[0]
    assert calls == [True, False]  # the second evaluation only because rtol was missed
    assert result.passed and output.rel == pytest.approx(1.5e-4, rel=0.05)
    assert output.tolerance == pytest.approx(2e-4, rel=0.05)
    assert "within 2x onnxruntime's own float32 spread (0.0001" in output.reason
    assert output.to_dict()["tolerance"] == output.tolerance


def test_an_error_beyond_it_fails_and_rtol_alone_can_be_asked_for(compiled, monkeypatch):
    _skewed_reference(monkeypatch, error=1.5e-4, spread=1e-6)  # the spread is below rtol
    result, _ = verify(compiled, seed=0)
    assert not result.passed and result.outputs[0].tolerance == 1e-4
    assert result.outputs[0].reason.startswith("relative error 0.00015 > 0.0001")
    _skewed_reference(monkeypatch, error=5e-4, spread=1e-4)
    result, _ = verify(compiled, seed=0)
    assert not result.passed and "beyond 2x onnxruntime's own float32 spread" in \
        result.outputs[0].reason
    calls = _skewed_reference(monkeypatch, error=1.5e-4, spread=1e-4)
    result, _ = verify(compiled, seed=0, reference_spread=False)
    assert not result.passed and calls == [True]
    calls = _skewed_reference(monkeypatch, error=1.5e-4, spread=1e-4)
    result, _ = verify(compiled, seed=0, rtol=1e-4)  # an explicit rtol is applied as given
    assert not result.passed and calls == [True] and result.outputs[0].tolerance == 1e-4


def test_a_passing_output_costs_no_second_evaluation(compiled, monkeypatch):
    calls = _skewed_reference(monkeypatch, error=0.0, spread=1e-4)
    result, _ = verify(compiled, seed=0)
    assert result.passed and calls == [True] and result.outputs[0].tolerance == 1e-4
