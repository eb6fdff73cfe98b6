"""The shard gate, on real-looking build logs (gcc, nvcc, MSVC, macOS ld, lld, nvlink)."""

# Real linker and compiler output lines are long; they stay verbatim.
# ruff: noqa: E501

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from wheelkiln.cache.manifest import ShardManifest, validate_manifest
from wheelkiln.shard.diagnostics import (
    DIAGNOSTIC_PATTERNS,
    UNRESOLVED_PATTERNS,
    find_diagnostics,
    has_unresolved_symbols,
    is_unresolved_only,
    unresolved_symbols,
)
from wheelkiln.shard.gate import (
    ExpectedCompile,
    find_objects,
    link_gate,
    missing_compiles,
    read_compile_database,
    shard_gate,
    shard_refusal,
)
from wheelkiln.shard.partition import is_mine
from wheelkiln.shard.wrapper_log import read_wrapper_log

GNU_UNRESOLVED = """\
/usr/bin/ld: build/temp.linux-x86_64-cpython-311/csrc/flash_api.o: in function `mha_fwd(at::Tensor&)':
flash_api.cpp:(.text+0x1a5): undefined reference to `run_mha_fwd_hdim128(Flash_fwd_params&, CUstream_st*)'
/usr/bin/ld: flash_api.cpp:(.text+0x2b1): undefined reference to `run_mha_fwd_hdim64(Flash_fwd_params&, CUstream_st*)'
/usr/bin/ld: flash_api.cpp:(.text+0x2c9): more undefined references to `run_mha_fwd_hdim64(Flash_fwd_params&, CUstream_st*)' follow
collect2: error: ld returned 1 exit status
"""
GNU_UNRESOLVED_DEBUG = """\
/usr/bin/ld: CMakeFiles/_C.dir/csrc/ops.cpp.o: in function `fwd(int)':
/src/csrc/ops.cpp:12: undefined reference to `launch_fwd(int)'
collect2: error: ld returned 1 exit status
"""
# pybind11 builds with -fvisibility=hidden: a plain -shared link fails (seen in a real
# setuptools shard, indented by pip)
GNU_HIDDEN_UNRESOLVED = """\
  /usr/bin/ld: build/temp.linux-x86_64-cpython-311/csrc/core/dispatch.o:(.data.rel.ro.local+0x10): undefined reference to `demo_cpp::core_t00_checksum()'
  /usr/bin/ld: build/temp.linux-x86_64-cpython-311/csrc/core/dispatch.o:(.data.rel.ro.local+0x28): undefined reference to `demo_cpp::core_t01_checksum()'
  /usr/bin/ld: build/lib.linux-x86_64-cpython-311/demo_cpp/_core.cpython-311-x86_64-linux-gnu.so: hidden symbol `_ZN8demo_cpp17core_t10_checksumEv' isn't defined
  /usr/bin/ld: final link failed: bad value
  collect2: error: ld returned 1 exit status
"""
LLD_HIDDEN = "ld.lld: error: undefined hidden symbol: demo_cpp::core_t00_checksum()\n>>> referenced by dispatch.cpp\n"
LLD_UNRESOLVED = """\
ld.lld: error: undefined symbol: launch_fwd(int)
>>> referenced by ops.cpp:12 (/src/csrc/ops.cpp:12)
>>>               CMakeFiles/_C.dir/csrc/ops.cpp.o:(fwd(int))
clang++: error: linker command failed with exit code 1 (use -v to see invocation)
"""
MACOS_UNRESOLVED = """\
Undefined symbols for architecture arm64:
  "_launch_fwd", referenced from:
      _fwd in ops.o
ld: symbol(s) not found for architecture arm64
clang: error: linker command failed with exit code 1 (use -v to see invocation)
"""
MSVC_UNRESOLVED = """\
   Creating library build\\temp.win-amd64-cpython-311\\Release\\csrc\\_C.cp311-win_amd64.lib and object build\\temp.win-amd64-cpython-311\\Release\\csrc\\_C.cp311-win_amd64.exp
ops.obj : error LNK2019: unresolved external symbol "void __cdecl launch_fwd(int)" (?launch_fwd@@YAXH@Z) referenced in function "void __cdecl fwd(int)" (?fwd@@YAXH@Z)
ops.obj : error LNK2001: unresolved external symbol "int table" (?table@@3HA)
build\\lib.win-amd64-cpython-311\\pkg\\_C.cp311-win_amd64.pyd : fatal error LNK1120: 2 unresolved externals
"""
NVLINK_UNRESOLVED = (
    "nvlink error   : Undefined reference to '_Z6kernelPf' in 'CMakeFiles/x.dir/a.cu.o'\n"
)

GCC_ERROR = """\
FAILED: CMakeFiles/_C.dir/csrc/ops.cpp.o
/usr/bin/c++ -I/src/csrc -O2 -o CMakeFiles/_C.dir/csrc/ops.cpp.o -c /src/csrc/ops.cpp
/src/csrc/ops.cpp: In function 'int f()':
/src/csrc/ops.cpp:12:5: error: 'undeclared' was not declared in this scope
   12 |     undeclared = 1;
      |     ^~~~~~~~~~
ninja: build stopped: subcommand failed.
"""
GCC_FATAL = """\
csrc/a.cpp:3:10: fatal error: missing.h: No such file or directory
    3 | #include "missing.h"
compilation terminated.
"""
GCC_DRIVER = "g++: error: unrecognized command-line option '-fno-such-flag'\n"
NVCC_ERROR = """\
/src/csrc/k.cu(17): error: identifier "blockDimx" is undefined
      int i = blockDimx;
              ^
1 error detected in the compilation of "/src/csrc/k.cu".
"""
NVCC_CATASTROPHIC = '/src/csrc/k.cu(1): catastrophic error: cannot open source file "x.cuh"\n'
NVCC_FATAL = "nvcc fatal   : Unsupported gpu architecture 'compute_99'\n"
MSVC_ERROR = "C:\\src\\csrc\\a.cpp(12): error C2065: 'x': undeclared identifier\n"
MSVC_ERROR_COLUMN = "C:\\src\\csrc\\a.cpp(12,7): error C2065: 'x': undeclared identifier\n"
CI_PREFIXED = "2026-11-30T10:00:00.1234567Z   csrc/b.cc:9:1: error: expected ';' before '}' token\n"
SETUPTOOLS_TAIL = "error: command '/usr/bin/g++' failed with exit code 1\n"
OTHER_LINK_ERROR = """\
/usr/bin/ld: csrc/a.o: relocation R_X86_64_32 against `.rodata' can not be used when making a shared object; recompile with -fPIC
/usr/bin/ld: final link failed: bad value
collect2: error: ld returned 1 exit status
"""
MISSING_LIBRARY = """\
/usr/bin/ld: cannot find -lcudart_static: No such file or directory
collect2: error: ld returned 1 exit status
"""
MIXED_LINK = GNU_UNRESOLVED + "/usr/bin/ld: cannot find -lfoo: No such file or directory\n"
NVLINK_MULTIPLE = (
    "nvlink error   : Multiple definition of '_Z1fv' in 'b.o', first defined in 'a.o'\n"
)

DIAGNOSTIC_LOGS = [
    GCC_ERROR, GCC_FATAL, GCC_DRIVER, NVCC_ERROR, NVCC_CATASTROPHIC, NVCC_FATAL,
    MSVC_ERROR, MSVC_ERROR_COLUMN, CI_PREFIXED,
]  # fmt: skip
UNRESOLVED_LOGS = [
    GNU_UNRESOLVED, GNU_HIDDEN_UNRESOLVED, GNU_UNRESOLVED_DEBUG, LLD_UNRESOLVED, LLD_HIDDEN,
    MACOS_UNRESOLVED, MSVC_UNRESOLVED, NVLINK_UNRESOLVED,
]  # fmt: skip

RECORDS: list[dict[str, object]] = [
    {"tu": "csrc/a.cu", "action": "compile", "exit": 0, "output": "/b/a.o"},
    {"tu": "csrc/b.cu", "action": "stub", "exit": 0, "output": "/b/b.o"},
    # a link that failed on unresolved symbols, as the wrapper records it
    {"tu": None, "action": "link", "exit": 1, "output": "/b/x.so", "unresolved": ["launch_fwd(int)"]},
]
OBJECTS = [("/b/a.o", 5120), ("/b/b.o", 808)]


@pytest.mark.parametrize("log", DIAGNOSTIC_LOGS)
def test_diagnostics_are_found(log: str) -> None:
    assert find_diagnostics(log), log
    assert not has_unresolved_symbols(log)


@pytest.mark.parametrize(
    "log", [*UNRESOLVED_LOGS, SETUPTOOLS_TAIL, OTHER_LINK_ERROR, MISSING_LIBRARY, NVLINK_MULTIPLE]
)
def test_link_output_is_not_a_compiler_diagnostic(log: str) -> None:
    assert find_diagnostics(log) == []


@pytest.mark.parametrize("log", UNRESOLVED_LOGS)
def test_unresolved_symbol_output(log: str) -> None:
    assert has_unresolved_symbols(log)
    assert is_unresolved_only(log)


@pytest.mark.parametrize(
    "log", [OTHER_LINK_ERROR, MISSING_LIBRARY, MIXED_LINK, NVLINK_MULTIPLE, ""]
)
def test_other_link_failures_are_not_unresolved_only(log: str) -> None:
    assert not is_unresolved_only(log)


def test_patterns_are_compiled_regexes() -> None:
    assert all(hasattr(pattern, "search") for pattern in DIAGNOSTIC_PATTERNS)
    assert all(hasattr(pattern, "search") for pattern in UNRESOLVED_PATTERNS)


def test_diagnostics_come_in_log_order() -> None:
    log = NVCC_FATAL + GCC_ERROR + MSVC_ERROR
    assert find_diagnostics(log, limit=2) == [
        NVCC_FATAL.strip(),
        "/src/csrc/ops.cpp:12:5: error: 'undeclared' was not declared in this scope",
    ]


@pytest.mark.parametrize(
    ("exit_code", "log", "objects", "records", "passed", "reason"),
    [
        pytest.param(
            0,
            "[1/2] Building CUDA object a.cu.o\n",
            OBJECTS,
            RECORDS,
            True,
            None,
            id="clean-exit-0",
        ),
        pytest.param(0, "", OBJECTS, [], False, "wrapper never invoked", id="no-wrapper"),
        pytest.param(
            1, GNU_UNRESOLVED + SETUPTOOLS_TAIL, OBJECTS, RECORDS, True, None, id="gnu-unresolved"
        ),
        pytest.param(1, MSVC_UNRESOLVED, OBJECTS, RECORDS, True, None, id="msvc-unresolved"),
        pytest.param(1, MACOS_UNRESOLVED, OBJECTS, RECORDS, True, None, id="macos-unresolved"),
        pytest.param(1, LLD_UNRESOLVED, OBJECTS, RECORDS, True, None, id="lld-unresolved"),
        pytest.param(2, NVLINK_UNRESOLVED, OBJECTS, RECORDS, True, None, id="nvlink-unresolved"),
        pytest.param(
            1,
            GNU_UNRESOLVED + NVCC_ERROR,
            OBJECTS,
            RECORDS,
            False,
            "compiler diagnostics",
            id="unresolved-plus-nvcc-error",
        ),
        pytest.param(
            0,
            MSVC_ERROR,
            OBJECTS,
            RECORDS,
            False,
            "compiler diagnostics",
            id="exit-0-with-diagnostic",
        ),
        pytest.param(
            1,
            OTHER_LINK_ERROR,
            OBJECTS,
            [*RECORDS[:2], {**RECORDS[2], "unresolved": None}],
            False,
            "after a link that failed with something other than unresolved symbols",
            id="other-link-error",
        ),
        pytest.param(
            1,
            GNU_UNRESOLVED,
            [("/b/b.o", 808), ("/b/x.so", 0)],
            RECORDS,
            False,
            "no compiled objects",
            id="only-stubs-and-placeholders",
        ),
        pytest.param(
            1,
            GNU_UNRESOLVED,
            [("/b/a.o", 1)],
            RECORDS,
            False,
            "no compiled objects",
            id="one-byte-object",
        ),
        pytest.param(
            1,
            "",
            OBJECTS,
            [*RECORDS, {"tu": None, "action": "link-unresolved", "exit": 1, "output": "/b/y.so"}],
            True,
            None,
            id="wrapper-tolerated-link",
        ),
        pytest.param(
            1,
            GNU_UNRESOLVED,
            OBJECTS,
            [*RECORDS, {"tu": "csrc/c.cu", "action": "compile", "exit": 1, "output": "/b/c.o"}],
            False,
            "TU compile(s) failed",
            id="failed-compile-record",
        ),
        pytest.param(
            0,
            "",
            OBJECTS,
            [{"tu": "csrc/c.cu", "action": "passthrough", "exit": 1, "output": "/b/c.o"}],
            False,
            "TU compile(s) failed",
            id="failed-source-mode-compile",
        ),
    ],
)
def test_shard_gate(
    exit_code: int,
    log: str,
    objects: list[tuple[str, int]],
    records: list[dict[str, object]],
    passed: bool,
    reason: str | None,
) -> None:
    result = shard_gate(exit_code, log, objects, records)
    assert result.passed is passed, result.reasons
    if reason is None:
        assert result.reasons == ()
    else:
        assert any(reason in text for text in result.reasons), result.reasons


def test_a_broken_tu_is_a_build_failure_and_a_refused_slice_is_not() -> None:
    # exit 4 for what breaks unsharded too; exit 5 for what the shard's proof lacks.
    broken = [*RECORDS, {"tu": "csrc/c.cu", "action": "compile", "exit": 1, "output": "/b/c.o"}]
    assert shard_gate(1, "", OBJECTS, broken).build_failed
    # A failed compile the build went past (exit 0: an optional extension) breaks nothing.
    assert not shard_gate(0, "", OBJECTS, broken).build_failed
    unwrapped = shard_gate(0, "", OBJECTS, [])
    assert not unwrapped.passed and not unwrapped.build_failed
    stopped = shard_gate(0, "", OBJECTS, RECORDS, [ExpectedCompile("csrc/z.cu", "/b/z.o")])
    assert not stopped.passed and not stopped.build_failed
    assert "never ran" in stopped.reasons[0]


def test_gate_counts_actions() -> None:
    records: list[dict[str, object]] = [
        *RECORDS,
        {"tu": None, "action": "probe", "exit": 0},
        {"tu": "x", "action": "link-probe-rebuild", "exit": 0},
        {"tu": None, "action": "host-pass", "exit": 0},
    ]
    result = shard_gate(0, "", OBJECTS, records)
    assert (result.compiled, result.stubbed, result.probed) == (2, 1, 1)
    assert result.actions["host-pass"] == 1


def test_failed_probes_do_not_fail_the_gate() -> None:
    probe = {
        "tu": "../../tmp/tmpq8w1z/flagcheck.cpp",
        "action": "probe",
        "exit": 1,
        "argv": ["c++", "-c", "flagcheck.cpp", "-o", "flagcheck.o", "-fno-such-flag"],
        "cwd": "/tmp/tmpq8w1z",
    }
    log = (
        "flagcheck.cpp:1:1: error: expected unqualified-id\n"
        + GCC_DRIVER
        + "/b/CMakeFiles/CMakeScratch/TryCompile-ab/src.c:2:3: error: unknown type name\n"
    )
    assert shard_gate(0, log, OBJECTS, [*RECORDS, probe]).passed
    # the same driver error with a real compile failing is not excused
    failing = {"tu": "csrc/c.cu", "action": "compile", "exit": 1, "output": "/b/c.o"}
    result = shard_gate(0, log, OBJECTS, [*RECORDS, probe, failing])
    assert not result.passed
    assert any("unrecognized command-line option" in text for text in result.reasons)
    # and a located error in a real source is never a probe's
    assert not shard_gate(0, GCC_ERROR, OBJECTS, [*RECORDS, probe]).passed


def test_find_objects(tmp_path: Path) -> None:
    (tmp_path / "build" / "sub").mkdir(parents=True)
    (tmp_path / "build" / "a.o").write_bytes(b"x" * 10)
    (tmp_path / "build" / "sub" / "b.obj").write_bytes(b"")
    (tmp_path / "build" / "sub" / "c.cpp").write_text("int c;")
    (tmp_path / "build" / "dangling.o").symlink_to(tmp_path / "nowhere.o")
    found = find_objects([tmp_path / "build"])
    assert found == [
        (str(tmp_path / "build" / "a.o"), 10),
        (str(tmp_path / "build" / "sub" / "b.obj"), 0),
    ]


# --------------------------------------------------------------------------- linker forms
# Real stderr of GNU ld, gold, lld and mold (tests/linker_cases.py made it; the
# integration test test_linker_forms.py runs the same cases against installed linkers).

LINKER_FIXTURES = Path(__file__).parent / "fixtures" / "linkers"


def _linker_fixtures() -> list[object]:
    from tests.linker_cases import CASES

    cases = {case.name: case for case in CASES}
    return [
        pytest.param(path.read_text(), cases[path.stem], id=f"{path.parent.name}-{path.stem}")
        for path in sorted(LINKER_FIXTURES.glob("*/*.txt"))
    ]


def test_every_linker_has_fixtures() -> None:
    from tests.linker_cases import LINKERS

    assert sorted(path.name for path in LINKER_FIXTURES.iterdir() if path.is_dir()) == sorted(LINKERS)


@pytest.mark.parametrize(("stderr", "case"), _linker_fixtures())
def test_real_linker_output(stderr: str, case: object) -> None:
    from tests.linker_cases import LinkCase

    assert isinstance(case, LinkCase)
    assert is_unresolved_only(stderr) is case.unresolved_only, stderr
    assert case.symbols <= set(unresolved_symbols(stderr)), stderr
    assert find_diagnostics(stderr) == [], "a link failure is not a compiler diagnostic"
    if case.unresolved_only:
        assert has_unresolved_symbols(stderr)


GNU_RELOCATION_HIDDEN = """\
/usr/bin/ld: src/_dispatch.cpython-311-x86_64-linux-gnu.so.p/dispatch.c.o: in function `pick':
dispatch.c:(.text+0x5): undefined reference to `kernel_avx'
/usr/bin/ld: src/_dispatch.cpython-311-x86_64-linux-gnu.so.p/dispatch.c.o: relocation R_X86_64_PC32 against undefined hidden symbol `kernel_avx' can not be used when making a shared object
/usr/bin/ld: final link failed: bad value
collect2: error: ld returned 1 exit status
"""
GOLD_RELOCATION_DEFINED = """\
/usr/bin/ld.gold: error: a.o: requires dynamic R_X86_64_PC32 reloc against 'exists' which may overflow at runtime; recompile with -fPIC
b.o:b.c:function f: error: undefined reference to 'kernel_two'
collect2: error: ld returned 1 exit status
"""


def test_relocation_against_undefined_hidden_symbol_is_the_expected_failure() -> None:
    assert is_unresolved_only(GNU_RELOCATION_HIDDEN)
    assert unresolved_symbols(GNU_RELOCATION_HIDDEN) == ["kernel_avx"]


def test_gold_relocation_against_a_symbol_that_is_not_unresolved_is_real() -> None:
    assert not is_unresolved_only(GOLD_RELOCATION_DEFINED)


def test_outputs_of_several_linkers_mixed_in_one_log() -> None:
    texts = [path.read_text() for path in sorted(LINKER_FIXTURES.glob("*/shared-hidden-address.txt"))]
    assert len(texts) == 4
    assert is_unresolved_only("\n".join(texts))
    assert not is_unresolved_only("\n".join([*texts, (LINKER_FIXTURES / "lld" / "multiple-definition.txt").read_text()]))


# --------------------------------------------------------------------------- half-way builds
# A real meson-python shard (examples/demo-meson, shard 1/3, before kiln recognised GNU
# ld's relocation form and kept ninja going): the _core link failed at step 17 of 20,
# "ninja: build stopped: subcommand failed" at step 18, and the Cython TU (step 19)
# never compiled. The build directory was kept, so its objects were there.

HALFWAY = Path(__file__).parent / "fixtures" / "meson-halfway"
HALFWAY_ROOT = "/build-host/work/demo-meson-py3.11-linux-x86_64-shard-0-of-3/src"
CYTHON_TU = "<build>/_cy.cpython-311-x86_64-linux-gnu.so.p/_cy.pyx.c"


def _halfway() -> tuple[str, list[tuple[str, int]], list[dict[str, object]], list[ExpectedCompile]]:
    log = (HALFWAY / "build.log").read_text()
    objects = [(path, size) for path, size in json.loads((HALFWAY / "objects.json").read_text())]
    records = read_wrapper_log(HALFWAY / "wrapper.jsonl")
    database = read_compile_database(HALFWAY / "compile_commands.json", HALFWAY_ROOT, "/build-host/build")
    assert database is not None
    return log, objects, records, database


def test_halfway_fixture_is_what_it_says() -> None:
    log, objects, _records, database = _halfway()
    assert "[17/20] Linking target _core" in log and "ninja: build stopped: subcommand failed." in log
    assert "[19/20]" not in log
    assert [compile_.tu for compile_ in database].count("csrc/kernel.c") == 2, "kernel.c twice"
    assert len(database) == 14 and CYTHON_TU in {compile_.tu for compile_ in database}
    assert any(size > 1 for _, size in objects) and has_unresolved_symbols(log)


def test_a_build_that_compiled_nothing_and_made_a_pure_wheel_is_told_to_build_unsharded() -> None:
    pure = shard_gate(0, "", [], [], None, pure_wheel="pkg-0.1-py3-none-any.whl")
    assert not pure.passed
    assert pure.reasons == (
        "nothing to shard: the build called no compiler and its wheel, "
        "pkg-0.1-py3-none-any.whl, holds no extension module. Build it unsharded: kiln build "
        "without --shards, and no [sharding] count above 1 in its recipe",
    )
    # With no wheel to tell, the compiler was missed: the launcher's settings are named.
    assert "wrapper never invoked" in shard_gate(0, "", [], [], None).reasons[0]


def test_a_shard_that_stopped_half_way_fails_naming_what_never_compiled() -> None:
    """Today's main passed it: objects exist and the log has an unresolved-symbol line."""
    log, objects, records, database = _halfway()
    # the slice of shard 1/3 with a partition map that gives it the Cython TU: the log
    # is the same either way, since the build stopped before that TU's step
    mapping = {CYTHON_TU: 0}
    in_slice = [c for c in database if is_mine(c.tu, 0, 3, mapping)]
    result = shard_gate(1, log, objects, records, in_slice)
    assert not result.passed
    assert result.reasons == (
        f"1 of the 7 compile(s) of this shard's slice never ran (the build stopped before them): {CYTHON_TU}",
    )
    assert result.slice_compiles == 7
    assert missing_compiles(in_slice, records) == [c for c in database if c.tu == CYTHON_TU]


def test_a_failed_link_that_is_not_unresolved_symbols_fails_without_a_compile_database() -> None:
    log, objects, records, _ = _halfway()
    result = shard_gate(1, log, objects, records)
    assert not result.passed
    assert result.reasons[0].startswith(
        "build exited 1 after a link that failed with something other than unresolved symbols "
        "(_core.cpython-311-x86_64-linux-gnu.so: failed (exit 1)"
    )


def test_a_complete_slice_passes_and_reports_the_failed_link() -> None:
    """Under keep-going, an unrecognised link costs one target: the slice still compiled."""
    log, objects, records, database = _halfway()
    in_slice = [c for c in database if is_mine(c.tu, 0, 3)]
    result = shard_gate(1, log, objects, records, in_slice)
    assert result.passed, result.reasons
    assert result.links == (
        "_core.cpython-311-x86_64-linux-gnu.so: failed (exit 1) with something other than unresolved symbols",
    )


def test_tolerated_links_say_why() -> None:
    records = [
        *RECORDS[:2],
        {"action": "link-unresolved", "exit": 1, "output": "/b/_core.so",
         "unresolved": ["dm_kernel_level2", "a", "b"], "unresolved_count": 5},
    ]
    result = shard_gate(0, "", OBJECTS, records)
    assert result.passed
    assert result.links == ("_core.so: tolerated, unresolved symbols only (dm_kernel_level2, a, b and 2 more)",)


# --------------------------------------------------------------------------- link gate

LINK_CELL = "demo-cuda-py3.11-cu13.0-linux-x86_64"
OWN_TOOLCHAIN = {
    "compilers": {"gcc": "gcc (Debian 12.2.0-14) 12.2.0", "nvcc": "release 13.0, V13.0.88"},
    "cache": {"ccache": "4.14"},
    "arch_list": ["8.0", "9.0"],
    "build_env": {"MAX_JOBS": "4"},
}
WHERE = "shards/x-shard-1-of-3.tar.gz:manifest.json"


def _manifest(**changes: Any) -> ShardManifest:
    data: dict[str, Any] = {
        "schema": 1, "recipe": "demo-cuda", "cell": LINK_CELL, "index": 1, "count": 3,
        "label": "shard 2/3", "mechanism": "seat", "toolchain": OWN_TOOLCHAIN, "stats": {},
        "tus": [], "created": "2026-12-01T14:00:00+00:00",
        "gate": {"passed": True, "reasons": []},
    }
    data.update(changes)
    return validate_manifest(data)


@pytest.mark.parametrize(
    ("manifest", "refusal"),
    [
        (_manifest(), None),
        (_manifest(cell="demo-cuda-py3.12-cu13.0-linux-x86_64"),
         "shard 2/3 belongs to cell 'demo-cuda-py3.12-cu13.0-linux-x86_64', not "
         f"'{LINK_CELL}'; not merged ({WHERE})"),
        (_manifest(index=2, label="shard 3/3"),
         f"shard 2/3 is shard 3/3 by its manifest, not by its name; not merged ({WHERE})"),
        (_manifest(count=4, label="shard 2/4"),
         f"shard 2/3 is shard 2/4 by its manifest, not by its name; not merged ({WHERE})"),
        (_manifest(toolchain={**OWN_TOOLCHAIN, "arch_list": ["8.0"]}),
         "shard 2/3 was built with a different toolchain (arch_list: shard has ['8.0'], link "
         f"job has ['8.0', '9.0']); not merged ({WHERE})"),
        (_manifest(toolchain={**OWN_TOOLCHAIN, "cache": {"ccache": "4.7"},
                              "build_env": {}}),
         "shard 2/3 was built with a different toolchain (build_env: shard has {}, link job "
         "has {'MAX_JOBS': '4'}; cache: shard has {'ccache': '4.7'}, link job has "
         f"{{'ccache': '4.14'}}); not merged ({WHERE})"),
    ],
    ids=["merged", "other-cell", "other-index", "other-count", "other-arch", "two-differences"],
)
def test_shard_refusal(manifest: ShardManifest, refusal: str | None) -> None:
    assert shard_refusal(manifest, LINK_CELL, 1, 3, OWN_TOOLCHAIN, WHERE) == refusal


def test_a_shard_refusal_never_prints_another_jobs_text_raw() -> None:
    hostile = "x\n::error title=pwned::y\x1b[2J"
    manifest = _manifest(index=2, label=hostile, cell=hostile,
                         toolchain={**OWN_TOOLCHAIN, "compilers": {"gcc": hostile}})
    for index in (1, 2):
        refusal = shard_refusal(manifest, LINK_CELL if index == 2 else hostile, index, 3,
                                OWN_TOOLCHAIN, WHERE)
        assert refusal is not None and refusal.isprintable(), refusal
    assert shard_refusal(manifest, hostile, 1, 3, OWN_TOOLCHAIN, WHERE) == (
        f"shard 2/3 is shard 3/3 by its manifest, not by its name; not merged ({WHERE})"
    )


MISSING = "shard 2/3 is missing: no x-shard-1-of-3.tar.gz in shards"
MISSES = "3 cache miss(es): the shards did not hand over every TU"
TOTAL_0 = "total 0: the cache was never consulted, so no handoff happened"
LEDGER = "demo/_core.so: 2 TU(s) compiled by no shard"


@pytest.mark.parametrize(
    ("merge_problems", "hits", "misses", "ledger", "passed", "problems"),
    [
        ([], 26, 0, [], True, []),
        ([], 23, 3, [], False, [MISSES]),
        ([], 0, 0, [], False, [TOTAL_0]),
        ([MISSING], 17, 9, [], False, [MISSING, "9 cache miss(es): the shards did not hand "
                                        "over every TU"]),
        # A missing shard with no misses (its TUs were all probes) still fails the gate.
        ([MISSING], 26, 0, [], False, [MISSING]),
        ([], 26, 0, [LEDGER], False, [LEDGER]),
        ([MISSING], 0, 3, [LEDGER], False, [MISSING, MISSES, LEDGER]),
    ],
    ids=["all-hits", "misses", "total-0", "missing-shard", "missing-no-misses", "ledger", "all"],
)
def test_link_gate(merge_problems: list[str], hits: int, misses: int, ledger: list[str],
                   passed: bool, problems: list[str]) -> None:
    missed = [{"tu": "csrc/a.cu", "shard": None, "difference": "no shard compiled this TU"}]
    gate = link_gate(merge_problems, hits, misses, ledger, missed)
    assert gate.passed is passed and gate.problems == problems
    assert (gate.hits, gate.misses, gate.total) == (hits, misses, hits + misses)
    assert gate.missed == missed


def test_link_gate_says_whether_a_shard_compiled_each_missed_tu() -> None:
    """A TU a shard compiled missed under another key: running that shard again does
    not help, so the gate does not say the shards failed to hand it over."""
    by_shard = {"tu": "a.cpp", "shard": 0, "difference": "only in the shard: -I/h0/x"}
    by_none = {"tu": "b.cpp", "shard": None, "difference": "no shard compiled this TU"}
    differing = "compiled by a shard with a compile that differs from the link job's"
    assert link_gate([], 5, 1, missed=[by_shard]).problems == [
        f"1 cache miss(es): each {differing} (what differs is said with each TU)"]
    assert link_gate([], 5, 2, missed=[by_shard, by_none]).problems == [
        f"2 cache miss(es): 1 {differing} (what differs is said with each TU), 1 compiled by no shard"]
    assert link_gate([], 5, 1, missed=[by_none]).problems == [
        "1 cache miss(es): the shards did not hand over every TU"]


def test_link_gate_names_remote_troubles_only_when_there_are_misses() -> None:
    trouble = ["remote storage http://cache:8080/kiln: 3 read errors"]
    gate = link_gate([], 20, 2, remote_troubles=trouble)
    assert gate.problems == [
        "2 cache miss(es): the shards did not hand over every TU",
        "remote storage http://cache:8080/kiln: 3 read errors: what the shards stored there "
        "was not read",
    ]
    assert link_gate([], 22, 0, remote_troubles=trouble).passed


def test_link_gate_counts_cython_misses_like_compiler_misses() -> None:
    gate = link_gate([], 26, 0, cython_misses=2, cython_missed=["pkg._a", "pkg._b"])
    assert not gate.passed
    assert gate.problems == ["2 Cython cache miss(es): the shards did not hand over pkg._a, pkg._b"]


def test_a_build_that_failed_before_its_first_compile_is_said_to_have_failed() -> None:
    # Not a launcher to check: the package's own setup.py broke, as it would unsharded.
    log = "running bdist_wheel\n\nerror: kiln-tiny is broken on purpose\n"
    gate = shard_gate(1, log, [], [], None)
    assert not gate.passed and gate.build_failed
    assert gate.reasons == (
        "the build failed (exit 1) before it compiled any of its TUs; "
        "its last lines: running bdist_wheel | error: kiln-tiny is broken on purpose",
    )


def test_a_build_that_failed_after_its_compiler_checks_is_said_to_have_failed() -> None:
    # meson ran its compiler checks through the wrapper, then meson-python refused the
    # interpreter (pywavelets 1.10 on 3.11): the slice never compiled, and the log says why.
    log = "Build targets in project: 19\n\nFound ninja-1.11.1 at /usr/bin/ninja\n\n" \
        "meson-python: error: The package requires Python version >=3.12, running on 3.11.7\n"
    probes = [{"action": "probe", "exit": 0, "argv": ["cc", "-c", "testfile.c"]}] * 11
    slice_ = [ExpectedCompile("pywt/_extensions/c/wt.c", "/b/wt.o")]
    gate = shard_gate(1, log, [], probes, slice_)
    assert not gate.passed and gate.build_failed
    assert gate.reasons == (
        "the build failed (exit 1) before it compiled any of its TUs; its last lines: "
        "Build targets in project: 19 | Found ninja-1.11.1 at /usr/bin/ninja | meson-python: "
        "error: The package requires Python version >=3.12, running on 3.11.7",
    )
    # Once a TU was reached, what never compiled is named instead.
    reached = [*probes, {"action": "stub", "exit": 0, "tu": "pywt/_extensions/c/cwt.c"}]
    assert "never ran (the build stopped before them): pywt/_extensions/c/wt.c" in (
        shard_gate(1, log, [], reached, slice_).reasons[0]
    )

