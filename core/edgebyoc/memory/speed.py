"""How much slower a depth-first build runs than the untiled one, measured on this machine.

The automatic mode (``compile(dfs=None)``) uses a depth-first plan only when the tiled build's
run time is within ``AUTO_MAX_SLOWDOWN`` of the untiled build's (issue #17: tiling must cost no
speed by default). Both builds are run here, in interleaved rounds (one untiled run, one tiled
run, repeated: machine noise hits both alike), and the ratio of the fastest runs is the answer.

The answer is cached on disk per (both modules' structural hashes, the LLVM CPU, the thread
count): a second compile of the same model on the same machine reuses it, so it decides the
same way and makes the same artifact. The cache is ``$EDGEBYOC_CACHE_DIR/dfs_speed.json``
(default ``~/.cache/edgebyoc``); ``EDGEBYOC_CACHE_DIR=`` (empty) turns it off.
"""

from __future__ import annotations

import gc
import hashlib
import json
import os
import time
from pathlib import Path
from typing import Callable

#: the default compile uses depth-first tiling only up to this run-time ratio over untiled
AUTO_MAX_SLOWDOWN = 1.05
#: at most this many interleaved rounds (a sub-millisecond model needs many: its run times
#: are noisy), and the wall time after which no new round starts
ROUNDS, SECONDS = 400, 4.0


def cache_file() -> Path | None:
    """The disk cache of measured ratios, or ``None`` when turned off."""
    root = os.environ.get("EDGEBYOC_CACHE_DIR")
    if root == "":
        return None
    return Path(root or Path.home() / ".cache" / "edgebyoc") / "dfs_speed.json"


#: how the ratio is measured: part of every cache key, so a change of method measures anew
METHOD = "interleaved, fastest run of each, gc off"


def cache_key(*parts: object) -> str:
    """The cache key of a measurement of ``parts`` (the builds, the CPU, ...) by ``METHOD``."""
    text = "\n".join(str(p) for p in (METHOD, *parts))
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def cached_slowdown(key: str) -> float | None:
    """The ratio measured earlier for ``key`` on this machine, or ``None``."""
    value = _read(cache_file()).get(key)
    return None if value is None else float(value)


def measured_slowdown(key: str, run_untiled: Callable[[], object],
                      run_tiled: Callable[[], object], rounds: int = ROUNDS,
                      seconds: float = SECONDS, cache: bool = True) -> tuple[float, bool]:
    """(fastest tiled run time / fastest untiled run time, whether it came from the cache).

    Each callable runs its build once. One warm-up run each, then up to ``rounds``
    interleaved rounds (at least 5), no new round after ``seconds``. With ``cache`` the
    ratio is looked up first and stored after a measurement (``cache_file``).

    Example::

        >>> import time
        >>> ratio, cached = measured_slowdown("k", lambda: time.sleep(0.002),
        ...                                   lambda: time.sleep(0.004), rounds=5, cache=False)
        >>> 1.3 < ratio < 3.0, cached
        (True, False)
    """
    earlier = cached_slowdown(key) if cache else None
    if earlier is not None:
        return earlier, True
    run_untiled()
    run_tiled()
    times: dict[str, list[float]] = {"untiled": [], "tiled": []}
    # the compile's garbage would otherwise be collected during the runs (measured: up to
    # 1.5x slower sub-millisecond runs inside a compile than after it)
    gc.collect()
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        start = time.perf_counter()
        while len(times["tiled"]) < rounds and (len(times["tiled"]) < 5 or
                                                time.perf_counter() - start < seconds):
            for name, run in (("untiled", run_untiled), ("tiled", run_tiled)):
                t = time.perf_counter()
                run()
                times[name].append(time.perf_counter() - t)
    finally:
        if was_enabled:
            gc.enable()
    # the fastest run of each: what the build can do, the rest is the shared machine's noise
    # (medians of sub-millisecond runs inside a compile varied 1.07x to 1.9x, minima 1.9x)
    # rounded as stored, so a cached answer equals the measured one exactly
    ratio = round(min(times["tiled"]) / max(min(times["untiled"]), 1e-9), 4)
    path = cache_file() if cache else None
    if path is not None:
        stored = _read(path)
        stored[key] = ratio
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            temporary = path.with_suffix(f".{os.getpid()}.tmp")
            temporary.write_text(json.dumps(stored, indent=1, sort_keys=True))
            temporary.replace(path)  # atomic: a concurrent compile reads one or the other
        except OSError:
            pass  # an unwritable cache only costs the next compile a measurement
    return ratio, False


def _read(path: Path | None) -> dict:
    if path is None or not path.exists():
        return {}
    try:
        data = json.loads(path.read_text())
        return data if isinstance(data, dict) else {}
    except (OSError, ValueError):
        return {}
