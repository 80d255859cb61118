"""The ``edgebyoc`` command line: plugins, new-plugin, compile, run, verify, sweep, calibrate.

Every ``EdgebyocError`` ends as one ``error: ...`` line on stderr and exit status 1 (2 for usage
errors, as click does); ``--debug`` shows the traceback instead.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import sys
import time
import zipfile
from pathlib import Path
from typing import Any

import click
import numpy as np

from .errors import EdgebyocError, InputError


def _parse_assignments(values: tuple[str, ...], what: str) -> dict[str, str]:
    parsed = {}
    for value in values:
        key, sep, text = value.partition("=")
        if not sep or not key:
            raise click.BadParameter(f"{value!r} is not of the form NAME=VALUE", param_hint=what)
        parsed[key.strip()] = text.strip()
    return parsed


def _parse_shapes(values: tuple[str, ...]) -> dict[str, list[int]]:
    shapes = {}
    for key, text in _parse_assignments(values, "--input-shape").items():
        try:
            shapes[key] = [int(d) for d in text.replace("x", ",").split(",") if d.strip()]
        except ValueError as err:
            raise click.BadParameter(f"{key}={text}: dimensions must be integers",
                                     param_hint="--input-shape") from err
    return shapes


def _load_inputs(path: str | None, specs, random: bool, seed: int) -> dict[str, np.ndarray]:
    from .frontend import random_inputs

    if path is None:
        if not random:
            raise InputError("no input given: pass --input FILE (.npy or .npz) or --random")
        return random_inputs(specs, seed)
    file = Path(path)
    try:
        loaded = np.load(file, allow_pickle=False)
        if isinstance(loaded, np.ndarray):
            arrays = {None: loaded}
        else:
            with loaded:
                arrays = {key: loaded[key] for key in loaded.files}
    except (OSError, ValueError, EOFError, KeyError, zipfile.BadZipFile) as err:
        reason = "an empty file" if file.is_file() and file.stat().st_size == 0 else \
            str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise InputError(f"{file}: cannot read inputs ({reason}; object arrays are not "
                         f"accepted)" if "pickle" in reason.lower() else
                         f"{file}: cannot read inputs ({reason})") from err
    if None in arrays:
        if len(specs) != 1:
            raise InputError(f"{file}: one array given, the model takes {len(specs)} inputs "
                             f"({[s.name for s in specs]}): use an .npz with one entry each")
        return {specs[0].name: arrays[None]}
    if set(arrays) != {s.name for s in specs} and len(arrays) == len(specs) \
            and all(k.startswith("arr_") for k in arrays):
        arrays = {s.name: arrays[f"arr_{i}"] for i, s in enumerate(specs)}
    return arrays


#: what ``run --output`` writes
OUTPUT_SUFFIXES = (".npy", ".npz")


def _check_outputs_path(path: str, artifact: str) -> Path:
    """``run --output`` checked before the run: .npy / .npz in an existing, writable folder,
    not inside the artifact (a file there would make it fail its integrity check)."""
    from .runtime.safe_output import check_writable_file

    file = check_writable_file(path, "--output", OUTPUT_SUFFIXES)
    if Path(os.path.abspath(file)).is_relative_to(Path(os.path.abspath(artifact))):
        raise InputError(f"--output {file}: inside the artifact {artifact}; write outputs "
                         f"outside it (the artifact holds only its own files)")
    return file


def _save_outputs(path: Path, outputs: dict[str, np.ndarray]) -> None:
    from .runtime.safe_output import write_file_atomically

    if path.suffix.lower() != ".npz" and len(outputs) != 1:
        raise InputError(f"{path}: the model has {len(outputs)} outputs; save them to an .npz")

    def write(temporary: Path) -> None:
        with open(temporary, "wb") as handle:  # a handle: numpy adds no suffix of its own
            if path.suffix.lower() == ".npz":
                np.savez(handle, **outputs)
            else:
                np.save(handle, next(iter(outputs.values())))

    write_file_atomically(path, write, "outputs")


def _describe(array: np.ndarray) -> str:
    flat = array.reshape(-1)
    head = ", ".join(f"{v:.5g}" if array.dtype.kind == "f" else str(v) for v in flat[:6])
    return f"{array.dtype} {list(array.shape)} [{head}{', ...' if flat.size > 6 else ''}]"


class _Group(click.Group):
    """Turns edgebyoc errors into one-line messages unless --debug is given."""

    def invoke(self, ctx: click.Context) -> Any:
        from .native_log import filtered_stderr

        # the commands that run TVM in this process (a sweep's points run in processes of
        # their own, which would hold the filter's pipe open)
        command = (getattr(ctx, "_protected_args", None) or ctx.protected_args or [None])[0]
        quiet = filtered_stderr() if command in ("compile", "run", "verify") \
            else contextlib.nullcontext()
        try:
            with quiet:
                return super().invoke(ctx)
        except EdgebyocError as err:
            if ctx.obj and ctx.obj.get("debug"):
                raise
            click.echo(f"error: {err}", err=True)
            sys.exit(1)


def _max_memory_option(command):
    """``--max-memory SIZE|unlimited``: the memory a compile or run may plan for
    (``resources``); sets ``EDGEBYOC_MAX_MEMORY`` for this process."""
    def apply(ctx: click.Context, _param, value: str | None) -> None:
        if value is None:
            return
        if value.strip().lower() not in ("unlimited", "none", "off"):
            parse_size(value, "--max-memory")
        from .resources import ENV_MAX_MEMORY

        os.environ[ENV_MAX_MEMORY] = value

    return click.option("--max-memory", metavar="SIZE", expose_value=False, callback=apply,
                        help="Memory a compile or run may plan for (e.g. 64GB, or "
                             "'unlimited'); default: the machine's available memory.")(command)


def _debug_option(command):
    """``--debug`` after a subcommand too (``edgebyoc compile m.onnx --debug``)."""
    def enable(ctx: click.Context, _param, value: bool) -> None:
        if value:
            ctx.ensure_object(dict)["debug"] = True

    return click.option("--debug", is_flag=True, expose_value=False, callback=enable,
                        help="Show tracebacks of errors.")(command)


@click.group(cls=_Group)
@click.option("--debug", is_flag=True, help="Show tracebacks of errors.")
@click.version_option(package_name="edgebyoc")
@click.pass_context
def main(ctx: click.Context, debug: bool) -> None:
    """edgebyoc: compile ONNX / TFLite models for edge targets provided by plugins."""
    ctx.obj = {"debug": debug}


@main.command("plugins")
@_debug_option
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def plugins_command(as_json: bool) -> None:
    """List installed plugins: status, targets, hooks."""
    from .plugins import default_registry

    registry = default_registry()
    rows = [p.to_dict() for p in registry.plugins]
    if as_json:
        click.echo(json.dumps({"targets": registry.target_names(), "plugins": rows}, indent=2))
        return
    from rich.console import Console
    from rich.table import Table

    table = Table(title="edgebyoc plugins", title_justify="left")
    for column in ("name", "distribution", "version", "status", "targets", "hooks"):
        table.add_column(column, overflow="fold")  # wrapped, never cut with "…" when piped
    for row in rows:
        status = row["status"] + (f": {row['reason']}" if row["reason"] else "")
        color = {"active": "green", "failed": "red"}.get(row["status"], "yellow")
        table.add_row(row["name"], row["distribution"], row["version"],
                      f"[{color}]{status}[/{color}]", ", ".join(row["targets"]) or "-",
                      ", ".join(h.removeprefix("edgebyoc_") for h in row["hooks"]) or "-")
    console = Console(width=None if sys.stdout.isatty() else 160)
    if rows:
        console.print(table)
    else:
        console.print("no plugins installed (pip install edgebyoc-<target>)")
    console.print(f"targets: {', '.join(registry.target_names())}")


def _compile_options(func):
    options = [
        click.option("--target", "-t", default="host", show_default=True,
                     help="Target name (see `edgebyoc plugins`)."),
        click.option("--option", "options", multiple=True, metavar="NAME=VALUE",
                     help="A target option, repeatable."),
        click.option("--input-shape", "input_shapes", multiple=True, metavar="NAME=D0,D1,..",
                     help="Static shape for a dynamic model input, repeatable."),
        click.option("--cost-metric", type=click.Choice(["latency", "energy"]),
                     default="latency", show_default=True,
                     help="What dispatch between execution modules minimises."),
        click.option("--calibration", type=click.Path(),
                     help="Calibration inputs for partial quantization: an .npz with one array "
                          "per input name, samples along a leading axis."),
        click.option("--dfs/--no-dfs", default=None,
                     help="Depth-first tiling for the lowest memory peak: --dfs uses it "
                          "whenever it lowers the peak, --no-dfs never; by default it is "
                          "used when it lowers the peak by at least 20 % and runs within 5 % "
                          "of the untiled time (C projects: chains of layers streamed in row "
                          "bands, at the latency the target's cost model predicts; host path: "
                          "as a tuning record measured it, see --tuning-record)."),
        click.option("--tuning-record", type=click.Path(), metavar="FILE",
                     help="Measured decisions the automatic depth-first mode (and --dfs) "
                          "reads (host path): the lowest-peak plan that runs within 5 % of "
                          "the untiled time; with --tune, what it lacks is measured now and "
                          "written there. Without a record nothing is timed, the automatic "
                          "mode keeps the untiled build and --dfs the lowest peak."),
        click.option("--tune", is_flag=True,
                     help="Time the depth-first host build against the untiled one where "
                          "the tuning record has no measurement, and write it there."),
        click.option("--memory-budget", metavar="SIZE",
                     help="Peak activation memory to meet (e.g. 8MB, 512kB; implies --dfs; "
                          "C projects: the activation RAM, the caller's buffers included)."),
        click.option("--max-recompute", type=float, default=1.5, show_default=True,
                     help="With --dfs: allowed MACs with re-computation / original MACs."),
        click.option("--io-in-arena", is_flag=True,
                     help="C projects: keep the inputs and outputs in the activation arena "
                          "(their memory reused once dead, as TFLite Micro does) instead of "
                          "in buffers of the caller's."),
        click.option("--no-schedules", is_flag=True,
                     help="Use TVM's default CPU loops instead of edgebyoc's schedules."),
        click.option("--safe", is_flag=True,
                     help="Check every host kernel's memory accesses at run time (for "
                          "untrusted models; costs speed, see docs/performance.md)."),
        click.option("--quiet", "-q", is_flag=True, help="No progress output."),
    ]
    for option in reversed(options):  # decorators apply bottom-up: keep the listed order
        func = option(func)
    return func


def _load_calibration(path: str | None) -> list[dict[str, np.ndarray]] | None:
    if path is None:
        return None
    try:
        with np.load(path, allow_pickle=False) as data:
            arrays = {key: data[key] for key in data.files}
    except (OSError, ValueError, AttributeError) as err:
        raise InputError(f"{path}: cannot read calibration inputs ({err})") from err
    counts = {len(a) for a in arrays.values()}
    if len(counts) != 1:
        raise InputError(f"{path}: every input needs the same number of samples, got "
                         f"{ {k: len(a) for k, a in arrays.items()} }")
    return [{k: a[i] for k, a in arrays.items()} for i in range(counts.pop())]


def parse_size(text: str, param_hint: str = "--memory-budget") -> int:
    """Bytes of a size with its unit (``resources.parse_size``), as a usage error if not."""
    from .resources import parse_size as parse

    try:
        return parse(text)
    except ValueError as err:
        raise click.BadParameter(str(err), param_hint=param_hint) from err


def _qemu_option(command):
    from .codegen.mcu import MCU_TARGETS

    return click.option(
        "--qemu", "qemu_targets", multiple=True, type=click.Choice(list(MCU_TARGETS)),
        help="Also build the C project for this MCU (repeatable), run it under QEMU and "
             "check its outputs equal the artifact's; prints its flash and RAM from the "
             "ELF (needs the cross compiler and QEMU from Debian, see docs/mcu.md).")(command)


def _check_tools(targets: tuple[str, ...]) -> None:
    """Before any work: the cross compilers and QEMU the --qemu targets need."""
    from .codegen.mcu import check_tools, mcu_target

    for name in targets:
        check_tools(mcu_target(name))


def _run_on_qemu(compiled, targets: tuple[str, ...], inputs, quiet: bool,
                 record: bool) -> None:
    """Each --qemu target: the C project built and run under QEMU, compared with the
    artifact, one line per target (``CompiledModel.check_on_qemu``)."""
    from .codegen.mcu import mcu_target

    for name in targets:
        if not quiet:
            click.echo(f"building the C project for {name} and running it under QEMU "
                       f"{mcu_target(name).board} ...", err=True)
        run, comparison = compiled.check_on_qemu(name, inputs=inputs, record=record)
        memory = run.memory
        agreement = "bit-exact" if all(exact for _, exact, _ in comparison) else \
            f"max abs error {max(error for _, _, error in comparison):.3g}"
        l1 = f", accelerator L1 {memory.l1} B (emulated)" if memory.l1 else ""
        click.echo(f"qemu {name} ({run.board}): outputs {agreement} with the artifact; "
                   f"flash {memory.flash_bytes} B, RAM {memory.ram_bytes} B (.data+.bss "
                   f"{memory.static_ram_bytes}, stack {memory.stack_used}){l1}; "
                   f"{run.instructions:,} instructions; {run.seconds:.2f} s")


def _compile(model: str, settings: dict[str, Any]):
    """``edgebyoc.compile`` with the command line's compile options (``_compile_options``)."""
    from .pipeline import compile as compile_model

    budget = settings["memory_budget"]
    return compile_model(
        model, target=settings["target"],
        options=_parse_assignments(settings["options"], "--option"),
        input_shapes=_parse_shapes(settings["input_shapes"]), progress=not settings["quiet"],
        schedules=not settings["no_schedules"], cost_metric=settings["cost_metric"],
        calibration=_load_calibration(settings["calibration"]), dfs=settings["dfs"],
        memory_budget=parse_size(budget) if budget else None,
        max_recompute=settings["max_recompute"], io_in_arena=settings["io_in_arena"],
        safe=settings["safe"], tuning_record=settings["tuning_record"], tune=settings["tune"])


@main.command("new-plugin")
@_debug_option
@click.argument("name")
@click.option("--kind", type=click.Choice(["c", "json", "blob", "match"]), default="c",
              show_default=True,
              help="c: float convolutions as C; json / blob: element-wise regions as BYOC "
                   "graphs; match: an int8 accelerator on the MATCH schedule search and layer "
                   "template")
@click.option("-o", "--output", type=click.Path(), default=None,
              help="directory to create (default: ./NAME)")
def new_plugin_command(name: str, kind: str, output: str | None) -> None:
    """Create a plugin distribution NAME that installs and passes its tests as it is."""
    from .scaffold import new_plugin

    root = Path(output or name)
    written = new_plugin(name, kind, root)
    click.echo(f"wrote {len(written)} files into {root}: pip install -e '{root}[test]' && "
               f"pytest {root / 'tests'}")


@main.command("check-plugin")
@_debug_option
@click.argument("name")
@click.option("--workloads", is_flag=True,
              help="Also compile the standard workloads for each of its targets, run them and "
                   "compare with the host build (minutes).")
@click.option("--option", "options", multiple=True, metavar="NAME=VALUE",
              help="A target option for the workload compiles (repeatable).")
def check_plugin_command(name: str, workloads: bool, options: tuple[str, ...]) -> None:
    """Check installed plugin NAME: its imports (edgebyoc.api only), every hook against the
    contract and, with --workloads, the standard workloads. Exit status 1 on any problem."""
    from .plugins import default_registry
    from .testing.conformance import conformance_workloads, plugin_problems, summary

    registry = default_registry()
    problems = plugin_problems(registry, name)
    click.echo(f"plugin {name!r}: imports and hooks: "
               + ("OK" if not problems else f"{len(problems)} problem(s)"))
    for problem in problems:
        click.echo(f"  - {problem}")
    failed = bool(problems)
    if workloads and name in {p.name for p in registry.plugins}:
        outcomes = conformance_workloads(name, registry,
                                         options=_parse_assignments(options, "--option"))
        click.echo(summary(outcomes))
        failed |= any(o.problems for o in outcomes)
        for target in sorted({o.target for o in outcomes}):
            if not any(o.compiled for o in outcomes if o.target == target):
                click.echo(f"FAILED  {target}: compiles none of the standard workloads")
                failed = True
    if failed:
        raise SystemExit(1)


@main.command("compile")
@_debug_option
@_max_memory_option
@click.argument("model", type=click.Path())
@click.option("--output", "-o", required=True, type=click.Path(),
              help="Artifact directory to write.")
@click.option("--memory-plot", type=click.Path(),
              help="Write the activation memory timeline of the host path as a PNG.")
@_qemu_option
@_compile_options
def compile_command(model, output, memory_plot, qemu_targets, **settings):
    """Compile MODEL (.onnx or .tflite) for a target into an artifact directory."""
    from .report import summary_line
    from .runtime.artifact import check_artifact_directory

    check_artifact_directory(output)  # every path checked before the work starts
    if memory_plot:
        from .memory.timeline import PLOT_SUFFIXES
        from .runtime.safe_output import check_writable_file

        check_writable_file(memory_plot, "--memory-plot", PLOT_SUFFIXES)
    _check_tools(qemu_targets)
    compiled = _compile(model, settings)
    if qemu_targets:  # checked before the artifact is written: its report records them
        _run_on_qemu(compiled, qemu_targets, None, settings["quiet"], record=True)
    path = compiled.save(output)
    if memory_plot:
        _plot_memory(compiled.report, memory_plot)
    click.echo(summary_line(compiled.report))
    click.echo(f"artifact: {path} (report: {path / 'report.md'})")
    if memory_plot:
        click.echo(f"memory timeline: {memory_plot}")


def _plot_memory(report: dict[str, Any], path: str) -> None:
    """The activation memory timeline of a compile (with the untiled one beside it when
    depth-first planning changed it) as a plot at ``path``."""
    from .memory.timeline import MemoryTimeline, plot_timelines

    memory = report["memory"]
    timelines = {}
    if memory["enabled"] and memory.get("baseline_timeline"):
        timelines["without DFS"] = MemoryTimeline.from_dict(memory["baseline_timeline"])
    timelines["with DFS" if timelines else report["model"]["name"]] = \
        MemoryTimeline.from_dict(memory["timeline"])
    levels = {f"RAM of the {build['target']} ELF (.data+.bss+stack)": build["ram_bytes"]
              for build in report.get("mcu_builds", [])}
    plot_timelines(timelines, path, f"activation memory, {report['model']['name']} on "
                                    f"{report['target']['name']}", levels)


@main.command("run")
@_debug_option
@_max_memory_option
@click.argument("artifact", type=click.Path())
@click.option("--input", "-i", "input_path", type=click.Path(),
              help="Inputs: .npy for one input, .npz with one entry per input name.")
@click.option("--random", "random_input", is_flag=True, help="Run on seeded random inputs.")
@click.option("--seed", default=0, show_default=True, help="Seed of --random.")
@click.option("--output", "-o", "output_path", type=click.Path(),
              help="Save outputs (.npy for one output, .npz for any number).")
@_qemu_option
def run_command(artifact, input_path, random_input, seed, output_path, qemu_targets):
    """Run a compiled ARTIFACT directory on this machine (with --qemu: also its C project
    on an emulated MCU, compared with the artifact)."""
    from .pipeline import load

    save_to = _check_outputs_path(output_path, artifact) if output_path else None
    _check_tools(qemu_targets)
    compiled = load(artifact)
    inputs = _load_inputs(input_path, compiled.inputs, random_input, seed)
    outputs = compiled.run(inputs)
    for name, value in outputs.items():
        click.echo(f"{name}: {_describe(value)}")
    _run_on_qemu(compiled, qemu_targets, inputs, False, record=False)
    if save_to is not None:
        _save_outputs(save_to, outputs)
        click.echo(f"saved {save_to}")


@main.command("verify")
@_debug_option
@_max_memory_option
@click.argument("model", type=click.Path())
@_compile_options
@click.option("--input", "-i", "input_path", type=click.Path(),
              help="Inputs (.npy / .npz); seeded random inputs otherwise.")
@click.option("--seed", default=0, show_default=True, help="Seed of the random inputs.")
@click.option("--rtol", type=float, default=None,
              help="Tolerated max |out - ref| / max |ref| for float outputs, applied as given "
                   "(default 1e-4, widened to twice onnxruntime's own float32 spread when "
                   "that is larger).")
@click.option("--output", "-o", type=click.Path(),
              help="Also save the artifact here.")
@_qemu_option
def verify_command(model, input_path, seed, rtol, output, qemu_targets, **settings):
    """Compile MODEL, run it, and compare with a reference (onnxruntime or TVM's host build)."""
    from .errors import VerificationError
    from .verify import verify

    if output:
        from .runtime.artifact import check_artifact_directory

        check_artifact_directory(output)
    _check_tools(qemu_targets)
    compiled = _compile(model, settings)
    quiet = settings["quiet"]
    inputs = _load_inputs(input_path, compiled.inputs, True, seed)
    if not quiet:  # the references take a while to build: say so
        click.echo("running the compiled model and building the reference (onnxruntime, or "
                   "TVM's host builds and the integer reference for int8 models) ...", err=True)
    started = time.perf_counter()
    result, _ = verify(compiled, inputs=inputs, rtol=rtol)
    if not quiet:
        click.echo(f"reference and comparison: {time.perf_counter() - started:.1f} s", err=True)
    if result.passed:  # the emulated MCU against the artifact, itself checked just now
        _run_on_qemu(compiled, qemu_targets, inputs, quiet, record=True)
    if output:
        compiled.save(output)
    for out in result.outputs:
        mark = "ok  " if out.passed else "FAIL"
        click.echo(f"{mark} {out.name}: max abs error {out.max_abs:.3g}, relative {out.rel:.3g}"
                   f"{' (bit-exact)' if out.exact else ''}{' - ' + out.reason if out.reason else ''}")
    if result.integer is not None:
        for row in result.integer.agreements:
            click.echo(f"     vs {row.reference}: {row.describe()}")
        click.echo(f"     rounding: {result.integer.note}")
    verdict = "passed" if result.passed else "FAILED"
    click.echo(f"verify {verdict}: {compiled.report['model']['name']} on "
               f"{compiled.report['target']['name']} vs {result.reference}, max abs "
               f"{result.max_abs:.3g}, max rel {result.max_rel:.3g} (rtol {result.rtol:g})")
    if not result.passed:
        if result.integer is not None and all(o.passed for o in result.outputs):
            raise VerificationError(f"integer outputs differ from tvm-integer-host beyond what "
                                    f"the modules' rounding explains ({result.integer.note})")
        raise VerificationError(f"outputs differ from {result.reference} beyond rtol "
                                f"{result.rtol:g}")


@main.command("sweep")
@_debug_option
@click.argument("spec", type=click.Path())
@click.option("--output", "-o", required=True, type=click.Path(),
              help="Folder of the results (table, plots, summary, per-point cache).")
@click.option("--jobs", "-j", type=click.IntRange(min=1), default=None,
              help="Points at once (default: the CPU count).")
@click.option("--point-timeout", type=click.FloatRange(min=0, min_open=True), default=None,
              help="Seconds a point may take before it is ended (default: the spec's, or 600).")
@click.option("--retry-errors", is_flag=True,
              help="Compute again the points that ended in an error or a failed verify.")
@click.option("--ray", "use_ray", is_flag=True,
              help="Run the points as Ray tasks (pip install 'edgebyoc[ray]').")
@click.option("--ray-address", default=None,
              help="Ray cluster to join (e.g. ray://head:10001 or 'auto'); a local one "
                   "otherwise. Implies --ray.")
@click.option("--max-points", type=click.IntRange(min=1), default=None,
              help="The most points the grid may have (default: the spec's max_points, or "
                   "10,000); a larger grid is refused before anything runs.")
@click.option("--quiet", "-q", is_flag=True, help="No progress bar.")
def sweep_command(spec, output, jobs, point_timeout, retry_errors, use_ray, ray_address,
                  max_points, quiet):
    """Compile (and verify) every model x target x option combination of SPEC (TOML / YAML).

    Each point runs in its own process; failures and timeouts are recorded as rows. Results
    are cached in OUTPUT, so running the same spec again computes only new points. The exit
    status is 1 when no point succeeded.
    """
    from .sweep import load_spec, run_sweep

    if point_timeout is not None and not math.isfinite(point_timeout):
        raise click.BadParameter(f"{point_timeout} is not a finite number of seconds",
                                 param_hint="--point-timeout")
    loaded = load_spec(spec)
    if max_points is not None:
        loaded.max_points = max_points
    try:
        result = run_sweep(loaded, output, jobs=jobs,
                           use_ray=use_ray or bool(ray_address), ray_address=ray_address,
                           point_timeout=point_timeout, retry_errors=retry_errors,
                           progress=not quiet)
    except KeyboardInterrupt:
        click.echo(f"interrupted: the finished points are kept in {output}/points; the same "
                   f"command resumes the sweep", err=True)
        sys.exit(130)
    bad = result.errors
    click.echo(f"{len(result.rows)} points ({result.computed} computed, "
               f"{len(result.rows) - result.computed} cached), {len(bad)} with an error or "
               f"timeout; results in {output}: "
               + ", ".join(f.relative_to(output).as_posix() for f in result.files
                           if f.suffix != ".png")
               + (f" and {sum(f.suffix == '.png' for f in result.files)} plot(s)"
                  if any(f.suffix == ".png" for f in result.files) else ""))
    for note in result.notes:
        click.echo(f"note: {note}")
    if result.rows and not result.succeeded:
        raise EdgebyocError(f"no point of the sweep succeeded ({len(bad)} of {len(bad)} "
                            f"ended in an error, a failed verify or a timeout; see "
                            f"{Path(output) / 'summary.md'})")


@main.command("calibrate")
@_debug_option
@click.argument("target")
@click.argument("measurements", type=click.Path())
@click.option("--output", "-o", required=True, type=click.Path(),
              help="The calibration file to write (JSON; use it with --option "
                   "calibration=FILE).")
@click.option("--parameter", "parameters", multiple=True, metavar="NAME",
              help="Fit only this parameter (repeatable; default: all of the target's); the "
                   "others keep their starting values.")
@click.option("--start", type=click.Path(), default=None,
              help="A calibration file giving the starting values (default: the "
                   "parameters' defaults).")
@click.option("--rounds", type=click.IntRange(min=1, max=20), default=4, show_default=True,
              help="Fit / recompile rounds at most.")
@click.option("--fitted-on", default="", help="What the measurements are, for the file and "
              "the reports (default: the CSV's name).")
@click.option("--quiet", "-q", is_flag=True, help="No progress output.")
def calibrate_command(target, measurements, output, parameters, start, rounds, fitted_on,
                      quiet):
    """Fit TARGET's calibration parameters to the latencies in MEASUREMENTS (CSV: name, model,
    options, dfs, split, latency_ms; see docs/calibration.md)."""
    from .calibration import load_calibration
    from .calibration_fit import calibrate, read_measurements
    from .plugins import default_registry

    try:
        import scipy  # noqa: F401
    except ImportError:
        raise EdgebyocError("edgebyoc calibrate needs scipy: pip install "
                            "'edgebyoc[calibrate]'") from None
    registry = default_registry()
    the_target = registry.target(target)
    rows = read_measurements(measurements)
    initial = load_calibration(start, the_target) if start else None
    progress = None if quiet else (lambda message: click.echo(message, err=True))
    result = calibrate(target, rows, registry, start=initial, rounds=rounds,
                       fitted_on=fitted_on or Path(measurements).name, progress=progress,
                       parameters=list(parameters) or None)
    click.echo(f"{'measurement':32s} {'split':5s} {'board ms':>10s} {'predicted':>10s} "
               f"{'error':>8s} {'leave-one-out':>14s}")
    for row in result.rows:
        loo = f"{row['loo_error'] * 100:+.1f} %" if "loo_error" in row else ""
        click.echo(f"{row['name'][:32]:32s} {row['split']:5s} {row['measured_ms']:10.4g} "
                   f"{row['predicted_ms']:10.4g} {row['error'] * 100:+7.1f}% {loo:>14s}")
    stats = result.calibration.fit
    for split in ("fit", "test"):
        part = stats.get(split)
        if part:
            r2 = "n/a" if part["r2"] is None else f"{part['r2']:.3f}"
            rho = "n/a" if part["spearman"] is None else f"{part['spearman']:.3f}"
            click.echo(f"{split} rows: R^2 {r2}, Spearman {rho}, median error "
                       f"{part['median_error'] * 100:.1f} %, "
                       f"largest {part['max_error'] * 100:.1f} %")
    if stats.get("loo_max_error") is not None:
        click.echo(f"leave-one-out: median error {stats['loo_median_error'] * 100:.1f} %, "
                   f"largest {stats['loo_max_error'] * 100:.1f} %")
    for name, value in result.calibration.values.items():
        click.echo(f"  {name} = {value:.6g}")
    path = result.calibration.save(output)
    click.echo(f"wrote {path} (expected error within {stats['error_band'] * 100:.0f} %: "
               f"{stats['error_band_from']})")


if __name__ == "__main__":  # pragma: no cover
    main()
