"""Comparing two wheels of the same cell: file lists, exported symbols, bytes.

Debug information records the directory each object was compiled in (DWARF
``DW_AT_comp_dir``), and shard jobs compile in other trees than an unsharded build: a
link job's cache hit carries the directory of the shard that stored it. GNU ld computes
the ``.note.gnu.build-id`` hash over the whole output, debug sections included, so the
build ID differs as well. Extension modules equal once their debug sections and build-ID
note are removed form a second category.

nvcc makes up names per compile (temp names, module ids that hash the source's absolute
path) and writes them into symbols, the fatbin (compressed, for PTX) and ``.rodata``; in a
shared object ld then orders the symbol hash table, PLT and GOT by those names, and the
build id hashes it all. :mod:`wheelkiln.wheels.nvcc_names` blanks them; files equal once
blanked (bytes, or for linked ELF files section by section, symbols and relocations as
listings and code as disassembly) form their own category, not a failure; so do linked
files whose later sections moved because a compressed fatbin entry has another size.
Every other difference stays a difference.
"""

from __future__ import annotations

import hashlib
import re
import tempfile
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from wheelkiln import run
from wheelkiln.errors import UsageError
from wheelkiln.wheels.facts import is_extension
from wheelkiln.wheels.nvcc_names import blank_symbol, normalize, same_modulo_names

DERIVED = re.compile(r"\.dist-info/RECORD$")
BUILD_ID_SECTION = ".note.gnu.build-id"


@dataclass
class WheelComparison:
    only_in_a: list[str] = field(default_factory=list)
    only_in_b: list[str] = field(default_factory=list)
    identical: list[str] = field(default_factory=list)
    nvcc_temp_names_only: list[str] = field(default_factory=list)
    debug_info_only: list[str] = field(default_factory=list)
    differing: list[str] = field(default_factory=list)
    symbol_differences: dict[str, dict[str, list[str]]] = field(default_factory=dict)
    symbols_checked: int = 0

    @property
    def equivalent(self) -> bool:
        return not (self.only_in_a or self.only_in_b or self.differing or self.symbol_differences)

    def as_dict(self) -> dict[str, Any]:
        return {
            "equivalent": self.equivalent,
            "only_in_a": self.only_in_a,
            "only_in_b": self.only_in_b,
            "identical": len(self.identical),
            "nvcc_temp_names_only": self.nvcc_temp_names_only,
            "debug_info_only": self.debug_info_only,
            "differing": self.differing,
            "symbol_differences": self.symbol_differences,
            "extension_modules_checked": self.symbols_checked,
        }


def exported_symbols(data: bytes) -> set[str]:
    """Defined dynamic symbols of a shared object (``nm -D --defined-only``)."""
    with tempfile.NamedTemporaryFile(suffix=".so") as handle:
        handle.write(data)
        handle.flush()
        output = run.run(["nm", "-D", "--defined-only", "--format=posix", handle.name]).output
    return {line.split()[0] for line in output.splitlines() if line.strip()}


def _without_debug_info(data: bytes) -> bytes:
    """The object without its debug sections and without its build ID, which GNU ld
    hashes from the whole output, debug sections included (both sides lose the same
    note, so the remaining bytes still compare code, data and layout)."""
    with tempfile.TemporaryDirectory(prefix="kiln-verify-") as tmp:
        source, stripped = Path(tmp) / "in.so", Path(tmp) / "out.so"
        source.write_bytes(data)
        run.run(
            [
                "strip",
                "--strip-debug",
                f"--remove-section={BUILD_ID_SECTION}",
                "-o",
                str(stripped),
                str(source),
            ]
        )
        return stripped.read_bytes()


def _classify(name: str, a: bytes, b: bytes, result: WheelComparison) -> None:
    """File one common file under identical, nvcc names only, debug info only, or differing."""
    if a == b:
        result.identical.append(name)
        return
    if normalize(a).same_as(normalize(b)):
        result.nvcc_temp_names_only.append(name)
        return
    if is_extension(name):
        # Debug info names the directory each object was compiled in (shards and
        # unsharded builds compile in different trees), and the build ID hashes it.
        stripped_a, stripped_b = _without_debug_info(a), _without_debug_info(b)
        if stripped_a == stripped_b:
            result.debug_info_only.append(name)
            return
        if normalize(stripped_a).same_as(normalize(stripped_b)) or same_modulo_names(
            stripped_a, stripped_b
        ):
            result.nvcc_temp_names_only.append(name)
            return
    result.differing.append(name)


def _read(path: Path) -> dict[str, bytes]:
    if not path.is_file():
        raise UsageError(f"{path}: no such wheel.", hint="Give the paths of two .whl files.")
    try:
        with zipfile.ZipFile(path) as wheel:
            return {name: wheel.read(name) for name in wheel.namelist() if not name.endswith("/")}
    except zipfile.BadZipFile:
        raise UsageError(
            f"{path}: not a wheel (not a zip archive).", hint="Give a .whl file."
        ) from None


def compare_wheels(wheel_a: Path, wheel_b: Path) -> WheelComparison:
    a, b = _read(wheel_a), _read(wheel_b)
    result = WheelComparison(only_in_a=sorted(set(a) - set(b)), only_in_b=sorted(set(b) - set(a)))
    for name in sorted(set(a) & set(b)):
        if DERIVED.search(name):
            continue
        _classify(name, a[name], b[name], result)
        if is_extension(name):
            result.symbols_checked += 1
            if hashlib.sha256(a[name]).digest() == hashlib.sha256(b[name]).digest():
                continue
            sym_a = {blank_symbol(symbol) for symbol in exported_symbols(a[name])}
            sym_b = {blank_symbol(symbol) for symbol in exported_symbols(b[name])}
            if sym_a != sym_b:
                result.symbol_differences[name] = {
                    "only_in_a": sorted(sym_a - sym_b)[:50],
                    "only_in_b": sorted(sym_b - sym_a)[:50],
                }
    return result
