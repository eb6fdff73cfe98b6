"""Build demo_cpp._core and demo_cpp._extra (metadata lives in pyproject.toml).

setuptools links the extension modules one after the other and stops at the first
failed link; there are two on purpose, so a sharded build (whose first link fails
by design, see below) is known to still compile the second module's TUs.

Link failure on a missing TU object: -Wl,--no-undefined (or -z defs) cannot be used,
because a CPython extension module on Linux must leave the Py* symbols undefined
(they come from the interpreter; linking libpython is wrong for wheels), and
-Wl,--require-defined=SYM fails with "required symbol ... not defined" rather than an
unresolved-reference message. Instead every generated TU's checksum function is
declared with hidden visibility (csrc/include/demo_cpp/checksum.h). GNU ld never
leaves a hidden symbol undefined in a shared object, so a module whose TU object is
an empty stub (seat shard) or whose .cpp was deleted (source shard) fails with

    undefined reference to `demo_cpp::core_t03_checksum()'
    hidden symbol `_ZN8demo_cpp17core_t03_checksumEv' isn't defined

while a complete build links as usual and the Py* symbols stay undefined.
"""

from __future__ import annotations

from pathlib import Path

from pybind11.setup_helpers import Pybind11Extension
from setuptools import setup

HERE = Path(__file__).resolve().parent


def group_sources(group: str) -> list[str]:
    # Relative POSIX paths (setuptools wants them relative to the project root), so
    # object paths and the shard partition see the same names in every tree copy.
    # Globbed, not listed: a source-partitioned shard deletes out-of-slice files.
    gen = HERE / "csrc" / "generated" / group
    return sorted(p.relative_to(HERE).as_posix() for p in gen.glob("*.cpp"))


def extension(group: str) -> Pybind11Extension:
    return Pybind11Extension(
        f"demo_cpp._{group}",
        [f"csrc/{group}/module.cpp", f"csrc/{group}/dispatch.cpp", *group_sources(group)],
        include_dirs=["csrc/include"],
        cxx_std=17,
    )


# Order matters: _core (most TUs) links first, _extra second.
setup(
    package_dir={"": "src"},
    packages=["demo_cpp"],
    ext_modules=[extension("core"), extension("extra")],
)
