// Element access for plain C++ kernels under the PTO2 kernel ABI: args[i] is the address
// of the i-th tensor argument's ChipTensor (in the order the orchestration added them),
// the scalars follow the tensors as 64-bit values. Elements are reached through each
// view's start offset and strides, so a kernel handed a window of a larger tensor
// touches only that window.
#pragma once

#include <stdint.h>

#include "intrinsic.h"
#include "tensor.h"

static inline const ChipTensor &chip_tensor(int64_t *args, int i) {
    return *reinterpret_cast<const ChipTensor *>(static_cast<uintptr_t>(args[i]));
}

// The i-th scalar of a kernel that takes `tensors` tensor arguments.
static inline uint64_t chip_scalar(int64_t *args, int tensors, int i) { return static_cast<uint64_t>(args[tensors + i]); }

// Buffer offset of the i-th element of t, counted row-major over t's shape.
static inline uint64_t chip_offset(const ChipTensor &t, uint64_t i) {
    uint64_t off = t.start_offset;
    for (int d = static_cast<int>(t.ndims) - 1; d >= 0; --d) {
        off += (i % t.shapes[d]) * static_cast<uint64_t>(t.strides[d]);
        i /= t.shapes[d];
    }
    return off;
}

template <typename T>
static inline T &chip_at(const ChipTensor &t, uint64_t i) {
    return t.data_as<T>()[chip_offset(t, i)];
}

// Element (r, c) of a view whose last two dimensions are rows and columns (any leading
// dimensions have extent 1).
template <typename T>
static inline T &chip_at2(const ChipTensor &t, uint32_t r, uint32_t c) {
    const uint32_t nd = t.ndims;
    return t.data_as<T>()[t.start_offset + uint64_t{r} * t.strides[nd - 2] + uint64_t{c} * t.strides[nd - 1]];
}

static inline uint32_t chip_rows(const ChipTensor &t) { return t.ndims >= 2 ? t.shapes[t.ndims - 2] : 1; }
static inline uint32_t chip_cols(const ChipTensor &t) { return t.shapes[t.ndims - 1]; }
