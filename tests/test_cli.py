"""The command line: compile, run, verify; errors are one line and a non-zero exit."""

import json
import re

import numpy as np
import pytest
from click.testing import CliRunner

from edgebyoc import cli


def invoke(*args):
    return CliRunner().invoke(cli.main, [str(a) for a in args])


def test_compile_run_verify(small_model_path, tmp_path):
    out = tmp_path / "build"
    # without depth-first tiling: the convolutions run channels-last (HWIO weights)
    result = invoke("compile", small_model_path, "-o", out, "--quiet", "--no-dfs")
    assert result.exit_code == 0, result.output
    assert "small_convnet -> host: 11 operators, 0.1 M MACs, offloaded 0 operators" \
        in result.output
    assert "depth-first" not in result.output
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["inputs"] == [{"name": "input", "shape": [1, 3, 16, 16], "dtype": "float32"}]
    assert set(manifest["files"]) == {"host.so", "constants.bin", "report.json", "report.md"}
    assert [c["shape"] for c in manifest["constants"]][:2] == [[3, 3, 3, 8], [1, 1, 1, 8]]
    assert "| `nn.conv2d` |" in (out / "report.md").read_text()
    report = json.loads((out / "report.json").read_text())
    # conv 3->8 3x3 on 16x16, conv 8->16 3x3 stride 2, dense 16->10
    assert report["summary"]["macs"] == 16 * 16 * 8 * 27 + 8 * 8 * 16 * 72 + 16 * 10
    assert [op["macs"] for op in report["operators"] if op["op"] == "nn.conv2d"] == \
        [16 * 16 * 8 * 27, 8 * 8 * 16 * 72]

    x = np.random.default_rng(1).standard_normal((1, 3, 16, 16)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    result = invoke("run", out, "--input", tmp_path / "x.npy", "--output", tmp_path / "y.npy")
    assert result.exit_code == 0, result.output
    y = np.load(tmp_path / "y.npy")
    np.savez(tmp_path / "x.npz", input=x)
    result = invoke("run", out, "-i", tmp_path / "x.npz", "-o", tmp_path / "y.npz")
    assert result.exit_code == 0, result.output
    assert np.array_equal(np.load(tmp_path / "y.npz")[manifest["outputs"][0]["name"]], y)
    assert invoke("run", out, "--random").exit_code == 0

    result = invoke("verify", small_model_path, "-q", "--input", tmp_path / "x.npy")
    assert result.exit_code == 0, result.output
    assert "verify passed: small_convnet on host vs onnxruntime" in result.output


def test_verify_fails_past_the_tolerance(small_model_path):
    result = invoke("verify", small_model_path, "-q", "--rtol", "0")
    assert result.exit_code == 1
    assert "FAIL" in result.output and "error: outputs differ from onnxruntime" in result.output


@pytest.mark.parametrize("content", [b"", b"\x12\x34garbage", None])
def test_bad_model_is_one_line(tmp_path, content):
    path = tmp_path / "model.onnx"
    if content is not None:
        path.write_bytes(content)
    result = CliRunner().invoke(cli.main, ["compile", str(path), "-o", str(tmp_path / "o")])
    assert result.exit_code == 1
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "model.onnx" in lines[0]
    assert "Traceback" not in result.output
    assert not (tmp_path / "o").exists()


def test_debug_shows_the_traceback(tmp_path):
    path = tmp_path / "model.onnx"
    path.write_bytes(b"")
    result = CliRunner().invoke(cli.main, ["--debug", "compile", str(path), "-o", "x"])
    assert result.exit_code == 1
    assert result.exception is not None and "empty file" in str(result.exception)


def test_unknown_target_and_bad_option(small_model_path, tmp_path):
    result = invoke("compile", small_model_path, "-o", tmp_path / "o", "-t", "nochip")
    assert result.exit_code == 1
    assert "error: unknown target 'nochip' (available: host)" in result.output
    result = invoke("compile", small_model_path, "-o", tmp_path / "o", "--option", "nonsense")
    assert result.exit_code == 2 and "NAME=VALUE" in result.output


def test_run_input_errors(small_compiled, tmp_path):
    artifact = small_compiled.save(tmp_path / "a")
    np.save(tmp_path / "wrong.npy", np.zeros((1, 3, 8, 8), np.float32))
    result = invoke("run", artifact, "-i", tmp_path / "wrong.npy")
    assert result.exit_code == 1
    assert "error: input 'input': shape [1, 3, 8, 8], the model expects [1, 3, 16, 16]" \
        in result.output
    result = invoke("run", artifact)
    assert result.exit_code == 1 and "pass --input FILE (.npy or .npz) or --random" in result.output
    result = invoke("run", tmp_path / "nothing")
    assert result.exit_code == 1 and "no such artifact directory" in result.output


def test_memory_budget_needs_a_unit():
    import click

    from edgebyoc.cli import parse_size

    assert parse_size("8MB") == 8_000_000 and parse_size("512 KiB") == 512 * 1024
    assert parse_size("1000B") == 1000
    with pytest.raises(click.BadParameter, match="give a unit: B, kB, MB"):
        parse_size("10")


def test_debug_after_the_subcommand_and_disabled_targets(tmp_path, monkeypatch):
    from click.testing import CliRunner

    from edgebyoc import cli

    result = CliRunner().invoke(cli.main, ["run", str(tmp_path / "none"), "--random",
                                           "--debug"])
    assert result.exit_code != 0 and isinstance(result.exception, Exception)
    assert "no such artifact directory" in str(result.exception)  # raised, not one line
    result = CliRunner().invoke(cli.main, ["run", str(tmp_path / "none"), "--random"])
    assert result.exit_code == 1 and result.output.startswith("error: ")


def test_verify_says_it_is_building_the_reference(small_model_path):
    result = CliRunner().invoke(cli.main, ["verify", str(small_model_path)])
    assert result.exit_code == 0, result.output
    assert "building the reference" in result.output
    assert re.search(r"reference and comparison: \d+\.\d s", result.output)


def test_output_paths_are_checked_before_the_work(small_compiled, small_model_path, tmp_path,
                                                  monkeypatch):
    """run --output, compile -o and --memory-plot: a bad path is one line before any work;
    outputs are written exactly where named, atomically, never into the artifact."""
    artifact = small_compiled.save(tmp_path / "a")
    cases = [
        (("run", artifact, "--random", "-o", tmp_path / "missing" / "y.npy"),
         "the folder .*missing does not exist"),
        (("run", artifact, "--random", "-o", tmp_path / "y.txt"), "ending in .npy or .npz"),
        (("run", artifact, "--random", "-o", artifact / "constants.npy"),
         "inside the artifact"),
        (("compile", small_model_path, "-q", "-o", tmp_path / "b", "--memory-plot",
          tmp_path / "missing" / "m.png"), "the folder .*missing does not exist"),
        (("compile", small_model_path, "-q", "-o", tmp_path / "b", "--memory-plot",
          tmp_path / "m.xyz"), "ending in .png or .pdf or .svg"),
    ]
    for args, message in cases:
        result = invoke(*args)
        assert result.exit_code == 1 and re.search(message, result.output), result.output
        assert "Traceback" not in result.output and len(result.output.splitlines()) == 1
    result = invoke("compile", small_model_path, "-q", "-o", small_model_path)
    assert result.exit_code == 1 and "is a file, not a folder for the artifact" in result.output
    assert not (tmp_path / "b").exists()  # refused before compiling: nothing written
    assert edgebyoc_load(artifact)  # the artifact is intact
    result = invoke("run", artifact, "--random", "-o", tmp_path / "y.npy")
    assert result.exit_code == 0 and (tmp_path / "y.npy").is_file()
    assert not (tmp_path / "y.npy.npy").exists()
    # a full disk while saving: one line, no partial file
    monkeypatch.setattr(np, "save", lambda *a, **k: (_ for _ in ()).throw(
        OSError(28, "No space left on device")))
    result = invoke("run", artifact, "--random", "-o", tmp_path / "z.npy")
    assert result.exit_code == 1 and "the disk is full" in result.output, result.output
    assert not (tmp_path / "z.npy").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a", "y.npy"]


def edgebyoc_load(path):
    import edgebyoc

    return edgebyoc.load(path)
