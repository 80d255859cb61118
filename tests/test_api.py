"""The public plugin API: one namespace, documented, its examples run, and the only part of the
core a plugin imports."""

import ast
import doctest
import importlib
import inspect
import re
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
    assert len(names) > 80
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

def _edgebyoc_imports(path: Path):
    tree = ast.parse(path.read_text(), str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module == "edgebyoc":
                for alias in node.names:
                    yield node.lineno, f"edgebyoc.{alias.name}"
            else:
                yield node.lineno, node.module


def test_nothing_under_plugins_imports_the_core_outside_the_api():
    offenders = []
    files = sorted(ROOT.glob("plugins/**/*.py"))
    assert len(files) >= 10
    for path in files:
        for line, name in _edgebyoc_imports(path):
            if re.match(r"edgebyoc(\.|$)", name) and not re.match(r"edgebyoc\.api(\.|$)", name):
                offenders.append(f"{path.relative_to(ROOT)}:{line} imports {name}")
    assert not offenders, "\n".join(offenders)


def test_the_import_contracts_hold():
    import subprocess
    import sys

    run = subprocess.run([sys.executable, str(ROOT / "scripts" / "lint_imports.py")],
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-2000:]
    assert "Contracts: 2 kept, 0 broken." in run.stdout
