"""The command line run in a child process of its own, cheaply: children fork from a server
that has imported edgebyoc and TVM once, so a case costs its work, not an interpreter start.
A crash (a signal), a hang (the timeout) and a clean exit are told apart."""

from __future__ import annotations

import multiprocessing
import os
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

_CONTEXT = None


@dataclass
class Outcome:
    code: int | None  # exit status; negative: killed by that signal; None: timed out
    stdout: str
    stderr: str

    @property
    def one_line_error(self) -> bool:
        """A refusal as the command line promises it: status 1, one ``error:`` line, no
        traceback, nothing else on stderr."""
        lines = [line for line in self.stderr.splitlines() if line.strip()]
        return self.code == 1 and len(lines) == 1 and lines[0].startswith("error: ")

    def describe(self) -> str:
        return f"exit {self.code}; stderr: {self.stderr[-1500:]!r}; stdout: {self.stdout[-500:]!r}"


def _context():
    global _CONTEXT
    if _CONTEXT is None:
        _CONTEXT = multiprocessing.get_context("forkserver")
        _CONTEXT.set_forkserver_preload(["edgebyoc.cli", "edgebyoc.pipeline", "edgebyoc.verify"])
    return _CONTEXT


def _child(args, environment, path, out, err) -> None:
    os.environ.clear()
    os.environ.update(environment)
    sys.path[:] = path
    with open(out, "w") as stdout, open(err, "w") as stderr:
        os.dup2(stdout.fileno(), 1)
        os.dup2(stderr.fileno(), 2)
    sys.stdout = open(1, "w", closefd=False)
    sys.stderr = open(2, "w", closefd=False)
    from edgebyoc import plugins
    from edgebyoc.cli import main

    plugins.reset_default_registry()
    code = 0
    try:
        main(list(args), prog_name="edgebyoc", standalone_mode=True)
    except SystemExit as done:
        code = done.code if isinstance(done.code, int) else (0 if done.code is None else 1)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def run_cli(*args, timeout: float = 180.0, **environment) -> Outcome:
    """``edgebyoc ARGS`` in an isolated child; ``environment`` adds variables."""
    with tempfile.TemporaryDirectory(prefix="edgebyoc-cli-") as folder:
        out, err = Path(folder) / "out", Path(folder) / "err"
        env = {**os.environ, **{k: str(v) for k, v in environment.items()}}
        process = _context().Process(target=_child, args=([str(a) for a in args], env,
                                                          list(sys.path), out, err))
        process.start()
        process.join(timeout)
        if process.is_alive():
            process.kill()
            process.join()
            code = None
        else:
            code = process.exitcode
        read = lambda path: path.read_text(errors="replace") if path.exists() else ""  # noqa: E731
        return Outcome(code, read(out), read(err))
