/* Runtime dispatch: the kernel for a level, by address (a PC-relative reference to a
 * hidden symbol, which is what makes GNU ld's relocation error when it is stubbed). */
#include "demo_meson.h"

dm_kernel dm_pick(int level) { return level >= 2 ? dm_kernel_level2 : dm_kernel_level1; }
