"""Check the import rules of pyproject.toml over the core and every plugin under plugins/.

Two rules, each stated once in pyproject.toml:

- ``[tool.edgebyoc] plugin_imports``, an allow-list: the only core modules (and their
  submodules) a plugin may import. Every ``plugins/<name>/edgebyoc_<name>`` package is checked,
  import by import, with grimp (the graph import-linter builds); ``import edgebyoc`` or
  ``from edgebyoc import compile`` count as importing the root package, which is not allowed.
  A plugin's tests (``plugins/<name>/tests``, or a ``tests`` folder beside an extra package) are
  held to the same allow-list: they show a vendor how the plugin is driven, so they may not
  reach past the public API either (read, not imported, by the check ``edgebyoc
  check-plugin`` runs: ``edgebyoc.testing.import_boundary``).
- ``[tool.importlinter]``: the core's layers (no module imports upwards).

Usage: ``python scripts/lint_imports.py [PACKAGE_DIR ...]`` (extra plugin package folders, e.g.
an out-of-tree plugin's, are checked against the allow-list too). Exit status 0 when both
rules hold; every broken import is printed as ``module:line imports name``.
"""

from __future__ import annotations

import sys
import tempfile
import tomllib
from pathlib import Path

import grimp
from importlinter.cli import lint_imports

ROOT = Path(__file__).resolve().parents[1]
CORE = "edgebyoc"


def settings() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]


def plugin_packages(extra: list[str] = ()) -> dict[str, Path]:
    """Plugin package name -> the directory that holds it (plugins/ and ``extra`` folders)."""
    found = [p for p in sorted(ROOT.glob("plugins/*/edgebyoc_*")) if (p / "__init__.py").is_file()]
    found += [Path(p).resolve() for p in extra]
    return {package.name: package.parent for package in found}


def allowed(module: str, allow_list: list[str]) -> bool:
    """Whether ``module`` is one of ``allow_list`` or inside one of them."""
    return any(module == a or module.startswith(a + ".") for a in allow_list)


def plugin_violations(packages: dict[str, Path], allow_list: list[str]) -> list[str]:
    """Every direct import of a core module outside ``allow_list`` by a plugin module."""
    graph = grimp.build_graph(CORE, *packages, include_external_packages=False, cache_dir=None)
    broken = []
    for package in packages:
        for module in sorted(graph.find_descendants(package) | {package}):
            for imported in sorted(graph.find_modules_directly_imported_by(module)):
                if (imported == CORE or imported.startswith(CORE + ".")) and \
                        not allowed(imported, allow_list):
                    for detail in graph.get_import_details(importer=module, imported=imported):
                        broken.append(f"{module}:{detail['line_number']} imports {imported}")
    return broken


def plugin_test_violations(packages: dict[str, Path], allow_list: list[str]) -> list[str]:
    """Every import of a core module outside ``allow_list`` in the plugins' test files (read
    by ``edgebyoc.testing.import_boundary``, the check ``edgebyoc check-plugin`` runs)."""
    from edgebyoc.testing.import_boundary import source_violations

    broken = []
    for parent in packages.values():
        for path in sorted((parent / "tests").rglob("*.py")):
            broken += map(str, source_violations(path.read_text(), str(
                path.relative_to(parent.parent)), allow_list))
    return broken


def layers_config(tool: dict) -> str:
    """The [importlinter] ini text of pyproject.toml's contracts over the core."""
    lines = ["[importlinter]", "root_packages =", f"    {CORE}"]
    for index, contract in enumerate(tool["importlinter"]["contracts"]):
        lines += ["", f"[importlinter:contract:{index}]"]
        for key, value in contract.items():
            if isinstance(value, list):
                lines += [f"{key} ="] + [f"    {item}" for item in value]
            else:
                lines.append(f"{key} = {str(value).lower() if isinstance(value, bool) else value}")
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> int:
    tool = settings()
    allow_list = tool["edgebyoc"]["plugin_imports"]
    packages = plugin_packages(argv)
    sys.path[:0] = [str(ROOT / "core"), *map(str, packages.values())]
    broken = plugin_violations(packages, allow_list)
    print(f"Plugin imports: {len(packages)} plugin packages may import only "
          f"{', '.join(allow_list)}: {len(broken)} broken.")
    for line in broken:
        print(f"  {line}")
    broken_tests = plugin_test_violations(packages, allow_list)
    print(f"Plugin tests: the same allow-list: {len(broken_tests)} broken.")
    for line in broken_tests:
        print(f"  {line}")
    broken += broken_tests
    with tempfile.NamedTemporaryFile("w", suffix=".ini", delete=False) as handle:
        handle.write(layers_config(tool))
    try:
        layers = lint_imports(config_filename=handle.name, no_cache=True, no_logo=True)
    finally:
        Path(handle.name).unlink()
    return 1 if broken or layers else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
