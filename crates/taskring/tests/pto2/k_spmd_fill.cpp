// One SPMD block per row: out[b, j] = 100 * b + block_num + base for block b.
// Tensors: out (f32 [block_num, m]), counter (i32 [1]). Scalars: base (f64), barrier
// (i64). With barrier set, every block first counts itself in and waits until all
// block_num blocks have: that only ends when the blocks run at the same time (a
// sync-start launch). A block that gives up waiting writes -1 instead.
#include <sched.h>

#include "kernel_args.h"

extern "C" void kernel_entry(int64_t *args) {
    const ChipTensor &out = tensor_arg(args, 0);
    const ChipTensor &counter = tensor_arg(args, 1);
    const double base = from_u64<double>(scalar_arg(args, 2, 0));
    const int64_t barrier = static_cast<int64_t>(scalar_arg(args, 2, 1));
    const int32_t b = get_block_idx(args);
    const int32_t n = get_block_num(args);
    float value = static_cast<float>(100.0 * b + n + base);
    if (barrier != 0) {
        int32_t *count = &element<int32_t>(counter, 0);
        __atomic_add_fetch(count, 1, __ATOMIC_SEQ_CST);
        long spins = 0;
        while (__atomic_load_n(count, __ATOMIC_SEQ_CST) < n) {
            if (++spins > 4000000) {
                value = -1.0f;
                break;
            }
            sched_yield();
        }
    }
    const uint64_t m = out.shapes[1];
    for (uint64_t j = 0; j < m; j++) {
        element<float>(out, static_cast<uint64_t>(b) * m + j) = value;
    }
}
