/* DIANA `host` binding of the analog in-memory-computing array: the core's host emulation
 * (L1 arena, memcpy DMA) with the array's arithmetic as edgebyoc models it:
 *
 *   - weights are ternary: a weight outside -1 / 0 / +1 cannot be programmed (the kernel fails
 *     with -3 instead of computing something else);
 *   - the array holds 1152 rows (C * FY * FX, in OHWI order) by 512 columns (output channels);
 *     a layer with more rows runs in passes of 1152 rows;
 *   - each pass sums (input - zero point) * weight down every column exactly, as an ideal
 *     analog column and ADC would (DIANA's ADC quantizes the column sums; no public model of
 *     it exists, so none is applied), and the digital periphery adds the passes in int32;
 *   - bias, TFLite's requantization and the clamp follow, as on the digital array.
 * No floating point anywhere. */
#ifndef DIANA_ANALOG_HOST_H
#define DIANA_ANALOG_HOST_H
#include "edgebyoc_match_host.h"

#define DIANA_AIMC_ROWS 1152
#define DIANA_AIMC_COLUMNS 512

static inline int diana_host_analog_kernel(const edgebyoc_layer_t* L, const int8_t* in,
                                           edgebyoc_box_t ib, const int8_t* in2,
                                           const int8_t* w, const int32_t* bias,
                                           const int32_t* mult, const int32_t* shift,
                                           edgebyoc_box_t wb, int8_t* out, edgebyoc_box_t ob,
                                           edgebyoc_box_t t) {
  int k, oy, ox, r, r0;
  const int rows = L->C * L->FY * L->FX;
  (void)in2;
  if (L->kind != EDGEBYOC_CONV2D && L->kind != EDGEBYOC_DENSE) return -1;
  for (k = t.k0; k < t.k0 + t.nk; ++k)
    for (r = 0; r < rows; ++r) {
      int8_t v = w[(size_t)(k - wb.k0) * rows + r];
      if (v < -1 || v > 1) return -3;
    }
  for (oy = t.y0; oy < t.y0 + t.ny; ++oy)
    for (ox = t.x0; ox < t.x0 + t.nx; ++ox)
      for (k = t.k0; k < t.k0 + t.nk; ++k) {
        const int8_t* wk = w + (size_t)(k - wb.k0) * rows;
        int32_t acc = 0;
        for (r0 = 0; r0 < rows; r0 += DIANA_AIMC_ROWS) { /* one pass of the array */
          int32_t column = 0;
          for (r = r0; r < rows && r < r0 + DIANA_AIMC_ROWS; ++r) {
            int c = r % L->C, fx = (r / L->C) % L->FX, fy = r / (L->C * L->FX);
            int iy = oy * L->sy - L->pad_top + fy, ix = ox * L->sx - L->pad_left + fx;
            column += edgebyoc_host_input(L, in, ib, iy, ix, c) * wk[r];
          }
          acc += column;
        }
        out[edgebyoc_box_offset(L, ob, oy, ox, k)] =
            edgebyoc_requantize((int64_t)acc + bias[k - wb.k0], mult[k - wb.k0],
                                shift[k - wb.k0], L, L->rounding);
      }
  return 0;
}
#endif
