// Failures, one per mode, each from inside a C++ orchestration. Arguments: x (inout,
// f32 [n], n >= 65552), mode (scalar, i64).
//   0  a good run: x += 1 in a scope
//   1  eight tasks in one scope (SCOPE_DEADLOCK under a window of 4)
//   2  a 32 KiB output (HEAP_RING_DEADLOCK under a small heap); the failed submit's
//      outputs are then used as if nothing happened
//   3  128 writers of x's rows (OUTPUT_EXISTING), then one reader of all x
//      (DEP_POOL_OVERFLOW under a dependency pool of 4: 112 edges beyond the 16 inline)
//  10  as 3 with the rows written as INOUT
//  11  a sync-start launch of one block more than the chip has AIV cores
//      (REQUIRE_SYNC_START_INVALID)
//   4  4097 tasks of 16 one-element outputs each in the root scope (TENSORMAP_OVERFLOW:
//      more than 65536 entries live)
//   5  rt_report_fatal with a formatted message, then more submits
//   6  a submit whose CoreTaskArgs recorded an error (a tensor after a scalar); its
//      outputs are then used
//   7  a kernel that crashes its process
//   8  a C++ exception leaves the entry
//   9  n = min(4, AIV cores) SPMD blocks launched together (require_sync_start), each
//      waiting until all n have started: x as [n, 8], row b = 100 * b + n + 1000.5
#include <stdexcept>

#include "kernel_ids.h"
#include "pto_orchestration_api.h"

static void add_one(const ChipTensor &t) {
    CoreTaskArgs inc;
    inc.add_inout(t);
    inc.add_scalar(1.0f);
    rt_submit_aiv_task(K_ADD_SCALAR, inc);
}

// Uses a failed submit's outputs: get_ref(0) of an empty TaskOutputTensors, read and
// passed on to more submits, which the failed run ignores.
static void use_failed_outputs(const TaskOutputTensors &outs, const ChipTensor &x) {
    const ChipTensor &r = outs.get_ref(0);
    LOG_WARN(
        "after the failed submit: fatal %d, %u outputs, task id valid %d, output addr %llu numel %llu",
        rt_is_fatal() ? 1 : 0, outs.size(), outs.task_id().is_valid() ? 1 : 0,
        static_cast<unsigned long long>(r.buffer.addr), static_cast<unsigned long long>(r.numel())
    );
    CoreTaskArgs next;
    next.add_input(r);
    next.add_inout(x);
    rt_submit_dummy_task(next);
    add_one(x);
}

extern "C" {

__attribute__((visibility("default"))) PTO2OrchestrationConfig aicpu_orchestration_config(const ChipTaskArgs &args) {
    (void)args;
    return PTO2OrchestrationConfig{2};
}

__attribute__((visibility("default"))) void aicpu_orchestration_entry(const ChipTaskArgs &args) {
    const ChipTensor &x = args.tensor(0).ref();
    const int64_t mode = static_cast<int64_t>(args.scalar(0));
    switch (mode) {
    case 0:
        PTO2_SCOPE() { add_one(x); }
        break;
    case 1:
        PTO2_SCOPE() {
            for (int i = 0; i < 8; i++) add_one(x);
        }
        break;
    case 2: {
        uint32_t big[1] = {8192};
        TensorCreateInfo info(big, 1);
        CoreTaskArgs a;
        a.add_output(info);
        TaskOutputTensors outs = rt_submit_dummy_task(a);
        use_failed_outputs(outs, x);
        break;
    }
    case 3:
    case 10: {
        for (uint32_t i = 0; i < 128; i++) {
            uint32_t shape[1] = {4};
            uint32_t at[1] = {4 * i};
            ChipTensor row = x.view(shape, at);
            CoreTaskArgs w;
            if (mode == 3) {
                w.add_output(row);  // the kernel's += reads it too: the values do not matter here
            } else {
                w.add_inout(row);
            }
            w.add_scalar(1.0f);
            rt_submit_aiv_task(K_ADD_SCALAR, w);
        }
        CoreTaskArgs all;
        all.add_input(x);
        rt_submit_dummy_task(all);
        break;
    }
    case 4: {
        float *base = x.data_as<float>();
        uint32_t one[1] = {1};
        for (uint32_t t = 0; t < 4097 && !rt_is_fatal(); t++) {
            ChipTensor elems[16];
            CoreTaskArgs a;
            for (uint32_t j = 0; j < 16; j++) {
                elems[j] = make_tensor_external(base + 16 * t + j, one, 1);
                a.add_output(elems[j]);
            }
            rt_submit_dummy_task(a);
        }
        break;
    }
    case 5:
        add_one(x);
        rt_report_fatal(PTO2_ERROR_EXPLICIT_ORCH_FATAL, "stopped on purpose at step %d of %s", 3, "modes");
        add_one(x);
        LOG_INFO("after rt_report_fatal: fatal %d", rt_is_fatal() ? 1 : 0);
        break;
    case 6: {
        uint32_t four[1] = {4};
        TensorCreateInfo info(four, 1);
        CoreTaskArgs a;
        a.add_scalar(1.0f);
        a.add_output(info);
        TaskOutputTensors outs = rt_submit_aiv_task(K_ADD, a);
        use_failed_outputs(outs, x);
        break;
    }
    case 7: {
        CoreTaskArgs a;
        a.add_scalar(uint64_t(0));
        rt_submit_aiv_task(K_CRASH, a);
        break;
    }
    case 8:
        throw std::runtime_error("thrown by the orchestration");
    case 9: {
        const int32_t aiv = rt_available_aiv_count();
        const uint32_t n = static_cast<uint32_t>(aiv < 4 ? aiv : 4);
        uint32_t len[1] = {n * 8};
        uint32_t at[1] = {0};
        uint32_t rows[2] = {n, 8};
        ChipTensor first = x.view(len, at).reshape(rows, 2);
        uint32_t one[1] = {1};
        TensorCreateInfo count_info(one, 1, DataType::INT32);
        count_info.set_initial_value<int32_t>(0);
        TaskOutputTensors counter = alloc_tensors(count_info);
        CoreTaskArgs t;
        t.add_inout(first);
        t.add_inout(counter.get_ref(0));
        t.add_scalar(1000.5, int64_t(1));
        t.launch_spec.set_block_num(static_cast<int16_t>(n));
        t.launch_spec.set_require_sync_start(true);
        rt_submit_aiv_task(K_SPMD_FILL, t);
        break;
    }
    case 11: {
        uint32_t len[1] = {8};
        uint32_t at[1] = {0};
        ChipTensor row = x.view(len, at);
        CoreTaskArgs t;  // refused at submit: the kernel never sees these arguments
        t.add_output(row);
        t.add_inout(row);
        t.add_scalar(0.0, int64_t(0));
        t.launch_spec.set_block_num(static_cast<int16_t>(rt_available_aiv_count() + 1));
        t.launch_spec.set_require_sync_start(true);
        rt_submit_aiv_task(K_SPMD_FILL, t);
        break;
    }
    default:
        rt_report_fatal(PTO2_ERROR_INVALID_ARGS, "unknown mode %lld", static_cast<long long>(mode));
    }
}

}  // extern "C"
