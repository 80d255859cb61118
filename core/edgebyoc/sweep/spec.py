"""The sweep specification: which models, for which targets, over which option grids, doing what.

A spec is a TOML (or, with PyYAML installed, YAML) file::

    models = ["../shared/models/mlperf_tiny/*_int8.tflite", "kws_ref_model.tflite"]
    action = "verify"       # "compile" (default) or "verify" (compile, then verify)
    point_timeout = 600     # seconds a point may take before it is ended (default 600)
    seed = 0                # seed of verify's random inputs

    [targets.gap9]
    l1_kb = [8, 16, 32, 64, 128]
    modules = ["cluster", "ne16", "cluster,ne16"]

    [targets.diana]
    l1_kb = [16, 32, 64, 128, 256]

    [targets.host]          # a target without options: one point per model

    [compile]               # compile options, swept for every target: option = [values]
    io_in_arena = [false, true]

Model paths and globs are relative to the spec's folder. Each ``[targets.NAME]`` table maps an
option of that target to a list of values (a single value is a list of one); the points are
every model x every target x the product of its option lists (and of the ``[compile]`` lists:
``io_in_arena``, ``dfs``, ``memory_budget`` in bytes, ``max_recompute``, ``cost_metric``).
Everything is checked before any point runs: a glob that matches nothing, an unknown key,
target or option, or a value the option does not allow is a ``SweepSpecError`` naming it.
"""

from __future__ import annotations

import glob
import hashlib
import itertools
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from ..errors import EdgebyocError

ACTIONS = ("compile", "verify")
DEFAULT_POINT_TIMEOUT = 600.0
_KEYS = {"models", "targets", "compile", "action", "point_timeout", "seed"}


def _positive_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


#: the compile options a spec may sweep (``edgebyoc.compile`` keywords): a check per option
#: and what it allows, for the error
COMPILE_OPTIONS = {
    "io_in_arena": (lambda v: isinstance(v, bool), "true or false"),
    "dfs": (lambda v: isinstance(v, bool), "true or false"),
    "memory_budget": (_positive_int, "a positive number of bytes"),
    "max_recompute": (lambda v: isinstance(v, (int, float)) and not isinstance(v, bool)
                      and v >= 1, "a number of at least 1"),
    "cost_metric": (lambda v: v in ("latency", "energy"), "latency or energy"),
}


class SweepSpecError(EdgebyocError):
    """The sweep specification is malformed or names something that does not exist."""


@dataclass(frozen=True)
class Point:
    """One compile (and verify) of the sweep: a model, a target and one value per option.

    ``key`` identifies its result in the cache: a digest of the model's content, the target,
    the options (defaults filled in), the action and seed, and the versions of edgebyoc, TVM
    and the target's plugin.
    """

    model: str
    model_sha256: str
    target: str
    options: tuple[tuple[str, Any], ...]
    action: str
    seed: int
    key: str
    compile_options: tuple[tuple[str, Any], ...] = ()

    @property
    def options_text(self) -> str:
        return ",".join(f"{k}={_text(v)}" for k, v in self.options + self.compile_options) \
            or "-"

    def to_dict(self) -> dict[str, Any]:
        return {"model": self.model, "model_sha256": self.model_sha256, "target": self.target,
                "options": dict(self.options), "compile": dict(self.compile_options),
                "action": self.action, "seed": self.seed, "key": self.key}


@dataclass
class SweepSpec:
    """A sweep in Python: ``SweepSpec(models=["a.onnx"], targets={"gap9": {"l1_kb": [32, 64]}})``.

    ``models``: files or globs (relative to ``base``); ``targets``: target -> option -> values;
    ``action``: ``"compile"`` or ``"verify"``; ``point_timeout``: seconds per point.
    """

    models: list[str]
    targets: Mapping[str, Mapping[str, Any]]
    action: str = "compile"
    compile: Mapping[str, Any] = field(default_factory=dict)
    point_timeout: float = DEFAULT_POINT_TIMEOUT
    seed: int = 0
    base: Path = field(default_factory=Path.cwd)

    def __post_init__(self):
        if isinstance(self.models, str):
            self.models = [self.models]
        if not isinstance(self.models, (list, tuple)) or not self.models or \
                not all(isinstance(m, str) for m in self.models):
            raise SweepSpecError("models: give a non-empty list of model files or globs")
        if not isinstance(self.targets, Mapping) or not self.targets:
            raise SweepSpecError("targets: give at least one [targets.NAME] table")
        if self.action not in ACTIONS:
            raise SweepSpecError(f"action: {self.action!r} is not one of {', '.join(ACTIONS)}")
        if isinstance(self.point_timeout, bool) or \
                not isinstance(self.point_timeout, (int, float)) or self.point_timeout <= 0:
            raise SweepSpecError(f"point_timeout: {self.point_timeout!r} is not a positive "
                                 f"number of seconds")
        if isinstance(self.seed, bool) or not isinstance(self.seed, int):
            raise SweepSpecError(f"seed: {self.seed!r} is not an integer")
        if not isinstance(self.compile, Mapping):
            raise SweepSpecError("compile: give a table of option = [values]")
        for name, values in self.compile.items():
            if name not in COMPILE_OPTIONS:
                raise SweepSpecError(f"compile.{name}: not a compile option (compile options: "
                                     f"{', '.join(COMPILE_OPTIONS)})")
            check, allowed = COMPILE_OPTIONS[name]
            values = list(values) if isinstance(values, (list, tuple)) else [values]
            bad = [v for v in values if not check(v)] or ([] if values else ["nothing"])
            if bad:
                raise SweepSpecError(f"compile.{name}: {bad[0]!r} is not {allowed}")
        self.base = Path(self.base)

    def model_files(self) -> list[Path]:
        """Every model file, in the order given (globs sorted), each once."""
        files: list[Path] = []
        for pattern in self.models:
            path = Path(pattern).expanduser()
            if not path.is_absolute():
                path = self.base / path
            matches = sorted(glob.glob(str(path))) if glob.has_magic(str(path)) else \
                [str(path)] if path.exists() else []
            matches = [m for m in matches if Path(m).is_file()]
            if not matches:
                raise SweepSpecError(f"models: {pattern!r} matches no file (relative to "
                                     f"{self.base})")
            files += [Path(m).resolve() for m in matches if Path(m).resolve() not in files]
        return files

    def points(self, registry=None) -> list[Point]:
        """Every point of the sweep, its options checked against its target."""
        from .. import version
        from ..plugins import default_registry

        import tvm

        registry = registry or default_registry()
        grids = []
        for name, grid in self.targets.items():
            grids.append((name, _target_grid(registry, name, grid or {})))
        names = list(self.compile)
        compile_grid = [tuple(zip(names, combo)) for combo in itertools.product(
            *[list(v) if isinstance(v, (list, tuple)) else [v] for v in self.compile.values()])]
        points = []
        for model in self.model_files():
            digest = hashlib.sha256(model.read_bytes()).hexdigest()
            for name, (combinations, plugin) in grids:
                for given, resolved in combinations:
                    for compile_options in compile_grid:
                        identity = {"model": digest, "target": name, "options": resolved,
                                    "compile": dict(compile_options), "action": self.action,
                                    "seed": self.seed, "edgebyoc": version.__version__,
                                    "tvm": tvm.__version__, "plugin": plugin}
                        key = hashlib.sha256(json.dumps(identity, sort_keys=True, default=str)
                                             .encode()).hexdigest()[:20]
                        points.append(Point(str(model), digest, name, given, self.action,
                                            self.seed, key, compile_options))
        return points


def _target_grid(registry, name: str, grid: Mapping[str, Any]):
    """([(options as given, options resolved with defaults)], plugin identity) of a target."""
    if not isinstance(grid, Mapping):
        raise SweepSpecError(f"targets.{name}: give a table of option = [values]")
    try:
        target = registry.target(name)
    except EdgebyocError as err:
        raise SweepSpecError(f"targets.{name}: {err}") from err
    owner = registry.owner(name)
    plugin = "" if not owner else \
        f"{registry.info(owner).distribution}=={registry.info(owner).version}"
    names, values = [], []
    for option, choices in grid.items():
        choices = list(choices) if isinstance(choices, (list, tuple)) else [choices]
        if not choices:
            raise SweepSpecError(f"targets.{name}.{option}: give at least one value")
        for value in choices:
            try:
                target.resolve_options({option: value})
            except (ValueError, TypeError) as err:
                raise SweepSpecError(f"targets.{name}.{option}: {err}") from err
        names.append(option)
        values.append(choices)
    combinations = []
    for combo in itertools.product(*values):
        given = tuple(zip(names, combo))
        resolved = target.resolve_options(dict(given))
        combinations.append((given, resolved))
    return combinations, plugin


def load_spec(path: str | Path) -> SweepSpec:
    """Read a TOML or YAML spec (see the module docstring)."""
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as err:
        raise SweepSpecError(f"cannot read sweep spec {path}: {err.strerror or err}") from err
    if path.suffix in (".yaml", ".yml"):
        try:
            import yaml
        except ImportError as err:
            raise SweepSpecError(f"{path}: YAML specs need PyYAML (pip install pyyaml), or "
                                 f"write the spec in TOML") from err
        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError as err:
            raise SweepSpecError(f"{path}: not valid YAML: {str(err).splitlines()[0]}") from err
    else:
        try:
            import tomllib
        except ImportError:  # Python 3.10
            import tomli as tomllib
        try:
            data = tomllib.loads(text)
        except tomllib.TOMLDecodeError as err:
            raise SweepSpecError(f"{path}: not valid TOML: {err}") from err
    if not isinstance(data, dict):
        raise SweepSpecError(f"{path}: the spec must be a table of keys")
    unknown = sorted(set(data) - _KEYS)
    if unknown:
        raise SweepSpecError(f"{path}: unknown key(s) {', '.join(unknown)} (keys: "
                             f"{', '.join(sorted(_KEYS))})")
    if "models" not in data or "targets" not in data:
        raise SweepSpecError(f"{path}: a spec needs 'models' and a [targets.NAME] table")
    return SweepSpec(models=data["models"], targets=data["targets"],
                     action=data.get("action", "compile"), compile=data.get("compile", {}),
                     point_timeout=data.get("point_timeout", DEFAULT_POINT_TIMEOUT),
                     seed=data.get("seed", 0), base=path.resolve().parent)


def _text(value: Any) -> str:
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)
