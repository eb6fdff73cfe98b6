"""Looking inside a built wheel: digests, extension modules, the recipe's checks."""

from __future__ import annotations

import fnmatch
import hashlib
import zipfile
from dataclasses import dataclass
from pathlib import Path

from wheelkiln.digest import sha256_file
from wheelkiln.errors import BuildError
from wheelkiln.recipe.model import Verify

EXTENSION_SUFFIXES = (".so", ".pyd", ".dylib")


def is_extension(name: str) -> bool:
    base = name.rsplit("/", 1)[-1]
    return base.endswith(EXTENSION_SUFFIXES) or ".so." in base


@dataclass(frozen=True)
class WheelFacts:
    path: Path
    sha256: str
    size: int
    files: tuple[str, ...]
    extensions: dict[str, str]
    """Extension module path inside the wheel → sha256 of its bytes."""


def inspect_wheel(path: Path) -> WheelFacts:
    with zipfile.ZipFile(path) as wheel:
        names = tuple(sorted(wheel.namelist()))
        extensions = {
            name: hashlib.sha256(wheel.read(name)).hexdigest()
            for name in names
            if is_extension(name)
        }
    return WheelFacts(path, sha256_file(path), path.stat().st_size, names, extensions)


def check_wheel(facts: WheelFacts, verify: Verify) -> None:
    """The recipe's content checks: every extension glob matches a module in the wheel."""
    for pattern in verify.extension_modules:
        if not any(fnmatch.fnmatch(name, pattern) for name in facts.extensions):
            raise BuildError(
                f"{facts.path.name}: no extension module matches verify.extension_modules "
                f"{pattern!r}. Extension modules in the wheel: "
                f"{', '.join(facts.extensions) or 'none'}.",
                hint="A placeholder or missing module means the build did not link it; "
                "see the build log.",
            )
        for name in facts.extensions:
            if fnmatch.fnmatch(name, pattern) and facts.extensions[name] == EMPTY_SHA256:
                raise BuildError(
                    f"{facts.path.name}: extension module {name} is empty (a placeholder).",
                    hint="This wheel came from a shard job and must not be shipped.",
                )


EMPTY_SHA256 = hashlib.sha256(b"").hexdigest()
