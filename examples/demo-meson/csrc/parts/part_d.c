#include "demo_meson.h"

#define DM_SALT 0x706172745f617bbcULL

uint64_t dm_part_d(void) { return dm_mix64(DM_SALT); }
