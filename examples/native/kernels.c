/*
 * Native kernels for taskring (the ABI of include/taskring_kernel.h): the float32
 * kernels of the paged-attention decode (matmul, matmul_acc, softmax_rows, copy, fill)
 * plus a few used by the tests and the b10 benchmark (add, noop, spin_ms, fail).
 *
 * Every kernel indexes its tensors through their strides (views such as a column block
 * of a score matrix are not contiguous) and checks what it is given, returning a
 * message instead of touching memory it was not given.
 *
 * Build: make -C examples/native   (cc -O3 -shared -fPIC: the loops over contiguous
 * data vectorise)
 */
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "taskring_kernel.h"

#define AT2(t, i, j) (((float *)(t)->data)[(i) * (t)->strides[0] + (j) * (t)->strides[1]])

static int fail(char *err, size_t errlen, const char *msg) {
    snprintf(err, errlen, "%s", msg);
    return 1;
}

static int is_f32_2d(const tr_tensor *t) { return t->dtype == TR_F32 && t->ndim == 2; }

/* Row-major walk over an n-d float32 view: calls f(element pointer index) per element. */
static long nd_count(const tr_tensor *t) {
    long n = 1;
    for (int d = 0; d < t->ndim; d++) n *= t->shape[d];
    return n;
}

static float *nd_at(const tr_tensor *t, long flat) {
    long off = 0;
    for (int d = t->ndim - 1; d >= 0; d--) {
        off += (flat % t->shape[d]) * t->strides[d];
        flat /= t->shape[d];
    }
    return (float *)t->data + off;
}

/* Dense row-major (the common case: a plain loop, no index arithmetic). */
static int is_contig(const tr_tensor *t) {
    long want = 1;
    for (int d = t->ndim - 1; d >= 0; d--) {
        if (t->shape[d] != 1 && t->strides[d] != want) return 0;
        want *= t->shape[d];
    }
    return 1;
}

static int same_f32_shape(const tr_tensor *a, const tr_tensor *b) {
    if (a->dtype != TR_F32 || b->dtype != TR_F32 || a->ndim != b->ndim) return 0;
    for (int d = 0; d < a->ndim; d++)
        if (a->shape[d] != b->shape[d]) return 0;
    return 1;
}

/* c = a @ b (or c += a @ b): a (M,K), b (K,N), c (M,N), blocked over K and N. */
static int matmul_impl(const tr_tensor *t, int nt, int acc, char *err, size_t errlen) {
    if (nt != 3 || !is_f32_2d(&t[0]) || !is_f32_2d(&t[1]) || !is_f32_2d(&t[2]))
        return fail(err, errlen, "matmul takes three float32 matrices a, b, c");
    const tr_tensor *a = &t[0], *b = &t[1], *c = &t[2];
    long M = a->shape[0], K = a->shape[1], N = b->shape[1];
    if (b->shape[0] != K || c->shape[0] != M || c->shape[1] != N)
        return fail(err, errlen, "matmul shapes do not agree (a MxK, b KxN, c MxN)");
    enum { TK = 64, TN = 64 };
    if (!acc)
        for (long i = 0; i < M; i++)
            for (long j = 0; j < N; j++) AT2(c, i, j) = 0.0f;
    for (long k0 = 0; k0 < K; k0 += TK)
        for (long j0 = 0; j0 < N; j0 += TN) {
            long k1 = k0 + TK < K ? k0 + TK : K, j1 = j0 + TN < N ? j0 + TN : N;
            for (long i = 0; i < M; i++)
                for (long k = k0; k < k1; k++) {
                    float aik = AT2(a, i, k);
                    for (long j = j0; j < j1; j++) AT2(c, i, j) += aik * AT2(b, k, j);
                }
        }
    return 0;
}

int32_t tr_matmul(const tr_tensor *t, int32_t nt, const tr_scalar *s, int32_t ns, char *err, size_t errlen) {
    (void)s, (void)ns;
    return matmul_impl(t, nt, 0, err, errlen);
}

int32_t tr_matmul_acc(const tr_tensor *t, int32_t nt, const tr_scalar *s, int32_t ns, char *err, size_t errlen) {
    (void)s, (void)ns;
    return matmul_impl(t, nt, 1, err, errlen);
}

/* y[i, :] = softmax(x[i, :]) */
int32_t tr_softmax_rows(const tr_tensor *t, int32_t nt, const tr_scalar *s, int32_t ns, char *err, size_t errlen) {
    (void)s, (void)ns;
    if (nt != 2 || !is_f32_2d(&t[0]) || !same_f32_shape(&t[0], &t[1]))
        return fail(err, errlen, "softmax_rows takes two float32 matrices of one shape");
    const tr_tensor *x = &t[0], *y = &t[1];
    for (long i = 0; i < x->shape[0]; i++) {
        float m = -INFINITY, sum = 0.0f;
        for (long j = 0; j < x->shape[1]; j++) m = fmaxf(m, AT2(x, i, j));
        for (long j = 0; j < x->shape[1]; j++) {
            float e = expf(AT2(x, i, j) - m);
            AT2(y, i, j) = e;
            sum += e;
        }
        for (long j = 0; j < x->shape[1]; j++) AT2(y, i, j) /= sum;
    }
    return 0;
}

int32_t tr_copy(const tr_tensor *t, int32_t nt, const tr_scalar *s, int32_t ns, char *err, size_t errlen) {
    (void)s, (void)ns;
    if (nt != 2 || !same_f32_shape(&t[0], &t[1])) return fail(err, errlen, "copy takes two float32 tensors of one shape");
    long n = nd_count(&t[0]);
    if (is_contig(&t[0]) && is_contig(&t[1])) {
        memcpy(t[1].data, t[0].data, (size_t)n * sizeof(float));
        return 0;
    }
    for (long f = 0; f < n; f++) *nd_at(&t[1], f) = *nd_at(&t[0], f);
    return 0;
}

int32_t tr_fill(const tr_tensor *t, int32_t nt, const tr_scalar *s, int32_t ns, char *err, size_t errlen) {
    if (nt != 1 || t[0].dtype != TR_F32 || ns != 1) return fail(err, errlen, "fill takes one float32 tensor and a value");
    float v = s[0].kind == TR_SCALAR_FLOAT64 ? (float)s[0].v.f : (float)s[0].v.i;
    long n = nd_count(&t[0]);
    if (is_contig(&t[0])) {
        float *p = (float *)t[0].data;
        for (long f = 0; f < n; f++) p[f] = v;
        return 0;
    }
    for (long f = 0; f < n; f++) *nd_at(&t[0], f) = v;
    return 0;
}

int32_t tr_add(const tr_tensor *t, int32_t nt, const tr_scalar *s, int32_t ns, char *err, size_t errlen) {
    (void)s, (void)ns;
    if (nt != 3 || !same_f32_shape(&t[0], &t[1]) || !same_f32_shape(&t[0], &t[2]))
        return fail(err, errlen, "add takes three float32 tensors of one shape");
    long n = nd_count(&t[0]);
    if (is_contig(&t[0]) && is_contig(&t[1]) && is_contig(&t[2])) {
        const float *a = (const float *)t[0].data, *b = (const float *)t[1].data;
        float *c = (float *)t[2].data;
        for (long f = 0; f < n; f++) c[f] = a[f] + b[f];
        return 0;
    }
    for (long f = 0; f < n; f++) *nd_at(&t[2], f) = *nd_at(&t[0], f) + *nd_at(&t[1], f);
    return 0;
}

int32_t tr_noop(const tr_tensor *t, int32_t nt, const tr_scalar *s, int32_t ns, char *err, size_t errlen) {
    (void)t, (void)nt, (void)s, (void)ns, (void)err, (void)errlen;
    return 0;
}

/* Keeps a core busy for ms milliseconds (scalar 0): compute, not sleep. */
int32_t tr_spin_ms(const tr_tensor *t, int32_t nt, const tr_scalar *s, int32_t ns, char *err, size_t errlen) {
    (void)t, (void)nt;
    if (ns != 1) return fail(err, errlen, "spin_ms takes one scalar (milliseconds)");
    double ms = s[0].kind == TR_SCALAR_FLOAT64 ? s[0].v.f : (double)s[0].v.i;
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    volatile double x = 0;
    do {
        for (int i = 0; i < 1000; i++) x += i * 0.5;
        clock_gettime(CLOCK_MONOTONIC, &b);
    } while ((b.tv_sec - a.tv_sec) * 1e3 + (b.tv_nsec - a.tv_nsec) / 1e6 < ms);
    return 0;
}

/* Always fails, with a message. */
int32_t tr_fail(const tr_tensor *t, int32_t nt, const tr_scalar *s, int32_t ns, char *err, size_t errlen) {
    (void)t, (void)s, (void)ns;
    snprintf(err, errlen, "bad block: %d tensors is not what I wanted", (int)nt);
    return 3;
}

/* Dereferences NULL: for the tests of a kernel that crashes its process. */
int32_t tr_crash(const tr_tensor *t, int32_t nt, const tr_scalar *s, int32_t ns, char *err, size_t errlen) {
    (void)t, (void)nt, (void)s, (void)ns, (void)err, (void)errlen;
    volatile int *p = NULL;
    return *p;
}

/* Sleeps s[0] milliseconds, then fills its last tensor (f32) with s[1]: for the tests of
 * a kernel that outlives its SCHEDULER_TIMEOUT and writes afterwards. */
int32_t tr_sleep_fill(const tr_tensor *t, int32_t nt, const tr_scalar *s, int32_t ns, char *err, size_t errlen) {
    if (nt < 1 || ns != 2) return fail(err, errlen, "sleep_fill takes tensors and two scalars (ms, value)");
    double ms = s[0].kind == TR_SCALAR_FLOAT64 ? s[0].v.f : (double)s[0].v.i;
    double v = s[1].kind == TR_SCALAR_FLOAT64 ? s[1].v.f : (double)s[1].v.i;
    struct timespec d = {(time_t)(ms / 1000), (long)((ms - 1000.0 * (long)(ms / 1000)) * 1e6)};
    while (nanosleep(&d, &d) != 0) {
    }
    const tr_tensor *o = &t[nt - 1];
    long n = nd_count(o);
    for (long i = 0; i < n; i++) *nd_at(o, i) = (float)v;
    return 0;
}
