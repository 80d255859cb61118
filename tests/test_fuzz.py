"""A seeded mutation fuzzer over the shipped models, run for a bounded number of cases: every
mutated model is refused with one `error:` line, or compiles and verifies (against onnxruntime
for ONNX, TVM's host build for TFLite); never a crash, a traceback, a hang or a wrong result."""

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

MODELS = Path(__file__).resolve().parents[2] / "shared" / "models" / "mlperf_tiny"
SOURCES = ["ad01_fp32.onnx", "ad01_int8.tflite", "kws_ref_model.tflite"]
CASES_PER_MODEL = 6


def mutate(data: bytes, rng: np.random.Generator) -> bytes:
    """One of: a few flipped bytes, a truncation, a run of junk inserted, one byte flipped in
    the middle half of the file (mostly weights: a model that still loads, with other values)."""
    buffer = bytearray(data)
    kind = rng.integers(4)
    if kind == 0:
        for position in rng.integers(0, len(buffer), size=rng.integers(1, 9)):
            buffer[position] ^= int(rng.integers(1, 256))
    elif kind == 1:
        del buffer[int(rng.integers(len(buffer) // 4, len(buffer))):]
    elif kind == 3:
        buffer[int(rng.integers(len(buffer) // 4, 3 * len(buffer) // 4))] ^= 1 << int(
            rng.integers(8))
    else:
        position = int(rng.integers(len(buffer)))
        buffer[position:position] = rng.integers(0, 256, int(rng.integers(1, 64)),
                                                 dtype=np.uint8).tobytes()
    return bytes(buffer)


@pytest.mark.slow
@pytest.mark.parametrize("source", SOURCES)
def test_mutated_models_never_crash(tmp_path, source):
    if not (MODELS / source).is_file():
        pytest.skip(f"{source} not in ../shared/models")
    rng = np.random.default_rng(SOURCES.index(source))
    data = (MODELS / source).read_bytes()
    outcomes = []
    for case in range(CASES_PER_MODEL):
        path = tmp_path / f"case{case}{Path(source).suffix}"
        path.write_bytes(mutate(data, rng))
        env = {**os.environ, "EDGEBYOC_LOAD_PLUGINS": ""}
        try:
            run = subprocess.run([sys.executable, "-m", "edgebyoc.cli", "verify", str(path),
                                  "-q", "--no-dfs"],
                                 capture_output=True, text=True, timeout=240, env=env)
        except subprocess.TimeoutExpired:
            pytest.fail(f"{path.name}: hung (no answer in 240 s)")
        outcomes.append(run.returncode)
        assert run.returncode in (0, 1), f"{path.name}: crashed ({run.returncode}): " \
                                         f"{run.stderr[-1500:]}"
        assert "Traceback" not in run.stderr, f"{path.name}: {run.stderr[-1500:]}"
        if run.returncode == 1:  # refused, one line; never compiled and then wrong
            assert "verify FAILED" not in run.stdout, f"{path.name}: {run.stdout[-1500:]}"
            lines = [line for line in run.stderr.splitlines() if line.startswith("error: ")]
            assert len(lines) == 1, run.stderr[-1500:]
        else:
            assert "verify passed" in run.stdout, run.stdout[-1500:]
    assert len(outcomes) == CASES_PER_MODEL
    # the seeds give models that still load: their compiled outputs were verified above
    assert 0 in outcomes, outcomes
