/* Semihosting calls of a bare-metal edgebyoc harness (generated project, `make TARGET=...`):
 * the debugger's (here QEMU's) file and console services, the Arm semihosting specification's
 * operations, trapped by `bkpt 0xAB` on Cortex-M and by the slli/ebreak/srai sequence on
 * RISC-V (edgebyoc_semihost_trap in edgebyoc_startup.c). Plain C99; no libc stdio. */
#ifndef EDGEBYOC_SEMIHOST_H
#define EDGEBYOC_SEMIHOST_H
#include <stddef.h>
#include <stdint.h>

#define EDGEBYOC_SYS_OPEN 0x01
#define EDGEBYOC_SYS_CLOSE 0x02
#define EDGEBYOC_SYS_WRITE0 0x04
#define EDGEBYOC_SYS_WRITE 0x05
#define EDGEBYOC_SYS_READ 0x06
#define EDGEBYOC_SYS_FLEN 0x0C
#define EDGEBYOC_SYS_GET_CMDLINE 0x15
#define EDGEBYOC_SYS_EXIT_EXTENDED 0x20
#define EDGEBYOC_ADP_STOPPED_APPLICATION_EXIT 0x20026

static inline intptr_t edgebyoc_semihost(uintptr_t op, const void* argument) {
#if defined(__arm__)
  register uintptr_t r0 __asm__("r0") = op;
  register const void* r1 __asm__("r1") = argument;
  __asm__ volatile("bkpt 0xAB" : "+r"(r0) : "r"(r1) : "memory");
  return (intptr_t)r0;
#elif defined(__riscv)
  /* the trap sequence lives in mcu/edgebyoc_startup.c, aligned in a section of its own */
  extern intptr_t edgebyoc_semihost_trap(uintptr_t op, const void* argument);
  return edgebyoc_semihost_trap(op, argument);
#else
#error "edgebyoc_semihost.h: semihosting is for Arm and RISC-V bare-metal builds"
#endif
}

static inline size_t edgebyoc_strlen(const char* s) {
  size_t n = 0;
  while (s[n] != '\0') ++n;
  return n;
}

/* a message on the debugger's console (QEMU: its standard output) */
static inline void edgebyoc_print(const char* text) {
  edgebyoc_semihost(EDGEBYOC_SYS_WRITE0, text);
}

/* "<label><value>\n" on the console */
static inline void edgebyoc_print_number(const char* label, uint64_t value) {
  char text[24];
  int i = 23;
  text[i] = '\0';
  do {
    text[--i] = (char)('0' + (int)(value % 10u));
    value /= 10u;
  } while (value != 0u && i > 0);
  edgebyoc_print(label);
  edgebyoc_print(text + i);
  edgebyoc_print("\n");
}

/* mode 1 = "rb", 5 = "wb" (the specification's fopen mode table) */
static inline intptr_t edgebyoc_open(const char* path, uintptr_t mode) {
  uintptr_t block[3] = {(uintptr_t)path, mode, (uintptr_t)edgebyoc_strlen(path)};
  return edgebyoc_semihost(EDGEBYOC_SYS_OPEN, block);
}

static inline void edgebyoc_close(intptr_t handle) {
  uintptr_t block[1] = {(uintptr_t)handle};
  edgebyoc_semihost(EDGEBYOC_SYS_CLOSE, block);
}

static inline intptr_t edgebyoc_file_length(intptr_t handle) {
  uintptr_t block[1] = {(uintptr_t)handle};
  return edgebyoc_semihost(EDGEBYOC_SYS_FLEN, block);
}

/* bytes NOT transferred (0: all of them), as the specification's SYS_READ / SYS_WRITE */
static inline intptr_t edgebyoc_read(intptr_t handle, void* data, size_t bytes) {
  uintptr_t block[3] = {(uintptr_t)handle, (uintptr_t)data, (uintptr_t)bytes};
  return edgebyoc_semihost(EDGEBYOC_SYS_READ, block);
}

static inline intptr_t edgebyoc_write(intptr_t handle, const void* data, size_t bytes) {
  uintptr_t block[3] = {(uintptr_t)handle, (uintptr_t)data, (uintptr_t)bytes};
  return edgebyoc_semihost(EDGEBYOC_SYS_WRITE, block);
}

/* the command line QEMU was given (-semihosting-config ...,arg=...), NUL-terminated */
static inline int edgebyoc_command_line(char* buffer, size_t size) {
  uintptr_t block[2] = {(uintptr_t)buffer, (uintptr_t)size};
  return (int)edgebyoc_semihost(EDGEBYOC_SYS_GET_CMDLINE, block);
}

static inline void edgebyoc_exit(int status) {
  uintptr_t block[2] = {EDGEBYOC_ADP_STOPPED_APPLICATION_EXIT, (uintptr_t)(intptr_t)status};
  edgebyoc_semihost(EDGEBYOC_SYS_EXIT_EXTENDED, block);
  for (;;) {
  }
}
#endif
