// taskring's tensor.h: ChipTensor (the 128-byte strided tensor view of Simpler's PTO2 API,
// same fields at the same offsets), PTOBufferHandle, TensorArgType and the
// make_tensor_external / make_tensor_strided factories. Usable from kernels on its own.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <sstream>
#include <string>
#include <type_traits>
#include <utility>

#include "assert_compat.h"
#include "data_type.h"
#include "pto_task_id.h"

#pragma GCC visibility push(hidden)

// A memory allocation: base address and size, both in bytes.
struct PTOBufferHandle {
    uint64_t addr;
    uint64_t size;
};

// How a task uses one tensor argument.
enum class TensorArgType : int32_t {
    INPUT = 0,            // read
    OUTPUT = 1,           // written; the runtime allocates it (TensorCreateInfo)
    INOUT = 2,            // read then written
    OUTPUT_EXISTING = 3,  // written; an existing tensor, ordered after its creator only
    NO_DEP = 4,           // used without any dependency tracking
};

// A view of `buffer`: element (c0, c1, ...) lives at element index
// start_offset + sum(c[i] * strides[i]); strides are in elements and positive.
// The first 64 bytes are what most paths read; strides and the cached extent follow.
struct alignas(64) ChipTensor {
    PTOBufferHandle buffer;
    PTO2TaskId owner_task_id;  // the task that created the buffer; invalid for external memory
    uint64_t start_offset;     // in elements
    int32_t version;
    uint32_t ndims;
    DataType dtype;
    bool manual_dep;     // dependency tracking by creator only
    bool is_contiguous;  // strides are the row-major strides of shapes
    AddressSpace address_space;
    uint32_t shapes[MAX_TENSOR_DIMS];

    uint64_t extent_elem_cache;  // 1 + sum((shapes[i]-1) * strides[i]) for non-empty views
    uint32_t strides[MAX_TENSOR_DIMS];
    uint8_t _pad_cl2[36];

    // Leaves every field indeterminate (the type is used as plain storage); a usable
    // tensor comes from make_tensor_external, init_external, a submit or a view op.
    ChipTensor() = default;

    uint64_t numel() const {
        uint64_t n = 1;
        for (uint32_t d = 0; d < ndims; ++d) n *= shapes[d];
        return n;
    }

    // Elements spanned from start_offset to the last reachable element, inclusive.
    uint64_t extent_elem() const { return is_contiguous ? numel() : extent_elem_cache; }

    [[nodiscard]] bool is_device_memory() const { return address_space == AddressSpace::DEVICE; }

    [[nodiscard]] uint64_t nbytes() const { return numel() * get_element_size(dtype); }

    template <typename T>
    T *data_as() const {
        return reinterpret_cast<T *>(static_cast<uintptr_t>(buffer.addr));
    }

    // Make this a contiguous row-major tensor over `addr`.
    void init_external(
        void *addr, uint64_t buffer_size_bytes, const uint32_t in_shapes[], uint32_t in_ndims, DataType in_dtype,
        int32_t in_version, bool in_manual_dep = false, AddressSpace in_address_space = AddressSpace::HOST
    ) {
        always_assert(in_ndims > 0 && in_ndims <= MAX_TENSOR_DIMS);
        buffer.addr = static_cast<uint64_t>(reinterpret_cast<uintptr_t>(addr));
        buffer.size = buffer_size_bytes;
        owner_task_id = PTO2TaskId::invalid();
        start_offset = 0;
        version = in_version;
        ndims = in_ndims;
        dtype = in_dtype;
        manual_dep = in_manual_dep;
        address_space = in_address_space;
        for (uint32_t d = 0; d < in_ndims; ++d) shapes[d] = in_shapes[d];
        set_row_major_strides();
    }

    // Copy `other`'s view (the first 64 bytes verbatim, then strides and extent).
    void init_from(const ChipTensor &other) {
        init_from_line1(other);
        if (other.is_contiguous && other.start_offset == 0) {
            set_row_major_strides();
        } else {
            for (uint32_t d = 0; d < other.ndims; ++d) strides[d] = other.strides[d];
            extent_elem_cache = other.extent_elem_cache;
        }
    }

    void init_from_line1(const ChipTensor &other) { std::memcpy(static_cast<void *>(this), &other, 64); }

    void copy(const ChipTensor &other) { init_from(other); }

    // Element index (from buffer.addr) of the element at `indices`.
    uint64_t compute_flat_offset(const uint32_t indices[], uint32_t in_ndims) const {
        uint64_t at = start_offset;
        for (uint32_t d = 0; d < in_ndims; ++d) at += uint64_t{indices[d]} * uint64_t{strides[d]};
        return at;
    }

    // The sub-box at `view_offsets` of extent `view_shapes`. A box with a zero extent
    // is empty and accepts any offsets.
    ChipTensor view(const uint32_t view_shapes[], const uint32_t view_offsets[], bool in_manual_dep = false) const {
        ChipTensor out = derived();
        bool empty = false;
        for (uint32_t d = 0; d < ndims; ++d) empty = empty || view_shapes[d] == 0;
        for (uint32_t d = 0; d < ndims; ++d) {
            if (!empty) {
                debug_assert(view_offsets[d] + view_shapes[d] <= shapes[d]);
                out.start_offset += uint64_t{view_offsets[d]} * uint64_t{strides[d]};
            }
            out.shapes[d] = view_shapes[d];
        }
        out.manual_dep = in_manual_dep;
        if (empty) {
            out.refresh_derived();
            out.is_contiguous = true;
            out.extent_elem_cache = 0;
        } else {
            out.refresh_derived();
            out.check_within_buffer();
        }
        return out;
    }

    bool valid_transpose(uint32_t x, uint32_t y) const { return x < ndims && y < ndims; }

    ChipTensor transpose(uint32_t x, uint32_t y, bool in_manual_dep = false) const {
        debug_assert(valid_transpose(x, y));
        ChipTensor out = derived();
        std::swap(out.shapes[x], out.shapes[y]);
        std::swap(out.strides[x], out.strides[y]);
        out.manual_dep = in_manual_dep;
        out.refresh_derived();
        return out;
    }

    // Dimension d of the result is dimension order[d] of this view.
    ChipTensor permute(const uint32_t order[], bool in_manual_dep = false) const {
        ChipTensor out = derived();
        for (uint32_t d = 0; d < ndims; ++d) {
            debug_assert(order[d] < ndims);
            out.shapes[d] = shapes[order[d]];
            out.strides[d] = strides[order[d]];
        }
        out.manual_dep = in_manual_dep;
        out.refresh_derived();
        return out;
    }

    // Elements start, start+step, ... (< end) of dimension `dim`.
    ChipTensor slice(uint32_t dim, uint32_t start, uint32_t end, uint32_t step = 1, bool in_manual_dep = false) const {
        debug_assert(dim < ndims);
        debug_assert(step >= 1);
        debug_assert(end > start);
        debug_assert(end <= shapes[dim]);
        ChipTensor out = derived();
        out.start_offset += uint64_t{start} * uint64_t{strides[dim]};
        out.shapes[dim] = (end - start + step - 1) / step;
        out.strides[dim] = static_cast<uint32_t>(uint64_t{strides[dim]} * step);
        out.manual_dep = in_manual_dep;
        out.refresh_derived();
        out.check_within_buffer();
        return out;
    }

    bool valid_reshape(const uint32_t new_shapes[], uint32_t new_ndims) const {
        uint64_t n = 1;
        for (uint32_t d = 0; d < new_ndims; ++d) n *= new_shapes[d];
        return n == numel();
    }

    // Same elements, new shape; only a contiguous view can be reshaped.
    ChipTensor reshape(const uint32_t new_shapes[], uint32_t new_ndims, bool in_manual_dep = false) const {
        debug_assert(valid_reshape(new_shapes, new_ndims));
        always_assert(is_contiguous);
        ChipTensor out;
        out.init_from_line1(*this);
        out.ndims = new_ndims;
        for (uint32_t d = 0; d < new_ndims; ++d) out.shapes[d] = new_shapes[d];
        out.manual_dep = in_manual_dep;
        out.set_row_major_strides();
        return out;
    }

    std::string dump() const {
        std::ostringstream os;
        const char *pad = "    ";
        os << "{\n";
        os << pad << "buffer.addr: " << buffer.addr << "\n";
        os << pad << "buffer.size: " << buffer.size << " bytes\n";
        os << pad << "dtype: " << get_dtype_name(dtype) << "\n";
        os << pad << "ndims: " << ndims << "\n";
        os << pad << "version: " << version << "\n";
        os << pad << "start_offset: " << start_offset << " (elements)\n";
        os << pad << "is_contiguous: " << (is_contiguous ? "true" : "false") << "\n";
        os << pad << "shapes: [";
        for (uint32_t d = 0; d < ndims; ++d) os << (d ? ", " : "") << shapes[d];
        os << "]\n" << pad << "strides: [";
        for (uint32_t d = 0; d < ndims; ++d) os << (d ? ", " : "") << strides[d];
        os << "]\n}\n";
        return os.str();
    }

    // Recompute extent_elem_cache and is_contiguous from shapes and strides.
    void refresh_derived() {
        uint64_t extent = 1;
        uint64_t row_major = 1;
        bool contiguous = true;
        for (uint32_t k = ndims; k-- > 0;) {
            contiguous = contiguous && strides[k] == row_major;
            if (shapes[k] > 0) extent += uint64_t{shapes[k] - 1} * uint64_t{strides[k]};
            row_major *= shapes[k];
        }
        extent_elem_cache = extent;
        is_contiguous = contiguous;
    }

private:
    // A copy of the first 64 bytes plus this view's strides: the start of every view op.
    ChipTensor derived() const {
        ChipTensor out;
        out.init_from_line1(*this);
        for (uint32_t d = 0; d < ndims; ++d) out.strides[d] = strides[d];
        return out;
    }

    void set_row_major_strides() {
        uint64_t n = 1;
        for (uint32_t k = ndims; k-- > 0;) {
            strides[k] = static_cast<uint32_t>(n);
            n *= shapes[k];
        }
        extent_elem_cache = n;
        is_contiguous = true;
    }

    void check_within_buffer() const {
        const uint64_t esize = get_element_size(dtype);
        if (esize == 0) return;
        debug_assert(start_offset + extent_elem_cache <= buffer.size / esize);
    }
};

static_assert(std::is_trivially_copyable_v<ChipTensor>, "ChipTensor is copied as bytes");
static_assert(sizeof(ChipTensor) == 128, "ChipTensor is 128 bytes");
static_assert(offsetof(ChipTensor, buffer) == 0);
static_assert(offsetof(ChipTensor, owner_task_id) == 16);
static_assert(offsetof(ChipTensor, start_offset) == 24);
static_assert(offsetof(ChipTensor, version) == 32);
static_assert(offsetof(ChipTensor, ndims) == 36);
static_assert(offsetof(ChipTensor, dtype) == 40);
static_assert(offsetof(ChipTensor, manual_dep) == 41);
static_assert(offsetof(ChipTensor, is_contiguous) == 42);
static_assert(offsetof(ChipTensor, address_space) == 43);
static_assert(offsetof(ChipTensor, shapes) == 44);
static_assert(offsetof(ChipTensor, extent_elem_cache) == 64);
static_assert(offsetof(ChipTensor, strides) == 72);

// A contiguous tensor over existing memory of numel(shapes) elements.
inline ChipTensor make_tensor_external(
    void *addr, const uint32_t shapes[], uint32_t ndims, DataType dtype = DataType::FLOAT32, bool manual_dep = false,
    int32_t version = 0, AddressSpace address_space = AddressSpace::HOST
) {
    uint64_t n = 1;
    for (uint32_t d = 0; d < ndims; ++d) n *= shapes[d];
    ChipTensor t;
    t.init_external(addr, n * get_element_size(dtype), shapes, ndims, dtype, version, manual_dep, address_space);
    return t;
}

// A possibly strided view whose origin is `addr`; the buffer covers its extent.
inline ChipTensor make_tensor_strided(
    void *addr, const uint32_t shapes[], const uint32_t strides[], uint32_t ndims, DataType dtype = DataType::FLOAT32,
    bool manual_dep = false, int32_t version = 0, AddressSpace address_space = AddressSpace::HOST
) {
    always_assert(ndims > 0 && ndims <= MAX_TENSOR_DIMS);
    ChipTensor t{};
    t.buffer.addr = static_cast<uint64_t>(reinterpret_cast<uintptr_t>(addr));
    t.owner_task_id = PTO2TaskId::invalid();
    t.start_offset = 0;
    t.version = version;
    t.ndims = ndims;
    t.dtype = dtype;
    t.manual_dep = manual_dep;
    t.address_space = address_space;
    for (uint32_t d = 0; d < ndims; ++d) {
        t.shapes[d] = shapes[d];
        t.strides[d] = strides[d];
    }
    t.refresh_derived();
    t.buffer.size = t.extent_elem_cache * get_element_size(dtype);
    return t;
}

#pragma GCC visibility pop
