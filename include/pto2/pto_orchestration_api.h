// taskring's pto_orchestration_api.h: the header an orchestration source of Simpler's
// PTO2 API includes. It gives upstream's names (rt_submit_*, alloc_tensors, scopes,
// get/set_tensor_data, LOG_*, rt_report_fatal, ...) on top of taskring's C boundary
// (taskring_pto2_abi.h): every call goes through the function table of the PTO2Runtime
// bound to the calling thread, and the library needs nothing from taskring at link time.
//
// It also defines, in every library that includes it, the two symbols the chip looks up:
// taskring_pto2_config and taskring_pto2_enter (see the end of this file).
#pragma once

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <exception>
#include <type_traits>

#include "common.h"
#include "pto_runtime2_types.h"
#include "pto_submit_types.h"
#include "pto_types.h"
#include "task_args.h"
#include "taskring_pto2_abi.h"
#include "tensor.h"
#include "tensor_create_info.h"

#pragma GCC visibility push(hidden)

typedef taskring_pto2_ops PTO2RuntimeOps;

// The part of the chip's runtime object an orchestration sees (the chip's own struct
// starts with these two fields).
struct PTO2Runtime {
    const PTO2RuntimeOps *ops;
    PTO2ScopeMode pending_scope_mode;
};
typedef struct PTO2Runtime PTO2Runtime;

inline PTO2Runtime *current_runtime() { return framework_current_runtime(); }

#ifndef PTO2_ORCHESTRATION_CONFIG_DEFINED
#define PTO2_ORCHESTRATION_CONFIG_DEFINED
// What aicpu_orchestration_config reports: how many entry arguments (tensors + scalars)
// the entry expects.
struct PTO2OrchestrationConfig {
    int expected_arg_count;
};
#endif

namespace taskring_pto2_detail {

inline bool fatal(PTO2Runtime *rt) { return rt->ops->is_fatal(rt) != 0; }

// printf-style text into a stack buffer, handed to ops->log (or to stderr when no
// runtime is bound to this thread).
__attribute__((format(printf, 3, 4))) inline void log(int32_t level, const char *func, const char *fmt, ...) {
    char text[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    PTO2Runtime *rt = current_runtime();
    if (rt != nullptr && rt->ops != nullptr) {
        rt->ops->log(rt, level, func, text);
    } else {
        fprintf(stderr, "[pto2 %s] %s\n", func ? func : "?", text);
    }
}

__attribute__((format(printf, 4, 5))) inline void report_fatal(
    PTO2Runtime *rt, int32_t code, const char *func, const char *fmt, ...
) {
    char text[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    if (rt != nullptr && rt->ops != nullptr) {
        rt->ops->report_fatal(rt, code, func, text);
    } else {
        fprintf(stderr, "[pto2 %s] fatal %d: %s\n", func ? func : "?", static_cast<int>(code), text);
    }
}

// One submit through ops->submit: the description points into `args`, the outputs are
// written into the returned object's own storage. Once the run is fatal the table's submit
// returns at once (an invalid task id, no outputs), so the wrappers do not ask first.
inline TaskOutputTensors submit(PTO2Runtime *rt, int32_t kind, const MixedKernels &mk, const CoreTaskArgs &args) {
    TaskOutputTensors result;
    taskring_pto2_submit s;
    memset(&s, 0, sizeof s);
    s.tensors = reinterpret_cast<const void *const *>(args.tensors_);
    s.tags = reinterpret_cast<const int32_t *>(args.tags_);
    s.scalars = args.scalars_;
    s.deps = reinterpret_cast<const uint64_t *>(args.explicit_deps_data());
    s.dep_kinds = reinterpret_cast<const uint8_t *>(args.explicit_dep_kinds_data());
    s.error_msg = args.has_error ? args.error_msg : nullptr;
    const CoreTaskPredicate &p = args.predicate();
    if (p.op != PredicateOp::NONE) {
        s.predicate_tensor = p.operand.tensor;
        s.predicate_target = p.target;
        s.predicate_ndims = p.operand.ndims;
        for (int d = 0; d < MAX_TENSOR_DIMS; ++d) s.predicate_indices[d] = p.operand.indices[d];
    }
    s.tensor_count = args.tensor_count();
    s.scalar_count = args.scalar_count();
    s.dep_count = args.explicit_dep_count();
    s.kernel_ids[0] = mk.aic_kernel_id;
    s.kernel_ids[1] = mk.aiv0_kernel_id;
    s.kernel_ids[2] = mk.aiv1_kernel_id;
    s.kind = kind;
    s.task_timing_slot = args.task_timing_slot();
    s.block_num = args.launch_spec.block_num();
    s.require_sync_start = args.launch_spec.require_sync_start() ? 1 : 0;
    s.allow_early_resolve = args.allow_early_resolve() ? 1 : 0;
    s.has_error = args.has_error ? 1 : 0;
    s.predicate_op = static_cast<uint8_t>(p.op);
    taskring_pto2_outputs out;
    result.taskring_bind(out);
    rt->ops->submit(rt, &s, &out);
    result.taskring_take(out);
    return result;
}

// The layouts the submit description relies on.
static_assert(sizeof(taskring_pto2_submit) == 136, "taskring_pto2_submit layout");
static_assert(sizeof(TensorArgType) == sizeof(int32_t), "tags are 32-bit");
static_assert(sizeof(DepFlags) == 1, "dep kinds are bytes");
static_assert(sizeof(PTO2TaskId) == sizeof(uint64_t), "deps are 64-bit");
static_assert(sizeof(ChipTensor) == 128, "outputs are 128-byte ChipTensors");

}  // namespace taskring_pto2_detail

// Outputs only: a task that allocates the OUTPUT tensors of `args` and runs nothing.
inline TaskOutputTensors alloc_tensors(const CoreTaskArgs &args) {
    PTO2Runtime *rt = current_runtime();
    return taskring_pto2_detail::submit(rt, TASKRING_PTO2_SUBMIT_ALLOC, MixedKernels{}, args);
}

inline TaskOutputTensors alloc_tensors(const TensorCreateInfo create_infos[], uint32_t count) {
    PTO2Runtime *rt = current_runtime();
    if (taskring_pto2_detail::fatal(rt)) return TaskOutputTensors{};
    CoreTaskArgs args;
    for (uint32_t i = 0; i < count; ++i) args.add_output(create_infos[i]);
    if (args.has_error) {
        taskring_pto2_detail::report_fatal(
            rt, PTO2_ERROR_INVALID_ARGS, __FUNCTION__, "%s",
            args.error_msg ? args.error_msg : "alloc_tensors failed to construct output-only Arg"
        );
        return TaskOutputTensors{};
    }
    return alloc_tensors(args);
}

// (Not chosen for an array and a count, whatever the count's integer type.)
template <typename... CIs, typename = std::enable_if_t<!(std::is_pointer_v<std::decay_t<CIs>> || ...)>>
inline TaskOutputTensors alloc_tensors(const CIs &...cis) {
    static_assert(sizeof...(cis) > 0, "alloc_tensors requires at least one TensorCreateInfo");
    static_assert(
        (std::is_same_v<std::decay_t<CIs>, TensorCreateInfo> && ...), "alloc_tensors only accepts TensorCreateInfo arguments"
    );
    PTO2Runtime *rt = current_runtime();
    if (taskring_pto2_detail::fatal(rt)) return TaskOutputTensors{};
    CoreTaskArgs args;
    args.add_output(cis...);
    if (args.has_error) {
        taskring_pto2_detail::report_fatal(
            rt, PTO2_ERROR_INVALID_ARGS, __FUNCTION__, "%s",
            args.error_msg ? args.error_msg : "alloc_tensors failed to construct output-only Arg"
        );
        return TaskOutputTensors{};
    }
    return alloc_tensors(args);
}

inline TaskOutputTensors rt_submit_task(const MixedKernels &mixed_kernels, const CoreTaskArgs &args) {
    PTO2Runtime *rt = current_runtime();
    return taskring_pto2_detail::submit(rt, TASKRING_PTO2_SUBMIT_TASK, mixed_kernels, args);
}

inline TaskOutputTensors rt_submit_aic_task(int32_t kernel_id, const CoreTaskArgs &args) {
    MixedKernels mk;
    mk.aic_kernel_id = kernel_id;
    return rt_submit_task(mk, args);
}

inline TaskOutputTensors rt_submit_aiv_task(int32_t kernel_id, const CoreTaskArgs &args) {
    MixedKernels mk;
    mk.aiv0_kernel_id = kernel_id;
    return rt_submit_task(mk, args);
}

// A task that runs no kernel but takes part in dependencies like any other.
inline TaskOutputTensors rt_submit_dummy_task(const CoreTaskArgs &args) {
    PTO2Runtime *rt = current_runtime();
    return taskring_pto2_detail::submit(rt, TASKRING_PTO2_SUBMIT_DUMMY, MixedKernels{}, args);
}

inline void rt_scope_begin(PTO2ScopeMode mode = PTO2ScopeMode::AUTO) {
    PTO2Runtime *rt = current_runtime();
    if (taskring_pto2_detail::fatal(rt)) return;
    rt->pending_scope_mode = mode;
    rt->ops->scope_begin(rt, static_cast<uint8_t>(mode), nullptr, 0);
}

inline void rt_scope_end() {
    PTO2Runtime *rt = current_runtime();
    if (taskring_pto2_detail::fatal(rt)) return;
    rt->ops->scope_end(rt);
}

inline void rt_orchestration_done() {
    PTO2Runtime *rt = current_runtime();
    rt->ops->orchestration_done(rt);
}

// The chip's clusters (one AIC core each) and AIV cores: a2a3's 24 and 48.
inline int32_t rt_available_cluster_count() {
    PTO2Runtime *rt = current_runtime();
    return rt->ops->available_cluster_count(rt);
}

inline int32_t rt_available_aiv_count() {
    PTO2Runtime *rt = current_runtime();
    return rt->ops->available_aiv_count(rt);
}

inline bool rt_is_fatal() { return taskring_pto2_detail::fatal(current_runtime()); }

// Fail the run with `code` and a printf-style message; later runtime calls do nothing.
#define rt_report_fatal(code, fmt, ...)                                                                           \
    do {                                                                                                          \
        taskring_pto2_detail::report_fatal(current_runtime(), (code), __FUNCTION__, (fmt), ##__VA_ARGS__);       \
    } while (0)

#define LOG_ERROR(fmt, ...) taskring_pto2_detail::log(TASKRING_PTO2_LOG_ERROR, __FUNCTION__, fmt, ##__VA_ARGS__)
#define LOG_WARN(fmt, ...) taskring_pto2_detail::log(TASKRING_PTO2_LOG_WARN, __FUNCTION__, fmt, ##__VA_ARGS__)
#define LOG_INFO(fmt, ...) taskring_pto2_detail::log(TASKRING_PTO2_LOG_INFO, __FUNCTION__, fmt, ##__VA_ARGS__)
#define LOG_DEBUG(fmt, ...) taskring_pto2_detail::log(TASKRING_PTO2_LOG_DEBUG, __FUNCTION__, fmt, ##__VA_ARGS__)
#define LOG_ALWAYS(fmt, ...) taskring_pto2_detail::log(TASKRING_PTO2_LOG_ALWAYS, __FUNCTION__, fmt, ##__VA_ARGS__)
#define LOG_TIMING(fmt, ...) taskring_pto2_detail::log(TASKRING_PTO2_LOG_TIMING, __FUNCTION__, fmt, ##__VA_ARGS__)

// The element of `tensor` at `indices`, as T (raw 64 bits by default). Waits for the
// tensor's producer first.
template <typename T = uint64_t>
inline T get_tensor_data(const ChipTensor &tensor, uint32_t ndims, const uint32_t indices[]) {
    PTO2Runtime *rt = current_runtime();
    if (taskring_pto2_detail::fatal(rt)) return from_u64<T>(0);
    return from_u64<T>(rt->ops->get_tensor_data(rt, &tensor, ndims, indices));
}

// Store `value` at `indices` of `tensor`, after its producer and readers are done.
template <typename T = uint64_t>
inline void set_tensor_data(const ChipTensor &tensor, uint32_t ndims, const uint32_t indices[], T value) {
    PTO2Runtime *rt = current_runtime();
    if (taskring_pto2_detail::fatal(rt)) return;
    rt->ops->set_tensor_data(rt, &tensor, ndims, indices, to_u64(value));
}

// A scope for the lifetime of the object (nothing happens once the run is fatal).
class PTO2ScopeGuard {
public:
    explicit PTO2ScopeGuard(
        PTO2ScopeMode mode = PTO2ScopeMode::AUTO, const char *file = __builtin_FILE(), int line = __builtin_LINE()
    ) :
        rt_(current_runtime()) {
        if (taskring_pto2_detail::fatal(rt_)) return;
        rt_->pending_scope_mode = mode;
        rt_->ops->scope_begin(rt_, static_cast<uint8_t>(mode), file, static_cast<int32_t>(line));
    }
    ~PTO2ScopeGuard() {
        if (!taskring_pto2_detail::fatal(rt_)) rt_->ops->scope_end(rt_);
    }
    PTO2ScopeGuard(const PTO2ScopeGuard &) = delete;
    PTO2ScopeGuard &operator=(const PTO2ScopeGuard &) = delete;

private:
    PTO2Runtime *rt_;
};

#define TASKRING_PTO2_JOIN2(a, b) a##b
#define TASKRING_PTO2_JOIN(a, b) TASKRING_PTO2_JOIN2(a, b)

// A scope until the end of the enclosing block: PTO2_SCOPE_GUARD(); or
// PTO2_SCOPE_GUARD(PTO2ScopeMode::MANUAL);
#define PTO2_SCOPE_GUARD(...) \
    [[maybe_unused]] PTO2ScopeGuard TASKRING_PTO2_JOIN(pto2_scope_guard_, __COUNTER__) { __VA_ARGS__ }

// A scope around the statement that follows: PTO2_SCOPE() { ... }
#define PTO2_SCOPE(...) \
    if (PTO2ScopeGuard TASKRING_PTO2_JOIN(pto2_scope_, __COUNTER__){__VA_ARGS__}; true)

namespace taskring_pto2_detail {

// The entry's ChipTaskArgs over the chip's arrays; false (and an error recorded) when the
// counts do not fit.
inline bool entry_args(ChipTaskArgs &out, const taskring_pto2_entry_args *in) {
    if (in == nullptr) return true;
    if (in->tensor_count < 0 || in->tensor_count > CHIP_MAX_TENSOR_ARGS || in->scalar_count < 0 ||
        in->scalar_count > CHIP_MAX_SCALAR_ARGS) {
        out.set_error("entry arguments exceed ChipTaskArgs capacity");
        return false;
    }
    const ChipTensor *tensors = static_cast<const ChipTensor *>(in->tensors);
    for (int32_t i = 0; i < in->tensor_count; ++i) {
        const ChipTensor &t = tensors[i];
        out.add_input(t);
    }
    for (int32_t i = 0; i < in->scalar_count; ++i) out.add_scalar(in->scalars[i]);
    return !out.has_error;
}

typedef PTO2OrchestrationConfig (*config_fn_t)(const ChipTaskArgs &);
typedef void (*entry_fn_t)(const ChipTaskArgs &);

template <typename F>
inline F as_function(const void *p) {
    F f;
    static_assert(sizeof f == sizeof p, "function and data pointers have one size");
    memcpy(&f, &p, sizeof f);
    return f;
}

}  // namespace taskring_pto2_detail

#pragma GCC visibility pop

// The two symbols of taskring_pto2_abi.h, emitted (once per library) into every library
// that includes this header.
extern "C" {

__attribute__((visibility("default"), used)) inline int32_t taskring_pto2_config(
    const void *config_fn, const taskring_pto2_entry_args *args, uint32_t *abi
) {
    if (abi != nullptr) *abi = TASKRING_PTO2_ABI_VERSION;
    if (config_fn == nullptr) return -1;
    ChipTaskArgs targs;
    if (!taskring_pto2_detail::entry_args(targs, args)) return -1;
    const auto fn = taskring_pto2_detail::as_function<taskring_pto2_detail::config_fn_t>(config_fn);
#if defined(__cpp_exceptions) || defined(__EXCEPTIONS)
    try {
        return fn(targs).expected_arg_count;
    } catch (...) {
        return -1;
    }
#else
    return fn(targs).expected_arg_count;
#endif
}

__attribute__((visibility("default"), used)) inline int32_t taskring_pto2_enter(
    PTO2Runtime *rt, const void *entry_fn, const taskring_pto2_entry_args *args
) {
    PTO2Runtime *const previous = framework_current_runtime();
    framework_bind_runtime(rt);
    int32_t rc = 0;
    ChipTaskArgs targs;
    if (!taskring_pto2_detail::entry_args(targs, args)) {
        taskring_pto2_detail::report_fatal(
            rt, PTO2_ERROR_INVALID_ARGS, "taskring_pto2_enter", "%d tensors and %d scalars do not fit ChipTaskArgs (max %d and %d)",
            args->tensor_count, args->scalar_count, CHIP_MAX_TENSOR_ARGS, CHIP_MAX_SCALAR_ARGS
        );
        rc = 1;
    } else {
        const auto fn = taskring_pto2_detail::as_function<taskring_pto2_detail::entry_fn_t>(entry_fn);
#if defined(__cpp_exceptions) || defined(__EXCEPTIONS)
        try {
            fn(targs);
        } catch (const std::exception &e) {
            taskring_pto2_detail::report_fatal(
                rt, PTO2_ERROR_EXPLICIT_ORCH_FATAL, "taskring_pto2_enter", "orchestration entry threw: %s", e.what()
            );
            rc = 1;
        } catch (...) {
            taskring_pto2_detail::report_fatal(
                rt, PTO2_ERROR_EXPLICIT_ORCH_FATAL, "taskring_pto2_enter", "orchestration entry threw a non-std exception"
            );
            rc = 1;
        }
#else
        fn(targs);
#endif
    }
    framework_bind_runtime(previous);
    return rc;
}

}  // extern "C"

#include "pto_arg_with_deps.h"
