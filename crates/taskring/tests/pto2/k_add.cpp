// c = a + b, element by element (f32). The three tensors have the same element count;
// each is walked in its own shape and strides. SPMD blocks split the elements.
#include "kernel_args.h"

extern "C" void kernel_entry(int64_t *args) {
    const ChipTensor &a = tensor_arg(args, 0);
    const ChipTensor &b = tensor_arg(args, 1);
    const ChipTensor &c = tensor_arg(args, 2);
    const uint64_t step = static_cast<uint64_t>(get_block_num(args));
    for (uint64_t i = static_cast<uint64_t>(get_block_idx(args)); i < c.numel(); i += step) {
        element<float>(c, i) = element<float>(a, i) + element<float>(b, i);
    }
}
