"""pytest plugin (entry point ``pytest11: edgebyoc``): fixtures for edgebyoc and plugin tests.

Fixtures:

``make_plugin``
    ``make_plugin(name, source, distribution=None, version="1.0")`` writes ``source`` as module
    ``edgebyoc_test_<name>`` plus a fake installed distribution whose ``edgebyoc`` entry point
    is that module, into one temporary site directory (on ``sys.path`` for the test); with
    ``module="pkg.mod"`` instead of ``source`` the entry point names an importable module.
    Returns the directory, to pass as ``PluginRegistry(search_path=[...])``. Nothing is
    installed for real.
``isolated_registry``
    ``isolated_registry(search_path=None, **env)`` builds a ``PluginRegistry`` that sees only the
    given directory (or nothing) and only the given environment switches, never what happens to
    be installed.
"""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pytest

from ..plugins import PluginRegistry


@pytest.fixture
def make_plugin(tmp_path, monkeypatch):
    site = tmp_path / "site"
    site.mkdir()
    monkeypatch.syspath_prepend(str(site))
    created: list[str] = []

    def factory(name: str, source: str | None = None, distribution: str | None = None,
                version: str = "1.0", module: str | None = None) -> Path:
        if module is None:
            module = f"edgebyoc_test_{name}"
            (site / f"{module}.py").write_text(textwrap.dedent(source or ""))
        dist = distribution or f"edgebyoc-test-{name}"
        info = site / f"{dist.replace('-', '_')}-{version}.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n")
        (info / "entry_points.txt").write_text(f"[edgebyoc]\n{name} = {module}\n")
        created.append(module)
        return site

    yield factory
    for module in created:
        sys.modules.pop(module, None)


@pytest.fixture
def isolated_registry():
    def factory(search_path: Path | None = None, strict: bool | None = None,
                **environ: str) -> PluginRegistry:
        return PluginRegistry(search_path=[str(search_path)] if search_path else [],
                              environ=environ, strict=strict)

    return factory
