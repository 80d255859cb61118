"""The machine's memory as a bound on the work edgebyoc starts.

A model can ask for more memory than the machine has: a 40 GB ``ConstantOfShape`` that
constant folding would materialise, an activation peak of hundreds of GB that only shows when
the model runs. Such work is refused before it starts, with the figure and the way out,
instead of ending in ``MemoryError`` or ``std::bad_alloc`` half-way:

- ``memory_limit()``: the bytes one compile or run may plan for: the machine's available
  memory (``MemAvailable`` of ``/proc/meminfo``, else the physical memory), or the value of
  ``EDGEBYOC_MAX_MEMORY`` (a size like ``64GB``, or ``unlimited``), which the command line's
  ``--max-memory`` sets;
- ``check_memory(what, nbytes)``: an ``ResourceError`` naming ``what`` when ``nbytes`` exceed the
  limit.
"""

from __future__ import annotations

import os

from .errors import EdgebyocError

ENV_MAX_MEMORY = "EDGEBYOC_MAX_MEMORY"
UNITS = {"b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
         "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40}


class ResourceError(EdgebyocError):
    """The work would need more memory (or another resource) than the machine has."""


def parse_size(text: str) -> int:
    """Bytes of a size with its unit: ``8MB``, ``4.5 MB``, ``512kB``, ``1GB``, ``1000B``
    (MB = 10^6, MiB = 2^20). A bare number is refused: ``10`` could mean bytes or MB."""
    cleaned = str(text).strip().lower().replace(" ", "")
    number = cleaned.rstrip("abgikmt")
    unit = cleaned[len(number):]
    try:
        value = float(number)
    except ValueError:
        value = -1.0
    if unit not in UNITS or not value > 0 or value == float("inf"):
        hint = " (give a unit: B, kB, MB, GB, KiB, MiB or GiB)" if not unit else ""
        raise ValueError(f"{text!r} is not a size like 8MB or 512kB{hint}")
    return int(value * UNITS[unit])


def available_memory() -> int:
    """The memory the machine can give a new allocation now, in bytes."""
    try:
        with open("/proc/meminfo") as handle:
            for line in handle:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return 2**63 - 1


def memory_limit() -> int | None:
    """The bytes a compile or run may plan for (see the module docstring); ``None``:
    unlimited."""
    setting = os.environ.get(ENV_MAX_MEMORY, "").strip()
    if setting.lower() in ("unlimited", "none", "off"):
        return None
    if setting:
        try:
            return parse_size(setting)
        except ValueError as err:
            raise ResourceError(f"{ENV_MAX_MEMORY}: {err} (or 'unlimited')") from err
    return available_memory()


def check_memory(what: str, nbytes: int) -> None:
    """``ResourceError`` when ``what`` needs more than ``memory_limit()`` bytes."""
    limit = memory_limit()
    if limit is not None and nbytes > limit:
        raise ResourceError(f"{what} needs {format_bytes(nbytes)}, more than the "
                            f"{format_bytes(limit)} "
                            f"{'allowed' if os.environ.get(ENV_MAX_MEMORY) else 'available'} "
                            f"on this machine; refusing to start it (--max-memory SIZE or "
                            f"{ENV_MAX_MEMORY}=SIZE raises the limit, 'unlimited' lifts it)")


def format_bytes(nbytes: float) -> str:
    for unit, size in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if nbytes >= size:
            return f"{nbytes / size:.1f} {unit}"
    return f"{int(nbytes)} B"


#: sched_yield calls a TVM pool thread makes waiting for its next task before it sleeps
#: (``TVM_THREAD_POOL_SPIN_COUNT``; about 0.1 ms at 0.38 us a call, measured on the 2-vCPU
#: machine of docs/performance.md)
THREAD_POOL_SPIN_COUNT = 300


def configure_thread_pool() -> None:
    """TVM sizes its thread pool once, when a kernel first runs in parallel (constant folding
    at compile time included), from ``TVM_NUM_THREADS`` or the *physical* core count (one on
    a 2-vCPU machine): unless the user set it, every logical CPU.

    Its threads wait for the next task ``TVM_THREAD_POOL_SPIN_COUNT`` times, then sleep: by
    default 300,000 ``sched_yield`` calls (a core kept busy about 0.1 s after every run); at 0
    every kernel launch wakes a sleeping thread (about 13 us on a 2-vCPU VM: SqueezeNet's 50
    kernels 2.1 -> 2.7 ms). Unless the user set it: ``THREAD_POOL_SPIN_COUNT``, enough to
    bridge the gap between two kernels of a run, asleep about 0.1 ms after it. Called where
    edgebyoc first runs TVM (``compile``, ``load``, a runner), not at import."""
    os.environ.setdefault("TVM_NUM_THREADS", str(os.cpu_count() or 1))
    os.environ.setdefault("TVM_THREAD_POOL_SPIN_COUNT", str(THREAD_POOL_SPIN_COUNT))
