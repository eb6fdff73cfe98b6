// Dispatcher of demo_cpp._core: references every TU of group "core" through the
// generated registry. Plain C++ (no Python), so it survives in every shard and
// makes an incomplete module fail at link time.
#include "demo_cpp/dispatch.h"

namespace demo_cpp {

#define DC_TU(group, name) DC_HIDDEN std::uint64_t name##_checksum();
#include "../generated/core_registry.inc"
#undef DC_TU

namespace {

const Entry kEntries[] = {
#define DC_TU(group, name) {#group, #name, &name##_checksum},
#include "../generated/core_registry.inc"
#undef DC_TU
};

}  // namespace

std::uint64_t total_checksum() { return sum_checksums(kEntries); }
std::size_t tu_count() { return sizeof(kEntries) / sizeof(kEntries[0]); }
std::vector<TuInfo> tu_table() { return table(kEntries); }

}  // namespace demo_cpp
