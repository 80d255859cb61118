"""One compile's state: the cost cache, TVM's pattern registrations and the ``relax.ext``
codegen of the target, owned by a ``CompileSession`` and released when the compile ends.

Nothing of one compile is visible to another: two compiles for different targets, or for two
versions of a plugin, in one process share no cost, no pattern and no codegen function. TVM's
``RunCodegen`` looks the codegen up by its global name ``relax.ext.<target>``, so each compile
registers its function only while its own ``RunCodegen`` runs (``codegen``), under a lock per
name.

Two threads may call ``edgebyoc.compile`` at once, and each gets what it would alone; the
compiles themselves take turns (``TVM_LOCK``): TVM's Python Relax API keeps the block builders
being built on one process-wide stack (``relax.BlockBuilder._stack``), so two compiles
interleaved in one process would emit into each other's functions. Running compiled models
needs no turn. For compiles in parallel, use processes (``edgebyoc sweep`` does).
"""

from __future__ import annotations

import contextlib
import threading
from collections import OrderedDict
from typing import Any, Callable, Hashable, Iterator

import tvm
import tvm_ffi
from tvm.relax.backend import _ffi_api as backend_api
from tvm.relax.backend import pattern_registry

#: cost-cache entries a session keeps (least recently used ones go first)
COST_CACHE_ENTRIES = 4096

#: held by a compile, a reference build or a library export, whatever runs TVM's compiler in
#: this process (see the module docstring); re-entrant: a compile builds references too
TVM_LOCK = threading.RLock()

#: one lock per ``relax.ext.<target>`` name: a compile holds it while its codegen is registered
_CODEGEN_LOCKS: dict[str, threading.Lock] = {}
_CODEGEN_LOCKS_GUARD = threading.Lock()


def _codegen_lock(name: str) -> threading.Lock:
    with _CODEGEN_LOCKS_GUARD:
        return _CODEGEN_LOCKS.setdefault(name, threading.Lock())


class CompileSession:
    """The state of one compile for ``target`` with the plugin ``plugin`` (name, version).

    ``cost(key, compute)`` caches the cost model's answers, keyed also by the plugin's name
    and version, at most ``cache_entries`` of them; ``register_patterns`` puts the target's
    patterns into TVM's pattern registry (where ``get_patterns_with_prefix("<target>.")``
    finds them) until ``close`` (a ``with`` block closes it); ``codegen`` makes
    ``relax.ext.<target>`` for one ``RunCodegen``.
    """

    def __init__(self, target_name: str, plugin: tuple[str, str] = ("", ""),
                 cache_entries: int = COST_CACHE_ENTRIES):
        self.target_name, self.plugin = target_name, plugin
        self.cache_entries = cache_entries
        self._costs: OrderedDict[Hashable, Any] = OrderedDict()
        self._patterns: list[str] = []
        self.cost_hits = self.cost_misses = 0

    def cost(self, key: Hashable, compute: Callable[[], Any]) -> Any:
        """The cached answer for ``key`` (computed once by ``compute``)."""
        key = (self.plugin, key)
        if key in self._costs:
            self.cost_hits += 1
            self._costs.move_to_end(key)
            return self._costs[key]
        self.cost_misses += 1
        value = self._costs[key] = compute()
        if len(self._costs) > self.cache_entries:
            self._costs.popitem(last=False)
        return value

    def register_patterns(self, entries: list[tuple]) -> None:
        """Register ``(name, pattern, annotations, check)`` entries once each."""
        new = [entry for entry in entries if entry[0] not in self._patterns]
        if new:
            pattern_registry.register_patterns(new)
            self._patterns += [entry[0] for entry in new]

    @contextlib.contextmanager
    def codegen(self, function: Callable) -> Iterator[str]:
        """``function`` as TVM's ``relax.ext.<target>`` (what ``RunCodegen`` calls) for the
        duration of the block, another compile for the same target waiting meanwhile."""
        name = f"relax.ext.{self.target_name}"
        with _codegen_lock(name):
            tvm.register_global_func(name, function, override=True)
            try:
                yield name
            finally:
                tvm_ffi.remove_global_func(name)

    def close(self) -> None:
        """Remove this session's patterns from TVM."""
        if self._patterns:
            backend_api.RemovePatterns(self._patterns)
            self._patterns = []

    def __enter__(self) -> "CompileSession":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
