"""The spin barrier of the parallel sliding macro-kernels (``sliding``): C functions compiled
into the host library, and the TVMScript statements that call them.

TVM's own barrier (``pragma_parallel_barrier_when_finish``) calls ``sched_yield`` at each
check, so a waiting thread notices the other's arrival a system call late (0.2-0.5 us a
barrier on the 2-core machines measured, more than a small row's work). This one spins on an
atomic counter (then yields, if another thread holds the core): about 0.1 us. A kernel's tasks
first count themselves (``joined``), so a launch of one task (``TVM_NUM_THREADS=1``) or of
more tasks than the kernel uses passes every barrier too. The kernel declares ``sync``, two
int32 zeroed before its parallel launch.
"""

from __future__ import annotations

import tvm
from tvm import tirx

#: the attribute marking a PrimFunc that calls the spin barrier (``with_sync_library``)
SYNC_ATTR = "edgebyoc.spin_barrier"


#: The spin barrier's C functions, compiled into the host library (``with_sync_library``):
#: ``edgebyoc_sync_join(sync)`` counts a task of the launch in ``sync[0]``;
#: ``edgebyoc_sync_wait(sync, generation)`` counts its arrival in ``sync[1]`` and spins (then
#: yields, if another thread holds the core) until every task has arrived ``generation``
#: times. Atomics order the rows written before a barrier before those read after it.
SYNC_JOIN, SYNC_WAIT = "edgebyoc_sync_join", "edgebyoc_sync_wait"
SYNC_SYMBOLS = (SYNC_JOIN, SYNC_WAIT)

SYNC_SOURCE = r"""
#include <stdint.h>
#include <sched.h>
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define EDGEBYOC_PAUSE() _mm_pause()
#else
#define EDGEBYOC_PAUSE() do { } while (0)
#endif

#ifdef __cplusplus
extern "C" {
#endif

int32_t edgebyoc_sync_join(int32_t* sync) {
  __atomic_fetch_add(&sync[0], 1, __ATOMIC_ACQ_REL);
  return 0;
}

int32_t edgebyoc_sync_wait(int32_t* sync, int32_t generation) {
  int32_t target = __atomic_load_n(&sync[0], __ATOMIC_ACQUIRE) * generation;
  __atomic_fetch_add(&sync[1], 1, __ATOMIC_ACQ_REL);
  for (int32_t spins = 0; __atomic_load_n(&sync[1], __ATOMIC_ACQUIRE) < target; ++spins) {
    if (spins < 2000) EDGEBYOC_PAUSE(); else sched_yield();
  }
  return 0;
}

#ifdef __cplusplus
}
#endif
"""


def joined() -> list[str]:
    """The statements every task of a parallel launch runs first: it counts itself in
    ``sync[0]`` (``SYNC_JOIN``), then TVM's barrier, after which the count is the launch's
    number of tasks (``barrier`` waits for that many)."""
    return [f'T.evaluate(T.call_extern("int32", "{SYNC_JOIN}", T.address_of(sync[0])))',
            'with T.attr(0, "pragma_parallel_barrier_when_finish", 1):',
            "    for joined in T.parallel(1):",  # TVM's barrier needs a loop to follow
            "        sync[1] = 0"]


def barrier(generation: str) -> str:
    """The spin barrier every task of the launch passes (``SYNC_WAIT``) for the
    ``generation``-th time (1, 2, ...: the same count on every task)."""
    return (f'T.evaluate(T.call_extern("int32", "{SYNC_WAIT}", T.address_of(sync[0]), '
            f'{generation}))')


def with_sync_library(mod: tvm.IRModule) -> tvm.IRModule:
    """``mod`` with the spin barrier's C source (``SYNC_SOURCE``) among its external modules
    when a kernel calls it (marked ``SYNC_ATTR``): the host library links it."""
    if not any(isinstance(func, tirx.PrimFunc) and func.attrs and SYNC_ATTR in func.attrs
               for func in mod.functions.values()):
        return mod
    create = tvm.get_global_func("runtime.CSourceModuleCreate")
    units = list(mod.attrs.get("external_mods", [])) if mod.attrs else []
    units.append(create(SYNC_SOURCE, "c", list(SYNC_SYMBOLS), []))
    return mod.with_attr("external_mods", units)
