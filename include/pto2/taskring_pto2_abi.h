/*
 * taskring_pto2_abi.h -- the boundary between an orchestration library and taskring.
 *
 * An orchestration library is built from a source that includes pto_orchestration_api.h
 * and has no link dependency on taskring. The chip reaches it through two symbols the
 * API header emits into every such library (taskring_pto2_config, taskring_pto2_enter);
 * the library reaches the chip only through the function table below, which the chip
 * hands to taskring_pto2_enter for the calling thread. Everything here is plain C
 * layout: taskring's Rust side mirrors these structs field by field, and both sides
 * check the sizes.
 *
 * Users do not include this header themselves; pto_orchestration_api.h does.
 */
#ifndef TASKRING_PTO2_ABI_H
#define TASKRING_PTO2_ABI_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Bumped whenever a layout below changes; the chip refuses a library built against
 * another version (INVALID_ARGS naming both). */
#define TASKRING_PTO2_ABI_VERSION 1

/* What a submit is. */
#define TASKRING_PTO2_SUBMIT_TASK 0  /* rt_submit_task / rt_submit_aic_task / rt_submit_aiv_task */
#define TASKRING_PTO2_SUBMIT_DUMMY 1 /* rt_submit_dummy_task */
#define TASKRING_PTO2_SUBMIT_ALLOC 2 /* alloc_tensors */

/* Log levels of taskring_pto2_ops.log (LOG_ERROR .. LOG_DEBUG). */
#define TASKRING_PTO2_LOG_ERROR 0
#define TASKRING_PTO2_LOG_WARN 1
#define TASKRING_PTO2_LOG_INFO 2
#define TASKRING_PTO2_LOG_DEBUG 3
#define TASKRING_PTO2_LOG_ALWAYS 4
#define TASKRING_PTO2_LOG_TIMING 5

/*
 * One submit, as the orchestration's CoreTaskArgs describes it (built on the caller's
 * stack by the inline rt_submit_* wrappers; every pointer is valid for the call only).
 *
 * tensors[i] points at a ChipTensor (tags INPUT, INOUT, OUTPUT_EXISTING, NO_DEP) or at
 * a TensorCreateInfo (tag OUTPUT); tags[i] is the TensorArgType value. scalars are raw
 * 64-bit patterns. deps are PTO2TaskId raw values; dep_kinds is NULL (every dep
 * DEP_WAIT|DEP_RETAIN) or one DepFlags byte per dep. error_msg is the CoreTaskArgs'
 * first recorded error when has_error is set (the submit then fails INVALID_ARGS).
 * predicate_tensor is NULL when predicate_op is 0 (PredicateOp::NONE).
 *
 * Size 136 bytes on LP64.
 */
typedef struct taskring_pto2_submit {
    const void *const *tensors;     /*   0 */
    const int32_t *tags;            /*   8 */
    const uint64_t *scalars;        /*  16 */
    const uint64_t *deps;           /*  24 */
    const uint8_t *dep_kinds;       /*  32 */
    const char *error_msg;          /*  40 */
    const void *predicate_tensor;   /*  48: a ChipTensor */
    int64_t predicate_target;       /*  56 */
    uint32_t predicate_indices[5];  /*  64 */
    uint32_t predicate_ndims;       /*  84 */
    int32_t tensor_count;           /*  88 */
    int32_t scalar_count;           /*  92 */
    uint32_t dep_count;             /*  96 */
    int32_t kernel_ids[3];          /* 100: AIC, AIV0, AIV1; -1 = none (MixedKernels) */
    int32_t kind;                   /* 112: TASKRING_PTO2_SUBMIT_* */
    int32_t task_timing_slot;       /* 116: -1 = none */
    int16_t block_num;              /* 120: PTO2LaunchSpec::block_num() */
    uint8_t require_sync_start;     /* 122 */
    uint8_t allow_early_resolve;    /* 123 */
    uint8_t has_error;              /* 124 */
    uint8_t predicate_op;           /* 125: PredicateOp */
    uint8_t reserved[10];           /* 126 */
} taskring_pto2_submit;

/*
 * What a submit returns: the task id (PTO2TaskId raw, UINT64_MAX when the submit
 * failed or the run is fatal) and the runtime-created outputs (tag OUTPUT, in argument
 * order), written into `tensors`, which has room for `capacity` ChipTensors (128 bytes
 * each). On failure count is 0.
 */
typedef struct taskring_pto2_outputs {
    uint64_t task_id;
    uint32_t count;
    uint32_t capacity;
    void *tensors; /* ChipTensor[capacity] */
} taskring_pto2_outputs;

struct PTO2Runtime;

/*
 * The function table. Every entry is called on the orchestrator thread of the chip
 * that bound it. Formatting (printf-style) happens in the header's inline wrappers;
 * the table takes finished, NUL-terminated text.
 */
typedef struct taskring_pto2_ops {
    uint32_t abi_version; /* TASKRING_PTO2_ABI_VERSION */
    uint32_t size;        /* sizeof(taskring_pto2_ops) */
    void (*submit)(struct PTO2Runtime *rt, const taskring_pto2_submit *s, taskring_pto2_outputs *out);
    /* file is NULL (and line 0) when the scope has no call site (rt_scope_begin). */
    void (*scope_begin)(struct PTO2Runtime *rt, uint8_t mode, const char *file, int32_t line);
    void (*scope_end)(struct PTO2Runtime *rt);
    void (*orchestration_done)(struct PTO2Runtime *rt);
    int32_t (*is_fatal)(struct PTO2Runtime *rt);
    void (*report_fatal)(struct PTO2Runtime *rt, int32_t code, const char *func, const char *msg);
    void (*log)(struct PTO2Runtime *rt, int32_t level, const char *func, const char *msg);
    /* tensor: a ChipTensor; indices: ndims entries. */
    uint64_t (*get_tensor_data)(struct PTO2Runtime *rt, const void *tensor, uint32_t ndims,
                                const uint32_t *indices);
    void (*set_tensor_data)(struct PTO2Runtime *rt, const void *tensor, uint32_t ndims,
                            const uint32_t *indices, uint64_t value);
    int32_t (*available_cluster_count)(struct PTO2Runtime *rt);
    int32_t (*available_aiv_count)(struct PTO2Runtime *rt);
} taskring_pto2_ops;

/*
 * The entry's arguments: the program's tensors (ChipTensor[tensor_count]) and scalars,
 * in the order of the callable's signature.
 */
typedef struct taskring_pto2_entry_args {
    const void *tensors; /* ChipTensor[tensor_count] */
    const uint64_t *scalars;
    int32_t tensor_count;
    int32_t scalar_count;
} taskring_pto2_entry_args;

/*
 * Exported by every orchestration library (emitted by pto_orchestration_api.h):
 *
 * taskring_pto2_config(config_fn, args): the expected argument count that config_fn
 *   (the library's aicpu_orchestration_config, a `PTO2OrchestrationConfig (*)(const
 *   ChipTaskArgs &)`) reports for these arguments; -1 when config_fn is NULL, throws,
 *   or the arguments do not fit a ChipTaskArgs. A count of 0 or less means no check.
 *   Writes the ABI version the library was built against into *abi.
 *
 * taskring_pto2_enter(rt, entry_fn, args): bind rt for the calling thread, build the
 *   ChipTaskArgs, call entry_fn (`void (*)(const ChipTaskArgs &)`), unbind. A C++
 *   exception that leaves the entry is reported through rt->ops->report_fatal and does
 *   not cross into the chip. Returns 0; 1 when an exception was caught, or when the
 *   arguments do not fit a ChipTaskArgs (256 tensors, 128 scalars: reported as
 *   INVALID_ARGS), the entry then not called.
 */
typedef int32_t (*taskring_pto2_config_fn)(const void *config_fn, const taskring_pto2_entry_args *args,
                                           uint32_t *abi);
typedef int32_t (*taskring_pto2_enter_fn)(struct PTO2Runtime *rt, const void *entry_fn,
                                          const taskring_pto2_entry_args *args);

/*
 * Kernels: `extern "C" void kernel_entry(int64_t *args)`. args[i] is the address of a
 * ChipTensor for the i-th tensor argument (in add_* order), then the scalars as 64-bit
 * values; args[TASKRING_PTO2_LOCAL_CONTEXT_INDEX] is the address of a LocalContext
 * (block_idx, block_num), args[TASKRING_PTO2_GLOBAL_CONTEXT_INDEX] that of a
 * GlobalContext (sub_block_id: 0 for AIC and AIV0, 1 for AIV1).
 */
#define TASKRING_PTO2_LOCAL_CONTEXT_INDEX 48
#define TASKRING_PTO2_GLOBAL_CONTEXT_INDEX 49
#define TASKRING_PTO2_KERNEL_ARGS 50

#ifdef __cplusplus
}
#endif

#endif /* TASKRING_PTO2_ABI_H */
