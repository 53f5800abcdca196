// The AIC part of a mixed task: out[0, j] = 2 * a[j]. Tensors: a (f32 [n]), out (f32 [3, n]).
#include "kernel_args.h"

extern "C" void kernel_entry(int64_t *args) {
    const ChipTensor &a = tensor_arg(args, 0);
    const ChipTensor &out = tensor_arg(args, 1);
    for (uint64_t j = 0; j < a.numel(); j++) {
        element<float>(out, j) = 2.0f * element<float>(a, j);
    }
}
