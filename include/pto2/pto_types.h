// taskring's pto_types.h: the argument and result types of Simpler's PTO2 submit API —
// Arg (CoreTaskArgs, ChipTaskArgs), TaskOutputTensors, DepFlags, PTO2ScopeMode and the
// dispatch predicate. Same names, signatures, limits and error texts as upstream.
//
// One deliberate difference: TaskOutputTensors holds its outputs by value (room for
// TASKRING_PTO2_MAX_OUTPUTS), and get_ref(i) past size() yields an all-zero tensor with an
// invalid owner instead of aborting, so the outputs of a failed submit are safe to touch.
#pragma once

#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <string>
#include <type_traits>
#include <utility>

#include "arg_direction.h"
#include "assert_compat.h"
#include "data_type.h"
#include "pto_submit_types.h"
#include "pto_task_id.h"
#include "task_args.h"
#include "taskring_pto2_abi.h"
#include "tensor.h"
#include "tensor_create_info.h"

#pragma GCC visibility push(hidden)

// Selective task timing: a task may be tagged with one of 16 slots.
inline constexpr int32_t NUM_TASK_TIMING_SLOTS = 16;
inline constexpr int32_t TASK_TIMING_SLOT_NONE = -1;

// Outputs one submit can return (runtime-allocated, tag OUTPUT).
inline constexpr uint32_t TASKRING_PTO2_MAX_OUTPUTS = 16;

typedef enum {
    ASYNC_ENGINE_SDMA = 0,
    ASYNC_ENGINE_ROCE = 1,
    ASYNC_ENGINE_URMA = 2,
    ASYNC_ENGINE_CCU = 3,
    NUM_ASYNC_ENGINES = 4,
} AsyncEngine;

enum class CompletionType : int32_t {
    COUNTER = 0,
};

// AUTO: the scope infers dependencies from tensor use. MANUAL: tasks inside order only by
// explicit dependencies.
enum class PTO2ScopeMode : uint8_t {
    AUTO = 0,
    MANUAL = 1,
};

// Kinds of an explicit dependency edge. DEP_WAIT: wait for the producer to finish.
// DEP_RETAIN: keep the producer's outputs alive until this consumer is done.
enum DepFlags : uint8_t {
    DEP_NONE = 0,
    DEP_WAIT = 1u << 0,
    DEP_RETAIN = 1u << 1,
};

constexpr DepFlags operator|(DepFlags a, DepFlags b) {
    return static_cast<DepFlags>(static_cast<unsigned>(a) | static_cast<unsigned>(b));
}
constexpr DepFlags operator&(DepFlags a, DepFlags b) {
    return static_cast<DepFlags>(static_cast<unsigned>(a) & static_cast<unsigned>(b));
}
constexpr DepFlags &operator|=(DepFlags &a, DepFlags b) { return a = a | b; }
constexpr bool dep_has_wait(DepFlags f) { return (f & DEP_WAIT) != DEP_NONE; }
constexpr bool dep_has_retain(DepFlags f) { return (f & DEP_RETAIN) != DEP_NONE; }

// What a submit returns: the task id and the outputs the runtime allocated for it, in
// add_output order. Borrow an output with get_ref(i) on a named object (not on a
// temporary); it stays meaningful within the scope of the submit.
class TaskOutputTensors {
public:
    TaskOutputTensors() : task_id_(PTO2TaskId::invalid()), output_count_(0) {}

    bool empty() const { return output_count_ == 0; }
    uint32_t size() const { return output_count_; }
    PTO2TaskId task_id() const { return task_id_; }

    const ChipTensor &get_ref(uint32_t index) const & {
        if (index >= TASKRING_PTO2_MAX_OUTPUTS || index >= output_count_) return none();
        return tensors_[index];
    }
    const ChipTensor &get_ref(uint32_t index) const && = delete;

    void materialize_output(const ChipTensor &tensor) {
        always_assert(output_count_ < TASKRING_PTO2_MAX_OUTPUTS);
        tensors_[output_count_++] = tensor;
    }
    void set_task_id(PTO2TaskId id) { task_id_ = id; }

    // For the submit wrappers: point `out` at this object's storage, and take the
    // result back.
    void taskring_bind(taskring_pto2_outputs &out) {
        out.task_id = PTO2TaskId::invalid().raw;
        out.count = 0;
        out.capacity = TASKRING_PTO2_MAX_OUTPUTS;
        out.tensors = static_cast<void *>(tensors_);
    }
    void taskring_take(const taskring_pto2_outputs &out) {
        task_id_ = PTO2TaskId{out.task_id};
        output_count_ = out.count < TASKRING_PTO2_MAX_OUTPUTS ? out.count : TASKRING_PTO2_MAX_OUTPUTS;
    }

    // The tensor get_ref returns for an index past size(): zero bytes, owner invalid.
    static const ChipTensor &none() {
        static const ChipTensor zero = [] {
            ChipTensor t{};
            t.owner_task_id = PTO2TaskId::invalid();
            return t;
        }();
        return zero;
    }

private:
    PTO2TaskId task_id_;
    uint32_t output_count_;
    ChipTensor tensors_[TASKRING_PTO2_MAX_OUTPUTS];
};

// One tensor slot of an Arg: a ChipTensor, or a TensorCreateInfo when the slot's tag is
// OUTPUT. Written in place, never copied.
class TensorRef {
    union {
        const ChipTensor *ptr_;
        const TensorCreateInfo *create_info_;
    };

public:
    TensorRef() : ptr_(nullptr) {}
    TensorRef(const TensorRef &) = delete;
    TensorRef(TensorRef &&) = delete;
    TensorRef &operator=(const TensorRef &) = delete;
    TensorRef &operator=(TensorRef &&) = delete;

    TensorRef &operator=(const ChipTensor *p) {
        ptr_ = p;
        return *this;
    }
    TensorRef &operator=(const TensorCreateInfo *ci) {
        create_info_ = ci;
        return *this;
    }

    const ChipTensor &ref() const { return *ptr_; }
    const TensorCreateInfo &create_info() const { return *create_info_; }
    bool refers_to(const ChipTensor *t) const { return ptr_ == t; }
    bool refers_to(const TensorCreateInfo *ci) const { return create_info_ == ci; }
    const void *taskring_address() const { return ptr_; }
};

static_assert(sizeof(TensorRef) == sizeof(void *), "a TensorRef is one pointer");

// The element of a tensor that a predicate reads (tensor, ndims, indices as for
// get_tensor_data). The tensor must outlive the submit.
struct CorePredicateOperand {
    const ChipTensor *tensor{nullptr};
    uint32_t ndims{0};
    uint32_t indices[MAX_TENSOR_DIMS]{};
};

// Run the task only when (operand OP target); otherwise it completes without running.
struct CoreTaskPredicate {
    CorePredicateOperand operand;
    PredicateOp op{PredicateOp::NONE};
    int64_t target{0};
};

// The arguments of one task: tensors (all before any scalar) with their tags, 64-bit
// scalars, explicit dependencies and per-task knobs. Mistakes are recorded (has_error,
// error_msg: the first one) and make the submit fail with PTO2_ERROR_INVALID_ARGS.
template <size_t MaxT, size_t MaxS>
struct Arg : TaskArgsTpl<TensorRef, uint64_t, MaxT, MaxS, TensorArgType> {
    using Base = TaskArgsTpl<TensorRef, uint64_t, MaxT, MaxS, TensorArgType>;
    using Base::scalar_count_;
    using Base::scalars_;
    using Base::tags_;
    using Base::tensor_count_;
    using Base::tensors_;

    Arg() = default;
    Arg(const Arg &) = delete;
    Arg(Arg &&) = delete;
    Arg &operator=(const Arg &) = delete;
    Arg &operator=(Arg &&) = delete;

    bool has_error{false};
    const char *error_msg{nullptr};
    PTO2LaunchSpec launch_spec;

    bool allow_early_resolve_{false};
    void set_allow_early_resolve(bool v = true) { allow_early_resolve_ = v; }
    bool allow_early_resolve() const { return allow_early_resolve_; }

    CoreTaskPredicate predicate_;
    void set_predicate(const CoreTaskPredicate &pred) { predicate_ = pred; }
    const CoreTaskPredicate &predicate() const { return predicate_; }

    int32_t task_timing_slot_{TASK_TIMING_SLOT_NONE};
    void set_task_timing_slot(int32_t slot) {
        if (slot < 0 || slot >= NUM_TASK_TIMING_SLOTS) {
            set_error("task_timing_slot out of range (valid: 0..15)");
            return;
        }
        task_timing_slot_ = slot;
    }
    int32_t task_timing_slot() const { return task_timing_slot_; }

    // Drop the arguments, dependencies and knobs; a recorded error stays.
    void clear() {
        Base::clear();
        deps_ = nullptr;
        dep_kinds_ = nullptr;
        dep_count_ = 0;
        allow_early_resolve_ = false;
        predicate_ = CoreTaskPredicate{};
        task_timing_slot_ = TASK_TIMING_SLOT_NONE;
    }

    // clear() and forget the recorded error.
    void reset() {
        clear();
        has_error = false;
        error_msg = nullptr;
    }

    void set_error(const char *msg) {
        if (has_error) return;
        has_error = true;
        error_msg = msg;
    }

    // Argument dumping is not collected by taskring; accepted and ignored.
    template <typename... Args>
    void dump(Args &&...args) {
        ((void)args, ...);
    }
    uint64_t dump_arg_mask() const { return 0; }
    uint64_t dump_arg_index_ambiguous_mask() const { return 0; }
    const uint8_t *scalar_dtypes() const { return nullptr; }

    template <typename... Args>
    void add_input(Args &&...args) {
        check_tensor_types<false, Args...>();
        append(TensorArgType::INPUT, args...);
    }

    // All TensorCreateInfo (OUTPUT: the runtime allocates) or all ChipTensor
    // (OUTPUT_EXISTING: written in place).
    template <typename... Args>
    void add_output(Args &&...args) {
        check_tensor_types<true, Args...>();
        constexpr bool create = (std::is_same_v<std::decay_t<Args>, TensorCreateInfo> && ...);
        append(create ? TensorArgType::OUTPUT : TensorArgType::OUTPUT_EXISTING, args...);
    }

    template <typename... Args>
    void add_inout(Args &&...args) {
        check_tensor_types<false, Args...>();
        append(TensorArgType::INOUT, args...);
    }

    template <typename... Args>
    void add_no_dep(Args &&...args) {
        check_tensor_types<false, Args...>();
        append(TensorArgType::NO_DEP, args...);
    }

    // Explicit dependencies (each DEP_WAIT|DEP_RETAIN). The array is borrowed until the
    // submit. count 0 clears; a second non-empty call is an error.
    void set_dependencies(const PTO2TaskId *deps, uint32_t count) {
        if (count == 0) {
            drop_dependencies();
            return;
        }
        if (deps == nullptr) {
            set_error("set_dependencies: deps must not be null when count > 0");
            return;
        }
        if (deps_ != nullptr) {
            set_error("set_dependencies: may be called at most once per Arg");
            return;
        }
        deps_ = deps;
        dep_kinds_ = nullptr;
        dep_count_ = count;
    }

    // As set_dependencies, with one DepFlags per dependency (also borrowed).
    void set_dependencies_with_kinds(const PTO2TaskId *deps, const DepFlags *kinds, uint32_t count) {
        if (count == 0) {
            drop_dependencies();
            return;
        }
        if (deps == nullptr || kinds == nullptr) {
            set_error("set_dependencies_with_kinds: deps and kinds must not be null when count > 0");
            return;
        }
        if (deps_ != nullptr) {
            set_error("set_dependencies_with_kinds: may be called at most once per Arg");
            return;
        }
        deps_ = deps;
        dep_kinds_ = kinds;
        dep_count_ = count;
    }

    uint32_t explicit_dep_count() const { return dep_count_; }
    PTO2TaskId explicit_dep(uint32_t index) const {
        always_assert(index < dep_count_);
        return deps_[index];
    }
    DepFlags explicit_dep_kind(uint32_t index) const {
        always_assert(index < dep_count_);
        return dep_kinds_ != nullptr ? dep_kinds_[index] : (DEP_WAIT | DEP_RETAIN);
    }
    const PTO2TaskId *explicit_deps_data() const { return deps_; }
    const DepFlags *explicit_dep_kinds_data() const { return dep_kinds_; }

    // Scalars of any arithmetic or enum type, each stored as its bytes in a 64-bit word.
    template <typename... Args>
    void add_scalar(Args &&...args) {
        static_assert(sizeof...(Args) >= 1, "add_scalar: at least one argument required");
        static_assert((is_supported_scalar_arg_v<Args> && ...), "add_scalar: all types must be arithmetic or enum");
        if (!scalar_room(sizeof...(Args))) return;
        ((scalars_[scalar_count_++] = to_u64(static_cast<std::decay_t<Args>>(args))), ...);
    }

    void add_scalars(const uint64_t *values, int count) {
        if (count < 0 || !scalar_room(static_cast<size_t>(count))) {
            set_error(limit_text(false));
            return;
        }
        if (count > 0) memcpy(&scalars_[scalar_count_], values, static_cast<size_t>(count) * sizeof(uint64_t));
        scalar_count_ += count;
    }

    // Each value's 32-bit pattern, zero-extended (-1 becomes 0xFFFFFFFF).
    void add_scalars_i32(const int32_t *values, int count) {
        if (count < 0 || !scalar_room(static_cast<size_t>(count))) {
            set_error(limit_text(false));
            return;
        }
        for (int i = 0; i < count; ++i) scalars_[scalar_count_ + i] = uint64_t{static_cast<uint32_t>(values[i])};
        scalar_count_ += count;
    }

    void copy_scalars_from(const Arg &src, int src_offset, int count) {
        if (src_offset < 0 || count < 0 || src_offset + count > src.scalar_count_) {
            set_error("Source scalar range out of bounds in copy_scalars_from");
            return;
        }
        if (!scalar_room(static_cast<size_t>(count))) return;
        if (count > 0) {
            memcpy(&scalars_[scalar_count_], &src.scalars_[src_offset], static_cast<size_t>(count) * sizeof(uint64_t));
        }
        scalar_count_ += count;
    }

private:
    const PTO2TaskId *deps_{nullptr};
    const DepFlags *dep_kinds_{nullptr};
    uint32_t dep_count_{0};

    void drop_dependencies() {
        deps_ = nullptr;
        dep_kinds_ = nullptr;
        dep_count_ = 0;
    }

    // "Too many tensor args (max N)" / "Too many scalar args (max N)", built once.
    static const char *limit_text(bool tensors) {
        struct Texts {
            char tensor[48];
            char scalar[48];
            Texts() {
                snprintf(tensor, sizeof tensor, "Too many tensor args (max %zu)", MaxT);
                snprintf(scalar, sizeof scalar, "Too many scalar args (max %zu)", MaxS);
            }
        };
        static const Texts texts;
        return tensors ? texts.tensor : texts.scalar;
    }

    bool scalar_room(size_t n) {
        if (static_cast<size_t>(scalar_count_) + n <= MaxS) return true;
        set_error(limit_text(false));
        return false;
    }

    // Tensor arguments are stored by address, so they must be named objects.
    template <bool for_output, typename... Args>
    static constexpr void check_tensor_types() {
        static_assert(sizeof...(Args) >= 1, "at least one argument required");
        static_assert(
            (std::is_lvalue_reference_v<Args> && ...),
            "temporaries are not allowed — stored pointers would dangle after the call"
        );
        if constexpr (for_output) {
            static_assert(
                (std::is_same_v<std::decay_t<Args>, ChipTensor> && ...) ||
                    (std::is_same_v<std::decay_t<Args>, TensorCreateInfo> && ...),
                "add_output: all arguments must be the same type (all ChipTensor or all TensorCreateInfo)"
            );
        } else {
            static_assert((std::is_same_v<std::decay_t<Args>, ChipTensor> && ...), "all arguments must be ChipTensor");
        }
    }

    template <typename... Ts>
    void append(TensorArgType tag, Ts &...ts) {
        if (scalar_count_ != 0) {
            set_error(
                "add_input/add_output/add_inout called after add_scalar: "
                "all tensors must be added before any scalars"
            );
            return;
        }
        if (static_cast<size_t>(tensor_count_) + sizeof...(Ts) > MaxT) {
            set_error(limit_text(true));
            return;
        }
        ((tensors_[tensor_count_] = &ts, tags_[tensor_count_] = tag, ++tensor_count_), ...);
    }
};

// A core task's arguments (up to 32 tensors and 16 scalars).
using CoreTaskArgs = Arg<MAX_TENSOR_ARGS, MAX_SCALAR_ARGS>;

// The chip entry's arguments (up to 256 tensors and 128 scalars), as passed to
// aicpu_orchestration_entry / aicpu_orchestration_config.
struct ChipTaskArgs : Arg<CHIP_MAX_TENSOR_ARGS, CHIP_MAX_SCALAR_ARGS> {
    // Refer to src's tensors (src must outlive this) and copy its scalars.
    void create_from_chip_args(const ChipStorageTaskArgs &src) {
        reset();
        for (int32_t i = 0; i < src.tensor_count(); ++i) {
            const ChipTensor &t = src.tensor(i);
            add_input(t);
        }
        for (int32_t i = 0; i < src.scalar_count(); ++i) add_scalar(src.scalar(i));
    }
};

#pragma GCC visibility pop
