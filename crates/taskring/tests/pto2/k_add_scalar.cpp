// x += s in place: one f32 tensor (an inout, possibly a strided view) and one f32 scalar.
#include "kernel_args.h"

extern "C" void kernel_entry(int64_t *args) {
    const ChipTensor &x = tensor_arg(args, 0);
    const float s = from_u64<float>(scalar_arg(args, 1, 0));
    for (uint64_t i = 0; i < x.numel(); i++) {
        element<float>(x, i) += s;
    }
}
