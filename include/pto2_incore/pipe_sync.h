// pipe_sync(): the last call of a kernel that writes global memory through PTO-ISA tiles.
// The scalar pipe waits for the core's store pipe to drain, so every TSTORE of the kernel
// has landed when kernel_entry returns and the next task reads finished data:
//   AIV build (__DAV_VEC__):  the MTE3 pipe (vector tile -> global memory);
//   AIC build (__DAV_CUBE__): the FIX pipe (cube result -> global memory).
// KernelCompiler defines the macro of the core type it builds for.
//
// This header does not include PTO-ISA: include <pto/pto-inst.hpp> and write
// `using namespace pto;` before it, so set_flag, wait_flag, the PIPE_* and EVENT_ID*
// names are in scope here.
#pragma once

#ifndef __aicore__
#define __aicore__
#endif

static __aicore__ inline void pipe_sync() {
#if defined(__DAV_VEC__)
    set_flag(PIPE_MTE3, PIPE_S, EVENT_ID7);
    wait_flag(PIPE_MTE3, PIPE_S, EVENT_ID7);
#elif defined(__DAV_CUBE__)
    set_flag(PIPE_FIX, PIPE_S, EVENT_ID7);
    wait_flag(PIPE_FIX, PIPE_S, EVENT_ID7);
#else
#error "pipe_sync.h: build with __DAV_VEC__ (AIV) or __DAV_CUBE__ (AIC) defined, as KernelCompiler does"
#endif
}
