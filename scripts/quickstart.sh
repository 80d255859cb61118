#!/usr/bin/env bash
# Sets up a virtual environment with edgebyoc and every plugin, then shows what edgebyoc is for:
# an int8 MLPerf Tiny network compiled for gap9, verified bit-exactly, its deployable C project
# built with make and run; then a float model compiled and verified for the host.
# Usage: bash scripts/quickstart.sh [MODEL.onnx]   (the host example; default: MLPerf Tiny VWW
# from ../shared/models, or a generated ResNet-18-shaped model when ../shared is absent)
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${VENV:-.venv}
export PYTHONWARNINGS=ignore  # setuptools' deprecation notes from the editable builds
if [ ! -x "$VENV/bin/python" ]; then
    python3 -m venv "$VENV"
fi
"$VENV/bin/python" -m pip install --quiet --upgrade pip
"$VENV/bin/python" -m pip install --quiet -e '.[test]'
for plugin in plugins/*/; do
    [ -f "$plugin/pyproject.toml" ] && "$VENV/bin/python" -m pip install --quiet -e "$plugin"
done
"$VENV/bin/edgebyoc" plugins

INT8=../shared/models/mlperf_tiny/pretrainedResnet_quant.tflite
if [ -f "$INT8" ]; then
    echo "== ResNet-8 (int8 TFLite) on gap9: verify bit-exactly, build and run its C project"
    "$VENV/bin/edgebyoc" verify "$INT8" --target gap9 --option l1_kb=32 --output build/resnet8_gap9
    make -s -C build/resnet8_gap9/c_project
    "$VENV/bin/python" - <<'PY'
import subprocess
import numpy as np
import edgebyoc
compiled = edgebyoc.load("build/resnet8_gap9")
x = np.random.default_rng(0).integers(-128, 128, compiled.inputs[0].shape).astype(np.int8)
x.tofile("build/resnet8_input.bin")
subprocess.run(["build/resnet8_gap9/c_project/network", "build/resnet8_input.bin",
                "build/resnet8_output.bin"], check=True)
ours = np.fromfile("build/resnet8_output.bin", dtype=compiled.outputs[0].dtype)
same = np.array_equal(ours.reshape(compiled.outputs[0].shape),
                      list(compiled.run({compiled.inputs[0].name: x}).values())[0])
print(f"C project (./network, host emulation): output {ours.tolist()}, "
      f"identical to the artifact's run: {same}")
assert same
PY
fi

MODEL=${1:-../shared/models/mlperf_tiny/vww_96_float.onnx}
if [ ! -f "$MODEL" ]; then
    MODEL=examples/resnet18.onnx
    mkdir -p examples
    "$VENV/bin/python" -c "import onnx; from edgebyoc.testing.models import resnet18; onnx.save(resnet18(), '$MODEL')"
fi
echo "== $MODEL on the host: verify against onnxruntime, run the artifact"
"$VENV/bin/edgebyoc" verify "$MODEL" --target host --output build/example
"$VENV/bin/edgebyoc" run build/example --random
