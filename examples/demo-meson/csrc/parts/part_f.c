#include "demo_meson.h"

#define DM_SALT 0x706172745f61b99aULL

uint64_t dm_part_f(void) { return dm_mix64(DM_SALT); }
