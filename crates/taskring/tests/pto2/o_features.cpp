// The rest of the orchestration API, each use checked through an output. Arguments:
//   echo  (out, i64 [12])   the raw scalar patterns of one task (k_echo)
//   vals  (out, f32 [16])   values the orchestration reads or learns (see below)
//   x     (inout, f32 [8])  x = (x + 1)^2 + 0.5 in a manual scope, then + 100 under a
//                           passing predicate; a failing predicate's + 1000 never runs
//   src   (in, f32 [8])     input of the mixed task
//   mixed (out, f32 [3, 8]) rows: 2 * src (AIC), src + 10 (AIV0), src + 20 (AIV1)
//   spmd  (out, f32 [4, 8]) row b: 100 * b + 4 + 0.5 (4 blocks); then rows b < n
//                           (n = min(4, AIV cores)): 100 * b + n + 1000.5, written by n
//                           blocks of a sync-start launch
//   y     (out, f32 [4])    y = [0, 1, 2, 3] + 7, through a [2, 2] tensor over y's memory
//
// vals: [0] 2.5, [1] -3, [2] 7, [3] 2^40 (initial values read back), [4] clusters,
// [5] AIV cores, [6] n, [7] rt_is_fatal(), [8] y[1, 1] = 10 read after its producer,
// [9..12) the output counts of the three alloc_tensors forms (2, 2, 1), [12] 1 when
// every task id was valid, [13] x[0] read at the end.
#include "kernel_ids.h"
#include "pto_orchestration_api.h"

enum class Colour : uint16_t { RED = 3, BLUE = 0x1234 };

static void put(const ChipTensor &vals, uint32_t i, float v) {
    uint32_t idx[1] = {i};
    set_tensor_data(vals, 1, idx, v);
}

extern "C" {

__attribute__((visibility("default"))) PTO2OrchestrationConfig aicpu_orchestration_config(const ChipTaskArgs &args) {
    (void)args;
    return PTO2OrchestrationConfig{7};
}

__attribute__((visibility("default"))) void aicpu_orchestration_entry(const ChipTaskArgs &args) {
    const ChipTensor &echo = args.tensor(0).ref();
    const ChipTensor &vals = args.tensor(1).ref();
    const ChipTensor &x = args.tensor(2).ref();
    const ChipTensor &src = args.tensor(3).ref();
    const ChipTensor &mixed = args.tensor(4).ref();
    const ChipTensor &spmd = args.tensor(5).ref();
    const ChipTensor &y = args.tensor(6).ref();
    bool ids_valid = true;

    LOG_ERROR("features: an error line on purpose (%d)", 1);
    LOG_WARN("features: a warning line on purpose");
    LOG_INFO("an info line: %s", "features");
    LOG_DEBUG("a debug line %u", 7u);
    LOG_ALWAYS("features: an always line on purpose");

    // Scalars of every kind, in every form.
    {
        CoreTaskArgs e;
        e.add_output(echo);
        e.add_scalar(1.5f);
        e.add_scalar(-2.25, int32_t(-7), uint32_t(0xFFFFFFF0u), int64_t(-5000000000LL), Colour::BLUE);
        const uint64_t raw[3] = {0xDEADBEEFCAFEF00DULL, 0, 42};
        e.add_scalars(raw, 3);
        const int32_t small[3] = {-1, 2, INT32_MIN};
        e.add_scalars_i32(small, 3);
        ids_valid &= rt_submit_aiv_task(K_ECHO, e).task_id().is_valid();
    }

    // The manual scope: only explicit dependencies order these tasks.
    PTO2TaskId last_manual = PTO2TaskId::invalid();
    PTO2_SCOPE(PTO2ScopeMode::MANUAL) {
        CoreTaskArgs inc;
        inc.add_inout(x);
        inc.add_scalar(1.0f);
        TaskOutputTensors t1 = rt_submit_aiv_task(K_ADD_SCALAR, inc);

        CoreTaskArgs sq;
        sq.add_input(x, x);
        sq.add_output(x);
        PTO2TaskId after_t1[1] = {t1.task_id()};
        sq.set_dependencies(after_t1, 1);
        TaskOutputTensors t2 = rt_submit_aic_task(K_MUL, sq);

        CoreTaskArgs barrier;
        PTO2TaskId after_t2[1] = {t2.task_id()};
        DepFlags wait_only[1] = {DEP_WAIT};
        barrier.set_dependencies_with_kinds(after_t2, wait_only, 1);
        TaskOutputTensors t3 = rt_submit_dummy_task(barrier);

        CoreTaskArgsWithDeps<4> half;
        half.add_inout(x);
        half.add_scalar(0.5f);
        half.add_dep(t3.task_id());
        half.add_dep_wait(t2.task_id());
        TaskOutputTensors t4 = rt_submit_aiv_task(K_ADD_SCALAR, half);
        last_manual = t4.task_id();
        ids_valid &= t1.task_id().is_valid() && t2.task_id().is_valid() && t3.task_id().is_valid() &&
                     last_manual.is_valid();
    }

    // The three forms of alloc_tensors, with initial values read back.
    uint32_t four[1] = {4};
    TensorCreateInfo f_info(four, 1);
    f_info.set_initial_value(2.5f);
    TensorCreateInfo i_info(four, 1, DataType::INT32);
    i_info.set_initial_value<int32_t>(-3);
    TaskOutputTensors al1 = alloc_tensors(f_info, i_info);

    TensorCreateInfo pair[2] = {TensorCreateInfo(four, 1), TensorCreateInfo(four, 1)};
    pair[1].set_initial_value(7.0f);
    TaskOutputTensors al2 = alloc_tensors(pair, 2);

    TensorCreateInfo l_info(four, 1, DataType::INT64);
    l_info.set_initial_value<int64_t>(int64_t(1) << 40);
    CoreTaskArgs one;
    one.add_output(l_info);
    TaskOutputTensors al3 = alloc_tensors(one);

    uint32_t i0[1] = {0}, i2[1] = {2}, i3[1] = {3}, i1[1] = {1};
    put(vals, 0, get_tensor_data<float>(al1.get_ref(0), 1, i3));
    put(vals, 1, static_cast<float>(get_tensor_data<int32_t>(al1.get_ref(1), 1, i2)));
    put(vals, 2, get_tensor_data<float>(al2.get_ref(1), 1, i0));
    put(vals, 3, static_cast<float>(get_tensor_data<int64_t>(al3.get_ref(0), 1, i1)));
    put(vals, 9, static_cast<float>(al1.size()));
    put(vals, 10, static_cast<float>(al2.size()));
    put(vals, 11, static_cast<float>(al3.size()));
    ids_valid &= al1.task_id().is_valid() && al2.task_id().is_valid() && al3.task_id().is_valid();

    // y = al2[0] + al2[1] with al2[0] = [0, 1, 2, 3] written by the orchestration, into a
    // [2, 2] tensor over y's memory; the first input without a tensormap lookup.
    for (uint32_t i = 0; i < 4; i++) {
        uint32_t idx[1] = {i};
        set_tensor_data(al2.get_ref(0), 1, idx, static_cast<float>(i));
    }
    uint32_t two_by_two[2] = {2, 2};
    ChipTensor y2 = make_tensor_external(y.data_as<void>(), two_by_two, 2);
    CoreTaskArgs sum;
    sum.add_no_dep(al2.get_ref(0));
    sum.add_input(al2.get_ref(1));
    sum.add_output(y2);
    ids_valid &= rt_submit_aiv_task(K_ADD, sum).task_id().is_valid();
    uint32_t i11[2] = {1, 1};
    put(vals, 8, get_tensor_data<float>(y2, 2, i11));

    // Predicates on flag[0] = 5 (an alloc_tensors output, made a dependency explicitly).
    rt_scope_begin();
    {
        uint32_t one_elem[1] = {1};
        TensorCreateInfo flag_info(one_elem, 1, DataType::INT32);
        flag_info.set_initial_value<int32_t>(5);
        TaskOutputTensors flag = alloc_tensors(flag_info);
        CoreTaskPredicate pred;
        pred.operand.tensor = &flag.get_ref(0);
        pred.operand.ndims = 1;
        pred.operand.indices[0] = 0;
        pred.op = PredicateOp::GT;
        pred.target = 3;

        CoreTaskArgs pass;
        pass.add_inout(x);
        pass.add_scalar(100.0f);
        PTO2TaskId pass_deps[2] = {flag.task_id(), last_manual};
        pass.set_dependencies(pass_deps, 2);
        pass.set_predicate(pred);
        pass.set_allow_early_resolve();
        ids_valid &= rt_submit_aiv_task(K_ADD_SCALAR, pass).task_id().is_valid();

        CoreTaskArgs fail;
        fail.add_inout(x);
        fail.add_scalar(1000.0f);
        PTO2TaskId fail_deps[1] = {flag.task_id()};
        DepFlags keep[1] = {DEP_WAIT | DEP_RETAIN};
        fail.set_dependencies_with_kinds(fail_deps, keep, 1);
        pred.op = PredicateOp::LT;
        fail.set_predicate(pred);
        ids_valid &= rt_submit_aiv_task(K_ADD_SCALAR, fail).task_id().is_valid();
    }
    rt_scope_end();

    // A mixed task: one AIC and two AIV kernels share the task's arguments.
    {
        MixedKernels mk;
        mk.aic_kernel_id = K_MIXED_AIC;
        mk.aiv0_kernel_id = K_MIXED_AIV0;
        mk.aiv1_kernel_id = K_MIXED_AIV1;
        CoreTaskArgs m;
        m.add_input(src);
        m.add_output(mixed);
        ids_valid &= rt_submit_task(mk, m).task_id().is_valid();
    }

    // SPMD: four blocks, then n blocks started together.
    const int32_t clusters = rt_available_cluster_count();
    const int32_t aiv = rt_available_aiv_count();
    const int32_t n = aiv < 4 ? aiv : 4;
    put(vals, 4, static_cast<float>(clusters));
    put(vals, 5, static_cast<float>(aiv));
    put(vals, 6, static_cast<float>(n));
    PTO2_SCOPE() {
        uint32_t one_elem[1] = {1};
        TensorCreateInfo count_info(one_elem, 1, DataType::INT32);
        count_info.set_initial_value<int32_t>(0);
        TaskOutputTensors counter = alloc_tensors(count_info);

        CoreTaskArgs all;
        all.add_output(spmd);
        all.add_inout(counter.get_ref(0));
        all.add_scalar(0.5, int64_t(0));
        all.launch_spec.set_block_num(4);
        ids_valid &= rt_submit_aiv_task(K_SPMD_FILL, all).task_id().is_valid();

        if (n >= 1) {
            uint32_t rows[2] = {static_cast<uint32_t>(n), 8};
            uint32_t at[2] = {0, 0};
            ChipTensor first = spmd.view(rows, at);
            CoreTaskArgs together;
            together.add_inout(first);
            together.add_inout(counter.get_ref(0));
            together.add_scalar(1000.5, int64_t(0));
            together.launch_spec.set_block_num(static_cast<int16_t>(n));
            together.launch_spec.set_require_sync_start(true);
            ids_valid &= rt_submit_aiv_task(K_SPMD_FILL, together).task_id().is_valid();
        }
    }

    put(vals, 7, rt_is_fatal() ? 1.0f : 0.0f);
    put(vals, 12, ids_valid ? 1.0f : 0.0f);
    put(vals, 13, get_tensor_data<float>(x, 1, i0));
}

}  // extern "C"
