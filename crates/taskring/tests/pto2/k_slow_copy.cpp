// out = in after a pause of `ms` milliseconds (scalar 0): a reader that is still
// running when the orchestration moves on.
#include <chrono>
#include <thread>

#include "kernel_args.h"

extern "C" void kernel_entry(int64_t *args) {
    const ChipTensor &in = tensor_arg(args, 0);
    const ChipTensor &out = tensor_arg(args, 1);
    std::this_thread::sleep_for(std::chrono::milliseconds(scalar_arg(args, 2, 0)));
    for (uint64_t i = 0; i < out.numel(); i++) {
        element<float>(out, i) = element<float>(in, i);
    }
}
