// Python module demo_rdc._core. Needs no GPU: answer() runs host code only; the
// kernels are referenced, never launched.
//
// Written against the CPython C API (pybind11's headers cost ~10 s to parse, more than
// the stage TUs); CMake still builds it with pybind11_add_module.
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <cstdint>
#include <initializer_list>

#include "demo_rdc/stages.h"

namespace {

PyObject* answer(PyObject*, PyObject*) {
  std::uint64_t total = 0;
  for (std::uint64_t value : {rdc::stage_alpha(), rdc::stage_beta(), rdc::stage_gamma(),
                              rdc::stage_delta(), rdc::stage_epsilon()})
    total = rdc::combine_host(total, value);
  return PyLong_FromUnsignedLongLong(total);
}

PyObject* stage_count(PyObject*, PyObject*) { return PyLong_FromLong(5); }

PyMethodDef methods[] = {
    {"answer", answer, METH_NOARGS,
     "combine_host folded over every stage's value (see tools/expected.py)."},
    {"stage_count", stage_count, METH_NOARGS, "Number of stage TUs linked in."},
    {nullptr, nullptr, 0, nullptr},
};

PyModuleDef module = {PyModuleDef_HEAD_INIT, "demo_rdc._core",
                      "demo-rdc: separable compilation with a cross-TU device call", -1, methods,
                      nullptr, nullptr, nullptr, nullptr};

}  // namespace

PyMODINIT_FUNC PyInit__core() { return PyModule_Create(&module); }
