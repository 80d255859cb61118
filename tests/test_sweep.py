"""``edgebyoc sweep``: the spec, points in processes of their own, errors and timeouts as rows,
the per-point cache, the local pool against a local Ray cluster, the CLI."""

import csv
import json
import os
from pathlib import Path

import onnx
import pytest

from edgebyoc import plugins
from edgebyoc.sweep import TIMING_COLUMNS, SweepSpec, SweepSpecError, load_spec, run_sweep
from edgebyoc.sweep.execute import needs_run
from edgebyoc.testing.models import small_convnet

PLUGIN_DIR = Path(__file__).resolve().parent / "byoc_plugins"


@pytest.fixture
def sweepchip(make_plugin, monkeypatch):
    """The test plugin ``sweepchip`` installed for this process and the sweep's children."""
    monkeypatch.syspath_prepend(str(PLUGIN_DIR))
    site = make_plugin("sweepchip", module="sweepchip", distribution="edgebyoc-test-sweepchip")
    monkeypatch.setenv(plugins.ENV_LOAD, "sweepchip")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(site), str(PLUGIN_DIR)]))
    plugins.reset_default_registry()
    return site


@pytest.fixture
def models(tmp_path):
    folder = tmp_path / "models"
    folder.mkdir()
    onnx.save(small_convnet(16), folder / "convnet.onnx")
    (folder / "corrupt.onnx").write_bytes(b"\x08\x07this is not a protobuf" * 3)
    return folder


def write_spec(folder: Path, text: str, name: str = "spec.toml") -> Path:
    path = folder / name
    path.write_text(text)
    return path


GRID = """
models = ["models/convnet.onnx", "models/corrupt.onnx"]
action = "verify"
point_timeout = 120

[targets.sweepchip]
lanes = [1, 4, 16]
"""


def rows_without_timing(result):
    return [{k: v for k, v in row.items() if k not in TIMING_COLUMNS} for row in result.rows]


@pytest.mark.slow
def test_errors_are_rows_and_a_second_run_computes_nothing(sweepchip, models, tmp_path):
    spec = load_spec(write_spec(tmp_path, GRID))
    first = run_sweep(spec, tmp_path / "out", jobs=2, progress=False)
    assert first.computed == 6 and len(first.rows) == 6
    good = [row for row in first.rows if row["model"] == "convnet.onnx"]
    bad = [row for row in first.rows if row["model"] == "corrupt.onnx"]
    assert [row["option.lanes"] for row in good] == [1, 4, 16]
    for row in good:
        assert row["status"] == "ok" and row["verify_passed"] is True, row
        assert row["mac_offload_ratio"] > 0.99 and row["predicted_cycles"] > 0  # the convs
        assert row["predicted_latency_ms"] == pytest.approx(row["predicted_cycles"] / 1e5)
    # the cost model: macs / lanes + 100 per region, so MACs/cycle grows with the lanes
    rates = [row["macs_per_cycle"] for row in good]
    assert rates[0] < rates[1] < rates[2] <= 16
    for row in bad:
        assert row["status"] == "error" and "corrupt.onnx" in row["error"], row
        assert row["predicted_cycles"] is None
    with open(tmp_path / "out" / "results.csv") as handle:
        table = list(csv.DictReader(handle))
    assert [r["status"] for r in table] == [r["status"] for r in first.rows]
    assert table[0]["option.lanes"] == "1" and float(table[2]["macs_per_cycle"]) == rates[2]
    summary = (tmp_path / "out" / "summary.md").read_text()
    assert "6 points: 3 ok, 3 error; 6 computed in this run, 0 from the cache." in summary
    assert (tmp_path / "out" / "plots" / "sweepchip_lanes.png").stat().st_size > 1000

    again = run_sweep(spec, tmp_path / "out", jobs=2, progress=False)
    assert again.computed == 0
    assert again.rows == first.rows
    # a changed grid computes only its new point
    more = load_spec(write_spec(tmp_path, GRID.replace("[1, 4, 16]", "[1, 4, 16, 32]")))
    assert run_sweep(more, tmp_path / "out", jobs=2, progress=False).computed == 2
    # an interrupted sweep resumes: a lost point is computed again, the others are not
    lost = [p for p in (tmp_path / "out" / "points").iterdir()][0]
    lost.unlink()
    assert run_sweep(more, tmp_path / "out", jobs=2, progress=False).computed == 1


@pytest.mark.slow
def test_a_point_over_its_timeout_is_ended_and_recorded(sweepchip, models, tmp_path):
    spec = load_spec(write_spec(tmp_path, """
models = ["models/convnet.onnx"]
point_timeout = 15
[targets.sweepchip]
stall_s = [0, 3600]
"""))
    result = run_sweep(spec, tmp_path / "out", jobs=2, progress=False)
    quick, stalled = result.rows
    assert quick["status"] == "ok" and quick["macs_per_cycle"] > 0
    assert stalled["status"] == "timeout"
    assert stalled["error"] == "ended after the point timeout of 15 s"
    assert stalled["compile_seconds"] >= 15  # ended after the timeout, not before
    # the same timeout again: not retried; a longer one retries it
    assert not needs_run({"status": "timeout", "point_timeout": 15}, 15, False)
    assert needs_run({"status": "timeout", "point_timeout": 15}, 60, False)
    assert needs_run({"status": "error"}, 15, True) and not needs_run({"status": "ok"}, 15, True)


@pytest.mark.slow
def test_local_pool_and_local_ray_cluster_give_the_same_table(sweepchip, models, tmp_path):
    pytest.importorskip("ray", reason="the Ray extra (pip install 'edgebyoc[ray]')")
    spec = load_spec(write_spec(tmp_path, GRID))
    local = run_sweep(spec, tmp_path / "local", jobs=2, progress=False)
    on_ray = run_sweep(spec, tmp_path / "ray", jobs=2, use_ray=True, progress=False)
    assert on_ray.computed == 6
    assert rows_without_timing(on_ray) == rows_without_timing(local)
    assert sum(row["status"] == "ok" for row in on_ray.rows) == 3


def test_spec_mistakes_are_named(sweepchip, models, tmp_path):
    def error_of(text, name="spec.toml"):
        with pytest.raises(SweepSpecError) as info:
            load_spec(write_spec(tmp_path, text, name)).points()
        return str(info.value)

    assert "unknown key(s) modles" in error_of('modles = ["a"]\n[targets.host]\n')
    assert "models: 'models/*.tflite' matches no file" in error_of(
        'models = ["models/*.tflite"]\n[targets.host]\n')
    assert "targets.nochip: unknown target 'nochip'" in error_of(
        'models = ["models/convnet.onnx"]\n[targets.nochip]\n')
    assert error_of('models = ["models/convnet.onnx"]\n[targets.sweepchip]\nlanes = [4, 0]\n') \
        .startswith("targets.sweepchip.lanes: ")
    assert "targets.sweepchip.width: target 'sweepchip' has no option 'width'" in error_of(
        'models = ["models/convnet.onnx"]\n[targets.sweepchip]\nwidth = [4]\n')
    assert "action: 'both' is not one of compile, verify" in error_of(
        'models = ["models/convnet.onnx"]\naction = "both"\n[targets.host]\n')
    assert "not valid TOML" in error_of("models = [\n")
    assert "point_timeout: -1 is not a positive number of seconds" in error_of(
        'models = ["models/convnet.onnx"]\npoint_timeout = -1\n[targets.host]\n')


def test_yaml_and_python_specs_expand_like_toml(sweepchip, models, tmp_path):
    pytest.importorskip("yaml")
    toml = load_spec(write_spec(tmp_path, GRID)).points()
    yaml_spec = load_spec(write_spec(tmp_path, (
        "models: [models/convnet.onnx, models/corrupt.onnx]\naction: verify\n"
        "point_timeout: 120\ntargets:\n  sweepchip:\n    lanes: [1, 4, 16]\n"), "spec.yaml"))
    python = SweepSpec(models=["models/convnet.onnx", "models/corrupt.onnx"], action="verify",
                       targets={"sweepchip": {"lanes": [1, 4, 16]}}, base=tmp_path).points()
    assert yaml_spec.points() == toml == python
    assert len(toml) == 6 and len({p.key for p in toml}) == 6
    assert [dict(p.options)["lanes"] for p in toml[:3]] == [1, 4, 16]


@pytest.mark.slow
def test_cli_sweep(sweepchip, models, tmp_path):
    from click.testing import CliRunner

    from edgebyoc.cli import main

    spec = write_spec(tmp_path, GRID.replace("lanes = [1, 4, 16]", "lanes = [8]")
                      .replace('"models/convnet.onnx", ', ""))
    runner = CliRunner()
    result = runner.invoke(main, ["sweep", str(spec), "-o", str(tmp_path / "out"), "-j", "1",
                                  "-q"])
    assert result.exit_code == 1, result.output  # no point succeeded
    assert "1 points (1 computed, 0 cached), 1 with an error or timeout" in result.output
    assert "error: no point of the sweep succeeded (1 of 1" in result.output
    row = json.loads(next((tmp_path / "out" / "points").iterdir()).read_text())
    assert row["status"] == "error"
    bad = runner.invoke(main, ["sweep", str(spec), "-o", str(tmp_path / "out"), "-j", "0"])
    assert bad.exit_code == 2 and "-j" in bad.output


@pytest.mark.slow
def test_compile_options_are_swept_too(sweepchip, models, tmp_path):
    spec = load_spec(write_spec(tmp_path, """
models = ["models/convnet.onnx"]
[targets.sweepchip]
lanes = [4]
[compile]
cost_metric = ["latency", "energy"]
"""))
    points = spec.points()
    assert [dict(p.compile_options) for p in points] == [{"cost_metric": "latency"},
                                                         {"cost_metric": "energy"}]
    assert points[0].key != points[1].key
    result = run_sweep(spec, tmp_path / "out", jobs=2, progress=False)
    assert [row["compile.cost_metric"] for row in result.rows] == ["latency", "energy"]
    assert [row["options"] for row in result.rows] == ["lanes=4,cost_metric=latency",
                                                       "lanes=4,cost_metric=energy"]
    assert all(row["status"] == "ok" for row in result.rows), result.rows
    with pytest.raises(SweepSpecError, match="compile.io_in_arena: 'yes' is not true or false"):
        SweepSpec(models=["models/convnet.onnx"], targets={"host": {}},
                  compile={"io_in_arena": ["yes"]}, base=tmp_path)
    with pytest.raises(SweepSpecError, match="compile.opt_level: not a compile option"):
        SweepSpec(models=["models/convnet.onnx"], targets={"host": {}},
                  compile={"opt_level": [3]}, base=tmp_path)


TARGET = "[targets.sweepchip]\n"


@pytest.mark.parametrize("text, message", [
    ("point_timeout = nan\n" + TARGET, "point_timeout: nan is not a positive number"),
    ("point_timeout = inf\n" + TARGET, "point_timeout: inf is not a positive number"),
    ("seed = -1\n" + TARGET, "seed: -1 is not an integer from 0"),
    ("max_points = 0\n" + TARGET, "max_points: 0 is not a positive integer"),
    (TARGET + "lanes = [1979-05-27]", "targets.sweepchip.lanes: datetime.date(1979, 5, 27) "
                                      "(date) is not"),
    (TARGET + "lanes = {a = 1}", "targets.sweepchip.lanes: {'a': 1} (dict) is not"),
    (TARGET + "lanes = [[1, 2]]", "targets.sweepchip.lanes: [1, 2] (list) is not"),
    (TARGET + "lanes = [4.5]", "option lanes: 4.5 (float) is not an int"),
    (TARGET + "stall_s = [nan]", "targets.sweepchip.stall_s: nan is not a finite"),
    (TARGET + "lanes = []", "targets.sweepchip.lanes: give at least one value"),
    (TARGET + "[compile]\nmax_recompute = [inf]", "compile.max_recompute: inf is not a finite"),
])
def test_every_spec_value_is_checked_before_any_point_runs(sweepchip, models, tmp_path, text,
                                                           message):
    with pytest.raises(SweepSpecError) as info:
        load_spec(write_spec(tmp_path, 'models = ["models/convnet.onnx"]\n' + text)).points()
    assert message in str(info.value), str(info.value)


def test_a_huge_grid_is_counted_and_refused_and_a_binary_spec_named(sweepchip, models,
                                                                     tmp_path):
    from click.testing import CliRunner

    from edgebyoc.cli import main

    values = ", ".join(str(v) for v in range(1, 65))
    huge = write_spec(tmp_path, 'models = ["models/convnet.onnx"]\n[targets.sweepchip]\n'
                                f"lanes = [{values}]\nstall_s = [{values}]\n"
                                "[compile]\nmax_recompute = [" +
                                ", ".join(str(1 + v / 100) for v in range(3000)) + "]\n")
    result = CliRunner().invoke(main, ["sweep", str(huge), "-o", str(tmp_path / "o")])
    assert result.exit_code == 1
    assert "expands to 12,288,000 points, more than max_points = 10,000" in result.output
    assert not (tmp_path / "o").exists()
    binary = tmp_path / "spec.toml"
    binary.write_bytes(b"models = [\xff\xfe]\n")
    result = CliRunner().invoke(main, ["sweep", str(binary), "-o", str(tmp_path / "o")])
    assert result.exit_code == 1 and "not a UTF-8 text file" in result.output
    assert "Traceback" not in result.output


@pytest.mark.slow
def test_ctrl_c_ends_the_points_without_their_tracebacks(sweepchip, models, tmp_path):
    import signal
    import subprocess
    import sys
    import time

    spec = write_spec(tmp_path, 'models = ["models/convnet.onnx"]\n[targets.sweepchip]\n'
                                "stall_s = [600, 601]\n")
    markers = tmp_path / "markers"
    markers.mkdir()
    sweep = subprocess.Popen([sys.executable, "-m", "edgebyoc.cli", "sweep", str(spec), "-o",
                              str(tmp_path / "out"), "-j", "2", "-q"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             start_new_session=True,
                             env={**os.environ, "SWEEPCHIP_STALL_MARKERS": str(markers)},
                             # as a terminal starts it: Ctrl-C not ignored (a CI job or tox's
                             # parallel mode may run the tests with SIGINT ignored, and an
                             # ignored SIGINT is inherited)
                             preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.time() + 300  # both points compiling (sleeping in the plugin)
    while len(list(markers.iterdir())) < 2 and time.time() < deadline:
        time.sleep(0.2)
    assert len(list(markers.iterdir())) == 2, "the points did not start"
    os.killpg(sweep.pid, signal.SIGINT)  # what Ctrl-C in a terminal sends
    out, err = sweep.communicate(timeout=120)  # the points end with the sweep: no wait
    assert sweep.returncode == 130, err[-3000:]
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err[-3000:]
    assert "interrupted: the finished points are kept" in err
