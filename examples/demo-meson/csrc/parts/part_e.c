#include "demo_meson.h"

#define DM_SALT 0x706172745f619aabULL

uint64_t dm_part_e(void) { return dm_mix64(DM_SALT); }
