"""Artifacts: atomic writes, integrity checks, round trip through a fresh process."""

import json
import subprocess
import sys

import numpy as np
import re
from pathlib import Path

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
    with pytest.raises(ArtifactError, match="is not an edgebyoc artifact .*refusing"):
        small_compiled.save(foreign)
    # an existing artifact is replaced
    first = small_compiled.save(tmp_path / "a")
    assert small_compiled.save(tmp_path / "b") != first


# -- artifacts are untrusted input ----------------------------------------------------------------

def _tamper(artifact, change, keep_digest=False):
    import json

    from edgebyoc.runtime.artifact import artifact_digest

    path = artifact / "manifest.json"
    manifest = json.loads(path.read_text())
    change(manifest)
    if keep_digest and isinstance(manifest, dict):  # an attacker who recomputes the digest
        manifest["digest"] = artifact_digest(manifest)
    path.write_text(json.dumps(manifest))


@pytest.mark.parametrize("change, message", [
    (lambda m: m["files"].__setitem__("../../etc/passwd", "0" * 64),
     "file entry '../../etc/passwd' is not a path inside the artifact"),
    (lambda m: m["files"].__setitem__("/etc/passwd", "0" * 64),
     "file entry '/etc/passwd' is not a path inside the artifact"),
    (lambda m: m.pop("files"), "'files' is missing or not a dict"),
    (lambda m: m["constants"][0].__setitem__("offset", m["constants"][0]["offset"] + 4),
     "overlaps another, is not 64-byte aligned"),
    (lambda m: m["constants"][0].__setitem__("offset", 1 << 40), "lies outside constants.bin"),
    (lambda m: m["files"].pop("constants.bin"), "constants.bin is not part of the artifact"),
    (lambda m: m.__setitem__("inputs", "x"), "'inputs' is missing or not a list"),
    (lambda m: m["external"].append({"file": "regions/x.json"}), "is not among its files"),
])
def test_tampered_manifests_are_one_line_errors(small_compiled, tmp_path, change, message):
    artifact = small_compiled.save(tmp_path / "a")
    _tamper(artifact, change, keep_digest=True)
    with pytest.raises(ArtifactError, match=re.escape(message)) as err:
        edgebyoc.load(artifact)
    assert "\n" not in str(err.value)
    # without recomputing the digest, any change is caught by it first
    artifact = small_compiled.save(tmp_path / "b")
    _tamper(artifact, change)
    with pytest.raises(ArtifactError, match="does not match its digest|is missing or not"):
        edgebyoc.load(artifact)


@pytest.mark.parametrize("text", ["[]", "{", "null", '{"format_version": 2}', "1e999999",
                                  '{"format_version": 2, "digest": 3}'])
def test_malformed_manifest_texts(small_compiled, tmp_path, text):
    artifact = small_compiled.save(tmp_path / "a")
    (artifact / "manifest.json").write_text(text)
    with pytest.raises(ArtifactError, match="manifest|artifact format"):
        edgebyoc.load(artifact)


def test_links_and_unlisted_files_are_refused(small_compiled, tmp_path):
    artifact = small_compiled.save(tmp_path / "a")
    elsewhere = tmp_path / "evil.so"
    elsewhere.write_bytes((artifact / "host.so").read_bytes())
    (artifact / "host.so").unlink()
    (artifact / "host.so").symlink_to(elsewhere)
    with pytest.raises(ArtifactError, match="host.so is a link"):
        edgebyoc.load(artifact)
    artifact = small_compiled.save(tmp_path / "b")
    (artifact / "extra.so").write_bytes(b"\x7fELF")
    with pytest.raises(ArtifactError, match="extra.so is not part of the artifact"):
        edgebyoc.load(artifact)
    # make's products in the C project folder are not part of what edgebyoc reads
    (artifact / "extra.so").unlink()
    (artifact / "c_project").mkdir()
    (artifact / "c_project" / "network.o").write_bytes(b"\x7fELF")
    assert edgebyoc.load(artifact).manifest["digest"]


def test_output_directory_faults(small_compiled, tmp_path):
    # a folder with a foreign manifest.json is not an artifact: refused, left intact
    app = tmp_path / "webapp"
    (app / "src").mkdir(parents=True)
    (app / "manifest.json").write_text('{"name": "my web app"}')
    (app / "src" / "index.js").write_text("run()")
    with pytest.raises(ArtifactError, match="is not an edgebyoc artifact"):
        small_compiled.save(app)
    assert (app / "src" / "index.js").read_text() == "run()"
    # a parent that is a file, a path under /proc: one line naming the path and the reason
    (tmp_path / "file").write_text("x")
    for bad in (tmp_path / "file" / "out", Path("/proc/edgebyoc_out")):
        with pytest.raises(ArtifactError, match="cannot write the artifact") as err:
            small_compiled.save(bad)
        assert str(bad) in str(err.value) and "\n" not in str(err.value)
    # a replacement killed between its two renames (the old artifact in edgebyoc's marked
    # work folder): the old artifact comes back on load; see test_safe_output.py for kills


def test_integer_inputs_are_never_wrapped():
    from edgebyoc.frontend import TensorSpec
    from edgebyoc.runtime.host_runner import _converted

    spec = TensorSpec("x", (3,), "int8")
    assert _converted(spec, np.array([-128, 0, 127], np.int64)).dtype == np.int8
    with pytest.raises(InputError, match=r"values 0 to 1000 do not fit the model's int8 "
                                         r"\(-128 to 127\)"):
        _converted(spec, np.array([0, 5, 1000], np.int64))
    with pytest.raises(InputError, match="values 0 to 200 do not fit"):
        _converted(spec, np.array([0, 1, 200], np.uint8))
    with pytest.raises(InputError, match="dtype float32, the model expects int8"):
        _converted(spec, np.zeros(3, np.float32))
    assert _converted(TensorSpec("y", (2,), "float32"), np.zeros(2)).dtype == np.float32


def test_unreadable_input_files_are_one_line_errors(small_model_path, tmp_path):
    from click.testing import CliRunner

    from edgebyoc import cli

    out = tmp_path / "a"
    assert CliRunner().invoke(cli.main, ["compile", str(small_model_path), "-q", "-o",
                                         str(out)]).exit_code == 0
    empty = tmp_path / "x.npy"
    empty.write_bytes(b"")
    objects = tmp_path / "o.npz"
    np.savez(objects, input=np.array([{"a": 1}], dtype=object))
    for path, message in ((empty, "an empty file"), (objects, "object arrays are not accepted")):
        result = CliRunner().invoke(cli.main, ["run", str(out), "--input", str(path)])
        assert result.exit_code == 1, result.output
        assert message in result.output and "Aborted" not in result.output
        assert "Traceback" not in result.output
