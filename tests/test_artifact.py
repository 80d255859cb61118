"""Artifacts: atomic writes, integrity checks, round trip through a fresh process."""

import json
import subprocess
import sys

import numpy as np
import pytest

import edgebyoc
from edgebyoc.errors import ArtifactError, InputError


def test_round_trip_in_a_fresh_process(small_compiled, tmp_path):
    artifact = small_compiled.save(tmp_path / "artifact")
    x = np.random.default_rng(7).standard_normal((1, 3, 16, 16)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    expected = small_compiled.run({"input": x})
    script = (
        "import sys, numpy as np, edgebyoc\n"
        f"m = edgebyoc.load({str(artifact)!r})\n"
        f"out = m.run(np.load({str(tmp_path / 'x.npy')!r}))\n"
        f"np.savez({str(tmp_path / 'y.npz')!r}, **out)\n")
    subprocess.run([sys.executable, "-c", script], check=True)
    again = np.load(tmp_path / "y.npz")
    for name, value in expected.items():
        assert np.array_equal(again[name], value)


def test_loaded_model_knows_its_signature(small_compiled, tmp_path):
    loaded = edgebyoc.load(small_compiled.save(tmp_path / "a"))
    assert loaded.inputs == small_compiled.inputs
    assert loaded.report["summary"] == small_compiled.report["summary"]
    assert loaded.manifest["edgebyoc_version"] == edgebyoc.__version__
    with pytest.raises(InputError, match="missing \\['input'\\], unknown \\['x'\\]"):
        loaded.run({"x": np.zeros((1, 3, 16, 16), np.float32)})


def test_tampered_or_incomplete_artifacts_are_refused(small_compiled, tmp_path):
    artifact = small_compiled.save(tmp_path / "a")
    (artifact / "report.md").write_text("edited")
    with pytest.raises(ArtifactError, match="report.md does not match its hash"):
        edgebyoc.load(artifact)
    (artifact / "report.md").unlink()
    with pytest.raises(ArtifactError, match="incomplete artifact, report.md is missing"):
        edgebyoc.load(artifact)
    manifest = json.loads((artifact / "manifest.json").read_text())
    manifest["format_version"] = 99
    (artifact / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(ArtifactError, match="artifact format 99"):
        edgebyoc.load(artifact)


def test_failed_write_leaves_nothing(small_compiled, tmp_path, monkeypatch):
    from edgebyoc.runtime import artifact

    def explode(*_args, **_kwargs):
        raise RuntimeError("disk full")

    # fails after the library is written, while the manifest is being made
    monkeypatch.setattr(artifact, "sha256_of", explode)
    with pytest.raises(RuntimeError, match="disk full"):
        small_compiled.save(tmp_path / "a")
    assert list(tmp_path.iterdir()) == []


def test_refuses_to_overwrite_a_foreign_directory(small_compiled, tmp_path):
    foreign = tmp_path / "photos"
    foreign.mkdir()
    (foreign / "cat.jpg").write_bytes(b"\xff")
    with pytest.raises(ArtifactError, match="is not an edgebyoc artifact; refusing"):
        small_compiled.save(foreign)
    # an existing artifact is replaced
    first = small_compiled.save(tmp_path / "a")
    assert small_compiled.save(tmp_path / "b") != first
