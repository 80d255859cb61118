/* edgebyoc host emulation of a MATCH-style execution module: the `host` flavour every MATCH
 * plugin can bind its generic layer APIs to (edgebyoc.api.match.host_binding).
 *
 * - L1 is an arena with a stack allocator, each layer limited to EDGEBYOC_L1_BYTES (its
 *   module's L1: define it before including this header; the binding header the core writes
 *   does): an over-subscribed schedule fails instead of silently using more memory. In a C
 *   project (EDGEBYOC_HOST_L1_SHARED, set by its Makefile) every layer shares one L1, defined
 *   once in bindings/host/edgebyoc_host_l1.c and sized by the target's largest module L1, so
 *   the build's RAM is what the device needs; otherwise (a region compiled on its own) the
 *   translation unit has a static L1 of its own;
 * - DMA transfers are memcpy-based 3D strided copies, complete on return (waits are no-ops);
 * - the tile kernels compute with the accelerator's integer arithmetic as the layer
 *   description states it: requantization rounding (`rounding`), weights' channel stride
 *   (`w_cstride`, e.g. input channels padded to 16) and channel interleave (`w_block`),
 *   activations channels-last or in channel planes, whole or cut in rows (`act_layout`),
 *   TFLite's int8 ADD, average pooling that rounds half away from zero as TFLite does.
 * Plain C99 (also valid C++); every function is static, one copy per translation unit. */
#ifndef EDGEBYOC_MATCH_HOST_H
#define EDGEBYOC_MATCH_HOST_H
#include <string.h>
#include "edgebyoc_match.h"

#ifndef EDGEBYOC_L1_BYTES
#define EDGEBYOC_L1_BYTES (128 * 1024)
#endif

#ifdef EDGEBYOC_HOST_L1_SHARED
extern unsigned char edgebyoc_host_l1[];
extern size_t edgebyoc_host_l1_top;
extern const size_t edgebyoc_host_l1_capacity;
#define EDGEBYOC_HOST_L1_LIMIT \
  (EDGEBYOC_L1_BYTES < edgebyoc_host_l1_capacity ? EDGEBYOC_L1_BYTES : edgebyoc_host_l1_capacity)
#else
static unsigned char edgebyoc_host_l1[EDGEBYOC_L1_BYTES] __attribute__((aligned(8)));
static size_t edgebyoc_host_l1_top = 0;
#define EDGEBYOC_HOST_L1_LIMIT ((size_t)EDGEBYOC_L1_BYTES)
#endif

static inline void edgebyoc_host_setup(void) {}
static inline void edgebyoc_host_shutdown(void) {}

static inline void* edgebyoc_host_l1_alloc(size_t bytes) {
  size_t size = (bytes + 7u) & ~(size_t)7u;
  void* p;
  if (edgebyoc_host_l1_top > EDGEBYOC_HOST_L1_LIMIT ||
      size > EDGEBYOC_HOST_L1_LIMIT - edgebyoc_host_l1_top) return NULL;
  p = edgebyoc_host_l1 + edgebyoc_host_l1_top;
  edgebyoc_host_l1_top += size;
  return p;
}

static inline void edgebyoc_host_l1_free(void* p) { /* stack order: everything above p */
  edgebyoc_host_l1_top = (size_t)((unsigned char*)p - edgebyoc_host_l1);
}

/* n0 x n1 runs of `bytes` contiguous bytes, with strides (in bytes) per dimension */
static inline int edgebyoc_host_dma_copy_3d(void* dst, const void* src, int n0, int n1,
                                            int bytes, int dst_s0, int dst_s1, int src_s0,
                                            int src_s1) {
  int i, j;
  for (i = 0; i < n0; ++i)
    for (j = 0; j < n1; ++j)
      memcpy((unsigned char*)dst + (size_t)i * dst_s0 + (size_t)j * dst_s1,
             (const unsigned char*)src + (size_t)i * src_s0 + (size_t)j * src_s1, (size_t)bytes);
  return 0;
}

static inline void edgebyoc_host_dma_wait(int transfer) { (void)transfer; }
static inline void edgebyoc_host_compute_wait(void) {}

/* the input value at absolute (iy, ix, channel c), 0 after zero-point removal in the padding */
static inline int32_t edgebyoc_host_input(const edgebyoc_layer_t* L, const int8_t* in,
                                          edgebyoc_box_t ib, int iy, int ix, int c) {
  if (iy < 0 || ix < 0 || iy >= L->IY || ix >= L->IX) return 0;
  return (int32_t)in[edgebyoc_box_offset(L, ib, iy, ix, c)] - L->zp_in;
}

/* one tile of a convolution / depthwise / dense layer */
static inline int edgebyoc_host_mac_tile(const edgebyoc_layer_t* L, const int8_t* in,
                                         edgebyoc_box_t ib, const int8_t* w, const int32_t* bias,
                                         const int32_t* mult, const int32_t* shift,
                                         edgebyoc_box_t wb, int8_t* out, edgebyoc_box_t ob,
                                         edgebyoc_box_t t) {
  int k, oy, ox, fy, fx, c;
  int depthwise = L->kind == EDGEBYOC_DEPTHWISE;
  int cin = depthwise ? 1 : L->C;
  int cstride = L->w_cstride, block = L->w_block > 1 ? L->w_block : 1;
  /* the weights in L1 start at the block of wb.k0 (whole blocks are copied) */
  int w_first = edgebyoc_weight_block_start(L, wb.k0);
  for (oy = t.y0; oy < t.y0 + t.ny; ++oy)
    for (ox = t.x0; ox < t.x0 + t.nx; ++ox)
      for (k = t.k0; k < t.k0 + t.nk; ++k) {
        int j = (k - w_first) % block;
        const int8_t* wk = w + (size_t)((k - w_first) / block) * block * L->FY * L->FX * cstride;
        int64_t acc = 0;
        for (fy = 0; fy < L->FY; ++fy)
          for (fx = 0; fx < L->FX; ++fx) {
            int iy = oy * L->sy - L->pad_top + fy, ix = ox * L->sx - L->pad_left + fx;
            const int8_t* wp = wk + (size_t)(fy * L->FX + fx) * cstride * block + j;
            if (depthwise) {
              acc += (int64_t)edgebyoc_host_input(L, in, ib, iy, ix, k) * wp[0];
            } else {
              for (c = 0; c < cin; ++c)
                acc += (int64_t)edgebyoc_host_input(L, in, ib, iy, ix, c) * wp[(size_t)c * block];
            }
          }
        acc += bias[k - wb.k0];
        out[edgebyoc_box_offset(L, ob, oy, ox, k)] =
            edgebyoc_requantize(acc, mult[k - wb.k0], shift[k - wb.k0], L, L->rounding);
      }
  return 0;
}

/* the partial-sum API (edgebyoc_partial_kernel_t) of the emulated module: input channels
 * c0..c0+nc of a convolution or dense tile into the int32 accumulator, requantized after
 * the last slice; -1 for another kind */
static inline int edgebyoc_host_kernel_partial(const edgebyoc_layer_t* L, const int8_t* in,
                                               edgebyoc_box_t ib, const int8_t* w, int w_c0,
                                               int w_cstride, const int32_t* bias,
                                               const int32_t* mult, const int32_t* shift,
                                               edgebyoc_box_t wb, int32_t* acc, int c0, int nc,
                                               int first, int last, int8_t* out,
                                               edgebyoc_box_t ob, edgebyoc_box_t t) {
  int k, oy, ox, fy, fx, c;
  int block = L->w_block > 1 ? L->w_block : 1;
  int w_first = edgebyoc_weight_block_start(L, wb.k0);
  if (L->kind != EDGEBYOC_CONV2D && L->kind != EDGEBYOC_DENSE) return -1;
  if (c0 < ib.k0 || c0 + nc > ib.k0 + ib.nk || c0 < w_c0) return -1;
  for (oy = t.y0; oy < t.y0 + t.ny; ++oy)
    for (ox = t.x0; ox < t.x0 + t.nx; ++ox)
      for (k = t.k0; k < t.k0 + t.nk; ++k) {
        int32_t* a = acc + ((size_t)(oy - t.y0) * t.nx + (size_t)(ox - t.x0)) * t.nk + (k - t.k0);
        int j = (k - w_first) % block;
        const int8_t* wk = w + (size_t)((k - w_first) / block) * block * L->FY * L->FX * w_cstride;
        int64_t sum = first ? 0 : *a;
        for (fy = 0; fy < L->FY; ++fy)
          for (fx = 0; fx < L->FX; ++fx) {
            int iy = oy * L->sy - L->pad_top + fy, ix = ox * L->sx - L->pad_left + fx;
            const int8_t* wp = wk + (size_t)(fy * L->FX + fx) * w_cstride * block + j;
            for (c = c0; c < c0 + nc; ++c)
              sum += (int64_t)edgebyoc_host_input(L, in, ib, iy, ix, c) * wp[(size_t)(c - w_c0) * block];
          }
        if (last) {
          out[edgebyoc_box_offset(L, ob, oy, ox, k)] = edgebyoc_requantize(
              sum + bias[k - wb.k0], mult[k - wb.k0], shift[k - wb.k0], L, L->rounding);
        } else {
          *a = (int32_t)sum;
        }
      }
  return 0;
}

static inline int edgebyoc_host_add_tile(const edgebyoc_layer_t* L, const int8_t* a,
                                         const int8_t* b, edgebyoc_box_t ib, int8_t* out,
                                         edgebyoc_box_t ob, edgebyoc_box_t t) {
  int k, oy, ox;
  for (oy = t.y0; oy < t.y0 + t.ny; ++oy)
    for (ox = t.x0; ox < t.x0 + t.nx; ++ox)
      for (k = t.k0; k < t.k0 + t.nk; ++k) {
        size_t i = edgebyoc_box_offset(L, ib, oy, ox, k);
        out[edgebyoc_box_offset(L, ob, oy, ox, k)] =
            edgebyoc_quantized_add(a[i], b[i], L->add_params);
      }
  return 0;
}

/* one tile of an int8 average pooling: window sums divided rounding half away from zero, as
 * TFLite (and TFLite Micro) do */
static inline int edgebyoc_host_avg_pool_tile(const edgebyoc_layer_t* L, const int8_t* in,
                                              edgebyoc_box_t ib, int8_t* out, edgebyoc_box_t ob,
                                              edgebyoc_box_t t) {
  int k, oy, ox, fy, fx;
  for (oy = t.y0; oy < t.y0 + t.ny; ++oy)
    for (ox = t.x0; ox < t.x0 + t.nx; ++ox)
      for (k = t.k0; k < t.k0 + t.nk; ++k) {
        int32_t sum = 0;
        for (fy = 0; fy < L->FY; ++fy)
          for (fx = 0; fx < L->FX; ++fx) {
            int iy = oy * L->sy + fy, ix = ox * L->sx + fx;
            sum += in[edgebyoc_box_offset(L, ib, iy, ix, k)];
          }
        out[edgebyoc_box_offset(L, ob, oy, ox, k)] =
            (int8_t)edgebyoc_round_div(sum, L->FY * L->FX);
      }
  return 0;
}

/* the computation API (edgebyoc_tile_kernel_t) of the emulated module: one output tile of
 * any of the core's layer kinds; -1 for a kind it does not know */
static inline int edgebyoc_host_kernel(const edgebyoc_layer_t* L, const int8_t* in,
                                       edgebyoc_box_t ib, const int8_t* in2, const int8_t* w,
                                       const int32_t* bias, const int32_t* mult,
                                       const int32_t* shift, edgebyoc_box_t wb, int8_t* out,
                                       edgebyoc_box_t ob, edgebyoc_box_t t) {
  switch (L->kind) {
    case EDGEBYOC_CONV2D:
    case EDGEBYOC_DEPTHWISE:
    case EDGEBYOC_DENSE:
      return edgebyoc_host_mac_tile(L, in, ib, w, bias, mult, shift, wb, out, ob, t);
    case EDGEBYOC_ADD: return edgebyoc_host_add_tile(L, in, in2, ib, out, ob, t);
    case EDGEBYOC_AVG_POOL: return edgebyoc_host_avg_pool_tile(L, in, ib, out, ob, t);
    default: return -1;
  }
}
#endif
