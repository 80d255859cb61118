"""``edgebyoc new-plugin``: a new plugin distribution rendered from the core's templates.

The generated package installs as it is, imports only ``edgebyoc.api`` and passes its own
tests (the conformance suite with the standard workloads, and an end-to-end check):

- kind ``c``: a C-source module whose float convolutions are rendered from a Mako layer
  template (``templates/conv2d.c.mako``) and linked into the artifact;
- kind ``json``: element-wise regions as BYOC JSON graphs, run by a numpy engine through a
  runtime loader;
- kind ``blob``: the same graphs as a custom binary blob (zlib) with its loader;
- kind ``match``: an int8 accelerator on the core's MATCH helpers (a K x C MAC array with an
  L1 accumulator, fed by DMA from L2): patterns for convolutions, depthwise, dense, add and
  average pooling with requantization, a cost model with a documented per-tile formula
  (``cost.py``), the core's generic layer template through the host emulation and a ``soc``
  binding with its SDK header, and tests that verify the built-in int8 network bit-exactly
  and build its C project under AddressSanitizer.

The templates live in the core wheel (``edgebyoc.templates``, ``scaffold/*.in``); ``@name@``
style placeholders are replaced, nothing else is interpreted.
"""

from __future__ import annotations

import re
from importlib import resources
from pathlib import Path

from .errors import EdgebyocError
from .target import API_VERSION, api_version_tuple

KINDS = ("c", "json", "blob", "match")

#: what the JSON and blob kinds put into the graph plugin's template
_GRAPH_KINDS = {
    "json": {"imports": "", "output_kind": "JSON_GRAPH", "kind_text": "JSON graphs",
             "payload": "graph_json", "encode": "region_json(region)",
             "load": "GraphEngine"},
    "blob": {"imports": "import zlib\n", "output_kind": "BLOB",
             "kind_text": "zlib-compressed JSON graphs (a custom blob)", "payload": "blob",
             "encode": "zlib.compress(region_json(region).encode())",
             "load": "lambda blob, constants: GraphEngine(zlib.decompress(blob).decode(), "
                     "constants)"},
}
_SUMMARIES = {
    "c": "float convolutions as C rendered from a Mako layer template, linked into the artifact.",
    "json": "element-wise regions as BYOC JSON graphs, run by a numpy engine.",
    "blob": "element-wise regions as a custom binary blob (zlib), run by a numpy engine.",
    "match": "an int8 accelerator (a K x C MAC array fed by DMA) on the core's MATCH schedule "
             "search and layer template.",
}
#: per kind, the package's files beyond ``__init__.py`` and ``templates/__init__.py``:
#: relative path (``{name}`` filled) -> scaffold template
_KIND_FILES = {
    "c": {"plugin.py": "plugin_c.py.in", "templates/conv2d.c.mako": "conv2d.c.mako.in"},
    "json": {"plugin.py": "plugin_graph.py.in"},
    "blob": {"plugin.py": "plugin_graph.py.in"},
    "match": {"plugin.py": "plugin_match.py.in", "cost.py": "cost_match.py.in",
              "templates/{name}_soc.h": "soc_match.h.in"},
}
_KIND_TESTS = {"match": "test_match.py.in"}


def _template(name: str) -> str:
    return resources.files("edgebyoc.templates").joinpath("scaffold", name).read_text()


def _fill(text: str, values: dict[str, str]) -> str:
    for key, value in values.items():
        text = text.replace(f"@{key}@", value)
    left = re.findall(r"@[a-z_]+@", text)
    if left:
        raise AssertionError(f"scaffold template placeholders left unfilled: {left}")
    return text


#: the longest plugin name: it becomes a package, a distribution and file names
MAX_NAME_LENGTH = 64


def check_name(name: str) -> None:
    """A new plugin's name: a Python identifier in lowercase of at most ``MAX_NAME_LENGTH``
    characters, taken by no installed plugin, distribution or target."""
    from .plugins import installed_names

    if not re.fullmatch(r"[a-z][a-z0-9_]*", name) or name == "host":
        raise EdgebyocError(f"plugin name {name[:80]!r}: use lowercase letters, digits and "
                            f"underscores, starting with a letter (and not 'host')")
    if len(name) > MAX_NAME_LENGTH:
        raise EdgebyocError(f"plugin name {name[:40]}...: {len(name)} characters, at most "
                            f"{MAX_NAME_LENGTH}")
    taken = installed_names()
    clash = [n for n in (name, f"edgebyoc-{name.replace('_', '-')}") if n in taken]
    if clash:
        raise EdgebyocError(f"plugin name {name!r}: {clash[0]!r} is already taken by an "
                            f"installed plugin (see `edgebyoc plugins`); choose another name")


def plugin_files(name: str, kind: str) -> dict[str, str]:
    """Relative path -> text of a new plugin ``name`` of ``kind`` (see the module docstring)."""
    check_name(name)
    if kind not in KINDS:
        raise EdgebyocError(f"plugin kind {kind!r}: use one of {', '.join(KINDS)}")
    major, _ = api_version_tuple(API_VERSION)
    values = {"name": name, "dist": name.replace("_", "-"), "kind": kind,
              "summary": _SUMMARIES[kind], "api_version": API_VERSION,
              "api_next_major": str(major + 1), "name_upper": name.upper(),
              **_GRAPH_KINDS.get(kind, {})}
    package = f"edgebyoc_{name}"
    files = {
        "pyproject.toml": _fill(_template("pyproject.toml.in"), values),
        "README.md": _fill(_template("README.md.in"), values),
        f"{package}/__init__.py": f'"""edgebyoc target {name} (kind {kind}): see plugin.py."""\n',
        f"{package}/templates/__init__.py": "",
        f"tests/test_{name}.py": _fill(_template(_KIND_TESTS.get(kind, "test_plugin.py.in")),
                                       values),
    }
    for relative, template in _KIND_FILES[kind].items():
        files[f"{package}/{relative.format(name=name)}"] = _fill(_template(template), values)
    return files


def new_plugin(name: str, kind: str, directory: str | Path) -> list[Path]:
    """Write a new plugin into ``directory`` (which must not exist or be empty), atomically:
    a failure (a full disk) leaves no partial plugin. Returns the files written."""
    from .runtime.safe_output import check_output_directory, replace_directory

    files = plugin_files(name, kind)
    root = Path(directory)

    def empty(folder: Path) -> bool:
        return not any(folder.iterdir())

    if root.exists() and (not root.is_dir() or root.is_symlink() or not empty(root)):
        raise EdgebyocError(f"{root}: exists and is not an empty directory; the plugin is "
                            f"written into a new one")
    check_output_directory(root, empty, "plugin folder")

    def fill(folder: Path) -> None:
        for relative, text in files.items():
            path = folder / relative
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)

    replace_directory(root, fill, empty, "plugin folder")
    return [root / relative for relative in files]
