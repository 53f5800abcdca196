// The block-local softmax of one KV block's scores.
// In: s [H, BS]. Out: p [H, BS], m [H], l [H]. Scalars: scale (f32), valid (u64, the
// block's tokens that belong to the context; the rest are masked out).
//   m[h] = max_t(scale * s[h, t]),  p[h, t] = exp(scale * s[h, t] - m[h]),  l[h] = sum_t p[h, t]
#include <math.h>

#include "chip_elements.h"

extern "C" void kernel_entry(int64_t *args) {
    const ChipTensor &s = chip_tensor(args, 0);
    const ChipTensor &p = chip_tensor(args, 1);
    const ChipTensor &m = chip_tensor(args, 2);
    const ChipTensor &l = chip_tensor(args, 3);
    const float scale = from_u64<float>(chip_scalar(args, 4, 0));
    const uint32_t valid = static_cast<uint32_t>(chip_scalar(args, 4, 1));
    const uint32_t heads = chip_rows(s), block = chip_cols(s);
    for (uint32_t h = 0; h < heads; ++h) {
        float mx = -INFINITY;
        for (uint32_t t = 0; t < valid; ++t) mx = fmaxf(mx, scale * chip_at2<float>(s, h, t));
        float sum = 0.0f;
        for (uint32_t t = 0; t < block; ++t) {
            const float e = t < valid ? expf(scale * chip_at2<float>(s, h, t) - mx) : 0.0f;
            chip_at2<float>(p, h, t) = e;
            sum += e;
        }
        chip_at<float>(m, h) = mx;
        chip_at<float>(l, h) = sum;
    }
}
