"""demo-cython: seven small Cython modules sharing common.pxd, and one generated big one."""

from demo_cython import _big, _m1, _m2, _m3, _m4, _m5, _m6, _m7

SMALL = (_m1, _m2, _m3, _m4, _m5, _m6, _m7)


def answer() -> int:
    """The number the package computes, from all eight modules."""
    return sum(module.value() for module in SMALL) * 1000003 + _big.total()
