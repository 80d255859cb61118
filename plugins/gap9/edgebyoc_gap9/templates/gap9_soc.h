/* GAP9 `soc` binding: the generic layer APIs on the GAP9 SDK (PMSIS cluster DMA, team fork,
 * NE16 job programming). Compiled only with the vendor SDK (not available on this machine). */
#ifndef GAP9_SOC_H
#define GAP9_SOC_H
#include "pmsis.h"
#include "edgebyoc_match.h"

static inline void* gap9_soc_l1_alloc(size_t bytes) { return pi_cl_l1_malloc(NULL, bytes); }
static inline void gap9_soc_l1_free(void* p) { pi_cl_l1_free(NULL, p, 0); }

/* the cluster DMA commands in flight: one per transfer slot (transfers alternate slots) */
static pi_cl_dma_cmd_t gap9_soc_dma_cmds[2];
static int gap9_soc_dma_next = 0;

/* a 3D transfer as n0 cluster-DMA commands (1D when rows are contiguous, else 2D: n1 chunks
 * of `bytes` with the external stride); `ext` is the L2 side, `loc` the L1 side */
static inline int gap9_soc_dma_3d(void* ext, void* loc, int n0, int n1, int bytes, int ext_s0,
                                  int ext_s1, int loc_s0, int loc_s1, pi_cl_dma_dir_e dir) {
  int i, id = gap9_soc_dma_next;
  for (i = 0; i < n0; ++i) {
    uint32_t e = (uint32_t)(uintptr_t)((char*)ext + i * ext_s0);
    uint32_t l = (uint32_t)(uintptr_t)((char*)loc + i * loc_s0);
    if (n1 == 1 || (ext_s1 == bytes && loc_s1 == bytes))
      pi_cl_dma_cmd(e, l, (uint32_t)(n1 * bytes), dir, &gap9_soc_dma_cmds[id]);
    else
      pi_cl_dma_cmd_2d(e, l, (uint32_t)(n1 * bytes), (uint32_t)ext_s1, (uint32_t)bytes, dir,
                       &gap9_soc_dma_cmds[id]);
  }
  gap9_soc_dma_next ^= 1;
  return id;
}

/* L2 -> L1 (inputs, weights) and L1 -> L2 (outputs), with the generic argument order */
static inline int gap9_soc_dma_in_3d(void* dst, const void* src, int n0, int n1, int bytes,
                                     int dst_s0, int dst_s1, int src_s0, int src_s1) {
  return gap9_soc_dma_3d((void*)src, dst, n0, n1, bytes, src_s0, src_s1, dst_s0, dst_s1,
                         PI_CL_DMA_DIR_EXT2LOC);
}
static inline int gap9_soc_dma_out_3d(void* dst, const void* src, int n0, int n1, int bytes,
                                      int dst_s0, int dst_s1, int src_s0, int src_s1) {
  return gap9_soc_dma_3d(dst, (void*)src, n0, n1, bytes, dst_s0, dst_s1, src_s0, src_s1,
                         PI_CL_DMA_DIR_LOC2EXT);
}
static inline void gap9_soc_dma_wait(int transfer) {
  if (transfer >= 0) pi_cl_dma_wait(&gap9_soc_dma_cmds[transfer]);
}

static inline void gap9_soc_cluster_open(void) {}
static inline void gap9_soc_cluster_close(void) {}
static inline void gap9_soc_cluster_wait(void) { pi_cl_team_barrier(); }
/* PULP-NN-style kernels, forked over the 8 cores (pi_cl_team_fork) */
edgebyoc_tile_kernel_t gap9_soc_cluster_kernel;
/* the same over a slice of the input channels, int32 partial sums in L1 (accumulator_bits) */
edgebyoc_partial_kernel_t gap9_soc_cluster_kernel_partial;

static inline void gap9_soc_ne16_open(void) { ne16_soft_clear(); }
static inline void gap9_soc_ne16_close(void) {}
static inline void gap9_soc_ne16_wait(void) { ne16_wait_job_done(); }
/* programs one NE16 job (registers, weight/input/output pointers and strides) and triggers it */
edgebyoc_tile_kernel_t gap9_soc_ne16_kernel;
/* a job over a slice of the input channels: 32-bit partial sums streamed out and back in */
edgebyoc_partial_kernel_t gap9_soc_ne16_kernel_partial;
#endif
