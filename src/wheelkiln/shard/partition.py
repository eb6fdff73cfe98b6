"""The partition function: which shard owns a TU (stdlib only, per-TU hot path).

One function decides "is this TU mine?" for both mechanisms, the seat wrapper and the
source partition.

The key is the TU's source path **relative to the package root**, with POSIX
separators. Relative, because every local shard builds in its own copy of the tree
(and CI shards in their own checkout), so absolute paths differ between shards while
relative ones agree. Generated sources (Cython output, configure_file and custom_target
outputs) live in the build directory, wherever the backend put it: meson-python's
default is a random ``<tree>/.mesonpy-XXXXXXXX``. Their key is their path relative to
the build directory, under the prefix ``<build>/``, so shards agree on them wherever
each shard's build directory is. POSIX separators, so a Windows shard and a Linux tool
agree on the key.

The shard is ``int(md5(key).hexdigest()[:8], 16) % count``: the reference farm uses
exactly this, 32 bits of a well-mixed hash are plenty for counts up to a few hundred,
and md5 is in every Python (it is not used for security here). An optional partition
map (key → shard index) overrides the hash for TUs whose cost is known from an earlier
build, to balance slices by cost.
"""

# Per-TU hot path: pathlib costs ~8 ms to import (fnmatch, re, urllib), so os.path strings.
# ruff: noqa: PTH109, PTH118
from __future__ import annotations

import os

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping

try:
    # CPython's own md5 imports in ~0.6 ms; hashlib loads OpenSSL (~5 ms per TU).
    _md5 = __import__("_md5").md5
except ImportError:  # pragma: no cover - Pythons built without _md5
    _md5 = __import__("hashlib").md5


def _uses_windows_paths(*paths: str) -> bool:
    return any("\\" in path or (len(path) > 1 and path[1] == ":") for path in paths)


BUILD_DIR_KEY = "<build>"
"""The key prefix of a TU generated into the build directory: ``<build>/_cy.pyx.c``."""


def tu_key(
    source: str | os.PathLike[str],
    package_root: str | os.PathLike[str],
    cwd: str | os.PathLike[str] | None = None,
    build_dir: str | os.PathLike[str] | None = None,
) -> str:
    """The partition key of *source*: its path relative to *package_root*, POSIX style.

    A relative *source* is taken relative to *cwd* (default: the current directory), as
    the compiler would. A source inside *build_dir* (when given) is keyed relative to
    it instead, as ``<build>/path``. Paths are normalised lexically (``a/../b`` →
    ``b``); symlinks are resolved only when the key leaves the root (``../``): then the
    key is taken between the real paths of source and root. Windows paths (backslashes
    or a drive) are handled with Windows rules on every platform, so keys computed
    anywhere agree.
    """
    source_path = os.fspath(source)
    root_path = os.fspath(package_root)
    cwd_path = os.getcwd() if cwd is None else os.fspath(cwd)
    build_path = None if build_dir is None else os.fspath(build_dir)
    if os.sep == "/" and _uses_windows_paths(source_path, root_path, cwd_path):
        import ntpath  # here only: Windows-style keys off Windows

        absolute = ntpath.normpath(ntpath.join(cwd_path, source_path))
        if build_path:
            build = ntpath.normpath(ntpath.join(cwd_path, build_path))
            if absolute.lower().startswith(build.rstrip("\\").lower() + "\\"):
                relative = ntpath.relpath(absolute, build).replace("\\", "/")
                return f"{BUILD_DIR_KEY}/{relative}"
        relative = ntpath.relpath(absolute, ntpath.normpath(ntpath.join(cwd_path, root_path)))
        return relative.replace("\\", "/")
    absolute = os.path.normpath(os.path.join(cwd_path, source_path))
    if build_path:
        build = os.path.normpath(os.path.join(cwd_path, build_path))
        if absolute.startswith(build.rstrip("/") + "/"):
            return f"{BUILD_DIR_KEY}/{os.path.relpath(absolute, build)}"
    root = os.path.normpath(os.path.join(cwd_path, root_path))
    key = os.path.relpath(absolute, root).replace("\\", "/")
    if key.startswith("../"):
        # getcwd() and CMake resolve symlinks (/tmp -> /private/tmp on macOS), the root
        # as given may not. A key that leaves the root is taken between real paths, so
        # it never embeds a shard's private absolute path.
        real_key = os.path.relpath(os.path.realpath(absolute), os.path.realpath(root))
        return real_key.replace("\\", "/")
    return key


def shard_of(
    tu_key: str, count: int, partition_map: Mapping[str, int] | PartitionMapFile | None = None
) -> int:
    """The 0-based index of the shard that owns *tu_key* among *count* shards."""
    if count < 1:
        raise ValueError(f"shard count must be at least 1, got {count}")
    if partition_map is not None:
        mapped = partition_map.get(tu_key)
        if mapped is not None:
            if not 0 <= mapped < count:
                raise ValueError(
                    f"partition map puts {tu_key!r} in shard index {mapped}, "
                    f"but there are only {count} shards (0..{count - 1}); "
                    "the map was made for another shard count: regenerate it"
                )
            return mapped
    digest = _md5(tu_key.encode("utf-8", "surrogateescape"), usedforsecurity=False)
    return int(digest.hexdigest()[:8], 16) % count


def is_mine(
    tu_key: str,
    index: int,
    count: int,
    partition_map: Mapping[str, int] | PartitionMapFile | None = None,
) -> bool:
    """True when shard *index* (0-based) of *count* owns *tu_key*."""
    if not 0 <= index < count:
        raise ValueError(f"shard index {index} is outside 0..{count - 1}")
    return shard_of(tu_key, count, partition_map) == index


def load_partition_map(path: str | os.PathLike[str]) -> dict[str, int]:
    """Read a partition map: a JSON object ``{tu_key: shard_index}``."""
    import json  # here only: json imports re (~8 ms), see PartitionMapFile

    with open(path, encoding="utf-8") as handle:
        data = json.load(handle)
    if not isinstance(data, dict):
        raise ValueError(
            f"{os.fspath(path)}: a partition map is a JSON object, got {type(data).__name__}"
        )
    result: dict[str, int] = {}
    for key, value in data.items():
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ValueError(
                f"{os.fspath(path)}: shard index for {key!r} must be a non-negative "
                f"integer, got {value!r}"
            )
        result[key.replace("\\", "/")] = value
    return result


class PartitionMapFile:
    """A partition map file read lazily, for the per-TU wrapper.

    ``get(key)`` finds the key by a plain text search instead of :mod:`json` (which
    imports ``re`` and costs ~8 ms per TU). In a map every string token is a key (the
    values are integers), so the last ``"key"`` followed by ``:`` and digits is the
    entry, as :func:`json.load` would keep the last duplicate. A file or key with any
    escape sequence (backslash) or non-ASCII text falls back to :func:`load_partition_map`.
    """

    __slots__ = ("_loaded", "_text", "path")

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = os.fspath(path)
        self._text: str | None = None
        self._loaded: dict[str, int] | None = None

    def get(self, key: str) -> int | None:
        if self._loaded is not None:
            return self._loaded.get(key)
        if self._text is None:
            with open(self.path, encoding="utf-8") as handle:
                self._text = handle.read()
        text = self._text
        plain = key.isascii() and key.isprintable() and '"' not in key
        if not plain or "\\" in text or not text.isascii():
            self._loaded = load_partition_map(self.path)
            return self._loaded.get(key)
        token = '"' + key + '"'
        position = text.rfind(token)
        while position >= 0:
            rest = text[position + len(token) :].lstrip()
            if rest.startswith(":"):
                value = rest[1:].lstrip()
                digits = len(value) - len(value.lstrip("0123456789"))
                if digits:
                    return int(value[:digits])
                break  # not an integer: let the full parser say what is wrong
            position = text.rfind(token, 0, position)
        if position >= 0:
            self._loaded = load_partition_map(self.path)
            return self._loaded.get(key)
        return None
