// A write from the orchestration after a slow reader: c = a + b (a runtime output), a
// kernel copies c into `seen` slowly, then the orchestration sets c[0] = 88 and reads it
// back into `after[0]`. The write must wait for the reader, so `seen` holds a + b.
// Arguments: a, b (in, [n]), seen (out, [n]), after (out, [1]), pause in ms.
#include "kernel_ids.h"
#include "pto_orchestration_api.h"

extern "C" __attribute__((visibility("default"))) void aicpu_orchestration_entry(const ChipTaskArgs &args) {
    const ChipTensor &a = args.tensor(0).ref();
    const ChipTensor &b = args.tensor(1).ref();
    const ChipTensor &seen = args.tensor(2).ref();
    const ChipTensor &after = args.tensor(3).ref();
    const uint64_t pause_ms = args.scalar(0);

    TensorCreateInfo ci(a.shapes, 1, DataType::FLOAT32);
    CoreTaskArgs sum;
    sum.add_input(a, b);
    sum.add_output(ci);
    TaskOutputTensors made = rt_submit_aiv_task(K_ADD, sum);
    const ChipTensor &c = made.get_ref(0);

    CoreTaskArgs copy;
    copy.add_input(c);
    copy.add_output(seen);
    copy.add_scalar(pause_ms);
    rt_submit_aiv_task(K_SLOW_COPY, copy);

    const uint32_t first[1] = {0};
    set_tensor_data(c, 1, first, 88.0f);
    float v = get_tensor_data<float>(c, 1, first);
    after.data_as<float>()[after.start_offset] = v;
}
