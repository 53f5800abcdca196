// taskring's intrinsic.h: the SPMD context a kernel reads from its args array under
// Simpler's PTO2 kernel ABI — get_block_idx / get_block_num (per dispatch, LocalContext)
// and get_sub_block_id (AIV lane of a cluster, GlobalContext). The runtime stores the
// contexts' addresses at fixed slots past the tensors and scalars.
#pragma once

#include <stdint.h>

#include "pto_task_id.h"

#ifndef __gm__
#define __gm__
#endif

#ifndef __aicore__
#define __aicore__
#endif

#pragma GCC visibility push(hidden)

static constexpr int32_t PTO2_EXT_PARAMS_COUNT = 2;
static constexpr int32_t SPMD_LOCAL_CONTEXT_INDEX = 48;
static constexpr int32_t SPMD_GLOBAL_CONTEXT_INDEX = 49;
static constexpr int32_t PAYLOAD_LOCAL_CONTEXT_INDEX = SPMD_LOCAL_CONTEXT_INDEX;
static constexpr int32_t PAYLOAD_GLOBAL_CONTEXT_INDEX = SPMD_GLOBAL_CONTEXT_INDEX;

#ifndef PLATFORM_COMMON_DMA_WORKSPACE_H_
#define PLATFORM_COMMON_DMA_WORKSPACE_H_
enum DmaWorkspaceKind {
    DMA_WORKSPACE_SDMA = 0,
    DMA_WORKSPACE_URMA = 1,
    DMA_WORKSPACE_KIND_COUNT = 2,
};
#endif

// Per core: sub_block_id is 0 for AIC and AIV0, 1 for AIV1. taskring has no async DMA
// engines; dma_workspace stays zero.
struct GlobalContext {
    int32_t sub_block_id;
    uint64_t dma_workspace[DMA_WORKSPACE_KIND_COUNT];
};

// Per dispatch: this block's index in [0, block_num).
struct LocalContext {
    int32_t block_idx;
    int32_t block_num;
};

static __aicore__ inline int32_t get_sub_block_id(__gm__ int64_t *args) {
    const auto *g = reinterpret_cast<__gm__ const GlobalContext *>(static_cast<uintptr_t>(args[SPMD_GLOBAL_CONTEXT_INDEX]));
    return g->sub_block_id;
}

// The workspace address of one DMA engine kind; nullptr when there is none.
static __aicore__ inline __gm__ uint8_t *get_dma_workspace(__gm__ int64_t *args, int kind) {
    if (kind < 0 || kind >= DMA_WORKSPACE_KIND_COUNT) return nullptr;
    const auto *g = reinterpret_cast<__gm__ const GlobalContext *>(static_cast<uintptr_t>(args[SPMD_GLOBAL_CONTEXT_INDEX]));
    return reinterpret_cast<__gm__ uint8_t *>(static_cast<uintptr_t>(g->dma_workspace[kind]));
}

static __aicore__ inline int32_t get_block_idx(__gm__ int64_t *args) {
    const auto *l = reinterpret_cast<__gm__ const LocalContext *>(static_cast<uintptr_t>(args[SPMD_LOCAL_CONTEXT_INDEX]));
    return l->block_idx;
}

static __aicore__ inline int32_t get_block_num(__gm__ int64_t *args) {
    const auto *l = reinterpret_cast<__gm__ const LocalContext *>(static_cast<uintptr_t>(args[SPMD_LOCAL_CONTEXT_INDEX]));
    return l->block_num;
}

#pragma GCC visibility pop
