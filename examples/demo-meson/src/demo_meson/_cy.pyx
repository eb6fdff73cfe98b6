# cython: language_level=3
"""demo_meson._cy: a Cython module over a C helper TU."""

cdef extern from "demo_meson.h":
    unsigned long long dm_part_cyhelper()

CY_SALT = 0x637974686f6e2e2e


def value():
    """The helper's part plus this module's own salt, mod 2**64."""
    return (dm_part_cyhelper() + CY_SALT) & 0xFFFFFFFFFFFFFFFF
