"""Plugin loading: isolation, failures, switches, strict mode, the CLI listing."""

import json

import numpy as np
import pytest
from click.testing import CliRunner

import edgebyoc
from edgebyoc import cli, plugins
from edgebyoc.errors import PluginError, TargetError
from edgebyoc.plugins import PluginStatus
from edgebyoc.target import API_VERSION

GOOD = """
import edgebyoc
from edgebyoc.target import Target, ExecModule, MemoryLevel, TargetOption

CALLS = []

@edgebyoc.hookimpl
def edgebyoc_targets():
    accel = ExecModule("accel", memory_levels=(MemoryLevel("L1", 64 * 1024),))
    return [Target("goodchip", description="a test chip", modules=(accel,),
                   options=(TargetOption("l1_kb", int, 64, "L1 size"),))]

@edgebyoc.hookimpl
def edgebyoc_transforms(target, stage):
    CALLS.append((target.name, stage))
    return []
"""

RAISES_ON_IMPORT = """
raise ImportError("libvendor.so: cannot open shared object file")
"""

MISSPELT = """
import edgebyoc
from edgebyoc.target import Target

@edgebyoc.hookimpl
def edgebyoc_targets():
    return [Target("misspelt")]

@edgebyoc.hookimpl
def edgebyoc_patern(target, module):
    return []
"""

UNMARKED = """
import edgebyoc
from edgebyoc.target import Target

@edgebyoc.hookimpl
def edgebyoc_targets():
    return [Target("unmarked")]

def edgebyoc_patterns(target, module):
    return []
"""

BAD_SIGNATURE = """
import edgebyoc
from edgebyoc.target import Target

@edgebyoc.hookimpl
def edgebyoc_targets():
    return [Target("badsig")]

@edgebyoc.hookimpl
def edgebyoc_patterns(target, module, flavour):
    return []
"""

TARGETS_RAISE = """
import edgebyoc

@edgebyoc.hookimpl
def edgebyoc_targets():
    raise RuntimeError("device table corrupted")
"""

FUTURE_API = """
import edgebyoc
from edgebyoc.target import Target

@edgebyoc.hookimpl
def edgebyoc_targets():
    return [Target("future", api_version="3.0")]
"""

UNAVAILABLE = """
import edgebyoc
from edgebyoc.target import Target, Availability

@edgebyoc.hookimpl
def edgebyoc_targets():
    return [Target("gpuchip")]

@edgebyoc.hookimpl
def edgebyoc_availability():
    return Availability(False, "TensorRT libraries not found")
"""

PATTERNS_RAISE = """
import edgebyoc
from edgebyoc.target import Target, ExecModule

@edgebyoc.hookimpl
def edgebyoc_targets():
    return [Target("crashchip", modules=(ExecModule("conv"),))]

@edgebyoc.hookimpl
def edgebyoc_patterns(target, module):
    raise KeyError("conv2d_bias")
"""


def test_good_plugin_is_active(make_plugin, isolated_registry):
    registry = isolated_registry(make_plugin("good", GOOD, version="1.2.3"))
    info = registry.info("good")
    assert info.status is PluginStatus.ACTIVE
    assert info.distribution == "edgebyoc-test-good" and info.version == "1.2.3"
    assert info.targets == ("goodchip",)
    assert info.hooks == ("edgebyoc_targets", "edgebyoc_transforms")
    assert registry.target_names() == ["goodchip", "host"]
    assert registry.target("goodchip").module("accel").memory_levels[0].size_bytes == 65536
    assert registry.versions() == {"edgebyoc-test-good": "1.2.3"}


NEXT_MINOR = "2.%d" % (int(API_VERSION.split(".")[1]) + 1)


@pytest.mark.parametrize("name, source, reason", [
    ("broken", RAISES_ON_IMPORT, "libvendor.so: cannot open shared object file"),
    ("misspelt", MISSPELT, "unknown hook edgebyoc_patern (did you mean edgebyoc_patterns?)"),
    ("unmarked", UNMARKED, "edgebyoc_patterns is not marked with @edgebyoc.hookimpl"),
    ("badsig", BAD_SIGNATURE, "flavour"),
    ("raiser", TARGETS_RAISE, "device table corrupted"),
    ("future", FUTURE_API, f"written for plugin API 3.0; this edgebyoc speaks {API_VERSION} "
     "(another major version): upgrade edgebyoc (pip install 'edgebyoc>=3.0,<4')"),
    ("newer", FUTURE_API.replace('"future", api_version="3.0"',
                                 f'"newer", api_version="{NEXT_MINOR}"'),
     f"written for plugin API {NEXT_MINOR}; this edgebyoc speaks {API_VERSION} (a newer minor "
     f"version): upgrade edgebyoc (pip install 'edgebyoc>={NEXT_MINOR},<3')"),
    ("past", FUTURE_API.replace('"future", api_version="3.0"', '"past", api_version="1.0"'),
     f"written for plugin API 1.0; this edgebyoc speaks {API_VERSION} (changed in 2.0: plugins "
     "import only edgebyoc.api"),
    ("garbled", FUTURE_API.replace('"future", api_version="3.0"',
                                   '"garbled", api_version="two"'),
     "api_version 'two' is not of the form MAJOR.MINOR"),
])
def test_broken_plugin_fails_while_good_one_works(make_plugin, isolated_registry, name, source,
                                                  reason):
    make_plugin("good", GOOD)
    site = make_plugin(name, source)
    registry = isolated_registry(site)
    failed = registry.info(name)
    assert failed.status is PluginStatus.FAILED
    assert reason in failed.reason
    assert registry.info("good").status is PluginStatus.ACTIVE
    assert "goodchip" in registry.target_names()
    # the failed plugin's hooks are not registered: compiling for the good target calls only it
    assert registry.manager.get_plugin(name) is None


WRITTEN_FOR_2_3 = """
from edgebyoc.api import ExecModule, FrozenMap, Target, hookimpl
from edgebyoc.api.match import RELEVANT, extract
from edgebyoc.api.regions import shape_dtype

@hookimpl
def edgebyoc_targets():
    assert isinstance(ExecModule("accel").spatial_mapping, FrozenMap) and "K" in RELEVANT["W"]
    return [Target("oldchip", modules=(ExecModule("accel"),))]
"""


def test_a_plugin_written_against_2_3_declaring_nothing_still_loads(make_plugin,
                                                                   isolated_registry):
    """Undeclared api_version counts as 2.3; the names 2.4 took off the list still import."""
    registry = isolated_registry(make_plugin("oldie", WRITTEN_FOR_2_3))
    assert registry.info("oldie").status is PluginStatus.ACTIVE, registry.info("oldie").reason
    target = registry.target("oldchip")
    assert target.api_version is None and target.declared_api_version == "2.3"


def test_failed_plugin_is_named_when_its_target_is_asked_for(make_plugin, isolated_registry):
    registry = isolated_registry(make_plugin("raiser", TARGETS_RAISE))
    with pytest.raises(TargetError, match="unknown target 'x'.*plugin 'raiser' failed to load: "
                                          "device table corrupted"):
        registry.target("x")


def test_unavailable_plugin(make_plugin, isolated_registry):
    registry = isolated_registry(make_plugin("gpu", UNAVAILABLE))
    info = registry.info("gpu")
    assert info.status is PluginStatus.UNAVAILABLE
    assert info.reason == "TensorRT libraries not found"
    assert "gpuchip" not in registry.target_names()
    with pytest.raises(TargetError, match="target 'gpuchip' is unavailable: TensorRT libraries"):
        registry.target("gpuchip")


def test_switches(make_plugin, isolated_registry):
    make_plugin("good", GOOD)
    site = make_plugin("gpu", UNAVAILABLE)
    only = isolated_registry(site, EDGEBYOC_LOAD_PLUGINS="gpu")
    assert only.info("good").status is PluginStatus.DISABLED
    assert "EDGEBYOC_LOAD_PLUGINS" in only.info("good").reason
    none = isolated_registry(site, EDGEBYOC_LOAD_PLUGINS="")
    assert {p.status for p in none.plugins} == {PluginStatus.DISABLED}
    assert none.target_names() == ["host"]
    disabled = isolated_registry(site, EDGEBYOC_DISABLE_PLUGINS="good, other")
    assert disabled.info("good").status is PluginStatus.DISABLED
    assert disabled.info("gpu").status is PluginStatus.UNAVAILABLE


def test_strict_mode_reraises(make_plugin, isolated_registry):
    site = make_plugin("misspelt", MISSPELT)
    with pytest.raises(PluginError, match="plugin 'misspelt'.*did you mean edgebyoc_patterns"):
        isolated_registry(site, EDGEBYOC_STRICT_PLUGINS="1")
    with pytest.raises(PluginError):
        isolated_registry(site, strict=True)


def test_duplicate_distributions_are_loaded_once(make_plugin, isolated_registry, tmp_path):
    site = make_plugin("good", GOOD)
    # an editable install can list the same distribution twice on the path
    registry = plugins.PluginRegistry(search_path=[str(site), str(site)], environ={})
    assert [p.name for p in registry.plugins] == ["good"]


def test_two_plugins_cannot_claim_one_target(make_plugin, isolated_registry):
    make_plugin("good", GOOD)
    site = make_plugin("clone", GOOD.replace("CALLS = []", "CALLS = [1]"),
                       distribution="edgebyoc-test-clone")
    registry = isolated_registry(site)
    # plugins load in name order: the first claim wins, the second is refused
    assert registry.info("clone").status is PluginStatus.ACTIVE
    assert registry.info("good").status is PluginStatus.FAILED
    assert "target 'goodchip' is already provided by clone" in registry.info("good").reason
    assert registry.owner("goodchip") == "clone"


def test_plugin_target_without_patterns_compiles_for_the_host(make_plugin, isolated_registry,
                                                              small_model_path):
    import sys

    registry = isolated_registry(make_plugin("good", GOOD, version="0.9"))
    compiled = edgebyoc.compile(small_model_path, target="goodchip", options={"l1_kb": "32"},
                                registry=registry)
    calls = sys.modules["edgebyoc_test_good"].CALLS
    assert calls == [("goodchip", "import"), ("goodchip", "pre_partition"),
                     ("goodchip", "post_partition")]
    assert compiled.manifest["target"] == {"name": "goodchip", "options": {"l1_kb": 32},
                                           "plugin": "good"}
    assert compiled.manifest["plugins"] == {"edgebyoc-test-good": "0.9"}
    assert compiled.report["summary"]["offloaded_operators"] == 0
    assert "no operator matched" in compiled.report["summary"]["note"]
    with pytest.raises(TargetError, match="has no option 'l3_kb'"):
        edgebyoc.compile(small_model_path, target="goodchip", options={"l3_kb": "1"},
                         registry=registry)


def test_hook_failure_names_the_plugin(make_plugin, isolated_registry, small_model_path):
    registry = isolated_registry(make_plugin("crash", PATTERNS_RAISE))
    with pytest.raises(PluginError, match="plugin 'crash' raised in edgebyoc_patterns for target "
                                          "'crashchip': KeyError"):
        edgebyoc.compile(small_model_path, target="crashchip", registry=registry)


def test_cli_lists_plugins(make_plugin, monkeypatch):
    make_plugin("good", GOOD)
    make_plugin("misspelt", MISSPELT)
    site = make_plugin("gpu", UNAVAILABLE)
    registry = plugins.PluginRegistry(search_path=[str(site)], environ={})
    monkeypatch.setattr(plugins, "_default", registry)
    result = CliRunner().invoke(cli.main, ["plugins", "--json"])
    assert result.exit_code == 0, result.output
    listing = json.loads(result.output)
    by_name = {p["name"]: p for p in listing["plugins"]}
    assert by_name["good"]["status"] == "active"
    assert by_name["good"]["targets"] == ["goodchip"]
    assert by_name["good"]["target_details"] == [{"name": "goodchip",
                                                  "description": "a test chip",
                                                  "modules": ["accel"], "options": [
        {"name": "l1_kb", "type": "int", "default": 64, "allowed": "any int",
         "help": "L1 size"}], "calibration": []}]
    assert by_name["misspelt"]["status"] == "failed"
    assert "did you mean edgebyoc_patterns" in by_name["misspelt"]["reason"]
    assert by_name["gpu"]["status"] == "unavailable"
    assert listing["targets"] == ["goodchip", "host"]
    table = CliRunner().invoke(cli.main, ["plugins"])
    assert table.exit_code == 0
    assert "goodchip" in table.output and "failed" in table.output


def test_core_tests_see_no_installed_plugin():
    registry = plugins.default_registry()
    assert all(p.status is PluginStatus.DISABLED for p in registry.plugins)
    assert registry.target_names() == ["host"]
    assert np.isfinite(1.0)


NOTED = """
from edgebyoc.api import Availability, Target, hookimpl

@hookimpl
def edgebyoc_targets():
    return [Target("gpuish", "a target with an optional runtime")]

@hookimpl
def edgebyoc_availability():
    return Availability(True, "the vendor runtime is missing: run falls back to another route")
"""


def test_an_available_plugin_can_carry_a_note(make_plugin, isolated_registry):
    registry = isolated_registry(make_plugin("noted", NOTED))
    info = registry.info("noted")
    assert info.status is PluginStatus.ACTIVE and "gpuish" in registry.target_names()
    assert info.reason == "the vendor runtime is missing: run falls back to another route"


EXITS_ON_IMPORT = """
import sys
sys.exit(0)
"""

EXITS_IN_HOOK = """
import sys
from edgebyoc.api import ExecModule, PatternEntry, Target, hookimpl
from tvm.relax.dpl import is_op, wildcard

@hookimpl
def edgebyoc_targets():
    return [Target("quitter", "exits in a hook", modules=(ExecModule("m"),))]

@hookimpl
def edgebyoc_patterns(target, module):
    sys.exit(3)
"""


def test_sys_exit_in_a_plugin_is_contained(make_plugin, isolated_registry, small_model_path):
    from edgebyoc.errors import PluginError
    from edgebyoc.pipeline import compile as compile_model

    make_plugin("good", GOOD)
    make_plugin("exiter", EXITS_ON_IMPORT)
    registry = isolated_registry(make_plugin("quitter", EXITS_IN_HOOK))
    assert registry.info("exiter").status is PluginStatus.FAILED
    assert registry.info("good").status is PluginStatus.ACTIVE
    with pytest.raises(PluginError, match="plugin 'quitter' raised in edgebyoc_patterns for "
                                          "target 'quitter': SystemExit"):
        compile_model(small_model_path, target="quitter", registry=registry)



def test_a_disabled_target_says_which_variable_disabled_it(make_plugin, isolated_registry):
    site = make_plugin("goodchip", GOOD)
    registry = isolated_registry(site, EDGEBYOC_LOAD_PLUGINS="other")
    with pytest.raises(TargetError, match="target 'goodchip': plugin 'goodchip' "
                                          r"\(edgebyoc-test-goodchip\) is installed but "
                                          "disabled by EDGEBYOC_LOAD_PLUGINS"):
        registry.target("goodchip")
