// taskring's pto_task_id.h: PTO2TaskId, the 64-bit task id of Simpler's PTO2 API
// (ring in the high 32 bits, the ring's local counter in the low 32; all ones = invalid).
#pragma once

#include <cstdint>

#pragma GCC visibility push(hidden)

struct PTO2TaskId {
    uint64_t raw;

    static constexpr PTO2TaskId make(uint8_t ring_id, uint32_t local_id) {
        return PTO2TaskId{(uint64_t{ring_id} << 32) | uint64_t{local_id}};
    }
    static constexpr PTO2TaskId invalid() { return PTO2TaskId{~uint64_t{0}}; }

    constexpr uint8_t ring() const { return static_cast<uint8_t>(raw >> 32); }
    constexpr uint32_t local() const { return static_cast<uint32_t>(raw); }
    constexpr bool is_valid() const { return raw != ~uint64_t{0}; }
    constexpr bool is_invalid() const { return !is_valid(); }

    constexpr bool operator==(const PTO2TaskId &o) const { return raw == o.raw; }
    constexpr bool operator!=(const PTO2TaskId &o) const { return raw != o.raw; }
};

static_assert(sizeof(PTO2TaskId) == 8, "PTO2TaskId is one 64-bit word");

#pragma GCC visibility pop
