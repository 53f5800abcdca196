// Compile test for include/pto2: an orchestration library that touches every name the
// headers promise (upstream Simpler's PTO2 orchestration API). It is built, not run, by
// `make test-headers`; the exports of the resulting .so are checked with nm -D.
#include <stddef.h>
#include <stdint.h>

#include <string>
#include <type_traits>
#include <utility>

#include "pto_orchestration_api.h"

namespace {

enum class Mode : int32_t { A = 1, B = 2 };

static_assert(MAX_TENSOR_DIMS == 5);
static_assert(CORE_MAX_TENSOR_ARGS == 32 && CORE_MAX_SCALAR_ARGS == 16);
static_assert(CHIP_MAX_TENSOR_ARGS == 256 && CHIP_MAX_SCALAR_ARGS == 128);
static_assert(MAX_TENSOR_ARGS == 32 && MAX_SCALAR_ARGS == 16);
static_assert(static_cast<int32_t>(TensorArgType::INPUT) == 0 && static_cast<int32_t>(TensorArgType::OUTPUT) == 1);
static_assert(static_cast<int32_t>(TensorArgType::INOUT) == 2 && static_cast<int32_t>(TensorArgType::OUTPUT_EXISTING) == 3);
static_assert(static_cast<int32_t>(TensorArgType::NO_DEP) == 4);
static_assert(static_cast<int>(DataType::BFLOAT16) == 6 && static_cast<int>(DataType::FP4E2M1) == 14);
static_assert(static_cast<int>(DataType::DATA_TYPE_NUM) == 15);
static_assert(PTO2TaskId::make(2, 7).raw == ((uint64_t{2} << 32) | 7));
static_assert(PTO2TaskId::invalid().raw == UINT64_MAX && PTO2TaskId::invalid().is_invalid());
static_assert(PTO2TaskId::make(1, 3).ring() == 1 && PTO2TaskId::make(1, 3).local() == 3);
static_assert(PTO2TaskId::make(1, 3).is_valid() && PTO2TaskId::make(1, 3) == PTO2TaskId::make(1, 3));
static_assert(sizeof(ChipTensor) == 128 && sizeof(TensorCreateInfo) == 64);
static_assert(static_cast<uint8_t>(PTO2ScopeMode::MANUAL) == 1 && static_cast<uint8_t>(PTO2ScopeMode::AUTO) == 0);
static_assert(INVALID_KERNEL_ID == -1 && PTO2_SUBTASK_SLOT_COUNT == 3);
static_assert(static_cast<uint8_t>(PTO2SubtaskSlot::AIV1) == 2);
static_assert(dep_has_wait(DEP_WAIT | DEP_RETAIN) && dep_has_retain(DEP_RETAIN) && !dep_has_retain(DEP_WAIT));
static_assert(PTO2_ERROR_NONE == 0 && PTO2_ERROR_INVALID_ARGS == 5 && PTO2_ERROR_EXPLICIT_ORCH_FATAL == 9);
static_assert(PTO2_ERROR_SCOPE_DEADLOCK == 1 && PTO2_ERROR_HEAP_RING_DEADLOCK == 2);
static_assert(PTO2_ERROR_FLOW_CONTROL_DEADLOCK == 3 && PTO2_ERROR_DEP_POOL_OVERFLOW == 4);
static_assert(PTO2_ERROR_REQUIRE_SYNC_START_INVALID == 7 && PTO2_ERROR_TENSOR_WAIT_TIMEOUT == 8);
static_assert(PTO2_ERROR_SCOPE_TASKS_OVERFLOW == 10 && PTO2_ERROR_TENSORMAP_OVERFLOW == 11);
static_assert(PTO2_ERROR_SCHEDULER_TIMEOUT == 100 && PTO2_ERROR_ASYNC_COMPLETION_INVALID == 101);
static_assert(PTO2_ERROR_ASYNC_WAIT_OVERFLOW == 102 && PTO2_ERROR_ASYNC_REGISTRATION_FAILED == 103);
static_assert(std::is_same_v<PTO2RuntimeOps, taskring_pto2_ops>);
#ifndef PTO2_ORCHESTRATION_CONFIG_DEFINED
#error "PTO2_ORCHESTRATION_CONFIG_DEFINED is not set"
#endif

// get_ref exists on a named TaskOutputTensors only.
template <typename T, typename = void>
struct borrows_from_temporary : std::false_type {};
template <typename T>
struct borrows_from_temporary<T, std::void_t<decltype(std::declval<T>().get_ref(0))>> : std::true_type {};
static_assert(borrows_from_temporary<TaskOutputTensors &>::value);
static_assert(!borrows_from_temporary<TaskOutputTensors>::value);

constexpr DepFlags both_kinds() {
    DepFlags k = DEP_WAIT;
    k |= DEP_RETAIN;
    return k;
}
static_assert(both_kinds() == (DEP_WAIT | DEP_RETAIN) && (both_kinds() & DEP_RETAIN) == DEP_RETAIN);

void tensors_and_views(const ChipTensor &in) {
    static float host[64];
    const uint32_t shape2[2] = {8, 8};
    ChipTensor a = make_tensor_external(host, shape2, 2);
    ChipTensor b = make_tensor_external(host, shape2, 2, DataType::FLOAT32, false, 0, AddressSpace::HOST);
    const uint32_t strides[2] = {1, 8};
    ChipTensor c = make_tensor_strided(host, shape2, strides, 2, DataType::FLOAT32);
    ChipTensor d;
    d.init_external(host, sizeof host, shape2, 2, DataType::FLOAT32, 0);
    d.init_from(a);
    d.copy(b);
    const uint32_t idx[2] = {1, 2};
    const uint32_t box[2] = {4, 4};
    const uint32_t at[2] = {2, 2};
    const uint32_t order[2] = {1, 0};
    const uint32_t flat[1] = {64};
    ChipTensor v = a.view(box, at);
    ChipTensor t = a.transpose(0, 1);
    ChipTensor p = a.permute(order);
    ChipTensor s = a.slice(0, 0, 8, 2);
    ChipTensor r = a.reshape(flat, 1);
    bool ok = a.valid_reshape(flat, 1) && a.valid_transpose(0, 1) && !c.is_device_memory();
    uint64_t sum = a.numel() + a.nbytes() + a.extent_elem() + a.compute_flat_offset(idx, 2) + v.numel() + t.numel() +
                   p.numel() + s.numel() + r.numel() + get_element_size(a.dtype);
    std::string text = a.dump() + get_dtype_name(DataType::INT8) + (ok ? "" : "!");
    float *data = in.data_as<float>();
    PTOBufferHandle h = a.buffer;
    LOG_DEBUG("%s %llu %p %llu", text.c_str(), static_cast<unsigned long long>(sum), static_cast<void *>(data),
              static_cast<unsigned long long>(h.size));
}

void submits(const ChipTaskArgs &orch_args) {
    const ChipTensor &in0 = orch_args.tensor(0).ref();
    TensorArgType tag0 = orch_args.tag(0);
    uint64_t first_scalar = orch_args.scalar_count() > 0 ? orch_args.scalar(0) : 0;
    const uint32_t shape[1] = {16};
    TensorCreateInfo ci(shape, 1, DataType::FLOAT32);
    TensorCreateInfo ci2(shape, 1, DataType::INT32, true);
    ci2.set_initial_value<int32_t>(-1);
    TensorCreateInfo ci3(shape, 1);
    ci3.copy(ci);
    uint64_t need = ci.buffer_size_bytes();

    CoreTaskArgs args;
    args.add_input(in0);
    args.add_output(ci, ci2);
    args.add_scalar(first_scalar, 1.5f, int32_t{-3}, Mode::B, static_cast<int>(tag0), need);
    const uint64_t raw[2] = {1, 2};
    args.add_scalars(raw, 2);
    const int32_t small[2] = {-1, 4};
    args.add_scalars_i32(small, 2);
    args.launch_spec.set_block_num(4);
    args.launch_spec.set_require_sync_start(args.launch_spec.block_num() > 1 && !args.launch_spec.require_sync_start());
    args.set_allow_early_resolve();
    args.set_task_timing_slot(3);
    args.dump();
    args.dump(in0, ci);
    TaskOutputTensors outs = rt_submit_aiv_task(0, args);
    if (args.has_error) LOG_ERROR("%s", args.error_msg);
    const ChipTensor &y = outs.get_ref(0);
    const ChipTensor &beyond = outs.get_ref(99);
    PTO2TaskId producer = outs.task_id();
    LOG_INFO("outputs %u empty %d owner %llu beyond %u", outs.size(), outs.empty() ? 1 : 0,
             static_cast<unsigned long long>(y.owner_task_id.raw), beyond.ndims);

    CoreTaskArgs second;
    second.add_inout(y);
    second.add_no_dep(in0);
    second.add_output(in0);
    second.copy_scalars_from(args, 0, 2);
    PTO2TaskId deps[1] = {producer};
    second.set_dependencies(deps, 1);
    uint32_t n = second.explicit_dep_count();
    PTO2TaskId d0 = second.explicit_dep(0);
    DepFlags k0 = second.explicit_dep_kind(0);
    const PTO2TaskId *all = second.explicit_deps_data();
    LOG_WARN("deps %u %llu %d %p tensors %d scalars %d", n, static_cast<unsigned long long>(d0.raw), static_cast<int>(k0),
             static_cast<const void *>(all), second.tensor_count(), second.scalar_count());
    CorePredicateOperand operand{&y, 1, {0}};
    second.set_predicate(CoreTaskPredicate{operand, PredicateOp::GT, 0});
    MixedKernels mk;
    mk.aic_kernel_id = 1;
    mk.aiv0_kernel_id = 2;
    mk.aiv1_kernel_id = INVALID_KERNEL_ID;
    ActiveMask mask = mk.to_active_mask();
    TaskOutputTensors o2 = rt_submit_task(mk, second);
    second.clear();
    second.reset();
    DepFlags kinds[1] = {DEP_WAIT};
    second.set_dependencies_with_kinds(deps, kinds, 1);
    TaskOutputTensors o3 = rt_submit_aic_task(1, second);
    TaskOutputTensors o4 = rt_submit_dummy_task(second);

    CoreTaskArgsWithDeps<> wd;
    wd.add_input(in0);
    wd.add_scalar(uint64_t{7});
    wd.add_dep(o2.task_id(), o3.task_id());
    wd.add_dep_wait(o4.task_id());
    rt_submit_task(mk, wd);
    rt_submit_aic_task(1, wd);
    rt_submit_aiv_task(2, wd);
    rt_submit_dummy_task(wd);
    wd.reset();
    CoreTaskArgsWithDeps<2> small_deps;
    small_deps.add_dep(producer);
    LOG_TIMING("mask %u shape %d", mask.raw(), static_cast<int>(mask.to_shape()));

    TaskOutputTensors a1 = alloc_tensors(ci, ci2);
    TaskOutputTensors a2 = alloc_tensors(&ci3, 1);
    CoreTaskArgs only_outputs;
    only_outputs.add_output(ci);
    TaskOutputTensors a3 = alloc_tensors(only_outputs);
    const uint32_t i0[1] = {0};
    float f = get_tensor_data<float>(a1.get_ref(0), 1, i0);
    uint64_t bits = get_tensor_data(a2.get_ref(0), 1, i0);
    set_tensor_data(a3.get_ref(0), 1, i0, f + 1.0f);
    set_tensor_data(a3.get_ref(0), 1, i0, bits);
    ChipStorageTaskArgs storage;
    storage.add_tensor(in0);
    storage.add_scalar(uint64_t{5});
    ChipTaskArgs rebuilt;
    rebuilt.create_from_chip_args(storage);
    LOG_ALWAYS("rebuilt %d %d", rebuilt.tensor_count(), rebuilt.scalar_count());
    LOG_ALWAYS("clusters %d aiv %d fatal %d", rt_available_cluster_count(), rt_available_aiv_count(), rt_is_fatal());
    DispatchPredicate dp;
    (void)dp.pass();
    (void)to_u64(f);
    (void)from_u64<int16_t>(bits);
}

void scopes() {
    PTO2_SCOPE() { LOG_INFO("auto scope"); }
    PTO2_SCOPE(PTO2ScopeMode::MANUAL) { LOG_INFO("manual scope"); }
    {
        PTO2_SCOPE_GUARD();
        PTO2_SCOPE_GUARD(PTO2ScopeMode::MANUAL);
    }
    { PTO2ScopeGuard guard(PTO2ScopeMode::AUTO); }
    rt_scope_begin();
    rt_scope_end();
    rt_scope_begin(PTO2ScopeMode::MANUAL);
    rt_scope_end();
    always_assert(current_runtime() == framework_current_runtime());
    debug_assert(current_runtime() != nullptr);
}

}  // namespace

extern "C" {

__attribute__((visibility("default"))) PTO2OrchestrationConfig aicpu_orchestration_config(const ChipTaskArgs &args) {
    (void)args;
    return PTO2OrchestrationConfig{2};
}

__attribute__((visibility("default"))) void aicpu_orchestration_entry(const ChipTaskArgs &orch_args) {
    if (orch_args.tensor_count() < 1) {
        rt_report_fatal(PTO2_ERROR_INVALID_ARGS, "need a tensor, got %d", orch_args.tensor_count());
        rt_report_fatal(PTO2_ERROR_EXPLICIT_ORCH_FATAL, "no varargs");
        return;
    }
    tensors_and_views(orch_args.tensor(0).ref());
    scopes();
    submits(orch_args);
    rt_orchestration_done();
}

}  // extern "C"
