/* GAP9 `soc` binding: the generic layer APIs on the GAP9 SDK (PMSIS cluster DMA, team fork,
 * NE16 job programming). Compiled only with the vendor SDK (not available on this machine). */
#ifndef GAP9_SOC_H
#define GAP9_SOC_H
#include "pmsis.h"
#include "edgebyoc_match.h"

static inline void* gap9_soc_l1_alloc(size_t bytes) { return pi_cl_l1_malloc(NULL, bytes); }
static inline void gap9_soc_l1_free(void* p) { pi_cl_l1_free(NULL, p, 0); }

/* a 3D transfer as n0 cluster-DMA 2D commands (rows of n1 chunks of `bytes`) */
static inline int gap9_soc_dma_copy_3d(void* dst, const void* src, int n0, int n1, int bytes,
                                       int dst_s0, int dst_s1, int src_s0, int src_s1) {
  static pi_cl_dma_cmd_t cmd[2];
  static int next = 0;
  int i, id = next;
  for (i = 0; i < n0; ++i) {
    int contiguous = (n1 == 1 || (dst_s1 == bytes && src_s1 == bytes));
    if (contiguous)
      pi_cl_dma_cmd((uint32_t)((const char*)src + i * src_s0), (uint32_t)((char*)dst + i * dst_s0),
                    (uint32_t)(n1 * bytes), PI_CL_DMA_DIR_EXT2LOC, &cmd[id]);
    else
      pi_cl_dma_cmd_2d((uint32_t)((const char*)src + i * src_s0), (uint32_t)((char*)dst + i * dst_s0),
                       (uint32_t)(n1 * bytes), (uint32_t)src_s1, (uint32_t)bytes,
                       PI_CL_DMA_DIR_EXT2LOC, &cmd[id]);
  }
  next ^= 1;
  return id;
}
static inline void gap9_soc_dma_wait(int transfer) { if (transfer >= 0) pi_cl_dma_wait(NULL); }

static inline void gap9_soc_cluster_open(void) {}
static inline void gap9_soc_cluster_close(void) {}
static inline void gap9_soc_cluster_wait(void) { pi_cl_team_barrier(); }
/* PULP-NN-style kernels, forked over the 8 cores (pi_cl_team_fork) */
int gap9_soc_cluster_kernel(const edgebyoc_layer_t* L, const int8_t* in, edgebyoc_box_t ib,
                            const int8_t* in2, const int8_t* w, const int32_t* bias,
                            const int32_t* mult, const int32_t* shift, edgebyoc_box_t wb,
                            int8_t* out, edgebyoc_box_t ob, edgebyoc_box_t t);

static inline void gap9_soc_ne16_open(void) { ne16_soft_clear(); }
static inline void gap9_soc_ne16_close(void) {}
static inline void gap9_soc_ne16_wait(void) { ne16_wait_job_done(); }
/* programs one NE16 job (registers, weight/input/output pointers and strides) and triggers it */
int gap9_soc_ne16_kernel(const edgebyoc_layer_t* L, const int8_t* in, edgebyoc_box_t ib,
                         const int8_t* in2, const int8_t* w, const int32_t* bias,
                         const int32_t* mult, const int32_t* shift, edgebyoc_box_t wb,
                         int8_t* out, edgebyoc_box_t ob, edgebyoc_box_t t);
#endif
