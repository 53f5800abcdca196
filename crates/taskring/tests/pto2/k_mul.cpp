// c = a * b, element by element (f32), each tensor walked in its own shape and strides.
#include "kernel_args.h"

extern "C" void kernel_entry(int64_t *args) {
    const ChipTensor &a = tensor_arg(args, 0);
    const ChipTensor &b = tensor_arg(args, 1);
    const ChipTensor &c = tensor_arg(args, 2);
    for (uint64_t i = 0; i < c.numel(); i++) {
        element<float>(c, i) = element<float>(a, i) * element<float>(b, i);
    }
}
