// Compile test for include/pto2's kernel side: a kernel_entry that reads its tensors
// (ChipTensor addresses), a scalar and the SPMD context, with tensor.h, intrinsic.h and
// the platform constants only.
#include <stdint.h>

#include "common/platform_config.h"
#include "intrinsic.h"
#include "tensor.h"

extern "C" __attribute__((visibility("default"))) __aicore__ void kernel_entry(__gm__ int64_t *args) {
    const ChipTensor *src = reinterpret_cast<const ChipTensor *>(args[0]);
    ChipTensor *dst = reinterpret_cast<ChipTensor *>(args[1]);
    const float scale = from_u64<float>(static_cast<uint64_t>(args[2]));
    const int32_t block = get_block_idx(args);
    const int32_t blocks = get_block_num(args);
    const int32_t lane = get_sub_block_id(args);
    (void)get_dma_workspace(args, DMA_WORKSPACE_SDMA);
    static_assert(PLATFORM_PROF_SYS_CNT_FREQ == 50000000);
    (void)cycles_to_us(0);
    static_assert(SPMD_LOCAL_CONTEXT_INDEX == 48 && SPMD_GLOBAL_CONTEXT_INDEX == 49 && PTO2_EXT_PARAMS_COUNT == 2);
    const uint64_t n = src->numel();
    const uint64_t per = (n + static_cast<uint64_t>(blocks) - 1) / static_cast<uint64_t>(blocks);
    const float *in = src->data_as<float>() + src->start_offset;
    float *out = dst->data_as<float>() + dst->start_offset;
    for (uint64_t i = per * static_cast<uint64_t>(block); i < n && i < per * static_cast<uint64_t>(block + 1); ++i) {
        out[i] = in[i] * scale + static_cast<float>(lane);
    }
}
