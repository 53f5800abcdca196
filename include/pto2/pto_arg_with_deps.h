// taskring's pto_arg_with_deps.h: CoreTaskArgsWithDeps<N>, Simpler's CoreTaskArgs with its
// own room for N explicit dependencies (add_dep / add_dep_wait), and the rt_submit_*
// overloads that take it. Included by pto_orchestration_api.h.
#pragma once

#include <stddef.h>
#include <stdint.h>

#include <type_traits>

#include "pto_orchestration_api.h"

#pragma GCC visibility push(hidden)

// The dependency setters of CoreTaskArgs (set_dependencies, explicit_dep*) are not
// reachable here; dependencies are added with add_dep / add_dep_wait only.
template <size_t MAX_DEP_COUNT = 16>
class CoreTaskArgsWithDeps : private CoreTaskArgs {
public:
    using CoreTaskArgs::add_inout;
    using CoreTaskArgs::add_input;
    using CoreTaskArgs::add_no_dep;
    using CoreTaskArgs::add_output;
    using CoreTaskArgs::add_scalar;
    using CoreTaskArgs::add_scalars;
    using CoreTaskArgs::add_scalars_i32;
    using CoreTaskArgs::allow_early_resolve;
    using CoreTaskArgs::copy_scalars_from;
    using CoreTaskArgs::dump;
    using CoreTaskArgs::predicate;
    using CoreTaskArgs::scalar_count;
    using CoreTaskArgs::set_allow_early_resolve;
    using CoreTaskArgs::set_predicate;
    using CoreTaskArgs::set_task_timing_slot;
    using CoreTaskArgs::task_timing_slot;
    using CoreTaskArgs::tensor_count;

    using CoreTaskArgs::error_msg;
    using CoreTaskArgs::has_error;
    using CoreTaskArgs::launch_spec;
    using CoreTaskArgs::set_error;

    // Depend on each task (wait for it and keep its outputs alive until this one is done).
    template <typename... Ids>
    void add_dep(Ids... ids) {
        push(DEP_WAIT | DEP_RETAIN, ids...);
    }

    // Only wait for each task; its outputs are not kept alive for this one.
    template <typename... Ids>
    void add_dep_wait(Ids... ids) {
        push(DEP_WAIT, ids...);
    }

    // Empty, for reuse (arguments, dependencies and any recorded error).
    void reset() {
        CoreTaskArgs::reset();
        count_ = 0;
    }

    // The underlying CoreTaskArgs with the collected dependencies attached; used by the
    // rt_submit_* overloads. Can be called again (the attachment is replaced).
    CoreTaskArgs &finalize_for_submit() {
        CoreTaskArgs::set_dependencies(nullptr, 0);
        CoreTaskArgs::set_dependencies_with_kinds(deps_, kinds_, count_);
        return *this;
    }

private:
    template <typename... Ids>
    void push(DepFlags kind, Ids... ids) {
        static_assert(sizeof...(Ids) >= 1, "add_dep/add_dep_wait: at least one task id is required");
        static_assert(
            (std::is_same_v<std::decay_t<Ids>, PTO2TaskId> && ...), "add_dep/add_dep_wait: all arguments must be PTO2TaskId"
        );
        if (count_ + sizeof...(Ids) > MAX_DEP_COUNT) {
            CoreTaskArgs::set_error(
                "CoreTaskArgsWithDeps::add_dep/add_dep_wait: dep count exceeds MAX_DEP_COUNT (bump the template arg)"
            );
            return;
        }
        for (PTO2TaskId id : {ids...}) {
            deps_[count_] = id;
            kinds_[count_] = kind;
            ++count_;
        }
    }

    PTO2TaskId deps_[MAX_DEP_COUNT];
    DepFlags kinds_[MAX_DEP_COUNT];
    uint32_t count_ = 0;
};

template <size_t N>
inline TaskOutputTensors rt_submit_task(const MixedKernels &mixed_kernels, CoreTaskArgsWithDeps<N> &args) {
    return rt_submit_task(mixed_kernels, args.finalize_for_submit());
}

template <size_t N>
inline TaskOutputTensors rt_submit_aic_task(int32_t kernel_id, CoreTaskArgsWithDeps<N> &args) {
    return rt_submit_aic_task(kernel_id, args.finalize_for_submit());
}

template <size_t N>
inline TaskOutputTensors rt_submit_aiv_task(int32_t kernel_id, CoreTaskArgsWithDeps<N> &args) {
    return rt_submit_aiv_task(kernel_id, args.finalize_for_submit());
}

template <size_t N>
inline TaskOutputTensors rt_submit_dummy_task(CoreTaskArgsWithDeps<N> &args) {
    return rt_submit_dummy_task(args.finalize_for_submit());
}

#pragma GCC visibility pop
