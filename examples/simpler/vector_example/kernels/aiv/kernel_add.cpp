// out = x + y, element by element (f32). SPMD blocks, when there are several, split the
// elements between them.
#include "chip_elements.h"

extern "C" void kernel_entry(int64_t *args) {
    const ChipTensor &x = chip_tensor(args, 0);
    const ChipTensor &y = chip_tensor(args, 1);
    const ChipTensor &out = chip_tensor(args, 2);
    const uint64_t step = static_cast<uint64_t>(get_block_num(args));
    for (uint64_t i = static_cast<uint64_t>(get_block_idx(args)); i < out.numel(); i += step) {
        chip_at<float>(out, i) = chip_at<float>(x, i) + chip_at<float>(y, i);
    }
}
