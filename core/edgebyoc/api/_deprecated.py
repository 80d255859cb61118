"""Names the plugin API exported until 2.3 and no longer lists (API 2.4 trimmed it to what
plugins use). They stay importable through every 2.x version, with a ``DeprecationWarning``
that names where the thing lives now, so a plugin written against 2.3 keeps loading; 3.0
removes them.

Each API module ends with ``__getattr__ = deprecated_names(__name__, {...})``: a module-level
``__getattr__`` (PEP 562) called only for names the module does not define.
"""

from __future__ import annotations

import importlib
import warnings
from typing import Any, Callable, Mapping


def deprecated_names(module: str, moved: Mapping[str, str]) -> Callable[[str], Any]:
    """A module ``__getattr__`` resolving each name of ``moved`` (name -> ``"package.module"``
    of the core where it is defined) with a ``DeprecationWarning``; ``AttributeError`` for any
    other name."""

    def __getattr__(name: str) -> Any:
        if name not in moved:
            raise AttributeError(f"module {module!r} has no attribute {name!r}")
        warnings.warn(f"{module}.{name} is not part of the plugin API since 2.4 (a core "
                      f"internal, {moved[name]}.{name}); it stays importable until 3.0",
                      DeprecationWarning, stacklevel=2)
        return getattr(importlib.import_module(moved[name]), name)

    return __getattr__
