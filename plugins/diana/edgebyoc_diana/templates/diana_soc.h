/* DIANA `soc` binding: the generic layer APIs on the DIANA runtime (blocking DMA between L2 and
 * the activation / weight memories, one accelerator active at a time, so no synchronization
 * calls). Declarations only: the DIANA SDK defines them; compiled only with it (this machine
 * has no SDK; tests compile-check the generated code against these declarations). */
#ifndef DIANA_SOC_H
#define DIANA_SOC_H
#include <stddef.h>
#include "edgebyoc_match.h"

void diana_digital_init(void);
void diana_digital_deinit(void);
void diana_analog_init(void);
void diana_analog_deinit(void);

/* activation L1 (and weight memory) allocation, stack order */
void* diana_l1_malloc(size_t bytes);
void diana_l1_free(void* p);

/* blocking 3D transfers: n0 x n1 runs of `bytes`, strides in bytes; returns when done */
int diana_dma_l2_to_l1(void* dst, const void* src, int n0, int n1, int bytes, int dst_s0,
                       int dst_s1, int src_s0, int src_s1);
int diana_dma_l1_to_l2(void* dst, const void* src, int n0, int n1, int bytes, int dst_s0,
                       int dst_s1, int src_s0, int src_s1);

/* one output tile on the 16x16 PE array / the analog array (programs the weights when the
 * weight block changes); 0 on success */
edgebyoc_tile_kernel_t diana_digital_layer_tile;
edgebyoc_tile_kernel_t diana_analog_layer_tile;
#endif
