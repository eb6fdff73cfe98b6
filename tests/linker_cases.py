"""Link failures of GNU ld (bfd), gold, lld and mold, produced from small C/C++ sources.

The shard gate and the seat wrapper must tell "unresolved symbols only" (what a shard's
stubbed objects cause) from every other link failure. The forms differ by linker and by
what the missing symbol is (a call, a hidden function whose address a dispatch table
takes, hidden or protected data). These cases produce each form for real.

``tests/unit/fixtures/linkers/<linker>/<case>.txt`` holds the stderr captured from the
linkers installed here (binutils 2.40 ld.bfd and ld.gold, LLD 14, mold 1.10), so the
unit tests run everywhere; ``tests/integration/test_linker_forms.py`` runs the cases
against whatever linkers the machine has. Capture again with::

    .venv/bin/python -m tests.linker_cases tests/unit/fixtures/linkers
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

LINKERS = ("bfd", "gold", "lld", "mold")
"""``-fuse-ld=`` names; the executables are ``ld.bfd``, ``ld.gold``, ``ld.lld``, ``ld.mold``."""

SOURCES = {
    # a call to a hidden function another (stubbed) TU defines
    "hidden_call.c": '__attribute__((visibility("hidden"))) long kernel_one(void);\n'
    "long entry(void) { return kernel_one() + 1; }\n",
    # the SIMD dispatch pattern: a table of hidden kernels' addresses (R_X86_64_PC32)
    "dispatch.c": '__attribute__((visibility("hidden"))) long kernel_avx(void);\n'
    '__attribute__((visibility("hidden"))) long kernel_sse(void);\n'
    "typedef long (*fn)(void);\n"
    "fn pick(int level) { return level ? kernel_avx : kernel_sse; }\n",
    "dispatch_cpp.cpp": 'namespace k { __attribute__((visibility("hidden"))) long kernel_avx(int); }\n'
    "typedef long (*fn)(int);\n"
    "fn pick() { return k::kernel_avx; }\n",
    "hidden_data.c": '__attribute__((visibility("hidden"))) extern long table_hidden[];\n'
    "long get(int i) { return table_hidden[i]; }\n",
    "protected_data.c": '__attribute__((visibility("protected"))) extern long prot_data;\n'
    "long getp(void) { return prot_data; }\n",
    "plain.c": "long kernel_two(void);\nlong entry2(void) { return kernel_two() + 2; }\n",
    "main.c": "long kernel_three(void);\nint main(void) { return (int)kernel_three(); }\n",
    "many.c": "".join(f"long k{i}(void);\n" for i in range(25))
    + "long all(void) { return "
    + " + ".join(f"k{i}()" for i in range(25))
    + "; }\n",
    "twice_a.c": "long twice(void) { return 1; }\n",
    "twice_b.c": "long twice(void) { return 2; }\n",
    "nonpic.c": 'const char *name(void) { return "kiln"; }\n',
}

_PIC = ("-O2", "-fPIC")
OBJECTS = {
    "hidden_call.o": ("hidden_call.c", _PIC),
    "dispatch.o": ("dispatch.c", _PIC),
    "dispatch_cpp.o": ("dispatch_cpp.cpp", _PIC),
    "hidden_data.o": ("hidden_data.c", _PIC),
    "protected_data.o": ("protected_data.c", _PIC),
    "plain.o": ("plain.c", _PIC),
    "main.o": ("main.c", _PIC),
    "main_nopic.o": ("main.c", ("-fno-pic", "-fno-PIE")),
    "many.o": ("many.c", _PIC),
    "twice_a.o": ("twice_a.c", _PIC),
    "twice_b.o": ("twice_b.c", _PIC),
    "nonpic.o": ("nonpic.c", ("-fno-pic", "-fno-PIE")),
}


@dataclass(frozen=True)
class LinkCase:
    name: str
    args: tuple[str, ...]
    unresolved_only: bool
    """True: a failure a shard tolerates (unresolved symbols and their consequences)."""
    symbols: frozenset[str] = frozenset()
    """Symbols every linker names as unresolved (a subset: lld stops after 20 errors)."""


_SHARED = ("-shared",)
_DEFS = ("-shared", "-Wl,-z,defs")
CASES = (
    LinkCase("shared-hidden-call", (*_SHARED, "hidden_call.o"), True, frozenset({"kernel_one"})),
    # GNU ld: "relocation R_X86_64_PC32 against undefined hidden symbol ... when making a
    # shared object" + "final link failed: bad value"; gold: "requires dynamic ... reloc"
    LinkCase("shared-hidden-address", (*_SHARED, "dispatch.o"), True, frozenset({"kernel_avx"})),
    LinkCase("shared-hidden-address-cpp", (*_SHARED, "dispatch_cpp.o"), True),
    LinkCase("shared-hidden-data", (*_SHARED, "hidden_data.o"), True, frozenset({"table_hidden"})),
    LinkCase("shared-protected-data", (*_SHARED, "protected_data.o"), True),
    LinkCase("shared-no-undefined", (*_DEFS, "plain.o"), True, frozenset({"kernel_two"})),
    LinkCase("executable", ("main.o",), True, frozenset({"kernel_three"})),
    LinkCase("pie-from-non-pic", ("-pie", "main_nopic.o"), True, frozenset({"kernel_three"})),
    LinkCase(
        "mixed",
        (*_DEFS, "dispatch.o", "plain.o", "hidden_call.o", "hidden_data.o"),
        True,
        frozenset({"kernel_avx"}),  # GNU ld stops at the first relocation error
    ),
    LinkCase("many", ("-shared", "-Wl,--no-undefined", "many.o"), True, frozenset({"k0"})),
    LinkCase("missing-library", (*_SHARED, "plain.o", "-lkiln_no_such_library"), False),
    LinkCase(
        "unresolved-and-missing-library",
        (*_DEFS, "plain.o", "-lkiln_no_such_library"),
        False,
    ),
    LinkCase("multiple-definition", (*_DEFS, "twice_a.o", "twice_b.o", "plain.o"), False),
    LinkCase("non-pic-in-shared", (*_SHARED, "nonpic.o"), False),
)


def available_linkers() -> dict[str, bool]:
    return {linker: shutil.which(f"ld.{linker}") is not None for linker in LINKERS}


def prepare(directory: Path) -> None:
    """Write the sources and compile the objects into *directory*."""
    directory.mkdir(parents=True, exist_ok=True)
    for name, text in SOURCES.items():
        (directory / name).write_text(text)
    for obj, (source, flags) in OBJECTS.items():
        compiler = "g++" if source.endswith(".cpp") else "gcc"
        subprocess.run([compiler, *flags, "-c", source, "-o", obj], cwd=directory, check=True)


def link(directory: Path, linker: str, case: LinkCase) -> subprocess.CompletedProcess[str]:
    """Link *case* with *linker* in *directory* (prepared); C++ cases through g++."""
    driver = "g++" if any("cpp" in arg for arg in case.args) else "gcc"
    return subprocess.run(
        [driver, f"-fuse-ld={linker}", *case.args, "-o", f"out-{linker}-{case.name}"],
        cwd=directory,
        capture_output=True,
        text=True,
        check=False,
    )


def capture(destination: Path) -> None:
    work = destination / ".work"
    prepare(work)
    for linker, present in available_linkers().items():
        if not present:
            print(f"skipped {linker}: ld.{linker} is not installed", file=sys.stderr)
            continue
        for case in CASES:
            result = link(work, linker, case)
            if result.returncode == 0:
                continue  # this linker accepts it (mold resolves protected data at run time)
            (destination / linker).mkdir(parents=True, exist_ok=True)
            (destination / linker / f"{case.name}.txt").write_text(result.stderr)
    shutil.rmtree(work)


if __name__ == "__main__":
    capture(Path(sys.argv[1]))
