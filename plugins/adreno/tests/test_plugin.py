"""The adreno target end to end: conformance, ResNet-18-, MobileNetV2- and transformer-shaped
models and MLPerf Tiny's VWW verified on the OpenCL device with most MACs offloaded, the
cost decision and its reasons, the blob, options and errors."""

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from edgebyoc.api.testing import (check_installed_plugin, compile, mobilenet_v2, resnet18,
                                  run_cli, verify)
from edgebyoc_adreno.runtime import load_region, opencl_missing, read_blob

pytestmark = pytest.mark.skipif(opencl_missing() is not None,
                                reason=f"OpenCL: {opencl_missing()}")
VWW = Path(__file__).resolve().parents[3] / "../shared/models/mlperf_tiny/vww_96_float.onnx"


def _offloaded_mac_share(compiled) -> float:
    return compiled.report["summary"]["mac_offload_ratio"]


def test_conformance():
    check_installed_plugin("adreno", workloads=True)


@pytest.mark.slow
@pytest.mark.parametrize("name, build", [
    ("resnet18", lambda: resnet18(image_size=64, num_classes=10)),
    ("mobilenet_v2", lambda: mobilenet_v2(image_size=64, num_classes=10))])
def test_cnn_shaped_models_verify_with_most_macs_on_the_gpu(name, build):
    compiled = compile(build(), target="adreno")
    result, _ = verify(compiled, rtol=1e-4)
    assert result.passed and result.reference == "onnxruntime", result.to_dict()
    assert _offloaded_mac_share(compiled) > 0.8
    modules = {r["module"] for r in compiled.report["regions"] if r["offloaded"]}
    assert modules == {"texture"}


@pytest.mark.slow
@pytest.mark.skipif(not VWW.exists(), reason="../shared/models is not beside the checkout")
def test_vww_verifies_through_the_cli(tmp_path):
    code, out = run_cli(["verify", str(VWW), "--target", "adreno", "--output",
                         str(tmp_path / "vww")])
    assert code == 0 and "verify passed" in out, out
    from edgebyoc.api.testing import load

    assert _offloaded_mac_share(load(tmp_path / "vww")) > 0.9


def _transformer_block(tokens=24, width=40, seed=0) -> onnx.ModelProto:
    """MatMul + bias -> LayerNorm -> MatMul -> Softmax -> MatMul, ReLU: the transformer
    kernels of TMModel's Table 3 in one graph."""
    rng = np.random.default_rng(seed)
    init = lambda name, *shape: numpy_helper.from_array(  # noqa: E731
        (rng.standard_normal(shape) * 0.3).astype(np.float32), name)
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["h1"]),
             helper.make_node("Add", ["h1", "b1"], ["h2"]),
             helper.make_node("LayerNormalization", ["h2", "gamma", "beta"], ["n"], axis=-1,
                              epsilon=1e-5),
             helper.make_node("MatMul", ["n", "w2"], ["scores"]),
             helper.make_node("Softmax", ["scores"], ["p"], axis=-1),
             helper.make_node("MatMul", ["p", "w3"], ["h3"]),
             helper.make_node("Relu", ["h3"], ["y"])]
    graph = helper.make_graph(
        nodes, "block", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [tokens, width])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [tokens, width])],
        [init("w1", width, width), init("b1", width), init("gamma", width), init("beta", width),
         init("w2", width, 33), init("w3", 33, width)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_matmul_layernorm_softmax_run_on_the_gpu_and_verify():
    compiled = compile(_transformer_block(), target="adreno", options={"offload": "all"})
    patterns = sorted(r["patterns"][0].split(".")[-1] for r in compiled.report["regions"]
                      if r["offloaded"])
    assert patterns == ["layernorm", "matmul", "matmul_bias", "matmul_relu", "softmax"]
    result, _ = verify(compiled, rtol=1e-4)
    assert result.passed, result.to_dict()


def _deconv_model(stride: int) -> onnx.ModelProto:
    rng = np.random.default_rng(stride)
    w = numpy_helper.from_array(rng.standard_normal((6, 5, 3, 3)).astype(np.float32), "w")
    b = numpy_helper.from_array(rng.standard_normal(5).astype(np.float32), "b")
    node = helper.make_node("ConvTranspose", ["x", "w", "b"], ["y"], strides=[stride] * 2,
                            pads=[1, 1, 1, 1], output_padding=[stride - 1] * 2)
    out = 9 * stride
    graph = helper.make_graph(
        [node, helper.make_node("Relu", ["y"], ["z"])], "deconv",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 6, 9, 9])],
        [helper.make_tensor_value_info("z", TensorProto.FLOAT, [1, 5, out, out])], [w, b])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("stride", [1, 2])
def test_transposed_convolutions_verify(stride):
    compiled = compile(_deconv_model(stride), target="adreno", options={"offload": "all"})
    assert _offloaded_mac_share(compiled) == 1.0
    result, _ = verify(compiled, rtol=1e-4)
    assert result.passed, result.to_dict()


def test_the_cost_model_keeps_tiny_layers_on_the_host_and_says_why():
    model = mobilenet_v2(image_size=32, num_classes=10, width=0.5)
    by_cost = compile(model, target="adreno")
    everything = compile(model, target="adreno", options={"offload": "all"})
    assert _offloaded_mac_share(everything) == 1.0
    assert _offloaded_mac_share(by_cost) < 1.0
    reasons = [r["reason"] for r in by_cost.report["operators"]
               if r["op"] == "nn.conv2d" and r["module"] == "host"]
    assert reasons and all("TMModel predicts" in r and "on the host CPU" in r for r in reasons)


def test_the_blob_holds_the_chosen_kernel_and_its_prediction():
    compiled = compile(resnet18(image_size=32, num_classes=10), target="adreno",
                       options={"fp16": True, "offload": "all"})
    region = next(r for r in compiled.report["regions"] if r["offloaded"])
    assert region["module"] == "texture"
    data = read_blob(compiled.payloads[region["symbols"][0]])
    assert data["entry"] in data["source"] and "image2d_t" in data["source"]
    assert "cl_khr_fp16" in data["fp16_source"]
    assert data["prediction"]["latency"] > 0 and data["device"] == "Adreno 740"
    assert data["config"]["patterns"][0] in ("column", "row", "block2", "block4", "block8")
    with pytest.raises(ValueError, match="not an edgebyoc-adreno region blob"):
        load_region(b"x\x9c\x03\x00\x00\x00\x00\x01", {})


def test_options_are_checked_and_name_what_is_allowed(tmp_path):
    with pytest.raises(Exception, match="option device: 'adreno999' is not allowed"):
        compile(resnet18(image_size=32, num_classes=10), target="adreno",
                options={"device": "adreno999"})
    with pytest.raises(Exception, match="option offload: 'some' is not allowed"):
        compile(resnet18(image_size=32, num_classes=10), target="adreno",
                options={"offload": "some"})
    with pytest.raises(Exception, match="calibration file '/nonexistent/cal.json' cannot be "
                                        "read: No such file"):
        compile(resnet18(image_size=32, num_classes=10), target="adreno",
                options={"calibration": "/nonexistent/cal.json"})
    broken = tmp_path / "broken.json"
    broken.write_text('{"beta": [1]}')
    with pytest.raises(Exception, match="is not an edgebyoc calibration file"):
        compile(resnet18(image_size=32, num_classes=10), target="adreno",
                options={"calibration": str(broken)})


def test_availability_names_the_missing_platform(monkeypatch):
    import pyopencl

    monkeypatch.setattr(pyopencl, "get_platforms", lambda: [])
    assert opencl_missing() == ("no OpenCL platform (install pocl-opencl-icd (Debian) and "
                                "pyopencl)")


def test_calibrate_command_runs_the_micro_benchmarks_on_the_opencl_device(tmp_path, capsys):
    from edgebyoc_adreno.cli import main
    from edgebyoc_adreno.tmmodel import load_calibration

    out = tmp_path / "pocl.json"
    assert main(["calibrate", "-o", str(out), "--runs", "10", "--steps", "64"]) == 0
    fitted = load_calibration(str(out))
    assert len(fitted.beta) == 1 + 3 * len(fitted.block_shapes) and fitted.D >= 1.0
    from edgebyoc_adreno.runtime import device

    assert fitted.fit["runs"] == 10 and fitted.fit["measured_on"] == device().name
    assert "cross-validated R^2" in capsys.readouterr().out
    simulated = tmp_path / "sim.json"
    assert main(["calibrate", "--simulate", "--device", "mali_g77", "-o", str(simulated),
                 "--runs", "12"]) == 0
    assert load_calibration(str(simulated)).fit["measured_on"] == "simulation of Mali-G77"
    with pytest.raises(SystemExit):
        main(["calibrate", "-o", str(out), "--runs", "3"])


def test_calibrations_are_edgebyoc_calibration_files(tmp_path):
    """The micro-benchmark fit writes edgebyoc's calibration format: the core's option
    applies it (the report names it) and `edgebyoc calibrate adreno` could refine it; the
    device's shipped file is in force by default."""
    import json

    from edgebyoc.api import calibrated_constants
    from edgebyoc_adreno.cli import main
    from edgebyoc_adreno.plugin import TARGET
    from edgebyoc_adreno.tmmodel import load_calibration, parameter_names

    out = tmp_path / "sim.json"
    assert main(["calibrate", "--simulate", "--device", "mali_g77", "-o", str(out),
                 "--runs", "12"]) == 0
    saved = json.loads(out.read_text())
    assert saved["format"] == "edgebyoc-calibration/1" and saved["target"] == "adreno"
    assert list(saved["values"]) == parameter_names()
    fitted = load_calibration(str(out))
    values = calibrated_constants(TARGET, {"device": "mali_g77", "calibration": str(out)})
    assert [values[n] for n in parameter_names()] == [*fitted.beta, fitted.D]
    model = _transformer_block()
    report = compile(model, target="adreno", options={"device": "mali_g77",
                                                      "calibration": str(out)}).report
    assert report["summary"]["calibration"]["file"] == str(out)
    default = compile(model, target="adreno", options={"device": "pocl"}).report
    assert default["summary"]["calibration"]["file"].endswith("pocl.calibration.json")
    shipped = calibrated_constants(TARGET, {"device": "pocl", "calibration": ""})
    assert shipped["beta_reads"] == pytest.approx(load_calibration("pocl").beta[0])


def test_predicted_cycles_are_counted_at_the_target_clock_for_every_device():
    from edgebyoc_adreno.plugin import TARGET
    from edgebyoc_adreno.tmmodel import load_device

    model = _transformer_block()
    for device in ("adreno740", "mali_g77"):
        compiled = compile(model, target="adreno", options={"offload": "all",
                                                             "device": device})
        clock = load_device(device).clock_hz
        for region in compiled.report["regions"]:
            (breakdown,) = region["breakdown"]
            assert region["predicted_cycles"] == pytest.approx(
                breakdown["L"] * TARGET.clock_hz / clock)
        assert compiled.report["summary"]["clock_hz"] == TARGET.clock_hz
