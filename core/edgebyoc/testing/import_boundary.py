"""The import boundary of plugins: a plugin imports ``edgebyoc.api`` (and its submodules) only.

Every other module of the core is private and may change in any release; a plugin that reaches
past ``edgebyoc.api`` breaks on a core upgrade although its tests passed. This check reads an
installed plugin's source (the package of its ``edgebyoc`` entry point, every ``.py`` file in
it; under a namespace package, the regular package below it) and lists each import of a core
module outside ``PLUGIN_IMPORTS``:

* ``import edgebyoc`` and ``from edgebyoc import compile`` (the root package is not the API);
* ``import edgebyoc.pipeline``, ``from edgebyoc.target import Target``;
* ``importlib.import_module("edgebyoc.codegen")`` and ``__import__("edgebyoc.x")`` with a
  literal name.

``from edgebyoc import api`` and ``from edgebyoc.api.match import search`` are allowed. The
conformance suite (``check_plugin``) and ``edgebyoc check-plugin NAME`` run it on any installed
plugin; in this repository ``scripts/lint_imports.py`` applies the same allow-list
(``[tool.edgebyoc] plugin_imports`` in pyproject.toml, equal to ``PLUGIN_IMPORTS``) to the
plugins under ``plugins/``.

Example::

    >>> import textwrap
    >>> source = textwrap.dedent('''
    ...     from edgebyoc.api import Target
    ...     from edgebyoc import pipeline
    ... ''')
    >>> [str(v) for v in source_violations(source, "plugin.py")]
    ['plugin.py:3 imports edgebyoc.pipeline']
"""

from __future__ import annotations

import ast
import importlib.util
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

CORE = "edgebyoc"

#: the core modules (and their submodules) a plugin may import
PLUGIN_IMPORTS = ("edgebyoc.api",)


@dataclass(frozen=True)
class ImportViolation:
    """One import of a private core module: where, and what it imports."""

    file: str
    line: int
    imported: str
    #: set instead of ``imported`` when the file could not be read or parsed
    unreadable: str = ""

    def __str__(self) -> str:
        if self.unreadable:
            return f"{self.file}:{self.line} cannot be checked: {self.unreadable}"
        return f"{self.file}:{self.line} imports {self.imported}"


def allowed(module: str, allow_list: Sequence[str] = PLUGIN_IMPORTS) -> bool:
    """Whether ``module`` is one of ``allow_list`` or inside one of them."""
    return any(module == a or module.startswith(a + ".") for a in allow_list)


def _core(module: str) -> bool:
    return module == CORE or module.startswith(CORE + ".")


def _imported_modules(tree: ast.AST):
    """(line, module) for every absolute import of a core module in ``tree``."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if _core(alias.name):
                    yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module == CORE:  # ``from edgebyoc import api``: the submodule counts
                for alias in node.names:
                    yield node.lineno, f"{CORE}.{alias.name}"
            elif _core(node.module):
                yield node.lineno, node.module
        elif isinstance(node, ast.Call) and node.args \
                and isinstance(node.args[0], ast.Constant) \
                and isinstance(node.args[0].value, str) and _core(node.args[0].value):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            if name in ("import_module", "__import__"):
                yield node.lineno, node.args[0].value


def source_violations(source: str, file: str,
                      allow_list: Sequence[str] = PLUGIN_IMPORTS) -> list[ImportViolation]:
    """The imports of private core modules in one file's ``source``."""
    try:
        tree = ast.parse(source, filename=file)
    except SyntaxError as err:
        return [ImportViolation(file, err.lineno or 0, "", f"it does not parse ({err.msg})")]
    return sorted({ImportViolation(file, line, module)
                   for line, module in _imported_modules(tree)
                   if not allowed(module, allow_list)}, key=lambda v: (v.line, v.imported))


def module_source_files(module: str) -> list[Path]:
    """The ``.py`` files of the plugin whose entry-point module is ``module`` (such as
    ``edgebyoc_gap9.plugin``): every file of its top-level package, or of a single-file
    module; empty when it cannot be found. Under a namespace package shared by several
    distributions (``acme.chip.plugin`` with ``acme`` a namespace), the outermost regular
    package on the module's path (``acme.chip``), so other vendors' code in ``acme`` is not
    checked as this plugin's."""
    parts = module.split(":", 1)[0].split(".")
    for depth in range(1, len(parts) + 1):
        try:
            spec = importlib.util.find_spec(".".join(parts[:depth]))
        except (ImportError, ValueError):
            return []
        if spec is None:
            return []
        if spec.submodule_search_locations is None:  # a module: the entry point's own file
            origin = Path(spec.origin) if spec.origin else None
            return [origin] if origin is not None and origin.suffix == ".py" else []
        if spec.origin is not None:  # a regular package (a namespace package has no origin)
            return sorted(p for location in spec.submodule_search_locations
                          for p in Path(location).rglob("*.py") if p.is_file())
    return []


def plugin_import_violations(module: str,
                             allow_list: Sequence[str] = PLUGIN_IMPORTS) -> list[ImportViolation]:
    """Every import of a private core module in the package of entry-point module ``module``."""
    violations = []
    for path in module_source_files(module):
        try:
            source = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as err:
            violations.append(ImportViolation(str(path), 0, "", f"unreadable ({err})"))
            continue
        violations += source_violations(source, str(path), allow_list)
    return violations
