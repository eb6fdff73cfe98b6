// Host dispatcher: references every kernel TU's host checksum function through the
// generated registry. It is plain C++ (no Python, no CUDA runtime) so that it
// survives in every shard and makes an incomplete build fail at link time.
#include "demo_kernels/dispatch.h"

namespace demo_kernels {

#define DK_KERNEL(family, name) DK_HIDDEN std::uint64_t name##_checksum();
#include "generated/registry.inc"
#undef DK_KERNEL

namespace {

struct Entry {
  const char* family;
  const char* name;
  std::uint64_t (*checksum)();
};

const Entry kEntries[] = {
#define DK_KERNEL(family, name) {#family, #name, &name##_checksum},
#include "generated/registry.inc"
#undef DK_KERNEL
};

}  // namespace

std::uint64_t total_checksum() {
  std::uint64_t total = 0;  // unsigned: wraps mod 2**64
  for (const Entry& e : kEntries) total += e.checksum();
  return total;
}

std::size_t kernel_count() { return sizeof(kEntries) / sizeof(kEntries[0]); }

std::vector<std::pair<std::string, std::size_t>> family_counts() {
  std::vector<std::pair<std::string, std::size_t>> out;
  for (const Entry& e : kEntries) {
    if (out.empty() || out.back().first != e.family) out.emplace_back(e.family, 0);
    ++out.back().second;
  }
  return out;
}

std::vector<KernelInfo> kernel_table() {
  std::vector<KernelInfo> out;
  for (const Entry& e : kEntries) out.push_back({e.family, e.name, e.checksum()});
  return out;
}

}  // namespace demo_kernels
