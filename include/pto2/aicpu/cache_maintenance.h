// taskring's aicpu/cache_maintenance.h: Simpler's cache_invalidate_range /
// cache_flush_range. taskring's cores share coherent host memory, so these are memory
// fences (acquire before reading what another core wrote, release after writing).
#pragma once

#include <stddef.h>

inline void cache_invalidate_range(const void *addr, size_t size) {
    (void)addr;
    (void)size;
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
}

inline void cache_flush_range(const void *addr, size_t size) {
    (void)addr;
    (void)size;
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
}
