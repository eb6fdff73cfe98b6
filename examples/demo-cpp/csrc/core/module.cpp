// Python module demo_cpp._core.
#include "demo_cpp/bindings.h"

PYBIND11_MODULE(_core, m) {
  m.doc() = "demo-cpp: generated TUs of group 'core' behind a dispatcher";
  demo_cpp::define_bindings(m, "core");
}
