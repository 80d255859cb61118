/* Per-step instruction counts of a bare-metal run (`make TARGET=... PROFILE=1`): network.c
 * brackets each step it runs whole (and each depth-first chain, as its first step) with
 * EDGEBYOC_STEP_BEGIN / EDGEBYOC_STEP_END, which add the instructions it took
 * (edgebyoc_counter.h) to edgebyoc_step_instructions[step]; the harness prints them. */
#ifndef EDGEBYOC_PROFILE_H
#define EDGEBYOC_PROFILE_H
#include <stdint.h>
#include "edgebyoc_counter.h"

extern uint64_t edgebyoc_step_instructions[];
extern const int edgebyoc_profiled_steps;

#define EDGEBYOC_STEP_BEGIN(step) { const uint64_t edgebyoc_step_start = edgebyoc_instructions();
#define EDGEBYOC_STEP_END(step) \
  edgebyoc_step_instructions[step] += edgebyoc_instructions() - edgebyoc_step_start; }
#endif
