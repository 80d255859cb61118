/* GAP9 `host` binding: emulation of the cluster / NE16 platform on this machine.
 * L1 is a static arena of GAP9_L1_BYTES with a stack allocator (an over-subscribed schedule
 * fails instead of silently using more memory); DMA transfers are memcpy-based 3D strided
 * copies; the kernels compute with the accelerators' integer arithmetic (cluster: TFLite's
 * requantization; NE16: its one-step half-up rounding, input channels padded to 16). */
#ifndef GAP9_HOST_H
#define GAP9_HOST_H
#include <string.h>
#include "edgebyoc_match.h"

#ifndef GAP9_L1_BYTES
#define GAP9_L1_BYTES (128 * 1024)
#endif

static unsigned char gap9_host_l1[GAP9_L1_BYTES] __attribute__((aligned(8)));
static size_t gap9_host_l1_top = 0;

static inline void gap9_host_setup(void) {}
static inline void gap9_host_shutdown(void) {}

static inline void* gap9_host_l1_alloc(size_t bytes) {
  size_t size = (bytes + 7u) & ~(size_t)7u;
  void* p;
  if (size > GAP9_L1_BYTES - gap9_host_l1_top) return NULL;
  p = gap9_host_l1 + gap9_host_l1_top;
  gap9_host_l1_top += size;
  return p;
}

static inline void gap9_host_l1_free(void* p) { /* stack order: everything above p */
  gap9_host_l1_top = (size_t)((unsigned char*)p - gap9_host_l1);
}

/* n0 x n1 runs of `bytes` contiguous bytes, with strides (in bytes) per dimension */
static inline int gap9_host_dma_copy_3d(void* dst, const void* src, int n0, int n1, int bytes,
                                        int dst_s0, int dst_s1, int src_s0, int src_s1) {
  int i, j;
  for (i = 0; i < n0; ++i)
    for (j = 0; j < n1; ++j)
      memcpy((unsigned char*)dst + (size_t)i * dst_s0 + (size_t)j * dst_s1,
             (const unsigned char*)src + (size_t)i * src_s0 + (size_t)j * src_s1, (size_t)bytes);
  return 0;
}

static inline void gap9_host_dma_wait(int transfer) { (void)transfer; }
static inline void gap9_host_compute_wait(void) {}

/* the input value at absolute (iy, ix, channel c), 0 after zero-point removal in the padding */
static inline int32_t gap9_host_input(const edgebyoc_layer_t* L, const int8_t* in,
                                      edgebyoc_box_t ib, int iy, int ix, int c) {
  if (iy < 0 || ix < 0 || iy >= L->IY || ix >= L->IX) return 0;
  return (int32_t)in[((size_t)(iy - ib.y0) * ib.nx + (ix - ib.x0)) * ib.nk + (c - ib.k0)] - L->zp_in;
}

/* one tile of a convolution / depthwise / dense layer; `ne16` selects NE16's weight layout
 * (input channels padded to a multiple of 16) and rounding */
static inline int gap9_host_mac_tile(const edgebyoc_layer_t* L, const int8_t* in,
                                     edgebyoc_box_t ib, const int8_t* w, const int32_t* bias,
                                     const int32_t* mult, const int32_t* shift,
                                     edgebyoc_box_t wb, int8_t* out, edgebyoc_box_t ob,
                                     edgebyoc_box_t t, int ne16) {
  int k, oy, ox, fy, fx, c;
  int depthwise = L->kind == EDGEBYOC_DEPTHWISE;
  int cin = depthwise ? 1 : L->C;
  int cstride = ne16 && !depthwise ? (cin + 15) / 16 * 16 : cin;
  int rounding = ne16 ? EDGEBYOC_ROUND_HALF_UP : EDGEBYOC_ROUND_TFLITE;
  for (oy = t.y0; oy < t.y0 + t.ny; ++oy)
    for (ox = t.x0; ox < t.x0 + t.nx; ++ox)
      for (k = t.k0; k < t.k0 + t.nk; ++k) {
        const int8_t* wk = w + (size_t)(k - wb.k0) * L->FY * L->FX * cstride;
        int64_t acc = 0;
        for (fy = 0; fy < L->FY; ++fy)
          for (fx = 0; fx < L->FX; ++fx) {
            int iy = oy * L->sy - L->pad_top + fy, ix = ox * L->sx - L->pad_left + fx;
            const int8_t* wp = wk + (size_t)(fy * L->FX + fx) * cstride;
            if (depthwise) {
              acc += (int64_t)gap9_host_input(L, in, ib, iy, ix, k) * wp[0];
            } else {
              for (c = 0; c < cin; ++c) acc += (int64_t)gap9_host_input(L, in, ib, iy, ix, c) * wp[c];
            }
          }
        acc += bias[k - wb.k0];
        out[((size_t)(oy - ob.y0) * ob.nx + (ox - ob.x0)) * ob.nk + (k - ob.k0)] =
            edgebyoc_requantize(acc, mult[k - wb.k0], shift[k - wb.k0], L, rounding);
      }
  return 0;
}

static inline int gap9_host_add_tile(const edgebyoc_layer_t* L, const int8_t* a,
                                     const int8_t* b, edgebyoc_box_t ib, int8_t* out,
                                     edgebyoc_box_t ob, edgebyoc_box_t t) {
  int k, oy, ox;
  for (oy = t.y0; oy < t.y0 + t.ny; ++oy)
    for (ox = t.x0; ox < t.x0 + t.nx; ++ox)
      for (k = t.k0; k < t.k0 + t.nk; ++k) {
        size_t i = ((size_t)(oy - ib.y0) * ib.nx + (ox - ib.x0)) * ib.nk + (k - ib.k0);
        out[((size_t)(oy - ob.y0) * ob.nx + (ox - ob.x0)) * ob.nk + (k - ob.k0)] =
            edgebyoc_quantized_add(a[i], b[i], L->add_params);
      }
  return 0;
}

/* one tile of an int8 average pooling: window sums divided truncating towards zero */
static inline int gap9_host_avg_pool_tile(const edgebyoc_layer_t* L, const int8_t* in,
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
            sum += in[((size_t)(iy - ib.y0) * ib.nx + (ix - ib.x0)) * ib.nk + (k - ib.k0)];
          }
        out[((size_t)(oy - ob.y0) * ob.nx + (ox - ob.x0)) * ob.nk + (k - ob.k0)] =
            (int8_t)(sum / (L->FY * L->FX));
      }
  return 0;
}

/* the computation APIs of the two modules */
static inline int gap9_host_cluster_kernel(const edgebyoc_layer_t* L, const int8_t* in,
                                           edgebyoc_box_t ib, const int8_t* in2, const int8_t* w,
                                           const int32_t* bias, const int32_t* mult,
                                           const int32_t* shift, edgebyoc_box_t wb, int8_t* out,
                                           edgebyoc_box_t ob, edgebyoc_box_t t) {
  if (L->kind == EDGEBYOC_ADD) return gap9_host_add_tile(L, in, in2, ib, out, ob, t);
  if (L->kind == EDGEBYOC_AVG_POOL) return gap9_host_avg_pool_tile(L, in, ib, out, ob, t);
  return gap9_host_mac_tile(L, in, ib, w, bias, mult, shift, wb, out, ob, t, 0);
}

static inline int gap9_host_ne16_kernel(const edgebyoc_layer_t* L, const int8_t* in,
                                        edgebyoc_box_t ib, const int8_t* in2, const int8_t* w,
                                        const int32_t* bias, const int32_t* mult,
                                        const int32_t* shift, edgebyoc_box_t wb, int8_t* out,
                                        edgebyoc_box_t ob, edgebyoc_box_t t) {
  (void)in2;
  if (L->kind == EDGEBYOC_ADD || L->kind == EDGEBYOC_AVG_POOL) return -1;
  return gap9_host_mac_tile(L, in, ib, w, bias, mult, shift, wb, out, ob, t, 1);
}
#endif
