// Python bindings shared by demo_cpp._core and demo_cpp._extra (each module's
// module.cpp calls define_bindings once).
#pragma once

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "demo_cpp/dispatch.h"

namespace demo_cpp {

inline void define_bindings(pybind11::module_& m, const char* group) {
  m.attr("GROUP") = group;
  m.def("checksum", &total_checksum,
        "Sum mod 2**64 of this module's TU checksums (see tools/expected.py).");
  m.def("tu_count", &tu_count, "Number of generated TUs linked into this module.");
  m.def(
      "tus",
      [] {
        pybind11::list out;
        for (const TuInfo& t : tu_table()) out.append(pybind11::make_tuple(t.group, t.name, t.checksum));
        return out;
      },
      "[(group, name, checksum)] for every TU of this module.");
}

}  // namespace demo_cpp
