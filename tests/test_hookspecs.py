"""The plugin contract documents itself: every hook says its arguments, return, when, example."""

import inspect
from pathlib import Path

import pluggy
import pytest

import edgebyoc
from edgebyoc import hookspecs, target
from edgebyoc.plugins import HOOK_NAMES

SECTIONS = ("Arguments:", "Returns:", "Called:", "Example::")


def test_hook_names_are_the_design_families():
    assert HOOK_NAMES == tuple(sorted([
        "edgebyoc_targets", "edgebyoc_availability", "edgebyoc_patterns", "edgebyoc_annotate",
        "edgebyoc_cost", "edgebyoc_host_cost", "edgebyoc_transforms", "edgebyoc_codegen", "edgebyoc_runtime_apis",
        "edgebyoc_runtime_loaders", "edgebyoc_project_files"]))


@pytest.mark.parametrize("name", HOOK_NAMES)
def test_every_hook_is_documented(name):
    doc = inspect.getdoc(getattr(hookspecs, name)) or ""
    missing = [s for s in SECTIONS if s not in doc]
    assert not missing, f"{name} docstring lacks {missing}"
    for parameter in inspect.signature(getattr(hookspecs, name)).parameters:
        assert f"{parameter}:" in doc, f"{name} does not document argument {parameter!r}"


@pytest.mark.parametrize("name", HOOK_NAMES)
def test_every_hook_is_in_the_plugin_guide(name):
    guide = Path(__file__).parents[1] / "docs" / "plugin-guide.md"
    assert f"`{name}" in guide.read_text(), f"docs/plugin-guide.md does not describe {name}"


def test_hookimpl_is_public_and_bound_to_the_contract():
    assert edgebyoc.hookimpl is hookspecs.hookimpl
    assert isinstance(edgebyoc.hookimpl, pluggy.HookimplMarker)
    assert edgebyoc.hookimpl.project_name == "edgebyoc"


def test_dataclasses_are_documented():
    for name, obj in inspect.getmembers(target, inspect.isclass):
        if obj.__module__ == target.__name__:
            assert inspect.getdoc(obj), f"edgebyoc.target.{name} has no docstring"


def test_the_hook_reference_page_is_generated_and_current():
    page = Path(__file__).parents[1] / "docs" / "hooks.md"
    assert page.read_text() == hookspecs.reference_markdown(), \
        "docs/hooks.md is stale: run `python scripts/hook_reference.py`"
    text = page.read_text()
    assert all(f"## `{name}`" in text for name in HOOK_NAMES)
