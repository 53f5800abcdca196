/*
 * common/platform_config.h -- taskring's header for the a2a3 platform constants that
 * kernel sources read. The simulated chip's system counter is taken to tick at the
 * a2a3 rate, 50 MHz; cycles_to_us converts its readings.
 */
#pragma once

#include <stdint.h>

constexpr uint64_t PLATFORM_PROF_SYS_CNT_FREQ = 50000000;

inline double cycles_to_us(uint64_t cycles) {
    return static_cast<double>(cycles) * 1000000.0 / static_cast<double>(PLATFORM_PROF_SYS_CNT_FREQ);
}
