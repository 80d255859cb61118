## Wraps a plain C kernel into the TVM FFI packed signature the Relax VM calls.
## Context: symbol (exported name), kernel (the C function to call), num_args (inputs, constants
## and outputs, in the region function's parameter order followed by its outputs).
#include <tvm/ffi/c_api.h>
#include <dlpack/dlpack.h>
#include <stddef.h>

/* defined by the plugin in this translation unit, with the unit's own linkage */
int ${kernel}(DLTensor** args, int num_args);

#ifdef __cplusplus
extern "C" {
#endif

static DLTensor* edgebyoc_tensor_arg_${symbol}(const TVMFFIAny* value) {
  if (value->type_index == kTVMFFIDLTensorPtr) return (DLTensor*)value->v_ptr;
  if (value->type_index == kTVMFFITensor)
    return (DLTensor*)((char*)value->v_obj + sizeof(TVMFFIObject));
  return NULL;
}

int __tvm_ffi_${symbol}(void* self, const TVMFFIAny* args, int32_t num_args, TVMFFIAny* result) {
  DLTensor* tensors[${num_args}];
  int i;
  (void)self;
  if (num_args != ${num_args}) {
    TVMFFIErrorSetRaisedFromCStr("ValueError", "${symbol}: wrong number of arguments");
    return -1;
  }
  for (i = 0; i < ${num_args}; ++i) {
    tensors[i] = edgebyoc_tensor_arg_${symbol}(&args[i]);
    if (tensors[i] == NULL) {
      TVMFFIErrorSetRaisedFromCStr("TypeError", "${symbol}: an argument is not a tensor");
      return -1;
    }
  }
  result->type_index = kTVMFFINone;
  result->zero_padding = 0;
  result->v_int64 = 0;
  if (${kernel}(tensors, ${num_args}) != 0) {
    TVMFFIErrorSetRaisedFromCStr("RuntimeError", "${symbol}: the kernel failed");
    return -1;
  }
  return 0;
}

#ifdef __cplusplus
}
#endif
