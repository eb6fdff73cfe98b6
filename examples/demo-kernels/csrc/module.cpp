// Python module demo_kernels._core. Needs no GPU: it only calls host functions
// (the kernels are referenced, never launched).
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "demo_kernels/dispatch.h"

namespace py = pybind11;

PYBIND11_MODULE(_core, m) {
  m.doc() = "demo-kernels: generated CUDA kernel TUs and a host dispatcher";
  m.def("checksum", &demo_kernels::total_checksum,
        "Sum mod 2**64 of every kernel TU's host checksum (see tools/expected.py).");
  m.def("kernel_count", &demo_kernels::kernel_count, "Number of kernel TUs linked in.");
  m.def(
      "families",
      [] {
        py::dict out;
        for (const auto& [family, count] : demo_kernels::family_counts()) out[py::str(family)] = count;
        return out;
      },
      "{family: number of kernels}, in registry order.");
  m.def(
      "kernels",
      [] {
        py::list out;
        for (const auto& k : demo_kernels::kernel_table())
          out.append(py::make_tuple(k.family, k.name, k.checksum));
        return out;
      },
      "[(family, name, checksum)] for every kernel TU.");
}
