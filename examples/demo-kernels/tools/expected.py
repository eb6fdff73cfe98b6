#!/usr/bin/env python3
"""Predict demo_kernels.checksum() from the generated sources (stdlib only).

Formula (all arithmetic mod 2**64; mix64 is the splitmix64 finaliser in
csrc/include/demo_kernels/checksum.h):

    tu(f)      = mix64(mix64(mix64(mix64(DK_SEED ^ DK_TILE_M) ^ DK_TILE_N)
                             ^ DK_TILE_K) ^ DK_HOST_SALT) + 1
    checksum() = sum of tu(f) over every csrc/generated/**/*.cu file f

The constants are read from each file's `#define DK_<NAME> <value>` lines, so an
edited constant (e.g. DK_HOST_SALT in the host-only block) changes the prediction
exactly as it changes the built wheel. The "+ 1" is the kernel reference each TU
folds in (a kernel's address is never null).

    python tools/expected.py [ROOT]    # prints the expected checksum
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

MASK = (1 << 64) - 1
KEYS = ("SEED", "TILE_M", "TILE_N", "TILE_K", "HOST_SALT")
_DEFINE = re.compile(r"^\s*#\s*define\s+DK_(\w+)\s+(\S+)", re.MULTILINE)
_INT = re.compile(r"^(0[xX][0-9a-fA-F]+|\d+)[uUlL]*$")


def mix64(z: int) -> int:
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
    return z ^ (z >> 31)


def kernel_sources(root: Path) -> list[Path]:
    return sorted((Path(root) / "csrc" / "generated").rglob("*.cu"))


def tu_constants(path: Path) -> dict[str, int]:
    found: dict[str, int] = {}
    for key, raw in _DEFINE.findall(path.read_text()):
        if key in KEYS:
            m = _INT.match(raw)
            if m is None:
                raise ValueError(f"{path}: DK_{key} is not an integer literal: {raw!r}")
            found[key] = int(m.group(1), 0)
    missing = [k for k in KEYS if k not in found]
    if missing:
        raise ValueError(f"{path}: missing #define DK_{', DK_'.join(missing)}")
    return found


def tu_checksum(c: dict[str, int]) -> int:
    z = c["SEED"] & MASK
    for key in ("TILE_M", "TILE_N", "TILE_K", "HOST_SALT"):
        z = mix64(z ^ (c[key] & MASK))
    return (z + 1) & MASK


def expected_checksum(root: Path) -> int:
    """Expected demo_kernels.checksum() for the package tree at root."""
    sources = kernel_sources(root)
    if not sources:
        raise ValueError(f"no kernel sources under {Path(root) / 'csrc' / 'generated'}")
    return sum(tu_checksum(tu_constants(p)) for p in sources) & MASK


def expected_kernel_count(root: Path) -> int:
    return len(kernel_sources(root))


def expected_families(root: Path) -> dict[str, int]:
    """{family directory: number of .cu files}, sorted by family."""
    counts: dict[str, int] = {}
    base = Path(root) / "csrc" / "generated"
    for p in kernel_sources(root):
        family = p.relative_to(base).parts[0]
        counts[family] = counts.get(family, 0) + 1
    return dict(sorted(counts.items()))


if __name__ == "__main__":
    root = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parent.parent
    print(expected_checksum(root))
