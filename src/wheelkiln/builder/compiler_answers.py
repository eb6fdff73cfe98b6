"""meson's compiler detection answered by the CC/CXX fronts, from what the compiler said.

``meson setup`` detects each C and C++ compiler for the host machine and again for the
build machine, in every fresh build directory: ``cc --version``, ``cc -cpp -x c -E -dM -``
(the predefined macros), ``cc -Wl,--version`` (the linker behind it) and, once,
``cc -xc -E -v -`` (the default include directories); Debian's
``dpkg-architecture``, which meson runs for its default libdir, asks ``$CC -dumpmachine``.
Each is a compiler start, with cc1 or collect2 and ld behind it: 0.06-0.08 s of a hot
demo-cython setup on a quiet machine. kiln builds in a fresh directory every time.

In a meson build kiln asks these :data:`QUESTIONS` once through the front script itself
(with the build's environment, stdin empty, as meson does), keeps each answer whose
exit code is 0 (stdout and stderr as written; collect2's stderr names a temporary file
that differs from run to run, which meson does not read), and hands the fronts a shell
file of those answers (``KILN_COMPILER_ANSWERS``): the front then prints the kept
answer and exits, and any other call, or a question without a kept answer, runs as
before.

The answers are kept under ``$KILN_HOME/compiler-answers/<key>``; the key holds what
they depend on: each front script (content-addressed: it names the real compiler and
its ``--version``), the real compiler's resolved path and file identity (inode, size,
mtime: a reinstalled compiler is another key even with the same version line), the
``ld`` and ``as`` a gcc driver would find on PATH by the same identity, and the
variables a gcc driver reads (search paths, ``GCC_EXEC_PREFIX``, the locale its
messages are in, ``PATH``). Another compiler, linker, assembler or variable is another
key, whose first build asks again.
"""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path

from wheelkiln import holds, run

QUESTIONS: Mapping[str, tuple[tuple[str, ...], ...]] = {
    "cc": (("--version",), ("-cpp", "-x", "c", "-E", "-dM", "-"), ("-Wl,--version",),
           ("-dumpmachine",), ("-xc", "-E", "-v", "-")),
    "c++": (("--version",), ("-cpp", "-x", "c++", "-E", "-dM", "-"), ("-Wl,--version",),
            ("-dumpmachine",), ("-xc++", "-E", "-v", "-")),
}  # fmt: skip
"""What meson (and dpkg-architecture) ask each front, exactly as they ask it: the last
is meson's question for the compiler's default include directories."""

ENV_ANSWERS = "KILN_COMPILER_ANSWERS"
"""The directory of the kept answers (``<front name>.sh``), set in meson builds only."""

DRIVER_VARIABLES = (
    "GCC_EXEC_PREFIX", "COMPILER_PATH", "LIBRARY_PATH", "CPATH", "C_INCLUDE_PATH",
    "CPLUS_INCLUDE_PATH", "OBJC_INCLUDE_PATH", "OBJCPLUS_INCLUDE_PATH", "GCC_COMPARE_DEBUG",
    "CCC_OVERRIDE_OPTIONS", "SDKROOT", "MACOSX_DEPLOYMENT_TARGET",
)  # fmt: skip
"""What gcc's and clang's drivers read from the environment that changes what they
answer: their search paths (which become a build system's implicit include and link
directories), and clang's option override and the SDK and deployment target that set
predefined macros."""
READ_VARIABLES = (
    "PATH", *DRIVER_VARIABLES, "LANG", "LANGUAGE", "LC_ALL", "LC_MESSAGES", "LC_CTYPE",
    "KILN_HOST_CC", "KILN_HOST_CXX",
)  # fmt: skip
"""What the answers may depend on besides the programs: what the drivers read and the
locale of their messages."""

SCHEMA = 2
"""Part of the key: a change in what is kept retires every kept answer."""


def answer_line(name: str) -> str:
    """The front script's line that gives a kept answer: sources ``<name>.sh`` of
    ``$KILN_COMPILER_ANSWERS``, which prints and exits for a kept question and returns
    for anything else."""
    questions = "|".join(shlex.quote(" ".join(question)) for question in QUESTIONS[name])
    answers = f'"${ENV_ANSWERS}/{name}.sh"'
    return (
        f'case "$*" in {questions}) [ -n "${{{ENV_ANSWERS}-}}" ] && [ -r {answers} ] '
        f"&& . {answers};; esac\n"
    )


def file_identity(program: str | None) -> str:
    """A program's resolved path and file identity (inode, size, mtime): a reinstalled
    program is another identity, even with the same version line."""
    if program is None:
        return "absent"
    resolved = os.path.realpath(program)
    try:
        status = Path(resolved).stat()
    except OSError:
        return f"{resolved}: absent"
    return f"{resolved}:{status.st_ino}:{status.st_size}:{status.st_mtime_ns}"


def _real_compiler(front: Path) -> str | None:
    """The compiler a host front script execs (its ``# wheelkiln host compiler front:
    COMMAND: VERSION`` line, :func:`wheelkiln.builder.toolchain.host_front_script`; the
    command's first word, its arguments being in the front's own bytes)."""
    try:
        lines = front.read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        if line.startswith("# wheelkiln host compiler front: "):
            command = line.removeprefix("# wheelkiln host compiler front: ").split(": ")[0]
            try:
                words = shlex.split(command)
            except ValueError:
                return None
            return words[0] if words else None
    return None


def answers_key(fronts: Mapping[str, Path], environ: Mapping[str, str]) -> str:
    """The digest of what the answers of *fronts* (name → script) depend on (module doc)."""
    path = environ.get("PATH", os.defpath)
    programs = {}
    for name, front in sorted(fronts.items()):
        real = _real_compiler(front)
        programs[name] = {
            "front": file_identity(str(front)),
            "compiler": file_identity(shutil.which(real, path=path) if real else None),
        }
    blob = json.dumps(
        {
            "fronts": programs,
            "ld": file_identity(shutil.which("ld", path=path)),
            "as": file_identity(shutil.which("as", path=path)),
            "environment": {k: environ.get(k) for k in READ_VARIABLES if k != "PATH"},
            # Resolved: a workdir's view of the build environment (<workdir>/.envs) is
            # the same directory in every workdir.
            "path": [os.path.realpath(entry) for entry in path.split(os.pathsep) if entry],
            "questions": QUESTIONS,
            "schema": SCHEMA,
        },
        sort_keys=True,
    )
    return hashlib.sha256(blob.encode()).hexdigest()[:20]


def _ask(
    front: Path, question: Sequence[str], environ: Mapping[str, str], stderr: Path
) -> tuple[str, str] | None:
    """The front's answer to *question* as meson gets it (stdout, stderr), when its exit
    code is 0; anything else is not kept, and the real call answers each time."""
    script = 'exec "$0" "$@" </dev/null 2>"$KILN_ANSWER_STDERR"'
    done = run.run(
        ["sh", "-c", script, str(front), *question],
        env={**environ, "KILN_ANSWER_STDERR": str(stderr)},
        check=False,
    )
    if done.returncode != 0:
        return None
    answer = done.output, stderr.read_text(errors="replace")
    # Kept only where the text is what the compiler wrote: the shell file is UTF-8.
    return None if any("\ufffd" in text for text in answer) else answer


def prepare(fronts: Mapping[str, Path], environ: Mapping[str, str], store: Path) -> dict[str, str]:
    """The environment that lets *fronts* answer meson's questions themselves: kept
    answers under *store* for this key, asked now where none are kept yet. Nothing when
    they cannot be kept (an unwritable home): the compiler then answers meson itself."""
    directory = store / answers_key(fronts, environ)
    holds.hold(store, directory.name)  # the fronts read it all through the build
    try:
        _keep(directory, fronts, environ)
    except OSError:
        return {}
    return {ENV_ANSWERS: str(directory)} if directory.is_dir() else {}


def _keep(directory: Path, fronts: Mapping[str, Path], environ: Mapping[str, str]) -> None:
    """Ask and keep the answers in *directory*, unless they are kept already."""
    store = directory.parent
    if not directory.is_dir():
        staged = store / f".{directory.name}.{os.getpid()}"
        shutil.rmtree(staged, ignore_errors=True)
        staged.mkdir(parents=True)
        for name, front in sorted(fronts.items()):
            cases = []
            for question in QUESTIONS[name]:
                answer = _ask(front, question, environ, staged / "stderr")
                if answer is not None:
                    out, err = (shlex.quote(text) for text in answer)
                    cases.append(
                        f"{shlex.quote(' '.join(question))}) printf %s {out}; "
                        f"printf %s {err} >&2; exit 0;;"
                    )
            body = "".join(f"  {case}\n" for case in cases)
            (staged / f"{name}.sh").write_text(f'case "$*" in\n{body}esac\n')
        (staged / "stderr").unlink(missing_ok=True)
        try:
            staged.replace(directory)
        except OSError:  # another job kept the same answers first
            shutil.rmtree(staged, ignore_errors=True)
