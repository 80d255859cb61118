/* Start-up of a bare-metal edgebyoc build (generated project, `make TARGET=...`): Cortex-M's
 * vector table or RISC-V's entry, then in C: the FPU on (Cortex-M), .data copied from flash,
 * .bss zeroed, the stack painted, the harness run (edgebyoc_mcu_main), the stack's high-water
 * mark printed on the console ("edgebyoc-stack-bytes N") and the status returned to the
 * debugger. A fault prints one line and exits with status 3; on Cortex-M, SysTick's
 * interrupt counts the wraps of the instruction counter (edgebyoc_counter.h). The symbols
 * come from the linker script (mcu/edgebyoc_sections.ld). */
#include <stddef.h>
#include <stdint.h>
#include "edgebyoc_semihost.h"

#define EDGEBYOC_STACK_PAINT 0xEDB0C5A5u

extern uint32_t __data_load[], __data_start[], __data_end[], __bss_start[], __bss_end[];
extern uint32_t __stack_limit[], __stack_top[];
int edgebyoc_mcu_main(void);
void edgebyoc_reset(void);
void edgebyoc_fault(void);

/* the deepest stack word the run wrote, counted from the top */
static uint32_t stack_high_water(void) {
  const volatile uint32_t* word = __stack_limit;
  while (word < __stack_top && *word == EDGEBYOC_STACK_PAINT) ++word;
  return (uint32_t)((uintptr_t)__stack_top - (uintptr_t)word);
}

#if defined(__arm__)
volatile uint32_t edgebyoc_systick_wraps = 0;

void edgebyoc_systick(void);
void edgebyoc_systick(void) { edgebyoc_systick_wraps = edgebyoc_systick_wraps + 1u; }
#endif

void edgebyoc_fault(void) {
  edgebyoc_print("edgebyoc: the processor faulted\n");
  edgebyoc_exit(3);
}

void edgebyoc_reset(void) {
  volatile uint32_t* word;
  const uint32_t* source = __data_load;
  volatile uint32_t here = 0;
#if defined(__arm__) && defined(__ARM_FP)
  /* CPACR: full access to the FPU's coprocessors CP10 and CP11 */
  *(volatile uint32_t*)0xE000ED88u |= 0xFu << 20;
  __asm__ volatile("dsb\n\tisb" ::: "memory");
#endif
  for (word = __data_start; word < __data_end; ++word) *word = *source++;
  for (word = __bss_start; word < __bss_end; ++word) *word = 0u;
  /* paint up to 64 bytes below this frame */
  for (word = __stack_limit; (uintptr_t)word + 64u < (uintptr_t)&here; ++word)
    *word = EDGEBYOC_STACK_PAINT;
  here = (uint32_t)edgebyoc_mcu_main();
  edgebyoc_print_number("edgebyoc-stack-bytes ", stack_high_water());
  edgebyoc_exit((int)here);
}

#if defined(__arm__)
/* initial stack, reset, then the system exceptions: faults stop the run; SysTick counts */
__attribute__((section(".vectors"), used)) static void (*const edgebyoc_vectors[16])(void) = {
    (void (*)(void))(uintptr_t)__stack_top, edgebyoc_reset, edgebyoc_fault, edgebyoc_fault,
    edgebyoc_fault, edgebyoc_fault, edgebyoc_fault, 0, 0, 0, 0, edgebyoc_fault,
    edgebyoc_fault, 0, edgebyoc_fault, edgebyoc_systick};
#elif defined(__riscv)
/* the entry: global and thread pointers, the stack, traps to edgebyoc_fault, then C */
__asm__(".section .text.start, \"ax\", @progbits\n"
        ".globl _start\n"
        "_start:\n"
        ".option push\n.option norelax\n"
        "  la gp, __global_pointer$\n"
        ".option pop\n"
        "  la sp, __stack_top\n"
        "  la tp, __tls_base\n"
        "  la t0, edgebyoc_trap\n"
        ".option push\n.option arch, +zicsr\n"
        "  csrw mtvec, t0\n"
        ".option pop\n"
        "  j edgebyoc_reset\n"
        ".balign 4\n"
        "edgebyoc_trap:\n"
        "  la sp, __stack_top\n"
        "  j edgebyoc_fault\n"
        /* a semihosting call: the three uncompressed instructions QEMU recognises, within
           one page (a section of its own, 16-byte aligned, never relaxed) */
        ".section .text.edgebyoc_semihost, \"ax\", @progbits\n"
        ".balign 16\n"
        ".globl edgebyoc_semihost_trap\n"
        "edgebyoc_semihost_trap:\n"
        ".option push\n.option norvc\n.option norelax\n"
        "  slli zero, zero, 0x1f\n"
        "  ebreak\n"
        "  srai zero, zero, 7\n"
        "  ret\n"
        ".option pop\n"
        ".text\n");
#endif
