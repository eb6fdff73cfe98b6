// Python module demo_kernels._core. Needs no GPU: it only calls host functions
// (the kernels are referenced, never launched).
//
// Written against the CPython C API: pybind11's headers cost ~10 s to parse here, more
// than several kernel TUs, in every cold build and in the shard that owns this file.
// CMake still builds it with pybind11_add_module (its flags, its visibility, and the
// include path into the build environment), as pybind11 packages are built.
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "demo_kernels/dispatch.h"

namespace {

PyObject* checksum(PyObject*, PyObject*) {
  return PyLong_FromUnsignedLongLong(demo_kernels::total_checksum());
}

PyObject* kernel_count(PyObject*, PyObject*) {
  return PyLong_FromSize_t(demo_kernels::kernel_count());
}

PyObject* families(PyObject*, PyObject*) {
  PyObject* out = PyDict_New();  // insertion order is registry order
  if (out == nullptr) return nullptr;
  for (const auto& [family, count] : demo_kernels::family_counts()) {
    PyObject* value = PyLong_FromSize_t(count);
    if (value == nullptr || PyDict_SetItemString(out, family.c_str(), value) != 0) {
      Py_XDECREF(value);
      Py_DECREF(out);
      return nullptr;
    }
    Py_DECREF(value);
  }
  return out;
}

PyObject* kernels(PyObject*, PyObject*) {
  PyObject* out = PyList_New(0);
  if (out == nullptr) return nullptr;
  for (const auto& k : demo_kernels::kernel_table()) {
    PyObject* row = Py_BuildValue("(ssK)", k.family.c_str(), k.name.c_str(),
                                  static_cast<unsigned long long>(k.checksum));
    if (row == nullptr || PyList_Append(out, row) != 0) {
      Py_XDECREF(row);
      Py_DECREF(out);
      return nullptr;
    }
    Py_DECREF(row);
  }
  return out;
}

PyMethodDef methods[] = {
    {"checksum", checksum, METH_NOARGS,
     "Sum mod 2**64 of every kernel TU's host checksum (see tools/expected.py)."},
    {"kernel_count", kernel_count, METH_NOARGS, "Number of kernel TUs linked in."},
    {"families", families, METH_NOARGS, "{family: number of kernels}, in registry order."},
    {"kernels", kernels, METH_NOARGS, "[(family, name, checksum)] for every kernel TU."},
    {nullptr, nullptr, 0, nullptr},
};

PyModuleDef module = {PyModuleDef_HEAD_INIT, "demo_kernels._core",
                      "demo-kernels: generated CUDA kernel TUs and a host dispatcher", -1,
                      methods, nullptr, nullptr, nullptr, nullptr};

}  // namespace

PyMODINIT_FUNC PyInit__core() { return PyModule_Create(&module); }
