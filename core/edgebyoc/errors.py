"""The errors edgebyoc raises. Each names the thing at fault and the reason, on one line.

The command line prints ``error: <message>`` and exits non-zero for any ``EdgebyocError``; the
traceback is shown only with ``--debug``.
"""

import gc
import os
import re
import sys
import traceback


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


#: what the core contains when third-party (plugin) code raises it: every exception but
#: ``KeyboardInterrupt``, ``sys.exit()`` included (a plugin must not end the user's process)
PLUGIN_FAULTS = (Exception, SystemExit, GeneratorExit)


#: a C++ source location line of a TVM message (``/src/relax/op.cc:123: ...``); a message that
#: starts with a file path of the user's (``/tmp/m.onnx: not a valid ONNX file``) is kept
_SOURCE_LOCATION = re.compile(r"^/\S+:\d+")
_TVM_NOISE = "# Metadata omitted. Use show_meta=True in script() method to show it."


def first_line(err: BaseException, limit: int = 400) -> str:
    """An exception's message on one line, without traceback or location lines.

    TVM messages span several lines (a C++ location, the check, a note about omitted
    metadata); they are joined, and a very long one keeps its beginning and its end.
    """
    lines = []
    for line in str(err).replace(_TVM_NOISE, "").splitlines():
        line = line.strip()
        if line and not line.startswith(("File ", "Traceback", "^", "[bt]", "Stack trace")) \
                and not _SOURCE_LOCATION.match(line):
            lines.append(line)
    text = " ".join(lines) or type(err).__name__
    if len(text) > limit:
        text = text[: limit // 2 - 2] + " ... " + text[-(limit // 2 - 3):]
    return text


def release_tvm_frames(err: BaseException) -> None:
    """Free what a failed TVM call left behind, quietly.

    A TVM importer or pass that raises leaves its ``BlockBuilder`` open; it lives in the frames
    of the exception's traceback and, destroyed later, TVM logs "BlockBuilder destroyed with
    remaining blocks!" to stderr after our one-line error. The frames' locals are dropped here
    (the traceback itself, for ``--debug``, keeps its lines) with TVM's stderr muted.
    """
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(os.devnull, "wb") as null:
            os.dup2(null.fileno(), 2)
            traceback.clear_frames(err.__traceback__)
            gc.collect()
    finally:
        os.dup2(saved, 2)
        os.close(saved)
