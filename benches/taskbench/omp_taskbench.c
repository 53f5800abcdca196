/*
 * omp_taskbench.c: the in-run baseline of benchmark B1 (docs/benchmarks.md). A Task
 * Bench-compatible driver on OpenMP tasks with `depend` clauses (libgomp).
 *
 * It takes the same flags and implements the same patterns, kernels, validation and
 * output lines as `taskring-bench taskbench` (crates/taskring-bench/src/taskbench.rs), so
 * both drivers run identical graphs. Everything is written here from the published Task Bench
 * definitions; no Task Bench code is used.
 *
 *   build: gcc -O2 -fopenmp -o omp_taskbench omp_taskbench.c
 *   run:   ./omp_taskbench -steps 1000 -width 2 -type stencil_1d -kernel compute_bound -iter 1024
 *
 * Mapping: each graph has a ring of F output fields (Task Bench's `-field`), each `width`
 * rows of `output` bytes padded to 64 bytes. One OpenMP task per point per timestep,
 * created by one thread inside `parallel` + `single`, `untied mergeable` as in Task Bench's
 * OpenMP port. Task (t, i) has `depend(inout: row i of field t%F)` and
 * `depend(in: row j of field (t-1)%F)` for each dependency j (OpenMP 5.0
 * `depend(iterator(...))`). OpenMP orders write-after-read by itself. trivial tasks have no
 * depend clause (nobody reads their output) and stamp with relaxed atomic stores.
 *
 * Why a ring rather than two parities: libgomp keeps, per dependence address, a chain of
 * every unfinished task that named it, and walks it on every new `depend` of that address.
 * With only two parities a width-2 graph names 4 addresses, the chains grow to the ~128
 * tasks libgomp lets queue (64 per thread), and each submit costs 5-20 us (single-thread
 * cost even grows with -steps). The default F = clamp(ceil(256 * threads / width), 2, steps)
 * keeps each address to about one generation of queued tasks. -field N overrides it.
 *
 * Validation: each task checks that every input row holds the stamp (t-1, j) and writes
 * (t, i) into every 16-byte pair of its row; a mismatch aborts with a message. After each
 * run, the number of executed tasks is checked.
 *
 * Extensions: -worker N (threads; default OMP_NUM_THREADS or all CPUs), -warmup N (untimed
 * runs before the timed one), -field N (output fields per graph; default above). -sample is
 * accepted and ignored.
 */
#define _GNU_SOURCE
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#if defined(__x86_64__)
#include <immintrin.h>
#endif

#define MAX_IV 64
#define MAX_GRAPHS 64
#define COUNTER_SLOTS 256

enum { TRIVIAL, NO_COMM, STENCIL_1D, STENCIL_1D_PERIODIC, DOM, TREE, FFT, ALL_TO_ALL, NEAREST, SPREAD, RANDOM_NEAREST, N_PATTERNS };
static const char *PATTERN_NAMES[N_PATTERNS] = {"trivial", "no_comm", "stencil_1d", "stencil_1d_periodic", "dom", "tree",
                                                "fft", "all_to_all", "nearest", "spread", "random_nearest"};
enum { K_EMPTY, K_BUSY_WAIT, K_COMPUTE_BOUND, K_MEMORY_BOUND, N_KERNELS };
static const char *KERNEL_NAMES[N_KERNELS] = {"empty", "busy_wait", "compute_bound", "memory_bound"};

typedef struct {
    long steps, width, radix, period_given, period;
    double fraction;
    int pattern, kernel;
    long iter, output, scratch;
    /* derived */
    long ndsets, out_words, stride, fields;
    int64_t **buf; /* [fields] */
    long tasks, deps, max_deps;
    unsigned long long flops_per_task, bytes_per_task;
    int64_t **ptrs; /* creator-side scratch: input row addresses of one task */
} graph_t;

typedef struct {
    long lo[MAX_IV], hi[MAX_IV];
    int n;
} intervals_t;

/* ----- dependence patterns ------------------------------------------------------------ */

static void iv_push(intervals_t *v, long lo, long hi) {
    if (v->n >= MAX_IV) {
        fprintf(stderr, "omp_taskbench: more than %d dependency intervals\n", MAX_IV);
        abort();
    }
    v->lo[v->n] = lo;
    v->hi[v->n] = hi;
    v->n++;
}

/* Sort by start, merge overlapping or adjacent intervals. */
static void iv_normalize(intervals_t *v) {
    for (int k = 1; k < v->n; k++)
        for (int j = k; j > 0 && v->lo[j - 1] > v->lo[j]; j--) {
            long a = v->lo[j], b = v->hi[j];
            v->lo[j] = v->lo[j - 1];
            v->hi[j] = v->hi[j - 1];
            v->lo[j - 1] = a;
            v->hi[j - 1] = b;
        }
    int m = 0;
    for (int k = 0; k < v->n; k++) {
        if (m > 0 && v->lo[k] <= v->hi[m - 1] + 1) {
            if (v->hi[k] > v->hi[m - 1]) v->hi[m - 1] = v->hi[k];
        } else {
            v->lo[m] = v->lo[k];
            v->hi[m] = v->hi[k];
            m++;
        }
    }
    v->n = m;
}

static void iv_clip(intervals_t *v, long lo, long hi) {
    int m = 0;
    for (int k = 0; k < v->n; k++) {
        long a = v->lo[k] > lo ? v->lo[k] : lo, b = v->hi[k] < hi ? v->hi[k] : hi;
        if (a <= b) {
            v->lo[m] = a;
            v->hi[m] = b;
            m++;
        }
    }
    v->n = m;
}

static long iv_count(const intervals_t *v) {
    long c = 0;
    for (int k = 0; k < v->n; k++) c += v->hi[k] - v->lo[k] + 1;
    return c;
}

static long lmax(long a, long b) { return a > b ? a : b; }
static long lmin(long a, long b) { return a < b ? a : b; }
static long rem_euclid(long a, long m) { long r = a % m; return r < 0 ? r + m : r; }

static uint64_t mix64(uint64_t z) {
    z += 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static double edge_uniform(long dset, long point, long dep) {
    uint64_t h = mix64(mix64(mix64((uint64_t)dset) ^ (uint64_t)point) ^ (uint64_t)dep);
    return (double)(h >> 11) * (1.0 / (double)(1ull << 53));
}

static long offset_at(const graph_t *g, long t) {
    if (t < 0) return 0;
    if (g->pattern == DOM) return lmax(0, t + g->width - g->steps);
    return 0;
}

static long width_at(const graph_t *g, long t) {
    if (t < 0) return 0;
    if (g->pattern == DOM) return lmin(g->width, lmin(t + 1, g->steps - t));
    if (g->pattern == TREE) return lmin(g->width, 1L << lmin(t, 62));
    return g->width;
}

static long dset_at(const graph_t *g, long t) {
    if (g->pattern == FFT) return (t + g->ndsets - 1) % g->ndsets;
    if (g->pattern == SPREAD || g->pattern == RANDOM_NEAREST) return t % g->ndsets;
    return 0;
}

static void raw_deps(const graph_t *g, long dset, long i, intervals_t *out) {
    long w = g->width, r = g->radix;
    out->n = 0;
    switch (g->pattern) {
    case TRIVIAL: break;
    case NO_COMM: iv_push(out, i, i); break;
    case STENCIL_1D: iv_push(out, lmax(0, i - 1), lmin(i + 1, w - 1)); break;
    case STENCIL_1D_PERIODIC:
        for (long p = i - 1; p <= i + 1; p++) {
            long q = rem_euclid(p, w);
            iv_push(out, q, q);
        }
        break;
    case DOM: iv_push(out, lmax(0, i - 1), i); break;
    case TREE: iv_push(out, i / 2, i / 2); break;
    case FFT: {
        long s = 1L << dset;
        if (i - s >= 0) iv_push(out, i - s, i - s);
        iv_push(out, i, i);
        if (i + s < w) iv_push(out, i + s, i + s);
        break;
    }
    case ALL_TO_ALL: iv_push(out, 0, w - 1); break;
    case NEAREST:
        if (r > 0) iv_push(out, lmax(0, i - (r - 1) / 2), lmin(i + r / 2, w - 1));
        break;
    case SPREAD:
        for (long k = 0; k < r; k++) {
            long q = rem_euclid(i + k * w / r + (k > 0 ? dset : 0), w);
            iv_push(out, q, q);
        }
        break;
    case RANDOM_NEAREST:
        if (r > 0) {
            long lo = lmax(0, i - (r - 1) / 2), hi = lmin(i + r / 2, w - 1);
            for (long j = lo; j <= hi; j++)
                if (j == i || edge_uniform(dset, i, j) < g->fraction) iv_push(out, j, j);
        }
        break;
    }
    iv_normalize(out);
}

static void deps_at(const graph_t *g, long t, long i, intervals_t *out) {
    if (t <= 0) {
        out->n = 0;
        return;
    }
    raw_deps(g, dset_at(g, t), i, out);
    long lo = offset_at(g, t - 1);
    iv_clip(out, lo, lo + width_at(g, t - 1) - 1);
}

/* ----- kernels ------------------------------------------------------------------------ */

static volatile double sink_d;
static volatile uint64_t sink_u;

/* Task Bench's compute_bound arithmetic (execute_kernel_compute in its core/core_kernel.cc):
 * 64 doubles in 16 lanes of 4, each lane (4, 3, 2, 1) in memory order, `iter` rounds of
 * a = a*a + a (the values reach +inf after about ten rounds, as upstream's do), then the
 * product of all 64: 128*iter + 64 FLOPs. With AVX2/FMA (detected at run time) each round
 * is 16 register-only FMAs, the code gcc emits for upstream's AVX2 build. */
#if defined(__x86_64__)
__attribute__((target("avx2,fma"))) static double compute_avx2(long iter) {
    __m256d a[16];
    for (int k = 0; k < 16; k++) a[k] = _mm256_set_pd(1.0, 2.0, 3.0, 4.0);
    for (long it = 0; it < iter; it++) {
#pragma GCC unroll 16
        for (int k = 0; k < 16; k++) a[k] = _mm256_fmadd_pd(a[k], a[k], a[k]);
    }
    double out[64], p = 1.0;
    for (int k = 0; k < 16; k++) _mm256_storeu_pd(out + 4 * k, a[k]);
    for (int k = 0; k < 64; k++) p *= out[k];
    return p;
}
#endif

static double compute_bound(long iter) {
#if defined(__x86_64__)
    static int avx = -1;
    if (avx < 0) avx = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    if (avx) return compute_avx2(iter);
#endif
    double x[64], p = 1.0;
    for (int k = 0; k < 64; k++) x[k] = 4.0 - k % 4;
    for (long it = 0; it < iter; it++)
        for (int k = 0; k < 64; k++) x[k] = x[k] * x[k] + x[k];
    for (int k = 0; k < 64; k++) p *= x[k];
    return p;
}

static __thread char *scratch_mem;
static __thread size_t scratch_len;

static void memory_bound(long iter, size_t bytes) {
    if (scratch_len < bytes) {
        free(scratch_mem);
        scratch_mem = malloc(bytes);
        if (!scratch_mem) abort();
        memset(scratch_mem, 1, bytes);
        scratch_len = bytes;
    }
    size_t half = bytes / 2;
    for (long it = 0; it < iter; it++) {
        if (it & 1)
            memcpy(scratch_mem, scratch_mem + half, half);
        else
            memcpy(scratch_mem + half, scratch_mem, half);
        __asm__ volatile("" ::"r"(scratch_mem) : "memory");
    }
}

static void run_kernel(const graph_t *g, long t, long i) {
    switch (g->kernel) {
    case K_EMPTY: break;
    case K_BUSY_WAIT: {
        uint64_t acc = 1 + (uint64_t)(t * 31 + i) % 1000;
        for (long it = 0; it < g->iter; it++) acc = acc * 139 % 2147483647;
        sink_u = acc;
        break;
    }
    case K_COMPUTE_BOUND: sink_d = compute_bound(g->iter); break;
    case K_MEMORY_BOUND: memory_bound(g->iter, (size_t)g->scratch); break;
    }
}

/* ----- tasks --------------------------------------------------------------------------- */

typedef struct {
    unsigned long long n;
    char pad[120];
} counter_t;
static counter_t counters[COUNTER_SLOTS];

static int64_t *row(const graph_t *g, long t, long point) { return g->buf[t % g->fields] + point * g->stride; }

static void task_body(const graph_t *g, int gi, long t, long i) {
    int64_t *own = row(g, t, i);
    if (g->pattern == TRIVIAL) {
        run_kernel(g, t, i);
        for (long w = 0; w < g->out_words; w += 2) {
            __atomic_store_n(&own[w], (int64_t)t, __ATOMIC_RELAXED);
            __atomic_store_n(&own[w + 1], (int64_t)i, __ATOMIC_RELAXED);
        }
    } else {
        intervals_t iv;
        deps_at(g, t, i, &iv);
        for (int k = 0; k < iv.n; k++)
            for (long j = iv.lo[k]; j <= iv.hi[k]; j++) {
                const int64_t *in = row(g, t - 1, j);
                for (long w = 0; w < g->out_words; w += 2)
                    if (in[w] != t - 1 || in[w + 1] != j) {
                        fprintf(stderr,
                                "omp_taskbench: graph %d task (t=%ld, i=%ld): validation failed: input point %ld holds "
                                "stamp (t=%ld, i=%ld) at word %ld, expected (t=%ld, i=%ld)\n",
                                gi + 1, t, i, j, (long)in[w], (long)in[w + 1], w, t - 1, j);
                        abort();
                    }
            }
        run_kernel(g, t, i);
        for (long w = 0; w < g->out_words; w += 2) {
            own[w] = t;
            own[w + 1] = i;
        }
    }
    counters[omp_get_thread_num() % COUNTER_SLOTS].n++;
}

static void run_graphs(graph_t *gs, int ng) {
    long max_steps = 0;
    for (int g = 0; g < ng; g++) max_steps = lmax(max_steps, gs[g].steps);
#pragma omp parallel
#pragma omp single
    {
        intervals_t iv;
        for (long t = 0; t < max_steps; t++)
            for (int gi = 0; gi < ng; gi++) {
                graph_t *g = &gs[gi];
                if (t >= g->steps) continue;
                long lo = offset_at(g, t), hi = lo + width_at(g, t);
                for (long i = lo; i < hi; i++) {
                    if (g->pattern == TRIVIAL) {
#pragma omp task untied mergeable firstprivate(g, gi, t, i)
                        task_body(g, gi, t, i);
                        continue;
                    }
                    deps_at(g, t, i, &iv);
                    int n = 0;
                    int64_t **ptrs = g->ptrs;
                    for (int k = 0; k < iv.n; k++)
                        for (long j = iv.lo[k]; j <= iv.hi[k]; j++) ptrs[n++] = row(g, t - 1, j);
                    int64_t *own = row(g, t, i);
#pragma omp task untied mergeable firstprivate(g, gi, t, i) depend(iterator(k = 0 : n), in : *ptrs[k]) depend(inout : *own)
                    task_body(g, gi, t, i);
                }
            }
    }
}

/* ----- command line and main ----------------------------------------------------------- */

static void usage(FILE *f) {
    fprintf(f,
            "usage: omp_taskbench [-steps N] [-width N] [-type PATTERN] [-radix N] [-period N] [-fraction F]\n"
            "                     [-kernel KERNEL] [-iter N] [-output BYTES] [-scratch BYTES] [-and ...]\n"
            "                     [-worker N] [-warmup N] [-field N]\n");
}

static void defaults(graph_t *g) {
    memset(g, 0, sizeof *g);
    g->steps = 4;
    g->width = 4;
    g->pattern = TRIVIAL;
    g->radix = 3;
    g->period_given = -1;
    g->fraction = 0.25;
    g->kernel = K_EMPTY;
    g->iter = 0;
    g->output = 16;
    g->scratch = 0;
}

static long parse_long(const char *flag, const char *v) {
    char *end;
    long x = strtol(v, &end, 10);
    if (!*v || *end) {
        fprintf(stderr, "omp_taskbench: invalid value for %s: '%s'\n", flag, v);
        exit(2);
    }
    return x;
}

static void die(const char *msg, int gi) {
    fprintf(stderr, "omp_taskbench: task graph %d: %s\n", gi + 1, msg);
    exit(2);
}

static long ceil_log2(long x) {
    long k = 0;
    while ((1L << k) < x) k++;
    return k;
}

static void prepare(graph_t *g, int gi, long field_opt, int threads) {
    if (g->steps < 1) die("-steps must be >= 1", gi);
    if (g->width < 1) die("-width must be >= 1", gi);
    if (g->radix < 0) die("-radix must be >= 0", gi);
    if ((g->pattern == SPREAD || g->pattern == RANDOM_NEAREST) && g->radix > MAX_IV) die("-radix above 64", gi);
    if (g->fraction < 0 || g->fraction > 1) die("-fraction must be in [0, 1]", gi);
    if (g->output < 16 || g->output % 16) die("-output must be a positive multiple of 16 bytes", gi);
    if (g->kernel == K_MEMORY_BOUND && g->scratch < 16) die("-kernel memory_bound needs -scratch >= 16", gi);
    g->period = ((g->pattern == SPREAD || g->pattern == RANDOM_NEAREST) && g->period_given <= 0) ? 3 : g->period_given;
    g->ndsets = g->pattern == FFT ? lmax(1, ceil_log2(g->width))
                : (g->pattern == SPREAD || g->pattern == RANDOM_NEAREST) ? lmax(1, g->period)
                                                                         : 1;
    g->out_words = g->output / 8;
    g->stride = (g->out_words + 7) / 8 * 8;
    g->fields = field_opt > 0 ? field_opt : (256L * threads + g->width - 1) / g->width;
    g->fields = lmin(lmax(g->fields, 2), lmax(g->steps, 2));
    g->buf = malloc(sizeof(int64_t *) * (size_t)g->fields);
    if (!g->buf) die("out of memory", gi);
    for (long p = 0; p < g->fields; p++) {
        g->buf[p] = aligned_alloc(64, (size_t)(g->width * g->stride * 8));
        if (!g->buf[p]) die("out of memory", gi);
        memset(g->buf[p], 0, (size_t)(g->width * g->stride * 8));
    }
    g->flops_per_task = g->kernel == K_COMPUTE_BOUND ? 128ull * (unsigned long long)g->iter + 64 : 0;
    g->bytes_per_task = g->kernel == K_MEMORY_BOUND ? (unsigned long long)g->iter * (unsigned long long)g->scratch : 0;
    intervals_t iv;
    for (long t = 0; t < g->steps; t++) {
        long lo = offset_at(g, t), w = width_at(g, t);
        g->tasks += w;
        for (long i = lo; i < lo + w; i++) {
            deps_at(g, t, i, &iv);
            long c = iv_count(&iv);
            g->deps += c;
            g->max_deps = lmax(g->max_deps, c);
        }
    }
    g->ptrs = malloc(sizeof(int64_t *) * (size_t)lmax(1, g->max_deps));
}

int main(int argc, char **argv) {
    static graph_t gs[MAX_GRAPHS];
    int ng = 0, warmup = 0, workers = 0;
    long field_opt = 0;
    defaults(&gs[0]);
    for (int a = 1; a < argc; a++) {
        const char *f = argv[a];
        graph_t *g = &gs[ng];
        if (!strcmp(f, "-and")) {
            if (++ng >= MAX_GRAPHS) {
                fprintf(stderr, "omp_taskbench: at most %d graphs\n", MAX_GRAPHS);
                return 2;
            }
            defaults(&gs[ng]);
            continue;
        }
        if (!strcmp(f, "-h") || !strcmp(f, "-help") || !strcmp(f, "--help")) {
            usage(stdout);
            return 0;
        }
        if (a + 1 >= argc) {
            fprintf(stderr, "omp_taskbench: %s needs a value\n", f);
            usage(stderr);
            return 2;
        }
        const char *v = argv[++a];
        if (!strcmp(f, "-steps")) g->steps = parse_long(f, v);
        else if (!strcmp(f, "-width")) g->width = parse_long(f, v);
        else if (!strcmp(f, "-radix")) g->radix = parse_long(f, v);
        else if (!strcmp(f, "-period")) g->period_given = parse_long(f, v);
        else if (!strcmp(f, "-iter")) g->iter = parse_long(f, v);
        else if (!strcmp(f, "-output")) g->output = parse_long(f, v);
        else if (!strcmp(f, "-scratch")) g->scratch = parse_long(f, v);
        else if (!strcmp(f, "-fraction")) g->fraction = atof(v);
        else if (!strcmp(f, "-worker") || !strcmp(f, "-workers")) workers = (int)parse_long(f, v);
        else if (!strcmp(f, "-warmup")) warmup = (int)parse_long(f, v);
        else if (!strcmp(f, "-field")) field_opt = parse_long(f, v);
        else if (!strcmp(f, "-sample")) fprintf(stderr, "omp_taskbench: note: %s %s is accepted and ignored\n", f, v);
        else if (!strcmp(f, "-type") || !strcmp(f, "-kernel")) {
            int is_type = !strcmp(f, "-type"), n = is_type ? N_PATTERNS : N_KERNELS, found = -1;
            const char **names = is_type ? PATTERN_NAMES : KERNEL_NAMES;
            for (int k = 0; k < n; k++)
                if (!strcmp(v, names[k])) found = k;
            if (found < 0) {
                fprintf(stderr, "omp_taskbench: unknown %s '%s'\n", f, v);
                return 2;
            }
            if (is_type) g->pattern = found;
            else g->kernel = found;
        } else {
            fprintf(stderr, "omp_taskbench: unknown flag '%s'\n", f);
            usage(stderr);
            return 2;
        }
    }
    ng++;
    if (workers > 0) omp_set_num_threads(workers);
    int threads = workers > 0 ? workers : omp_get_max_threads();

    long long total_tasks = 0, total_deps = 0;
    unsigned long long total_flops = 0, total_bytes = 0;
    printf("Running Task Benchmark\n  Configuration:\n");
    for (int gi = 0; gi < ng; gi++) {
        graph_t *g = &gs[gi];
        prepare(g, gi, field_opt, threads);
        total_tasks += g->tasks;
        total_deps += g->deps;
        total_flops += g->flops_per_task * (unsigned long long)g->tasks;
        total_bytes += g->bytes_per_task * (unsigned long long)g->tasks;
        printf("    Task Graph %d:\n      Time Steps: %ld\n      Max Width: %ld\n      Dependence Type: %s\n"
               "      Radix: %ld\n      Period: %ld\n      Fraction Connected: %f\n      Kernel:\n        Type: %s\n"
               "        Iterations: %ld\n        Output Bytes: %ld\n        Scratch Bytes: %ld\n",
               gi + 1, g->steps, g->width, PATTERN_NAMES[g->pattern], g->radix, g->period, g->fraction,
               KERNEL_NAMES[g->kernel], g->iter, g->output, g->scratch);
    }

    double elapsed = 0;
    for (int r = 0; r <= warmup; r++) {
        memset(counters, 0, sizeof counters);
        double t0 = omp_get_wtime();
        run_graphs(gs, ng);
        elapsed = omp_get_wtime() - t0;
        unsigned long long done = 0;
        for (int k = 0; k < COUNTER_SLOTS; k++) done += counters[k].n;
        if ((long long)done != total_tasks) {
            fprintf(stderr, "omp_taskbench: validation failed: %llu tasks executed, the graphs have %lld\n", done, total_tasks);
            return 1;
        }
    }
    printf("Total Tasks %lld\n", total_tasks);
    printf("Total Dependencies %lld\n", total_deps);
    printf("Total FLOPs %llu\n", total_flops);
    printf("Total Bytes %llu\n", total_bytes);
    printf("Elapsed Time %e seconds\n", elapsed);
    printf("FLOP/s %e\n", (double)total_flops / elapsed);
    printf("B/s %e\n", (double)total_bytes / elapsed);
    return 0;
}
