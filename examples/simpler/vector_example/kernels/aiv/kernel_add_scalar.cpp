// out = x + s (f32 tensor, f32 scalar passed as the low 32 bits of the first scalar).
#include "chip_elements.h"

extern "C" void kernel_entry(int64_t *args) {
    const ChipTensor &x = chip_tensor(args, 0);
    const ChipTensor &out = chip_tensor(args, 1);
    const float s = from_u64<float>(chip_scalar(args, 2, 0));
    for (uint64_t i = 0; i < out.numel(); ++i) {
        chip_at<float>(out, i) = chip_at<float>(x, i) + s;
    }
}
