## The kernel behind the artifact's TVM wrapper of edgebyoc_network_run (codegen.cemit).

int edgebyoc_network_kernel(DLTensor** args, int num_args) {
  const void* inputs[${max(inputs, 1)}];
  void* outputs[${max(outputs, 1)}];
  int i;
  (void)num_args;
  for (i = 0; i < ${inputs}; ++i)
    inputs[i] = (const char*)args[i]->data + args[i]->byte_offset;
  for (i = 0; i < ${outputs}; ++i)
    outputs[i] = (char*)args[${inputs} + i]->data + args[${inputs} + i]->byte_offset;
  return ${entry}(inputs, outputs);
}
