// Shared by every TU. Host functions carry hidden visibility: GNU ld never leaves a
// hidden symbol undefined in a shared object, so a module missing one TU's object (a
// stub in a shard) fails its host link with "undefined reference to", while a
// complete build links as usual. The Py* symbols stay undefined as they must.
#pragma once

#include <cstdint>

#define RDC_HIDDEN __attribute__((visibility("hidden")))

namespace rdc {

#ifdef __CUDACC__
// Defined in device_math.cu and called from every stage kernel: the cross-TU device
// call that needs separable compilation and a device link.
__device__ std::uint64_t combine(std::uint64_t a, std::uint64_t b);
#endif

// The host mirror of combine(), so the answer is computable without a GPU.
RDC_HIDDEN std::uint64_t combine_host(std::uint64_t a, std::uint64_t b);

RDC_HIDDEN std::uint64_t stage_alpha();
RDC_HIDDEN std::uint64_t stage_beta();
RDC_HIDDEN std::uint64_t stage_gamma();
RDC_HIDDEN std::uint64_t stage_delta();
RDC_HIDDEN std::uint64_t stage_epsilon();

}  // namespace rdc
