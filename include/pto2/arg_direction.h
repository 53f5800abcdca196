// taskring's arg_direction.h: ArgDirection and the argument-count limits of Simpler's
// PTO2 API (per core task and per chip entry).
#pragma once

#include <cstdint>

#pragma GCC visibility push(hidden)

enum class ArgDirection : int32_t {
    SCALAR = 0,
    IN = 1,
    OUT = 2,
    INOUT = 3,
};

inline constexpr int CORE_MAX_TENSOR_ARGS = 32;
inline constexpr int CORE_MAX_SCALAR_ARGS = 16;
inline constexpr int CHIP_MAX_TENSOR_ARGS = 256;
inline constexpr int CHIP_MAX_SCALAR_ARGS = 128;
inline constexpr uint32_t CALLABLE_ALIGN = 64;
inline constexpr uint32_t CALLABLE_CHILD_ALIGN = 16;

#define MAX_TENSOR_ARGS CORE_MAX_TENSOR_ARGS
#define MAX_SCALAR_ARGS CORE_MAX_SCALAR_ARGS

static inline uint32_t callable_align_up(uint32_t size) { return (size + CALLABLE_ALIGN - 1) / CALLABLE_ALIGN * CALLABLE_ALIGN; }

inline const char *arg_direction_name(ArgDirection d) {
    static const char *const names[] = {"SCALAR", "IN", "OUT", "INOUT"};
    const int32_t i = static_cast<int32_t>(d);
    return (i >= 0 && i < 4) ? names[i] : "UNKNOWN";
}

#pragma GCC visibility pop
