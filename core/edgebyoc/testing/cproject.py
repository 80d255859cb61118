"""Build and run a compiled model's deployable C project on this machine (gcc and make).

A target with a C project (gap9, diana, an out-of-tree MATCH-style target) writes it into the
artifact's ``c_project/`` with a Makefile whose harness, ``network``, reads each input from a
raw binary file and writes each output to one. These helpers are the public way to use it in a
plugin's tests (``edgebyoc.api.testing``): they work on a model compiled in this process and
on one loaded from an artifact, build under AddressSanitizer and UBSan by default (an
out-of-bounds tile copy fails the build's run, not silently), and compare with
``compiled.run`` (the host build of the same artifact).

Example (a plugin's test)::

    from edgebyoc.api.testing import check_c_project, compile, int8_convnet

    def test_project_matches_the_artifact(tmp_path):
        compiled = compile(int8_convnet(), target="mychip")
        errors = check_c_project(compiled, directory=tmp_path)  # raises on a mismatch
        assert all(e == 0 for e in errors.values())
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from ..errors import EdgebyocError, VerificationError
from ..frontend import random_inputs

#: compiler and linker flags of a sanitized build (the C project's Makefile takes both); at
#: -Og, gcc's level for debugging: it still runs the flow analysis behind -Wall's
#: maybe-uninitialized warnings (-Werror in the Makefile), and builds an instrumented project
#: about twice as fast as -O1 (MLPerf Tiny VWW on gap9: 14 s against 28 s)
SANITIZE_FLAGS = "-Og -g -fsanitize=address,undefined -fno-sanitize-recover=all"


def _project(compiled):
    from ..codegen.cproject import CProject

    files = compiled.project_files()  # EdgebyocError when the target deploys none
    return CProject("network", files=files,
                    inputs=[(s.name, s.dtype, tuple(s.shape)) for s in compiled.inputs],
                    outputs=[(s.name, s.dtype, tuple(s.shape)) for s in compiled.outputs])


def build_c_project(compiled, directory: str | Path, sanitize: bool = True,
                    cflags: str = "-O2") -> Path:
    """Write ``compiled``'s C project into ``directory`` and build it with its Makefile;
    returns the harness binary. ``sanitize`` builds under AddressSanitizer and UBSan (any
    finding aborts the run); otherwise with ``cflags``. ``EdgebyocError`` when the target
    deploys no C project, gcc or make are missing, or the build fails (with the compiler's
    last messages)."""
    return _make(_project(compiled), directory, sanitize, cflags)


def _make(project, directory: str | Path, sanitize: bool, cflags: str = "-O2") -> Path:
    missing = [tool for tool in ("gcc", "make") if shutil.which(tool) is None]
    if missing:
        raise EdgebyocError(f"building the C project needs {' and '.join(missing)} on PATH")
    flags = SANITIZE_FLAGS if sanitize else cflags
    try:
        return project.make(directory, cflags=flags, ldflags=SANITIZE_FLAGS if sanitize else "")
    except RuntimeError as err:
        raise EdgebyocError(f"the C project did not build: {err}") from err


def run_c_project(compiled, inputs: Any = None, directory: str | Path | None = None,
                  sanitize: bool = True, seed: int = 0,
                  binary: str | Path | None = None) -> dict[str, np.ndarray]:
    """Build ``compiled``'s C project (in ``directory``, else a temporary folder; or use the
    ``binary`` ``build_c_project`` returned) and run its harness on ``inputs`` (as
    ``compiled.run`` takes them; seeded random inputs if None); outputs by name.
    ``EdgebyocError`` if the build or the run fails (a sanitizer finding included, with its
    report)."""
    given = random_inputs(compiled.inputs, seed=seed) if inputs is None else inputs
    arrays = compiled.runner.check_inputs(given)
    project = _project(compiled)
    with tempfile.TemporaryDirectory(prefix="edgebyoc-cproject-") as scratch:
        if binary is None:
            binary = _make(project, directory or scratch, sanitize)
        try:
            outputs = project.run_binary(binary, arrays)
        except RuntimeError as err:
            raise EdgebyocError(f"the C project's harness failed: {err}") from err
    return {spec.name: value for spec, value in zip(compiled.outputs, outputs)}


def check_c_project(compiled, inputs: Any = None, directory: str | Path | None = None,
                    sanitize: bool = True, seed: int = 0,
                    rtol: float = 1e-5) -> Mapping[str, float]:
    """Run the C project (``run_c_project``) and compare it with ``compiled.run`` on the same
    inputs: integer outputs bit-exactly, float ones within ``rtol`` of the largest reference
    value. Returns output name -> max absolute difference; raises ``VerificationError``
    naming the output that differs."""
    given = random_inputs(compiled.inputs, seed=seed) if inputs is None else inputs
    expected = compiled.run(given)
    got = run_c_project(compiled, given, directory=directory, sanitize=sanitize)
    errors = {}
    for name, want in expected.items():
        want, have = np.asarray(want), np.asarray(got[name])
        if want.shape != have.shape:
            raise VerificationError(f"output {name!r}: the C project gives shape "
                                    f"{list(have.shape)}, the artifact {list(want.shape)}")
        error = float(np.max(np.abs(have.astype(np.float64) - want.astype(np.float64)),
                             initial=0.0))
        errors[name] = error
        if want.dtype.kind in "biu":
            if error != 0:
                raise VerificationError(f"output {name!r}: the C project is not bit-exact "
                                        f"with the artifact (max difference {error:g})")
        elif error > rtol * max(float(np.max(np.abs(want), initial=0.0)), 1e-30):
            raise VerificationError(f"output {name!r}: the C project differs from the "
                                    f"artifact by {error:.3g} (more than {rtol:g} of the "
                                    f"largest value)")
    return errors
