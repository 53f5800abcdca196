// What the test kernels share: their tensors and scalars as the runtime passes them
// (args[i] is the address of the i-th tensor argument's ChipTensor, the scalars follow
// the tensors), and element access through a view's start_offset and strides, so a
// kernel handed a slice, a transposed or a windowed view reads and writes the right
// elements.
#pragma once

#include <stdint.h>

#include "intrinsic.h"
#include "tensor.h"

static inline const ChipTensor &tensor_arg(int64_t *args, int i) {
    return *reinterpret_cast<const ChipTensor *>(static_cast<uintptr_t>(args[i]));
}

// The i-th scalar of a kernel that takes `tensors` tensor arguments.
static inline uint64_t scalar_arg(int64_t *args, int tensors, int i) {
    return static_cast<uint64_t>(args[tensors + i]);
}

// Buffer offset (in elements) of the i-th element of t, counted row-major over t's shape.
static inline uint64_t element_offset(const ChipTensor &t, uint64_t i) {
    uint64_t off = t.start_offset;
    for (int d = static_cast<int>(t.ndims) - 1; d >= 0; --d) {
        off += (i % t.shapes[d]) * static_cast<uint64_t>(t.strides[d]);
        i /= t.shapes[d];
    }
    return off;
}

template <typename T>
static inline T &element(const ChipTensor &t, uint64_t i) {
    return t.data_as<T>()[element_offset(t, i)];
}
