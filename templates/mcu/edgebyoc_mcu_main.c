/* Bare-metal harness of a deployable edgebyoc network (generated project, `make TARGET=...`):
 * the same contract as main.c, over semihosting instead of stdio. The command line the
 * debugger passes (QEMU: -semihosting-config ...,arg=network.elf,arg=in0.bin,...) names one
 * raw binary file per input, then one per output; the inputs and outputs are static buffers
 * (or the network's arena, with io_in_arena), so the ELF's .bss is all the RAM a run needs.
 * Paths are separated by spaces and contain none. Prints the instructions the network's run
 * took ("edgebyoc-instructions N", edgebyoc_counter.h: under QEMU with -icount shift=0) and
 * with PROFILE=1 those of each step ("edgebyoc-step-instructions <step> N"). Returns 0, or a
 * non-zero status after a one-line message on the console. */
#include <stddef.h>
#include <stdint.h>
#include "network.h"
#include "edgebyoc_counter.h"
#include "edgebyoc_semihost.h"
#ifdef EDGEBYOC_PROFILE
#include "edgebyoc_profile.h"
#endif

#define EDGEBYOC_ARGUMENTS (EDGEBYOC_NETWORK_INPUTS + EDGEBYOC_NETWORK_OUTPUTS)

#ifndef EDGEBYOC_NETWORK_IO_IN_ARENA
/* the caller's input and output buffers, each 8-byte aligned */
static uint8_t edgebyoc_io[EDGEBYOC_NETWORK_IO_BYTES] __attribute__((aligned(8)));
#endif

static char edgebyoc_command[512];

static int fail(const char* what, const char* path) {
  edgebyoc_print("edgebyoc: ");
  edgebyoc_print(what);
  edgebyoc_print(path);
  edgebyoc_print("\n");
  return 1;
}

/* the command line cut in place into at most `most` words; the number of words */
static int split(char* line, char** words, int most) {
  int count = 0;
  while (*line != '\0') {
    while (*line == ' ') *line++ = '\0';
    if (*line == '\0') break;
    if (count == most) return most + 1;
    words[count++] = line;
    while (*line != '\0' && *line != ' ') ++line;
  }
  return count;
}

static int read_input(const char* path, void* data, size_t bytes) {
  intptr_t handle = edgebyoc_open(path, 1);
  int status = 0;
  if (handle < 0) return fail("cannot open ", path);
  if (edgebyoc_file_length(handle) != (intptr_t)bytes)
    status = fail("input of the wrong size: ", path);
  else if (edgebyoc_read(handle, data, bytes) != 0)
    status = fail("cannot read ", path);
  edgebyoc_close(handle);
  return status;
}

static int write_output(const char* path, const void* data, size_t bytes) {
  intptr_t handle = edgebyoc_open(path, 5);
  int status = 0;
  if (handle < 0) return fail("cannot create ", path);
  if (edgebyoc_write(handle, data, bytes) != 0) status = fail("cannot write ", path);
  edgebyoc_close(handle);
  return status;
}

int edgebyoc_mcu_main(void) {
  static const size_t in_bytes[] = EDGEBYOC_INPUT_BYTES_LIST;
  static const size_t out_bytes[] = EDGEBYOC_OUTPUT_BYTES_LIST;
  void* inputs[EDGEBYOC_NETWORK_INPUTS];
  void* outputs[EDGEBYOC_NETWORK_OUTPUTS];
  char* words[EDGEBYOC_ARGUMENTS + 1];
  int i, status;
  uint64_t started;
  if (edgebyoc_command_line(edgebyoc_command, sizeof edgebyoc_command) != 0)
    return fail("no command line from the debugger", "");
  /* words[0] is the program's name */
  if (split(edgebyoc_command, words, EDGEBYOC_ARGUMENTS + 1) != EDGEBYOC_ARGUMENTS + 1)
    return fail("usage: network.elf <input files> <output files>", "");
#ifdef EDGEBYOC_NETWORK_IO_IN_ARENA
  for (i = 0; i < EDGEBYOC_NETWORK_INPUTS; ++i) inputs[i] = edgebyoc_network_input(i);
  for (i = 0; i < EDGEBYOC_NETWORK_OUTPUTS; ++i) outputs[i] = edgebyoc_network_output(i);
#else
  {
    size_t offset = 0;
    for (i = 0; i < EDGEBYOC_NETWORK_INPUTS; ++i) {
      inputs[i] = edgebyoc_io + offset;
      offset += (in_bytes[i] + 7u) & ~(size_t)7u;
    }
    for (i = 0; i < EDGEBYOC_NETWORK_OUTPUTS; ++i) {
      outputs[i] = edgebyoc_io + offset;
      offset += (out_bytes[i] + 7u) & ~(size_t)7u;
    }
  }
#endif
  for (i = 0; i < EDGEBYOC_NETWORK_INPUTS; ++i)
    if (read_input(words[1 + i], inputs[i], in_bytes[i])) return 1;
  edgebyoc_counter_start();
  started = edgebyoc_instructions();
  status = edgebyoc_network_run((const void* const*)inputs, outputs);
  edgebyoc_print_number("edgebyoc-instructions ", edgebyoc_instructions() - started);
#ifdef EDGEBYOC_PROFILE
  for (i = 0; i < edgebyoc_profiled_steps; ++i)
    if (edgebyoc_step_instructions[i] != 0u) {
      edgebyoc_print_number("edgebyoc-step ", (uint64_t)i);
      edgebyoc_print_number("edgebyoc-step-instructions ", edgebyoc_step_instructions[i]);
    }
#endif
  if (status != 0) return fail("edgebyoc_network_run failed at a step", "");
  for (i = 0; i < EDGEBYOC_NETWORK_OUTPUTS; ++i)
    if (write_output(words[1 + EDGEBYOC_NETWORK_INPUTS + i], outputs[i], out_bytes[i]))
      return 1;
  return 0;
}
