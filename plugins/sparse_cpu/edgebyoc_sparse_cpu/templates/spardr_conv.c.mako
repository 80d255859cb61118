## One SparDR sparse convolution of a region (spardr_chain.c.mako runs a region's layers):
## feature reconstruction + CSR kernel, a barrier between the two.
## Context: symbol (the layer's), g (csr.Geometry), bias (bool), residual (bool: an
## element-wise tensor of the output's shape added before the ReLU, a ResNet block's
## shortcut), relu (bool), chunk (accumulators kept in registers), span (the output plane over
## the phase width, rounded up to whole chunks), direct (bool: a 1x1, stride-1, unpadded
## convolution, whose input already is its reconstruction: read in place, nothing copied),
## plane (out_h * phase_cols), recon_floats (the reconstruction buffer's floats:
## plugin.reconstruction_floats), paired_max (runs of at most this many vectors add every other
## non-zero into a second set of sums: cost.PAIRED_MAX_VECTORS), aligned (bool: runs read from
## 64-byte boundaries, a row's non-zeros grouped by shift: cost.aligned_runs, csr.to_csr),
## shifts (the groups of an aligned row: csr.SHIFTS, a vector's lanes), spatial (bool: the
## tasks share the plane's chunks instead of the output channels: cost.spatial_chunk_size).
typedef struct {
  const float* x;            /* input, C x H x W */
  float* recon;              /* reconstructed input: C x stride phases x phase plane */
  const float* values;
  const int* offsets;
  const int* row_ptr;
  const int* order;
  const float* bias;
  const float* residual;     /* added before the ReLU, K x OH x OW (or NULL) */
  float* y;                  /* output, K x OH x OW */
} ${symbol}_args;

/* Feature dataflow reconstruction: the padded input split into its stride phases (those the
   kernel reads: csr.Geometry.phases_h, phases_w), so that the input of every weight is one
   contiguous run for the whole output plane. */
% if not direct:
% if spatial:
/* the phase row where chunk n starts (the plane's rows past its last chunk: its end) */
static inline int ${symbol}_chunk_row(int n) {
  const int row = n * ${chunk} / ${g.phase_cols};
  return row < ${g.phase_rows} ? row : ${g.phase_rows};
}

% endif
static void ${symbol}_reconstruct(int task, int num_task, ${symbol}_args* a) {
  /* the planes are written below; the tail past them, read by the runs of the dropped
     columns (and the aligned runs' vector more), holds zeros */
  if (task == 0) memset(a->recon + ${g.planes_floats}, 0, sizeof(float) * ${recon_floats - g.planes_floats});
% if spatial:
  /* the tasks share the phase rows as the kernel's tasks share its chunks: each writes the
     rows where its own chunks start, every channel's (its chunks read a few rows on, the next
     task's) */
  const int chunks = ${span // chunk};
  const int row_first = ${symbol}_chunk_row(chunks * task / num_task);
  const int row_last = task + 1 == num_task ? ${g.phase_rows}
                                            : ${symbol}_chunk_row(chunks * (task + 1) / num_task);
  for (int c = 0; c < ${g.channels}; ++c) {
% else:
  const int row_first = 0, row_last = ${g.phase_rows};
  for (int c = task; c < ${g.channels}; c += num_task) {
% endif
% for ip, py in enumerate(g.phases_h):
%   for iq, px in enumerate(g.phases_w):
    {
      float* plane = a->recon + ((long)(c * ${len(g.phases_h)} + ${ip}) * ${len(g.phases_w)} + ${iq}) * ${g.plane_stride};
      for (int i = row_first; i < row_last; ++i) {
        int row = i * ${g.stride_h} + ${py} - ${g.pad_top};
        float* out = plane + i * ${g.phase_cols};
        if (row < 0 || row >= ${g.height}) {
          memset(out, 0, sizeof(float) * ${g.phase_cols});
          continue;
        }
<% lo, hi = g.inside_columns(px) %>\
% if lo > 0:
        memset(out, 0, sizeof(float) * ${lo});
% endif
% if hi > lo:
        /* the columns inside the input, without a test per column (vectorized) */
        const float* in = a->x + ((long)c * ${g.height} + row) * ${g.width} + ${lo * g.stride_w + px - g.pad_left};
        for (int j = 0; j < ${hi - lo}; ++j) out[${lo} + j] = in[j * ${g.stride_w}];
% endif
% if hi < g.phase_cols:
        memset(out + ${hi}, 0, sizeof(float) * ${g.phase_cols - hi});
% endif
      }
% if g.plane_stride > g.phase_size:
      /* up to the next plane (csr.Geometry.plane_stride): lanes read past the plane's end */
      if (row_last == ${g.phase_rows}) memset(plane + ${g.phase_size}, 0, sizeof(float) * ${g.plane_stride - g.phase_size});
% endif
    }
%   endfor
% endfor
  }
}
% endif

/* Sparse kernel: per output channel, one contiguous multiply-add run over the output plane
   (computed over the phase width; the columns past the output width are dropped) per non-zero. */
#define EB_CHUNK ${chunk}
/* the epilogue of one chunk of channel k's sums (plane positions q0.. over the phase width):
   the positions inside the output, plus the shortcut and the ReLU, into y */
static inline void ${symbol}_store(const ${symbol}_args* a, int k, int q0, const float* sums,
                                   int count) {
  float* y = a->y + (long)k * ${g.out_h * g.out_w};
% if residual:
  const float* r = a->residual + (long)k * ${g.out_h * g.out_w};
% endif
% if g.phase_cols == g.out_w:
  /* no column to drop (the phase width is the output's): the positions inside the output are
     one contiguous run of y, added and clamped without a row loop (vectorized) */
  int keep = ${g.out_h * g.out_w} - q0;
  if (keep > count) keep = count;
  float* out = y + q0;
% if residual:
  const float* add = r + q0;
% endif
  for (int j = 0; j < keep; ++j) {
    float v = sums[j];
% if residual:
    v += add[j];
% endif
% if relu:
    v = v > 0.0f ? v : 0.0f;
% endif
    out[j] = v;
  }
% else:
  /* row by row: each row's positions inside the output are one contiguous run of y */
  int oy = q0 / ${g.phase_cols}, ox = q0 - oy * ${g.phase_cols}, i = 0;
  while (i < count && oy < ${g.out_h}) {
    int run = ${g.phase_cols} - ox;
    if (run > count - i) run = count - i;
    int keep = ox < ${g.out_w} ? (ox + run > ${g.out_w} ? ${g.out_w} - ox : run) : 0;
    float* out = y + oy * ${g.out_w} + ox;
% if residual:
    const float* add = r + oy * ${g.out_w} + ox;
% endif
    for (int j = 0; j < keep; ++j) {
      float v = sums[i + j];
% if residual:
      v += add[j];
% endif
% if relu:
      v = v > 0.0f ? v : 0.0f;
% endif
      out[j] = v;
    }
    i += run;
    ox = 0;
    ++oy;
  }
% endif
}

static int ${symbol}_run(int task, TVMParallelGroupEnv* env, void* data) {
  ${symbol}_args* a = (${symbol}_args*)data;
% if direct:
  const float* src = a->x; /* a 1x1 unpadded convolution reads its input in place */
% else:
  ${symbol}_reconstruct(task, env->num_task, a);
  /* every task's planes are written before any task reads them */
  if (TVMBackendParallelBarrier(task, env) != 0) return -1;
  const float* src = a->recon;
% endif
  /* the plane is processed in chunks small enough for the accumulators to live in registers
     while every non-zero of a channel streams its input run through them; chunks outermost
     (vertical reuse): a chunk's input runs, every channel's, stay in the core's cache while
     all of this task's output channels read them, instead of the whole input streaming from
     memory again for every output channel */
<%
    # read in place, a run may not go past the input's end: whole chunks, then the rest (the
    # tail); a reconstruction has a tail to read into
    whole = plane // chunk * chunk if direct else span
    tail = plane - whole if direct else 0
    tail_vectors = -(-tail // 16)
    # the largest offset whose run of whole tail vectors stays inside the input
    tail_limit = g.channels * plane - whole - tail_vectors * 16
%>\
<%def name="accumulate(vectors, start, lo, hi)">\
% if vectors <= paired_max:
      /* few vectors a run: every other non-zero adds into a second set of sums, twice the
         multiply-adds in flight */
      {
        eb_vec other[${vectors}];
        for (int v = 0; v < ${vectors}; ++v) other[v] = eb_splat(0.0f);
        int e = ${lo};
        for (; e + 1 < ${hi}; e += 2) {
          const eb_vec w0 = eb_splat(a->values[e]), w1 = eb_splat(a->values[e + 1]);
          const float* in0 = src + a->offsets[e] + ${start};
          const float* in1 = src + a->offsets[e + 1] + ${start};
          for (int v = 0; v < ${vectors}; ++v) {
            block[v] += w0 * eb_load(in0 + v * EB_LANES);
            other[v] += w1 * eb_load(in1 + v * EB_LANES);
          }
        }
        if (e < ${hi}) {
          const eb_vec w = eb_splat(a->values[e]);
          const float* in = src + a->offsets[e] + ${start};
          for (int v = 0; v < ${vectors}; ++v) block[v] += w * eb_load(in + v * EB_LANES);
        }
        for (int v = 0; v < ${vectors}; ++v) block[v] += other[v];
      }
% else:
      for (int e = ${lo}; e < ${hi}; ++e) {
        const eb_vec w = eb_splat(a->values[e]);
        const float* in = src + a->offsets[e] + ${start};
        for (int v = 0; v < ${vectors}; ++v) block[v] += w * eb_load(in + v * EB_LANES);
      }
% endif
</%def>\
<%def name="aligned_groups(vectors)">\
      /* the row's runs by group of shift (csr.to_csr's aligned): each read from the 64-byte
         boundary below its start, a vector more, into the group's sums; these are shifted
         by the group's lanes into the chunk's once per group */
% for shift in range(shifts):
      {
        const int lo = a->row_ptr[k * ${shifts} + ${shift}], hi = a->row_ptr[k * ${shifts} + ${shift + 1}];
        if (lo < hi) {
%   if shift == 0:
          for (int e = lo; e < hi; ++e) {
            const eb_vec w = eb_splat(a->values[e]);
            const float* in = src + a->offsets[e] + q0;
            for (int v = 0; v < ${vectors}; ++v) block[v] += w * eb_load_aligned(in + v * EB_LANES);
          }
%   else:
          eb_vec group[${vectors + 1}];
          for (int v = 0; v <= ${vectors}; ++v) group[v] = eb_splat(0.0f);
          for (int e = lo; e < hi; ++e) {
            const eb_vec w = eb_splat(a->values[e]);
            const float* in = src + a->offsets[e] + q0;
            for (int v = 0; v <= ${vectors}; ++v) group[v] += w * eb_load_aligned(in + v * EB_LANES);
          }
          const eb_lanes lanes = {${", ".join(str(shift + i) for i in range(16))}};
          for (int v = 0; v < ${vectors}; ++v) block[v] += __builtin_shuffle(group[v], group[v + 1], lanes);
%   endif
        }
      }
% endfor
</%def>\
% if spatial:
  /* the tasks share the plane (cost.spatial_chunk_size): each computes every output channel
     over its own chunks, reading only its part of the input */
  const int chunks = ${whole // chunk};
  const int first_chunk = chunks * task / env->num_task;
  const int last_chunk = chunks * (task + 1) / env->num_task;
  for (int q0 = first_chunk * EB_CHUNK; q0 < last_chunk * EB_CHUNK; q0 += EB_CHUNK) {
    for (int n = 0; n < ${g.out_channels}; ++n) {
% else:
  for (int q0 = 0; q0 < ${whole}; q0 += EB_CHUNK) {
    for (int n = task; n < ${g.out_channels}; n += env->num_task) {
% endif
      const int k = a->order[n];
% if bias:
      const float b = a->bias[k];
% else:
      const float b = 0.0f;
% endif
      eb_vec block[EB_VECTORS];
      for (int v = 0; v < EB_VECTORS; ++v) block[v] = eb_splat(b);
% if aligned:
${aligned_groups(chunk // 16)}\
% else:
      const int first = a->row_ptr[k], last = a->row_ptr[k + 1];
${accumulate(chunk // 16, "q0", "first", "last")}\
% endif
      float sums[EB_CHUNK];
      memcpy(sums, block, sizeof(block));
      ${symbol}_store(a, k, q0, sums, EB_CHUNK);
    }
  }
% if tail:
  /* the tail, read in place: whole vectors (lanes past the plane dropped at the store) for
     every run that stays inside the input. A row's offsets ascend (a 1x1 convolution has one
     tap, its channels in order), so the runs that would read past the input's end are the
     row's last: they add the tail float by float */
  for (int n = task; n < ${g.out_channels}; n += env->num_task) {
    const int k = a->order[n];
% if bias:
    const float b = a->bias[k];
% else:
    const float b = 0.0f;
% endif
    const int first = a->row_ptr[k], last = a->row_ptr[k + 1];
    int inside = last;
    while (inside > first && a->offsets[inside - 1] > ${tail_limit}) --inside;
    eb_vec block[${tail_vectors}];
    for (int v = 0; v < ${tail_vectors}; ++v) block[v] = eb_splat(b);
${accumulate(tail_vectors, str(whole), "first", "inside")}\
    float sums[${tail_vectors * 16}];
    memcpy(sums, block, sizeof(block));
    for (int e = inside; e < last; ++e) {
      const float w = a->values[e];
      const float* in = src + a->offsets[e] + ${whole};
      for (int j = 0; j < ${tail}; ++j) sums[j] += w * in[j];
    }
    ${symbol}_store(a, k, ${whole}, sums, ${tail});
  }
% endif
  return 0;
}
#undef EB_CHUNK
