// taskring's pto_submit_types.h: the submit-side types of Simpler's PTO2 API — MixedKernels
// (the AIC / AIV0 / AIV1 kernel ids of one task), subtask slots and masks, the dispatch
// predicate operators and PTO2LaunchSpec (SPMD block count, sync start).
#pragma once

#include <stdint.h>

#include <cstring>

#pragma GCC visibility push(hidden)

inline constexpr int32_t INVALID_KERNEL_ID = -1;

inline constexpr int32_t PTO2_SUBTASK_SLOT_COUNT = 3;

enum class PTO2SubtaskSlot : uint8_t {
    AIC = 0,
    AIV0 = 1,
    AIV1 = 2,
};

inline constexpr uint8_t PTO2_SUBTASK_MASK_AIC = 1u;
inline constexpr uint8_t PTO2_SUBTASK_MASK_AIV0 = 2u;
inline constexpr uint8_t PTO2_SUBTASK_MASK_AIV1 = 4u;

// Comparison of a predicated task: run it when (element OP target) holds.
enum class PredicateOp : uint8_t { NONE = 0, EQ, NE, GT, LT, GE, LE };

// A predicate resolved to an address: the element of elem_size bytes at addr,
// sign-extended, compared with target.
struct DispatchPredicate {
    uint64_t addr{0};
    int64_t target{0};
    uint8_t elem_size{0};
    PredicateOp op{PredicateOp::NONE};

    bool pass() const {
        if (op == PredicateOp::NONE) return true;
        int64_t v = 0;
        const unsigned n = elem_size > 8 ? 8u : elem_size;
        std::memcpy(&v, reinterpret_cast<const void *>(static_cast<uintptr_t>(addr)), n);
        if (n > 0 && n < 8) {
            const unsigned unused = 64u - 8u * n;
            v = static_cast<int64_t>(static_cast<uint64_t>(v) << unused) >> unused;
        }
        switch (op) {
        case PredicateOp::EQ: return v == target;
        case PredicateOp::NE: return v != target;
        case PredicateOp::GT: return v > target;
        case PredicateOp::LT: return v < target;
        case PredicateOp::GE: return v >= target;
        case PredicateOp::LE: return v <= target;
        default: return true;
        }
    }
};

// How a task is scheduled: one AIC, one AIV, a cluster (two or more cores), or no core.
enum class PTO2ResourceShape : uint8_t {
    AIC = 0,
    AIV = 1,
    MIX = 2,
    DUMMY = 3,
};

inline constexpr int32_t PTO2_NUM_RESOURCE_SHAPES = 3;

// Which of the AIC / AIV0 / AIV1 slots a task uses (bits 0..2).
class ActiveMask {
public:
    constexpr ActiveMask() = default;
    constexpr explicit ActiveMask(uint8_t raw) : raw_(raw) {}

    uint8_t raw() const { return raw_; }
    bool subtask_active(PTO2SubtaskSlot slot) const { return ((raw_ >> static_cast<uint8_t>(slot)) & 1u) != 0; }
    uint8_t core_mask() const { return raw_ & 7u; }

    PTO2ResourceShape to_shape() const {
        const uint8_t m = core_mask();
        if (m == 0) return PTO2ResourceShape::DUMMY;
        if ((m & (m - 1)) != 0) return PTO2ResourceShape::MIX;
        return m == PTO2_SUBTASK_MASK_AIC ? PTO2ResourceShape::AIC : PTO2ResourceShape::AIV;
    }

    bool operator==(ActiveMask o) const { return raw_ == o.raw_; }
    bool operator!=(ActiveMask o) const { return raw_ != o.raw_; }
    ActiveMask operator|(ActiveMask o) const { return ActiveMask(static_cast<uint8_t>(raw_ | o.raw_)); }
    ActiveMask &operator|=(ActiveMask o) {
        raw_ = static_cast<uint8_t>(raw_ | o.raw_);
        return *this;
    }
    ActiveMask operator&(uint8_t mask) const { return ActiveMask(static_cast<uint8_t>(raw_ & mask)); }
    bool has_mask(uint8_t mask) const { return (raw_ & mask) != 0; }
    explicit operator bool() const { return raw_ != 0; }

private:
    uint8_t raw_{0};
};

static_assert(sizeof(ActiveMask) == 1, "ActiveMask is one byte");

// The kernel id of each slot of one task; INVALID_KERNEL_ID leaves the slot unused.
struct MixedKernels {
    int32_t aic_kernel_id{INVALID_KERNEL_ID};
    int32_t aiv0_kernel_id{INVALID_KERNEL_ID};
    int32_t aiv1_kernel_id{INVALID_KERNEL_ID};

    ActiveMask to_active_mask() const {
        uint8_t m = 0;
        if (aic_kernel_id != INVALID_KERNEL_ID) m |= PTO2_SUBTASK_MASK_AIC;
        if (aiv0_kernel_id != INVALID_KERNEL_ID) m |= PTO2_SUBTASK_MASK_AIV0;
        if (aiv1_kernel_id != INVALID_KERNEL_ID) m |= PTO2_SUBTASK_MASK_AIV1;
        return ActiveMask(m);
    }
};

// SPMD launch of one task: block_num blocks (each sees its block_idx), optionally all
// started together.
class PTO2LaunchSpec {
public:
    constexpr PTO2LaunchSpec() = default;

    int16_t block_num() const { return block_num_; }
    void set_block_num(int16_t n) { block_num_ = n; }

    bool require_sync_start() const { return require_sync_start_; }
    void set_require_sync_start(bool v) { require_sync_start_ = v; }

private:
    int16_t block_num_{1};
    bool require_sync_start_{false};
};

#pragma GCC visibility pop
