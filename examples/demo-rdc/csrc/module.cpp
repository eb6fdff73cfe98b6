// Python module demo_rdc._core. Needs no GPU: answer() runs host code only; the
// kernels are referenced, never launched.
#include <pybind11/pybind11.h>

#include "demo_rdc/stages.h"

PYBIND11_MODULE(_core, m) {
  m.doc() = "demo-rdc: separable compilation with a cross-TU device call";
  m.def(
      "answer",
      [] {
        std::uint64_t total = 0;
        for (std::uint64_t value : {rdc::stage_alpha(), rdc::stage_beta(), rdc::stage_gamma(),
                                    rdc::stage_delta(), rdc::stage_epsilon()})
          total = rdc::combine_host(total, value);
        return total;
      },
      "combine_host folded over every stage's value (see tools/expected.py).");
  m.def("stage_count", [] { return 5; }, "Number of stage TUs linked in.");
}
