/* One source, compiled twice (meson.build: -DLEVEL=1 and -DLEVEL=2 into two static
 * libraries), as SIMD code is compiled once per instruction-set level. */
#include "demo_meson.h"

#ifndef LEVEL
#error "compile kernel.c with -DLEVEL=1 or -DLEVEL=2"
#endif
#define DM_SALT 0x6b65726e656c3031ULL

#define DM_CONCAT(a, b) a##b
#define DM_KERNEL(level) DM_CONCAT(dm_kernel_level, level)

uint64_t DM_KERNEL(LEVEL)(void) { return dm_mix64(DM_SALT ^ (uint64_t)LEVEL); }
