// Dispatcher API. Each extension module (demo_cpp._core, demo_cpp._extra) has its
// own dispatcher TU (csrc/<group>/dispatch.cpp) defining these for its group; the
// definitions are hidden, so the two modules never see each other's.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "demo_cpp/checksum.h"

namespace demo_cpp {

struct TuInfo {
  std::string group;
  std::string name;
  std::uint64_t checksum;
};

// Sum (mod 2**64) of this module's TU checksums; see tools/expected.py.
DC_HIDDEN std::uint64_t total_checksum();
DC_HIDDEN std::size_t tu_count();
DC_HIDDEN std::vector<TuInfo> tu_table();

// Shared table walker used by both dispatcher TUs.
struct Entry {
  const char* group;
  const char* name;
  std::uint64_t (*checksum)();
};

template <std::size_t N>
std::uint64_t sum_checksums(const Entry (&entries)[N]) {
  std::uint64_t total = 0;  // unsigned: wraps mod 2**64
  for (const Entry& e : entries) total += e.checksum();
  return total;
}

template <std::size_t N>
std::vector<TuInfo> table(const Entry (&entries)[N]) {
  std::vector<TuInfo> out;
  for (const Entry& e : entries) out.push_back({e.group, e.name, e.checksum()});
  return out;
}

}  // namespace demo_cpp
