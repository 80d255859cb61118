/* Instructions a bare-metal run executes, as QEMU counts them with -icount shift=0 (one
 * instruction per virtual nanosecond; the Makefile's run-qemu and edgebyoc's --qemu run so):
 * RISC-V's minstret counts them exactly; on Cortex-M SysTick counts the board's processor
 * clock, EDGEBYOC_SYSTICK_PS picoseconds a tick (mps2-an386: 25 MHz, 40,000; mps3-an547:
 * 32 MHz, 31,250), so instructions = ticks x that / 1000, to 40 instructions; its wraps
 * (every 2^24 ticks) are counted by its interrupt (edgebyoc_systick in edgebyoc_startup.c).
 * Without -icount the figures are meaningless. */
#ifndef EDGEBYOC_COUNTER_H
#define EDGEBYOC_COUNTER_H
#include <stdint.h>

#if defined(__riscv)
static inline void edgebyoc_counter_start(void) {}

static inline uint64_t edgebyoc_instructions(void) {
  uint32_t high, low, again;
  do {
    __asm__ volatile(".option push\n.option arch, +zicsr\n"
                     "csrr %0, minstreth\ncsrr %1, minstret\ncsrr %2, minstreth\n.option pop"
                     : "=r"(high), "=r"(low), "=r"(again));
  } while (high != again);
  return ((uint64_t)high << 32) | low;
}
#elif defined(__arm__)
#ifndef EDGEBYOC_SYSTICK_PS
#error "EDGEBYOC_SYSTICK_PS: the picoseconds of a SysTick tick on the board (see the Makefile)"
#endif
#define EDGEBYOC_SYST_CSR (*(volatile uint32_t*)0xE000E010u)
#define EDGEBYOC_SYST_RVR (*(volatile uint32_t*)0xE000E014u)
#define EDGEBYOC_SYST_CVR (*(volatile uint32_t*)0xE000E018u)
#define EDGEBYOC_SYSTICK_PERIOD (1u << 24)
extern volatile uint32_t edgebyoc_systick_wraps;

static inline void edgebyoc_counter_start(void) {
  EDGEBYOC_SYST_RVR = EDGEBYOC_SYSTICK_PERIOD - 1u;
  EDGEBYOC_SYST_CVR = 0u;
  EDGEBYOC_SYST_CSR = 7u; /* enabled, interrupt on reaching 0, processor clock */
  while (EDGEBYOC_SYST_CVR == 0u) {
  } /* the first tick loads the reload value */
}

static inline uint64_t edgebyoc_instructions(void) {
  uint32_t wraps, value;
  uint64_t ticks;
  do {
    wraps = edgebyoc_systick_wraps;
    value = EDGEBYOC_SYST_CVR;
  } while (wraps != edgebyoc_systick_wraps);
  /* the interrupt counts a wrap on reaching 0, one tick before the reload */
  ticks = (uint64_t)wraps * EDGEBYOC_SYSTICK_PERIOD + (EDGEBYOC_SYSTICK_PERIOD - 1u - value);
  if (value == 0u) ticks -= EDGEBYOC_SYSTICK_PERIOD;
  return ticks * (uint64_t)EDGEBYOC_SYSTICK_PS / 1000u;
}
#endif
#endif
