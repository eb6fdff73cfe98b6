"""Error types. Each carries its exit code and a message that says what to do next.

Only :mod:`wheelkiln.cli` turns these into a process exit; everything else raises.
"""

from __future__ import annotations


class KilnError(Exception):
    """Base of every error a user can see. ``hint`` is the next step to take."""

    exit_code: int = 1

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def render(self) -> str:
        if self.hint:
            return f"{self.message}\n{self.hint}"
        return self.message


class UsageError(KilnError):
    """A command-line argument is wrong."""

    exit_code = 2


class PathError(UsageError):
    """A path to write to (or read from) cannot be used: a file where a directory is
    needed, a location nobody can write to, a name the file system refuses."""


class RecipeError(KilnError):
    """A recipe file is unreadable, malformed or contradictory."""

    exit_code = 2


class ToolNotFoundError(KilnError):
    """An executable that a step needs is not installed."""

    exit_code = 3


class SourceError(KilnError):
    """A package source could not be fetched or verified."""

    exit_code = 3


class BuildError(KilnError):
    """A build step failed. ``log_path`` points at the full output."""

    exit_code = 4

    def __init__(
        self, message: str, *, hint: str | None = None, log_path: str | None = None
    ) -> None:
        super().__init__(message, hint=hint)
        self.log_path = log_path


class GateError(KilnError):
    """A shard or link gate refused the result."""

    exit_code = 5


class LockBusyError(KilnError):
    """Another build holds the builder lock."""

    exit_code = 6


class FleetError(KilnError):
    """The build fleet cannot run the build: its scheduler cannot be reached, or no
    worker offers a resource the build's tasks ask for."""

    exit_code = 3
