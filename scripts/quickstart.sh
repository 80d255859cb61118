#!/usr/bin/env bash
# Sets up a virtual environment with edgebyoc and compiles + verifies an example model end to end.
# Usage: bash scripts/quickstart.sh [MODEL.onnx]   (default: MLPerf Tiny VWW from ../shared/models,
# or a generated ResNet-18-shaped model when ../shared is not beside the checkout)
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${VENV:-.venv}
if [ ! -x "$VENV/bin/python" ]; then
    python3 -m venv "$VENV"
fi
"$VENV/bin/python" -m pip install --quiet --upgrade pip
"$VENV/bin/python" -m pip install --quiet -e '.[test]'
for plugin in plugins/*/; do
    [ -f "$plugin/pyproject.toml" ] && "$VENV/bin/python" -m pip install --quiet -e "$plugin"
done
MODEL=${1:-../shared/models/mlperf_tiny/vww_96_float.onnx}
if [ ! -f "$MODEL" ]; then
    MODEL=examples/resnet18.onnx
    mkdir -p examples
    "$VENV/bin/python" -c "import onnx; from edgebyoc.testing.models import resnet18; onnx.save(resnet18(), '$MODEL')"
fi
"$VENV/bin/edgebyoc" plugins
"$VENV/bin/edgebyoc" verify "$MODEL" --target host --output build/example
"$VENV/bin/edgebyoc" run build/example --random
