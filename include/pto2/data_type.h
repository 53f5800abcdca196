// taskring's data_type.h: DataType, AddressSpace, MAX_TENSOR_DIMS and the 64-bit scalar
// packing helpers (to_u64 / from_u64) of Simpler's PTO2 API, same names and values.
#pragma once

#include <cstdint>
#include <cstring>
#include <type_traits>

#pragma GCC visibility push(hidden)

template <typename T>
inline constexpr bool is_supported_scalar_arg_v =
    std::is_arithmetic_v<std::remove_cv_t<std::remove_reference_t<T>>> ||
    std::is_enum_v<std::remove_cv_t<std::remove_reference_t<T>>>;

constexpr int MAX_TENSOR_DIMS = 5;

enum class AddressSpace : uint8_t {
    HOST = 0,
    DEVICE = 1,
};

// Element types; the numbering is part of the tensor layout (ChipTensor::dtype).
enum class DataType : uint8_t {
    FLOAT32,
    FLOAT16,
    INT32,
    INT16,
    INT8,
    UINT8,
    BFLOAT16,
    INT64,
    UINT64,
    UINT16,
    UINT32,
    BOOL,
    FP8E4M3FN,
    FP8E8M0,
    FP4E2M1,
    DATA_TYPE_NUM,
};

static_assert(sizeof(DataType) == 1, "DataType is one byte");

// Bytes per element; 0 for a value outside the enum.
inline uint64_t get_element_size(DataType dtype) {
    switch (dtype) {
    case DataType::INT64:
    case DataType::UINT64:
        return 8;
    case DataType::FLOAT32:
    case DataType::INT32:
    case DataType::UINT32:
        return 4;
    case DataType::FLOAT16:
    case DataType::INT16:
    case DataType::UINT16:
    case DataType::BFLOAT16:
        return 2;
    case DataType::INT8:
    case DataType::UINT8:
    case DataType::BOOL:
    case DataType::FP8E4M3FN:
    case DataType::FP8E8M0:
    case DataType::FP4E2M1:
        return 1;
    default:
        return 0;
    }
}

inline const char *get_dtype_name(DataType dtype) {
    switch (dtype) {
    case DataType::FLOAT32: return "FLOAT32";
    case DataType::FLOAT16: return "FLOAT16";
    case DataType::INT32: return "INT32";
    case DataType::INT16: return "INT16";
    case DataType::INT8: return "INT8";
    case DataType::UINT8: return "UINT8";
    case DataType::BFLOAT16: return "BFLOAT16";
    case DataType::INT64: return "INT64";
    case DataType::UINT64: return "UINT64";
    case DataType::UINT16: return "UINT16";
    case DataType::UINT32: return "UINT32";
    case DataType::BOOL: return "BOOL";
    case DataType::FP8E4M3FN: return "FP8E4M3FN";
    case DataType::FP8E8M0: return "FP8E8M0";
    case DataType::FP4E2M1: return "FP4E2M1";
    default: return "UNKNOWN";
    }
}

// Kernel-callable qualifier: __aicore__ on an AICore compiler, nothing elsewhere.
#if defined(__DAV_VEC__) || defined(__DAV_CUBE__)
#ifndef __aicore__
#define __aicore__ [aicore]
#endif
#define PTO_DEVICE_FUNC __aicore__
#else
#define PTO_DEVICE_FUNC
#endif

// The DataType a scalar of type T is recorded as (double and unknown types as the
// nearest carrier: FLOAT32 for double, UINT64 otherwise).
template <typename T>
inline constexpr uint8_t dtype_of() {
    static_assert(is_supported_scalar_arg_v<T>, "dtype_of: type must be arithmetic or enum");
    using U = std::remove_cv_t<T>;
    DataType d = DataType::UINT64;
    if constexpr (std::is_same_v<U, bool>) d = DataType::BOOL;
    else if constexpr (std::is_same_v<U, float> || std::is_same_v<U, double>) d = DataType::FLOAT32;
    else if constexpr (std::is_same_v<U, int8_t>) d = DataType::INT8;
    else if constexpr (std::is_same_v<U, uint8_t>) d = DataType::UINT8;
    else if constexpr (std::is_same_v<U, int16_t>) d = DataType::INT16;
    else if constexpr (std::is_same_v<U, uint16_t>) d = DataType::UINT16;
    else if constexpr (std::is_same_v<U, int32_t>) d = DataType::INT32;
    else if constexpr (std::is_same_v<U, uint32_t>) d = DataType::UINT32;
    else if constexpr (std::is_same_v<U, int64_t>) d = DataType::INT64;
    return static_cast<uint8_t>(d);
}

// The bytes of `value` in the low end of a zeroed 64-bit word.
template <typename T>
PTO_DEVICE_FUNC inline uint64_t to_u64(T value) {
    static_assert(sizeof(T) <= sizeof(uint64_t), "to_u64: type must fit in 8 bytes");
    static_assert(std::is_trivially_copyable_v<T>, "to_u64: type must be trivially copyable");
    uint64_t word = 0;
    __builtin_memcpy(&word, &value, sizeof(T));
    return word;
}

// The inverse of to_u64: a T made of the low sizeof(T) bytes of `bits`.
template <typename T>
PTO_DEVICE_FUNC inline T from_u64(uint64_t bits) {
    static_assert(sizeof(T) <= sizeof(uint64_t), "from_u64: type must fit in 8 bytes");
    static_assert(std::is_trivially_copyable_v<T>, "from_u64: type must be trivially copyable");
    T value;
    __builtin_memcpy(&value, &bits, sizeof(T));
    return value;
}

#pragma GCC visibility pop
