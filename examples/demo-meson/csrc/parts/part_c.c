#include "demo_meson.h"

#define DM_SALT 0x706172745f615ccdULL

uint64_t dm_part_c(void) { return dm_mix64(DM_SALT); }
