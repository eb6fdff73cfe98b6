/* demo_meson._core: sums every part (each TU's function) and dispatches kernels. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "demo_meson.h"

#define DM_SALT 0x6d6f64756c652e63ULL

static uint64_t core_checksum(void) {
    uint64_t sum = dm_mix64(DM_SALT);
    for (int level = 1; level <= 2; ++level) sum += dm_pick(level)();
    sum += dm_part_table() + dm_part_blend();
    sum += dm_part_a() + dm_part_b() + dm_part_c() + dm_part_d() + dm_part_e() + dm_part_f();
    return sum;
}

static PyObject *checksum(PyObject *self, PyObject *unused) {
    return PyLong_FromUnsignedLongLong(core_checksum());
}

static PyObject *kernel(PyObject *self, PyObject *arg) {
    long level = PyLong_AsLong(arg);
    if (level == -1 && PyErr_Occurred()) return NULL;
    return PyLong_FromUnsignedLongLong(dm_pick((int)level)());
}

static PyMethodDef methods[] = {
    {"checksum", checksum, METH_NOARGS, "Sum mod 2**64 of every part of _core."},
    {"kernel", kernel, METH_O, "The kernel for an instruction-set level (1 or 2)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_core", NULL, -1, methods};

PyMODINIT_FUNC PyInit__core(void) { return PyModule_Create(&module); }
