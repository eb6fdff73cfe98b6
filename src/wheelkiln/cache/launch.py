"""Run one compiler call through the compiler cache (stdlib only, per-TU hot path).

Two callers:

* unsharded builds and link jobs use this file as the nvcc shim
  (``python -S -E launch.py CACHE_OR_EMPTY REAL_NVCC ARGS...``), so the only logic on
  their path is :func:`nvcc_depfile_args`;
* the seat wrapper (``wheelkiln.shard.wrapper``) imports it to build the command it
  runs for an in-slice compile (:func:`compile_command`).

Reading a command line is :mod:`wheelkiln.compiler_args`.

The module starts once per TU, so it imports only ``os``, ``sys`` and the command-line
parser (itself stdlib only) at load time: no ``typing``, ``dataclasses`` or ``re`` (each
costs milliseconds on every compile).
"""

# Per-TU hot path: pathlib costs ~8 ms to import (fnmatch, re, urllib), so os.path strings.
# ruff: noqa: PTH100, PTH119, PTH120
from __future__ import annotations

import os
import sys

if __name__ == "__main__":  # run by path: make the package importable, nothing else
    sys.path[0] = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from wheelkiln.compiler_args import (
    has_nvcc_temp_file,
    is_nvcc,
    nvcc_depfile_args,
    nvcc_path_args,
)

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence
    from typing import NoReturn

NVCC_TOOLS = frozenset({"nvcc", "cicc", "cudafe++", "nvcc.exe", "cudafe++.exe"})
"""Parent processes that make a compiler call one of nvcc's own host passes."""

_SHELLS = frozenset({"sh", "bash", "dash", "zsh", "ash", "busybox"})


def parent_is_nvcc(max_depth: int = 3) -> bool:
    """True when nvcc, cicc or cudafe++ started this process, possibly through shells.

    nvcc runs its host compiler through ``sh -c``, and a launcher script may sit in
    between, so shells are looked through (up to *max_depth* processes). Reads
    ``/proc``; elsewhere it answers False.
    """
    pid = os.getppid()
    for _ in range(max_depth):
        try:
            with open(f"/proc/{pid}/stat", "rb") as handle:
                stat = handle.read()
        except OSError:
            return False
        open_paren, close_paren = stat.find(b"("), stat.rfind(b")")
        comm = stat[open_paren + 1 : close_paren].decode("utf-8", "replace")
        if comm in NVCC_TOOLS:
            return True
        if comm not in _SHELLS:
            return False
        pid = int(stat[close_paren + 2 :].split()[1])
        if pid <= 1:
            return False
    return False


def is_nvcc_host_pass(args: Sequence[str]) -> bool:
    """True for a host-compiler call that nvcc makes itself through ``-ccbin``.

    Such a call is part of the enclosing nvcc compile: it must run the compiler
    directly. ccache wraps nvcc; wrapping its ``-ccbin`` as well caches random
    ``tmpxft_`` inputs (ccache#1294). torch's cpp_extension passes ``-ccbin $CC``, so
    whatever CC names sees these calls.
    """
    return has_nvcc_temp_file(args) or parent_is_nvcc()


NVCC_ENV_FLAGS = ("NVCC_PREPEND_FLAGS", "NVCC_APPEND_FLAGS", "NVCC_CCBIN")
"""Environment variables nvcc reads as command-line options. No compiler cache looks at
them (ccache 4.14 hashes ``CPATH`` and friends, ``GCC_EXEC_PREFIX`` and
``COMPILER_PATH``, never these), so a ``.cu`` compiled with ``NVCC_APPEND_FLAGS=-DX=1``
and then ``-DX=2`` was a hit serving the first object. The launcher moves them onto the
command line, where every cache hashes them, and takes them out of nvcc's environment
so they do not apply twice."""

_NVCC_QUOTING = frozenset("\"'\\")


class NvccEnvironmentError(ValueError):
    """An nvcc flag variable kiln cannot move onto the command line faithfully."""


def nvcc_environment_args(
    args: Sequence[str], environ: Mapping[str, str]
) -> tuple[list[str], list[str]]:
    """What :data:`NVCC_ENV_FLAGS` in *environ* add to nvcc's *args*: (before, after).

    ``NVCC_PREPEND_FLAGS`` goes before the command line and ``NVCC_APPEND_FLAGS`` after
    it, split at whitespace as nvcc splits them. ``NVCC_CCBIN`` becomes ``-ccbin VALUE``
    unless the command line names a host compiler itself (which then wins, as in nvcc).

    nvcc reads quotes and backslashes in these variables by rules of its own (quotes
    stay in the option, a quoted ``-Xcompiler "-O2 -g"`` reaches gcc as one argument),
    which no command line reproduces reliably: such a value raises
    :class:`NvccEnvironmentError` rather than compile with a key that does not
    describe the compile.
    """
    moved: dict[str, list[str]] = {}
    for name in NVCC_ENV_FLAGS:
        value = environ.get(name)
        if not value or not value.strip():
            continue
        if name != "NVCC_CCBIN" and not _NVCC_QUOTING.isdisjoint(value):
            raise NvccEnvironmentError(
                f"{name}={value!r} holds quotes or backslashes, which nvcc reads by its "
                "own rules: kiln cannot put them into the cache key faithfully. Pass these "
                "flags through the build system (CMAKE_CUDA_FLAGS, extra_compile_args) or "
                "write them without quotes."
            )
        moved[name] = [value] if name == "NVCC_CCBIN" else value.split()
    if not moved:
        return [], []
    after = list(moved.get("NVCC_APPEND_FLAGS", []))
    if "NVCC_CCBIN" in moved and not any(
        arg in ("-ccbin", "--compiler-bindir") or arg.startswith("--compiler-bindir=")
        for arg in args
    ):
        after = ["-ccbin", moved["NVCC_CCBIN"][0], *after]
    return list(moved.get("NVCC_PREPEND_FLAGS", [])), after


def compile_command(
    cache: str | None,
    compiler: str,
    args: Sequence[str],
    environ: Mapping[str, str] | None = None,
    cwd: str | None = None,
) -> list[str]:
    """The command that runs *compiler* with *args* through *cache* (None/"" = no cache)
    in *cwd* (default: this process's; it reads relative options files from there).

    nvcc calls get the flags of :data:`NVCC_ENV_FLAGS` from *environ* (default: this
    process's) on their command line, their include options in the spelling ccache
    makes relative (:func:`nvcc_path_args`), then :func:`nvcc_depfile_args`, so ccache
    can run them in depend mode. Run it with :func:`compile_environment`.
    """
    call_args = list(args)
    if is_nvcc(compiler):
        before, after = nvcc_environment_args(call_args, os.environ if environ is None else environ)
        call_args = nvcc_depfile_args(nvcc_path_args([*before, *call_args, *after], cwd))
    if cache:
        return [cache, compiler, *call_args]
    return [compiler, *call_args]


def compile_environment(
    cache: str | None, compiler: str, environ: Mapping[str, str] | None = None
) -> dict[str, str] | None:
    """The environment for :func:`compile_command`, or None to inherit it unchanged.

    An nvcc call loses :data:`NVCC_ENV_FLAGS` (the command has them now). Under ccache
    it always gets ``CCACHE_DEPEND=1`` (and loses ``CCACHE_NODEPEND``): depend mode is
    a correctness setting for nvcc, not a choice, and shards and link job must agree on
    it or the link job misses.
    """
    if not is_nvcc(compiler):
        return None
    source = os.environ if environ is None else environ
    under_ccache = bool(cache) and os.path.basename(cache or "").lower().startswith("ccache")
    if not under_ccache and not any(name in source for name in NVCC_ENV_FLAGS):
        return None
    env = dict(source)
    for name in NVCC_ENV_FLAGS:
        env.pop(name, None)
    if under_ccache:
        env["CCACHE_DEPEND"] = "1"
        env.pop("CCACHE_NODEPEND", None)
    return env


def exec_compile(cache: str | None, compiler: str, args: list[str]) -> NoReturn:
    """Replace this process by *compiler* *args* run through *cache* (see
    :func:`compile_command`). The compiler is looked up on PATH when it is not a path.

    A host pass of nvcc (:func:`is_nvcc_host_pass`) runs without the cache, so this
    launcher can also stand in for ``CC``/``CXX`` in builds that hand ``$CC`` to nvcc.
    """
    if cache and not is_nvcc(compiler) and is_nvcc_host_pass(args):
        cache = None
    try:
        command = compile_command(cache, compiler, args)
    except NvccEnvironmentError as error:
        sys.stderr.write(f"kiln launcher: {error}\n")
        raise SystemExit(2) from None
    env = compile_environment(cache, compiler)
    if env is not None:
        os.execvpe(command[0], command, env)
    os.execvp(command[0], command)


def launcher_argv(python: str | None = None) -> list[str]:
    """The command that starts this launcher fastest: :func:`wheelkiln.per_tu.launcher_argv`."""
    from wheelkiln import per_tu

    return per_tu.launcher_argv(python)


def main(argv: Sequence[str] | None = None) -> NoReturn:
    """The nvcc shim: ``launch.py CACHE_OR_EMPTY REAL_NVCC ARGS...``."""
    arguments = list(sys.argv[1:] if argv is None else argv)
    if len(arguments) < 2:
        sys.stderr.write("usage: launch.py CACHE_OR_EMPTY REAL_COMPILER [ARGS...]\n")
        raise SystemExit(2)
    cache, compiler, *rest = arguments
    exec_compile(cache or None, compiler, rest)


if __name__ == "__main__":
    main()
