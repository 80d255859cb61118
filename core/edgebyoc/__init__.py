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

from .errors import EdgebyocError
from .version import __version__
from .hookspecs import hookimpl
from .pipeline import CompiledModel, compile, load  # noqa: A004
from .verify import verify

__all__ = ["CompiledModel", "EdgebyocError", "compile", "hookimpl", "load", "verify",
           "__version__"]
