"""The one way wheelkiln starts a subprocess.

Every command is echoed as ``+ cmd`` (shell-quoted) when verbose, its executable is
checked before it starts so a missing tool gets a message that names PATH, and its
output is captured: shown only on failure unless verbose, or streamed line by line
into a log file for long builds.
"""

from __future__ import annotations

import os
import resource
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from wheelkiln.errors import BuildError, ToolNotFoundError

VERBOSE = os.environ.get("KILN_VERBOSE", "") not in ("", "0")


@dataclass(frozen=True)
class Completed:
    argv: tuple[str, ...]
    returncode: int
    output: str
    wall_seconds: float
    cpu_seconds: float
    peak_rss_bytes: int


def find_executable(name: str, env: Mapping[str, str] | None = None) -> str:
    """Resolve ``name`` on PATH (or accept an existing path), or explain what is missing."""
    if os.sep in name:
        if os.access(name, os.X_OK):
            return name
        raise ToolNotFoundError(
            f"{name} does not exist or is not executable.",
            hint="Check the path, or install the tool.",
        )
    search_path = (env or os.environ).get("PATH", os.defpath)
    found = shutil.which(name, path=search_path)
    if found is None:
        raise ToolNotFoundError(
            f"'{name}' was not found on PATH ({search_path}).",
            hint=f"Install {name} or put it on PATH, then run the command again.",
        )
    return found


def quote(argv: Sequence[str]) -> str:
    return shlex.join(argv)


def _children_usage() -> tuple[float, int]:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime, usage.ru_maxrss * 1024


def run(
    argv: Sequence[str],
    *,
    cwd: Path | str | None = None,
    env: Mapping[str, str] | None = None,
    check: bool = True,
    what: str | None = None,
    timeout: float | None = None,
) -> Completed:
    """Run a short command to completion with its output captured."""
    resolved = [find_executable(argv[0], env), *argv[1:]]
    if VERBOSE:
        print(f"+ {quote(argv)}", file=sys.stderr)
    cpu_before, _ = _children_usage()
    started = time.perf_counter()
    proc = subprocess.run(
        resolved,
        cwd=cwd,
        env=dict(env) if env is not None else None,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        errors="replace",
        timeout=timeout,
        check=False,
    )
    wall = time.perf_counter() - started
    cpu_after, peak = _children_usage()
    done = Completed(tuple(argv), proc.returncode, proc.stdout, wall, cpu_after - cpu_before, peak)
    if check and proc.returncode != 0:
        tail = "\n".join(proc.stdout.splitlines()[-30:])
        raise BuildError(
            f"{what or 'Command'} failed with exit code {proc.returncode}: {quote(argv)}\n{tail}",
            hint="Run again with KILN_VERBOSE=1 to see every command.",
        )
    return done


def run_logged(
    argv: Sequence[str],
    *,
    log_path: Path,
    cwd: Path | str | None = None,
    env: Mapping[str, str] | None = None,
    on_line: Callable[[str], None] | None = None,
) -> Completed:
    """Run a long command, streaming its merged output into ``log_path``.

    ``on_line`` sees each line as it arrives (for progress). The exit code is returned,
    not raised: callers such as the shard gate decide what a failure means.
    """
    resolved = [find_executable(argv[0], env), *argv[1:]]
    log_path.parent.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    kept: list[str] = []
    with log_path.open("w", encoding="utf-8") as log:
        log.write(f"+ {quote(argv)}\n")
        log.flush()
        with subprocess.Popen(
            resolved,
            cwd=cwd,
            env=dict(env) if env is not None else None,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            text=True,
            errors="replace",
        ) as proc:
            assert proc.stdout is not None
            for line in proc.stdout:
                log.write(line)
                kept.append(line)
                if VERBOSE:
                    sys.stderr.write(line)
                if on_line is not None:
                    on_line(line.rstrip("\n"))
            # wait4 gives this build's own usage (its whole process tree), where
            # RUSAGE_CHILDREN would mix in every earlier build of this process.
            _, status, usage = os.wait4(proc.pid, 0)
            proc.returncode = returncode = os.waitstatus_to_exitcode(status)
    wall = time.perf_counter() - started
    cpu = usage.ru_utime + usage.ru_stime
    return Completed(tuple(argv), returncode, "".join(kept), wall, cpu, usage.ru_maxrss * 1024)


def start_background(
    argv: Sequence[str], *, env: Mapping[str, str] | None = None, log_path: Path | None = None
) -> subprocess.Popen[bytes]:
    """Start a long-lived helper process (e.g. a cache server) detached from our stdio."""
    resolved = [find_executable(argv[0], env), *argv[1:]]
    if VERBOSE:
        print(f"+ {quote(argv)} &", file=sys.stderr)
    out = log_path.open("ab") if log_path is not None else subprocess.DEVNULL
    try:
        return subprocess.Popen(
            resolved,
            env=dict(env) if env is not None else None,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    finally:
        if log_path is not None and not isinstance(out, int):
            out.close()
