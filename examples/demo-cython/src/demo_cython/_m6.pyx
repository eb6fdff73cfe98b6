# cython: language_level=3
from demo_cython.common cimport mix

MODULE = 6


def value(int rounds=1000):
    cdef long acc = MODULE
    cdef int i
    for i in range(rounds):
        acc = mix(acc, i * MODULE)
    return acc
