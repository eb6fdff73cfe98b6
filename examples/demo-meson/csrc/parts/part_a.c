#include "demo_meson.h"

#define DM_SALT 0x706172745f611eefULL

uint64_t dm_part_a(void) { return dm_mix64(DM_SALT); }
