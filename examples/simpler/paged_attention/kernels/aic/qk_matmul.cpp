// s = q @ k^T for one KV block: q [H, D], k [BS, D] -> s [H, BS] (f32).
#include "chip_elements.h"

extern "C" void kernel_entry(int64_t *args) {
    const ChipTensor &q = chip_tensor(args, 0);
    const ChipTensor &k = chip_tensor(args, 1);
    const ChipTensor &s = chip_tensor(args, 2);
    const uint32_t heads = chip_rows(q), dim = chip_cols(q), block = chip_rows(k);
    for (uint32_t h = 0; h < heads; ++h) {
        for (uint32_t t = 0; t < block; ++t) {
            float acc = 0.0f;
            for (uint32_t d = 0; d < dim; ++d) acc += chip_at2<float>(q, h, d) * chip_at2<float>(k, t, d);
            chip_at2<float>(s, h, t) = acc;
        }
    }
}
