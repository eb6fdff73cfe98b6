/* A C TU linked into the Cython module. */
#include "demo_meson.h"

#define DM_SALT 0x637968656c706572ULL

uint64_t dm_part_cyhelper(void) { return dm_mix64(DM_SALT); }
