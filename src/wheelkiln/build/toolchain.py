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
LAUNCH_SCRIPT = SRC_DIR / "wheelkiln" / "cache" / "launch.py"
WRAPPER_SCRIPT = SRC_DIR / "wheelkiln" / "shard" / "wrapper.py"


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


def toolchain_environment(
    launch: Launch, kind: str, bin_dir: Path, *, cuda_home_nvcc: bool = False
) -> dict[str, str]:
    """Environment variables (and scripts written into ``bin_dir``) for one build.

    ``kind`` is the build system: 'cmake', 'meson' or 'setuptools'.
    """
    bin_dir.mkdir(parents=True, exist_ok=True)
    python = real_python()
    env: dict[str, str] = {"TORCH_NO_COMPILER_WRAPPER": "1"}
    if launch.seat_wrapper:
        launcher = bin_dir / "kiln-seat"
        _write_script(
            launcher, f'exec {shlex.quote(python)} -S -E {shlex.quote(str(WRAPPER_SCRIPT))} "$@"'
        )
        front: str | None = str(launcher)
    else:
        front = launch.cache
    if front is not None:
        if kind == "cmake":
            for lang in ("C", "CXX", "CUDA"):
                env[f"CMAKE_{lang}_COMPILER_LAUNCHER"] = front
        else:
            env["CC"] = f"{front} {os.environ.get('KILN_HOST_CC', 'gcc')}"
            env["CXX"] = f"{front} {os.environ.get('KILN_HOST_CXX', 'g++')}"
    nvcc = find_nvcc()
    if nvcc is None:
        return env
    if kind == "cmake":
        env["CUDACXX"] = nvcc
    if launch.seat_wrapper:
        shim_body = f'exec {shlex.quote(str(bin_dir / "kiln-seat"))} {shlex.quote(nvcc)} "$@"'
    else:
        cache = shlex.quote(launch.cache or "")
        shim_body = (
            f"exec {shlex.quote(python)} -S -E {shlex.quote(str(LAUNCH_SCRIPT))} "
            f'{cache} {shlex.quote(nvcc)} "$@"'
        )
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
