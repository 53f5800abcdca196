// f = (a + b + 1) * (a + b + 2) + (a + b) over three f32 vectors a, b (in) and f (out).
//
//   t0  s = a + b        add         (the entry's scope: s lives until the end of the run)
//   inner scope (its intermediates are released when it ends):
//   t1  p = s + 1        add_scalar
//   t2  q = s + 2        add_scalar
//   t3  g = p * q        mul
//   t4  f = g + s        add
//
// Dependencies follow from the tensors: t0 -> t1, t2, t4; t1, t2 -> t3; t3 -> t4.
#include <stdint.h>

#include "pto_orchestration_api.h"

enum : int32_t { K_ADD = 0, K_ADD_SCALAR = 1, K_MUL = 2 };

extern "C" {

__attribute__((visibility("default"))) PTO2OrchestrationConfig aicpu_orchestration_config(const ChipTaskArgs &args) {
    (void)args;
    return PTO2OrchestrationConfig{.expected_arg_count = 3};
}

__attribute__((visibility("default"))) void aicpu_orchestration_entry(const ChipTaskArgs &args) {
    const ChipTensor &a = args.tensor(0).ref();
    const ChipTensor &b = args.tensor(1).ref();
    const ChipTensor &f = args.tensor(2).ref();
    uint32_t n[1] = {a.shapes[0]};
    TensorCreateInfo vec(n, 1, DataType::FLOAT32);

    CoreTaskArgs t0;
    t0.add_input(a, b);
    t0.add_output(vec);
    TaskOutputTensors s_out = rt_submit_aiv_task(K_ADD, t0);
    const ChipTensor &s = s_out.get_ref(0);

    PTO2_SCOPE() {
        CoreTaskArgs t1;
        t1.add_input(s);
        t1.add_output(vec);
        t1.add_scalar(1.0f);
        TaskOutputTensors p_out = rt_submit_aiv_task(K_ADD_SCALAR, t1);

        CoreTaskArgs t2;
        t2.add_input(s);
        t2.add_output(vec);
        t2.add_scalar(2.0f);
        TaskOutputTensors q_out = rt_submit_aiv_task(K_ADD_SCALAR, t2);

        CoreTaskArgs t3;
        t3.add_input(p_out.get_ref(0), q_out.get_ref(0));
        t3.add_output(vec);
        TaskOutputTensors g_out = rt_submit_aiv_task(K_MUL, t3);

        CoreTaskArgs t4;
        t4.add_input(g_out.get_ref(0), s);
        t4.add_output(f);
        rt_submit_aiv_task(K_ADD, t4);
    }
}

}  // extern "C"
