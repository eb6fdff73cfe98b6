#include "demo_meson.h"

#define DM_SALT 0x706172745f613ddeULL

uint64_t dm_part_b(void) { return dm_mix64(DM_SALT); }
