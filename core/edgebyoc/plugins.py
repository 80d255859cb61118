"""Discovery and loading of backend plugins from the ``edgebyoc`` entry-point group.

Each plugin is loaded in isolation: one that fails to import, implements a hook that does not exist
(a misspelling), breaks a hook's signature, raises in ``edgebyoc_targets`` or was written for
another contract major version is recorded as *failed* with the reason, and every other plugin
keeps working. pluggy itself stops at the first broken entry point and registers unknown hook names
silently, which is why loading is done here one entry point at a time.

Environment switches (read when a registry is created):

``EDGEBYOC_LOAD_PLUGINS``
    comma-separated plugin names to load; every other plugin is *disabled*. Set but empty: load
    none (the core's own tests run this way).
``EDGEBYOC_DISABLE_PLUGINS``
    comma-separated plugin names to leave out (*disabled*).
``EDGEBYOC_STRICT_PLUGINS``
    ``1``: re-raise the first plugin failure as ``PluginError`` instead of recording it.
"""

from __future__ import annotations

import difflib
import enum
import inspect
import os
import threading
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

import importlib_metadata
import pluggy

from . import hookspecs
from .errors import PLUGIN_FAULTS, PluginError, TargetError, first_line
from .target import HOST_TARGET, Availability, Target, api_mismatch

ENTRY_POINT_GROUP = "edgebyoc"
ENV_LOAD = "EDGEBYOC_LOAD_PLUGINS"
ENV_DISABLE = "EDGEBYOC_DISABLE_PLUGINS"
ENV_STRICT = "EDGEBYOC_STRICT_PLUGINS"

HOOK_NAMES = tuple(sorted(name for name, _ in inspect.getmembers(hookspecs, inspect.isfunction)
                          if name.startswith("edgebyoc_")))


class PluginStatus(str, enum.Enum):
    ACTIVE = "active"
    DISABLED = "disabled"
    UNAVAILABLE = "unavailable"
    FAILED = "failed"


@dataclass
class PluginInfo:
    """What ``edgebyoc plugins`` shows for one plugin."""

    name: str
    distribution: str
    version: str
    status: PluginStatus
    reason: str = ""
    targets: tuple[str, ...] = ()
    hooks: tuple[str, ...] = ()
    target_objects: tuple[Target, ...] = field(default=(), repr=False)
    #: the module its entry point names (``edgebyoc_gap9.plugin``): where its source is
    module: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "distribution": self.distribution, "version": self.version,
                "status": self.status.value, "reason": self.reason,
                "targets": list(self.targets), "hooks": list(self.hooks),
                "target_details": [{"name": t.name, "description": t.description,
                                    "modules": [m.name for m in t.modules],
                                    "options": [{"name": o.name, "type": o.type.__name__,
                                                 "default": o.default, "allowed": o.allowed(),
                                                 "help": o.help} for o in t.options],
                                    # the cost constants `edgebyoc calibrate` may fit
                                    "calibration": [
                                        {"name": c.name, "default": c.default,
                                         "lower": c.lower, "upper": c.upper, "unit": c.unit,
                                         "description": c.description, "source": c.source}
                                        for c in t.calibration]}
                                   for t in self.target_objects]}


def _names_from_env(value: str | None) -> set[str] | None:
    if value is None:
        return None
    return {part.strip() for part in value.split(",") if part.strip()}


def _dedupe(entry_points: Iterable[Any]) -> list[Any]:
    """One entry point per (distribution, name): editable installs can list a distribution twice."""
    seen, unique = set(), []
    for ep in entry_points:
        dist = getattr(ep, "dist", None)
        key = ((dist.metadata["Name"] or "").lower().replace("_", "-") if dist else "", ep.name)
        if key not in seen:
            seen.add(key)
            unique.append(ep)
    return unique


class PluginRegistry:
    """The loaded plugins, their targets, and scoped access to their hooks.

    ``search_path`` restricts discovery to distributions found on those directories (tests use it
    with fake distributions); ``environ`` replaces ``os.environ`` for the switches; ``strict``
    overrides ``EDGEBYOC_STRICT_PLUGINS``.
    """

    def __init__(self, search_path: list[str] | None = None,
                 environ: Mapping[str, str] | None = None, strict: bool | None = None):
        env = os.environ if environ is None else environ
        self.strict = strict if strict is not None else env.get(ENV_STRICT, "") in ("1", "true")
        self._load_only = _names_from_env(env.get(ENV_LOAD))
        self._disabled = _names_from_env(env.get(ENV_DISABLE)) or set()
        self.manager = pluggy.PluginManager(hookspecs.PROJECT_NAME)
        self.manager.add_hookspecs(hookspecs)
        self.plugins: list[PluginInfo] = []
        self._owner: dict[str, tuple[Target, str]] = {HOST_TARGET.name: (HOST_TARGET, "")}
        if search_path is None:
            eps = importlib_metadata.entry_points(group=ENTRY_POINT_GROUP)
        else:
            eps = [ep for dist in importlib_metadata.distributions(path=search_path)
                   for ep in dist.entry_points if ep.group == ENTRY_POINT_GROUP]
        for ep in sorted(_dedupe(eps), key=lambda e: e.name):
            self._load(ep)

    # -- loading -----------------------------------------------------------------------------

    def _load(self, ep) -> None:
        dist = getattr(ep, "dist", None)
        info = PluginInfo(name=ep.name, distribution=dist.metadata["Name"] if dist else "?",
                          version=dist.version if dist else "?", status=PluginStatus.ACTIVE,
                          module=ep.value.split(":", 1)[0].strip())
        self.plugins.append(info)
        if (self._load_only is not None and ep.name not in self._load_only) \
                or ep.name in self._disabled:
            info.status = PluginStatus.DISABLED
            switch = ENV_LOAD if ep.name not in self._disabled else ENV_DISABLE
            info.reason = f"disabled by {switch}"
            return
        try:
            plugin = ep.load()
            info.hooks = self._check_hook_names(plugin)
            self.manager.register(plugin, name=ep.name)
            answers = self._call_single(ep.name, "edgebyoc_targets")  # one per implementation
            targets = answers[0] if len(answers) == 1 else answers
            info.target_objects = self._check_targets(ep.name, targets)
            clash = [t.name for t in info.target_objects if t.name in self._owner]
            if clash:
                raise PluginError(f"target {clash[0]!r} is already provided by "
                                  f"{self._owner[clash[0]][1] or 'the core'}")
            info.targets = tuple(t.name for t in info.target_objects)
            availability = self._call_single(ep.name, "edgebyoc_availability")
        except PLUGIN_FAULTS as err:  # any failure of third-party code is contained
            if self.manager.is_registered(self.manager.get_plugin(ep.name)):
                self.manager.unregister(name=ep.name)
            info.status, info.reason = PluginStatus.FAILED, first_line(err)
            if self.strict:
                raise PluginError(f"plugin {ep.name!r} ({info.distribution}) failed: "
                                  f"{info.reason}") from err
            return
        if availability is not None and not isinstance(availability, Availability):
            availability = Availability(False, f"edgebyoc_availability returned "
                                               f"{type(availability).__name__}")
        for target in info.target_objects:
            self._owner[target.name] = (target, ep.name)
        if availability is not None and not availability.available:
            info.status, info.reason = PluginStatus.UNAVAILABLE, availability.reason
        elif availability is not None:  # usable, with a note (e.g. an optional runtime missing)
            info.reason = availability.reason

    @staticmethod
    def _check_hook_names(plugin: Any) -> tuple[str, ...]:
        implemented = []
        for attr in dir(plugin):
            if not attr.startswith("edgebyoc_") or not callable(getattr(plugin, attr, None)):
                continue
            if attr not in HOOK_NAMES:
                close = difflib.get_close_matches(attr, HOOK_NAMES, n=1)
                hint = f" (did you mean {close[0]}?)" if close else ""
                raise PluginError(f"unknown hook {attr}{hint}")
            if not hasattr(getattr(plugin, attr), f"{hookspecs.PROJECT_NAME}_impl"):
                raise PluginError(f"{attr} is not marked with @edgebyoc.hookimpl")
            implemented.append(attr)
        if "edgebyoc_targets" not in implemented:
            raise PluginError("the plugin does not implement edgebyoc_targets")
        return tuple(implemented)

    @staticmethod
    def _check_targets(name: str, targets: Any) -> tuple[Target, ...]:
        if not isinstance(targets, (list, tuple)) or not all(isinstance(t, Target)
                                                             for t in targets):
            raise PluginError(f"edgebyoc_targets must return a list of edgebyoc.target.Target, "
                              f"got {targets!r:.80}")
        for target in targets:
            mismatch = api_mismatch(target)
            if mismatch:
                raise PluginError(mismatch)
        return tuple(targets)

    def _call_single(self, plugin_name: str, hook: str, **kwargs) -> Any:
        others = [p for n, p in self.manager.list_name_plugin() if n != plugin_name]
        caller = self.manager.subset_hook_caller(hook, remove_plugins=others)
        return caller(**kwargs)

    # -- queries ------------------------------------------------------------------------------

    def info(self, name: str) -> PluginInfo:
        for info in self.plugins:
            if info.name == name:
                return info
        raise KeyError(name)

    def target_names(self) -> list[str]:
        """Targets that can be compiled for now: the host plus those of active plugins."""
        return sorted(name for name, (_, owner) in self._owner.items()
                      if not owner or self.info(owner).status is PluginStatus.ACTIVE)

    def target(self, name: str) -> Target:
        """The target called ``name``; ``TargetError`` saying why it cannot be used otherwise."""
        if name in self._owner:
            target, owner = self._owner[name]
            if owner and self.info(owner).status is not PluginStatus.ACTIVE:
                info = self.info(owner)
                raise TargetError(f"target {name!r} is {info.status.value}: {info.reason} "
                                  f"(plugin {owner!r}, {info.distribution})")
            return target
        disabled = [p for p in self.plugins if p.status is PluginStatus.DISABLED
                    and p.name == name]
        if disabled:  # a disabled plugin is not loaded: its entry point's name is the hint
            raise TargetError(f"target {name!r}: plugin {name!r} ({disabled[0].distribution}) "
                              f"is installed but {disabled[0].reason}")
        failed = [p for p in self.plugins if p.status is PluginStatus.FAILED]
        hint = "".join(f"; plugin {p.name!r} failed to load: {p.reason}" for p in failed)
        raise TargetError(f"unknown target {name!r} (available: {', '.join(self.target_names())})"
                          f"{hint}")

    def owner(self, target_name: str) -> str:
        """Name of the plugin that provides the target ('' for the core's host target)."""
        return self._owner[target_name][1]

    def call(self, target_name: str, hook: str, **kwargs) -> Any:
        """Call ``hook`` on the plugin owning ``target_name`` only; failures name the plugin."""
        owner = self.owner(target_name)
        if not owner:
            spec = getattr(self.manager.hook, hook).spec
            return None if spec and spec.opts.get("firstresult") else []
        try:
            return self._call_single(owner, hook, **kwargs)
        except PLUGIN_FAULTS as err:
            raise PluginError(f"plugin {owner!r} raised in {hook} for target {target_name!r}: "
                              f"{type(err).__name__}: {first_line(err)}") from err

    def versions(self) -> dict[str, str]:
        """Distribution versions of the active plugins (recorded in artifact manifests)."""
        return {p.distribution: p.version for p in self.plugins
                if p.status is PluginStatus.ACTIVE}


def installed_names() -> set[str]:
    """Every name an installed plugin already takes, enabled or not: its entry-point name,
    its distribution's name and its targets' names are not free for a new plugin."""
    names = {HOST_TARGET.name}
    for ep in importlib_metadata.entry_points(group=ENTRY_POINT_GROUP):
        names.add(ep.name)
        dist = getattr(ep, "dist", None)
        if dist is not None and dist.metadata["Name"]:
            names.add(dist.metadata["Name"].lower().replace("_", "-"))
    names.update(default_registry().target_names())
    return names


_default: PluginRegistry | None = None
_default_lock = threading.Lock()


def default_registry() -> PluginRegistry:
    """The process-wide registry built from the installed distributions and the environment
    (built once, by the first caller of any thread)."""
    global _default
    with _default_lock:
        if _default is None:
            _default = PluginRegistry()
        return _default


def reset_default_registry() -> None:
    """Forget the process-wide registry (after installing plugins or changing the switches)."""
    global _default
    with _default_lock:
        _default = None
