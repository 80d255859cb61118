/* Declarations of the GAP9 SDK calls the `soc` binding uses (PMSIS cluster DMA, L1 allocator,
 * team barrier; the NE16 driver), for a compile-only check of the generated code on a machine
 * without the SDK. Nothing here runs. */
#ifndef EDGEBYOC_TEST_PMSIS_STUB_H
#define EDGEBYOC_TEST_PMSIS_STUB_H
#include <stddef.h>
#include <stdint.h>

typedef enum { PI_CL_DMA_DIR_LOC2EXT = 0, PI_CL_DMA_DIR_EXT2LOC = 1 } pi_cl_dma_dir_e;
typedef struct { uint32_t id; } pi_cl_dma_cmd_t;

void* pi_cl_l1_malloc(void* cluster, uint32_t size);
void pi_cl_l1_free(void* cluster, void* chunk, uint32_t size);
void pi_cl_dma_cmd(uint32_t ext, uint32_t loc, uint32_t size, pi_cl_dma_dir_e dir,
                   pi_cl_dma_cmd_t* cmd);
void pi_cl_dma_cmd_2d(uint32_t ext, uint32_t loc, uint32_t size, uint32_t stride,
                      uint32_t length, pi_cl_dma_dir_e dir, pi_cl_dma_cmd_t* cmd);
void pi_cl_dma_wait(pi_cl_dma_cmd_t* cmd);
void pi_cl_team_barrier(void);
void ne16_soft_clear(void);
void ne16_wait_job_done(void);
#endif
