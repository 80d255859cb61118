"""sparse_cpu: contract conformance, numerics against onnxruntime, the offload decision."""

import numpy as np
import onnxruntime as ort
import pytest

from edgebyoc.api.testing import check_installed_plugin, compile, load
from edgebyoc_sparse_cpu.layers import TABLE_II, conv_layer, sparse_weight


def reference(model, x):
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, {"x": x})[0]


def check(model, offloaded=True, rtol=1e-4, options=None):
    compiled = compile(model, target="sparse_cpu", options=options)
    conv_rows = [r for r in compiled.report["operators"] if r["op"] == "nn.conv2d"]
    assert all((r["module"] == "spardr") == offloaded for r in conv_rows), conv_rows
    shape = compiled.inputs[0].shape
    x = np.random.default_rng(1).standard_normal(shape).astype(np.float32)
    got = next(iter(compiled.run({"x": x}).values()))
    expected = reference(model, x)
    assert np.abs(got - expected).max() <= rtol * np.abs(expected).max()
    return compiled


def test_conformance():
    check_installed_plugin("sparse_cpu", workloads=True)


@pytest.mark.slow
@pytest.mark.parametrize("name", TABLE_II)
def test_table_ii_layers(name):
    check(conv_layer(*TABLE_II[name]))


@pytest.mark.parametrize("case", [
    dict(c_in=16, h=15, w=13, c_out=24, kernel=3, pad=1, stride=2, sparsity=0.85),
    dict(c_in=12, h=17, w=17, c_out=16, kernel=3, pad=2, stride=1, sparsity=0.85, dilation=2),
    dict(c_in=8, h=12, w=10, c_out=8, kernel=5, pad=2, stride=1, sparsity=0.9, relu=False),
    dict(c_in=32, h=9, w=9, c_out=32, kernel=1, pad=0, stride=2, sparsity=0.9),
])
def test_strides_dilation_and_odd_sizes(case):
    # small layers: the cost model would keep them on the host, min_speedup=0 offloads them
    check(conv_layer(**case), options={"min_speedup": 0})


def test_empty_output_channels():
    rng = np.random.default_rng(3)
    weight = sparse_weight((16, 16, 3, 3), 0.9, rng)
    weight[[0, 5, 15]] = 0.0  # three output channels without a single non-zero
    check(conv_layer(16, 12, 12, 16, 3, 1, 1, 0.9, weight=weight),
          options={"min_speedup": 0})


def test_dense_layers_stay_on_the_host():
    compiled = check(conv_layer(64, 28, 28, 64, 3, 1, 1, sparsity=0.3),
                     offloaded=False)
    assert compiled.report["summary"]["offloaded_operators"] == 0


def test_weights_are_stored_as_csr_once(tmp_path):
    import json

    model = conv_layer(*TABLE_II["CV9"])
    compiled = check(model)
    artifact = compiled.save(tmp_path / "cv9")
    manifest = json.loads((artifact / "manifest.json").read_text())
    dtypes = sorted(row["dtype"] for row in manifest["constants"])
    # CSR values, offsets, row pointers, channel order and the bias; no dense weight
    assert dtypes == ["float32", "float32", "int32", "int32", "int32"]
    nnz = int(np.count_nonzero(onnx_weight(model)))
    assert [row["shape"] for row in manifest["constants"] if row["dtype"] == "float32"] \
        .count([nnz]) == 1
    again = load(artifact)
    x = np.ones(compiled.inputs[0].shape, np.float32)
    assert np.array_equal(again.run({"x": x})["y"], compiled.run({"x": x})["y"])


def onnx_weight(model):
    from onnx import numpy_helper
    return next(numpy_helper.to_array(t) for t in model.graph.initializer if t.name == "w")


def test_grouped_and_depthwise_convolutions():
    check(conv_layer(16, 12, 12, 16, 3, 1, 1, 0.85, groups=4),
          options={"min_speedup": 0})
    check(conv_layer(24, 11, 13, 24, 3, 1, 2, 0.7, groups=24),
          options={"min_speedup": 0})


def test_reasons_for_staying_on_the_host():
    compiled = check(conv_layer(64, 28, 28, 64, 3, 1, 1, sparsity=0.3),
                     offloaded=False)
    (row,) = [r for r in compiled.report["operators"] if r["op"] == "nn.conv2d"]
    assert row["reason"].startswith("spardr: 30% sparse: predicted ")
    assert "below min_speedup 1" in row["reason"]


@pytest.mark.slow
def test_wheel_ships_the_templates(tmp_path):
    import subprocess
    import sys
    import zipfile
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp_path),
                    str(root)], check=True, capture_output=True)
    names = zipfile.ZipFile(next(tmp_path.glob("*.whl"))).namelist()
    assert "edgebyoc_sparse_cpu/templates/spardr_conv.c.mako" in names
