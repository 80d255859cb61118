"""Check the import contracts of pyproject.toml's [tool.importlinter] over the core and every
plugin under plugins/ (each plugins/<name>/edgebyoc_<name> package is added to the contracts'
root packages and to the "plugins import only edgebyoc.api" sources). Exit status as
lint-imports: 0 when every contract is kept."""

from __future__ import annotations

import sys
import tempfile
import tomllib
from pathlib import Path

from importlinter.cli import lint_imports

ROOT = Path(__file__).resolve().parents[1]


def plugin_packages() -> dict[str, Path]:
    """Plugin package name -> the directory that holds it."""
    return {package.name: package.parent for package in sorted(ROOT.glob("plugins/*/edgebyoc_*"))
            if (package / "__init__.py").is_file()}


def config(packages) -> str:
    """The [importlinter] ini text of pyproject.toml's contracts, plugins added."""
    settings = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    lines = ["[importlinter]", "root_packages ="]
    lines += [f"    {p}" for p in [*settings["root_packages"], *packages]]
    for index, contract in enumerate(settings["contracts"]):
        lines += ["", f"[importlinter:contract:{index}]"]
        for key, value in contract.items():
            if key == "source_modules" and contract["type"] == "forbidden":
                value = [*value, *packages]
            if isinstance(value, list):
                lines += [f"{key} ="] + [f"    {item}" for item in value]
            else:
                lines.append(f"{key} = {str(value).lower() if isinstance(value, bool) else value}")
    return "\n".join(lines) + "\n"


def main() -> int:
    packages = plugin_packages()
    sys.path[:0] = [str(ROOT / "core"), *map(str, packages.values())]
    with tempfile.NamedTemporaryFile("w", suffix=".ini", delete=False) as handle:
        handle.write(config(packages))
    try:
        return lint_imports(config_filename=handle.name, no_cache=True, no_logo=True)
    finally:
        Path(handle.name).unlink()


if __name__ == "__main__":
    sys.exit(main())
