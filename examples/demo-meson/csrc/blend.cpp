// The C++ TU.
#include <array>
#include <numeric>

#include "demo_meson.h"

#define DM_SALT 0x626c656e642b2b31ULL

extern "C" uint64_t dm_part_blend(void) {
    std::array<uint64_t, 1> parts{dm_mix64(DM_SALT)};
    return std::accumulate(parts.begin(), parts.end(), uint64_t{0});
}
