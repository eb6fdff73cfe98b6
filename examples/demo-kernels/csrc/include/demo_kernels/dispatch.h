// Host dispatcher API (csrc/dispatch.cpp), used by the Python module.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "demo_kernels/checksum.h"

namespace demo_kernels {

// Sum (mod 2**64) of every kernel TU's checksum; see tools/expected.py.
DK_HIDDEN std::uint64_t total_checksum();
DK_HIDDEN std::size_t kernel_count();
// (family, number of kernels) in registry order.
DK_HIDDEN std::vector<std::pair<std::string, std::size_t>> family_counts();
// (family, kernel name, checksum) for every kernel, in registry order.
struct KernelInfo {
  std::string family;
  std::string name;
  std::uint64_t checksum;
};
DK_HIDDEN std::vector<KernelInfo> kernel_table();

}  // namespace demo_kernels
