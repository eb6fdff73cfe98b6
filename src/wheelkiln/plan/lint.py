"""``kiln lint``: CMake that breaks when a shard's slice leaves a family empty.

Raising N makes empty slices possible for the first time, and every condition that was
always true becomes a real branch. Two shapes break configure:

1. **A use of a target that may not exist, guarded on something else.** A per-family
   target made only when the shard has its sources (``if(SRCS) add_library(x ${SRCS})``)
   and used under an architecture flag (``if(WITH_SM90)``) or not guarded at all: the
   flag is true in every shard, the target exists only in some, and generate fails
   with ``Objects of target "x" referenced but no such target exists``. The one guard
   that means "the target is here" is ``if(TARGET x)``; a use inside the producer's
   own block is fine too.
2. **A target whose every source the source partition can delete.** A shard that holds
   none of them calls ``add_library`` with no sources, and configure fails.

A producer "depends on the shard's files" when a condition around it names a variable
that its source list reads or that a ``file(GLOB)`` set. The reader is
:mod:`wheelkiln.plan.cmake`; this module is pure over what it read.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from wheelkiln.cells import shard_label
from wheelkiln.globs import glob_matches, glob_segments
from wheelkiln.plan.cmake import Guard, Project, Step
from wheelkiln.recipe.load import LoadedRecipe
from wheelkiln.shard.partition import shard_of

PRODUCERS = frozenset(
    {
        "add_library",
        "add_executable",
        "cuda_add_library",
        "cuda_add_executable",
        "pybind11_add_module",
        "nanobind_add_module",
        "python_add_library",
        "python3_add_library",
    }
)
_PRODUCER_KEYWORDS = frozenset(
    {
        "STATIC", "SHARED", "MODULE", "OBJECT", "EXCLUDE_FROM_ALL", "WIN32", "MACOSX_BUNDLE",
        "GLOBAL", "NO_EXTRAS", "THIN_LTO", "OPT_SIZE", "WITH_SOABI", "STABLE_ABI", "NB_STATIC",
        "NB_SHARED", "NOMINSIZE", "LTO", "NOSTRIP", "PROTECT_STACK", "FREE_THREADED", "SYSTEM",
    }
)  # fmt: skip
_NOT_BUILT = frozenset({"IMPORTED", "ALIAS", "INTERFACE"})
"""Targets that compile nothing: they cannot lose their sources to a shard."""
_TARGET_COMMANDS = frozenset(
    {
        "add_dependencies",
        "set_target_properties",
        "set_property",
        "get_target_property",
        "install",
        "add_custom_command",
    }
)
"""Commands whose plain arguments name targets (besides every ``target_*`` command)."""
_GENERATOR_EXPRESSION = re.compile(r"\$<TARGET_[A-Z_]+:([^>]+)>")


@dataclass(frozen=True)
class Finding:
    file: str
    """Relative to the package root, POSIX style."""
    line: int
    target: str
    rule: str
    """``guard`` (a use not guarded by ``if(TARGET ...)``) or ``empty-sources``."""
    message: str
    fix: str

    def render(self) -> str:
        return f"{self.file}:{self.line}: {self.message} Fix: {self.fix}"

    def as_dict(self) -> dict[str, object]:
        return {
            "file": self.file,
            "line": self.line,
            "target": self.target,
            "rule": self.rule,
            "message": self.message,
            "fix": self.fix,
        }


@dataclass(frozen=True)
class Producer:
    target: str
    step: Step
    kind: str
    """``OBJECT``, ``SHARED``... or ``""``; ``IMPORTED``/``ALIAS``/``INTERFACE`` compile nothing."""
    content_guard: Guard | None
    """The condition that makes the target exist only when the shard has its files."""


def _where(step: Step) -> str:
    return f"{step.command.file.as_posix()}:{step.command.line}"


def producers(project: Project) -> dict[str, Producer]:
    found: dict[str, Producer] = {}
    for step in project.steps:
        if step.command.name not in PRODUCERS or not step.arguments:
            continue
        target = step.arguments[0]
        kind = next(
            (word for word in step.arguments[1:3] if word in _PRODUCER_KEYWORDS | _NOT_BUILT), ""
        )
        file_variables = step.references | project.glob_variables.keys()
        content_guard = next(
            (
                guard
                for guard in reversed(step.guards)
                if guard.keyword != "else" and guard.names & file_variables
            ),
            None,
        )
        found.setdefault(target, Producer(target, step, kind, content_guard))
    return found


def uses(step: Step, targets: set[str]) -> list[str]:
    """The targets of ``targets`` that one command needs to exist."""
    used: list[str] = []
    for argument in step.arguments:
        used.extend(match.group(1) for match in _GENERATOR_EXPRESSION.finditer(argument))
    name = step.command.name
    if name in PRODUCERS:
        named = list(step.arguments[1:])  # its own name is not a use
    elif name.startswith("target_") or name in _TARGET_COMMANDS:
        named = list(step.arguments)
    else:
        named = []
    used.extend(word for word in named if word in targets)
    return [target for target in dict.fromkeys(used) if target in targets]


def _guard_text(guards: Sequence[Guard]) -> str:
    return f"under {guards[-1].written}" if guards else "unguarded"


def check_guards(project: Project) -> list[Finding]:
    """Rule 1: every use of a content-dependent target needs ``if(TARGET ...)``."""
    made = producers(project)
    conditional = {name: p for name, p in made.items() if p.content_guard is not None}
    findings: dict[tuple[str, int, str], Finding] = {}
    for step in project.steps:
        for target in uses(step, set(conditional)):
            producer = conditional[target]
            guard = producer.content_guard
            assert guard is not None
            identities = {g.identity for g in step.guards}
            if guard.identity in identities or any(g.tests_target(target) for g in step.guards):
                continue
            key = (step.command.file.as_posix(), step.command.line, target)
            findings.setdefault(
                key,
                Finding(
                    file=key[0],
                    line=key[1],
                    target=target,
                    rule="guard",
                    message=(
                        f"{step.command.name} uses target '{target}' {_guard_text(step.guards)}, "
                        f"but {target} exists only when the shard has its sources "
                        f"({producer.step.command.name} at {_where(producer.step)}, "
                        f"under {guard.written}); a shard with none of them fails to "
                        "generate."
                    ),
                    fix=f"guard the use with if(TARGET {target}).",
                ),
            )
    return list(findings.values())


def _source_keys(project: Project, step: Step, arguments: Sequence[str]) -> list[str]:
    """Source files named by arguments, relative to the package root; generated files
    (outside the tree), generator expressions and unknown variables are left out."""
    root = project.root.resolve()
    keys: list[str] = []
    for word in arguments:
        if word in _PRODUCER_KEYWORDS or "$<" in word or "${" in word:
            continue
        if word in ("PRIVATE", "PUBLIC", "INTERFACE"):
            continue
        path = Path(word) if Path(word).is_absolute() else step.source_dir / word
        try:
            relative = path.resolve().relative_to(root)
        except ValueError:
            continue
        if (root / relative).is_file():
            keys.append(relative.as_posix())
    return keys


def first_empty(keys: Sequence[str], count: int, limit: int = 256) -> tuple[int, int] | None:
    """The smallest N (from 2 up to ``limit``, trying ``count`` first) at which the hash
    leaves some shard none of ``keys``: (N, that shard's index)."""
    for candidate in [count, *range(2, limit + 1)]:
        if candidate < 2:
            continue
        held = {shard_of(key, candidate) for key in keys}
        empty = [index for index in range(candidate) if index not in held]
        if empty:
            return candidate, empty[0]
    return None


def check_empty_sources(project: Project, source_globs: Sequence[str], count: int) -> list[Finding]:
    """Rule 2: a target made unconditionally whose every source is partitioned."""
    if not source_globs:
        return []
    patterns = [glob_segments(glob) for glob in source_globs]

    def partitioned(key: str) -> bool:
        return any(glob_matches(pattern, key.split("/")) for pattern in patterns)

    made = producers(project)
    findings: list[Finding] = []
    for target, producer in made.items():
        if producer.kind in _NOT_BUILT or producer.content_guard is not None:
            continue
        keys = _source_keys(project, producer.step, producer.step.arguments[1:])
        for step in project.steps:
            if step.command.name == "target_sources" and step.arguments[:1] == (target,):
                keys += _source_keys(project, step, step.arguments[1:])
        if not keys or not all(partitioned(key) for key in keys):
            continue
        empty = first_empty(keys, count)
        when = (
            f"at --count {empty[0]}, {shard_label(empty[1], empty[0])} holds none of them"
            if empty
            else "a shard can hold none of them"
        )
        variables = sorted(producer.step.references & project.glob_variables.keys()) or sorted(
            producer.step.references
        )
        condition = " OR ".join(variables) if variables else "<its source list>"
        findings.append(
            Finding(
                file=producer.step.command.file.as_posix(),
                line=producer.step.command.line,
                target=target,
                rule="empty-sources",
                message=(
                    f"{producer.step.command.name}({target}) takes all {len(keys)} of its "
                    "sources from files the source partition deletes out of slice "
                    f"(sharding.source_globs); {when}, and configure fails with "
                    f'"No SOURCES given to target: {target}".'
                ),
                fix=(
                    f"make it only when its sources are there (if({condition}) around "
                    f"{producer.step.command.name}) and guard every use with "
                    f"if(TARGET {target})."
                ),
            )
        )
    return findings


def lint_project(project: Project, source_globs: Sequence[str], count: int) -> list[Finding]:
    findings = check_guards(project) + check_empty_sources(project, source_globs, count)
    return sorted(findings, key=lambda f: (f.file, f.line, f.target, f.rule))


@dataclass(frozen=True)
class LintReport:
    package: Path
    files: tuple[str, ...]
    """The CMake files read, relative to the package; empty for a package without CMake."""
    findings: tuple[Finding, ...]

    def as_dict(self) -> dict[str, object]:
        return {
            "package": str(self.package),
            "files": list(self.files),
            "findings": [finding.as_dict() for finding in self.findings],
        }


def lint_recipe(loaded: LoadedRecipe) -> LintReport:
    """Lint the recipe's package (fetched into the source store when remote)."""
    from wheelkiln.builder.source import fetch_source
    from wheelkiln.paths import sources_dir
    from wheelkiln.plan.cmake import read_project

    package = fetch_source(loaded, sources_dir())
    if not (package / "CMakeLists.txt").is_file():
        return LintReport(package, (), ())
    project = read_project(package)
    sharding = loaded.recipe.sharding
    globs = sharding.source_globs if sharding.partition == "source" else ()
    findings = lint_project(project, globs, sharding.count)
    files = tuple(path.relative_to(package).as_posix() for path in project.files_read)
    return LintReport(package, files, tuple(findings))
