#include <pybind11/pybind11.h>

int floor_answer();

PYBIND11_MODULE(_core, m) {
  m.def("answer", &floor_answer, "42, from the kernel TU's host function");
}
