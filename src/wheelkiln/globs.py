"""Path globs with ``pathlib`` semantics, matched against path parts (stdlib only).

One matcher for every glob a recipe writes over the package tree: the source
partition's ``sharding.source_globs`` and the copy's ``source.exclude``. Matching is
done on relative path parts gathered by a walk that never follows a directory symlink,
never by asking the file system to expand the glob, so a pattern cannot reach through
a link to somewhere else.
"""

from __future__ import annotations

from collections.abc import Sequence
from fnmatch import fnmatchcase


def glob_segments(pattern: str) -> tuple[str, ...]:
    """The segments of a POSIX-style glob, without empty and ``.`` segments."""
    return tuple(segment for segment in pattern.split("/") if segment not in ("", "."))


def glob_matches(pattern: Sequence[str], parts: Sequence[str]) -> bool:
    """Whether the path *parts* match the glob *pattern* segments as ``pathlib`` globs
    do: ``**`` stands for any number of directories (none included), every other segment
    matches exactly one name by :func:`fnmatch.fnmatchcase`, so ``*`` never crosses a
    ``/``, and the last part (a file or directory name) is matched by a named segment,
    never by ``**``.

    Run as a set of pattern positions stepped once per path part, so a pattern full of
    ``**`` costs len(pattern) × len(parts), never an exponential backtrack.
    """

    def closure(positions: set[int]) -> set[int]:
        reached = set(positions)
        for position in sorted(positions):
            while position < len(pattern) and pattern[position] == "**":
                position += 1
                reached.add(position)
        return reached

    current = closure({0})
    for number, part in enumerate(parts):
        last = number == len(parts) - 1
        following: set[int] = set()
        for position in current:
            if position == len(pattern):
                continue
            segment = pattern[position]
            if segment == "**":
                if not last:
                    following.add(position)
            elif fnmatchcase(part, segment):
                following.add(position + 1)
        current = closure(following)
        if not current:
            return False
    return len(pattern) in current
