// Paged-attention decode: one query token per request attends over that request's
// context, whose keys and values live in fixed-size blocks of a shared cache, found
// through the request's row of the block table.
//
// Arguments (tensors): query [B, H, D] f32, key_cache [NB, BS, D] f32,
// value_cache [NB, BS, D] f32, block_table [B, MB] i32, context_lens [B] i32 (in),
// out [B, H, D] f32 (out); then one scalar, the score scale (f32, usually 1 / sqrt(D)).
//
// Per request (a scope holding its running state m, l, o), per KV block (a nested scope
// holding that block's intermediates):
//   QK (aic):             s = q @ k^T
//   softmax_prepare (aiv): p, m_j, l_j (tokens past the context are masked)
//   PV (aic):             o_j = p @ v
//   online_update (aiv):  fold (m_j, l_j, o_j) into (m, l, o); the last block writes out
#include <stdint.h>

#include "pto_orchestration_api.h"

enum : int32_t { K_QK = 0, K_SOFTMAX = 1, K_PV = 2, K_UPDATE = 3 };

extern "C" {

__attribute__((visibility("default"))) PTO2OrchestrationConfig aicpu_orchestration_config(const ChipTaskArgs &args) {
    (void)args;
    return PTO2OrchestrationConfig{.expected_arg_count = 7};
}

__attribute__((visibility("default"))) void aicpu_orchestration_entry(const ChipTaskArgs &args) {
    const ChipTensor &query = args.tensor(0).ref();
    const ChipTensor &key_cache = args.tensor(1).ref();
    const ChipTensor &value_cache = args.tensor(2).ref();
    const ChipTensor &block_table = args.tensor(3).ref();
    const ChipTensor &context_lens = args.tensor(4).ref();
    const ChipTensor &out = args.tensor(5).ref();

    const uint32_t batch = query.shapes[0], heads = query.shapes[1], dim = query.shapes[2];
    const uint32_t block = key_cache.shapes[1], max_blocks = block_table.shapes[1];
    const float scale = from_u64<float>(args.scalar(0));

    uint32_t hd[2] = {heads, dim};
    uint32_t hb[2] = {heads, block};
    uint32_t h1[1] = {heads};
    TensorCreateInfo hd_info(hd, 2), hb_info(hb, 2), h_info(h1, 1);

    for (uint32_t b = 0; b < batch; ++b) {
        uint32_t at_b[1] = {b};
        const int32_t ctx = get_tensor_data<int32_t>(context_lens, 1, at_b);
        const uint32_t n_blocks = static_cast<uint32_t>((ctx + static_cast<int32_t>(block) - 1) / static_cast<int32_t>(block));
        if (ctx <= 0 || n_blocks > max_blocks) {
            rt_report_fatal(PTO2_ERROR_INVALID_ARGS, "request %u: context length %d does not fit %u blocks of %u", b, ctx, max_blocks, block);
            return;
        }
        uint32_t row_shape[3] = {1, heads, dim};
        uint32_t row_at[3] = {b, 0, 0};
        const ChipTensor q_b = query.view(row_shape, row_at);
        const ChipTensor out_b = out.view(row_shape, row_at);

        PTO2_SCOPE() {
            TaskOutputTensors state = alloc_tensors(h_info, h_info, hd_info);
            const ChipTensor &m = state.get_ref(0);
            const ChipTensor &l = state.get_ref(1);
            const ChipTensor &o = state.get_ref(2);

            for (uint32_t j = 0; j < n_blocks; ++j) {
                uint32_t at_bj[2] = {b, j};
                const int32_t phys = get_tensor_data<int32_t>(block_table, 2, at_bj);
                uint32_t kv_shape[3] = {1, block, dim};
                uint32_t kv_at[3] = {static_cast<uint32_t>(phys), 0, 0};
                const ChipTensor k_j = key_cache.view(kv_shape, kv_at);
                const ChipTensor v_j = value_cache.view(kv_shape, kv_at);
                const uint64_t valid = j + 1 < n_blocks ? block : static_cast<uint64_t>(ctx) - uint64_t{j} * block;

                PTO2_SCOPE() {
                    CoreTaskArgs qk;
                    qk.add_input(q_b, k_j);
                    qk.add_output(hb_info);
                    TaskOutputTensors s = rt_submit_aic_task(K_QK, qk);

                    CoreTaskArgs sm;
                    sm.add_input(s.get_ref(0));
                    sm.add_output(hb_info, h_info, h_info);
                    sm.add_scalar(scale);
                    sm.add_scalar(valid);
                    TaskOutputTensors p = rt_submit_aiv_task(K_SOFTMAX, sm);

                    CoreTaskArgs pv;
                    pv.add_input(p.get_ref(0), v_j);
                    pv.add_output(hd_info);
                    TaskOutputTensors oj = rt_submit_aic_task(K_PV, pv);

                    CoreTaskArgs up;
                    up.add_input(p.get_ref(1), p.get_ref(2), oj.get_ref(0));
                    up.add_inout(m, l, o);
                    up.add_output(out_b);
                    up.add_scalar(uint64_t{j == 0}, uint64_t{j + 1 == n_blocks});
                    rt_submit_aiv_task(K_UPDATE, up);
                }
            }
        }
    }
}

}  // extern "C"
