#!/usr/bin/env python3
"""Predict demo_meson.checksum() from the sources (stdlib only).

All arithmetic is mod 2**64; mix64 is dm_mix64 in csrc/demo_meson.h (the splitmix64
finaliser). With salt(f) the `#define DM_SALT` of file f:

    checksum() = sum of mix64(salt(f))       for every csrc/**/*.c and *.cpp but kernel.c
                                             and dispatch.c (it has no part of its own:
                                             the kernels are reached through it)
               + mix64(salt(kernel.c) ^ 1)   kernel.c compiled with -DLEVEL=1
               + mix64(salt(kernel.c) ^ 2)   and again with -DLEVEL=2
               + mix64(SALT of tools/gen_table.py)   the generated table.c
               + CY_SALT of src/demo_meson/_cy.pyx   the Cython module's own part

    python tools/expected.py [ROOT]    # prints the expected checksum
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

MASK = (1 << 64) - 1
_SALT = re.compile(r"^\s*#\s*define\s+DM_SALT\s+(0[xX][0-9a-fA-F]+|\d+)[uUlL]*\s*$", re.M)
_PY_SALT = re.compile(r"^(?:SALT|CY_SALT) = (0[xX][0-9a-fA-F]+|\d+)\s*$", re.M)


def mix64(z: int) -> int:
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
    return z ^ (z >> 31)


def _salt(path: Path, pattern: re.Pattern[str] = _SALT) -> int:
    found = pattern.findall(path.read_text())
    if len(found) != 1:
        raise ValueError(f"{path}: expected one salt definition, found {len(found)}")
    return int(found[0], 0)


def expected_checksum(root: Path) -> int:
    """Expected demo_meson.checksum() for the package tree at root."""
    root = Path(root)
    sources = sorted([*root.glob("csrc/**/*.c"), *root.glob("csrc/**/*.cpp")])
    total = 0
    for source in sources:
        if source.name == "dispatch.c":
            continue
        if source.name == "kernel.c":
            total += mix64(_salt(source) ^ 1) + mix64(_salt(source) ^ 2)
        else:
            total += mix64(_salt(source))
    total += mix64(_salt(root / "tools" / "gen_table.py", _PY_SALT))
    total += _salt(root / "src" / "demo_meson" / "_cy.pyx", _PY_SALT)
    return total & MASK


if __name__ == "__main__":
    print(expected_checksum(Path(sys.argv[1] if len(sys.argv) > 1 else Path(__file__).parents[1])))
