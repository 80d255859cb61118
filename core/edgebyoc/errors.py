"""The errors edgebyoc raises. Each names the thing at fault and the reason, on one line.

The command line prints ``error: <message>`` and exits non-zero for any ``EdgebyocError``; the
traceback is shown only with ``--debug``.
"""


class EdgebyocError(Exception):
    """Base class: a user-facing failure with a complete one-line explanation."""


class ModelLoadError(EdgebyocError):
    """The model file cannot be read or parsed (missing, empty, truncated, corrupted)."""


class UnsupportedModelError(EdgebyocError):
    """The model is well formed but uses something the pipeline cannot compile."""


class PluginError(EdgebyocError):
    """A plugin failed to load or broke the contract (raised in strict mode)."""


class TargetError(EdgebyocError):
    """Unknown, unavailable or misconfigured target."""


class CompileError(EdgebyocError):
    """A pipeline stage failed on a model the frontend accepted."""


class ArtifactError(EdgebyocError):
    """An artifact directory is missing, incomplete or fails its integrity check."""


class InputError(EdgebyocError):
    """Run-time inputs do not match the model's inputs (names, shapes, dtypes)."""


class VerificationError(EdgebyocError):
    """A compiled model's outputs differ from the reference beyond the tolerance."""


def first_line(err: BaseException) -> str:
    """The most informative single line of an exception message (TVM puts it last)."""
    lines = [line.strip() for line in str(err).strip().splitlines() if line.strip()]
    if not lines:
        return type(err).__name__
    for line in reversed(lines):
        if not line.startswith(("File ", "Traceback", "^", "[bt]", "Stack trace")):
            return line
    return lines[-1]
