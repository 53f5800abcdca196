// An elementwise pipeline over views. Arguments: a, b (in, f32 [R, C], C even), out
// (out, [R, C]), t_out (out, [C, R]), misc (out, [R * C]), alpha (scalar, f64).
//
//   s      = a + b                      (runtime-created output, AIV)
//   out    = s * a + alpha              (nested scope: AIC multiply, AIV add in place)
//   out[1:3, 2:5] += 1                  (a window view, in place)
//   t_out  = a^T + s^T                  (transposed views as inputs)
//   misc as [R, C]: even columns = a * a on a's even columns (slice with step 2),
//                   odd columns  = b + b on b's odd columns
#include "kernel_ids.h"
#include "pto_orchestration_api.h"

extern "C" {

__attribute__((visibility("default"))) PTO2OrchestrationConfig aicpu_orchestration_config(const ChipTaskArgs &args) {
    (void)args;
    return PTO2OrchestrationConfig{6};
}

__attribute__((visibility("default"))) void aicpu_orchestration_entry(const ChipTaskArgs &args) {
    const ChipTensor &a = args.tensor(0).ref();
    const ChipTensor &b = args.tensor(1).ref();
    const ChipTensor &out = args.tensor(2).ref();
    const ChipTensor &t_out = args.tensor(3).ref();
    const ChipTensor &misc = args.tensor(4).ref();
    const double alpha = from_u64<double>(args.scalar(0));
    const uint32_t rows = a.shapes[0];
    const uint32_t cols = a.shapes[1];
    LOG_INFO("pipeline over [%u, %u], alpha %g", rows, cols, alpha);

    PTO2_SCOPE() {
        uint32_t rc[2] = {rows, cols};
        TensorCreateInfo s_info(rc, 2);
        CoreTaskArgs add;
        add.add_input(a, b);
        add.add_output(s_info);
        TaskOutputTensors s_outs = rt_submit_aiv_task(K_ADD, add);
        if (s_outs.size() != 1 || !s_outs.task_id().is_valid()) {
            rt_report_fatal(PTO2_ERROR_INVALID_ARGS, "the add task returned %u outputs", s_outs.size());
            return;
        }
        const ChipTensor &s = s_outs.get_ref(0);

        PTO2_SCOPE() {
            CoreTaskArgs mul;
            mul.add_input(s, a);
            mul.add_output(out);
            rt_submit_aic_task(K_MUL, mul);
            CoreTaskArgs shift;
            shift.add_inout(out);
            shift.add_scalar(static_cast<float>(alpha));
            rt_submit_aiv_task(K_ADD_SCALAR, shift);
        }

        uint32_t win_shape[2] = {2, 3};
        uint32_t win_at[2] = {1, 2};
        ChipTensor win = out.view(win_shape, win_at);
        CoreTaskArgs bump;
        bump.add_inout(win);
        bump.add_scalar(1.0f);
        rt_submit_aiv_task(K_ADD_SCALAR, bump);

        ChipTensor a_t = a.transpose(0, 1);
        ChipTensor s_t = s.transpose(0, 1);
        CoreTaskArgs tr;
        tr.add_input(a_t, s_t);
        tr.add_output(t_out);
        rt_submit_aiv_task(K_ADD, tr);

        ChipTensor m2 = misc.reshape(rc, 2);
        ChipTensor m_even = m2.slice(1, 0, cols, 2);
        ChipTensor m_odd = m2.slice(1, 1, cols, 2);
        ChipTensor a_even = a.slice(1, 0, cols, 2);
        ChipTensor b_odd = b.slice(1, 1, cols, 2);
        CoreTaskArgs sq;
        sq.add_input(a_even, a_even);
        sq.add_output(m_even);
        rt_submit_aic_task(K_MUL, sq);
        CoreTaskArgs dbl;
        dbl.add_input(b_odd, b_odd);
        dbl.add_output(m_odd);
        rt_submit_aiv_task(K_ADD, dbl);
    }
}

}  // extern "C"
