## SparDR sparse convolution for one region: feature reconstruction + CSR kernel.
## Context: symbol, g (csr.Geometry), bias (bool), relu (bool), chunk (accumulators kept in
## registers), span (the output plane over the phase width, rounded up to whole chunks).
## Arguments (region order, constants replaced): x, values, offsets, row_ptr, order, [bias], y.
#include <dlpack/dlpack.h>
#include <tvm/runtime/c_backend_api.h>
#include <stdlib.h>
#include <string.h>

#define EB_DATA(t, type) ((type*)((char*)(t)->data + (t)->byte_offset))

typedef struct {
  const float* x;            /* input, C x H x W */
  float* recon;              /* reconstructed input: C x stride phases x phase plane */
  const float* values;
  const int* offsets;
  const int* row_ptr;
  const int* order;
  const float* bias;
  float* y;                  /* output, K x OH x OW */
} ${symbol}_args;

/* Feature dataflow reconstruction: the padded input split into its stride phases, so that the
   input of every weight is one contiguous run for the whole output plane. */
static int ${symbol}_reconstruct(int task, TVMParallelGroupEnv* env, void* data) {
  ${symbol}_args* a = (${symbol}_args*)data;
  for (int c = task; c < ${g.channels}; c += env->num_task) {
    for (int py = 0; py < ${g.stride_h}; ++py) {
      for (int px = 0; px < ${g.stride_w}; ++px) {
        float* plane = a->recon + ((long)(c * ${g.stride_h} + py) * ${g.stride_w} + px) * ${g.phase_size};
        for (int i = 0; i < ${g.phase_rows}; ++i) {
          int row = i * ${g.stride_h} + py - ${g.pad_top};
          float* out = plane + i * ${g.phase_cols};
          if (row < 0 || row >= ${g.height}) {
            memset(out, 0, sizeof(float) * ${g.phase_cols});
            continue;
          }
          const float* in = a->x + ((long)c * ${g.height} + row) * ${g.width};
          for (int j = 0; j < ${g.phase_cols}; ++j) {
            int col = j * ${g.stride_w} + px - ${g.pad_left};
            out[j] = (col >= 0 && col < ${g.width}) ? in[col] : 0.0f;
          }
        }
      }
    }
  }
  return 0;
}

/* Sparse kernel: per output channel, one contiguous multiply-add run over the output plane
   (computed over the phase width; the columns past the output width are dropped) per non-zero. */
#define EB_CHUNK ${chunk}
#define EB_LANES 16
#define EB_VECTORS (EB_CHUNK / EB_LANES)
/* GCC vector extensions: 16 floats, one AVX-512 register or two AVX2 ones */
typedef float eb_vec __attribute__((vector_size(EB_LANES * sizeof(float))));

static inline eb_vec eb_load(const float* p) {
  eb_vec v;
  memcpy(&v, p, sizeof(v)); /* unaligned load */
  return v;
}

static inline eb_vec eb_splat(float x) {
  eb_vec v;
  for (int i = 0; i < EB_LANES; ++i) v[i] = x;
  return v;
}

static int ${symbol}_compute(int task, TVMParallelGroupEnv* env, void* data) {
  ${symbol}_args* a = (${symbol}_args*)data;
  /* the plane is processed in chunks small enough for the accumulators to live in registers
     while every non-zero of the channel streams its input run through them */
  const int span = ${span};
  /* TVM's workspace pool: no system allocation per call */
  float* acc = (float*)TVMBackendAllocWorkspace(kDLCPU, 0, sizeof(float) * span, kDLFloat, 32);
  if (acc == NULL) return -1;
  for (int n = task; n < ${g.out_channels}; n += env->num_task) {
    const int k = a->order[n];
% if bias:
    const float b = a->bias[k];
% else:
    const float b = 0.0f;
% endif
    const int first = a->row_ptr[k], last = a->row_ptr[k + 1];
    for (int q0 = 0; q0 < span; q0 += EB_CHUNK) {
      eb_vec block[EB_VECTORS];
      for (int v = 0; v < EB_VECTORS; ++v) block[v] = eb_splat(b);
      for (int e = first; e < last; ++e) {
        const eb_vec w = eb_splat(a->values[e]);
        const float* in = a->recon + a->offsets[e] + q0;
        for (int v = 0; v < EB_VECTORS; ++v) block[v] += w * eb_load(in + v * EB_LANES);
      }
      memcpy(acc + q0, block, sizeof(block));
    }
    float* y = a->y + (long)k * ${g.out_h} * ${g.out_w};
    for (int oy = 0; oy < ${g.out_h}; ++oy) {
      for (int ox = 0; ox < ${g.out_w}; ++ox) {
        float v = acc[oy * ${g.phase_cols} + ox];
% if relu:
        v = v > 0.0f ? v : 0.0f;
% endif
        y[oy * ${g.out_w} + ox] = v;
      }
    }
  }
  TVMBackendFreeWorkspace(kDLCPU, 0, acc);
  return 0;
}

int ${symbol}_kernel(DLTensor** t, int num_args) {
  ${symbol}_args a;
  (void)num_args;
  /* the phase planes plus a tail: the last run of a weight may read past its plane's end */
  const long recon_size = (long)${g.channels} * ${g.stride_h} * ${g.stride_w} * ${g.phase_size}
                          + ${span} + ${g.phase_cols} + ${g.kernel_w * g.dilation_w};
  a.x = EB_DATA(t[0], float);
  a.values = EB_DATA(t[1], float);
  a.offsets = EB_DATA(t[2], int);
  a.row_ptr = EB_DATA(t[3], int);
  a.order = EB_DATA(t[4], int);
% if bias:
  a.bias = EB_DATA(t[5], float);
  a.y = EB_DATA(t[6], float);
% else:
  a.bias = NULL;
  a.y = EB_DATA(t[5], float);
% endif
  const long planes = (long)${g.channels} * ${g.stride_h} * ${g.stride_w} * ${g.phase_size};
  a.recon = (float*)TVMBackendAllocWorkspace(kDLCPU, 0, sizeof(float) * recon_size, kDLFloat, 32);
  if (a.recon == NULL) return -1;
  /* the reconstruction writes every plane; only the tail read by the dropped columns needs
     zeros */
  memset(a.recon + planes, 0, sizeof(float) * (recon_size - planes));
  int status = TVMBackendParallelLaunch(${symbol}_reconstruct, &a, 0);
  if (status == 0) status = TVMBackendParallelLaunch(${symbol}_compute, &a, 0);
  TVMBackendFreeWorkspace(kDLCPU, 0, a.recon);
  return status;
}
