// Shared by every generated TU and the dispatchers.
#pragma once

#include <cstdint>

// Every per-TU checksum function, and the dispatchers' declarations of them, carry
// hidden visibility. That is what makes a module with a missing TU object fail at
// link time: GNU ld refuses to leave a *hidden* symbol undefined in a shared object
// ("undefined reference to `demo_cpp::core_t00_checksum()'"), since no other
// library could ever provide it at run time. The Python C-API symbols keep default
// visibility and stay undefined, as every CPython extension module on Linux needs
// (so -Wl,--no-undefined, which would also reject them, is not used). See setup.py.
#define DC_HIDDEN __attribute__((visibility("hidden")))

namespace demo_cpp {

// splitmix64 finaliser; tools/expected.py mirrors it.
inline constexpr std::uint64_t mix64(std::uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

}  // namespace demo_cpp
