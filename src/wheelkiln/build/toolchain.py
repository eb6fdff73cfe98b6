"""How the compiler cache (or, in shard jobs, the seat wrapper) sits in front of every
compiler the package's build system calls.

* CMake (scikit-build-core): ``CMAKE_<LANG>_COMPILER_LAUNCHER`` for C, CXX and CUDA.
  CMake's Ninja generator asks nvcc for a depfile itself.
* setuptools and meson: ``CC``/``CXX`` as ``LAUNCHER gcc``.
* nvcc called by name, by ``PYTORCH_NVCC`` (torch's ninja writer) or as
  ``$CUDA_HOME/bin/nvcc`` (torch without ninja): a small ``nvcc`` script that adds
  ``-MD -MF`` where no depfile was asked for, so ccache's depend mode applies.
"""

from __future__ import annotations

import os
import shlex
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

import wheelkiln

SRC_DIR = Path(wheelkiln.__file__).resolve().parent.parent


def real_python() -> str:
    """This interpreter by absolute path: never the 70 ms pyenv shim."""
    return os.path.realpath(sys.executable)


def find_nvcc() -> str | None:
    """The real nvcc: $CUDA_HOME/bin/nvcc, /usr/local/cuda/bin/nvcc, or nvcc on PATH."""
    for home in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
        if home and os.access(Path(home) / "bin" / "nvcc", os.X_OK):
            return str(Path(home) / "bin" / "nvcc")
    return shutil.which("nvcc")


def cuda_home(nvcc: str) -> Path:
    return Path(os.path.realpath(nvcc)).parent.parent


@dataclass(frozen=True)
class Launch:
    """What stands in front of the compilers: the cache alone, or the seat wrapper."""

    cache: str | None
    """The cache executable, or None for an uncached build."""
    seat_wrapper: bool = False
    """Put the seat wrapper (shard jobs) in front instead of the bare cache."""


def _write_script(path: Path, body: str) -> None:
    path.write_text("#!/bin/sh\n" + body + "\n")
    path.chmod(0o755)


def _exec_line(argv: list[str]) -> str:
    return f'exec {shlex.join(argv)} "$@"'


def toolchain_environment(
    launch: Launch, kind: str, bin_dir: Path, *, cuda_home_nvcc: bool = False
) -> dict[str, str]:
    """Environment variables (and scripts written into ``bin_dir``) for one build.

    ``kind`` is the build system: 'cmake', 'meson' or 'setuptools'. CC and CXX are each
    one executable (a script), never ``launcher gcc``: torch passes ``-ccbin $CC`` to
    nvcc, which needs a single path.
    """
    from wheelkiln.cache import launch as cache_launch
    from wheelkiln.shard import wrapper

    bin_dir.mkdir(parents=True, exist_ok=True)
    env: dict[str, str] = {"TORCH_NO_COMPILER_WRAPPER": "1"}
    host = {
        "cc": os.environ.get("KILN_HOST_CC", "gcc"),
        "c++": os.environ.get("KILN_HOST_CXX", "g++"),
    }
    seat = bin_dir / "kiln-seat"
    seat_argv = wrapper.launcher_argv(real_python())
    if launch.seat_wrapper:
        _write_script(seat, _exec_line(seat_argv))
        for name, compiler in host.items():
            _write_script(bin_dir / name, _exec_line([*seat_argv, compiler]))
    elif launch.cache is not None:
        for name, compiler in host.items():
            # nvcc's own host passes (-ccbin $CC) compile tmpxft_* temp files: ccache
            # must wrap nvcc itself, never its host compiler, so those go straight through.
            _write_script(
                bin_dir / name,
                f'case "$*" in *tmpxft_*) exec {shlex.quote(compiler)} "$@";; esac\n'
                + _exec_line([launch.cache, compiler]),
            )
    front = str(seat) if launch.seat_wrapper else launch.cache
    if front is not None:
        if kind == "cmake":
            for lang in ("C", "CXX", "CUDA"):
                env[f"CMAKE_{lang}_COMPILER_LAUNCHER"] = front
        else:
            env["CC"] = str(bin_dir / "cc")
            env["CXX"] = str(bin_dir / "c++")
    nvcc = find_nvcc()
    if nvcc is None:
        return env
    if kind == "cmake":
        env["CUDACXX"] = nvcc
    if launch.seat_wrapper:
        shim_body = _exec_line([*seat_argv, nvcc])
    else:
        shim_body = _exec_line([*cache_launch.launcher_argv(real_python()), launch.cache or "", nvcc])
    shim = bin_dir / "nvcc"
    _write_script(shim, shim_body)
    env["PYTORCH_NVCC"] = str(shim)
    env["NVCC"] = str(shim)
    if kind != "cmake":
        env["KILN_PATH_PREPEND"] = str(bin_dir)
    if cuda_home_nvcc:
        env["CUDA_HOME"] = str(_cuda_home_shim(cuda_home(nvcc), bin_dir.parent / "cuda-home", shim))
    return env


def _cuda_home_shim(real_home: Path, shim_home: Path, nvcc_shim: Path) -> Path:
    """A CUDA_HOME whose bin/nvcc is ours and everything else links to the toolkit."""
    shutil.rmtree(shim_home, ignore_errors=True)
    (shim_home / "bin").mkdir(parents=True)
    for entry in real_home.iterdir():
        if entry.name != "bin":
            (shim_home / entry.name).symlink_to(entry)
    for tool in (real_home / "bin").iterdir():
        if tool.name != "nvcc":
            (shim_home / "bin" / tool.name).symlink_to(tool)
    (shim_home / "bin" / "nvcc").symlink_to(nvcc_shim)
    return shim_home
