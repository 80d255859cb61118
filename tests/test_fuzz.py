"""A seeded mutation fuzzer over the shipped models, run for a bounded number of cases: every
mutated model compiles or ends as one `error:` line; never a crash, a traceback or a hang."""

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

MODELS = Path(__file__).resolve().parents[2] / "shared" / "models" / "mlperf_tiny"
SOURCES = ["ad01_fp32.onnx", "ad01_int8.tflite", "kws_ref_model.tflite"]
CASES_PER_MODEL = 4


def mutate(data: bytes, rng: np.random.Generator) -> bytes:
    """One of: a few flipped bytes, a truncation, a run of junk inserted."""
    buffer = bytearray(data)
    kind = rng.integers(3)
    if kind == 0:
        for position in rng.integers(0, len(buffer), size=rng.integers(1, 9)):
            buffer[position] ^= int(rng.integers(1, 256))
    elif kind == 1:
        del buffer[int(rng.integers(len(buffer) // 4, len(buffer))):]
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
            run = subprocess.run([sys.executable, "-m", "edgebyoc.cli", "compile", str(path),
                                  "-q", "--no-dfs", "-o", str(tmp_path / f"out{case}")],
                                 capture_output=True, text=True, timeout=240, env=env)
        except subprocess.TimeoutExpired:
            pytest.fail(f"{path.name}: hung (no answer in 240 s)")
        outcomes.append(run.returncode)
        assert run.returncode in (0, 1), f"{path.name}: crashed ({run.returncode}): " \
                                         f"{run.stderr[-1500:]}"
        assert "Traceback" not in run.stderr, f"{path.name}: {run.stderr[-1500:]}"
        if run.returncode == 1:
            lines = [line for line in run.stderr.splitlines() if line.startswith("error: ")]
            assert len(lines) == 1, run.stderr[-1500:]
    assert len(outcomes) == CASES_PER_MODEL
