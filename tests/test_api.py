"""The public plugin API: one namespace, documented, its examples run, and the only part of the
core a plugin imports."""

import doctest
import importlib
import inspect
import types
from pathlib import Path

import numpy as np
import pluggy
import pytest
from tvm import relax
from tvm.relax import dpl

from edgebyoc import hookspecs
from edgebyoc.plugins import HOOK_NAMES

ROOT = Path(__file__).resolve().parents[1]
API_MODULES = ["edgebyoc.api", "edgebyoc.api.regions", "edgebyoc.api.match",
               "edgebyoc.api.quant", "edgebyoc.api.testing", "edgebyoc.api.transforms"]


def public_objects():
    for name in API_MODULES:
        module = importlib.import_module(name)
        for attr in module.__all__:
            yield name, attr, getattr(module, attr)


def test_every_public_name_exists_and_is_documented():
    names = list(public_objects())
    assert len(names) >= 50
    for module, attr, obj in names:
        if callable(obj) and not isinstance(obj, (pluggy.HookimplMarker,)):
            assert inspect.getdoc(obj), f"{module}.{attr} has no docstring"


def _doctest_modules():
    """The API modules and every core module defining a public name."""
    found = {importlib.import_module(name) for name in API_MODULES}
    for _, _, obj in public_objects():
        module = inspect.getmodule(obj)
        if module is not None and module.__name__.startswith("edgebyoc."):
            found.add(module)
    return sorted(found, key=lambda m: m.__name__)


@pytest.mark.parametrize("module", _doctest_modules(), ids=lambda m: m.__name__)
def test_the_examples_of_the_api_run(module):
    finder = doctest.DocTestFinder(exclude_empty=True)
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    for test in finder.find(module, module.__name__, globs=vars(module).copy()):
        runner.run(test)
    assert runner.failures == 0, f"{runner.failures} example(s) of {module.__name__} failed"


def test_the_api_examples_are_many():
    finder = doctest.DocTestFinder(exclude_empty=True)
    examples = sum(len(t.examples) for m in _doctest_modules()
                   for t in finder.find(m, m.__name__))
    assert examples >= 30


# -- the hook contract's examples ---------------------------------------------------------------

def _example(hook: str) -> str:
    doc = inspect.getdoc(getattr(hookspecs, hook))
    block = doc[doc.index("::", doc.index("Example")) + 2:]
    return inspect.cleandoc("\n".join(line for line in block.splitlines()))


def _namespace():
    import edgebyoc.api as api
    import edgebyoc.api.regions as regions

    names = {n: getattr(api, n) for n in api.__all__}
    names.update({n: getattr(regions, n) for n in regions.__all__})
    names.update({n: getattr(dpl, n) for n in ("is_op", "is_const", "wildcard")})
    return names


def _sample_region():
    from edgebyoc.api import Region

    x = relax.Var("x", relax.TensorType((1, 4), "float32"))
    builder = relax.BlockBuilder()
    with builder.function("f", [x]):
        out = builder.emit(relax.op.nn.relu(x))
        builder.emit_func_output(out)
    return Region("mychip_accel_r0", "accel", builder.get()["f"], ())


@pytest.mark.parametrize("hook", HOOK_NAMES)
def test_every_hook_example_runs_and_keeps_the_contract(hook):
    from edgebyoc.api import (ApiBinding, Availability, CodegenContext, CodegenOutput, Cost,
                              ExecModule, PatternEntry, RuntimeLoader, Target)
    from edgebyoc.testing.conformance import SAMPLE_WORKLOAD

    namespace = _namespace()
    exec(compile(_example(hook), f"<{hook} example>", "exec"), namespace)  # noqa: S102
    function = namespace[hook]
    manager = pluggy.PluginManager(hookspecs.PROJECT_NAME)
    manager.add_hookspecs(hookspecs)
    manager.register(types.SimpleNamespace(**{hook: function}))  # signature checked
    target = Target("mychip", modules=(ExecModule("accel"),))
    module = target.modules[0]
    x = relax.Var("x", relax.TensorType((1, 8, 8, 8), "float32"))
    w = relax.Var("w", relax.TensorType((8, 8, 3, 3), "float32"))
    calls = {
        "edgebyoc_targets": lambda f: f(),
        "edgebyoc_availability": lambda f: f(),
        "edgebyoc_patterns": lambda f: f(target, module),
        "edgebyoc_annotate": lambda f: f(target, module, relax.op.nn.conv2d(x, w)),
        "edgebyoc_cost": lambda f: f(target, module, SAMPLE_WORKLOAD, None),
        "edgebyoc_host_cost": lambda f: f(target, SAMPLE_WORKLOAD),
        "edgebyoc_transforms": lambda f: f(target, "pre_partition"),
        "edgebyoc_codegen": lambda f: f(target, module, _sample_region(), None,
                                        CodegenContext()),
        "edgebyoc_runtime_apis": lambda f: f(target, module, "host"),
        "edgebyoc_project_files": lambda f: f(target, {}, ["network.c"]),
        "edgebyoc_runtime_loaders": lambda f: f(),
    }
    answer = calls[hook](function)
    expected = {"edgebyoc_targets": Target, "edgebyoc_patterns": PatternEntry,
                "edgebyoc_runtime_loaders": RuntimeLoader}
    if hook in expected:
        assert answer and all(isinstance(a, expected[hook]) for a in answer)
    elif hook == "edgebyoc_availability":
        assert isinstance(answer, Availability)
    elif hook == "edgebyoc_annotate":
        assert answer is True
    elif hook == "edgebyoc_cost":
        assert isinstance(answer, Cost) and answer.latency_cycles == SAMPLE_WORKLOAD.macs / 64
    elif hook == "edgebyoc_host_cost":
        elements = int(np.prod(SAMPLE_WORKLOAD.output[0]))
        assert isinstance(answer, Cost) and \
            answer.latency_cycles == 7 * SAMPLE_WORKLOAD.macs + 4 * elements
    elif hook == "edgebyoc_transforms":
        assert len(answer) == 1 and callable(answer[0])
    elif hook == "edgebyoc_codegen":
        assert isinstance(answer, CodegenOutput) and "__tvm_ffi_mychip_accel_r0" in \
            answer.c_source
        loader = answer.c_source.count("mychip_accel_r0_run")
        assert loader >= 2
    elif hook == "edgebyoc_runtime_apis":
        assert isinstance(answer, ApiBinding) and answer.flavour == "host"
    elif hook == "edgebyoc_project_files":
        assert answer == {"CMakeLists.txt": "add_executable(network network.c)\n"}
    for loader in (answer if hook == "edgebyoc_runtime_loaders" else []):
        assert loader.load("{}", {})(np.ones(2))[0].shape == (2,)


def test_hooks_are_annotated():
    for name in HOOK_NAMES:
        signature = inspect.signature(getattr(hookspecs, name))
        assert signature.return_annotation is not inspect.Signature.empty, name
        for parameter in signature.parameters.values():
            assert parameter.annotation is not inspect.Parameter.empty, (name, parameter.name)


# -- the boundary ---------------------------------------------------------------------------------

def test_the_import_contracts_hold():
    import subprocess
    import sys

    run = subprocess.run([sys.executable, str(ROOT / "scripts" / "lint_imports.py")],
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-2000:]
    plugins = len(list((ROOT / "plugins").glob("*/pyproject.toml")))  # one package each
    assert f"Plugin imports: {plugins} plugin packages may import only edgebyoc.api: 0 " \
        "broken." in run.stdout
    assert "Plugin tests: the same allow-list: 0 broken." in run.stdout
    assert "Contracts: 1 kept, 0 broken." in run.stdout


def test_the_plugin_allow_list_catches_every_way_past_the_api(tmp_path):
    """One rule, an allow-list: an out-of-tree plugin importing the root package, a core
    module or a name from the root is refused line by line; ``edgebyoc.api`` and its
    submodules pass. The plugin's tests beside it are held to the same list."""
    import subprocess
    import sys

    package = tmp_path / "edgebyoc_outside"
    package.mkdir()
    (package / "__init__.py").write_text(
        "from edgebyoc.api import Target\nfrom edgebyoc.api.match import search\n"
        "from edgebyoc import compile\nimport edgebyoc.session\n"
        "from edgebyoc.target import Cost\n")
    tests = tmp_path / "tests"
    tests.mkdir()
    (tests / "test_outside.py").write_text(
        "from edgebyoc.api.testing import compile\nfrom edgebyoc.calibration_fit import "
        "calibrate\n\nimport edgebyoc.api, edgebyoc.plugins\n")
    run = subprocess.run([sys.executable, str(ROOT / "scripts" / "lint_imports.py"),
                          str(package)], capture_output=True, text=True, timeout=300)
    assert run.returncode == 1, run.stdout
    broken = [line.strip() for line in run.stdout.splitlines() if "edgebyoc_outside:" in line]
    assert broken == ["edgebyoc_outside:3 imports edgebyoc",
                      "edgebyoc_outside:4 imports edgebyoc.session",
                      "edgebyoc_outside:5 imports edgebyoc.target"], run.stdout
    assert "Plugin tests: the same allow-list: 2 broken." in run.stdout
    assert f"{tmp_path.name}/tests/test_outside.py:2 imports edgebyoc.calibration_fit" in run.stdout
    assert f"{tmp_path.name}/tests/test_outside.py:4 imports edgebyoc.plugins" in run.stdout


# -- what the API lists, and what 2.3 plugins still import ----------------------------------------

#: Every name the plugin API exported in 2.3 (before 2.4 trimmed it): a plugin written against
#: 2.3 imports any of these, and must keep loading through 2.x.
API_2_3 = {
    "edgebyoc.api": [
        "API_VERSION", "ApiBinding", "Availability", "CodegenContext", "CodegenOutput",
        "CompileError", "Composite", "Cost", "EdgebyocError", "ExecModule", "FrozenMap",
        "MemoryLevel", "OutputKind", "PatternEntry", "PluginError", "QuantizationSpec", "Region",
        "RowWindow", "RuntimeLoader", "Target", "TargetError", "TargetOption", "Workload",
        "api_major", "hookimpl"],
    "edgebyoc.api.match": [
        "CORE_LAYER_KINDS", "GENERIC_APIS", "HOST_HEADER", "IntegerLayer", "LayerKind",
        "LoopNest", "RELEVANT", "Schedule", "SearchResult", "TILED_DIMS", "api_header",
        "api_names", "core_file", "exhaustive", "expand_includes", "extract", "host_binding",
        "integer_layer", "layer_codegen", "layer_fields", "layer_files", "module_weights",
        "render_layer", "schedule_cost", "search", "spatial_unrolling", "translation_unit",
        "weight_channel_stride"],
    "edgebyoc.api.quant": [
        "ADD_LEFT_SHIFT", "Integerize", "NHWC_LAYOUTS", "QADD", "REQUANTIZE", "Rounding",
        "add_parameters", "add_pattern", "avg_pool_check", "avg_pool_pattern", "channels_last",
        "conv2d_geometry", "conv2d_pattern", "dense_pattern", "int8_import_passes", "int8_input",
        "integerize", "matched_call", "multiply_by_quantized_multiplier", "quantize_multiplier",
        "quantize_multipliers", "quantized_add", "require_integer", "requantize", "requantized"],
    "edgebyoc.api.regions": [
        "Argument", "ArgumentLayout", "GRAPH_SCHEMA", "argument_layout", "attrs_dict",
        "check_graph", "compile_options", "include_dirs", "nbytes", "operator_macs",
        "packed_entry_wrapper", "packed_wrapper", "region_graph", "region_json", "shape_dtype",
        "static_shape"],
    "edgebyoc.api.testing": [
        "GraphBuilder", "WorkloadOutcome", "check_installed_plugin", "check_plugin",
        "check_workloads", "compile", "region_check", "region_host_outputs",
        "conformance_workloads", "import_model", "int8_convnet", "load", "mobilenet_v2",
        "plugin_problems", "random_inputs", "resnet18", "resnet50", "run_cli", "small_convnet",
        "verify"],
    "edgebyoc.api.transforms": ["scalar_min_max"],
}


def _imported_api_names(paths) -> set[tuple[str, str]]:
    """(module, name) of every ``from edgebyoc.api... import name`` in ``paths``."""
    found = set()
    for path in paths:
        text = path.read_text(errors="ignore")
        for module, names in __import__("re").findall(
                r"from (edgebyoc\.api(?:\.[a-z]+)?) import (\([^)]*\)|[^\n]*)", text):
            for name in __import__("re").split(r"[\s,()]+", names):
                if name.isidentifier() and name != "as":
                    found.add((module, name))
    return found


def test_the_api_lists_only_what_plugins_use():
    """Each public name is imported or named in full by an in-tree plugin, the docs' tutorial
    or guide, or the new-plugin scaffold, or is a type the hooks and the data model pass to a
    plugin (named in hookspecs or edgebyoc.target)."""
    users = [p for p in (ROOT / "plugins").rglob("*") if p.suffix in (".py", ".md")] + \
        list((ROOT / "docs").glob("*.md")) + list((ROOT / "templates" / "scaffold").glob("*"))
    imported = _imported_api_names(users)
    texts = "\n".join(p.read_text(errors="ignore") for p in users)
    hook_text = inspect.getsource(hookspecs) + inspect.getsource(
        importlib.import_module("edgebyoc.target"))
    unused = [f"{module}.{name}" for module, name, _ in public_objects()
              if (module, name) not in imported and f"{module}.{name}" not in texts + hook_text
              and not (module == "edgebyoc.api" and f"``{name}``" in hook_text)]
    assert not unused, f"exported but used by no plugin, doc or hook: {unused}"
    assert 50 <= len(list(public_objects())) <= 80


@pytest.mark.parametrize("module", sorted(API_2_3))
def test_every_2_3_name_still_imports(module):
    """A plugin written against API 2.3 keeps importing what it imported: listed names as
    before, trimmed ones with a DeprecationWarning that says where they went."""
    import warnings

    mod = importlib.import_module(module)
    for name in API_2_3[module]:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            value = getattr(mod, name)
        assert value is not None
        if name in mod.__all__:
            assert not caught, f"{module}.{name} warns"
        else:
            assert [w.category for w in caught] == [DeprecationWarning], f"{module}.{name}"
            assert "not part of the plugin API since 2.4" in str(caught[0].message)
            assert "until 3.0" in str(caught[0].message)
    with pytest.raises(AttributeError, match="has no attribute 'NOT_A_NAME'"):
        getattr(mod, "NOT_A_NAME")
