// B12's task kernel: does nothing (the builtin NOOP of the Rust and Python programs).

#include <cstdint>

extern "C" void kernel_entry(int64_t *args) { (void)args; }
