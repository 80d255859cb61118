"""The sweep specification: which models, for which targets, over which option grids, doing what.

A spec is a TOML (or, with PyYAML installed, YAML) file::

    models = ["../shared/models/mlperf_tiny/*_int8.tflite", "kws_ref_model.tflite"]
    action = "verify"       # "compile" (default) or "verify" (compile, then verify)
    point_timeout = 600     # seconds a point may take before it is ended (default 600)
    seed = 0                # seed of verify's random inputs
    max_points = 10000      # the most points the grid may have (default 10,000)

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
target or option, a value the option does not allow (a table or a date for a number, a number
out of range, a non-finite number), a grid of more than ``max_points`` points (counted, not
expanded) is a ``SweepSpecError`` naming it.
"""

from __future__ import annotations

import glob
import hashlib
import itertools
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from ..errors import EdgebyocError

ACTIONS = ("compile", "verify")
DEFAULT_POINT_TIMEOUT = 600.0
#: the most points a sweep expands unless its spec (``max_points``) or ``--max-points`` allows
#: more: each point is a compile of seconds to minutes, and a grid is counted before it is
#: expanded, so a mistyped range is refused at once instead of filling the memory
DEFAULT_MAX_POINTS = 10_000
_KEYS = {"models", "targets", "compile", "action", "point_timeout", "seed", "max_points"}


def _positive_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def _values(name: str, values: Any) -> list:
    """A swept option's values as a list (a single value is a list of one), each a plain
    scalar (text, number or boolean): a table, a date or a nested list is refused."""
    values = list(values) if isinstance(values, (list, tuple)) else [values]
    if not values:
        raise SweepSpecError(f"{name}: give at least one value")
    for value in values:
        if not isinstance(value, (str, int, float, bool)):
            raise SweepSpecError(f"{name}: {value!r} ({type(value).__name__}) is not a value "
                                 f"an option takes (text, a number or true / false)")
        if isinstance(value, float) and not math.isfinite(value):
            raise SweepSpecError(f"{name}: {value!r} is not a finite number")
    return values


#: the compile options a spec may sweep (``edgebyoc.compile`` keywords): a check per option
#: and what it allows, for the error
COMPILE_OPTIONS = {
    "io_in_arena": (lambda v: isinstance(v, bool), "true or false"),
    "dfs": (lambda v: isinstance(v, bool), "true or false"),
    "memory_budget": (_positive_int, "a positive number of bytes"),
    "max_recompute": (lambda v: isinstance(v, (int, float)) and not isinstance(v, bool)
                      and math.isfinite(v) and v >= 1, "a finite number of at least 1"),
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
    ``action``: ``"compile"`` or ``"verify"``; ``point_timeout``: seconds per point;
    ``max_points``: the most points the grid may expand to (counted before expanding).
    """

    models: list[str]
    targets: Mapping[str, Mapping[str, Any]]
    action: str = "compile"
    compile: Mapping[str, Any] = field(default_factory=dict)
    point_timeout: float = DEFAULT_POINT_TIMEOUT
    seed: int = 0
    base: Path = field(default_factory=Path.cwd)
    max_points: int = DEFAULT_MAX_POINTS

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
                not isinstance(self.point_timeout, (int, float)) or \
                not math.isfinite(self.point_timeout) or self.point_timeout <= 0:
            raise SweepSpecError(f"point_timeout: {self.point_timeout!r} is not a positive "
                                 f"number of seconds")
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) or \
                not 0 <= self.seed < 2**63:
            raise SweepSpecError(f"seed: {self.seed!r} is not an integer from 0 to 2^63 - 1")
        if not _positive_int(self.max_points):
            raise SweepSpecError(f"max_points: {self.max_points!r} is not a positive integer")
        if not isinstance(self.compile, Mapping):
            raise SweepSpecError("compile: give a table of option = [values]")
        for name, values in self.compile.items():
            if name not in COMPILE_OPTIONS:
                raise SweepSpecError(f"compile.{name}: not a compile option (compile options: "
                                     f"{', '.join(COMPILE_OPTIONS)})")
            check, allowed = COMPILE_OPTIONS[name]
            bad = [v for v in _values(f"compile.{name}", values) if not check(v)]
            if bad:
                raise SweepSpecError(f"compile.{name}: {bad[0]!r} is not {allowed}")
        for name, grid in self.targets.items():
            if grid is not None and not isinstance(grid, Mapping):
                raise SweepSpecError(f"targets.{name}: give a table of option = [values]")
            for option, values in (grid or {}).items():
                _values(f"targets.{name}.{option}", values)
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

    def count(self, model_count: int) -> int:
        """How many points the grid expands to, counted without expanding it."""
        per_model = 0
        for grid in self.targets.values():
            per_model += math.prod(len(_values("", v)) for v in (grid or {}).values())
        return model_count * per_model * math.prod(
            len(_values("", v)) for v in self.compile.values())

    def points(self, registry=None) -> list[Point]:
        """Every point of the sweep, its options checked against its target; the grid is
        counted first and refused when it has more than ``max_points`` points."""
        from .. import version
        from ..plugins import default_registry

        import tvm

        models = self.model_files()
        total = self.count(len(models))
        if total > self.max_points:
            raise SweepSpecError(f"the spec expands to {total:,} points, more than max_points "
                                 f"= {self.max_points:,}; narrow the grid, or raise the limit "
                                 f"(max_points in the spec, --max-points) if you mean it")
        registry = registry or default_registry()
        grids = []
        for name, grid in self.targets.items():
            grids.append((name, _target_grid(registry, name, grid or {})))
        names = list(self.compile)
        compile_grid = [tuple(zip(names, combo)) for combo in itertools.product(
            *[_values("", v) for v in self.compile.values()])]
        points = []
        for model in models:
            digest = hashlib.sha256(model.read_bytes()).hexdigest()
            for name, (combinations, plugin) in grids:
                for given, resolved in combinations:
                    calibration = _calibration_identity(registry, name, resolved)
                    for compile_options in compile_grid:
                        identity = {"model": digest, "target": name, "options": resolved,
                                    "compile": dict(compile_options), "action": self.action,
                                    "seed": self.seed, "edgebyoc": version.__version__,
                                    "tvm": tvm.__version__, "plugin": plugin,
                                    "calibration": calibration}
                        key = hashlib.sha256(json.dumps(identity, sort_keys=True, default=str)
                                             .encode()).hexdigest()[:20]
                        points.append(Point(str(model), digest, name, given, self.action,
                                            self.seed, key, compile_options))
        return points


def _calibration_identity(registry, name: str, options: Mapping[str, Any]):
    """The cost constants in force for a point (a calibration file edited between two runs
    gives new points, not cached ones); a file that cannot be used is a ``SweepSpecError``."""
    from ..calibration import calibrated_constants
    from ..errors import CompileError

    try:
        return calibrated_constants(registry.target(name), options)
    except CompileError as err:
        raise SweepSpecError(f"targets.{name}: {err}") from None


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
        choices = _values(f"targets.{name}.{option}", choices)
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
        text = path.read_text(encoding="utf-8")
    except OSError as err:
        raise SweepSpecError(f"cannot read sweep spec {path}: {err.strerror or err}") from err
    except UnicodeDecodeError as err:
        raise SweepSpecError(f"{path}: not a UTF-8 text file (byte {err.start}: "
                             f"{err.reason}); write the spec in UTF-8") from err
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
                     seed=data.get("seed", 0), base=path.resolve().parent,
                     max_points=data.get("max_points", DEFAULT_MAX_POINTS))


def _text(value: Any) -> str:
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)
