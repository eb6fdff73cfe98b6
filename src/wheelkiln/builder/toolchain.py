"""How the compiler cache (or, in shard jobs, the seat wrapper) sits in front of every
compiler the package's build system calls.

* CMake (scikit-build-core): ``CMAKE_<LANG>_COMPILER_LAUNCHER`` for C, CXX and CUDA,
  and in shard jobs ``CMAKE_<LANG>_LINKER_LAUNCHER`` as well. CMake's Ninja generator
  asks nvcc for a depfile itself.
* setuptools and meson: ``CC``/``CXX`` as one script each, the same bytes in shard and
  link jobs (torch hands ``$CC`` to nvcc as ``-ccbin``, and ccache hashes its content).
* ``CUDA_HOME`` always names the toolkit (torch would take kiln's shim directory for it),
  and ``CUDA_INC_PATH`` the build env's NVIDIA wheel headers the toolkit lacks (cuBLAS...).
* nvcc called by name, by ``PYTORCH_NVCC`` (torch's ninja writer) or as
  ``$CUDA_HOME/bin/nvcc`` (torch without ninja): a small ``nvcc`` script that adds
  ``-MD -MF`` where no depfile was asked for, so ccache's depend mode applies. CMake's
  nvcc goes through the same launcher (``CMAKE_CUDA_COMPILER_LAUNCHER``). Both move
  ``NVCC_APPEND_FLAGS``, ``NVCC_PREPEND_FLAGS`` and ``NVCC_CCBIN`` onto the command
  line, where the cache hashes them (:mod:`wheelkiln.cache.launch`).
"""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import shutil
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from wheelkiln.cache.backend import CacheBackend


def real_python() -> str:
    """This interpreter by absolute path: never the 70 ms pyenv shim."""
    return os.path.realpath(sys.executable)


def find_nvcc() -> str | None:
    """The real nvcc: $CUDA_HOME/bin/nvcc, /usr/local/cuda/bin/nvcc, or nvcc on PATH."""
    for home in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
        if home and os.access(Path(home) / "bin" / "nvcc", os.X_OK):
            return str(Path(home) / "bin" / "nvcc")
    return shutil.which("nvcc")


@dataclass(frozen=True)
class Toolchain:
    """The versions of the tools a job builds with: kiln, gcc, nvcc and cmake where
    present, and the compiler cache. Probed once per job (:func:`probe_toolchain`) and
    handed down to everything that needs them: the build record, the input digest of
    the wheel cache, and the fingerprint shards and their link job must agree on."""

    versions: Mapping[str, str] = field(default_factory=dict)

    def as_dict(self) -> dict[str, str]:
        return dict(self.versions)


def probe_toolchain(cache: CacheBackend | None) -> Toolchain:
    """Ask each tool for its version (a few processes: done once per job)."""
    import wheelkiln
    from wheelkiln.builder.probes import probe

    versions = {"wheelkiln": wheelkiln.__version__}
    try:
        versions["gcc"] = probe(["gcc", "-dumpfullversion"], check=True).output.strip()
    except Exception:
        versions["gcc"] = "absent"
    nvcc = find_nvcc()
    if nvcc is not None:
        # By its resolved path, as CMake's identification key asks it ($CUDACXX).
        lines = probe([os.path.realpath(nvcc), "--version"]).output.strip().splitlines()
        versions["nvcc"] = lines[-1] if lines else "unknown"
    if shutil.which("cmake"):
        versions["cmake"] = (
            probe(["cmake", "--version"], check=True).output.split("\n")[0].split()[-1]
        )
    if cache is not None:
        versions[cache.name] = cache.version()
    return Toolchain(versions)


def cuda_home(nvcc: str) -> Path:
    return Path(os.path.realpath(nvcc)).parent.parent


def toolkit_home(nvcc: str) -> Path:
    """The CUDA_HOME a build should see for *nvcc*: its ``bin/..`` as found
    (``/usr/local/cuda``, not the versioned directory it links to) when that holds the
    toolkit's headers, else the home of the resolved binary."""
    home = Path(nvcc).parent.parent
    if Path(nvcc).parent.name == "bin" and (home / "include" / "cuda_runtime.h").is_file():
        return home
    return cuda_home(nvcc)


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


def front_scripts_dir() -> Path:
    """Where the compiler front scripts live: ``$KILN_HOME/bin``."""
    from wheelkiln.paths import kiln_home

    return kiln_home() / "bin"


def install_script(scripts_dir: Path, name: str, body: str) -> Path:
    """Write a front script at ``scripts_dir/<digest>/name``, the digest of its content.

    Build systems record the compiler's path in what they install (meson's
    ``cc.cmd_array()`` in numpy's and scipy's ``__config__.py``), and torch hands
    ``$CC`` to nvcc as ``-ccbin``. A script under a job's directory put that job's work
    directory into the wheel, so a sharded wheel (built by the link job) differed from
    an unsharded one. The same content now has one path in every job and every build.
    The file is written once, atomically (parallel shard jobs write the same bytes).
    """
    return install_file(scripts_dir, name, "#!/bin/sh\n" + body + "\n", executable=True)


def install_file(scripts_dir: Path, name: str, text: str, *, executable: bool = False) -> Path:
    """Write *text* at ``scripts_dir/<digest>/name``, the digest of its name and content
    (:func:`install_script`), once and atomically."""
    import hashlib

    digest = hashlib.sha256(f"{name}\0{text}".encode()).hexdigest()[:20]
    path = scripts_dir / digest / name
    if path.is_file() and path.read_text() == text and (not executable or os.access(path, os.X_OK)):
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{name}.{os.getpid()}.tmp")
    temporary.write_text(text)
    temporary.chmod(0o755 if executable else 0o644)
    temporary.replace(path)
    return path


def _exec_line(argv: list[str]) -> str:
    return f'exec {shlex.join(argv)} "$@"'


SEAT_SWITCH = "KILN_SEAT_FRONT"
"""Set (to 1) in shard jobs: the CC/CXX scripts then hand every call to the seat wrapper."""
DEBUG_PREFIX = "KILN_DEBUG_PREFIX"
"""The job's directory, which the CC/CXX scripts map to ``.`` in debug info."""
JOB_DIR = "KILN_JOB_DIR"
"""The job's directory, inside which no compile is a temp-directory probe
(:func:`probe_bypass_line`)."""


def compiler_identity(compiler: str) -> str:
    """The first line of ``compiler --version`` (``gcc (Debian 12.2.0-14) 12.2.0``)."""
    from wheelkiln.builder.probes import probe

    try:
        lines = probe([compiler, "--version"]).output.strip().splitlines()
    except Exception:  # a compiler that is not there fails later, where it is called
        return "unknown"
    return lines[0].strip() if lines else "unknown"


def probe_bypass_line(target: list[str]) -> str:
    """A shell line that runs build-system probes as ``target "$@"``, past the cache.

    Probes (:data:`wheelkiln.compiler_args.PROBE_MARKERS` in the working directory or an
    argument: CMake's ``CMakeScratch/TryCompile-XXXX``, ``cmTC_*``, ``CompilerId``,
    meson's ``meson-private``, autoconf's ``conftest``) compile throw-away sources from
    random directories, or from the build environment (CMake's own ``CMakeCXXCompilerABI.cpp``
    when cmake is a build requirement), so their entries miss whenever that path or the
    environment changes. Counted as misses, they made zero misses unreachable for builds
    whose real TUs all hit. The seat wrapper runs them uncached as well, so shards and the
    link job agree; real TUs keep going through the cache and the gate still counts them.

    A source named by an absolute path in a temp directory (``/tmp``, ``/var/tmp``,
    ``$TMPDIR``) outside the job's directory (:data:`JOB_DIR`) is a probe too, as the
    seat wrapper has it: psutil's ``setup.py`` compiles ``tempfile.NamedTemporaryFile``
    sources (``/tmp/tmpXXXXXXXX.c``), whose random names missed in every build and failed
    a sharded link job's gate. Without :data:`JOB_DIR` no source counts as one.
    """
    from wheelkiln.compiler_args import PROBE_MARKERS, SOURCE_EXTENSIONS

    patterns = "|".join(f"*{marker}*" for marker in PROBE_MARKERS)
    # A source as the seat wrapper's parse knows one.
    sources = "|".join(f"*{extension}" for extension in sorted(SOURCE_EXTENSIONS))
    return (
        f'case "$PWD $*" in {patterns}) {_exec_line(target)};; esac\n'
        f'case "$*" in */tmp/*|*"${{TMPDIR:-/tmp}}"/*) for kiln_arg; do case $kiln_arg in '
        f'"${JOB_DIR}"/*) ;; /tmp/*|/var/tmp/*|"${{TMPDIR:-/tmp}}"/*) case $kiln_arg in '
        f"{sources}) {_exec_line(target)};; esac;; esac; done;; esac\n"
    )


HOST_COMPILERS = (("cc", "CC", "KILN_HOST_CC", "gcc"), ("c++", "CXX", "KILN_HOST_CXX", "g++"))
"""Each front's name, the variable a build reads its compiler from, kiln's own setting
for it, and the default."""
CACHE_PROGRAMS = frozenset({"ccache", "sccache"})


def host_compilers(environ: Mapping[str, str]) -> dict[str, list[str]]:
    """The compiler (a program and any leading arguments) behind each CC/CXX front: kiln's
    ``KILN_HOST_CC``/``KILN_HOST_CXX`` where set, else the ``CC``/``CXX`` the build would
    read without kiln (the recipe's ``build.env``, or the environment kiln runs in: a
    conda compiler, ``gcc-13``), else gcc and g++. The fronts replace CC and CXX, so a
    recipe that set ``CC = "clang"`` was built with gcc, saying nothing. A cache the value
    starts with (``ccache gcc``) is dropped: kiln runs the cache itself."""
    from wheelkiln.errors import UsageError

    chosen: dict[str, list[str]] = {}
    for name, variable, own, default in HOST_COMPILERS:
        source, value = next(
            ((key, environ[key]) for key in (own, variable) if environ.get(key, "").strip()),
            ("", default),
        )
        try:
            if any(character in value for character in "\n\r\0"):
                raise ValueError("a line break in it")
            words = shlex.split(value)
        except ValueError as error:
            raise UsageError(
                f"{source}={value!r} is not a command line ({error}).",
                hint=f"Set {source} (in the recipe's build.env or where you run kiln) to "
                f"the compiler and any arguments, e.g. {source}={default}.",
            ) from None
        if words and Path(words[0]).name in CACHE_PROGRAMS:
            words = words[1:]
        if not words or _is_front(words[0]):
            words = [default]
        chosen[name] = words
    return chosen


def chosen_compiler_versions(environ: Mapping[str, str]) -> dict[str, str]:
    """``cc`` and ``c++`` (the command and its ``--version`` line) where the build names a
    compiler other than gcc and g++ (:func:`host_compilers`; CMake reads ``CC`` and
    ``CXX`` too), for the tool versions: the wheel cache's input digest and the
    fingerprint shards and their link job compare. The ``gcc`` entry alone said nothing
    of a clang the recipe chose, so a new clang was served the old wheel."""
    chosen: dict[str, str] = {}
    for (name, _, _, default), words in zip(
        HOST_COMPILERS, host_compilers(environ).values(), strict=True
    ):
        if words != [default]:
            chosen[name] = f"{shlex.join(words)}: {compiler_identity(words[0])}"
    return chosen


def _is_front(program: str) -> bool:
    """Whether *program* is one of kiln's own fronts (a CC left by a kiln job)."""
    try:
        with open(shutil.which(program) or program, "rb") as handle:
            return b"wheelkiln host compiler front" in handle.read(256)
    except OSError:
        return False


FRONT_CACHE = "KILN_FRONT_CACHE"
"""The compiler cache the CC/CXX scripts compile through (unset: straight to the compiler)."""
FRONT_SEAT = "KILN_FRONT_SEAT"
"""The seat wrapper's script, which the CC/CXX scripts hand every call to in shard jobs."""
FRONT_NVCC = "KILN_FRONT_NVCC"
"""What the nvcc front hands a compile to outside shard jobs: kiln's nvcc launcher in
front of the cache (unset: straight to nvcc)."""


def host_front_script(compiler: list[str], name: str | None = None) -> str:
    """The body of the CC/CXX script: the same bytes in shard jobs and link jobs, and
    wherever kiln and the cache are installed.

    torch passes ``-ccbin $CC`` to nvcc, and ccache hashes the *content* of a ``-ccbin``
    file, not its path (kiln's ``compiler_check`` is a command, which ccache never runs
    for nvcc's host compiler: it hashes the file instead). A shard script that exec'd the seat wrapper and a link
    script that exec'd ccache made every nvcc TU miss in the link job. So one script does
    both, switched by ``KILN_SEAT_FRONT`` in the environment, and names the real host
    compiler's version, which ccache then hashes. The programs it hands calls to (the
    seat wrapper, the cache) are named by the job's environment (:data:`FRONT_SEAT`,
    :data:`FRONT_CACHE`), not written into it: their paths are where kiln is installed,
    and a builder with kiln in another virtualenv or home missed every torch nvcc TU
    that one had stored. Without :data:`FRONT_CACHE` (a build run again by hand) a call
    goes straight to the compiler. Probes bypass the cache (:func:`probe_bypass_line`),
    and so do calls without ``-c`` or ``-S`` (links, ``-E``, version questions), which no
    cache stores.

    Compiles get ``-fdebug-prefix-map=<job directory>=.`` (``KILN_DEBUG_PREFIX``), in
    shards and link jobs alike. setuptools compiles with ``-g``, and DWARF names the
    compile's directory: without the map a wheel named this job's directory, or, served
    from a cache another builder filled, that builder's home. ccache hashes only that
    the option is there, not its value, so every job still shares the entries.
    """
    from wheelkiln.builder.compiler_answers import QUESTIONS, answer_line

    mapped = f' ${{{DEBUG_PREFIX}:+"-fdebug-prefix-map=${DEBUG_PREFIX}=."}}'
    real = shlex.join(compiler)
    return (
        f"# wheelkiln host compiler front: {real}: {compiler_identity(compiler[0])}\n"
        # meson's compiler detection, answered from what this compiler said before.
        + (answer_line(name) if name is not None and name in QUESTIONS else "")
        + f'case "${SEAT_SWITCH}" in 1) exec "${FRONT_SEAT}" {real} "$@"{mapped};; esac\n'
        # nvcc's own host passes (-ccbin $CC) compile tmpxft_* temp files: ccache must
        # wrap nvcc itself, never its host compiler, so those go straight through.
        f'case "$*" in *tmpxft_*) exec {real} "$@";; esac\n'
        + probe_bypass_line(compiler)
        # A call that compiles nothing (a link, -E, --version: meson's compiler
        # detection) is no cache's to store: ccache would count it uncacheable and run
        # the compiler, one more process start per link and probe.
        + f'case " $* " in *" -c "*|*" -S "*) ;; *) {_exec_line(compiler)}{mapped};; esac\n'
        + f'exec ${{{FRONT_CACHE}:+"${FRONT_CACHE}"}} {real} "$@"{mapped}'
    )


def _write_front(path: Path, cached: list[str], direct: list[str]) -> None:
    """A launcher script: probes run as *direct* + args, everything else as *cached*."""
    _write_script(path, probe_bypass_line(direct) + _exec_line(cached))


def wheel_cuda_includes(build_env: Path) -> list[Path]:
    """Include directories of the NVIDIA CUDA wheels in a build environment.

    torch's CUDA wheels depend on ``nvidia-cublas``, ``nvidia-cusparse``... whose headers
    land in ``site-packages/nvidia/cu13/include`` (CUDA 13) or one
    ``nvidia/<lib>/include`` per library (CUDA 12). ATen's CUDA headers
    (``ATen/cuda/CUDAContext.h``) include ``cublas_v2.h``, ``cusparse.h`` and
    ``cusolverDn.h``, which a toolkit installed without its math libraries lacks.
    """
    found: list[Path] = []
    for site in sorted(build_env.glob("lib/python3*/site-packages/nvidia")):
        for include in sorted(site.glob("*/include")):
            if include.is_dir() and any(include.glob("*.h")):
                found.append(include)
    return found


def cuda_inc_path(toolkit: Path, build_env: Path | None, bin_dir: Path) -> str | None:
    """A CUDA_INC_PATH (read by torch.utils.cpp_extension) for the math-library headers
    the toolkit lacks, or None when the toolkit has them or the env has no such wheels."""
    if build_env is None or (toolkit / "include" / "cublas_v2.h").is_file():
        return None
    includes = wheel_cuda_includes(build_env)
    if not includes:
        return None
    if len(includes) == 1:
        return str(includes[0])
    # CUDA_INC_PATH is one directory: merge the wheels' headers (first one wins).
    merged = bin_dir.parent / "cuda-wheel-include"
    shutil.rmtree(merged, ignore_errors=True)
    merged.mkdir(parents=True)
    for include in includes:
        for entry in include.iterdir():
            if not (merged / entry.name).exists():
                (merged / entry.name).symlink_to(entry)
    return str(merged)


def toolchain_environment(
    launch: Launch,
    kind: str,
    bin_dir: Path,
    *,
    cuda_home_nvcc: bool = False,
    build_env: Path | None = None,
    scripts_dir: Path | None = None,
    cuda_views: Path | None = None,
    environ: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """Environment variables (and the front scripts they name) for one build.

    ``kind`` is the build system: 'cmake', 'meson' or 'setuptools'. CC and CXX are each
    one executable (a script), never ``launcher gcc``: torch passes ``-ccbin $CC`` to
    nvcc, which needs a single path. The scripts go to content-addressed paths under
    ``scripts_dir`` (default :func:`front_scripts_dir`, see :func:`install_script`);
    ``bin_dir`` (in the job's directory) holds only job-local helpers (the merged CUDA
    wheel headers, CMake's launchers). ``build_env`` is the cell's build environment:
    its NVIDIA wheels' headers go on CUDA_INC_PATH where the toolkit lacks them.
    ``cuda_views`` is where the toolkit view around the nvcc front goes
    (:func:`cuda_toolkit_view`; default ``scripts_dir``); a job's is its workdir's
    (:func:`wheelkiln.paths.cuda_views`). ``environ`` is the job's environment so far
    (default: kiln's own), which names the compilers behind the fronts
    (:func:`host_compilers`).
    """
    from wheelkiln import per_tu
    from wheelkiln.cache import launch as cache_launch
    from wheelkiln.compiler_args import NVCC_PATH_SPELLINGS

    bin_dir.mkdir(parents=True, exist_ok=True)
    # torch.utils.cpp_extension puts ccache or sccache (whichever is on PATH) in front of
    # `cxx` and of $CUDA_HOME/bin/nvcc; torch 2.14 reads this name in _wrap_compiler
    # (any non-empty value). Every compile goes through exactly one cache: ours.
    env: dict[str, str] = {"TORCH_NO_COMPILER_WRAPPER": "1"}
    host = host_compilers(os.environ if environ is None else environ)
    scripts = scripts_dir or front_scripts_dir()
    seat_argv = per_tu.seat_wrapper_argv(real_python())
    env[SEAT_SWITCH] = "1" if launch.seat_wrapper else "0"
    front = launch.cache
    seat = install_script(scripts, per_tu.SEAT_SCRIPT, _exec_line(seat_argv))
    if launch.seat_wrapper:
        # The wrapper's own settings (the cache it compiles through, its slice) are the
        # shard job's: wheelkiln.shard.wrapper.SeatConfig.to_environ.
        front = str(seat)
    fronts: dict[str, Path] = {}
    if launch.seat_wrapper or launch.cache is not None:
        for name, compiler in host.items():
            fronts[name] = install_script(scripts, name, host_front_script(compiler, name))
        env[FRONT_SEAT] = str(seat)
        if launch.cache is not None:
            env[FRONT_CACHE] = launch.cache
    if front is not None:
        if kind == "cmake":
            for lang in ("C", "CXX", "CUDA"):
                env[f"CMAKE_{lang}_COMPILER_LAUNCHER"] = front
                if launch.seat_wrapper:
                    # Links go through the wrapper too (CMake >= 3.21), so a link that
                    # fails on unresolved symbols leaves a placeholder and ninja goes on
                    # to the rest of the shard's TUs instead of stopping there.
                    env[f"CMAKE_{lang}_LINKER_LAUNCHER"] = front
            if not launch.seat_wrapper and launch.cache is not None:
                # CMake appends the compiler and its arguments to the launcher.
                cache_front = bin_dir / "cache-front"
                _write_front(cache_front, [launch.cache], [])
                env["CMAKE_C_COMPILER_LAUNCHER"] = str(cache_front)
                env["CMAKE_CXX_COMPILER_LAUNCHER"] = str(cache_front)
                # nvcc through kiln's launcher, as the seat wrapper runs it in shard
                # jobs: it moves NVCC_APPEND_FLAGS & co. onto the command line, where the
                # cache sees them, so link job and shards hash the same command.
                # Without those variables set, without an include option the launcher
                # respells (`-isystem=DIR`, which CMake writes for nvcc) and with a
                # depfile asked for (CMake's Ninja generator always asks; its Makefile
                # generator may not), the launcher would add nothing to CMake's
                # command: the cache runs directly, saving an interpreter start (~29 ms
                # CPU) on every CUDA TU.
                nvcc_front = bin_dir / "nvcc-launch"
                flags = "".join(f"${{{name}-}}" for name in cache_launch.NVCC_ENV_FLAGS)
                respelled = "|".join(f"*{spelling}*" for spelling in NVCC_PATH_SPELLINGS)
                _write_script(
                    nvcc_front,
                    probe_bypass_line([])
                    + f'case "{flags}" in "") case " $* " in {respelled}) ;; '
                    f'*" -MD "*|*" -MMD "*) {_exec_line([launch.cache])};; esac;; esac\n'
                    + _exec_line([*per_tu.launcher_argv(real_python()), launch.cache]),
                )
                env["CMAKE_CUDA_COMPILER_LAUNCHER"] = str(nvcc_front)
            if launch.seat_wrapper:
                env["CMAKE_ARGS"] = device_link_hook(scripts, seat)
        else:
            env["CC"] = str(fronts["cc"])
            env["CXX"] = str(fronts["c++"])
    nvcc = find_nvcc()
    if nvcc is None:
        return env
    if kind == "cmake":
        env["CUDACXX"] = nvcc
    if launch.cache is not None and not launch.seat_wrapper:
        env[FRONT_NVCC] = str(
            install_script(
                scripts, "nvcc-launch", _exec_line([*per_tu.launcher_argv(real_python()), launch.cache])
            )
        )
    view = cuda_toolkit_view(cuda_views or scripts, toolkit_home(nvcc), nvcc_front_script(nvcc))
    shim = view / "bin" / "nvcc"
    env["PYTORCH_NVCC"] = str(shim)
    env["NVCC"] = str(shim)
    if kind != "cmake":
        env["KILN_PATH_PREPEND"] = str(shim.parent)
    if "CUDA_INC_PATH" not in os.environ:
        inc_path = cuda_inc_path(toolkit_home(nvcc), build_env, bin_dir)
        if inc_path is not None:
            env["CUDA_INC_PATH"] = inc_path
    if cuda_home_nvcc:
        env["CUDA_HOME"] = str(view)
    else:
        # Always say where the toolkit is. Without CUDA_HOME, torch.utils.cpp_extension
        # guesses it from `nvcc` on PATH, which is our front: a front alone in a
        # directory made it take the job directory for the toolkit ("nvcc not found at
        # '<job>/bin/nvcc'"); the toolkit view would do, but the toolkit is its name.
        env["CUDA_HOME"] = str(toolkit_home(nvcc))
    return env


DEVICE_LINK_HOOK = """\
# Written by kiln for a shard job (CMAKE_PROJECT_INCLUDE, so it runs after project()).
# CMake has no launcher for the CUDA device link (nvcc -dlink -> cmake_device_link.o;
# CMAKE_CUDA_LINKER_LAUNCHER reaches only the host link), so the seat wrapper goes in
# front of its rule here, and tolerates the device link of stubbed objects as it does
# the host link. Deferred to the end of the directory as well, for projects that
# enable CUDA after project().
# A project include the build was given itself runs first, as it would have: kiln's
# took its place on the command line and passed it on (see merge_cmake_args).
if(DEFINED KILN_USER_PROJECT_INCLUDE)
  include("${{KILN_USER_PROJECT_INCLUDE}}")
endif()
function(_kiln_seat_device_link)
  foreach(rule CMAKE_CUDA_DEVICE_LINK_LIBRARY CMAKE_CUDA_DEVICE_LINK_EXECUTABLE)
    if(DEFINED ${{rule}} AND NOT "${{${{rule}}}}" MATCHES "{script}")
      set(${{rule}} "{seat} ${{${{rule}}}}" PARENT_SCOPE)
    endif()
  endforeach()
endfunction()
_kiln_seat_device_link()
if(CMAKE_VERSION VERSION_GREATER_EQUAL 3.19)
  cmake_language(DEFER CALL _kiln_seat_device_link)
endif()
"""


def device_link_hook(scripts_dir: Path, seat: Path) -> str:
    """Write the CMake file that puts the seat wrapper in front of CUDA device links, and
    return the ``CMAKE_ARGS`` (read by scikit-build-core) that include it.

    The file goes where the fronts go, named by its content: ``CMAKE_ARGS`` is part of
    the key of CMake's kept identification (:mod:`cmake_id`), and a path in the job's own
    directory made every shard job's key another one, so each identified its compilers
    and ran the project's checks again."""
    from wheelkiln.per_tu import SEAT_SCRIPT

    text = DEVICE_LINK_HOOK.format(seat=seat.as_posix(), script=SEAT_SCRIPT)
    hook = install_file(scripts_dir, "kiln-device-link.cmake", text)
    return shlex.join([f"-DCMAKE_PROJECT_INCLUDE={hook.as_posix()}"])


_PROJECT_INCLUDE = re.compile(r"-DCMAKE_PROJECT_INCLUDE(?::[A-Za-z]+)?=(.*)", re.DOTALL)


def merge_cmake_args(users: str, kilns: str) -> str:
    """``CMAKE_ARGS`` of the build (the recipe's, the caller's) followed by kiln's. A
    ``-DCMAKE_PROJECT_INCLUDE=FILE`` of the build's would lose to the device-link hook's
    (the last ``-D`` wins), so it is passed as ``KILN_USER_PROJECT_INCLUDE``, which the
    hook includes."""
    words = shlex.split(users)
    merged: list[str] = []
    index = 0
    while index < len(words):
        taken = 2 if words[index] == "-D" and index + 1 < len(words) else 1  # "-D NAME=V"
        found = _PROJECT_INCLUDE.fullmatch("-D" + words[index + 1] if taken == 2 else words[index])
        if found:
            merged.append(f"-DKILN_USER_PROJECT_INCLUDE={found.group(1)}")
        else:
            merged += words[index : index + taken]
        index += taken
    return " ".join(part for part in (shlex.join(merged), kilns) if part)


def nvcc_front_script(nvcc: str) -> str:
    """The body of the nvcc front on PATH (and as ``PYTORCH_NVCC``, ``$CUDA_HOME/bin/nvcc``):
    the same bytes in shard and link jobs, wherever kiln and the cache are installed, as
    :func:`host_front_script` is. In shard jobs it hands the call to the seat wrapper;
    elsewhere to kiln's nvcc launcher (:data:`FRONT_NVCC`: it adds the depfile ccache's
    depend mode reads, and moves ``NVCC_*FLAGS`` onto the command line), probes past
    the cache. Its bytes make the path of the toolkit view it sits in
    (:func:`cuda_toolkit_view`), which a package may compile against."""
    real = shlex.quote(nvcc)
    return (
        f"# wheelkiln nvcc front: {nvcc}\n"
        f'case "${SEAT_SWITCH}" in 1) exec "${FRONT_SEAT}" {real} "$@";; esac\n'
        + probe_bypass_line([nvcc])
        + f'exec ${{{FRONT_NVCC}:+"${FRONT_NVCC}"}} {real} "$@"'
    )


def cuda_toolkit_view(views_dir: Path, real_home: Path, front_body: str) -> Path:
    """A CUDA toolkit directory whose ``bin/nvcc`` is kiln's front (*front_body*) and
    whose every other entry links to the toolkit's (*real_home*), at
    ``views_dir/<digest>``, the digest of the front and of what it mirrors.

    The front's directory goes on PATH, and packages find the toolkit from ``nvcc`` on
    PATH: pycuda's ``CUDA_ROOT`` defaults to ``dirname(nvcc)/..``, as torch's and CuPy's
    guesses do without ``CUDA_HOME``. A front alone in a directory made that guess
    ``$KILN_HOME/bin`` (pycuda: ``cuda.h: No such file or directory``), where a build
    without kiln finds the toolkit. In this view it finds one, even through
    ``realpath``: the front is a file of the view, not a link out of it. Such a package
    compiles with ``-I<view>/include``: a job's views are in its workdir
    (:func:`wheelkiln.paths.cuda_views`), inside the cache's base directory, so the flag
    is written relative to the compile and hashes alike in every job and home, and the
    front is one script for shard and link jobs, so the view is one path. The same view
    is ``CUDA_HOME`` where a build runs ``$CUDA_HOME/bin/nvcc`` itself
    (``cuda_home_nvcc``). Made once, atomically (parallel shard jobs make the same one).
    """
    import hashlib

    entries = sorted(entry.name for entry in real_home.iterdir() if entry.name != "bin")
    real_bin = real_home / "bin"
    tools = sorted(t.name for t in real_bin.iterdir() if t.name != "nvcc") if real_bin.is_dir() else []
    text = "#!/bin/sh\n" + front_body + "\n"
    blob = "\0".join(["cuda-view", str(real_home), text, *entries, "bin:", *tools])
    view = views_dir / hashlib.sha256(blob.encode()).hexdigest()[:20]
    if (view / "bin" / "nvcc").is_file():
        return view
    staging = view.with_name(f".cuda.{os.getpid()}.tmp")
    shutil.rmtree(staging, ignore_errors=True)
    (staging / "bin").mkdir(parents=True)
    for name in entries:
        (staging / name).symlink_to(real_home / name)
    for name in tools:
        (staging / "bin" / name).symlink_to(real_home / "bin" / name)
    front = staging / "bin" / "nvcc"
    front.write_text(text)
    front.chmod(0o755)
    try:
        staging.rename(view)
    except OSError:
        if not (view / "bin" / "nvcc").is_file():  # not another job's: a damaged one
            shutil.rmtree(view, ignore_errors=True)
            with contextlib.suppress(OSError):  # a job making it this instant wins
                staging.rename(view)
        shutil.rmtree(staging, ignore_errors=True)  # another job made it first: the same
    return view


def cython_fronts(scripts_dir: Path | None = None) -> tuple[list[str], str]:
    """Install the Cython fronts (:mod:`wheelkiln.cython_front`): ``cython`` and
    ``cython3`` scripts for the front of PATH (meson's ``cython`` program looks for
    both), and the ``sitecustomize.py`` for ``PYTHONPATH`` that hooks ``cythonize()``
    in process. Returns (PATH directories, PYTHONPATH directory)."""
    from wheelkiln import per_tu
    from wheelkiln.cache.cython import ENV_VERSION_STDERR, ENV_VERSION_STDOUT, write_site_hook

    scripts = scripts_dir or front_scripts_dir()
    argv = per_tu.cython_front_argv(real_python())
    # `cython -V` (meson asks it twice) is answered here, without a Python start, when
    # the build handed the script a kept answer (wheelkiln.cache.cython.version_environment).
    body = (
        f"# {per_tu.CYTHON_FRONT_MARK}\n"
        f'if [ "$#" = 1 ] && [ "$1" = -V ] && [ "${{0##*/}}" = cython ] && '
        f'[ -n "${{{ENV_VERSION_STDOUT}+set}}" ]; then\n'
        f'  printf %s "${ENV_VERSION_STDOUT}"; printf %s "${ENV_VERSION_STDERR}" >&2; exit 0\n'
        "fi\n"
        f'exec {shlex.join(argv)} "$0" "$@"'
    )
    directories = [
        str(install_script(scripts, name, body).parent) for name in ("cython", "cython3")
    ]
    return directories, write_site_hook(str(scripts), per_tu.SRC_DIR)
