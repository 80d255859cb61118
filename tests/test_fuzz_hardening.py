"""Seeded fuzzing of the classes of issue #26, at least 200 cases in CI.

Every case runs the command line in a child process (``isolated_cli``) and must end as one
``error:`` line with exit status 1, or as a result equal to onnxruntime's (values, element
types, number of outputs); never a crash, a traceback, a hang, exit status 0 on a model
onnxruntime refuses, or a changed byte of a user's file.

- ``operators``: single-operator ONNX models with one integer attribute or constant operand
  (an axis, a window, a stride, a dilation, a pad, an index, a split size, ...) set to a
  value drawn from the edges of its range;
- ``output paths``: compile and run outputs named like, onto or beside the user's files and
  folders (look-alikes of edgebyoc's old work-folder names among them);
- ``manifests``: an artifact's manifest and report rewritten field by field, with every hash
  and the digest recomputed (a forger's artifact, not a corrupted one);
- ``sweep specs``: each key of a sweep spec set to values of every TOML type.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto as T
from onnx import helper, numpy_helper, shape_inference

from isolated_cli import Outcome, run_cli

pytestmark = pytest.mark.slow

#: integer values at the edges of attribute and operand ranges
EDGES = [0, -1, -2, -7, 1, 2, 3, 5, 9, 100, 4096, 2**31 - 1, -(2**31), 10**12]


def _op(name, op, inputs, attrs=None, constants=None, opset=17, outputs=1):
    return {"name": name, "op": op, "inputs": inputs, "attrs": attrs or {},
            "constants": constants or {}, "opset": opset, "outputs": outputs}


F = T.FLOAT
TEMPLATES = [
    _op("conv", "Conv", [("x", F, [1, 2, 8, 8])],
        {"kernel_shape": [3, 3], "strides": [1, 1], "dilations": [1, 1], "pads": [1, 1, 1, 1],
         "group": 1}, {"w": np.ones((4, 2, 3, 3), np.float32)}),
    _op("convT", "ConvTranspose", [("x", F, [1, 2, 4, 4])],
        {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [0, 0, 0, 0], "group": 1},
        {"w": np.ones((2, 3, 3, 3), np.float32)}),
    _op("maxpool", "MaxPool", [("x", F, [1, 2, 8, 8])],
        {"kernel_shape": [2, 2], "strides": [2, 2], "pads": [0, 0, 0, 0], "dilations": [1, 1]}),
    _op("avgpool", "AveragePool", [("x", F, [1, 2, 8, 8])],
        {"kernel_shape": [3, 3], "strides": [1, 1], "pads": [1, 1, 1, 1]}),
    _op("pad", "Pad", [("x", F, [2, 5])], {}, {"pads": np.array([1, 0, 0, 2])}),
    _op("split", "Split", [("x", F, [6, 2])], {"axis": 0}, {"split": np.array([2, 4])},
        outputs=2),
    _op("gather", "Gather", [("x", F, [5, 3])], {"axis": 0}, {"i": np.array([[0, 4]])}),
    _op("gather_el", "GatherElements", [("x", F, [4, 3])], {"axis": 1},
        {"i": np.array([[0, 1, 2], [2, 1, 0], [1, 1, 1], [0, 0, 2]])}),
    _op("gather_nd", "GatherND", [("x", F, [4, 3])], {"batch_dims": 0},
        {"i": np.array([[1, 2], [3, 0]])}),
    _op("scatter_nd", "ScatterND", [("x", F, [4, 3]), ("u", F, [1, 3])], {},
        {"i": np.array([[1]])}),
    _op("scatter_el", "ScatterElements", [("x", F, [4, 3]), ("u", F, [1, 3])], {"axis": 0},
        {"i": np.array([[0, 1, 2]])}),
    _op("slice", "Slice", [("x", F, [6, 4])], {},
        {"starts": np.array([1]), "ends": np.array([5]), "axes": np.array([0]),
         "steps": np.array([1])}),
    _op("transpose", "Transpose", [("x", F, [2, 3, 4])], {"perm": [2, 0, 1]}),
    _op("concat", "Concat", [("x", F, [2, 3]), ("y", F, [2, 3])], {"axis": 0}),
    _op("softmax", "Softmax", [("x", F, [2, 5])], {"axis": -1}),
    _op("d2s", "DepthToSpace", [("x", F, [1, 8, 2, 2])], {"blocksize": 2}),
    _op("s2d", "SpaceToDepth", [("x", F, [1, 2, 4, 4])], {"blocksize": 2}),
    _op("topk", "TopK", [("x", F, [3, 6])], {"axis": 1}, {"k": np.array([2])}, outputs=2),
    _op("onehot", "OneHot", [("i", T.INT64, [4])], {"axis": -1},
        {"depth": np.array(5), "values": np.array([0.0, 1.0], np.float32)}),
    _op("tile", "Tile", [("x", F, [2, 3])], {}, {"repeats": np.array([2, 1])}),
    _op("expand", "Expand", [("x", F, [1, 3])], {}, {"shape": np.array([4, 3])}),
    _op("reshape", "Reshape", [("x", F, [2, 6])], {}, {"shape": np.array([3, 4])}),
    _op("flatten", "Flatten", [("x", F, [2, 3, 4])], {"axis": 1}),
    _op("reducesum", "ReduceSum", [("x", F, [3, 4])], {"keepdims": 1},
        {"axes": np.array([1])}),
    _op("argmax", "ArgMax", [("x", F, [3, 4])], {"axis": 1, "keepdims": 1}),
    _op("cumsum", "CumSum", [("x", F, [3, 4])], {}, {"axis": np.array(1)}),
    _op("lrn", "LRN", [("x", F, [1, 4, 5, 5])], {"size": 3}),
    _op("unsqueeze", "Unsqueeze", [("x", F, [3, 4])], {}, {"axes": np.array([0])}),
    _op("squeeze", "Squeeze", [("x", F, [1, 3, 1])], {}, {"axes": np.array([0])}),
]
_OPERAND_ORDER = {"Conv": ["x", "w"], "ConvTranspose": ["x", "w"],
                  "Pad": ["x", "pads"], "Split": ["x", "split"], "Gather": ["x", "i"],
                  "GatherElements": ["x", "i"], "GatherND": ["x", "i"],
                  "ScatterND": ["x", "i", "u"], "ScatterElements": ["x", "i", "u"],
                  "Slice": ["x", "starts", "ends", "axes", "steps"], "TopK": ["x", "k"],
                  "OneHot": ["i", "depth", "values"], "Tile": ["x", "repeats"],
                  "Expand": ["x", "shape"], "Reshape": ["x", "shape"],
                  "ReduceSum": ["x", "axes"], "CumSum": ["x", "axis"],
                  "Unsqueeze": ["x", "axes"], "Squeeze": ["x", "axes"],
                  "Concat": ["x", "y"]}


def _build(template, attrs, constants):
    operands = _OPERAND_ORDER.get(template["op"], [i[0] for i in template["inputs"]])
    names = [f"out{k}" for k in range(template["outputs"])]
    node = helper.make_node(template["op"], operands, names, name=template["name"], **attrs)
    inputs = [helper.make_tensor_value_info(n, t, s) for n, t, s in template["inputs"]]
    initializers = [numpy_helper.from_array(np.asarray(v), k) for k, v in constants.items()]
    base = helper.make_model(
        helper.make_graph([node], template["name"], inputs,
                          [helper.make_tensor_value_info(n, T.UNDEFINED, None) for n in names],
                          initializers), opset_imports=[helper.make_opsetid("", template["opset"])])
    base.ir_version = 8
    return base


def _declare_outputs(proto, template):
    """Output types from inference on the unmutated template (shapes left symbolic)."""
    inferred = shape_inference.infer_shapes(_build(template, template["attrs"],
                                                   template["constants"]))
    del proto.graph.output[:]
    for output in inferred.graph.output:
        rank = len(output.type.tensor_type.shape.dim)
        proto.graph.output.append(helper.make_tensor_value_info(
            output.name, output.type.tensor_type.elem_type, [f"d{i}" for i in range(rank)]))
    return proto


def _mutated(template, rng):
    attrs = {k: (list(v) if isinstance(v, list) else v) for k, v in template["attrs"].items()}
    constants = {k: np.array(v, copy=True) for k, v in template["constants"].items()}
    integer_constants = [k for k, v in constants.items() if v.dtype.kind in "iu"]
    choices = [("attr", k) for k in attrs] + [("constant", k) for k in integer_constants]
    kind, key = choices[int(rng.integers(len(choices)))]
    edge = int(EDGES[int(rng.integers(len(EDGES)))])
    if kind == "attr":
        if isinstance(attrs[key], list):
            attrs[key][int(rng.integers(len(attrs[key])))] = edge
        else:
            attrs[key] = edge
    else:
        flat = constants[key].reshape(-1)
        if flat.size:
            flat[int(rng.integers(flat.size))] = edge
    return _declare_outputs(_build(template, attrs, constants), template), f"{key}={edge}"


def _feeds(proto, rng):
    feeds = {}
    for value in proto.graph.input:
        shape = [d.dim_value for d in value.type.tensor_type.shape.dim]
        if value.type.tensor_type.elem_type == T.INT64:
            feeds[value.name] = rng.integers(-6, 6, shape).astype(np.int64)
        else:
            feeds[value.name] = rng.standard_normal(shape).astype(np.float32)
    return feeds


def _onnxruntime(proto, feeds):
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.log_severity_level = 4
    options.intra_op_num_threads = 1
    try:
        session = ort.InferenceSession(proto.SerializeToString(), options,
                                       providers=["CPUExecutionProvider"])
        return session.run(None, feeds)
    except Exception:  # noqa: BLE001 - onnxruntime refuses the model or these inputs
        return None


def _problem(outcome: Outcome) -> str | None:
    """What is wrong with how a command ended, whatever it was asked."""
    if outcome.code is None:
        return "hung"
    if outcome.code not in (0, 1):
        return f"crashed (exit {outcome.code})"
    if "Traceback" in outcome.stderr or "Traceback" in outcome.stdout:
        return "printed a traceback"
    if outcome.code == 1 and not outcome.one_line_error:
        return "failed without a single error line"
    return None


def test_operator_mutations(tmp_path):
    from edgebyoc.verify import compare_output

    rng = np.random.default_rng(26)
    failures, counts = [], {"refused": 0, "equal": 0}
    for case in range(4 * len(TEMPLATES)):
        template = TEMPLATES[case % len(TEMPLATES)]
        proto, change = _mutated(template, rng)
        where = f"{template['name']} {change}"
        folder = tmp_path / f"op{case}"
        folder.mkdir()
        onnx.save(proto, folder / "m.onnx")
        feeds = _feeds(proto, rng)
        np.savez(folder / "in.npz", **feeds)
        reference = _onnxruntime(proto, feeds)
        built = run_cli("compile", folder / "m.onnx", "-o", folder / "a", "-q", "--no-dfs")
        outcome = built if built.code != 0 else run_cli(
            "run", folder / "a", "-i", folder / "in.npz", "-o", folder / "out.npz")
        problem = _problem(outcome)
        if problem:
            failures.append(f"{where}: {problem}: {outcome.describe()}")
            continue
        if outcome.code == 1:
            counts["refused"] += 1
            continue
        if reference is None:
            failures.append(f"{where}: exit 0 on a model onnxruntime refuses")
            continue
        with np.load(folder / "out.npz") as saved:
            ours = [saved[k] for k in saved.files]
        if len(ours) != len(reference):
            failures.append(f"{where}: {len(ours)} outputs, onnxruntime {len(reference)}")
            continue
        wrong = [c for c in (compare_output(f"out{k}", o, r, 1e-4)
                             for k, (o, r) in enumerate(zip(ours, reference))) if not c.passed]
        if wrong:
            failures.append(f"{where}: {wrong[0].name}: {wrong[0].reason}")
        else:
            counts["equal"] += 1
    assert not failures, f"{len(failures)} of {4 * len(TEMPLATES)}:\n" + "\n".join(failures)
    assert counts["refused"] and counts["equal"], counts  # both ends were reached


LOOKALIKES = [".{n}.cache/f", ".{n}.d/x", ".{n}.old/file", ".{n}.lock", ".{n}.tmp",
              "{n}.v2", ".{n}/z", ".edgebyoc-new-{n}/w", ".edgebyoc-old-x/{n}"]
NAMES = ["out", "*", "[ab]", ".out", "out.v2", "a b", "n" * 200, "ünï", "sub/out", "-dash"]


def _tiny_model(folder: Path) -> Path:
    path = folder / "relu.onnx"
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "relu",
                              [helper.make_tensor_value_info("x", F, [2, 3])],
                              [helper.make_tensor_value_info("y", F, [2, 3])])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


def _snapshot(folder: Path) -> dict[Path, bytes]:
    return {p: p.read_bytes() for p in folder.rglob("*") if p.is_file() and not p.is_symlink()}


def test_output_path_faults_never_touch_user_files(tmp_path):
    rng = np.random.default_rng(261)
    model = _tiny_model(tmp_path)
    artifact = tmp_path / "built"
    assert run_cli("compile", model, "-o", artifact, "-q").code == 0
    failures = []
    for case in range(45):
        folder = tmp_path / f"p{case}"
        folder.mkdir()
        name = NAMES[int(rng.integers(len(NAMES)))]
        for pattern in LOOKALIKES:
            path = folder / pattern.format(n=name.replace("/", "_"))
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(os.urandom(16))
        action = ["compile", "compile onto a file", "compile onto a folder",
                  "compile onto a link", "run output", "memory plot"][case % 6]
        target = folder / name
        if action == "compile onto a file":
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(b"the user's file")
        elif action == "compile onto a folder":
            (target / "inner").mkdir(parents=True)
            (target / "inner" / "keep").write_bytes(b"keep")
        elif action == "compile onto a link":
            (folder / "elsewhere").mkdir()
            (folder / "elsewhere" / "keep").write_bytes(b"keep")
            target.parent.mkdir(parents=True, exist_ok=True)
            target.symlink_to(folder / "elsewhere")
        before = _snapshot(folder)
        if action.startswith("compile"):
            outcome = run_cli("compile", model, "-o", target, "-q")
        elif action == "run output":
            suffix = [".npy", ".npz", ".txt", "", "/x.npy"][int(rng.integers(5))]
            inside = int(rng.integers(4)) == 0
            destination = artifact / "y.npy" if inside else Path(f"{target}{suffix}")
            outcome = run_cli("run", artifact, "--random", "-o", destination)
        else:
            suffix = [".png", ".svg", ".xyz", "/m.png"][int(rng.integers(4))]
            outcome = run_cli("compile", model, "-o", folder / "plotted", "-q",
                              "--memory-plot", f"{target}{suffix}")
        problem = _problem(outcome)
        if problem:
            failures.append(f"{action} {name!r}: {problem}: {outcome.describe()}")
        for path, content in before.items():
            if not path.is_file() or path.read_bytes() != content:
                failures.append(f"{action} {name!r}: the user's {path.relative_to(folder)} "
                                f"was changed or removed")
        if action == "compile" and outcome.code == 0 and \
                run_cli("run", target, "--random").code != 0:
            failures.append(f"{action} {name!r}: the artifact written does not run")
        if action.startswith("compile onto") and outcome.code == 0:
            failures.append(f"{action} {name!r}: exit 0, replacing what is not an artifact")
    assert not failures, "\n".join(failures)


def _rewrite(artifact: Path, change) -> None:
    """Apply ``change(manifest, report)`` and recompute every hash and the digest, as a
    forger would."""
    from edgebyoc.runtime.artifact import artifact_digest

    manifest = json.loads((artifact / "manifest.json").read_text())
    report = json.loads((artifact / "report.json").read_text())
    content = change(manifest, report)
    if content is None:
        content = json.dumps(report)
    content = content if isinstance(content, bytes) else content.encode()
    (artifact / "report.json").write_bytes(content)
    manifest["files"]["report.json"] = hashlib.sha256(content).hexdigest()
    manifest["digest"] = artifact_digest(manifest)
    (artifact / "manifest.json").write_text(json.dumps(manifest))


def _set(path: list, value):
    def change(manifest, report):
        node = manifest
        for key in path[:-1]:
            node = node[key]
        node[path[-1]] = value
    return change


MANIFEST_REWRITES = [
    *[_set(["inputs", 0, "dtype"], v) for v in ("object", "float128", "int4", "", 5, None,
                                                 "float16", "int8")],
    *[_set(["inputs", 0, "shape"], v) for v in ([2**40], [-1, 3], [], "x", [1.5, 3], [0, 3],
                                                 [3, 2], [2, 3, 1], [2**31, 2**31])],
    *[_set(["outputs", 0, "dtype"], v) for v in ("object", "int64", "bool")],
    *[_set(["outputs", 0, "shape"], v) for v in ([2**40], [-2, 3], [7, 7])],
    _set(["outputs"], []),
    lambda m, r: m["outputs"].append(dict(m["outputs"][0], name="extra")),
    lambda m, r: m["outputs"].append(dict(m["outputs"][0])),
    _set(["inputs"], []),
    *[_set(["inputs", 0, "index_bound"], v) for v in (-1, 10**30, "3", 1)],
    _set(["inputs", 0, "index_extents"], [1, 2]),
    _set(["target", "name"], 5),
    _set(["target", "options"], "none"),
    _set(["host", "cpu"], 123),
    _set(["external"], [{"file": "host.so"}]),
    _set(["c_project"], "yes"),
    _set(["c_source_regions"], {"a": 1}),
    lambda m, r: "[" * 100_000 + "]" * 100_000,
    lambda m, r: "[" * 500 + "]" * 500,
    lambda m, r: json.dumps({"model": 1}),
    lambda m, r: r.update(summary={"peak_activation_bytes": 10**18, "constant_bytes": 0}),
    lambda m, r: r.update(summary={"peak_activation_bytes": "lots"}),
    lambda m, r: b"\xff\xfe not text",
]


def test_manifest_rewrites_with_valid_digests(tmp_path):
    model = _tiny_model(tmp_path)
    artifact = tmp_path / "built"
    assert run_cli("compile", model, "-o", artifact, "-q").code == 0
    assert run_cli("run", artifact, "--random", "-o", tmp_path / "ref.npy").code == 0
    reference = np.load(tmp_path / "ref.npy")
    failures = []
    for case, change in enumerate(MANIFEST_REWRITES):
        forged = tmp_path / f"f{case}"
        shutil.copytree(artifact, forged)
        _rewrite(forged, change)
        outcome = run_cli("run", forged, "--random", "-o", tmp_path / f"y{case}.npy")
        problem = _problem(outcome)
        if problem:
            failures.append(f"rewrite {case}: {problem}: {outcome.describe()}")
        elif outcome.code == 0:
            ours = np.load(tmp_path / f"y{case}.npy")
            if ours.dtype != reference.dtype or not np.array_equal(ours, reference):
                failures.append(f"rewrite {case}: exit 0 with another result")
    assert len(MANIFEST_REWRITES) >= 40
    assert not failures, "\n".join(failures)


SPEC_VALUES = ["nan", "inf", "-inf", "-1", "0", "1e308", '"x"', "true", "1979-05-27",
               "{a = 1}", "[[1]]", "[]", '""', "100000000000000000000", '"日本"', "3",
               "[1, 2]", "0.5"]
SPEC_KEYS = ["point_timeout", "seed", "max_points", "action", "models", "targets.host.l1_kb",
             "compile.max_recompute", "compile.dfs", "compile.memory_budget",
             "compile.io_in_arena", "compile.cost_metric", "unknown"]


def test_sweep_spec_values_are_checked_up_front(tmp_path):
    rng = np.random.default_rng(262)
    model = _tiny_model(tmp_path)
    failures, ran = [], 0
    for case in range(36):
        key = SPEC_KEYS[case % len(SPEC_KEYS)]
        value = SPEC_VALUES[int(rng.integers(len(SPEC_VALUES)))]
        top = {"models": f'["{model}"]', "action": '"compile"'}
        tables = {"targets.host": {}, "compile": {}}
        if "." in key:
            table, name = key.rsplit(".", 1)
            tables[table][name] = value
        else:
            top[key] = value
        text = "".join(f"{k} = {v}\n" for k, v in top.items()) + "".join(
            f"[{t}]\n" + "".join(f"{k} = {v}\n" for k, v in entries.items())
            for t, entries in tables.items())
        spec = tmp_path / f"s{case}.toml"
        spec.write_text(text, encoding="utf-8")
        outcome = run_cli("sweep", spec, "-o", tmp_path / f"o{case}", "-q", "-j", "1",
                          timeout=300)
        problem = _problem(outcome)
        if problem:
            failures.append(f"{key} = {value}: {problem}: {outcome.describe()}")
        ran += outcome.code == 0
    binary = tmp_path / "binary.toml"
    binary.write_bytes(b"models = ['\xff\xfe']\n")
    outcome = run_cli("sweep", binary, "-o", tmp_path / "ob", "-q")
    if not outcome.one_line_error:
        failures.append(f"a spec that is not UTF-8: {outcome.describe()}")
    assert not failures, "\n".join(failures)
    assert ran, "every generated spec was refused: the valid end was never reached"


def test_the_fuzzing_covers_at_least_200_cases():
    total = 4 * len(TEMPLATES) + 45 + len(MANIFEST_REWRITES) + 36 + 1
    assert total >= 200, total
