"""Environment variables that change a compiler's output must change the cache key.

Each test compiles a tiny program through ccache configured as kiln configures it
(:class:`wheelkiln.cache.ccache.Ccache`, the caller's environment as
:func:`wheelkiln.builder.job_env.inherited_environment` leaves it, nvcc through kiln's
launcher), changes one variable, compiles again, and checks both the cache's verdict
and the object: the program's exit code (or a symbol) shows which value it was built
with. A stale hit shows up as the old value.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from collections.abc import Mapping
from pathlib import Path

import pytest

from tests.conftest import Kiln
from wheelkiln.builder.job_env import inherited_environment
from wheelkiln.builder.toolchain import find_nvcc
from wheelkiln.cache import launch
from wheelkiln.cache.backend import CacheConfig
from wheelkiln.cache.ccache import Ccache

pytestmark = pytest.mark.compile


class KilnCcache:
    """ccache as a kiln build runs it, over a private cache directory."""

    def __init__(self, root: Path, environ: Mapping[str, str] | None = None) -> None:
        self.root = root
        self.backend = Ccache(CacheConfig(cache_dir=root / "cache", base_dir=root))
        self.backend.start()
        self.env = {
            **inherited_environment(os.environ if environ is None else environ),
            **self.backend.environment(),
        }

    def compile(
        self, argv: list[str], change: Mapping[str, str] | None = None, *, launcher: bool = False
    ) -> str:
        """Compile once; 'hit', 'miss' or 'uncacheable' by the cache's counters."""
        self.backend.zero_stats()
        env = {**self.env, **(change or {})}
        if launcher:  # kiln's nvcc launcher: python launch.py CACHE NVCC ARGS
            command = [*launch.launcher_argv(), self.backend.executable(), *argv]
        else:
            command = [self.backend.executable(), *argv]
        done = subprocess.run(
            command, cwd=self.root, env=env, capture_output=True, text=True, check=False
        )
        assert done.returncode == 0, done.stderr
        stats = self.backend.stats()
        assert stats.hits + stats.misses + stats.uncacheable == 1, stats.raw
        return "hit" if stats.hits else "miss" if stats.misses else "uncacheable"


def run_program(root: Path, linker: str, obj: str) -> int:
    """Link *obj* into a program and return its exit code (the value it was built with)."""
    exe = root / "program"
    subprocess.run([linker, obj, "-o", str(exe)], cwd=root, check=True, capture_output=True)
    return subprocess.run([str(exe)], check=False).returncode


def two_headers(root: Path) -> tuple[Path, Path]:
    """Directories ``a`` and ``b``, each with a ``val.h`` defining VAL as 1 and 2."""
    dirs = (root / "a", root / "b")
    for value, directory in enumerate(dirs, start=1):
        directory.mkdir()
        (directory / "val.h").write_text(f"#define VAL {value}\n")
    return dirs


@pytest.mark.parametrize(
    ("variable", "compiler", "suffix"),
    [
        ("CPATH", "gcc", ".c"),
        ("C_INCLUDE_PATH", "gcc", ".c"),
        ("CPATH", "g++", ".cpp"),
        ("CPLUS_INCLUDE_PATH", "g++", ".cpp"),
    ],
)
def test_include_path_variables_key_the_compile(
    tmp_path: Path, variable: str, compiler: str, suffix: str
) -> None:
    a, b = two_headers(tmp_path)
    (tmp_path / f"main{suffix}").write_text("#include <val.h>\nint main(void) { return VAL; }\n")
    cache = KilnCcache(tmp_path)
    argv = [compiler, "-c", f"main{suffix}", "-o", "main.o"]
    assert cache.compile(argv, {variable: str(a)}) == "miss"
    assert run_program(tmp_path, compiler, "main.o") == 1
    assert cache.compile(argv, {variable: str(a)}) == "hit"  # the entry is there to serve
    assert cache.compile(argv, {variable: str(b)}) == "miss"
    assert run_program(tmp_path, compiler, "main.o") == 2
    assert cache.compile(argv, {variable: str(a)}) == "hit"
    assert run_program(tmp_path, compiler, "main.o") == 1


def _assembler_dir(root: Path, name: str, mark: int) -> Path:
    """A directory holding an ``as`` that stamps the symbol ``kiln_mark = mark``."""
    directory = root / name
    directory.mkdir(parents=True)
    real_as = shutil.which("as")
    assert real_as is not None
    script = directory / "as"
    script.write_text(f'#!/bin/sh\nexec {real_as} --defsym kiln_mark={mark} "$@"\n')
    script.chmod(0o755)
    return directory


def _mark(obj: Path) -> int | None:
    symbols = subprocess.run(["nm", str(obj)], capture_output=True, text=True, check=True).stdout
    found = re.search(r"^([0-9a-f]+) a kiln_mark$", symbols, re.MULTILINE)
    return int(found[1], 16) if found else None


def _gcc_exec_prefix(root: Path, name: str, mark: int) -> str:
    """A GCC_EXEC_PREFIX whose ``as`` stamps *mark* (and whose cc1 is gcc's own)."""
    prefix = _assembler_dir(root, name, mark)
    machine = subprocess.run(["gcc", "-dumpmachine"], capture_output=True, text=True).stdout
    version = subprocess.run(["gcc", "-dumpversion"], capture_output=True, text=True).stdout
    libexec = prefix / machine.strip() / version.strip()
    libexec.mkdir(parents=True)
    cc1 = subprocess.run(["gcc", "-print-prog-name=cc1"], capture_output=True, text=True).stdout
    (libexec / "cc1").symlink_to(cc1.strip())
    return f"{prefix}/"


@pytest.mark.parametrize("variable", ["COMPILER_PATH", "GCC_EXEC_PREFIX"])
def test_gcc_program_lookup_variables_key_the_compile(tmp_path: Path, variable: str) -> None:
    """gcc finds ``as`` (and cc1) through these: another assembler, another object."""
    if variable == "COMPILER_PATH":
        one, two = (str(_assembler_dir(tmp_path, f"tools{m}", m)) for m in (1, 2))
    else:
        one, two = (_gcc_exec_prefix(tmp_path, f"prefix{m}", m) for m in (1, 2))
    (tmp_path / "f.c").write_text("int f(void) { return 1; }\n")
    cache = KilnCcache(tmp_path)
    argv = ["gcc", "-c", "f.c", "-o", "f.o"]
    assert cache.compile(argv, {variable: one}) == "miss"
    assert _mark(tmp_path / "f.o") == 1
    assert cache.compile(argv, {variable: one}) == "hit"
    assert cache.compile(argv, {variable: two}) == "miss"
    assert _mark(tmp_path / "f.o") == 2


DATE_PROGRAM = '#include <stdio.h>\nint main(void) { puts(__DATE__); return 0; }\n'


def test_source_date_epoch_keys_a_compile_that_reads_the_date(tmp_path: Path) -> None:
    (tmp_path / "d.c").write_text(DATE_PROGRAM)
    cache = KilnCcache(tmp_path)
    argv = ["gcc", "-c", "d.c", "-o", "d.o"]
    assert cache.compile(argv, {"SOURCE_DATE_EPOCH": "0"}) == "miss"
    assert cache.compile(argv, {"SOURCE_DATE_EPOCH": "0"}) == "hit"
    assert cache.compile(argv, {"SOURCE_DATE_EPOCH": "1700000000"}) == "miss"
    subprocess.run(["gcc", "d.o", "-o", "d"], cwd=tmp_path, check=True)
    shown = subprocess.run([str(tmp_path / "d")], capture_output=True, text=True).stdout
    assert shown.strip() == "Nov 14 2023"


def test_library_path_does_not_change_a_compile(tmp_path: Path) -> None:
    """LIBRARY_PATH is read by links, which no cache stores: a compile may hit across it,
    and the object it serves is the one the compiler makes."""
    (tmp_path / "f.c").write_text("int f(void) { return 41 + 1; }\n")
    (tmp_path / "l1").mkdir()
    (tmp_path / "l2").mkdir()
    cache = KilnCcache(tmp_path)
    argv = ["gcc", "-c", "f.c", "-o", "f.o"]
    assert cache.compile(argv, {"LIBRARY_PATH": str(tmp_path / "l1")}) == "miss"
    assert cache.compile(argv, {"LIBRARY_PATH": str(tmp_path / "l2")}) == "hit"
    subprocess.run(
        ["gcc", "-c", "f.c", "-o", "direct.o"],
        cwd=tmp_path,
        env={**os.environ, "LIBRARY_PATH": str(tmp_path / "l2")},
        check=True,
    )
    assert (tmp_path / "f.o").read_bytes() == (tmp_path / "direct.o").read_bytes()


@pytest.mark.parametrize("variable", ["DEPENDENCIES_OUTPUT", "SUNPRO_DEPENDENCIES"])
def test_dependency_output_variables_are_removed_from_builds(tmp_path: Path, variable: str) -> None:
    """ccache refuses to cache while one is set (never stale, but every compile of a
    sharded build would run again in the link job); kiln's builds never inherit them."""
    (tmp_path / "f.c").write_text("int f(void) { return 3; }\n")
    argv = ["gcc", "-c", "f.c", "-o", "f.o"]
    leaked = {**os.environ, variable: str(tmp_path / "f.deps")}
    (tmp_path / "raw").mkdir()
    shutil.copy(tmp_path / "f.c", tmp_path / "raw" / "f.c")
    raw = KilnCcache(tmp_path / "raw")
    raw.env[variable] = leaked[variable]  # set after kiln's clean-up, as a build might
    assert raw.compile(argv) == "uncacheable"
    kiln = KilnCcache(tmp_path, environ=leaked)
    assert variable not in kiln.env
    assert kiln.compile(argv) == "miss"
    assert kiln.compile(argv) == "hit"


# --------------------------------------------------------------------------- CCACHE_*

LEAKS = {
    "CCACHE_DISABLE": "1",
    "CCACHE_RECACHE": "1",
    "CCACHE_NODEPEND": "1",
    "CCACHE_NODIRECT": "1",
    "CCACHE_SLOPPINESS": "time_macros,include_file_mtime,include_file_ctime",
    "CCACHE_BASEDIR": "/",
    "CCACHE_HASHDIR": "1",
    "CCACHE_COMPILERCHECK": "none",
    "CCACHE_NAMESPACE": "someone-else",
    "CCACHE_READONLY": "1",
    "CCACHE_EXTRAFILES": "/dev/null",
}


def _show_config(env: Mapping[str, str]) -> dict[str, tuple[str, str]]:
    """``ccache --show-config`` as {key: (origin, value)}."""
    ccache = Ccache(CacheConfig(cache_dir=Path("/unused"), base_dir=Path("/unused")))
    out = subprocess.run(
        [ccache.executable(), "--show-config"], env=dict(env), capture_output=True, text=True
    ).stdout
    shown: dict[str, tuple[str, str]] = {}
    for line in out.splitlines():
        found = re.match(r"^\((\w+)\) (\w+) = ?(.*)$", line)
        if found:
            shown[found[2]] = (found[1], found[3])
    return shown


def test_callers_ccache_settings_never_reach_kiln_compiles(tmp_path: Path) -> None:
    user_dir = tmp_path / "users-cache"
    config = tmp_path / "users.conf"
    config.write_text("sloppiness = time_macros\nrun_second_cpp = false\nhash_dir = true\n")
    leaked = {
        **os.environ,
        **LEAKS,
        "CCACHE_DIR": str(user_dir),
        "CCACHE_CONFIGPATH": str(config),
    }
    cache = KilnCcache(tmp_path, environ=leaked)
    shown = _show_config(cache.env)
    assert shown["cache_dir"] == ("environment", str(tmp_path / "cache"))
    assert shown["base_dir"] == ("environment", str(tmp_path))
    assert shown["hash_dir"] == ("environment", "false")
    assert shown["depend_mode"] == ("environment", "true")
    assert shown["compiler_check"] == ("environment", "%compiler% --version")
    assert shown["sloppiness"] == ("environment", "include_file_ctime")  # not the caller's
    # Nothing else comes from the caller's environment or a configuration file.
    kiln_keys = {"cache_dir", "base_dir", "hash_dir", "depend_mode", "compiler_check",
                 "max_size", "sloppiness"}  # fmt: skip
    foreign = {
        key: origin_value
        for key, origin_value in shown.items()
        if origin_value[0] != "default" and key not in kiln_keys
    }
    assert foreign == {}
    # A real compile: cached in kiln's directory, and the date is in the key again.
    (tmp_path / "d.c").write_text(DATE_PROGRAM)
    argv = ["gcc", "-c", "d.c", "-o", "d.o"]
    assert cache.compile(argv, {"SOURCE_DATE_EPOCH": "0"}) == "miss"
    assert cache.compile(argv, {"SOURCE_DATE_EPOCH": "0"}) == "hit"
    assert cache.compile(argv, {"SOURCE_DATE_EPOCH": "86400"}) == "miss"
    assert not user_dir.exists()


def test_a_configuration_file_in_the_cache_directory_is_ignored(tmp_path: Path) -> None:
    """A shard archive unpacks into the cache directory: a ccache.conf it carries (or
    /etc/ccache.conf) must not loosen the key."""
    cache = KilnCcache(tmp_path)
    (tmp_path / "cache").mkdir(exist_ok=True)
    (tmp_path / "cache" / "ccache.conf").write_text("sloppiness = time_macros\n")
    # kiln's own setting, not the file's time_macros
    assert _show_config(cache.env)["sloppiness"] == ("environment", "include_file_ctime")
    (tmp_path / "d.c").write_text(DATE_PROGRAM)
    argv = ["gcc", "-c", "d.c", "-o", "d.o"]
    assert cache.compile(argv, {"SOURCE_DATE_EPOCH": "0"}) == "miss"
    assert cache.compile(argv, {"SOURCE_DATE_EPOCH": "86400"}) == "miss"


def test_a_leaked_sloppiness_would_serve_a_stale_object(tmp_path: Path) -> None:
    """The control for the two tests above: the same leak, not removed, is a stale hit."""
    cache = KilnCcache(tmp_path)
    cache.env["CCACHE_SLOPPINESS"] = "time_macros"
    (tmp_path / "d.c").write_text(DATE_PROGRAM)
    argv = ["gcc", "-c", "d.c", "-o", "d.o"]
    assert cache.compile(argv, {"SOURCE_DATE_EPOCH": "0"}) == "miss"
    assert cache.compile(argv, {"SOURCE_DATE_EPOCH": "1700000000"}) == "hit"
    subprocess.run(["gcc", "d.o", "-o", "d"], cwd=tmp_path, check=True)
    shown = subprocess.run([str(tmp_path / "d")], capture_output=True, text=True).stdout
    assert shown.strip() == "Jan  1 1970"  # built for SOURCE_DATE_EPOCH=0: stale


# --------------------------------------------------------------------------- nvcc

CU_PROGRAM = """
#ifndef X
#define X 0
#endif
__global__ void kernel(int *out) { *out = X; }
int main() { return X; }
"""


def _nvcc() -> str:
    nvcc = find_nvcc()
    assert nvcc is not None
    return nvcc


NVCC_ARGS = ["-c", "k.cu", "-o", "k.o", "-arch=sm_80"]


@pytest.mark.cuda
@pytest.mark.parametrize("variable", ["NVCC_APPEND_FLAGS", "NVCC_PREPEND_FLAGS"])
def test_nvcc_flag_variables_key_the_compile(tmp_path: Path, variable: str) -> None:
    (tmp_path / "k.cu").write_text(CU_PROGRAM)
    cache = KilnCcache(tmp_path)
    nvcc = _nvcc()
    argv = [nvcc, *NVCC_ARGS]
    assert cache.compile(argv, {variable: "-DX=1"}, launcher=True) == "miss"
    assert run_program(tmp_path, nvcc, "k.o") == 1
    assert cache.compile(argv, {variable: "-DX=1"}, launcher=True) == "hit"
    assert cache.compile(argv, {variable: "-DX=2"}, launcher=True) == "miss"
    assert run_program(tmp_path, nvcc, "k.o") == 2


@pytest.mark.cuda
def test_nvcc_ccbin_variable_keys_the_compile(tmp_path: Path) -> None:
    """NVCC_CCBIN picks nvcc's host compiler; ccache hashes a -ccbin's content."""
    hosts = []
    for value in (1, 2):
        host = tmp_path / f"host{value}" / "g++"
        host.parent.mkdir()
        host.write_text(f'#!/bin/sh\nexec {shutil.which("g++")} -DX={value} "$@"\n')
        host.chmod(0o755)
        hosts.append(str(host))
    (tmp_path / "k.cu").write_text(CU_PROGRAM)
    cache = KilnCcache(tmp_path)
    nvcc = _nvcc()
    argv = [nvcc, *NVCC_ARGS]
    assert cache.compile(argv, {"NVCC_CCBIN": hosts[0]}, launcher=True) == "miss"
    assert run_program(tmp_path, nvcc, "k.o") == 1
    assert cache.compile(argv, {"NVCC_CCBIN": hosts[1]}, launcher=True) == "miss"
    assert run_program(tmp_path, nvcc, "k.o") == 2


@pytest.mark.cuda
def test_nvcc_include_path_variable_keys_the_compile(tmp_path: Path) -> None:
    a, b = two_headers(tmp_path)
    (tmp_path / "k.cu").write_text("#include <val.h>\n" + CU_PROGRAM.replace("X", "VAL"))
    cache = KilnCcache(tmp_path)
    nvcc = _nvcc()
    argv = [nvcc, *NVCC_ARGS]
    assert cache.compile(argv, {"CPATH": str(a)}, launcher=True) == "miss"
    assert cache.compile(argv, {"CPATH": str(a)}, launcher=True) == "hit"
    assert cache.compile(argv, {"CPATH": str(b)}, launcher=True) == "miss"
    assert run_program(tmp_path, nvcc, "k.o") == 2


def _dryrun(nvcc: str, args: list[str], env: Mapping[str, str], cwd: Path) -> list[str]:
    """nvcc's planned commands, with its random temp-file names made equal."""
    done = subprocess.run(
        [nvcc, "-dryrun", *args], cwd=cwd, env=dict(env), capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    lines = [
        line
        for line in done.stderr.splitlines()
        if line.startswith("#$ ") and "=" not in line.split()[1]  # commands, not settings
    ]
    return [re.sub(r"tmpxft[\w.-]*", "tmpxft", line) for line in lines]


@pytest.mark.cuda
@pytest.mark.parametrize(
    "flags",
    [
        {"NVCC_APPEND_FLAGS": "-DX=1   -std=c++20 --threads 2"},
        {"NVCC_PREPEND_FLAGS": "-O3 -Xcompiler -fno-math-errno", "NVCC_APPEND_FLAGS": "-lineinfo"},
        {"NVCC_CCBIN": "g++"},
    ],
)
def test_moved_nvcc_flags_run_the_same_commands(tmp_path: Path, flags: dict[str, str]) -> None:
    """What the launcher puts on the command line makes nvcc plan exactly what the
    variables made it plan."""
    (tmp_path / "k.cu").write_text(CU_PROGRAM)
    nvcc = _nvcc()
    base = {k: v for k, v in os.environ.items() if not k.startswith("NVCC_")}
    args = [*NVCC_ARGS, "-MD", "-MF", "k.d"]  # a depfile already: the launcher adds none
    from_env = _dryrun(nvcc, args, {**base, **flags}, tmp_path)
    command = launch.compile_command(None, nvcc, args, {**base, **flags})
    moved_env = launch.compile_environment(None, nvcc, {**base, **flags})
    assert moved_env is not None and not set(flags) & set(moved_env)
    from_argv = _dryrun(nvcc, command[1:], moved_env, tmp_path)
    # Under --threads, nvcc starts independent steps at once and prints each as it
    # starts: the same plan comes out in either order.
    threaded = "--threads" in " ".join(flags.values())
    assert (sorted(from_argv) if threaded else from_argv) == (
        sorted(from_env) if threaded else from_env
    )
    assert len(from_env) > 3
    plain = _dryrun(nvcc, args, base, tmp_path)
    assert sorted(plain) != sorted(from_env)  # the flags do change what nvcc runs


@pytest.mark.cuda
def test_quoted_nvcc_flags_are_refused_not_cached(tmp_path: Path) -> None:
    (tmp_path / "k.cu").write_text(CU_PROGRAM)
    cache = KilnCcache(tmp_path)
    env = {**cache.env, "NVCC_APPEND_FLAGS": '-Xcompiler "-O2 -g"'}
    done = subprocess.run(
        [*launch.launcher_argv(), cache.backend.executable(), _nvcc(), *NVCC_ARGS],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 2
    assert "kiln launcher: NVCC_APPEND_FLAGS='-Xcompiler \"-O2 -g\"' holds quotes" in done.stderr
    assert not (tmp_path / "k.o").exists()


CMAKE_CUDA_PROJECT = """
cmake_minimum_required(VERSION 3.20)
project(envkey CUDA)
add_executable(k k.cu)
set_target_properties(k PROPERTIES CUDA_ARCHITECTURES 80)
"""


@pytest.mark.cuda
@pytest.mark.skipif(shutil.which("ninja") is None, reason="ninja is not installed")
def test_cmake_nvcc_flag_variables_key_the_compile(tmp_path: Path) -> None:
    """CMake's nvcc goes through kiln's CUDA launcher, which moves the variables too."""
    from wheelkiln.builder.toolchain import Launch, toolchain_environment

    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "CMakeLists.txt").write_text(CMAKE_CUDA_PROJECT)
    (tmp_path / "src" / "k.cu").write_text(CU_PROGRAM)
    cache = KilnCcache(tmp_path)
    backend = cache.backend

    def build(build_dir: str, value: int) -> tuple[str, int]:
        env = {**cache.env, "NVCC_APPEND_FLAGS": f"-DX={value}"}
        env.update(toolchain_environment(Launch(backend.executable()), "cmake", tmp_path / "bin"))
        backend.zero_stats()
        for command in (
            ["cmake", "-G", "Ninja", "-S", str(tmp_path / "src"), "-B", str(tmp_path / build_dir)],
            ["cmake", "--build", str(tmp_path / build_dir)],
        ):
            done = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
            assert done.returncode == 0, done.stdout + done.stderr
        stats = backend.stats()
        verdict = f"{stats.hits} hit(s), {stats.misses} miss(es)"
        return verdict, subprocess.run([str(tmp_path / build_dir / "k")], check=False).returncode

    assert build("b1", 1) == ("0 hit(s), 1 miss(es)", 1)
    assert build("b2", 1) == ("1 hit(s), 0 miss(es)", 1)
    assert build("b3", 2) == ("0 hit(s), 1 miss(es)", 2)


# --------------------------------------------------------------------------- kiln build

NVCC_PACKAGE = {
    "setup.py": '''
import os, subprocess
from setuptools import setup, Extension
from setuptools.command.build_ext import build_ext

class BuildWithNvcc(build_ext):
    """Compiles .cu sources with `nvcc` from PATH, as many CUDA setup.py files do."""
    def build_extension(self, ext):
        cu = [s for s in ext.sources if s.endswith(".cu")]
        ext.sources = [s for s in ext.sources if not s.endswith(".cu")]
        objects = []
        for source in cu:
            out = os.path.join(self.build_temp, os.path.splitext(source)[0] + ".o")
            os.makedirs(os.path.dirname(out), exist_ok=True)
            subprocess.check_call(["nvcc", "-c", source, "-o", out, "-arch=sm_80",
                                   "-Xcompiler", "-fPIC"])
            objects.append(out)
        ext.extra_objects = objects
        ext.libraries = ["cudart", "stdc++"]
        cuda = os.environ.get("CUDA_HOME", "/usr/local/cuda")
        ext.library_dirs = [os.path.join(cuda, "lib64")]
        ext.runtime_library_dirs = [os.path.join(cuda, "lib64")]
        super().build_extension(ext)

setup(name="envkeypkg", version="0.1", ext_modules=[Extension("envkeypkg", ["host.c", "k.cu"])],
      cmdclass={"build_ext": BuildWithNvcc})
''',
    "k.cu": """
__global__ void kernel(int *out) { *out = KILN_X; }
extern "C" long host_value(void) { return KILN_X; }
""",
    "host.c": """
#include <Python.h>
long host_value(void);
static PyObject *value(PyObject *self, PyObject *args) { return PyLong_FromLong(host_value()); }
static PyMethodDef methods[] = {{"value", value, METH_NOARGS, ""}, {0}};
static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "envkeypkg", 0, -1, methods};
PyMODINIT_FUNC PyInit_envkeypkg(void) { return PyModule_Create(&module); }
""",
}


@pytest.mark.cuda
def test_kiln_build_keys_nvcc_append_flags(kiln: Kiln, tmp_path: Path, installed) -> None:
    """Issue 10's stale object, through a real `kiln build`: NVCC_APPEND_FLAGS=-DX=1 then
    -DX=2 must miss, and the wheel must answer 2."""
    tree = tmp_path / "envkeypkg"
    tree.mkdir()
    for name, text in NVCC_PACKAGE.items():
        (tree / name).write_text(text)
    recipe = tmp_path / "envkeypkg.toml"
    recipe.write_text(f'name = "envkeypkg"\n[source]\npath = "{tree}"\n')

    def build(value: int) -> dict:
        result = kiln(
            "build", recipe, "--out", tmp_path / "out", "--workdir", tmp_path / "work",
            "--cache-dir", tmp_path / "ccache", "--no-wheel-cache", "--json",
            env={"NVCC_APPEND_FLAGS": f"-DKILN_X={value}"},
        )  # fmt: skip
        data: dict = json.loads(result.stdout)
        return data

    code = "import envkeypkg; print(envkeypkg.value())"
    first = build(1)
    assert installed(first["wheel"]["path"], code) == "1"
    again = build(1)
    assert again["cache"]["misses"] == 0 and again["cache"]["hits"] == first["cache"]["total"]
    changed = build(2)
    assert changed["cache"]["misses"] == 1
    assert [tu for tu in changed["cache"]["missed_tus"] if tu.endswith("k.cu")]
    assert installed(changed["wheel"]["path"], code) == "2"
