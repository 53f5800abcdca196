// taskring's common.h: the assertion macros and the per-thread "current runtime" of
// Simpler's PTO2 API. The pointer is set by taskring_pto2_enter (see
// pto_orchestration_api.h) for the thread that runs the orchestration entry.
#pragma once

#include <stdio.h>
#include <stdlib.h>

#include "assert_compat.h"

struct PTO2Runtime;

#pragma GCC visibility push(hidden)

// One per thread and per library.
inline thread_local PTO2Runtime *taskring_pto2_current = nullptr;

inline PTO2Runtime *framework_current_runtime() { return taskring_pto2_current; }
inline void framework_bind_runtime(PTO2Runtime *rt) { taskring_pto2_current = rt; }

#pragma GCC visibility pop
