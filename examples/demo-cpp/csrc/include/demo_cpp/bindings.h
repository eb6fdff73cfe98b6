// Python bindings shared by demo_cpp._core and demo_cpp._extra: each module's
// module.cpp expands DC_DEFINE_MODULE once.
//
// Written against the CPython C API rather than pybind11's headers: parsing those
// cost ~8-15 s per module here, more than all 24 generated TUs together, and every
// cold build and every shard paid it twice. The build still goes through
// pybind11.setup_helpers.Pybind11Extension (its flags, its compiler probes and its
// include directory in the build environment), as packages built with it do.
#pragma once

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "demo_cpp/dispatch.h"

namespace demo_cpp {

inline PyObject* py_checksum(PyObject*, PyObject*) {
  return PyLong_FromUnsignedLongLong(total_checksum());
}

inline PyObject* py_tu_count(PyObject*, PyObject*) { return PyLong_FromSize_t(tu_count()); }

inline PyObject* py_tus(PyObject*, PyObject*) {
  const std::vector<TuInfo> rows = tu_table();
  PyObject* out = PyList_New(0);
  if (out == nullptr) return nullptr;
  for (const TuInfo& t : rows) {
    PyObject* row = Py_BuildValue("(ssK)", t.group.c_str(), t.name.c_str(),
                                  static_cast<unsigned long long>(t.checksum));
    if (row == nullptr || PyList_Append(out, row) != 0) {
      Py_XDECREF(row);
      Py_DECREF(out);
      return nullptr;
    }
    Py_DECREF(row);
  }
  return out;
}

inline PyMethodDef kMethods[] = {
    {"checksum", py_checksum, METH_NOARGS,
     "Sum mod 2**64 of this module's TU checksums (see tools/expected.py)."},
    {"tu_count", py_tu_count, METH_NOARGS, "Number of generated TUs linked into this module."},
    {"tus", py_tus, METH_NOARGS, "[(group, name, checksum)] for every TU of this module."},
    {nullptr, nullptr, 0, nullptr},
};

inline PyObject* create_module(PyModuleDef* def, const char* group) {
  PyObject* m = PyModule_Create(def);
  if (m == nullptr) return nullptr;
  if (PyModule_AddStringConstant(m, "GROUP", group) != 0) {
    Py_DECREF(m);
    return nullptr;
  }
  return m;
}

}  // namespace demo_cpp

// PyInit_<name> for module demo_cpp.<name> of the given group.
#define DC_DEFINE_MODULE(name, group, doc)                                              \
  static PyModuleDef name##_def = {PyModuleDef_HEAD_INIT, "demo_cpp." #name, doc, -1, \
                                   demo_cpp::kMethods, nullptr, nullptr, nullptr, nullptr}; \
  PyMODINIT_FUNC PyInit_##name() { return demo_cpp::create_module(&name##_def, group); }
