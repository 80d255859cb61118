/* edgebyoc MATCH-style layer support: the layer and tile descriptions generated layer code
 * uses, and TFLite's requantization in single-shift form (see edgebyoc.quant.arith).
 * Plain C99, also valid C++. */
#ifndef EDGEBYOC_MATCH_H
#define EDGEBYOC_MATCH_H
#include <stdint.h>
#include <stddef.h>

enum { EDGEBYOC_CONV2D = 0, EDGEBYOC_DEPTHWISE = 1, EDGEBYOC_DENSE = 2, EDGEBYOC_ADD = 3,
       EDGEBYOC_AVG_POOL = 4 /* int sums divided rounding half away from zero, as TFLite */ };
enum { EDGEBYOC_ROUND_TFLITE = 0, EDGEBYOC_ROUND_HALF_UP = 1 };
/* how image activations are stored, in L2 and in L1 tile buffers alike; NHCW is channel
 * planes cut in rows, rows outermost: row y of plane c at (y * C + c) * W */
enum { EDGEBYOC_NHWC = 0 /* channels-last */, EDGEBYOC_NCHW = 1 /* channel planes */,
       EDGEBYOC_NHCW = 2 /* rows of channel planes */ };

/* one integer layer: loop dimensions, geometry and quantization; `w_cstride` is the distance
 * between two filter taps in the weights (C, or C padded to the module's channel alignment;
 * 1 for depthwise); `w_block` output channels are interleaved in the weights: with B =
 * w_block, the weights are blocks of B channels (K zero-padded to a multiple of B), block b
 * starting at b * B * FY * FX * w_cstride and holding tap t, input channel c of channel
 * b * B + j at ((t * w_cstride) + c) * B + j (B = 1: plain K-major OHWI) */
typedef struct {
  int kind, K, C, OY, OX, FY, FX, IY, IX, sy, sx, pad_top, pad_left;
  int zp_in, zp_out, low, high, rounding, w_cstride;
  const int32_t* add_params; /* TFLite ADD: m_a, s_a, m_b, s_b, m_o, s_o, zp_a, zp_b, zp_o, lo, hi */
  int w_block; /* after the fields above, so initializers written before it existed mean 0: no interleave */
  int act_layout; /* EDGEBYOC_NHWC (0, also when left out of an initializer), _NCHW or _NHCW */
} edgebyoc_layer_t;

/* a block of the output space: channels k0..k0+nk, rows y0..y0+ny, columns x0..x0+nx */
typedef struct { int k0, y0, x0, nk, ny, nx; } edgebyoc_box_t;

/* the computation API of a module: one output tile `t` from the L1 buffers of the input(s)
 * (box ib), the weights / bias / multipliers / shifts (box wb) into the output buffer (box ob);
 * 0 on success */
typedef int edgebyoc_tile_kernel_t(const edgebyoc_layer_t* L, const int8_t* in,
                                   edgebyoc_box_t ib, const int8_t* in2, const int8_t* w,
                                   const int32_t* bias, const int32_t* mult,
                                   const int32_t* shift, edgebyoc_box_t wb, int8_t* out,
                                   edgebyoc_box_t ob, edgebyoc_box_t t);

/* the computation API of a module with partial sums (ExecModule.accumulator_bits = 32), called
 * for layers whose input channels are tiled: adds the products of input channels c0..c0+nc
 * of output tile `t` to its int32 accumulator `acc` (t's block channels-last: element
 * ((y - t.y0) * t.nx + (x - t.x0)) * t.nk + (k - t.k0)), starting from zero when `first`;
 * when `last`, adds the bias and requantizes the sums into `out` (box ob) instead. The
 * input buffer (box ib) holds channels ib.k0..ib.k0+ib.nk; the weight buffer holds, from the
 * weight block of wb.k0 on, input channels w_c0.. of each output channel and filter tap with
 * a channel stride of w_cstride (a slice of C copied from L2, or all of it: w_c0 = 0,
 * w_cstride = L->w_cstride); 0 on success */
typedef int edgebyoc_partial_kernel_t(const edgebyoc_layer_t* L, const int8_t* in,
                                      edgebyoc_box_t ib, const int8_t* w, int w_c0,
                                      int w_cstride, const int32_t* bias, const int32_t* mult,
                                      const int32_t* shift, edgebyoc_box_t wb, int32_t* acc,
                                      int c0, int nc, int first, int last, int8_t* out,
                                      edgebyoc_box_t ob, edgebyoc_box_t t);

/* a band of output rows one call computes (rows y0..y1 of the whole layer), and how many rows
 * each L2 activation buffer holds: 0 (or the tensor's height) for a whole tensor, fewer for a
 * ring buffer, where row y lives at row y % ring (a depth-first C project streams chains of
 * layers through such rings, edgebyoc.codegen.cstream) */
typedef struct { int y0, y1, in_ring, in2_ring, out_ring; } edgebyoc_band_t;

/* a layer's weights kept in the module's weight memory across the calls of a depth-first
 * chain (CodegenOutput.resident_weights): while base is set (by network.c, for the chain),
 * a band call reads the weights, then their int32 bias, multipliers and shifts, there, and
 * loads them only when loaded is 0; base NULL: every call loads them into its own buffer */
typedef struct { int8_t* base; int loaded; } edgebyoc_resident_t;

/* turn the whole-layer description `L` into the band's: OY its rows, IY the input rows it
 * reads (from *in_row0 on), pad_top what is left of the top padding; -1 for an invalid band */
static inline int edgebyoc_band_layer(edgebyoc_layer_t* L, int y0, int y1, int* in_row0) {
  int first, end;
  if (y0 < 0 || y1 > L->OY || y0 >= y1) return -1;
  first = y0 * L->sy - L->pad_top;
  end = (y1 - 1) * L->sy - L->pad_top + L->FY;
  if (first < 0) first = 0;
  if (end > L->IY) end = L->IY;
  L->pad_top = L->pad_top - y0 * L->sy + first;
  L->IY = end - first;
  L->OY = y1 - y0;
  *in_row0 = first;
  return 0;
}

/* the layer as one tile of its filter sees it: filter rows fy0..fy0+nfy and columns
 * fx0..fx0+nfx as a filter of nfy x nfx taps, the padding shifted by the tile's offset (a
 * negative padding: the tile's first tap reads below the layer's first input row). A
 * schedule that tiles the filter (ExecModule.partial_sum_dims) computes each filter tile's
 * partial sums through kernel_partial with this layer and weights holding just those taps */
static inline edgebyoc_layer_t edgebyoc_filter_window(const edgebyoc_layer_t* L, int fy0,
                                                      int nfy, int fx0, int nfx) {
  edgebyoc_layer_t taps = *L;
  taps.FY = nfy; taps.FX = nfx;
  taps.pad_top = L->pad_top - fy0; taps.pad_left = L->pad_left - fx0;
  return taps;
}

/* where row `y` of a buffer holding `ring` rows (0: all) lives, and how many of `n` rows from
 * `y` on follow it before the ring wraps to its first row */
static inline void edgebyoc_ring_span(int y, int n, int ring, int* at, int* run) {
  *at = ring > 0 ? y % ring : y;
  *run = ring > 0 && *at + n > ring ? ring - *at : n;
}

/* the output block a buffer filled at loop depth `fill` covers at iteration `it`:
 * order[] lists the tiled dimensions outermost first (0: K, 1: OY, 2: OX) */
static inline edgebyoc_box_t edgebyoc_block(const edgebyoc_layer_t* L, const int* order,
                                            int depth, const int* trips, const int* tiles,
                                            int it, int fill) {
  int index[3] = {0, 0, 0}, full[3], covered[3], d;
  full[0] = L->K; full[1] = L->OY; full[2] = L->OX;
  for (d = depth - 1; d >= 0; --d) {
    index[order[d]] = it % trips[order[d]];
    it /= trips[order[d]];
  }
  for (d = 0; d < 3; ++d) covered[d] = tiles[d];
  for (d = fill; d < depth; ++d) { covered[order[d]] = full[order[d]]; index[order[d]] = 0; }
  edgebyoc_box_t box;
  box.k0 = index[0] * tiles[0]; box.y0 = index[1] * tiles[1]; box.x0 = index[2] * tiles[2];
  box.nk = covered[0]; box.ny = covered[1]; box.nx = covered[2];
  /* a loop's last tile when the tile does not divide the dimension, a band's last rows */
  if (box.k0 + box.nk > L->K) box.nk = L->K - box.k0;
  if (box.y0 + box.ny > L->OY) box.ny = L->OY - box.y0;
  if (box.x0 + box.nx > L->OX) box.nx = L->OX - box.x0;
  return box;
}

/* the offset of (row y, column x, channel c) in a buffer holding block b of an image
 * activation, in the layer's activation layout */
static inline size_t edgebyoc_box_offset(const edgebyoc_layer_t* L, edgebyoc_box_t b, int y,
                                         int x, int c) {
  if (L->act_layout == EDGEBYOC_NCHW)
    return ((size_t)(c - b.k0) * b.ny + (size_t)(y - b.y0)) * b.nx + (size_t)(x - b.x0);
  if (L->act_layout == EDGEBYOC_NHCW)
    return ((size_t)(y - b.y0) * b.nk + (size_t)(c - b.k0)) * b.nx + (size_t)(x - b.x0);
  return ((size_t)(y - b.y0) * b.nx + (size_t)(x - b.x0)) * b.nk + (size_t)(c - b.k0);
}

/* the first output channel of the weight block holding channel k */
static inline int edgebyoc_weight_block_start(const edgebyoc_layer_t* L, int k) {
  int b = L->w_block > 1 ? L->w_block : 1;
  return k / b * b;
}

/* the number of the buffer fill iteration `it` belongs to (a new fill when it changes) */
static inline int edgebyoc_fill_key(const int* order, int depth, const int* trips, int it,
                                    int fill) {
  int d, inner = 1;
  for (d = fill; d < depth; ++d) inner *= trips[order[d]];
  return it / inner;
}

/* the input rows / columns an output block reads, clipped to the image (padding is virtual) */
static inline void edgebyoc_input_rows(const edgebyoc_layer_t* L, edgebyoc_box_t out,
                                       int* y0, int* ny, int* x0, int* nx) {
  int top = out.y0 * L->sy - L->pad_top, left = out.x0 * L->sx - L->pad_left;
  int bottom = (out.y0 + out.ny - 1) * L->sy - L->pad_top + L->FY;
  int right = (out.x0 + out.nx - 1) * L->sx - L->pad_left + L->FX;
  if (top < 0) top = 0;
  if (left < 0) left = 0;
  if (bottom > L->IY) bottom = L->IY;
  if (right > L->IX) right = L->IX;
  if (L->act_layout != EDGEBYOC_NHWC && out.x0 == 0 && out.nx == L->OX) {
    /* channel planes: whole input rows (and NCHW planes) for a block as wide (and high) as
     * the output: one DMA run each, not runs short of the columns a stride skips */
    left = 0; right = L->IX;
    if (L->act_layout == EDGEBYOC_NCHW && out.y0 == 0 && out.ny == L->OY) { top = 0; bottom = L->IY; }
  }
  *y0 = top; *ny = bottom > top ? bottom - top : 0;
  *x0 = left; *nx = right > left ? right - left : 0;
}

/* TFLite's MultiplyByQuantizedMultiplier (or one-step half-up rounding), exactly */
/* v clamped to [low, high] as an int8 */
static inline int8_t edgebyoc_clamp_int8(int64_t v, int64_t low, int64_t high) {
  return (int8_t)(v < low ? low : (v > high ? high : v));
}

/* sum / count rounded half away from zero (count > 0): TFLite's integer average pooling */
static inline int64_t edgebyoc_round_div(int64_t sum, int64_t count) {
  return sum >= 0 ? (sum + count / 2) / count : -((-sum + count / 2) / count);
}

static inline int64_t edgebyoc_mbqm(int64_t x, int32_t multiplier, int32_t shift, int rounding) {
  int left = shift > 0 ? shift : 0, right = shift > 0 ? 0 : -shift, total = 31 + right;
  int64_t p = x * ((int64_t)1 << left) * (int64_t)multiplier;
  int64_t half = (int64_t)1 << (total - 1), two30 = (int64_t)1 << 30, term;
  if (rounding == EDGEBYOC_ROUND_HALF_UP) term = half;
  else if (right > 0) term = p >= 0 ? half + two30 : half - two30;
  else term = two30;
  return (p + term) >> total; /* arithmetic shift (gcc, clang) */
}

static inline int8_t edgebyoc_requantize(int64_t acc, int32_t multiplier, int32_t shift,
                                         const edgebyoc_layer_t* L, int rounding) {
  int64_t y = edgebyoc_mbqm(acc, multiplier, shift, rounding) + L->zp_out;
  if (y < L->low) y = L->low;
  if (y > L->high) y = L->high;
  return (int8_t)y;
}

static inline int8_t edgebyoc_quantized_add(int8_t a, int8_t b, const int32_t* p) {
  int64_t x = ((int64_t)a - p[6]) * ((int64_t)1 << 20), y = ((int64_t)b - p[7]) * ((int64_t)1 << 20);
  int64_t sum = edgebyoc_mbqm(x, p[0], p[1], EDGEBYOC_ROUND_TFLITE) +
                edgebyoc_mbqm(y, p[2], p[3], EDGEBYOC_ROUND_TFLITE);
  int64_t out = edgebyoc_mbqm(sum, p[4], p[5], EDGEBYOC_ROUND_TFLITE) + p[8];
  if (out < p[9]) out = p[9];
  if (out > p[10]) out = p[10];
  return (int8_t)out;
}
#endif
