"""A CMake reader for the lint: commands, variables, guards and target uses, no CMake run.

It reads a package's ``CMakeLists.txt`` (and the directories it adds, and the files it
includes from the tree) the way a person reading for the ``if(TARGET ...)`` trap would:

- every command with its file and line, the ``if``/``elseif``/``else`` blocks around it
  (its **guards**), and its arguments with the variables it knows expanded;
- ``set``, ``list(APPEND ...)`` and ``file(GLOB ...)`` give variables (globs are matched
  against the real tree, because that is what configure would see);
- ``foreach`` bodies run once per item, so ``add_library(dk_${family} ...)`` in a loop
  gives one target per family; ``function``/``macro`` bodies are not followed (a target
  made inside one is not seen).

It never decides which branch of an ``if`` is taken: the lint is about what happens when
a condition that was always true stops being so, so every branch is read.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from wheelkiln.errors import UsageError
from wheelkiln.globs import glob_matches, glob_segments

MAX_FILES = 200
"""CMake files read per package: ``add_subdirectory`` chains are short in practice, and a
cycle (a directory adding itself through a symlink) must end."""
MAX_FILE_BYTES = 4 * 1024**2
MAX_FOREACH_ITEMS = 1000


@dataclass(frozen=True)
class Argument:
    text: str
    quoted: bool


@dataclass(frozen=True)
class Command:
    name: str
    """Lower case, as CMake compares command names."""
    arguments: tuple[Argument, ...]
    file: Path
    line: int


@dataclass(frozen=True)
class Guard:
    """One ``if``/``elseif``/``else`` branch around a command.

    ``identity`` tells two expansions of the same block apart (one per ``foreach``
    item), so "inside the same block as the producer" means the same expansion."""

    identity: int
    keyword: str
    """``if``, ``elseif`` or ``else``: an ``else`` branch holds when the conditions fail."""
    condition: tuple[str, ...]
    """The condition's arguments, variables of loops expanded, bare names kept."""
    written: str
    """The condition as written in the file, for messages."""
    names: frozenset[str]
    """Every variable the condition names, bare or as ``${...}``."""
    file: Path
    line: int
    earlier: tuple[tuple[str, ...], ...] = ()
    """The conditions of the block's earlier branches, which failed for this one to run."""

    def tests_target(self, target: str) -> bool:
        """Whether this branch holds only when ``target`` exists: ``if(TARGET x)``,
        possibly ANDed with more, not negated; or a branch after ``if(NOT TARGET x)``."""
        if ("NOT", "TARGET", target) in self.earlier:
            return True
        if self.keyword == "else":
            return False
        words = self.condition
        for position in range(len(words) - 1):
            if words[position].upper() == "TARGET" and words[position + 1] == target:
                negated = position > 0 and words[position - 1].upper() == "NOT"
                return not negated and "OR" not in (word.upper() for word in words)
        return False


@dataclass(frozen=True)
class Step:
    """One command as read, with what was known when it ran."""

    command: Command
    arguments: tuple[str, ...]
    """The arguments with known variables expanded and unquoted lists split on ';'."""
    references: frozenset[str]
    """Every variable the arguments name as ``${...}``."""
    guards: tuple[Guard, ...]
    source_dir: Path
    """``CMAKE_CURRENT_SOURCE_DIR`` of the command."""


@dataclass
class Project:
    """What the reader found: the steps in order, and the variables set by globs."""

    root: Path
    steps: list[Step] = field(default_factory=list)
    glob_variables: dict[str, tuple[str, ...]] = field(default_factory=dict)
    """Variable → the patterns of the ``file(GLOB ...)`` that set it."""
    files_read: list[Path] = field(default_factory=list)


# ----------------------------------------------------------------------------- tokens

_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_BRACKET_OPEN = re.compile(r"\[(=*)\[")


def _bracket_end(text: str, position: int) -> tuple[int, int] | None:
    """For a bracket opening at ``position``: (content start, end after the close)."""
    opened = _BRACKET_OPEN.match(text, position)
    if opened is None:
        return None
    close = "]" + opened.group(1) + "]"
    end = text.find(close, opened.end())
    if end < 0:
        return opened.end(), len(text)
    return opened.end(), end + len(close)


def tokenize(text: str, file: Path) -> list[Command]:
    """The commands of one CMake file, each with the line its name is on.

    Comments (``#`` to the end of the line, ``#[[...]]``) are skipped; arguments are
    quoted (``"..."``), bracketed (``[[...]]``) or unquoted; the parentheses of a
    condition (``if(A AND (B OR C))``) become arguments of their own."""
    commands: list[Command] = []
    position, line, length = 0, 1, len(text)

    def skip_blank(at: int) -> int:
        """Past whitespace and comments from *at*, counting the lines passed."""
        nonlocal line
        while at < length:
            char = text[at]
            if char == "#":
                bracket = _bracket_end(text, at + 1) if text.startswith("#[", at) else None
                end = bracket[1] if bracket is not None else text.find("\n", at)
                end = length if end < 0 else end
                line += text.count("\n", at, end)
                at = end
            elif char.isspace():
                line += char == "\n"
                at += 1
            else:
                break
        return at

    while (position := skip_blank(position)) < length:
        char = text[position]
        if (name := _IDENTIFIER.match(text, position)) is not None:
            start_line = line
            position = name.end()
            while position < length and text[position] in " \t":
                position += 1
            if position >= length or text[position] != "(":
                raise UsageError(
                    f"{file}:{start_line}: '{name.group()}' is not followed by '('; "
                    "this is not a CMake file kiln can read.",
                    hint="Check the file with cmake, or leave it out of the package.",
                )
            position += 1
            arguments: list[Argument] = []
            depth = 0
            while True:
                if (position := skip_blank(position)) >= length:
                    raise UsageError(
                        f"{file}:{start_line}: '{name.group()}(' is never closed.",
                        hint="Check the file with cmake.",
                    )
                char = text[position]
                if char == "(":
                    depth += 1
                    arguments.append(Argument("(", quoted=False))
                    position += 1
                elif char == ")":
                    position += 1
                    if depth == 0:
                        break
                    depth -= 1
                    arguments.append(Argument(")", quoted=False))
                elif char == '"':
                    value, position = _quoted(text, position + 1)
                    line += value.count("\n")
                    arguments.append(Argument(value, quoted=True))
                elif char == "[" and (bracket := _bracket_end(text, position)) is not None:
                    content = text[bracket[0] : bracket[1] - (bracket[0] - position)]
                    line += text.count("\n", position, bracket[1])
                    arguments.append(Argument(content, quoted=True))
                    position = bracket[1]
                else:
                    value, position = _unquoted(text, position)
                    arguments.append(Argument(value, quoted=False))
            commands.append(Command(name.group().lower(), tuple(arguments), file, start_line))
        else:
            raise UsageError(
                f"{file}:{line}: unexpected {char!r}; this is not a CMake file kiln can read.",
                hint="Check the file with cmake, or leave it out of the package.",
            )
    return commands


def _quoted(text: str, position: int) -> tuple[str, int]:
    out: list[str] = []
    while position < len(text):
        char = text[position]
        if char == "\\" and position + 1 < len(text):
            following = text[position + 1]
            out.append({"n": "\n", "t": "\t", "r": "\r", "\n": ""}.get(following, following))
            position += 2
        elif char == '"':
            return "".join(out), position + 1
        else:
            out.append(char)
            position += 1
    return "".join(out), position


def _unquoted(text: str, position: int) -> tuple[str, int]:
    """An unquoted argument; ``$<...>`` and ``${...}`` may hold characters that would end
    it elsewhere, and a ``"`` inside one (``-DX="y"``) is kept as written."""
    out: list[str] = []
    nesting = 0
    while position < len(text):
        char = text[position]
        if char == "\\" and position + 1 < len(text):
            out.append(text[position : position + 2])
            position += 2
            continue
        if text.startswith(("${", "$<"), position):
            nesting += 1
            out.append(text[position : position + 2])
            position += 2
            continue
        if nesting and char in "}>":
            nesting -= 1
        elif not nesting and (char.isspace() or char in '()#"'):
            break
        out.append(char)
        position += 1
    return "".join(out), position


# ----------------------------------------------------------------------------- variables

_REFERENCE = re.compile(r"\$\{([^${}]*)\}")


def expand(text: str, variables: dict[str, str]) -> tuple[str, set[str]]:
    """``text`` with each ``${NAME}`` of a known variable replaced (innermost first), and
    every name referenced. Unknown variables stay written as ``${NAME}``."""
    names: set[str] = set()
    unknown: dict[str, str] = {}
    for _ in range(100):  # nesting depth; a value naming itself cannot loop forever
        match = _REFERENCE.search(text)
        if match is None:
            break
        name = match.group(1)
        names.add(name)
        if name in variables:
            value = variables[name]
        else:
            value = f"\0{len(unknown)}\0"
            unknown[value] = "${" + name + "}"
        text = text[: match.start()] + value + text[match.end() :]
    for placeholder, written in unknown.items():
        text = text.replace(placeholder, written)
    return text, names


def split_list(value: str) -> list[str]:
    return [item for item in value.split(";") if item]


# ----------------------------------------------------------------------------- reading


class _Reader:
    def __init__(self, root: Path) -> None:
        self.project = Project(root=root)
        self._identities = 0

    def new_identity(self) -> int:
        self._identities += 1
        return self._identities

    def read_directory(self, directory: Path, variables: dict[str, str]) -> None:
        listfile = directory / "CMakeLists.txt"
        variables = dict(variables)
        variables["CMAKE_CURRENT_SOURCE_DIR"] = str(directory)
        variables["CMAKE_CURRENT_LIST_DIR"] = str(directory)
        self.read_file(listfile, directory, variables, ())

    def read_file(
        self, path: Path, source_dir: Path, variables: dict[str, str], guards: tuple[Guard, ...]
    ) -> None:
        resolved = path.resolve()
        root = self.project.root.resolve()
        if not resolved.is_relative_to(root) or not resolved.is_file():
            return  # outside the package (a system module, a parent project): not ours
        if len(self.project.files_read) >= MAX_FILES:
            raise UsageError(
                f"{path}: more than {MAX_FILES} CMake files; stopped reading.",
                hint="A directory may add itself; check add_subdirectory and include calls.",
            )
        if resolved.stat().st_size > MAX_FILE_BYTES:
            raise UsageError(
                f"{path}: larger than {MAX_FILE_BYTES // 1024**2} MiB; not a CMake file kiln reads."
            )
        self.project.files_read.append(path)
        text = resolved.read_text(encoding="utf-8", errors="replace")
        commands = tokenize(text, path.relative_to(self.project.root))
        self.run(commands, source_dir, variables, guards)

    def run(
        self,
        commands: Sequence[Command],
        source_dir: Path,
        variables: dict[str, str],
        guards: tuple[Guard, ...],
    ) -> None:
        # Each open if-block: the guards outside it, and its current branch's guard.
        blocks: list[tuple[tuple[Guard, ...], list[Guard]]] = []
        position = 0
        while position < len(commands):
            command = commands[position]
            position += 1
            name = command.name
            current = blocks[-1][0] + (blocks[-1][1][-1],) if blocks else guards
            if name == "if":
                outer = current
                blocks.append((outer, [self.guard("if", command, variables)]))
                continue
            if name in ("elseif", "else") and blocks:
                outer, branches = blocks[-1]
                earlier = tuple(branch.condition for branch in branches)
                branches.append(self.guard(name, command, variables, earlier))
                continue
            if name == "endif" and blocks:
                blocks.pop()
                continue
            if name in ("foreach", "function", "macro", "while"):
                body, position = _block(commands, position, name)
                if name == "foreach":
                    self.foreach(command, body, source_dir, variables, current)
                elif name == "while":
                    self.run(body, source_dir, variables, current)
                continue
            self.step(command, source_dir, variables, current)

    def guard(
        self,
        keyword: str,
        command: Command,
        variables: dict[str, str],
        earlier: tuple[tuple[str, ...], ...] = (),
    ) -> Guard:
        condition: list[str] = []
        names: set[str] = set()
        for argument in command.arguments:
            value, referenced = expand(argument.text, variables)
            names |= referenced
            # A bare word in a condition is a variable name when it is not a keyword.
            if not argument.quoted and _IDENTIFIER.fullmatch(value):
                names.add(value)
            # Only loop variables are taken in: ``${X}`` of a set() list would hide X.
            condition.append(_loop_expanded(argument.text, variables))
        written = (
            " ".join(
                f'"{argument.text}"' if argument.quoted else argument.text
                for argument in command.arguments
            )
            .replace("( ", "(")
            .replace(" )", ")")
        )
        return Guard(
            self.new_identity(),
            keyword,
            tuple(condition),
            f"{keyword}({written})",
            frozenset(names - _loop_variables(variables)),
            command.file,
            command.line,
            earlier,
        )

    def foreach(
        self,
        command: Command,
        body: Sequence[Command],
        source_dir: Path,
        variables: dict[str, str],
        guards: tuple[Guard, ...],
    ) -> None:
        words = [expand(argument.text, variables)[0] for argument in command.arguments]
        if not words:
            return
        loop_variable, rest = words[0], words[1:]
        items: list[str] = []
        if rest[:1] == ["RANGE"]:
            bounds = [int(word) for word in rest[1:3] if word.lstrip("-").isdigit()]
            if len(bounds) == 1:
                items = [str(number) for number in range(bounds[0] + 1)]
            elif len(bounds) == 2:
                items = [str(number) for number in range(bounds[0], bounds[1] + 1)]
        elif rest[:1] == ["IN"]:
            mode = ""
            for word in rest[1:]:
                if word in ("LISTS", "ITEMS", "ZIP_LISTS"):
                    mode = word
                elif mode == "LISTS":
                    items.extend(split_list(variables.get(word, "")))
                elif mode == "ITEMS":
                    items.extend(split_list(word))
        else:
            for word in rest:
                items.extend(split_list(word))
        for item in items[:MAX_FOREACH_ITEMS]:
            scope = dict(variables)
            scope[loop_variable] = item
            scope[_LOOP_MARK + loop_variable] = item
            self.run(body, source_dir, scope, guards)
            for key, value in scope.items():  # a loop body sets variables of its scope
                if key != loop_variable and not key.startswith(_LOOP_MARK):
                    variables[key] = value

    def step(
        self,
        command: Command,
        source_dir: Path,
        variables: dict[str, str],
        guards: tuple[Guard, ...],
    ) -> None:
        arguments: list[str] = []
        references: set[str] = set()
        for argument in command.arguments:
            value, referenced = expand(argument.text, variables)
            references |= referenced
            if argument.quoted:
                arguments.append(value)
            else:
                arguments.extend(split_list(value))
        self.project.steps.append(
            Step(
                command,
                tuple(arguments),
                frozenset(references - _loop_variables(variables)),
                guards,
                source_dir,
            )
        )
        name = command.name
        if name == "set" and arguments:
            values = list(arguments[1:])
            for keyword in ("CACHE", "PARENT_SCOPE"):
                if keyword in values:
                    values = values[: values.index(keyword)]
            variables[arguments[0]] = ";".join(values)
        elif name == "list" and len(arguments) >= 2 and arguments[0] == "APPEND":
            existing = split_list(variables.get(arguments[1], ""))
            variables[arguments[1]] = ";".join(existing + list(arguments[2:]))
            if arguments[1] in self.project.glob_variables:
                self.project.glob_variables[arguments[1]] += tuple(arguments[2:])
        elif name == "file" and len(arguments) >= 2 and arguments[0] in ("GLOB", "GLOB_RECURSE"):
            self.file_glob(arguments, source_dir, variables)
        elif name == "add_subdirectory" and arguments:
            directory = Path(arguments[0])
            self.read_directory(
                directory if directory.is_absolute() else source_dir / directory, variables
            )
        elif name == "include" and arguments:
            included = Path(arguments[0])
            if not included.is_absolute():
                included = source_dir / included
            self.read_file(included, source_dir, variables, guards)

    def file_glob(self, arguments: list[str], source_dir: Path, variables: dict[str, str]) -> None:
        recursive = arguments[0] == "GLOB_RECURSE"
        variable = arguments[1]
        relative_to: Path | None = None
        patterns: list[str] = []
        words = iter(arguments[2:])
        for word in words:
            if word == "RELATIVE":
                relative_to = Path(next(words, str(source_dir)))
            elif word in ("CONFIGURE_DEPENDS", "LIST_DIRECTORIES", "FOLLOW_SYMLINKS"):
                if word == "LIST_DIRECTORIES":
                    next(words, None)
            else:
                patterns.append(word)
        found: list[str] = []
        for pattern in patterns:
            for path in glob_tree(self.project.root, source_dir, pattern, recursive=recursive):
                found.append(str(path.relative_to(relative_to)) if relative_to else str(path))
        variables[variable] = ";".join(sorted(found))
        self.project.glob_variables[variable] = tuple(patterns)


_LOOP_MARK = "\0loop:"
"""A loop variable is also kept under this prefix, so a condition shows it expanded."""


def _loop_variables(variables: dict[str, str]) -> set[str]:
    """A loop variable names the item, not the shard's files: never a file variable."""
    return {key[len(_LOOP_MARK) :] for key in variables if key.startswith(_LOOP_MARK)}


def _loop_expanded(text: str, variables: dict[str, str]) -> str:
    loops = {
        key[len(_LOOP_MARK) :]: value
        for key, value in variables.items()
        if key.startswith(_LOOP_MARK)
    }
    return expand(text, loops)[0]


def _block(commands: Sequence[Command], position: int, opener: str) -> tuple[list[Command], int]:
    """The body of a block opened just before ``position``, and where it ends."""
    closer = "end" + opener
    depth = 1
    body: list[Command] = []
    while position < len(commands):
        command = commands[position]
        position += 1
        if command.name == opener:
            depth += 1
        elif command.name == closer:
            depth -= 1
            if depth == 0:
                return body, position
        body.append(command)
    return body, position


def glob_tree(root: Path, source_dir: Path, pattern: str, *, recursive: bool) -> Iterator[Path]:
    """The files a ``file(GLOB ...)`` pattern matches, inside the package only, without
    following directory links. A recursive glob's last segment matches in any directory
    below its base, as CMake's ``GLOB_RECURSE`` does."""
    absolute = Path(pattern) if Path(pattern).is_absolute() else source_dir / pattern
    try:
        relative = absolute.resolve().relative_to(root.resolve())
    except ValueError:
        return
    segments = glob_segments(relative.as_posix())
    if recursive and segments:
        segments = (*segments[:-1], "**", segments[-1])
    for path in sorted(_walk(root)):
        if glob_matches(segments, path.relative_to(root).parts):
            yield path


def _walk(root: Path) -> Iterator[Path]:
    for directory, subdirectories, files in os.walk(root):
        subdirectories[:] = [
            name for name in subdirectories if not Path(directory, name).is_symlink()
        ]
        for name in files:
            yield Path(directory, name)


def read_project(root: Path) -> Project:
    """Read the package at ``root`` from its top-level ``CMakeLists.txt``."""
    reader = _Reader(root)
    variables = {
        "CMAKE_SOURCE_DIR": str(root),
        "PROJECT_SOURCE_DIR": str(root),
        "CMAKE_CURRENT_SOURCE_DIR": str(root),
    }
    reader.read_directory(root, variables)
    return reader.project
