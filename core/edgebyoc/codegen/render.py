"""Rendering of the core's Mako templates (shipped in the wheel as ``edgebyoc.templates``)."""

from __future__ import annotations

from functools import lru_cache
from importlib import resources
from typing import Any

from mako.template import Template


@lru_cache(maxsize=None)
def core_template(name: str) -> Template:
    """The core template ``name`` (e.g. ``"report.md.mako"``), compiled once per process."""
    text = resources.files("edgebyoc.templates").joinpath(name).read_text(encoding="utf-8")
    return Template(text, strict_undefined=True)


def render_core_template(template: str, /, **context: Any) -> str:
    """``template`` rendered with ``context`` (which may hold a ``name`` of its own)."""
    return core_template(template).render(**context)
