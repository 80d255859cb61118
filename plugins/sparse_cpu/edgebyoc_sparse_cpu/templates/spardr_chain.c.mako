## One region's kernel: its layers (spardr_conv.c.mako, after spardr_prelude.c.mako) run one
## after the other in one launch of TVM's thread pool, a barrier between two layers; a
## layer's input, residual and output are the region's arguments or tensors of the region's
## workspace (its intermediate tensors, and one reconstruction buffer that every layer reusing
## it takes in turn).
## Context: symbol (the region's), layers (one dict a layer: symbol, and the C expressions of
## its args' pointers: x, values, offsets, row_ptr, order, bias, residual, y, recon),
## workspace_bytes (0: none).
typedef struct {
% for i, layer in enumerate(layers):
  ${layer["symbol"]}_args layer${i};
% endfor
} ${symbol}_chain;

static int ${symbol}_run(int task, TVMParallelGroupEnv* env, void* data) {
  ${symbol}_chain* c = (${symbol}_chain*)data;
% for i, layer in enumerate(layers):
% if i > 0:
  /* the layers before have written their outputs, and are done with the reconstruction */
  if (TVMBackendParallelBarrier(task, env) != 0) return -1;
% endif
  if (${layer["symbol"]}_run(task, env, &c->layer${i}) != 0) return -1;
% endfor
  return 0;
}

int ${symbol}_kernel(DLTensor** t, int num_args) {
  ${symbol}_chain c;
  (void)num_args;
% if workspace_bytes:
  void* memory = TVMBackendAllocWorkspace(kDLCPU, 0, ${workspace_bytes + 64}, kDLFloat, 32);
  if (memory == NULL) return -1;
  char* base = (char*)(((uintptr_t)memory + 63) & ~(uintptr_t)63); /* every tensor 64-B aligned */
% endif
% for i, layer in enumerate(layers):
% for field in ("x", "values", "offsets", "row_ptr", "order", "bias", "residual", "y", "recon"):
  c.layer${i}.${field} = ${layer[field]};
% endfor
% endfor
  int status = TVMBackendParallelLaunch(${symbol}_run, &c, 0);
% if workspace_bytes:
  TVMBackendFreeWorkspace(kDLCPU, 0, memory);
% endif
  return status;
}
