// Shared by every kernel TU and the dispatcher (host code only uses it).
#pragma once

#include <cstdint>

// Every per-kernel checksum function, and the dispatcher's declarations of them,
// carry hidden visibility. That is what makes a build with a missing kernel object
// fail at link time: GNU ld refuses to leave a *hidden* symbol undefined in a
// shared object ("undefined reference to `demo_kernels::sm90_k00_checksum()'"),
// because no other library could ever provide it at run time. The Python C-API
// symbols keep default visibility and stay undefined as every CPython extension
// module on Linux needs. See CMakeLists.txt.
#define DK_HIDDEN __attribute__((visibility("hidden")))

namespace demo_kernels {

// splitmix64 finaliser; tools/expected.py mirrors it.
inline constexpr std::uint64_t mix64(std::uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

}  // namespace demo_kernels
