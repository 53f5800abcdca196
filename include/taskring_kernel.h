/*
 * taskring_kernel.h -- the C ABI of taskring's native kernels (docs/api.md section 11).
 *
 * A native kernel is a function in a shared library with the signature tr_kernel_fn.
 * taskring calls it on a core thread, without the Python GIL, once every producer of its
 * inputs has completed. It may read the tensors before the first inout/output and
 * write the others; it must touch no byte outside them.
 *
 * Tensors arrive in the order inputs, inouts, outputs, no_dep (the order of the
 * submit); shapes and strides are in elements (strides may describe a non-contiguous
 * view: always index with them). Scalars arrive in submit order.
 *
 * Return 0 on success. Any other value fails the task (RuntimeFailure TASK_FAILED,
 * code 200); write a NUL-terminated message of at most errlen bytes (including the
 * NUL) into err first and it becomes part of the error text.
 *
 * Build a library with e.g.:  cc -O3 -shared -fPIC -o libmykernels.so mykernels.c
 * Load it with taskring.load_kernel("./libmykernels.so", "my_symbol") (Python) or
 * taskring::NativeKernel::load(path, "my_symbol", CoreKind::Aiv) (Rust).
 */
#ifndef TASKRING_KERNEL_H
#define TASKRING_KERNEL_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define TR_MAX_DIMS 5

/* Element types (tr_tensor.dtype). */
enum {
    TR_F32 = 0,
    TR_F16 = 1,
    TR_BF16 = 2,
    TR_I32 = 3,
    TR_I64 = 4,
    TR_I8 = 5,
    TR_U8 = 6
};

/* One tensor argument; shape and strides in elements, entries past ndim are unused. */
typedef struct {
    void *data;
    int32_t dtype;
    int32_t ndim; /* 1..TR_MAX_DIMS */
    int64_t shape[TR_MAX_DIMS];
    int64_t strides[TR_MAX_DIMS];
} tr_tensor;

/* Scalar kinds (tr_scalar.kind). */
enum { TR_SCALAR_INT64 = 0, TR_SCALAR_FLOAT64 = 1 };

/* One scalar argument. */
typedef struct {
    int32_t kind;
    int32_t reserved;
    union {
        int64_t i;
        double f;
    } v;
} tr_scalar;

typedef int32_t (*tr_kernel_fn)(const tr_tensor *tensors, int32_t ntensors,
                                const tr_scalar *scalars, int32_t nscalars,
                                char *err, size_t errlen);

#ifdef __cplusplus
}
#endif

#endif /* TASKRING_KERNEL_H */
