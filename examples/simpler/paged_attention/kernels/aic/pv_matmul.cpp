// o = p @ v for one KV block: p [H, BS], v [BS, D] -> o [H, D] (f32).
#include "chip_elements.h"

extern "C" void kernel_entry(int64_t *args) {
    const ChipTensor &p = chip_tensor(args, 0);
    const ChipTensor &v = chip_tensor(args, 1);
    const ChipTensor &o = chip_tensor(args, 2);
    const uint32_t heads = chip_rows(p), block = chip_cols(p), dim = chip_cols(v);
    for (uint32_t h = 0; h < heads; ++h) {
        for (uint32_t d = 0; d < dim; ++d) {
            float acc = 0.0f;
            for (uint32_t t = 0; t < block; ++t) acc += chip_at2<float>(p, h, t) * chip_at2<float>(v, t, d);
            chip_at2<float>(o, h, d) = acc;
        }
    }
}
