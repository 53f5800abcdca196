// One AIV task (func_id 0) over the program's four tensors: two inputs, two outputs.
#include "pto_orchestration_api.h"

extern "C" {

__attribute__((visibility("default"))) PTO2OrchestrationConfig aicpu_orchestration_config(const ChipTaskArgs &args) {
    (void)args;
    return PTO2OrchestrationConfig{4};
}

__attribute__((visibility("default"))) void aicpu_orchestration_entry(const ChipTaskArgs &args) {
    CoreTaskArgs task;
    task.add_input(args.tensor(0).ref(), args.tensor(1).ref());
    task.add_output(args.tensor(2).ref(), args.tensor(3).ref());
    rt_submit_aiv_task(0, task);
}
}
