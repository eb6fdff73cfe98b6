"""The command line ccache saw for each TU the link job missed, from a second pass over
those TUs alone.

The link gate explains a miss by how the link job's compile differs from the shard's,
and the link job's side comes from ccache's log (``CCACHE_LOGFILE``). That log runs to
about 80 lines (6 KB) per compile, most of them ccache's whole configuration, and cost
every compile of every link job about 0.2 ms, to explain misses a passing link job
never has. So the build runs without it, and only when the stats log names missed TUs
are their compiles run again, with the log on:

* from ``ninja -t compdb`` where the build ran ninja (CMake, meson, torch's ninja
  writer): the exact command ninja ran, launcher included, in its directory;
* else from the build log, where setuptools prints each compile command it runs in
  the package tree.

Each runs in the build's own environment, so it goes through the same fronts
(launcher scripts, kiln's nvcc launcher) and reaches ccache with the same command line
and working directory as in the build. The miss stored an entry, so the second run is
a hit; ccache runs it read-only (it stores nothing either way) and without the job's
stats log, whose per-TU lines the gate has already read.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
from collections import defaultdict
from collections.abc import Collection, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from wheelkiln import run
from wheelkiln.compiler_args import PROBE_MARKERS, parse_compiler_args
from wheelkiln.errors import ToolNotFoundError

CCACHE_LOG_LINE = re.compile(
    r"^\[[^\]]*? (?P<pid>\d+)\s*\] (?P<key>Command line|Source file|Working directory): (?P<value>.*)$"
)
NINJA_PROGRESS = re.compile(r"^\s*\[\d+/\d+\]\s*")


@dataclass(frozen=True)
class Compile:
    """One compile as the build ran it: an argv, or a shell command (ninja's), in *cwd*."""

    argv: tuple[str, ...]
    cwd: str


def ccache_commands(log_path: Path) -> dict[str, tuple[list[str], str]]:
    """Per source file, the command line ccache saw and its working directory (from a
    ``CCACHE_LOGFILE``)."""
    by_pid: dict[str, dict[str, str]] = defaultdict(dict)
    if log_path.exists():
        for line in log_path.read_text(errors="replace").splitlines():
            match = CCACHE_LOG_LINE.match(line)
            if match:
                by_pid[match["pid"]].setdefault(match["key"], match["value"])
    commands: dict[str, tuple[list[str], str]] = {}
    for fields in by_pid.values():
        if "Source file" in fields and "Command line" in fields:
            commands[fields["Source file"]] = (
                shlex.split(fields["Command line"]),
                fields.get("Working directory", ""),
            )
    return commands


def logged_compile(line: str) -> list[str] | None:
    """*line* of a build log as an argv when it is one compile command (``cc ... -c a.c``)."""
    if " -c " not in line:
        return None
    try:
        argv = shlex.split(NINJA_PROGRESS.sub("", line))
    except ValueError:
        return None
    if len(argv) < 3:
        return None
    return argv if parse_compiler_args(argv[0], argv[1:]).is_tu else None


def _is_one_of(source: str, cwd: str, sources: Collection[str]) -> bool:
    """True when *source*, compiled in *cwd*, is one of *sources* as ccache's stats log
    names them: as written, or relative to the working directory (ccache rewrites paths
    under its ``base_dir`` that way)."""
    resolved = os.path.normpath(Path(cwd) / source)
    return any(os.path.normpath(Path(cwd) / other) == resolved for other in sources)


def _ninja_files(roots: Collection[Path]) -> Iterator[Path]:
    for root in roots:
        if root.is_dir():
            for found in sorted(root.rglob("build.ninja")):
                if not any(marker in str(found) for marker in PROBE_MARKERS):
                    yield found


def _ninja_compiles(
    ninja_files: Collection[Path], sources: Collection[str], environ: Mapping[str, str]
) -> list[Compile]:
    ninja = shutil.which("ninja", path=environ.get("PATH", os.defpath))
    if ninja is None:
        return []
    compiles: list[Compile] = []
    for build_file in ninja_files:
        listed = run.run([ninja, "-C", str(build_file.parent), "-t", "compdb"], check=False)
        if listed.returncode != 0:
            continue
        try:
            entries = json.loads(listed.output)
        except ValueError:
            continue
        for entry in entries if isinstance(entries, list) else []:
            if not isinstance(entry, dict):
                continue
            directory, file = str(entry.get("directory", "")), str(entry.get("file", ""))
            command = str(entry.get("command", ""))
            if command and file and _is_one_of(file, directory, sources):
                compiles.append(Compile(("/bin/sh", "-c", command), directory))
    return compiles


def missed_compiles(
    sources: Collection[str],
    build_log: str,
    tree: Path,
    build_dirs: Collection[Path],
    environ: Mapping[str, str],
) -> list[Compile]:
    """The compiles of *sources* (as ccache's stats log names them) the build ran: from
    the ninja files under *build_dirs* when there are any, else from *build_log*'s
    compile commands, which setuptools runs in *tree*."""
    ninja_files = list(_ninja_files(build_dirs))
    if ninja_files:
        return _ninja_compiles(ninja_files, sources, environ)
    compiles: list[Compile] = []
    for line in build_log.splitlines():
        argv = logged_compile(line)
        if argv is None:
            continue
        parsed = parse_compiler_args(argv[0], argv[1:])
        compile_ = Compile(tuple(argv), str(tree))
        if _is_one_of(parsed.sources[0], str(tree), sources) and compile_ not in compiles:
            compiles.append(compile_)
    return compiles


def log_compiles(
    compiles: Collection[Compile], environ: Mapping[str, str], log_path: Path
) -> dict[str, tuple[list[str], str]]:
    """Run *compiles* again through ccache with its log at *log_path*, and read back the
    command line ccache saw for each source (:func:`ccache_commands`)."""
    log_path.unlink(missing_ok=True)
    env = {**environ, "CCACHE_LOGFILE": str(log_path), "CCACHE_READONLY": "1"}
    env.pop("CCACHE_STATSLOG", None)
    for compile_ in compiles:
        try:
            run.run(list(compile_.argv), cwd=compile_.cwd, env=env, check=False)
        except ToolNotFoundError:  # a front the build deleted: that TU stays unexplained
            continue
    return ccache_commands(log_path)
