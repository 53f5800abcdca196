// taskring's pto_runtime2_types.h: what orchestration sources take from Simpler's
// pto_runtime2_types.h — the PTO2_ERROR_* codes, the shared submit/task-id types and
// SPIN_WAIT_HINT. The runtime's own types live in taskring's Rust code.
#pragma once

#include <sched.h>

#include "pto_runtime_status.h"
#include "pto_submit_types.h"
#include "pto_task_id.h"
#include "pto_types.h"

// For a thread that polls memory another core writes: the cores are threads sharing this
// machine's CPUs, so the poller gives its CPU away.
#ifndef SPIN_WAIT_HINT
#define SPIN_WAIT_HINT() ((void)sched_yield())
#endif
