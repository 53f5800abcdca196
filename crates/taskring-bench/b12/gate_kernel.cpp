// B12's gate kernel: marks itself running (gate[0] = 1), then waits until the
// orchestration opens the gate (gate[1] != 0), sleeping between looks so the waiting
// core leaves the CPU to the orchestrator.

#include <cstdint>
#include <ctime>

#include "tensor.h"

extern "C" void kernel_entry(int64_t *args) {
    const ChipTensor *gate = reinterpret_cast<const ChipTensor *>(args[0]);
    int64_t *g = reinterpret_cast<int64_t *>(gate->buffer.addr) + gate->start_offset;
    __atomic_store_n(&g[0], 1, __ATOMIC_RELEASE);
    while (__atomic_load_n(&g[1], __ATOMIC_ACQUIRE) == 0) {
        struct timespec ts = {0, 20000};
        nanosleep(&ts, nullptr);
    }
}
