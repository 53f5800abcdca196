// Kernel ids the test orchestrations submit; tests/pto2_programs.rs binds the same ids
// to the kernels of this directory when it builds each ChipCallable.
#pragma once

#define K_ADD 0         // k_add.cpp (AIV)
#define K_MUL 1         // k_mul.cpp (AIC)
#define K_ADD_SCALAR 2  // k_add_scalar.cpp (AIV)
#define K_SPMD_FILL 3   // k_spmd_fill.cpp (AIV)
#define K_MIXED_AIC 4   // k_mixed_aic.cpp (AIC part of a mixed task)
#define K_MIXED_AIV0 5  // k_mixed_aiv.cpp (AIV0 part)
#define K_MIXED_AIV1 6  // k_mixed_aiv.cpp (AIV1 part)
#define K_ECHO 7        // k_echo.cpp (AIV)
#define K_CRASH 8       // k_crash.cpp (AIV)
#define K_SLOW_COPY 9   // k_slow_copy.cpp (AIV)
