"""docs/tutorial.md's code, as written: its file blocks make a plugin that installs with the
core alone and passes its tests (a quantized CNN bit-exact on the toy accelerator)."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

TUTORIAL = Path(__file__).resolve().parents[1] / "docs" / "tutorial.md"
BLOCK = re.compile(r"^```\w+ file=(\S+)\n(.*?)^```$", re.M | re.S)


def tutorial_files() -> dict[str, str]:
    """File name -> text: the blocks headed by a file name, in order, joined per file."""
    files: dict[str, str] = {}
    for name, text in BLOCK.findall(TUTORIAL.read_text()):
        files[name] = files.get(name, "") + ("\n\n" if name in files else "") + text
    return files


def test_the_tutorial_plugin_is_small():
    files = tutorial_files()
    python = [t for n, t in files.items() if n.endswith(".py") and "/tests/" not in n]
    lines = sum(len(t.splitlines()) for t in python) + len(files["toynpu/pyproject.toml"]
                                                           .splitlines())
    assert 60 < lines < 200, lines


@pytest.mark.slow
def test_the_tutorial_runs_as_written(tmp_path):
    for name, text in tutorial_files().items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    site = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps",
                    "--target", str(site), str(tmp_path / "toynpu")], check=True, timeout=600)
    env = {**os.environ, "PYTHONPATH": str(site), "EDGEBYOC_LOAD_PLUGINS": "toynpu"}
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                          str(tmp_path / "toynpu" / "tests")], env=env, capture_output=True,
                         text=True, timeout=900)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
    assert "2 passed" in run.stdout
