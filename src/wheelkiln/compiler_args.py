"""What a compiler command line says (stdlib only, per-TU hot path).

:func:`parse_compiler_args` reads one gcc, clang or nvcc call into a
:class:`CompilerArgs`: its stage (compile, link, device link, preprocess), sources,
output, dependency-file options. It does no I/O apart from reading the response and
options files the command line names (``@file``, ``--options-file``), which are part
of the command line. The seat wrapper, the cache launcher, the shard gate, the link
job's miss explanations and the ledger all read command lines through it.

It is imported on every TU (by the wrapper and the launcher), so it imports only
``os`` at load time: no ``typing``, ``dataclasses`` or ``re``.
"""

# Per-TU hot path: pathlib costs ~8 ms to import (fnmatch, re, urllib), so os.path strings.
# ruff: noqa: PTH109, PTH118, PTH119, PTH122
from __future__ import annotations

import os
import stat

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence

PROBE_MARKERS = (
    "CMakeScratch",
    "CompilerId",
    "CMakeTmp",
    "cmTC_",
    "meson-private",
    "conftest",
)
"""Path fragments of build-system probes (in a call's sources, output or working
directory): these compiles and links always run for real, past the cache, in shard jobs
and link jobs alike."""

OBJECT_EXTENSIONS = frozenset({".o", ".obj", ".lo"})
"""Operand extensions of object files, as a link names them."""

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

_NVCC_L_FLAGS = frozenset({"-lineinfo", "-lto"})
"""nvcc options spelled like a joined ``-l`` library."""

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
        "libraries",
        "library_dirs",
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
        self.library_dirs: list[str] = []
        """``-L`` values as written."""
        self.libraries: list[str] = []
        """``-l`` values as written (``m`` for ``-lm``, ``:libx.so`` for ``-l:libx.so``)."""

    @property
    def is_tu(self) -> bool:
        """A compile of exactly one source file to an object."""
        return self.stage == "compile" and len(self.sources) == 1

    def object_operands(self) -> list[str]:
        """The operands that are object files (by extension), as written."""
        return [op for op in self.operands if os.path.splitext(op)[1] in OBJECT_EXTENSIONS]

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
            text = _read_argument_file(arg[1:], cwd or os.getcwd())
            if text is None:
                expanded.append(arg)
                continue
            expanded.extend(shlex.split(text, posix=os.name != "nt"))
        else:
            expanded.append(arg)
    return expanded


def _read_argument_file(path: str, cwd: str | None, max_bytes: int | None = None) -> str | None:
    """The text of the file of arguments at *path* (relative to *cwd*), or None where it
    is unreadable, no regular file (a fifo would block: the command line may come from
    another job's log) or longer than *max_bytes*."""
    try:
        fd = os.open(os.path.join(cwd or "", path), os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as handle:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        data = handle.read() if max_bytes is None else handle.read(max_bytes + 1)
    if max_bytes is not None and len(data) > max_bytes:
        return None
    return data.decode("utf-8", "surrogateescape")


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
        elif name in ("-L", "--library-path") or (name[:2] == "-L" and value is None):
            parsed.library_dirs.append(arg[2:] if value is None else value)
        elif name in ("-l", "--library") or (
            name[:2] == "-l" and value is None and not (nvcc and name in _NVCC_L_FLAGS)
        ):
            parsed.libraries.append(arg[2:] if value is None else value)
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


_NVCC_PATH_OPTIONS = {
    "-I": "-I",
    "--include-path": "-I",
    "-isystem": "-isystem",
    "--system-include": "-isystem",
    "-include": "-include",
    "--pre-include": "-include",
}
"""nvcc's include options in every spelling, and the one ccache reads a path from."""

_NVCC_OPTIONS_FILE = frozenset({"-optf", "--options-file"})

NVCC_PATH_SPELLINGS = ("-isystem=", "-I=", "-include=", "--system-include", "--include-path",
                       "--pre-include", "-optf", "--options-file")  # fmt: skip
"""What :func:`nvcc_path_args` rewrites is in an argument holding one of these: a
command line without any is returned as it is (the launcher scripts skip it then)."""

_MAX_OPTIONS_FILE_BYTES = 1024**2
_MAX_OPTIONS_FILES = 16
"""Options files read for one command line, nested ones included."""


def nvcc_path_args(argv: list[str], cwd: str | None = None) -> list[str]:
    """nvcc's *argv* with each include option written as ``-I DIR``, ``-isystem DIR``
    or ``-include FILE``: one option and one path, however nvcc was given them.

    ccache makes an absolute path under its ``base_dir`` relative only where it knows
    the option: ``-isystem DIR``, ``-isystemDIR``. nvcc also takes ``-isystem=DIR``
    (what CMake writes for every system include directory of a CUDA TU, pybind11's and
    torch's among them), the long names (``--system-include``) and comma lists
    (``-I=A,B``). ccache hashes those as they are: a TU built in another directory (a
    shard, the link job) missed. nvcc reads every one of these spellings as the same
    options, so the compile is unchanged.

    An options file (``--options-file F``, ``-optf F``: CMake's Makefile generator puts
    a CUDA TU's include options into ``includes_CUDA.rsp``) that holds such a spelling
    is read into the command line, respelled; any other is left to nvcc and ccache,
    which read it too, in the separate spelling: ccache reads only that one, and would
    hash ``--options-file=F`` as a name, not the options in it. A relative options file
    is read from *cwd* (default: this process's), where nvcc runs.

    A value with a double quote stays as it is: nvcc reads a comma inside quotes as
    part of the path (``-I="a,b"``), which no respelling without the quotes keeps."""
    return _nvcc_path_args(argv, cwd, [_MAX_OPTIONS_FILES])


def _nvcc_path_args(argv: list[str], cwd: str | None, reads_left: list[int]) -> list[str]:
    out: list[str] = []
    index, count = 0, len(argv)
    while index < count:
        arg = argv[index]
        index += 1
        option, equals, files = arg.partition("=")
        if option in _NVCC_OPTIONS_FILE and (equals or index < count):
            if not equals:
                files = argv[index]
                index += 1
            for file in files.split(","):
                inlined = _respelled_options_file(file, cwd, reads_left) if file else None
                out += inlined if inlined is not None else [option, file]
            continue
        if arg in _NVCC_SEPARATE and not (arg.startswith("--") and arg in _NVCC_PATH_OPTIONS):
            # `-I DIR` ccache reads already; another option's value is never an option
            # here (`-Xcompiler -isystem=DIR` is gcc's: its `=` means the sysroot).
            out += argv[index - 1 : index + 1]
            index += 1
            continue
        name, equals, value = arg.partition("=")
        short = _NVCC_PATH_OPTIONS.get(name)
        if short is None or not (equals or name.startswith("--")):
            out.append(arg)  # `-IDIR` ccache reads already
            continue
        if not equals:  # a long name with its value next: `--system-include DIR`
            if index == count:
                out.append(arg)
                continue
            value = argv[index]
            index += 1
            if '"' in value:
                out += [arg, value]
                continue
        elif '"' in value:
            out.append(arg)
            continue
        for path in value.split(","):
            if path:
                out += [short, path]
    return out


def _respelled_options_file(path: str, cwd: str | None, reads_left: list[int]) -> list[str] | None:
    """The options in the nvcc options file at *path*, respelled, where one of them
    needs it; None to leave the file to nvcc: unreadable, larger than a megabyte, past
    the command's :data:`_MAX_OPTIONS_FILES` (a file naming itself would otherwise be
    read again and again), written with a quote or escape whose reading might differ
    from nvcc's (only double quotes are read here), or holding nothing to respell."""
    if reads_left[0] <= 0:
        return None
    reads_left[0] -= 1
    text = _read_argument_file(path, cwd, _MAX_OPTIONS_FILE_BYTES)
    if text is None or "'" in text or "\\" in text:
        return None
    if not any(spelling in text for spelling in NVCC_PATH_SPELLINGS):
        return None
    import shlex  # here only: shlex imports re

    try:
        options = shlex.split(text)
    except ValueError:  # an unclosed quote: nvcc's to report
        return None
    return _nvcc_path_args(options, cwd, reads_left)


def has_nvcc_temp_file(args: Sequence[str]) -> bool:
    """True when an argument names one of nvcc's ``tmpxft_*`` temp files."""
    return any("tmpxft_" in arg for arg in args)
