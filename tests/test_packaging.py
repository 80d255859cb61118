"""The core wheel ships the templates and the console script (non-editable installs work)."""

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_wheel_contents(tmp_path):
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp_path),
                    str(ROOT)], check=True, capture_output=True)
    wheel = next(tmp_path.glob("edgebyoc-*.whl"))
    names = zipfile.ZipFile(wheel).namelist()
    assert "edgebyoc/templates/report.md.mako" in names
    assert "edgebyoc/templates/__init__.py" in names
    assert "edgebyoc/hookspecs.py" in names and "edgebyoc/testing/node_suite.py" in names
    assert "edgebyoc/api/match.py" in names and "edgebyoc/templates/edgebyoc_match_host.h" in names
    assert {f"edgebyoc/templates/scaffold/{n}" for n in (
        "pyproject.toml.in", "plugin_c.py.in", "plugin_graph.py.in", "conv2d.c.mako.in",
        "test_plugin.py.in", "README.md.in")} <= set(names)
    entry_points = next(n for n in names if n.endswith("entry_points.txt"))
    text = zipfile.ZipFile(wheel).read(entry_points).decode()
    assert "edgebyoc = edgebyoc.cli:main" in text
    assert "[pytest11]" in text


def test_templates_found_through_importlib_resources():
    from importlib import resources

    files = resources.files("edgebyoc.templates")
    assert files.joinpath("report.md.mako").is_file()
