"""The answer demo_cython.answer() must give, computed in Python from the sources."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path


def _mix_constants(tree: Path) -> tuple[int, int]:
    text = (tree / "src" / "demo_cython" / "common.pxd").read_text()
    match = re.search(r"return \(a \* (\d+) \+ b\) % (\d+)", text)
    assert match is not None, "common.pxd: mix() changed shape; update tools/expected.py"
    return int(match.group(1)), int(match.group(2))


def _weight(tree: Path) -> int:
    text = (tree / "src" / "demo_cython" / "weights.pxd").read_text()
    match = re.search(r"return (\d+)", text)
    assert match is not None, "weights.pxd: weight() changed shape; update tools/expected.py"
    return int(match.group(1))


def expected_checksum(tree: Path) -> int:
    factor, modulus = _mix_constants(tree)
    small = 0
    for module in range(1, 8):
        acc = module
        for i in range(1000):
            acc = (acc * factor + i * module) % modulus
        small += acc * (_weight(tree) if module == 7 else 1)
    spec = importlib.util.spec_from_file_location("gen_big", tree / "tools" / "gen_big.py")
    assert spec is not None and spec.loader is not None
    gen_big = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen_big)
    return small * 1000003 + gen_big.total()
