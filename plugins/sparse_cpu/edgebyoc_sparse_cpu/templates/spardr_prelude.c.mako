## What every region's C source starts with, once: the includes, the tensor accessor, the
## vector type and its loads (templates/spardr_conv.c.mako, the layers, use them).
#include <dlpack/dlpack.h>
#include <tvm/runtime/c_backend_api.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>

#define EB_DATA(t, type) ((type*)((char*)(t)->data + (t)->byte_offset))

/* GCC vector extensions: 16 floats, one AVX-512 register or two AVX2 ones */
#define EB_LANES 16
#define EB_VECTORS (EB_CHUNK / EB_LANES)
typedef float eb_vec __attribute__((vector_size(EB_LANES * sizeof(float))));

static inline eb_vec eb_load(const float* p) {
  eb_vec v;
  memcpy(&v, p, sizeof(v)); /* unaligned load */
  return v;
}

/* lanes of two vectors: a shift of their concatenation (__builtin_shuffle's mask) */
typedef int eb_lanes __attribute__((vector_size(EB_LANES * sizeof(int))));

static inline eb_vec eb_load_aligned(const float* p) {
  return *(const eb_vec*)__builtin_assume_aligned(p, sizeof(eb_vec));
}

static inline eb_vec eb_splat(float x) {
  /* a scalar operand of a vector operation is broadcast (one vbroadcastss); a vector built
     lane by lane went through the stack, a 64-byte load waiting on 16 small stores */
  const eb_vec zero = {0};
  return zero + x;
}

