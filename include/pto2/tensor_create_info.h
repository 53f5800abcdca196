// taskring's tensor_create_info.h: TensorCreateInfo, the description of an output the
// runtime allocates (Simpler's PTO2 API; same 64-byte layout, which mirrors the first
// 64 bytes of ChipTensor so the runtime reads ndims/dtype/shapes/... at ChipTensor's offsets).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "assert_compat.h"
#include "data_type.h"
#include "tensor.h"

#pragma GCC visibility push(hidden)

class alignas(64) TensorCreateInfo {
public:
    TensorCreateInfo(
        const uint32_t shapes_in[], uint32_t ndims_in, DataType dtype_in = DataType::FLOAT32, bool manual_dep_in = false
    ) :
        initial_value(0),
        has_initial_value(false),
        reserved_a{},
        reserved_b(0),
        start_offset(0),
        version(0),
        ndims(ndims_in),
        dtype(dtype_in),
        manual_dep(manual_dep_in),
        is_contiguous(true),
        reserved_c(0),
        shapes{} {
        always_assert(ndims_in > 0 && ndims_in <= MAX_TENSOR_DIMS);
        for (uint32_t d = 0; d < ndims_in; ++d) shapes[d] = shapes_in[d];
    }

    TensorCreateInfo() = default;

    void copy(const TensorCreateInfo &other) { std::memcpy(static_cast<void *>(this), &other, sizeof(other)); }

    // Fill the output with `value` (its low get_element_size(dtype) bytes per element)
    // before the producing task runs.
    template <typename T = uint64_t>
    void set_initial_value(T value) {
        initial_value = to_u64(value);
        has_initial_value = true;
    }

    uint64_t buffer_size_bytes() const {
        uint64_t n = 1;
        for (uint32_t d = 0; d < ndims; ++d) n *= shapes[d];
        return n * get_element_size(dtype);
    }

    // Bytes 0..31: create-info only (ChipTensor's buffer and owner live here there).
    uint64_t initial_value;
    bool has_initial_value;
    uint8_t reserved_a[7];
    uint64_t reserved_b;
    uint64_t start_offset;  // always 0
    // Bytes 32..63: as in ChipTensor.
    int32_t version;  // always 0
    uint32_t ndims;
    DataType dtype;
    bool manual_dep;
    bool is_contiguous;  // always true
    uint8_t reserved_c;  // ChipTensor::address_space's byte
    uint32_t shapes[MAX_TENSOR_DIMS];
};

static_assert(sizeof(TensorCreateInfo) == 64, "TensorCreateInfo is 64 bytes");
static_assert(offsetof(TensorCreateInfo, initial_value) == 0);
static_assert(offsetof(TensorCreateInfo, has_initial_value) == 8);
static_assert(offsetof(TensorCreateInfo, start_offset) == offsetof(ChipTensor, start_offset));
static_assert(offsetof(TensorCreateInfo, version) == offsetof(ChipTensor, version));
static_assert(offsetof(TensorCreateInfo, ndims) == offsetof(ChipTensor, ndims));
static_assert(offsetof(TensorCreateInfo, dtype) == offsetof(ChipTensor, dtype));
static_assert(offsetof(TensorCreateInfo, manual_dep) == offsetof(ChipTensor, manual_dep));
static_assert(offsetof(TensorCreateInfo, is_contiguous) == offsetof(ChipTensor, is_contiguous));
static_assert(offsetof(TensorCreateInfo, reserved_c) == offsetof(ChipTensor, address_space));
static_assert(offsetof(TensorCreateInfo, shapes) == offsetof(ChipTensor, shapes));

#pragma GCC visibility pop
