/* Shared by every TU of demo-meson: the mixing function and hidden visibility.
 *
 * Every part is declared hidden, as numpy-style SIMD dispatch code declares its
 * kernels: a shard that stubs a part's TU then fails the extension's -shared link with
 * GNU ld's "relocation R_X86_64_PC32 against undefined hidden symbol" (dispatch.c
 * takes the kernels' addresses) or "hidden symbol ... isn't defined" (plain calls). */
#ifndef DEMO_MESON_H
#define DEMO_MESON_H

#include <stdint.h>

#define DM_HIDDEN __attribute__((visibility("hidden")))

#ifdef __cplusplus
extern "C" {
#endif

static inline uint64_t dm_mix64(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

typedef uint64_t (*dm_kernel)(void);

DM_HIDDEN uint64_t dm_kernel_level1(void);
DM_HIDDEN uint64_t dm_kernel_level2(void);
DM_HIDDEN dm_kernel dm_pick(int level);
DM_HIDDEN uint64_t dm_part_table(void);
DM_HIDDEN uint64_t dm_part_blend(void);
DM_HIDDEN uint64_t dm_part_a(void);
DM_HIDDEN uint64_t dm_part_b(void);
DM_HIDDEN uint64_t dm_part_c(void);
DM_HIDDEN uint64_t dm_part_d(void);
DM_HIDDEN uint64_t dm_part_e(void);
DM_HIDDEN uint64_t dm_part_f(void);
DM_HIDDEN uint64_t dm_part_cyhelper(void);

#ifdef __cplusplus
}
#endif

#endif
