// Stage beta: a kernel that calls rdc::combine() from another TU (device link
// needed), and the host value tools/expected.py predicts from RDC_WEIGHT.
#include "demo_rdc/stages.h"

#define RDC_WEIGHT 5

namespace rdc {

__global__ void beta_kernel(std::uint64_t* out, int n) {
  const int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (i < n) out[i] = combine(static_cast<std::uint64_t>(i), RDC_WEIGHT);
}

std::uint64_t stage_beta() {
  // Reference the kernel's launch stub so it stays in the object; never launched.
  const void* volatile kernel = reinterpret_cast<const void*>(&beta_kernel);
  return combine_host(RDC_WEIGHT, kernel != nullptr ? 1u : 0u);
}

}  // namespace rdc
