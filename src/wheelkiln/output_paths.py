"""Where a command will write, checked before it does any work.

A build can take an hour; finding out afterwards that ``--out`` names a file, or a
directory nobody can write to, throws that hour away. Every command that writes calls
:func:`check_output_dir` or :func:`check_output_file` for each location first.

The check looks at what the path resolves to, not at its spelling: the location itself
when it exists, else its nearest existing ancestor (the directories in between are
created later). Permission bits do not answer "can I write here?" (root passes them, a
read-only mount or ``/proc`` refuses anyway), so the check creates and removes a probe
file. :func:`path_error` turns an ``OSError`` that still escapes a command into a
:class:`~wheelkiln.errors.PathError` naming the path.
"""

from __future__ import annotations

import errno
import os
import tempfile
from pathlib import Path

from wheelkiln.errors import KilnError, PathError

_BAD_PATH_ERRNOS = frozenset(
    {
        errno.EACCES,
        errno.EPERM,
        errno.ENOENT,
        errno.ENOTDIR,
        errno.EISDIR,
        errno.EEXIST,
        errno.EROFS,
        errno.ENAMETOOLONG,
        errno.ELOOP,
        errno.EINVAL,
    }
)
"""Errors that say the path itself is unusable (bad input), not that the disk failed."""

_NEXT_STEP = "Choose a location you can write to (it is created if missing)."


def _resolve(path: Path, what: str) -> Path:
    try:
        return path.expanduser().resolve()
    except (OSError, RuntimeError, ValueError) as exc:  # symlink loop, NUL byte
        raise PathError(f"{what} {path}: not a usable path ({exc}).", hint=_NEXT_STEP) from None


def _refuse_dangling_links(directory: Path, path: Path, what: str) -> None:
    """``mkdir(parents=True)`` cannot go through a symbolic link whose target is missing
    (it fails with "File exists"), though the resolved path looks creatable."""
    absolute = directory.expanduser().absolute()
    for candidate in (absolute, *absolute.parents):
        try:
            dangling = candidate.is_symlink() and not candidate.exists()
        except OSError:  # a name too long, say: the checks after this one name it
            continue
        if dangling:
            raise PathError(
                f"{what} {path}: {candidate} is a symbolic link to {candidate.readlink()}, "
                "which does not exist.",
                hint="Create the link's target, remove the link, or give another path.",
            )


def _nearest_existing(resolved: Path) -> Path:
    for candidate in (resolved, *resolved.parents):
        if os.path.lexists(candidate):
            return candidate
    return Path(resolved.anchor)


def _probe(directory: Path, path: Path, what: str) -> None:
    """Create and remove a file in ``directory``: the only test of writability that
    agrees with what the command will do."""
    try:
        fd, probe = tempfile.mkstemp(prefix=".kiln-write-probe-", dir=directory)
    except OSError as exc:
        raise PathError(
            f"{what} {path}: cannot write in {directory} ({exc.strerror or exc}).",
            hint=_NEXT_STEP,
        ) from None
    os.close(fd)
    Path(probe).unlink()


def check_output_dir(path: Path, what: str) -> Path:
    """Refuse ``path`` as a directory to write into, before any work; return it resolved.

    ``what`` names where the path came from (``--out``, ``$KILN_HOME``...) for the message.
    Nothing is created except the probe file, which is removed again.
    """
    resolved = _resolve(path, what)
    _refuse_dangling_links(path, path, what)
    _check_dir(resolved, path, what)
    return resolved


def _check_dir(resolved: Path, path: Path, what: str, *, making: str = "directory") -> None:
    """``resolved`` must be, or be creatable as, a directory we can write in (``making``
    names what the command makes there, for the message)."""
    try:
        existing = _nearest_existing(resolved)
        if not existing.is_dir():
            problem = (
                f"{resolved} is a file, not a directory"
                if existing == resolved and making == "directory"
                else f"{existing} is a file, so no {making} can be made under it"
            )
            raise PathError(
                f"{what} {path}: {problem}.",
                hint="Give a directory path (it is created if missing), or move the file away.",
            )
        _check_lengths(resolved, existing, path, what)
    except OSError as exc:
        raise path_error(exc, what) from None
    _probe(existing, path, what)


def _check_lengths(resolved: Path, existing: Path, path: Path, what: str) -> None:
    """The parts still to be made must fit the file system's limits, or the mkdir at
    the end of the build is what fails."""
    name_max = os.pathconf(existing, "PC_NAME_MAX")
    for part in resolved.relative_to(existing).parts:
        if len(os.fsencode(part)) > name_max:
            raise PathError(
                f"{what} {path}: the name {part[:40]!r}... is longer than {name_max} bytes, "
                f"the limit of the file system at {existing}.",
                hint="Give a shorter path.",
            )
    path_max = os.pathconf(existing, "PC_PATH_MAX")
    if len(os.fsencode(resolved)) >= path_max:
        raise PathError(
            f"{what} {path}: the path is longer than {path_max} bytes, the limit of the "
            f"file system at {existing}.",
            hint="Give a shorter path.",
        )


def check_output_file(path: Path, what: str) -> Path:
    """Refuse ``path`` as a file to write, before any work; return it resolved.

    An existing directory is refused; the file's directory is checked as with
    :func:`check_output_dir`. An existing file is not modified.
    """
    resolved = _resolve(path, what)
    if resolved.is_dir():
        raise PathError(
            f"{what} {path}: {resolved} is a directory; a file path is needed here.",
            hint=f"Give a file name, e.g. {path / 'out'}.",
        )
    _refuse_dangling_links(path.expanduser().parent, path, what)
    _check_dir(resolved.parent, path, what, making="file")
    return resolved


def check_input_dir(path: Path, what: str) -> Path:
    """Refuse ``path`` as a directory to read from when it is not one."""
    resolved = _resolve(path, what)
    if not resolved.is_dir():
        state = "is a file, not a directory" if resolved.exists() else "does not exist"
        raise PathError(
            f"{what} {path} is not a directory: {resolved} {state}.",
            hint=f"Point {what} at a directory.",
        )
    return resolved


def path_error(exc: OSError, what: str | None = None) -> KilnError:
    """A named error for an ``OSError`` that reached the command line's boundary."""
    names = [str(name) for name in (exc.filename, exc.filename2) if name is not None]
    where = " → ".join(names) if names else "a file kiln writes or reads"
    reason = exc.strerror or str(exc) or type(exc).__name__
    prefix = f"{what} " if what else ""
    if exc.errno in _BAD_PATH_ERRNOS:
        return PathError(
            f"{prefix}{where}: {reason}.",
            hint="Check that the path exists and is writable, or choose another location "
            "(--out, --workdir, --cache-dir, $KILN_HOME).",
        )
    return KilnError(
        f"{prefix}{where}: {reason}.",
        hint="The file system refused it (full disk, I/O error?); free space or choose another "
        "location, then run the command again.",
    )
