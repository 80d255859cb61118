"""tox plugin of this repository (tox loads toxfile.py itself): one environment per plugin.

Every directory ``plugins/<name>/`` with a ``pyproject.toml`` gets an environment
``plugin-<name>`` that installs only the core and that plugin (editable, from this checkout)
and runs the plugin's tests, so a new plugin joins the matrix without editing tox.ini. A
plugin's ``debian-packages.txt`` lists system packages its tests need; the environment
installs the missing ones first (``scripts/debian_packages.py``: as root with apt).
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from tox.config.loader.memory import MemoryLoader
from tox.config.types import Command
from tox.plugin import impl

ROOT = Path(__file__).resolve().parent


def plugin_names() -> list[str]:
    return sorted(path.parent.name for path in ROOT.glob("plugins/*/pyproject.toml"))


@impl
def tox_extend_envs() -> Iterable[str]:
    return tuple(f"plugin-{name}" for name in plugin_names())


@impl
def tox_add_core_config(core_conf, state) -> None:
    env_list = core_conf["env_list"].envs  # the default run: the core, then every plugin
    env_list.extend(name for name in tox_extend_envs() if name not in env_list)
    for name in plugin_names():
        directory = ROOT / "plugins" / name
        system = directory / "debian-packages.txt"  # e.g. adreno: PoCL for OpenCL on the CPU
        pre = [Command(["python", str(ROOT / "scripts" / "debian_packages.py"), str(system)])] \
            if system.exists() else []
        state.conf.memory_seed_loaders[f"plugin-{name}"].append(MemoryLoader(
            description=f"the {name} plugin's tests, with only the core and this plugin",
            deps=f"-e {ROOT}[test]\n-e {directory}[test]",
            commands_pre=pre,
            commands=[Command(["pytest", "-q", "-rs", "--basetemp",
                               str(ROOT / ".tox" / f"plugin-{name}" / "tmp" / "pytest"),
                               str(directory / "tests")])],
        ))
