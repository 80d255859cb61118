"""`edgebyoc new-plugin`: a generated plugin of each kind installs with the core alone and
passes its own tests unchanged."""

import os
import subprocess
import sys

import pytest
from pathlib import Path

from edgebyoc.errors import EdgebyocError

from edgebyoc.api.testing import run_cli
from edgebyoc.scaffold import plugin_files
from edgebyoc.target import API_VERSION

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
@pytest.mark.parametrize("kind, tests", [("c", 2), ("json", 2), ("blob", 2), ("match", 5)])
def test_a_generated_plugin_installs_and_passes_its_tests(tmp_path, kind, tests):
    name = f"toy_{kind}"
    code, output = run_cli(["new-plugin", name, "--kind", kind, "-o", str(tmp_path / name)])
    assert code == 0 and "wrote" in output, output
    root = tmp_path / name
    # written as a vendor would: the public API only, the API version declared and pinned
    lint = subprocess.run([sys.executable, str(ROOT / "scripts" / "lint_imports.py"),
                           str(root / f"edgebyoc_{name}")], capture_output=True, text=True,
                          timeout=300)
    # the in-tree plugins' packages and the generated one
    plugins = len(list((ROOT / "plugins").glob("*/pyproject.toml"))) + 1
    assert lint.returncode == 0 and f"{plugins} plugin packages" in lint.stdout, lint.stdout
    assert f'api_version="{API_VERSION}"' in (root / f"edgebyoc_{name}" / "plugin.py").read_text()
    assert f'"edgebyoc>={API_VERSION},<3"' in (root / "pyproject.toml").read_text()
    site = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps",
                    "--target", str(site), str(root)], check=True, timeout=600)
    env = {**os.environ, "PYTHONPATH": str(site), "EDGEBYOC_LOAD_PLUGINS": name}
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-s", "-p", "no:cacheprovider",
                          str(root / "tests")], env=env, cwd=root, capture_output=True,
                         text=True, timeout=900)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
    assert f"{tests} passed" in run.stdout and "skipped" not in run.stdout.splitlines()[-1]
    if kind == "match":  # the int8 workloads of the conformance suite all ran, none skipped
        assert run.stdout.count("outputs bit-exact against the integer reference") == 4


def test_the_scaffold_refuses_bad_names_kinds_and_directories(tmp_path):
    code, output = run_cli(["new-plugin", "My-Chip", "-o", str(tmp_path / "a")])
    assert code == 1 and "plugin name 'My-Chip': use lowercase letters" in output
    code, output = run_cli(["new-plugin", "chip", "--kind", "verilog", "-o", str(tmp_path)])
    assert code == 2 and "'verilog' is not one of 'c', 'json', 'blob', 'match'" in output
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "keep.txt").write_text("mine")
    code, output = run_cli(["new-plugin", "chip", "-o", str(tmp_path / "b")])
    assert code == 1 and "exists and is not an empty directory" in output
    assert (tmp_path / "b" / "keep.txt").read_text() == "mine"
    # paths that cannot be written, a name too long for the file system's names, a name an
    # installed plugin has: one line each, nothing written
    code, output = run_cli(["new-plugin", "chip", "-o", "/proc/edgebyoc_chip"])
    assert code == 1 and "cannot write the plugin folder" in output, output
    code, output = run_cli(["new-plugin", "c" * 300, "-o", str(tmp_path / "long")])
    assert code == 1 and "300 characters, at most 64" in output and "Traceback" not in output
    assert not (tmp_path / "long").exists()
    files = plugin_files("chip", "c")
    assert sorted(files) == ["README.md", "edgebyoc_chip/__init__.py", "edgebyoc_chip/plugin.py",
                             "edgebyoc_chip/templates/__init__.py",
                             "edgebyoc_chip/templates/conv2d.c.mako", "pyproject.toml",
                             "tests/test_chip.py"]
    assert 'chip = "edgebyoc_chip.plugin"' in files["pyproject.toml"]
    files = plugin_files("chip", "match")
    assert sorted(files) == ["README.md", "edgebyoc_chip/__init__.py", "edgebyoc_chip/cost.py",
                             "edgebyoc_chip/plugin.py", "edgebyoc_chip/templates/__init__.py",
                             "edgebyoc_chip/templates/chip_soc.h", "pyproject.toml",
                             "tests/test_chip.py"]
    assert "#ifndef CHIP_SOC_H" in files["edgebyoc_chip/templates/chip_soc.h"]
    assert "accumulator_bits=32" in files["edgebyoc_chip/plugin.py"]


def test_the_scaffold_refuses_a_name_an_installed_plugin_has(tmp_path, make_plugin):
    make_plugin("takenchip", "")
    for name in ("takenchip", "test_takenchip"):  # the entry point; the distribution's name
        code, output = run_cli(["new-plugin", name, "-o", str(tmp_path / name)])
        assert code == 1 and "already taken by an installed plugin" in output, output
        assert not (tmp_path / name).exists()


def test_a_failed_write_leaves_no_partial_plugin(tmp_path, monkeypatch):
    from edgebyoc import scaffold

    real = Path.write_text
    written = []

    def full_disk(self, text, *args, **kwargs):
        written.append(self)
        if len(written) == 3:
            raise OSError(28, "No space left on device")
        return real(self, text, *args, **kwargs)

    monkeypatch.setattr(Path, "write_text", full_disk)
    with pytest.raises(EdgebyocError, match="No space left on device"):
        scaffold.new_plugin("chip", "c", tmp_path / "chip")
    monkeypatch.undo()
    assert list(tmp_path.iterdir()) == []
