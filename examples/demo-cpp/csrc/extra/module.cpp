// Python module demo_cpp._extra.
#include "demo_cpp/bindings.h"

PYBIND11_MODULE(_extra, m) {
  m.doc() = "demo-cpp: generated TUs of group 'extra' behind a dispatcher";
  demo_cpp::define_bindings(m, "extra");
}
