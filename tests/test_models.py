"""End to end: real network shapes verify against onnxruntime within 1e-4 relative."""

from pathlib import Path

import pytest

import edgebyoc
from edgebyoc.plugins import PluginRegistry
from edgebyoc.testing import models

SHARED = Path(__file__).resolve().parents[2] / "shared" / "models" / "mlperf_tiny"
MLPERF_ONNX = ["pretrainedResnet.onnx", "vww_96_float.onnx", "ad01_fp32.onnx"]


def _verify(model, **kwargs):
    compiled = edgebyoc.compile(model, registry=PluginRegistry(search_path=[]), **kwargs)
    result, _ = edgebyoc.verify(compiled, seed=0)
    return compiled, result


@pytest.mark.slow
@pytest.mark.parametrize("builder", [models.resnet18, models.mobilenet_v2])
def test_imagenet_shaped_models(builder):
    compiled, result = _verify(builder(224))
    assert result.reference == "onnxruntime"
    assert result.passed and result.max_rel < 1e-4, result.to_dict()
    summary = compiled.report["summary"]
    expected_macs = {"resnet18": 1.814e9, "mobilenet_v2": 0.30e9}[compiled.report["model"]["name"]]
    assert summary["macs"] == pytest.approx(expected_macs, rel=0.02)


@pytest.mark.slow
@pytest.mark.skipif(not SHARED.exists(), reason="../shared/models is not beside the checkout")
@pytest.mark.parametrize("name", MLPERF_ONNX)
def test_mlperf_tiny_fp32_onnx(name):
    _, result = _verify(SHARED / name)
    assert result.passed and result.max_rel < 1e-4, result.to_dict()


@pytest.mark.skipif(not SHARED.exists(), reason="../shared/models is not beside the checkout")
def test_kws_float_file_with_int8_weights_is_a_clear_error():
    # upstream's "float32" DS-CNN feeds int8 weights to a float Conv (see shared/models/README)
    from edgebyoc.errors import UnsupportedModelError

    with pytest.raises(UnsupportedModelError) as info:
        edgebyoc.compile(SHARED / "kws_ref_model_float32.onnx",
                         registry=PluginRegistry(search_path=[]))
    message = str(info.value)
    assert "kws_ref_model_float32.onnx: invalid ONNX model: node '..." in message
    assert "(Conv)" in message and "int8" in message and "\n" not in message


@pytest.mark.slow
@pytest.mark.skipif(not SHARED.exists(), reason="../shared/models is not beside the checkout")
@pytest.mark.parametrize("name", ["vww_96_int8.tflite", "kws_ref_model.tflite",
                                  "ad01_int8.tflite", "pretrainedResnet_quant.tflite"])
def test_mlperf_tiny_int8_tflite_is_bit_exact(name):
    pytest.importorskip("tflite")
    _, result = _verify(SHARED / name)
    assert result.reference == "tvm-default-host"
    assert all(o.exact for o in result.outputs), result.to_dict()
