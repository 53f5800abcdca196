// out = a + b + 1 over f32 matrices [R, C], row tile by row tile (TILE rows each). Each
// tile runs in its own nested scope: its temporary s = a + b lives on ring 1's heap and
// is released when the tile's scope ends; out's tile is s + 1. The run uses ring 0 (the
// entry's scope) and ring 1, so a per-ring sizing shows on both.
#include <stdint.h>

#include "pto_orchestration_api.h"

enum : int32_t { K_ADD = 0, K_ADD_SCALAR = 1 };
static constexpr uint32_t TILE = 16;

extern "C" {

__attribute__((visibility("default"))) PTO2OrchestrationConfig aicpu_orchestration_config(const ChipTaskArgs &args) {
    (void)args;
    return PTO2OrchestrationConfig{.expected_arg_count = 3};
}

__attribute__((visibility("default"))) void aicpu_orchestration_entry(const ChipTaskArgs &args) {
    const ChipTensor &a = args.tensor(0).ref();
    const ChipTensor &b = args.tensor(1).ref();
    const ChipTensor &out = args.tensor(2).ref();
    const uint32_t rows = a.shapes[0], cols = a.shapes[1];

    for (uint32_t r = 0; r < rows; r += TILE) {
        const uint32_t n = rows - r < TILE ? rows - r : TILE;
        uint32_t tile_shape[2] = {n, cols};
        uint32_t tile_at[2] = {r, 0};
        const ChipTensor a_t = a.view(tile_shape, tile_at);
        const ChipTensor b_t = b.view(tile_shape, tile_at);
        const ChipTensor out_t = out.view(tile_shape, tile_at);
        PTO2_SCOPE() {
            TensorCreateInfo tmp_info(tile_shape, 2);
            CoreTaskArgs sum;
            sum.add_input(a_t, b_t);
            sum.add_output(tmp_info);
            TaskOutputTensors s = rt_submit_aiv_task(K_ADD, sum);

            CoreTaskArgs inc;
            inc.add_input(s.get_ref(0));
            inc.add_output(out_t);
            inc.add_scalar(1.0f);
            rt_submit_aiv_task(K_ADD_SCALAR, inc);
        }
    }
}

}  // extern "C"
