// Folds one KV block into a request's running softmax state (online softmax).
// In: mj [H], lj [H], oj [H, D] (the block's max, sum and unnormalized output).
// Inout: m [H], l [H], o [H, D] (the running state). Out: out [H, D].
// Scalars: first (u64: the state is empty), last (u64: write out = o / l).
#include <math.h>

#include "chip_elements.h"

extern "C" void kernel_entry(int64_t *args) {
    const ChipTensor &mj = chip_tensor(args, 0);
    const ChipTensor &lj = chip_tensor(args, 1);
    const ChipTensor &oj = chip_tensor(args, 2);
    const ChipTensor &m = chip_tensor(args, 3);
    const ChipTensor &l = chip_tensor(args, 4);
    const ChipTensor &o = chip_tensor(args, 5);
    const ChipTensor &out = chip_tensor(args, 6);
    const bool first = chip_scalar(args, 7, 0) != 0;
    const bool last = chip_scalar(args, 7, 1) != 0;
    const uint32_t heads = chip_rows(oj), dim = chip_cols(oj);
    for (uint32_t h = 0; h < heads; ++h) {
        float &mh = chip_at<float>(m, h);
        float &lh = chip_at<float>(l, h);
        const float mb = chip_at<float>(mj, h), lb = chip_at<float>(lj, h);
        if (first) {
            mh = mb;
            lh = lb;
            for (uint32_t d = 0; d < dim; ++d) chip_at2<float>(o, h, d) = chip_at2<float>(oj, h, d);
        } else {
            const float mn = fmaxf(mh, mb);
            const float alpha = expf(mh - mn), beta = expf(mb - mn);
            lh = alpha * lh + beta * lb;
            for (uint32_t d = 0; d < dim; ++d) {
                float &od = chip_at2<float>(o, h, d);
                od = alpha * od + beta * chip_at2<float>(oj, h, d);
            }
            mh = mn;
        }
        if (last) {
            for (uint32_t d = 0; d < dim; ++d) chip_at2<float>(out, h, d) = chip_at2<float>(o, h, d) / lh;
        }
    }
}
