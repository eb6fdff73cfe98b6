"""Reading real compiler command lines, and the wrapper's decision for each."""

from __future__ import annotations

import json
import os
import shlex
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from wheelkiln.builder.toolchain import Launch, toolchain_environment
from wheelkiln.cache import launch
from wheelkiln.cache.launch import compile_command
from wheelkiln.compiler_args import (
    NVCC_PATH_SPELLINGS,
    nvcc_depfile_args,
    nvcc_path_args,
    parse_compiler_args,
)
from wheelkiln.shard import wrapper
from wheelkiln.shard.partition import shard_of, tu_key
from wheelkiln.shard.wrapper import SeatConfig, decide, encode_record

WRAPPER = Path(wrapper.__file__)
LAUNCH = Path(launch.__file__)

CMAKE_NINJA_CUDA = shlex.split(
    "/usr/local/cuda/bin/nvcc -forward-unknown-to-host-compiler -DFOO -I/x "
    "--generate-code=arch=compute_80,code=[compute_80,sm_80] -Xcompiler=-fPIC "
    "-MD -MT CMakeFiles/x.dir/a.cu.o -MF CMakeFiles/x.dir/a.cu.o.d "
    "-x cu -c /src/a.cu -o CMakeFiles/x.dir/a.cu.o"
)
# torch.utils.cpp_extension's ninja rule, after the shell has read it
TORCH_NINJA_NVCC = shlex.split(
    "/usr/local/cuda/bin/nvcc --generate-dependencies-with-compile "
    "--dependency-output /src/build/temp.linux-x86_64-cpython-311/csrc/k.o.d "
    "-I/src/csrc -I/venv/lib/python3.11/site-packages/torch/include "
    "-isystem /venv/lib/python3.11/site-packages/torch/include/torch/csrc/api/include "
    "-I/usr/local/cuda/include -I/usr/include/python3.11 -c -c /src/csrc/k.cu "
    "-o /src/build/temp.linux-x86_64-cpython-311/csrc/k.o "
    "-D__CUDA_NO_HALF_OPERATORS__ -D__CUDA_NO_HALF_CONVERSIONS__ "
    "--expt-relaxed-constexpr --compiler-options ''\"'\"'-fPIC'\"'\"'' -O3 -std=c++17 "
    "-gencode arch=compute_80,code=sm_80 -gencode arch=compute_90,code=sm_90 "
    "-Xcudafe --diag_suppress=20012 -t 4 '-DPYBIND11_COMPILER_TYPE=\"_gcc\"' "
    "-DTORCH_EXTENSION_NAME=_C -D_GLIBCXX_USE_CXX11_ABI=1 -ccbin /usr/bin/gcc"
)
SETUPTOOLS_GCC = shlex.split(
    "gcc -pthread -Wno-unused-result -Wsign-compare -DNDEBUG -g -fwrapv -O2 -Wall -fPIC "
    "-I/src/csrc -I/venv/include -I/usr/include/python3.11 -c csrc/a.cpp "
    "-o build/temp.linux-x86_64-cpython-311/csrc/a.o -std=c++17"
)
# what nvcc 13.0 runs through `-ccbin`, captured on this machine
NVCC_HOST_PASSES = [
    ["-E", "/tmp/tmpxft_00000e10_00000000-2.cpp"],
    shlex.split(
        "-D__CUDA_ARCH_LIST__=800 -E -x c++ -D__CUDACC__ -D__NVCC__ "
        "-I/usr/local/cuda-13.0/bin/../targets/x86_64-linux/include -include cuda_runtime.h "
        "-m64 k.cu -o /tmp/tmpxft_00000e10_00000000-5_k.cpp4.ii"
    ),
    shlex.split(
        "-D__CUDA_ARCH__=800 -D__CUDA_ARCH_LIST__=800 -c -x c++ -DCUDA_DOUBLE_MATH_FUNCTIONS "
        "-Wno-psabi -m64 /tmp/tmpxft_00000e10_00000000-6_k.cudafe1.cpp -o k.o"
    ),
]


def seat(root: str = "/src", index: int = 0, count: int = 3) -> SeatConfig:
    return SeatConfig(shard_index=index, shard_count=count, package_root=root)


def decide_for(argv: list[str], cwd: str = "/src", config: SeatConfig | None = None) -> str:
    return decide(argv[0], argv[1:], cwd, config or seat(), called_by_nvcc=False).action


# ------------------------------------------------------------------ parsing


def test_cmake_ninja_cuda_line() -> None:
    parsed = parse_compiler_args(CMAKE_NINJA_CUDA[0], CMAKE_NINJA_CUDA[1:])
    assert parsed.nvcc
    assert parsed.stage == "compile"
    assert parsed.sources == ["/src/a.cu"]
    assert parsed.output == "CMakeFiles/x.dir/a.cu.o"
    assert parsed.depfile_path() == "CMakeFiles/x.dir/a.cu.o.d"
    assert parsed.dep_targets == ["CMakeFiles/x.dir/a.cu.o"]
    assert parsed.is_tu


def test_torch_ninja_nvcc_line() -> None:
    parsed = parse_compiler_args(TORCH_NINJA_NVCC[0], TORCH_NINJA_NVCC[1:])
    assert parsed.stage == "compile"
    # -gencode/-Xcudafe/-t/-ccbin/--compiler-options values are not operands
    assert parsed.operands == ["/src/csrc/k.cu"]
    assert parsed.output == "/src/build/temp.linux-x86_64-cpython-311/csrc/k.o"
    assert parsed.depfile_path() == "/src/build/temp.linux-x86_64-cpython-311/csrc/k.o.d"
    assert parsed.has_dependency_flag


def test_setuptools_gcc_line() -> None:
    parsed = parse_compiler_args(SETUPTOOLS_GCC[0], SETUPTOOLS_GCC[1:])
    assert not parsed.nvcc
    assert parsed.is_tu
    assert parsed.sources == ["csrc/a.cpp"]
    assert parsed.output == "build/temp.linux-x86_64-cpython-311/csrc/a.o"
    assert parsed.depfile_path() is None


@pytest.mark.parametrize(
    ("argv", "output"),
    [
        (["gcc", "-c", "a.c", "-obuild/a.o"], "build/a.o"),
        (["gcc", "-c", "a.c", "--output=build/b.o"], "build/b.o"),
        (["nvcc", "-c", "k.cu", "-o=build/k.o"], "build/k.o"),
        (["nvcc", "-c", "k.cu", "--output-file", "build/k2.o"], "build/k2.o"),
        (["nvcc", "-c", "k.cu", "-odir", "out"], "out/k.o"),
        (["gcc", "-c", "src/a.cc"], "a.o"),
    ],
)
def test_output_forms(argv: list[str], output: str) -> None:
    assert parse_compiler_args(argv[0], argv[1:]).object_path() == output


@pytest.mark.parametrize(
    ("argv", "stage", "sources"),
    [
        (["gcc", "-E", "a.c"], "preprocess", ["a.c"]),
        (["gcc", "-M", "a.c"], "preprocess", ["a.c"]),
        (["gcc", "-MM", "-c", "a.c"], "preprocess", ["a.c"]),
        (["nvcc", "-E", "-x", "cu", "k.cu"], "preprocess", ["k.cu"]),
        (["gcc", "-c", "a.c", "b.c"], "compile", ["a.c", "b.c"]),
        (["gcc", "-S", "a.c"], "other", ["a.c"]),
        (["nvcc", "-ptx", "k.cu"], "other", ["k.cu"]),
        (["nvcc", "-dc", "k.cu", "-o", "k.o"], "compile", ["k.cu"]),
        (["nvcc", "-dlink", "a.o", "b.o", "-o", "dl.o"], "device-link", []),
        (["g++", "-shared", "a.o", "-o", "x.so"], "link", []),
        (["gcc", "--version"], "info", []),
        (["gcc", "-dumpversion"], "info", []),
        (["g++", "-v"], "info", []),
        (["gcc", "-x", "c", "-c", "gen.inc", "-o", "gen.o"], "compile", ["gen.inc"]),
        (["gcc", "-xc++", "-c", "gen.inc"], "compile", ["gen.inc"]),
        (["g++", "-x", "c++-header", "-c", "pch.h", "-o", "pch.h.gch"], "compile", []),
        (["gcc", "-x", "c", "a.inc", "-x", "none", "lib.a", "-o", "p"], "link", ["a.inc"]),
        (["gcc", "-c", "-include", "pre.c", "-imacros", "m.c", "x.c"], "compile", ["x.c"]),
        (
            ["nvcc", "-c", "-Xcompiler", "a.c", "-Werror", "all-warnings", "k.cu"],
            "compile",
            ["k.cu"],
        ),
    ],
)
def test_stages_and_sources(argv: list[str], stage: str, sources: list[str]) -> None:
    parsed = parse_compiler_args(argv[0], argv[1:])
    assert parsed.stage == stage
    assert parsed.sources == sources


def test_response_and_options_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    Path("flags.rsp").write_text('-I"/inc dir" -c "src/a b.cpp" -o out.o\n')
    parsed = parse_compiler_args("g++", ["@flags.rsp", "-O2"])
    assert parsed.is_tu
    assert parsed.sources == ["src/a b.cpp"]
    assert parsed.output == "out.o"
    Path("nvcc.opts").write_text("-c k.cu -o k.o")
    parsed = parse_compiler_args("nvcc", ["--options-file", "nvcc.opts", "-O3"])
    assert parsed.is_tu
    assert parsed.sources == ["k.cu"]


# ------------------------------------------------------------------ nvcc depfile


@pytest.mark.parametrize(
    ("args", "added"),
    [
        (["-c", "k.cu", "-o", "out/k.o"], ["-MD", "-MF", "out/k.o.d"]),
        (["-c", "k.cu"], ["-MD", "-MF", "k.o.d"]),
        (["--compile", "k.cu", "-o=k2.o"], ["-MD", "-MF", "k2.o.d"]),
        (["-dc", "k.cu", "--output-file", "r.o"], ["-MD", "-MF", "r.o.d"]),
        (["-c", "k.cu", "-odir", "out"], ["-MD", "-MF", "out/k.o.d"]),
        (TORCH_NINJA_NVCC[1:], []),
        (CMAKE_NINJA_CUDA[1:], []),
        (["-c", "k.cu", "-o", "k.o", "-MMD"], []),
        (["-c", "k.cu", "-o", "k.o", "--generate-nonsystem-dependencies-with-compile"], []),
        (["-c", "k.cu", "-o", "k.o", "--dependency-output=k.d"], []),
        (["-M", "k.cu"], []),
        (["-E", "k.cu"], []),
        (["-c", "a.cu", "b.cu"], []),
        (["-dlink", "a.o", "-o", "d.o"], []),
        (["-shared", "a.o", "-o", "x.so"], []),
        (["--version"], []),
    ],
)
def test_nvcc_depfile_args(args: list[str], added: list[str]) -> None:
    assert nvcc_depfile_args(list(args)) == [*args, *added]


# CMake's CUDA line for a TU of a pybind11 module: its system include directories,
# the build environment's among them, as CMake writes them for nvcc (`-isystem=DIR`)
CMAKE_NINJA_CUDA_SYSTEM = shlex.split(
    "/usr/local/cuda/bin/nvcc -forward-unknown-to-host-compiler -D_core_EXPORTS "
    "-isystem=/usr/include/python3.11 -isystem=/w/.envs/3687/lib/python3.11/site-packages/"
    "pybind11/include -isystem=/usr/local/cuda/include -O3 -DNDEBUG "
    "--generate-code=arch=compute_80,code=[compute_80,sm_80] -Xcompiler=-fPIC "
    "-MD -MT CMakeFiles/_core.dir/csrc/k.cu.o -MF CMakeFiles/_core.dir/csrc/k.cu.o.d "
    "-x cu -c /w/src/csrc/k.cu -o CMakeFiles/_core.dir/csrc/k.cu.o"
)


@pytest.mark.parametrize(
    ("args", "respelled"),
    [
        (["-isystem=/e/inc", "-c", "k.cu"], ["-isystem", "/e/inc", "-c", "k.cu"]),
        (["--system-include", "/e/a,/e/b"], ["-isystem", "/e/a", "-isystem", "/e/b"]),
        (["--system-include=/e/a"], ["-isystem", "/e/a"]),
        (["-I=/e/a,/e/b"], ["-I", "/e/a", "-I", "/e/b"]),
        (["--include-path", "/e/a"], ["-I", "/e/a"]),
        (["--include-path=/e/a"], ["-I", "/e/a"]),
        (["-include=/e/p.h"], ["-include", "/e/p.h"]),
        (["--pre-include", "/e/p.h"], ["-include", "/e/p.h"]),
        # what ccache reads already, and what is not nvcc's to respell, stay as they are
        (["-I", "/e/a", "-I/e/b", "-isystem", "/e/c"], ["-I", "/e/a", "-I/e/b", "-isystem", "/e/c"]),
        (["-Xcompiler", "-isystem=/e/c"], ["-Xcompiler", "-isystem=/e/c"]),  # gcc's: = is sysroot
        (["-D", "X=-I=/e"], ["-D", "X=-I=/e"]),
        (["-DX=-I=/e"], ["-DX=-I=/e"]),
        (["-c", "k.cu", "--system-include"], ["-c", "k.cu", "--system-include"]),
        # nvcc reads a comma inside double quotes as part of the path: left as written
        (['-I="x,y"'], ['-I="x,y"']),
        (['--include-path', '"x,y"'], ['--include-path', '"x,y"']),
        (['-isystem="/e/a b",/e/c'], ['-isystem="/e/a b",/e/c']),
    ],
)
def test_nvcc_path_args_respells_include_options_the_way_ccache_reads_them(
    args: list[str], respelled: list[str]
) -> None:
    assert nvcc_path_args(list(args)) == respelled


def test_nvcc_options_files_are_read_in_where_they_hold_a_spelling_to_respell(tmp_path: Path) -> None:
    """CMake's Makefile generator writes a CUDA TU's includes into an options file,
    in nvcc's spelling: read in and respelled. Any other options file stays nvcc's, in
    the separate spelling that ccache reads (it hashes ``--options-file=F`` as a name)."""
    includes = tmp_path / "includes_CUDA.rsp"  # as CMake 3.25 writes it
    includes.write_text('-isystem=/usr/include/python3.11 -isystem="/w/.envs/3687/pybind11/include"\n')
    plain = tmp_path / "plain.rsp"
    plain.write_text("-DX=1 -O3\n")
    quoted = tmp_path / "quoted.rsp"
    quoted.write_text("-isystem='/w/a b'\n")
    nested = tmp_path / "nested.rsp"
    nested.write_text(f"--options-file {includes} -DY=2\n")
    (tmp_path / "fifo.rsp").unlink(missing_ok=True)
    os.mkfifo(tmp_path / "fifo.rsp")
    respelled = ["-isystem", "/usr/include/python3.11", "-isystem", "/w/.envs/3687/pybind11/include"]
    assert nvcc_path_args(["--options-file", str(includes), "-c", "k.cu"]) == [*respelled, "-c", "k.cu"]
    assert nvcc_path_args([f"-optf={plain},{includes}"]) == ["-optf", str(plain), *respelled]
    assert nvcc_path_args([f"--options-file={plain}"]) == ["--options-file", str(plain)]
    assert nvcc_path_args(["--options-file", str(nested)]) == [*respelled, "-DY=2"]
    for left in (quoted, tmp_path / "fifo.rsp", tmp_path / "missing.rsp"):
        assert nvcc_path_args(["--options-file", str(left)]) == ["--options-file", str(left)]
    # a file that names itself is read 16 times for one command at most, not without end
    looping = tmp_path / "looping.rsp"
    looping.write_text(" ".join([f"--options-file {looping}"] * 50) + " -isystem=/e/x\n")
    assert nvcc_path_args(["--options-file", str(looping)]).count("-isystem") == 16
    # a relative options file is read where the compile runs, not where kiln is
    assert nvcc_path_args(["-optf", includes.name], cwd=str(tmp_path)) == respelled
    assert nvcc_path_args(["-optf", includes.name]) == ["-optf", includes.name]


def test_a_stub_rebuilt_in_the_link_step_reads_its_options_file_where_it_compiles(
    tmp_path: Path,
) -> None:
    """The link step recompiles a stubbed object from its logged argv and cwd, from the
    link's own directory: the options file (relative, as CMake's Makefile generator
    names it) is read from the logged cwd, so ccache gets the respelled include, the
    same command the owning shard and the link job hashed."""
    cache = _fake_tool(tmp_path / "ccache", 'printf "%s\\n" "$@" > "$0.args"')
    (tmp_path / "tu").mkdir()
    (tmp_path / "tu" / "includes_CUDA.rsp").write_text('-isystem="/w/.envs/1/pybind11/include"\n')
    argv = ["nvcc", "--options-file", "includes_CUDA.rsp", "-x", "cu", "-MD", "-MF", "k.o.d",
            "-c", "k.cu", "-o", "k.o"]  # fmt: skip
    record = {"argv": argv, "cwd": str(tmp_path / "tu"), "tu": "k.cu", "output": "k.o"}
    config = SeatConfig(cache=str(cache), log_path=str(tmp_path / "wrapper.log"))
    assert wrapper.rebuild_stub(record, config) == 0
    assert (tmp_path / "ccache.args").read_text().splitlines() == [
        "nvcc", "-isystem", "/w/.envs/1/pybind11/include", "-x", "cu", "-MD", "-MF", "k.o.d",
        "-c", "k.cu", "-o", "k.o",
    ]  # fmt: skip


@pytest.mark.parametrize("line", [CMAKE_NINJA_CUDA, TORCH_NINJA_NVCC, *NVCC_HOST_PASSES])
def test_nvcc_path_args_changes_no_line_without_a_respelled_spelling(line: list[str]) -> None:
    assert not any(spelling in arg for arg in line for spelling in NVCC_PATH_SPELLINGS)
    assert nvcc_path_args(list(line)) == line


# the same TU under CMake's Makefile generator: its includes in an options file
CMAKE_MAKE_CUDA_OPTIONS_FILE = shlex.split(
    "/usr/local/cuda/bin/nvcc -forward-unknown-to-host-compiler -D_core_EXPORTS "
    "--options-file includes_CUDA.rsp -O3 -DNDEBUG -x cu -MD -MT k.cu.o -MF k.cu.o.d "
    "-c /w/src/csrc/k.cu -o k.cu.o"
)


# CMake's Makefile generator with CMAKE_DEPENDS_USE_COMPILER=OFF: no depfile asked for
CMAKE_MAKE_CUDA_NO_DEPFILE = shlex.split("/usr/local/cuda/bin/nvcc -x cu -c /w/src/k.cu -o k.cu.o")


@pytest.mark.parametrize(
    "line", [CMAKE_NINJA_CUDA, CMAKE_NINJA_CUDA_SYSTEM, CMAKE_MAKE_CUDA_OPTIONS_FILE, CMAKE_MAKE_CUDA_NO_DEPFILE]
)
def test_cmake_nvcc_launcher_hands_the_cache_what_the_seat_wrapper_hands_it(
    tmp_path: Path, line: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A CMake build's CUDA launcher script (link jobs, unsharded builds) and the seat
    wrapper (shard jobs, :func:`compile_command`) give ccache the same command, so they
    share entries: with `-isystem=DIR` respelled (on the line or in an options file),
    without it as CMake wrote it."""
    (tmp_path / "includes_CUDA.rsp").write_text('-isystem="/w/.envs/3687/pybind11/include"\n')
    cache = _fake_tool(tmp_path / "ccache", 'printf "%s\\n" "$@"')
    env = toolchain_environment(Launch(str(cache)), "cmake", tmp_path / "bin",
                                scripts_dir=tmp_path / "scripts", environ={"PATH": "/usr/bin:/bin"})
    script = env["CMAKE_CUDA_COMPILER_LAUNCHER"]
    done = subprocess.run([script, *line], capture_output=True, text=True, check=True,
                          cwd=tmp_path, env={"PATH": "/usr/bin:/bin"})  # fmt: skip
    handed = done.stdout.splitlines()
    monkeypatch.chdir(tmp_path)  # where the options file is, as for the script
    assert handed == compile_command(str(cache), line[0], line[1:], environ={})[1:]
    assert ("-isystem" in handed) == (line in (CMAKE_NINJA_CUDA_SYSTEM, CMAKE_MAKE_CUDA_OPTIONS_FILE))
    assert "-MD" in handed
    assert not any(arg.startswith("-isystem=") for arg in handed)


def test_compile_command_and_environment() -> None:
    assert compile_command("/c/ccache", "/cuda/bin/nvcc", ["-c", "k.cu"]) == [
        "/c/ccache", "/cuda/bin/nvcc", "-c", "k.cu", "-MD", "-MF", "k.o.d"
    ]  # fmt: skip
    assert compile_command(None, "g++", ["-c", "a.cc"]) == ["g++", "-c", "a.cc"]
    assert compile_command("", "nvcc", ["-c", "k.cu"])[0] == "nvcc"
    env = launch.compile_environment("/c/ccache", "nvcc", {"CCACHE_NODEPEND": "1", "X": "y"})
    assert env == {"CCACHE_DEPEND": "1", "X": "y"}
    assert launch.compile_environment("/c/ccache", "g++", {}) is None
    assert launch.compile_environment("/c/sccache", "nvcc", {}) is None


def _fake_tool(path: Path, body: str) -> Path:
    path.write_text("#!/bin/sh\n" + body + "\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def test_launch_script_execs_the_cache_with_depfile_flags(tmp_path: Path) -> None:
    cache = _fake_tool(tmp_path / "ccache", 'echo "cache:$* depend=$CCACHE_DEPEND"')
    result = subprocess.run(
        [sys.executable, "-S", "-E", str(LAUNCH), str(cache), "/cuda/bin/nvcc", "-c", "k.cu"],
        capture_output=True, text=True, check=True, cwd=tmp_path, env={"PATH": "/usr/bin:/bin"},
    )  # fmt: skip
    assert result.stdout.strip() == "cache:/cuda/bin/nvcc -c k.cu -MD -MF k.o.d depend=1"
    # one of nvcc's own host passes: the compiler itself, never the cache
    result = subprocess.run(
        [sys.executable, "-S", "-E", str(LAUNCH), str(cache), "echo", *NVCC_HOST_PASSES[2]],
        capture_output=True, text=True, check=True, cwd=tmp_path, env={"PATH": "/usr/bin:/bin"},
    )  # fmt: skip
    assert result.stdout.strip() == shlex.join(NVCC_HOST_PASSES[2])
    # no cache: the compiler itself, found on PATH
    result = subprocess.run(
        [*launch.launcher_argv(sys.executable), "", "echo", "-c", "x.c"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert result.stdout.strip() == "-c x.c"


# ------------------------------------------------------------------ decisions


def test_decisions_for_real_lines() -> None:
    config = seat("/src")
    cmake = decide(CMAKE_NINJA_CUDA[0], CMAKE_NINJA_CUDA[1:], "/b", config, called_by_nvcc=False)
    assert cmake.tu == "a.cu"
    assert cmake.action == ("compile" if shard_of("a.cu", 3) == 0 else "stub")
    torch = decide(TORCH_NINJA_NVCC[0], TORCH_NINJA_NVCC[1:], "/src", config, called_by_nvcc=False)
    assert torch.tu == "csrc/k.cu"
    assert torch.output == "/src/build/temp.linux-x86_64-cpython-311/csrc/k.o"
    tools = decide(SETUPTOOLS_GCC[0], SETUPTOOLS_GCC[1:], "/src", config, called_by_nvcc=False)
    assert tools.tu == "csrc/a.cpp"
    assert tools.output == "/src/build/temp.linux-x86_64-cpython-311/csrc/a.o"


@pytest.mark.parametrize("args", NVCC_HOST_PASSES)
def test_nvcc_host_passes_are_never_partitioned(args: list[str]) -> None:
    for index in range(3):
        decision = decide("g++", args, "/src", seat(index=index), called_by_nvcc=False)
        assert decision.action == "host-pass"
        assert decision.tu is None


def test_host_pass_by_parent_process() -> None:
    decision = decide("g++", ["-c", "/src/a.cpp", "-o", "a.o"], "/src", seat(), called_by_nvcc=True)
    assert decision.action == "host-pass"


def test_parent_is_nvcc_reads_the_real_process_tree(tmp_path: Path) -> None:
    fake_nvcc = tmp_path / "nvcc"
    fake_nvcc.symlink_to("/bin/sh")  # a process whose comm is "nvcc"
    code = f"import sys; sys.path[0] = {wrapper.SRC_DIR!r}; "
    code += "from wheelkiln.cache.launch import parent_is_nvcc; print(parent_is_nvcc())"
    command = f"{shlex.quote(sys.executable)} -S -E -c {shlex.quote(code)}; true"
    via_nvcc = subprocess.run([str(fake_nvcc), "-c", command], capture_output=True, text=True)
    via_nvcc_and_sh = subprocess.run(
        [str(fake_nvcc), "-c", f"sh -c {shlex.quote(command)}; true"],
        capture_output=True, text=True,
    )  # fmt: skip
    plain = subprocess.run(["/bin/sh", "-c", command], capture_output=True, text=True)
    assert via_nvcc.stdout.strip() == "True"
    assert via_nvcc_and_sh.stdout.strip() == "True"
    assert plain.stdout.strip() == "False"


@pytest.mark.parametrize(
    ("argv", "cwd"),
    [
        (
            shlex.split(
                "/usr/bin/c++ -o CMakeFiles/cmTC_1a2b3.dir/CheckIncludeFile.cxx.o "
                "-c /b/CMakeFiles/CMakeScratch/TryCompile-Xy12/CheckIncludeFile.cxx"
            ),
            "/b/CMakeFiles/CMakeScratch/TryCompile-Xy12",
        ),
        (["cc", "-c", "conftest.c", "-o", "conftest.o"], "/src"),
        (["cc", "-c", "/b/meson-private/tmpa1b2/testfile.c", "-o", "x.o"], "/b"),
        (["/usr/bin/nvcc", "-c", "CMakeCUDACompilerId.cu"], "/b/CMakeFiles/3.25.1/CompilerIdCUDA"),
        (["c++", "-c", "flagcheck.cpp", "-o", "flagcheck.o", "-std=c++17"], "/tmp/tmpq8w1z"),
        (["g++", "cmTC_99.o", "-o", "cmTC_99"], "/b/CMakeFiles/CMakeTmp"),
        (["gcc", "-fopenmp", "-c", "csrc/omp_check.c", "-o", "/dev/null"], "/src"),
        (["gcc", "-x", "c", "-c", "-", "-o", "check.o"], "/src"),
    ],
)
def test_probes_always_run(argv: list[str], cwd: str) -> None:
    for index in range(3):
        assert decide_for(argv, cwd, seat("/src", index)) == "probe"


@pytest.mark.parametrize(
    ("argv", "cwd"),
    [
        # pybind11's has_flag and psutil's header checks, in the job's own temp directory
        (["c++", "-c", "flagcheck.cpp", "-o", "flagcheck.o", "-std=c++17"], "/w/job/tmp/tmpq8w1z"),
        (["cc", "-c", "/w/job/tmp/tmpk2x9q1.c", "-o", "/w/job/tmp/tmpz/p.o"], "/w/job/src"),
        # a backend's copy of the tree (frozenlist's)
        (["cc", "-c", "pkg/_m.c", "-o", "build/t/pkg/_m.o"], "/w/job/tmp/.tmp-pkg-pep517-ab12cd34/src"),
    ],
)
def test_a_tu_in_the_jobs_temp_directory_is_a_probe_every_shard_caches(argv: list[str], cwd: str) -> None:
    # Never stubbed (a stubbed probe would change the build's configuration), a failure
    # is an answer, and it goes through the cache: its name is the same in every job, so
    # the link job hits.
    environ = {"KILN_JOB_TMP": "/w/job/tmp"}
    for index in range(3):
        decision = decide(argv[0], argv[1:], cwd, seat("/w/job/src", index), called_by_nvcc=False,
                          environ=environ)  # fmt: skip
        assert (decision.action, decision.cached) == ("probe", True)
    # In another temp directory: a probe, past the cache.
    outside = decide(argv[0], argv[1:], cwd.replace("/w/job/tmp", "/tmp"), seat("/w/job/src"),
                     called_by_nvcc=False, environ=environ)  # fmt: skip
    if "/w/job/tmp" not in " ".join(argv):
        assert (outside.action, outside.cached) == ("probe", False)


@pytest.mark.parametrize(
    "argv",
    [
        ["gcc", "-E", "csrc/a.c"],
        ["nvcc", "-M", "csrc/k.cu"],
        ["gcc", "-c", "csrc/a.c", "csrc/b.c"],
        ["gcc", "--version"],
        ["g++", "-x", "c++-header", "-c", "pch.h", "-o", "pch.h.gch"],
        ["nvcc", "-ptx", "csrc/k.cu", "-o", "k.ptx"],
    ],
)
def test_non_tu_calls_pass_through(argv: list[str]) -> None:
    assert {decide_for(argv, "/src", seat("/src", i)) for i in range(3)} == {"passthrough"}


@pytest.mark.parametrize(
    "argv",
    [
        ["g++", "-shared", "build/a.o", "build/b.o", "-o", "x.so"],
        ["g++", "build/test1.o", "-o", "build/test1"],
        ["nvcc", "-dlink", "a.o", "-o", "dlink.o"],
    ],
)
def test_links(argv: list[str]) -> None:
    assert decide_for(argv) == "link"


def test_every_tu_has_exactly_one_compiling_shard() -> None:
    tus = [f"csrc/k{n}.cu" for n in range(40)]
    for tu in tus:
        argv = ["nvcc", "-c", f"/src/{tu}", "-o", f"/b/{tu}.o"]
        actions = [decide_for(argv, "/b", seat("/src", i, 3)) for i in range(3)]
        assert sorted(actions) == ["compile", "stub", "stub"], tu


def test_source_mode_is_a_logged_pass_through() -> None:
    config = SeatConfig(package_root="/src")  # KILN_SHARD_COUNT unset
    decision = decide("gcc", ["-c", "csrc/a.c"], "/src", config, called_by_nvcc=False)
    assert decision.action == "passthrough"
    assert decision.tu == "csrc/a.c"


def test_config_from_environ() -> None:
    config = SeatConfig.from_environ(
        {"KILN_SHARD_INDEX": "1", "KILN_SHARD_COUNT": "4", "KILN_PACKAGE_ROOT": "/src"}
    )
    assert (config.shard_index, config.shard_count, config.seat_active) == (1, 4, True)
    assert not SeatConfig.from_environ({"KILN_SHARD_COUNT": ""}).seat_active
    with pytest.raises(wrapper.WrapperConfigError, match="outside"):
        SeatConfig.from_environ(
            {"KILN_SHARD_INDEX": "4", "KILN_SHARD_COUNT": "4", "KILN_PACKAGE_ROOT": "/s"}
        )
    with pytest.raises(wrapper.WrapperConfigError, match="KILN_PACKAGE_ROOT"):
        SeatConfig.from_environ({"KILN_SHARD_INDEX": "0", "KILN_SHARD_COUNT": "2"})


def test_log_record_encoding_round_trips() -> None:
    record: dict[str, object] = {
        "tu": 'csrc/we"ird\\name\t.cu',
        "action": "stub",
        "seconds": 0.0012345678,
        "exit": 0,
        "output": "/b/caf\u00e9/\udcff.o",  # a non-UTF-8 byte, as os.fsdecode gives it
        "argv": ["nvcc", '-DX="a b"', "-c", "k.cu\n"],
        "cwd": "/b",
        "pid": 42,
    }
    line = encode_record(record)
    assert line.endswith(b"\n") and line.count(b"\n") == 1
    decoded = json.loads(line)
    assert decoded == {**record, "seconds": 0.001235}


# ------------------------------------------------------------------ the wrapper, for real


def _run_wrapper(
    argv: list[str], cwd: Path, env: dict[str, str]
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*wrapper.launcher_argv(sys.executable), *argv],
        cwd=cwd, env=env, capture_output=True, text=True,
    )  # fmt: skip


def test_same_source_compiled_twice_lands_in_one_shard(tmp_path: Path) -> None:
    """Run the wrapper for real (fake compiler, no cache) in three private trees."""
    fake_cc = _fake_tool(
        tmp_path / "fake-cc",
        'out=""; while [ $# -gt 0 ]; do [ "$1" = -o ] && out="$2"; shift; done\n'
        'printf "REAL OBJECT\\n" > "$out"',
    )
    stub = tmp_path / "empty.o"
    stub.write_bytes(b"\x7fELF stub object")
    sources = [f"csrc/k{n}.cu" for n in range(8)] + ["csrc/common.cpp"]
    # the same sources twice, with different outputs and flags (e.g. two extensions)
    commands = [[str(fake_cc), "-c", src, "-o", f"build/a/{src}.o", "-O2"] for src in sources]
    commands += [
        [str(fake_cc), "-DVARIANT=2", "-c", src, "-o", f"build/b/{src}.o", "-O3"] for src in sources
    ]
    compiled_by: dict[str, list[int]] = {}
    for index in range(3):
        tree = tmp_path / f"shard{index}" / "tree"  # each shard's own absolute root
        (tree / "csrc").mkdir(parents=True)
        for src in sources:
            (tree / src).write_text("int x;\n")
            (tree / "build" / "a" / src).parent.mkdir(parents=True, exist_ok=True)
            (tree / "build" / "b" / src).parent.mkdir(parents=True, exist_ok=True)
        log = tmp_path / f"shard{index}" / "wrapper.jsonl"
        env = {
            "PATH": "/usr/bin:/bin",
            "KILN_SHARD_INDEX": str(index),
            "KILN_SHARD_COUNT": "3",
            "KILN_PACKAGE_ROOT": str(tree),
            "KILN_SHARD_LOG": str(log),
            "KILN_CACHE": "",
            "KILN_STUB_OBJECT": str(stub),
        }
        for command in commands:
            result = _run_wrapper(command, tree, env)
            assert result.returncode == 0, result.stderr
        records = [json.loads(line) for line in log.read_text().splitlines()]
        assert len(records) == len(commands)
        for record in records:
            output = Path(record["output"])
            relative = output.relative_to(tree).as_posix()
            if record["action"] == "compile":
                assert output.read_text() == "REAL OBJECT\n"
                compiled_by.setdefault(relative, []).append(index)
            else:
                assert record["action"] == "stub"
                assert output.read_bytes() == stub.read_bytes()
                assert record["argv"][0] == str(fake_cc)  # enough to compile it later
    expected = {f"build/{variant}/{src}.o" for variant in "ab" for src in sources}
    assert set(compiled_by) == expected
    assert all(len(shards) == 1 for shards in compiled_by.values()), compiled_by
    for src in sources:  # same key, same shard
        assert compiled_by[f"build/a/{src}.o"] == compiled_by[f"build/b/{src}.o"]
        assert compiled_by[f"build/a/{src}.o"] == [shard_of(tu_key(src, "/t", "/t"), 3)]
    assert len({shards[0] for shards in compiled_by.values()}) > 1  # not all in one shard


def test_wrapper_script_by_path_and_config_errors(tmp_path: Path) -> None:
    env = {"PATH": "/usr/bin:/bin", "KILN_SHARD_COUNT": "2", "KILN_SHARD_INDEX": "0"}
    result = subprocess.run(
        [sys.executable, "-S", "-E", str(WRAPPER), "true", "-c", "a.c"],
        cwd=tmp_path, env=env, capture_output=True, text=True,
    )  # fmt: skip
    assert result.returncode == 2
    assert "KILN_PACKAGE_ROOT" in result.stderr
    # source mode by path: pure pass-through, still logged
    log = tmp_path / "log.jsonl"
    result = subprocess.run(
        [sys.executable, "-S", "-E", str(WRAPPER), "true", "-c", "a.c", "-o", "a.o"],
        cwd=tmp_path, capture_output=True, text=True,
        env={"PATH": "/usr/bin:/bin", "KILN_SHARD_LOG": str(log), "KILN_PACKAGE_ROOT": "."},
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    (record,) = [json.loads(line) for line in log.read_text().splitlines()]
    assert record["action"] == "passthrough"
    assert record["tu"] == "a.c"
    assert record["output"] == str(tmp_path / "a.o")


def test_latest_records_finds_each_output_in_one_pass(tmp_path: Path) -> None:
    log = tmp_path / "wrapper.jsonl"
    odd = str(tmp_path / 'b "quoted", "argv": x.o')  # the separators inside a path
    records = [
        wrapper._record("a.cpp", "stub", 0.1, 0, str(tmp_path / "a.o"), ["g++", "-c", "a.cpp"], "/w"),
        wrapper._record("b.cpp", "stub", 0.1, 0, odd, ["g++", "-c", "b.cpp", "-o", odd], "/w"),
        wrapper._record(None, "link", 0.1, 0, str(tmp_path / "x.so"), ["g++", str(tmp_path / "a.o")], "/w"),
        wrapper._record("a.cpp", "link-probe-rebuild", 0.2, 0, str(tmp_path / "a.o"), ["g++"], "/w"),
    ]
    text = b"".join(encode_record(record) for record in records)
    torn = encode_record(wrapper._record("b.cpp", "compile", 1, 0, odd, [], "/w"))[:-12]
    assert b'"argv": ' in torn  # torn after the output it names
    log.write_bytes(text + torn)
    latest = wrapper.latest_records(str(log), [str(tmp_path / "a.o"), odd, str(tmp_path / "c.o")])
    assert {path: record["action"] for path, record in latest.items()} == {
        str(tmp_path / "a.o"): "link-probe-rebuild",  # the later record wins
        odd: "stub",  # a torn last line leaves the one before it
    }
    assert wrapper.latest_records(str(tmp_path / "missing.jsonl"), [odd]) == {}


@pytest.mark.parametrize(
    ("argv", "dirs", "libraries", "objects"),
    [
        (["g++", "-shared", "a.o", "b.obj", "c.lo", "libd.a", "-Lbuild", "-L", "lib", "-lapi", "-l", "m",
          "-l:libx.so.1", "-o", "x.so"], ["build", "lib"], ["api", "m", ":libx.so.1"], ["a.o", "b.obj", "c.lo"]),
        # nvcc: -ldir takes a value and -lineinfo is a flag, neither a library
        (["nvcc", "-ldir", "/opt/libdevice", "-lineinfo", "--library-path=/opt/lib", "--library=cublas",
          "-lcudart", "k.o", "-o", "k"], ["/opt/lib"], ["cublas", "cudart"], ["k.o"]),
    ],
)  # fmt: skip
def test_link_libraries_and_objects(argv: list[str], dirs: list[str], libraries: list[str],
                                    objects: list[str]) -> None:
    parsed = parse_compiler_args(argv[0], argv[1:])
    assert (parsed.library_dirs, parsed.libraries, parsed.object_operands()) == (dirs, libraries, objects)
