// B12's orchestration: n submits of a no-op AIV kernel in one scope, timed around the
// submit loop with std::chrono::steady_clock. The same program in Rust is in
// src/bench/cpp_submit.rs, in Python in program.py beside this file.
//
// Arguments: a, b, x (16 float32 each), gate (int32[2]), timing (int64[1]); scalars n
// and chain. chain == 0: each task takes a and b as inputs and one runtime output of 16
// floats; chain != 0: a and b as inputs and x as INOUT, so every task depends on the
// previous one.
//
// Before the loop a gate task (func_id 1) holds the chip's only core: it sets gate[0]
// and sleeps on a futex until the orchestration sets gate[1] after the scope, so nothing
// completes while the loop runs and the figure is the submit path alone.

#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <chrono>
#include <climits>
#include <cstdint>
#include <ctime>

#include "pto_orchestration_api.h"

namespace {

template <typename T>
T *data(const ChipTensor &t) {
    return reinterpret_cast<T *>(t.buffer.addr) + t.start_offset;
}

void pause_briefly() {
    struct timespec ts = {0, 20000};
    nanosleep(&ts, nullptr);
}

}  // namespace

extern "C" {

__attribute__((visibility("default"))) PTO2OrchestrationConfig
aicpu_orchestration_config(const ChipTaskArgs &args) {
    (void)args;
    return PTO2OrchestrationConfig{
        .expected_arg_count = 7,
    };
}

__attribute__((visibility("default"))) void aicpu_orchestration_entry(const ChipTaskArgs &args) {
    const ChipTensor &a = args.tensor(0).ref();
    const ChipTensor &b = args.tensor(1).ref();
    const ChipTensor &x = args.tensor(2).ref();
    const ChipTensor &gate = args.tensor(3).ref();
    const ChipTensor &timing = args.tensor(4).ref();
    const uint64_t n = args.scalar(0);
    const bool chain = args.scalar(1) != 0;

    int32_t *g = data<int32_t>(gate);
    __atomic_store_n(&g[0], 0, __ATOMIC_RELAXED);
    __atomic_store_n(&g[1], 0, __ATOMIC_RELAXED);
    CoreTaskArgs gate_args;
    gate_args.add_no_dep(gate);
    rt_submit_aiv_task(1, gate_args);
    while (__atomic_load_n(&g[0], __ATOMIC_ACQUIRE) == 0) {
        if (rt_is_fatal()) {
            return;
        }
        pause_briefly();
    }

    uint32_t shape[1] = {16};
    TensorCreateInfo out_ci(shape, 1, DataType::FLOAT32);
    int64_t ns = 0;
    PTO2_SCOPE() {
        auto t0 = std::chrono::steady_clock::now();
        if (chain) {
            for (uint64_t i = 0; i < n; ++i) {
                CoreTaskArgs t;
                t.add_input(a);
                t.add_input(b);
                t.add_inout(x);
                rt_submit_aiv_task(0, t);
            }
        } else {
            for (uint64_t i = 0; i < n; ++i) {
                CoreTaskArgs t;
                t.add_input(a);
                t.add_input(b);
                t.add_output(out_ci);
                rt_submit_aiv_task(0, t);
            }
        }
        auto t1 = std::chrono::steady_clock::now();
        ns = std::chrono::duration_cast<std::chrono::nanoseconds>(t1 - t0).count();
    }
    data<int64_t>(timing)[0] = ns;
    __atomic_store_n(&g[1], 1, __ATOMIC_RELEASE);
    syscall(SYS_futex, &g[1], FUTEX_WAKE_PRIVATE, INT_MAX, nullptr, nullptr, 0);
}

}  // extern "C"
