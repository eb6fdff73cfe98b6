#!/usr/bin/env python3
"""Predict demo_rdc.answer() from the stage sources (stdlib only).

    stage(f) = mix(RDC_WEIGHT of f, 1)      (1: the kernel reference is never null)
    answer() = mix(...mix(mix(0, stage(alpha)), stage(beta))..., stage(epsilon))

with mix() as in csrc/device_math.cu, mod 2**64, stages in module.cpp's order.

    python tools/expected.py [ROOT]    # prints the expected answer
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

MASK = (1 << 64) - 1
ORDER = ("alpha", "beta", "gamma", "delta", "epsilon")
_WEIGHT = re.compile(r"^\s*#\s*define\s+RDC_WEIGHT\s+(\d+)", re.MULTILINE)


def mix(a: int, b: int) -> int:
    z = (a * 0x9E3779B97F4A7C15 + b) & MASK
    z = ((z ^ (z >> 31)) * 0xBF58476D1CE4E5B9) & MASK
    return z ^ (z >> 29)


def expected_checksum(root: Path) -> int:
    total = 0
    for stage in ORDER:
        match = _WEIGHT.search((root / "csrc" / "stages" / f"{stage}.cu").read_text())
        if match is None:
            raise ValueError(f"{stage}.cu has no RDC_WEIGHT")
        total = mix(total, mix(int(match[1]), 1))
    return total


if __name__ == "__main__":
    print(expected_checksum(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).parents[1]))
