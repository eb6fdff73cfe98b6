"""A wheel cache keyed by a cell's input digest: identical inputs skip the whole build.

The input digest covers everything that can change the wheel's bytes: the source tree
(content digest), the recipe (its full validated model), the cell, the build
environment (its key, which names the interpreter, and its ``pip freeze``), the tool
versions (compiler, nvcc, cmake, cache, wheelkiln) and the build-affecting environment
variables, ``SOURCE_DATE_EPOCH`` among them (it sets the timestamps inside the wheel).
Missing one of these would serve a wheel built from other inputs, so the list errs on
the side of including.

Entries are ``ROOT/<2 hex>/<digest>/`` holding the wheel under its own file name and
``record.json`` (the build record, plus ``input_digest``). An entry is written in a
temporary directory and renamed into place, so a reader sees a whole entry or none; a
lookup checks the wheel's sha256 against the record and drops an entry that does not
match instead of serving it. The wheel and the record are opened only where each is a
regular file (never through a link, never a fifo or device), and no more than the
record's size of the wheel is read: an entry is damaged, never a hang or a full disk,
and a damaged entry is dropped with a warning while the build builds.

An entry's last use is its ``record.json``'s modification time: set when it is stored
and each time it serves a wheel. ``kiln wheels prune --unused-for AGE`` removes the
entries unused for AGE (a CUDA wheel is hundreds of MB, and every new source, recipe or
toolchain adds one), each renamed aside before it is deleted. A build serving a wheel
reads it through one open file, which a removal meanwhile does not disturb; one that
finds the entry gone builds instead.

Only full builds belong here: a shard job's wheel (stub objects) never does.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import hashlib
import json
import os
import re
import secrets
import shutil
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, Literal

from wheelkiln import ui
from wheelkiln.builder.cmake_id import (
    COMPILER_VARIABLES,
    JOB_VARIABLES,
    READ_PREFIXES,
    READ_VARIABLES,
)
from wheelkiln.digest import sha256_file
from wheelkiln.disk_usage import tree_size
from wheelkiln.holds import open_regular, read_json, remove_path
from wheelkiln.paths import wheel_cache_dir

if TYPE_CHECKING:
    from wheelkiln.builder.cell import BuildOutcome
    from wheelkiln.builder.environment import BuildEnvironment
    from wheelkiln.builder.toolchain import Toolchain
    from wheelkiln.cells import Cell
    from wheelkiln.recipe.load import LoadedRecipe
    from wheelkiln.settings import BuildOptions

DIGEST_VERSION = 3
"""Bumped when what goes into the digest changes, so old entries stop matching."""

MESON_PROGRAM_VARIABLES = ("CC", "CXX", "NVCC", "OBJC", "OBJCXX", "FC", "CYTHON", "RUSTC")
"""Where meson reads a language's compiler; ``<name>_LD`` names its linker."""
BUILD_AFFECTING_ENV = (
    # CMake's compilers, flags and architectures, the compiler drivers' search paths and
    # nvcc's options: the identification's list (cmake_id), which shares the drivers'.
    *COMPILER_VARIABLES, *READ_VARIABLES,
    # setuptools (sysconfig's customize_compiler) and meson: tools, flags, linkers and
    # where pkg-config looks.
    "CPP", "CPPFLAGS", "LDSHARED", "LDCXXSHARED", "AR", "ARFLAGS", "STRIP", "CUFLAGS",
    "CYTHONFLAGS", *(f"{name}_LD" for name in MESON_PROGRAM_VARIABLES), "NVCC", "CYTHON",
    "PKG_CONFIG", "PKG_CONFIG_PATH", "PKG_CONFIG_LIBDIR", "PKG_CONFIG_SYSROOT_DIR",
    "ARCHFLAGS", "_PYTHON_HOST_PLATFORM",
    # torch's extension builder and packages built with it.
    "TORCH_CUDA_ARCH_LIST", "PYTORCH_NVCC", "PYTORCH_ROCM_ARCH", "ROCM_HOME", "CUDNN_HOME",
    "NVCC_FLAGS", "NVCC_THREADS",
    "SOURCE_DATE_EPOCH",
)  # fmt: skip
"""Environment variables read by compilers and build backends that change the output."""
BUILD_AFFECTING_PREFIXES = READ_PREFIXES
"""``CMAKE_*``, ``CUDA_*`` (``CUDA_HOME`` and the toolkit's other roots) and
``SKBUILD_*`` (scikit-build-core's settings) variables: all keyed but the ones below."""
NOT_BUILD_AFFECTING = (
    *JOB_VARIABLES, "CMAKE_BUILD_PARALLEL_LEVEL", "CMAKE_INSTALL_PARALLEL_LEVEL",
    "CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER", "CUDA_LAUNCH_BLOCKING",
    "CUDA_CACHE_DISABLE", "CUDA_CACHE_MAXSIZE", "CUDA_CACHE_PATH",
)  # fmt: skip
"""Variables under those prefixes that set how a build runs (its parallelism, the job's
directory, which GPU runs) or how a program runs on a GPU, never what is built; with
them keyed, every fleet job would miss every other's wheels. Compiler launchers are left
out too (a launcher caches; it does not change the object)."""


def build_affecting_env(
    environ: Mapping[str, str], *, source_date_epoch: int, extra: Mapping[str, str] | None = None
) -> dict[str, str]:
    """The part of an environment that goes into the input digest."""
    chosen = {
        name: value
        for name, value in environ.items()
        if (name in BUILD_AFFECTING_ENV or name.startswith(BUILD_AFFECTING_PREFIXES))
        and name not in NOT_BUILD_AFFECTING
        and not name.endswith(("_COMPILER_LAUNCHER", "_LINKER_LAUNCHER"))
    }
    chosen.update(extra or {})
    chosen["SOURCE_DATE_EPOCH"] = str(source_date_epoch)
    return chosen


def input_digest(
    source_digest: str,
    recipe_json: str,
    cell_id: str,
    build_env_freeze: str,
    tool_versions: Mapping[str, str],
    env: Mapping[str, str],
) -> str:
    """sha256 over every input of one cell's build (canonical JSON, sorted keys)."""
    blob = json.dumps(
        {
            "version": DIGEST_VERSION,
            "source": source_digest,
            "recipe": recipe_json,
            "cell": cell_id,
            "build_env": build_env_freeze,
            "tools": dict(tool_versions),
            "env": dict(env),
        },
        sort_keys=True,
        separators=(",", ":"),
    )
    return hashlib.sha256(blob.encode()).hexdigest()


def _cell_digest(
    loaded: LoadedRecipe,
    cell: Cell,
    options: BuildOptions,
    source_digest: str,
    environment: BuildEnvironment,
    versions: Mapping[str, str],
) -> str:
    from wheelkiln.builder.job_env import expand_recipe_env

    recipe = loaded.recipe
    # The recipe's env as the build sees it: {build_env} and {site_packages} filled in.
    recipe_env = expand_recipe_env(recipe.build.env, environment.path, loaded.path)
    env = {**os.environ, **recipe_env}
    if cell.arch_list and "TORCH_CUDA_ARCH_LIST" not in env:
        env["TORCH_CUDA_ARCH_LIST"] = ";".join(cell.arch_list)
    return input_digest(
        source_digest,
        recipe.model_dump_json(),
        cell.id,
        f"{environment.path.name}\n{environment.frozen()}",
        versions,
        build_affecting_env(
            env,
            source_date_epoch=options.source_date_epoch,
            extra={**recipe_env, **options.job.extra_env},
        ),
    )


def fetched_source_digest(loaded: LoadedRecipe) -> str | None:
    """The source digest of a recipe whose source kiln fetched (a PyPI sdist, a git rev),
    which every build's private copy of it digests to; None for a local ``source.path``.

    A fetched tree is kiln's, unpacked once and never written again, so its digest can be
    taken once for the wheel-cache lookup and the build both (``build_cell``'s
    ``known_digest``; 0.25 s for awkward-cpp's 1,918 files). A local tree is the user's and
    may change while kiln builds: the build digests its own copy, which is what it built.
    """
    from wheelkiln.builder.source import fetch_source, source_digest
    from wheelkiln.paths import sources_dir

    if loaded.recipe.source.path is not None:
        return None
    return source_digest(fetch_source(loaded, sources_dir()), loaded.recipe.source.exclude)


def plan_input_digest(
    loaded: LoadedRecipe,
    cell: Cell,
    options: BuildOptions,
    toolchain: Toolchain | None = None,
    *,
    known_digest: str | None = None,
) -> str | None:
    """The input digest ``build_cell(loaded, cell, options)`` will have, before it runs.

    Uses what the build will use: the pristine source's digest (the build's private
    copy leaves out the same build leftovers), the stable build environment for this
    cell, and the tool versions. ``None`` when that environment does not exist yet:
    making it here would run the backend's hooks in the pristine tree (for a local
    source, the user's checkout), so the caller builds, and stores the wheel under
    :func:`outcome_input_digest` afterwards. *known_digest*: the source's digest, when
    the caller has it (:func:`fetched_source_digest`).
    """
    from wheelkiln.builder.cell import job_toolchain
    from wheelkiln.builder.environment import existing_environment, frontend_requires
    from wheelkiln.builder.frontend import frontend_mode
    from wheelkiln.builder.source import fetch_source, source_digest
    from wheelkiln.paths import envs_dir, sources_dir

    if options.job.prepare_tree is not None or options.job.seat_wrapper:
        raise ValueError("shard jobs (prepare_tree / seat wrapper) must not use the wheel cache")
    recipe = loaded.recipe
    pristine = fetch_source(loaded, sources_dir())
    environment = existing_environment(
        pristine,
        cell.python,
        [*recipe.build.requires, *frontend_requires(recipe.build.frontend, frontend_mode(os.environ))],
        envs_dir(),
        config_settings=recipe.build.config_settings,
    )
    if environment is None:
        return None
    versions = (toolchain or job_toolchain(loaded, options)).as_dict()
    digest = known_digest or source_digest(pristine, loaded.recipe.source.exclude)
    return _cell_digest(loaded, cell, options, digest, environment, versions)


def outcome_input_digest(loaded: LoadedRecipe, outcome: BuildOutcome, options: BuildOptions) -> str:
    """The input digest of a finished build (to store its wheel under)."""
    return _cell_digest(
        loaded, outcome.cell, options, outcome.source_digest, outcome.environment, outcome.versions
    )


@dataclass(frozen=True)
class CachedWheel:
    """A wheel served from the cache, with the record of the build that made it."""

    digest: str
    wheel: Path
    record: dict[str, Any]


@dataclass(frozen=True)
class KeptWheel:
    """One entry of the wheel cache, as listed."""

    digest: str
    path: Path
    wheel: str
    """The wheel's file name; empty for a damaged entry."""
    cell: str
    size: int
    last_used: float
    """When it was stored or last served (seconds since the epoch)."""

    def as_json(self) -> dict[str, object]:
        return {
            "digest": self.digest, "path": str(self.path), "wheel": self.wheel,
            "cell": self.cell, "size_bytes": self.size, "last_used": self.last_used,
        }  # fmt: skip


PruneOutcome = Literal["removed", "would remove", "recent", "gone"]


@dataclass(frozen=True)
class PrunedWheel:
    """What became of one entry, or of a directory a killed store or prune left."""

    entry: KeptWheel
    outcome: PruneOutcome
    leftover: bool = False

    def as_json(self) -> dict[str, object]:
        return {**self.entry.as_json(), "outcome": self.outcome, "leftover": self.leftover}


MAX_RECORD_BYTES = 64 * 1024**2
"""A build record is kilobytes (its wheel's extensions, tools, counters); a record.json
larger than this is not one."""
SHA256 = re.compile(r"[0-9a-f]{64}")


class DamagedEntry(Exception):
    """An entry whose record or wheel cannot be what :meth:`WheelCache.store` wrote."""


@dataclass(frozen=True)
class _Entry:
    record: dict[str, Any]
    name: str
    """The wheel's file name, inside the entry."""
    sha256: str
    size: int | None
    """The wheel's bytes as stored (None in an entry stored before sizes were kept)."""


def _parse_entry(entry: Path) -> _Entry | None:
    """An entry's record and what it says of its wheel; None where there is no entry
    (never stored, or renamed away by a prune). DamagedEntry, naming the file, where
    there is one and its record is unreadable, is not a regular file, or names a file
    outside the entry."""
    record_path = entry / "record.json"
    try:
        record = read_json(record_path, MAX_RECORD_BYTES)
        facts = record.get("wheel") if isinstance(record, dict) else None
        if not isinstance(facts, dict):
            raise ValueError("no wheel in it")
        name, expected, size = facts.get("name"), facts.get("sha256"), facts.get("size")
        if not isinstance(name, str) or Path(name).name != name or name.startswith("."):
            raise ValueError(f"not a wheel's file name: {name!r}")
        if not isinstance(expected, str) or not SHA256.fullmatch(expected):
            raise ValueError("wheel.sha256 is not a sha256")
        if size is not None and (type(size) is not int or size < 0):
            raise ValueError("wheel.size is not a number of bytes")
    except FileNotFoundError:
        if not os.path.lexists(entry):
            return None
        raise DamagedEntry(f"{record_path}: missing") from None
    except (OSError, ValueError) as exc:
        raise DamagedEntry(f"{record_path}: not a readable record ({exc})") from None
    return _Entry(record, name, expected, size)


def _read_entry(entry: Path) -> _Entry | None:
    """:func:`_parse_entry`, dropping a damaged entry with a warning; one a prune
    renamed away is simply not there."""
    try:
        return _parse_entry(entry)
    except DamagedEntry as exc:
        _discard(entry, str(exc))
        return None


def _discard(entry: Path, why: str) -> None:
    ui.warn(f"dropped a damaged wheel cache entry: {why}.")
    _drop(entry)


def _open_wheel(entry: Path, read: _Entry) -> tuple[IO[bytes], os.stat_result]:
    """The entry's wheel, opened where it is a regular file of the record's size, and
    its status. FileNotFoundError where the entry is gone (a prune); DamagedEntry,
    naming the file, where it is damaged."""
    wheel = entry / read.name
    try:
        handle = os.fdopen(open_regular(wheel), "rb")
    except FileNotFoundError:
        if not os.path.lexists(entry):
            raise
        raise DamagedEntry(f"{wheel}: missing") from None
    except OSError as exc:
        raise DamagedEntry(f"{wheel}: {exc.strerror or exc}") from None
    kept = os.fstat(handle.fileno())
    if read.size is not None and kept.st_size != read.size:
        handle.close()
        raise DamagedEntry(f"{wheel}: {kept.st_size} bytes, its record says {read.size}")
    return handle, kept


def _copy_wheel(source: IO[bytes], size: int, copy: IO[bytes] | None = None) -> str:
    """The sha256 of *source*'s first *size* bytes, written to *copy* as they are read:
    a file that grows meanwhile is read no further."""
    digest_of = hashlib.sha256()
    left = size
    while left > 0:
        block = source.read(min(left, 1 << 20))
        if not block:
            break
        left -= len(block)
        digest_of.update(block)
        if copy is not None:
            copy.write(block)
    return digest_of.hexdigest()


def _wheel_matches(entry: Path, read: _Entry) -> bool:
    """The entry's wheel is a regular file whose bytes match the record's sha256
    (DamagedEntry where it is not; FileNotFoundError where the entry went)."""
    handle, kept = _open_wheel(entry, read)
    with handle:
        return _copy_wheel(handle, kept.st_size) == read.sha256


def _whole(entry: Path) -> bool:
    """The entry's record is readable and its wheel matches the record's sha256."""
    try:
        read = None if entry.is_symlink() else _parse_entry(entry)
        return read is not None and _wheel_matches(entry, read)
    except (DamagedEntry, OSError):
        return False


def _drop(entry: Path) -> None:
    """Remove a damaged entry: renamed aside (as ``.pruned-*``, which a prune clears if
    this process dies), looked at again there, then deleted. Between a build finding the
    entry damaged and dropping it, another may have dropped it too and stored a whole
    entry of the same digest in its place: that one goes back, where deleting in place
    would have removed it, or half of it while the other renamed it in."""
    aside = entry.with_name(f".pruned-{entry.name}-{os.getpid()}-{secrets.token_hex(4)}")
    try:
        entry.rename(aside)
    except OSError:
        return  # dropped, or taken by a prune, meanwhile
    if _whole(aside):
        with contextlib.suppress(OSError):  # another stored it meanwhile: this copy goes
            aside.rename(entry)
            return
    remove_path(aside)  # a tree, or a file or link where an entry belongs


class WheelCache:
    def __init__(self, root: Path | None = None) -> None:
        self.root = root or wheel_cache_dir()

    def entry(self, digest: str) -> Path:
        if len(digest) < 8 or not all(c in "0123456789abcdef" for c in digest):
            raise ValueError(f"not an input digest: {digest!r}")
        return self.root / digest[:2] / digest

    def lookup(self, digest: str) -> CachedWheel | None:
        """The cached wheel for ``digest``, or ``None``. A damaged entry is dropped."""
        entry = self.entry(digest)
        read = _read_entry(entry)
        if read is None:
            return None
        try:
            if not _wheel_matches(entry, read):
                raise DamagedEntry(f"{entry / read.name}: its sha256 is not its record's")
        except DamagedEntry as exc:
            _discard(entry, str(exc))
            return None
        except OSError:
            return None  # renamed away by a prune, or unreadable: a miss either way
        return CachedWheel(digest, entry / read.name, read.record)

    def serve(self, digest: str, out_dir: Path) -> CachedWheel | None:
        """Copy the wheel kept for *digest* into *out_dir* and mark the entry used now;
        None when none is kept, or it went while being served (then the caller builds).

        The wheel is read once, through one open file, and checked against its record's
        sha256 as it is copied: a prune renaming or removing the entry meanwhile does not
        disturb the copy, and a damaged entry is dropped, not served. The copy appears
        in *out_dir* whole or not at all."""
        entry = self.entry(digest)
        read = _read_entry(entry)
        if read is None:
            return None
        name = read.name
        try:
            source, kept = _open_wheel(entry, read)
        except DamagedEntry as exc:
            _discard(entry, str(exc))
            return None
        except OSError:
            return None  # renamed away by a prune since its record was read
        staged = out_dir / f".{name}.{os.getpid()}.part"
        try:
            with source:
                out_dir.mkdir(parents=True, exist_ok=True)
                staged.unlink(missing_ok=True)  # a killed serve's, or a link put there
                fd = os.open(staged, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
                with os.fdopen(fd, "wb") as copy:
                    copied = _copy_wheel(source, kept.st_size, copy)
            if copied != read.sha256:
                staged.unlink()
                _discard(entry, f"{entry / name}: its sha256 is not its record's")
                return None
            os.utime(staged, ns=(kept.st_atime_ns, kept.st_mtime_ns))
            staged.replace(out_dir / name)
        except OSError as exc:
            # Reading the entry or writing the copy failed (a full disk): the cache
            # gives no shortcut this time, and the build says what it makes of out_dir.
            staged.unlink(missing_ok=True)
            ui.warn(f"the wheel cache could not serve {name}: {exc}; building instead.")
            return None
        except BaseException:
            staged.unlink(missing_ok=True)
            raise
        # Renamed aside by a prune since it was opened: served all the same. The record
        # is a regular file (read_json opened it so); a link put there since is not
        # followed.
        with contextlib.suppress(OSError, NotImplementedError):
            os.utime(entry / "record.json", follow_symlinks=False)
        return CachedWheel(digest, entry / name, read.record)

    def kept(self) -> list[KeptWheel]:
        """Every entry, oldest use first (entries a prune has renamed aside excluded)."""
        entries: list[KeptWheel] = []
        for entry in self._entries():
            try:
                read = _parse_entry(entry)
                if read is None:
                    continue  # removed while listed
                used = (entry / "record.json").lstat().st_mtime
                wheel, cell = read.name, read.record.get("cell", "")
                cell = cell if isinstance(cell, str) else ""
            except (DamagedEntry, OSError) as exc:
                if isinstance(exc, DamagedEntry):
                    ui.warn(f"{exc}; the entry is listed as damaged.")
                try:  # damaged (no readable record): listed by its directory's time
                    used, wheel, cell = entry.stat().st_mtime, "", ""
                except OSError:
                    continue  # removed while listed
            entries.append(KeptWheel(entry.name, entry, wheel, cell, tree_size(entry), used))
        return sorted(entries, key=lambda kept: kept.last_used)

    def _shards(self) -> list[Path]:
        """The ``<2 hex>`` directories (symlinks in their place are not followed)."""
        try:
            return sorted(
                p for p in self.root.iterdir()
                if len(p.name) == 2 and p.is_dir() and not p.is_symlink()
            )  # fmt: skip
        except OSError:
            return []

    def _entries(self) -> list[Path]:
        found: list[Path] = []
        for shard in self._shards():
            try:
                found.extend(sorted(p for p in shard.iterdir() if not p.name.startswith(".")))
            except OSError:
                continue
        # An entry is a directory kiln made: a symlink in its place is not walked into,
        # sized through or listed (a prune would remove only the link, if anything).
        return [p for p in found if p.is_dir() and not p.is_symlink()]

    def prune(self, unused_for: float, *, dry_run: bool = False) -> list[PrunedWheel]:
        """Remove each entry whose last use is more than *unused_for* seconds ago, and
        what killed stores and prunes left (``.staging-*`` and ``.pruned-*`` directories)
        unchanged for that long. An entry is renamed aside, its last use read again (a
        build may have served it since it was listed: then it is put back), and only
        then deleted."""
        now = time.time()
        results: list[PrunedWheel] = []
        for kept in self.kept():
            if now - kept.last_used <= unused_for:
                results.append(PrunedWheel(kept, "recent"))
                continue
            if dry_run:
                results.append(PrunedWheel(kept, "would remove"))
                continue
            aside = kept.path.with_name(f".pruned-{kept.digest}-{os.getpid()}")
            try:
                kept.path.rename(aside)
            except OSError:
                results.append(PrunedWheel(kept, "gone"))  # another prune took it
                continue
            try:
                used = (aside / "record.json").stat().st_mtime
            except OSError:
                used = kept.last_used
            if now - used <= unused_for:
                try:
                    aside.rename(kept.path)
                    results.append(PrunedWheel(kept, "recent"))
                    continue
                except OSError:
                    pass  # stored again meanwhile: this copy goes
            shutil.rmtree(aside, ignore_errors=True)
            results.append(PrunedWheel(kept, "removed"))
        results.extend(self._leftovers(now, unused_for, dry_run=dry_run))
        return results

    def _leftovers(self, now: float, unused_for: float, *, dry_run: bool) -> list[PrunedWheel]:
        left: list[PrunedWheel] = []
        for shard in self._shards():
            for path in shard.glob(".*"):
                if not path.name.startswith((".staging-", ".pruned-")) or path.is_symlink():
                    continue
                try:
                    changed = path.stat().st_mtime
                except OSError:
                    continue
                if now - changed <= unused_for:
                    continue  # a store or prune may still be at work on it
                what = KeptWheel(path.name, path, "", "", tree_size(path), changed)
                if not dry_run:
                    shutil.rmtree(path, ignore_errors=True)
                left.append(PrunedWheel(what, "would remove" if dry_run else "removed", True))
        return left

    def store(self, digest: str, wheel_path: Path, record: Mapping[str, Any]) -> CachedWheel:
        """Keep ``wheel_path`` and its build record under ``digest`` (atomically)."""
        entry = self.entry(digest)
        entry.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=".staging-", dir=entry.parent))
        try:
            kept = staging / wheel_path.name
            shutil.copy2(wheel_path, kept)
            stored = json.loads(json.dumps(dict(record), default=str))
            wheel_facts = dict(stored.get("wheel") or {})
            wheel_facts.update(
                {"name": wheel_path.name, "sha256": sha256_file(kept), "size": kept.stat().st_size}
            )
            wheel_facts.pop("path", None)
            stored["wheel"] = wheel_facts
            stored["input_digest"] = digest
            stored["cached_at"] = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
            text = json.dumps(stored, indent=2, sort_keys=True) + "\n"
            (staging / "record.json").write_text(text, encoding="utf-8")
            try:
                staging.rename(entry)
            except OSError:
                # Same inputs were stored meanwhile (or a stale entry is in the way).
                existing = self.lookup(digest)  # drops a damaged one
                if existing is not None:
                    return existing
                try:
                    staging.rename(entry)
                except OSError:
                    existing = self.lookup(digest)  # stored whole meanwhile
                    if existing is None:
                        raise
                    return existing
        finally:
            shutil.rmtree(staging, ignore_errors=True)
        return CachedWheel(digest, entry / wheel_path.name, stored)
