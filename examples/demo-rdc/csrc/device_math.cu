// combine(): the __device__ function every stage kernel calls across TUs, and its
// host mirror. tools/expected.py mirrors combine_host().
#include "demo_rdc/stages.h"

namespace rdc {

__host__ __device__ static std::uint64_t mix(std::uint64_t a, std::uint64_t b) {
  std::uint64_t z = a * 0x9e3779b97f4a7c15ULL + b;
  z = (z ^ (z >> 31)) * 0xbf58476d1ce4e5b9ULL;
  return z ^ (z >> 29);
}

__device__ std::uint64_t combine(std::uint64_t a, std::uint64_t b) { return mix(a, b); }

std::uint64_t combine_host(std::uint64_t a, std::uint64_t b) { return mix(a, b); }

}  // namespace rdc
