// The AIV parts of a mixed task, told apart by sub_block_id s (0 for AIV0, 1 for AIV1):
// out[1 + s, j] = a[j] + 10 * (s + 1). Tensors: a (f32 [n]), out (f32 [3, n]).
#include "kernel_args.h"

extern "C" void kernel_entry(int64_t *args) {
    const ChipTensor &a = tensor_arg(args, 0);
    const ChipTensor &out = tensor_arg(args, 1);
    const int32_t s = get_sub_block_id(args);
    const uint64_t n = a.numel();
    for (uint64_t j = 0; j < n; j++) {
        element<float>(out, (1 + static_cast<uint64_t>(s)) * n + j) = element<float>(a, j) + 10.0f * (s + 1);
    }
}
