// A PTO-ISA vector kernel over bf16 data: out32 = float(a) + float(b) and out = bf16(out32),
// rounded to nearest even. a, b and out are bf16 [16, 16], out32 is f32 [16, 16]. Built
// with a compiler whose bf16 is not real, PTO-ISA takes bf16 for fp16 and every number
// here comes out wrong.
#include <cstdint>
#include <pto/pto-inst.hpp>

#include "tensor.h"

using namespace pto;

#include "pipe_sync.h"

namespace {

constexpr int kRows = 16;
constexpr int kCols = 16;

template <typename T>
T *data_of(int64_t arg) {
    auto *t = reinterpret_cast<ChipTensor *>(static_cast<uintptr_t>(arg));
    return reinterpret_cast<T *>(static_cast<uintptr_t>(t->buffer.addr)) + t->start_offset;
}

}  // namespace

extern "C" void kernel_entry(int64_t *args) {
    using Bf16Global = GlobalTensor<bfloat16_t, Shape<1, 1, 1, kRows, kCols>, Stride<1, 1, 1, kCols, 1>>;
    using F32Global = GlobalTensor<float, Shape<1, 1, 1, kRows, kCols>, Stride<1, 1, 1, kCols, 1>>;
    using Bf16Tile = Tile<TileType::Vec, bfloat16_t, kRows, kCols, BLayout::RowMajor, kRows, kCols>;
    using F32Tile = Tile<TileType::Vec, float, kRows, kCols, BLayout::RowMajor, kRows, kCols>;

    Bf16Tile a16, b16, sum16;
    F32Tile a32, b32, sum32;
    TASSIGN(a16, 0x0);
    TASSIGN(b16, 0x1000);
    TASSIGN(sum16, 0x2000);
    TASSIGN(a32, 0x4000);
    TASSIGN(b32, 0x8000);
    TASSIGN(sum32, 0xC000);

    Bf16Global a_gm(data_of<bfloat16_t>(args[0]));
    Bf16Global b_gm(data_of<bfloat16_t>(args[1]));
    Bf16Global out_gm(data_of<bfloat16_t>(args[2]));
    F32Global out32_gm(data_of<float>(args[3]));

    TLOAD(a16, a_gm);
    TLOAD(b16, b_gm);
    set_flag(PIPE_MTE2, PIPE_V, EVENT_ID0);
    wait_flag(PIPE_MTE2, PIPE_V, EVENT_ID0);
    TCVT(a32, a16, RoundMode::CAST_NONE);
    TCVT(b32, b16, RoundMode::CAST_NONE);
    TADD(sum32, a32, b32);
    TCVT(sum16, sum32, RoundMode::CAST_RINT);
    set_flag(PIPE_V, PIPE_MTE3, EVENT_ID0);
    wait_flag(PIPE_V, PIPE_MTE3, EVENT_ID0);
    TSTORE(out_gm, sum16);
    TSTORE(out32_gm, sum32);

    pipe_sync();
}
