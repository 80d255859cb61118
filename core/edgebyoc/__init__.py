"""edgebyoc: Bring Your Own Codegen, as a pip install.

A deep-learning compiler host on Apache TVM (Relax) whose hardware targets are plugins, discovered
through the ``edgebyoc`` entry-point group and driven through the hooks of ``edgebyoc.hookspecs``.

Python API::

    import edgebyoc
    compiled = edgebyoc.compile("model.onnx", target="host")
    outputs = compiled.run({"input": x})
    compiled.save("build")
    again = edgebyoc.load("build")
"""

import os

# TVM sizes its thread pool once, from TVM_NUM_THREADS or the *physical* core count (one on a
# 2-vCPU machine); use every logical CPU unless the user says otherwise.
os.environ.setdefault("TVM_NUM_THREADS", str(os.cpu_count() or 1))

from .errors import EdgebyocError  # noqa: E402
from .version import __version__  # noqa: E402
from .hookspecs import hookimpl  # noqa: E402
from .pipeline import CompiledModel, compile, load  # noqa: E402,A004
from .verify import verify  # noqa: E402

__all__ = ["CompiledModel", "EdgebyocError", "compile", "hookimpl", "load", "verify",
           "__version__"]
