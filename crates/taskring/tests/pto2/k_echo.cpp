// Writes its scalars' raw 64-bit patterns to its one tensor (i64 [k]): out[i] = scalar i,
// so a test can check how each add_scalar* call encoded its values.
#include "kernel_args.h"

extern "C" void kernel_entry(int64_t *args) {
    const ChipTensor &out = tensor_arg(args, 0);
    for (uint64_t i = 0; i < out.numel(); i++) {
        element<int64_t>(out, i) = static_cast<int64_t>(scalar_arg(args, 1, static_cast<int>(i)));
    }
}
