// B12's gate kernel: marks itself running (gate[0] = 1), then waits on a futex until
// the orchestration opens the gate (gate[1] != 0). The waiting core sleeps in the kernel
// without waking up, as the Rust gate (a condition variable) and the Python one (an
// Event) do, so it takes no CPU from the orchestrator.

#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdint>

#include "tensor.h"

extern "C" void kernel_entry(int64_t *args) {
    const ChipTensor *gate = reinterpret_cast<const ChipTensor *>(args[0]);
    int32_t *g = reinterpret_cast<int32_t *>(gate->buffer.addr) + gate->start_offset;
    __atomic_store_n(&g[0], 1, __ATOMIC_RELEASE);
    while (__atomic_load_n(&g[1], __ATOMIC_ACQUIRE) == 0) {
        syscall(SYS_futex, &g[1], FUTEX_WAIT_PRIVATE, 0, nullptr, nullptr, 0);
    }
}
