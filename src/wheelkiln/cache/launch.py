"""Run one compiler call through the compiler cache (stdlib only, per-TU hot path).

Two callers:

* unsharded builds and link jobs use this file as the nvcc shim
  (``python -S -E launch.py CACHE_OR_EMPTY REAL_NVCC ARGS...``), so the only logic on
  their path is :func:`nvcc_depfile_args`;
* the seat wrapper (``wheelkiln.shard.wrapper``) imports it to read compiler command
  lines (:func:`parse_compiler_args`) and to build the command it runs for an in-slice
  compile (:func:`compile_command`).

The module starts once per TU, so it imports only ``os`` and ``sys`` at load time:
no ``typing``, ``dataclasses`` or ``re`` (each costs milliseconds on every compile).
"""

# Per-TU hot path: pathlib costs ~8 ms to import (fnmatch, re, urllib), so os.path strings.
# ruff: noqa: PTH100, PTH109, PTH118, PTH119, PTH120, PTH122
from __future__ import annotations

import os
import sys

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence
    from typing import NoReturn

SOURCE_EXTENSIONS = frozenset(
    {
        # C, C++, Objective-C, preprocessed forms
        ".c", ".i", ".cc", ".cp", ".cpp", ".cxx", ".c++", ".C", ".CC", ".CPP", ".ii",
        ".m", ".mi", ".mm", ".M", ".mii",
        # CUDA / HIP
        ".cu", ".hip",
        # assembler
        ".s", ".S", ".sx", ".asm",
        # Fortran
        ".f", ".for", ".ftn", ".f77", ".f90", ".f95", ".f03", ".f08",
        ".F", ".FOR", ".FTN", ".F77", ".F90", ".F95", ".F03", ".F08",
    }
)  # fmt: skip
"""Operand extensions that make an operand a source file (as gcc and nvcc read them)."""

# Options whose value is the *next* argument when written alone (`-I dir`). Written
# joined (`-Idir`, `-std=c++17`, `--generate-code=arch=...`) they take nothing.
_GCC_SEPARATE = frozenset(
    {
        "-o", "--output", "-x", "--language",
        "-I", "-isystem", "-iquote", "-idirafter", "-include", "-imacros", "-iprefix",
        "-iwithprefix", "-iwithprefixbefore", "-isysroot", "-imultilib", "-iframework",
        "-cxx-isystem", "-include-pch", "-ivfsoverlay", "--sysroot",
        "-D", "-U", "-A",
        "-MF", "-MT", "-MQ", "-MJ",
        "-L", "-l", "-u", "-T", "-z", "-e",
        "-Xlinker", "-Xassembler", "-Xpreprocessor", "-Xclang", "-mllvm",
        "-aux-info", "-dumpbase", "-dumpbase-ext", "-dumpdir", "--param",
        "-arch", "-target", "-F", "-framework", "-install_name", "-resource-dir",
        "-working-directory", "--serialize-diagnostics", "-B",
    }
)  # fmt: skip
_NVCC_SEPARATE = _GCC_SEPARATE | frozenset(
    {
        "--output-file", "-odir", "--output-directory", "--x",
        "--dependency-output", "-MT", "--dependency-target-name",
        "--include-path", "--system-include", "--pre-include",
        "--define-macro", "--undefine-macro", "--library-path", "--library",
        "-ccbin", "--compiler-bindir", "-Xcompiler", "--compiler-options",
        "--linker-options", "-Xptxas", "--ptxas-options", "-Xnvlink", "--nvlink-options",
        "-Xarchive", "--archive-options", "-Xfatbin", "--fatbin-options",
        "-Xcudafe", "-Xcicc",
        "--gpu-architecture", "-code", "--gpu-code", "-gencode", "--generate-code",
        "-rdc", "--relocatable-device-code", "-std", "--std", "-t", "--threads",
        "-split-compile", "--split-compile", "-split-compile-extended",
        "--split-compile-extended", "-maxrregcount", "--maxrregcount",
        "-optf", "--options-file", "-ftz", "--ftz", "-prec-div", "--prec-div",
        "-prec-sqrt", "--prec-sqrt", "-fmad", "--fmad",
        "-allow-expensive-optimizations", "--allow-expensive-optimizations",
        "-ldir", "--libdevice-directory", "-cudart", "--cudart", "-cudadevrt",
        "--cudadevrt", "-keep-dir", "--keep-dir", "-diag-suppress", "--diag-suppress",
        "-diag-error", "--diag-error", "-diag-warn", "--diag-warn", "-Werror", "--Werror",
        "-default-stream", "--default-stream", "-time", "--time", "-run-args",
        "--run-args", "-target-dir", "--target-directory", "-m", "--machine",
        "-idp", "--input-drive-prefix", "-ddp", "--dependency-drive-prefix",
        "-dp", "--drive-prefix", "-O", "--optimize", "-dopt", "--dopt",
        "-static-global-template-stub", "--static-global-template-stub",
        "-compress-mode", "--compress-mode", "-fdevice-time-trace",
        "--fdevice-time-trace", "-hls", "--host-linker-script",
    }
)  # fmt: skip

# nvcc stages. nvcc has no joined "-o<file>" ("-odir" and "-optf" are options of their own).
_NVCC_PREPROCESS = frozenset(
    {"-E", "--preprocess", "-M", "--generate-dependencies", "-MM",
     "--generate-nonsystem-dependencies"}
)  # fmt: skip
_NVCC_COMPILE = frozenset({"-c", "--compile", "-dc", "--device-c", "-dw", "--device-w"})
_NVCC_OTHER_STAGE = frozenset(
    {"-ptx", "--ptx", "-cubin", "--cubin", "-fatbin", "--fatbin", "-cuda", "--cuda",
     "-optix-ir", "--optix-ir", "-ltoir", "--ltoir", "-S"}
)  # fmt: skip
_NVCC_DEPFILE_FLAGS = frozenset(
    {"--generate-dependencies-with-compile", "--generate-nonsystem-dependencies-with-compile",
     "--dependency-output", "--generate-dependencies", "--generate-nonsystem-dependencies",
     "--dependency-target-name"}
)  # fmt: skip
_INFO_FLAGS = frozenset(
    {"--version", "-V", "-dumpversion", "-dumpfullversion", "-dumpmachine", "-###",
     "--help", "-h", "--list-gpu-arch", "--list-gpu-code", "-list-gpu-arch",
     "-list-gpu-code", "--dryrun", "-dryrun"}
)  # fmt: skip


def is_nvcc(compiler: str) -> bool:
    """True when *compiler* names nvcc (``/usr/local/cuda/bin/nvcc``, ``nvcc.exe``, a shim
    called ``x-nvcc``)."""
    name = os.path.basename(compiler).lower()
    if name.endswith(".exe"):
        name = name[:-4]
    return name.endswith("nvcc")


class CompilerArgs:
    """What one compiler command line asks for, as gcc, clang and nvcc read it.

    ``stage`` is one of ``"compile"`` (``-c``, nvcc ``-dc``/``-dw``), ``"preprocess"``
    (``-E``, ``-M``, ``-MM``), ``"device-link"`` (nvcc ``-dlink``), ``"lib"`` (nvcc
    ``-lib``), ``"other"`` (``-S``, ``-ptx``, ``-cubin`` …), ``"info"`` (``--version``,
    no operands) or ``"link"``.
    """

    __slots__ = (
        "dep_targets",
        "depfile",
        "depfile_requested",
        "has_dependency_flag",
        "nvcc",
        "operands",
        "output",
        "output_dir",
        "relocatable",
        "shared",
        "sources",
        "stage",
    )

    def __init__(self, nvcc: bool) -> None:
        self.nvcc = nvcc
        self.stage = "link"
        self.sources: list[str] = []
        """Operands that are source files (by extension, or any operand after ``-x LANG``)."""
        self.operands: list[str] = []
        """Every non-option operand: sources, objects, libraries."""
        self.output: str | None = None
        """The ``-o`` value as written (relative to the call's cwd)."""
        self.output_dir: str | None = None
        """nvcc ``-odir``."""
        self.shared = False
        self.relocatable = False
        self.depfile_requested = False
        """``-MD``/``-MMD`` or nvcc ``--generate-*dependencies-with-compile``."""
        self.depfile: str | None = None
        """``-MF`` / ``--dependency-output`` value."""
        self.dep_targets: list[str] = []
        """``-MT``/``-MQ`` values."""
        self.has_dependency_flag = False
        """Any ``-M*`` or nvcc dependency option at all."""

    @property
    def is_tu(self) -> bool:
        """A compile of exactly one source file to an object."""
        return self.stage == "compile" and len(self.sources) == 1

    def object_path(self) -> str | None:
        """Where the object of a one-source compile goes, as the compiler decides it."""
        if self.output is not None:
            return self.output
        if len(self.sources) != 1:
            return None
        stem = os.path.splitext(os.path.basename(self.sources[0]))[0]
        name = stem + (".obj" if os.name == "nt" else ".o")
        if self.output_dir is not None:
            return os.path.join(self.output_dir, name)
        return name

    def depfile_path(self) -> str | None:
        """The dependency file the compiler writes, or None when none is asked for."""
        if not self.depfile_requested:
            return None
        if self.depfile is not None:
            return self.depfile
        obj = self.object_path()
        if obj is None:
            return None
        return os.path.splitext(obj)[0] + ".d"


def expand_response_files(args: Sequence[str], cwd: str | None = None) -> list[str]:
    """Replace ``@file`` arguments by the arguments in the file, for reading only.

    The real command keeps its ``@file``; this is what a parser needs to see inside it.
    An ``@name`` that is no readable file stays as it is (gcc does the same).
    """
    if not any(arg.startswith("@") for arg in args):
        return list(args)
    import shlex  # here only: shlex imports re

    expanded: list[str] = []
    for arg in args:
        if arg.startswith("@") and len(arg) > 1:
            path = os.path.join(cwd or os.getcwd(), arg[1:])
            try:
                with open(path, encoding="utf-8", errors="surrogateescape") as handle:
                    text = handle.read()
            except OSError:
                expanded.append(arg)
                continue
            expanded.extend(shlex.split(text, posix=os.name != "nt"))
        else:
            expanded.append(arg)
    return expanded


def parse_compiler_args(compiler: str, args: Sequence[str]) -> CompilerArgs:
    """Read a compiler command line (``args`` excludes the compiler itself).

    Options that take a separate value (``-I dir``, ``-Xcompiler -fPIC``,
    ``-gencode arch=…``) never count as operands; ``--opt=value`` takes nothing more.
    ``-x LANG`` makes every later operand a source until ``-x none`` (header languages
    such as ``c++-header`` make no TU: a precompiled header always builds for real).
    """
    nvcc = is_nvcc(compiler)
    parsed = CompilerArgs(nvcc)
    args = expand_response_files(args)
    separate = _NVCC_SEPARATE if nvcc else _GCC_SEPARATE
    language: str | None = None
    preprocess = compile_ = other = info = device_link = lib = False
    count = len(args)
    index = 0
    while index < count:
        arg = args[index]
        index += 1
        if not arg.startswith("-") or arg == "-":
            parsed.operands.append(arg)
            if language is not None:
                if language != "none" and not language.endswith("-header"):
                    parsed.sources.append(arg)
            elif os.path.splitext(arg)[1] in SOURCE_EXTENSIONS:
                parsed.sources.append(arg)
            continue
        value: str | None = None
        if arg in separate:
            if index < count:
                value = args[index]
                index += 1
            else:
                value = ""
        name = arg
        if value is None and "=" in arg and (nvcc or arg.startswith("--")):
            name, _, value = arg.partition("=")
        # --- the options that matter, in both spellings ---
        if name in ("-o", "--output", "--output-file"):
            parsed.output = value if value is not None else ""
        elif not nvcc and name.startswith("-o") and value is None:
            parsed.output = arg[2:]
        elif name in ("-odir", "--output-directory"):
            parsed.output_dir = value
        elif name in ("-x", "--x", "--language"):
            language = value
        elif name.startswith("-x") and value is None and not nvcc:
            language = arg[2:]
        elif name in ("-c",):
            compile_ = True
        elif name == "-E":
            preprocess = True
        elif name in ("-shared", "--shared", "-dynamiclib"):
            parsed.shared = True
        elif name == "-r":
            parsed.relocatable = True
        elif name in _INFO_FLAGS or name.startswith(("-print-", "--print-")):
            info = True
        elif (name.startswith("-M") and name != "-MJ") or (nvcc and name in _NVCC_DEPFILE_FLAGS):
            parsed.has_dependency_flag = True
            _read_dependency_option(parsed, name, value)
            if name in ("-M", "-MM", "--generate-dependencies",
                        "--generate-nonsystem-dependencies"):  # fmt: skip
                preprocess = True
        elif nvcc:
            if name in _NVCC_PREPROCESS:
                preprocess = True
            elif name in _NVCC_COMPILE:
                compile_ = True
            elif name in _NVCC_OTHER_STAGE:
                other = True
            elif name in ("-dlink", "--device-link"):
                device_link = True
            elif name in ("-lib", "--lib"):
                lib = True
            elif name in ("-optf", "--options-file") and value:
                # read the options file's arguments in place of the option
                args = [*args[:index], *expand_options_file(value), *args[index:]]
                count = len(args)
        elif name == "-S":
            other = True
    if preprocess:
        parsed.stage = "preprocess"
    elif other:
        parsed.stage = "other"
    elif compile_:
        parsed.stage = "compile"
    elif device_link:
        parsed.stage = "device-link"
    elif lib:
        parsed.stage = "lib"
    elif info or not parsed.operands:
        parsed.stage = "info"
    return parsed


def _read_dependency_option(parsed: CompilerArgs, name: str, value: str | None) -> None:
    if name in ("-MD", "-MMD", "--generate-dependencies-with-compile",
                "--generate-nonsystem-dependencies-with-compile"):  # fmt: skip
        parsed.depfile_requested = True
    elif name in ("-MF", "--dependency-output"):
        parsed.depfile = value
    elif name.startswith("-MF"):
        parsed.depfile = name[3:]
    elif name in ("-MT", "-MQ", "--dependency-target-name"):
        if value is not None:
            parsed.dep_targets.append(value)
    elif name.startswith(("-MT", "-MQ")):
        parsed.dep_targets.append(name[3:])


def expand_options_file(path: str) -> list[str]:
    """The arguments inside an nvcc ``--options-file`` (empty when unreadable)."""
    try:
        with open(path, encoding="utf-8", errors="surrogateescape") as handle:
            text = handle.read()
    except OSError:
        return []
    import shlex  # here only: shlex imports re

    return shlex.split(text)


def nvcc_depfile_args(argv: list[str]) -> list[str]:
    """Add ``-MD -MF <output>.d`` to an nvcc compile that asks for no dependency file.

    *argv* is nvcc's argument list (without nvcc itself). ccache caches nvcc correctly
    only in depend mode: its default (direct, falling back to preprocessor) mode hashes
    the output of ``nvcc -E``, which defines ``__CUDA_ARCH__``, so an edit to host-only
    code under ``#ifndef __CUDA_ARCH__`` leaves the hash unchanged and ccache served the
    stale object (measured on ccache 4.7.5 and 4.14.2). Depend mode hashes the inputs
    listed in the compiler's depfile and is disabled when there is no ``-MD``; CMake asks
    nvcc for one, setuptools never does, so the launcher adds it. Anything that is not a
    one-source compile (``-c``, ``--compile``, ``-dc``), or that already carries a
    dependency option, comes back unchanged.
    """
    parsed = parse_compiler_args("nvcc", argv)
    if parsed.stage != "compile" or len(parsed.sources) != 1 or parsed.has_dependency_flag:
        return argv
    output = parsed.object_path()
    if not output:
        return argv
    return [*argv, "-MD", "-MF", output + ".d"]


NVCC_TOOLS = frozenset({"nvcc", "cicc", "cudafe++", "nvcc.exe", "cudafe++.exe"})
"""Parent processes that make a compiler call one of nvcc's own host passes."""

_SHELLS = frozenset({"sh", "bash", "dash", "zsh", "ash", "busybox"})


def has_nvcc_temp_file(args: Sequence[str]) -> bool:
    """True when an argument names one of nvcc's ``tmpxft_*`` temp files."""
    return any("tmpxft_" in arg for arg in args)


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
) -> list[str]:
    """The command that runs *compiler* with *args* through *cache* (None/"" = no cache).

    nvcc calls get the flags of :data:`NVCC_ENV_FLAGS` from *environ* (default: this
    process's) on their command line, then :func:`nvcc_depfile_args`, so ccache can
    run them in depend mode. Run it with :func:`compile_environment`.
    """
    call_args = list(args)
    if is_nvcc(compiler):
        before, after = nvcc_environment_args(call_args, os.environ if environ is None else environ)
        call_args = nvcc_depfile_args([*before, *call_args, *after])
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
    """The command that starts this launcher fastest; append ``CACHE REAL_NVCC ARGS...``.

    ``python -S -E -c CODE`` imports this module from its cached bytecode, where running
    launch.py by path compiles it from source on every start (~1.5 ms). The code holds
    ``;``: put it in a shell script (shell-quoted), not in a CMake list.
    """
    src_dir = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    code = f"import sys;sys.path[0]={src_dir!r};from wheelkiln.cache.launch import main;main()"
    return [python or os.path.realpath(sys.executable), "-S", "-E", "-c", code]


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
