// Crashes its process: stores through the address given as its only scalar (the tests
// pass 0, a segmentation fault). The address comes from the arguments so the compiler
// cannot turn the store into anything else.
#include "kernel_args.h"

extern "C" void kernel_entry(int64_t *args) {
    volatile int32_t *p = reinterpret_cast<volatile int32_t *>(static_cast<uintptr_t>(scalar_arg(args, 0, 0)));
    *p = 1;
}
