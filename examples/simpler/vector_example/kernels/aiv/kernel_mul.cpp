// out = x * y, element by element (f32).
#include "chip_elements.h"

extern "C" void kernel_entry(int64_t *args) {
    const ChipTensor &x = chip_tensor(args, 0);
    const ChipTensor &y = chip_tensor(args, 1);
    const ChipTensor &out = chip_tensor(args, 2);
    for (uint64_t i = 0; i < out.numel(); ++i) {
        chip_at<float>(out, i) = chip_at<float>(x, i) * chip_at<float>(y, i);
    }
}
