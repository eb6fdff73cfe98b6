"""What the commands share: option decorators, their checks, JSON output, the summary
table, the builder lock and the early checks of output locations.

An option that more than one command takes is declared here once, so its name, type,
check and help read the same everywhere.
"""

from __future__ import annotations

import json
import math
import re
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

import click
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from wheelkiln import ui
from wheelkiln.errors import UsageError

if TYPE_CHECKING:
    from wheelkiln.cells import Cell
    from wheelkiln.recipe.load import LoadedRecipe

CONTEXT: dict[str, Any] = {
    "help_option_names": ["-h", "--help"],
    "max_content_width": 100,
    # Without a terminal click would take $COLUMNS, so help read through a pipe or in a
    # CI log would fold at whatever width the shell that started it had.
    **({} if sys.stdout.isatty() else {"terminal_width": 100}),
}

F = TypeVar("F", bound=Callable[..., Any])
T = TypeVar("T")
Decorator = Callable[[F], F]


def emit_json(data: Any) -> None:
    """*data* as JSON on stdout. JSON has no NaN or Infinity (``json.dumps`` would write
    them, and a strict reader refuses the whole document): a non-finite number, which
    only a damaged input can put here, is written as null, with a warning naming where."""
    try:
        text = json.dumps(data, indent=2, sort_keys=True, allow_nan=False)
    except ValueError:
        where: list[str] = []
        text = json.dumps(_finite(data, "", where), indent=2, sort_keys=True, allow_nan=False)
        ui.warn(
            "JSON has no NaN or Infinity; written as null: " + ", ".join(where[:5])
            + (f" and {len(where) - 5} more" if len(where) > 5 else "") + "."
        )  # fmt: skip
    click.echo(text)


def _finite(data: Any, at: str, where: list[str]) -> Any:
    """*data* with each non-finite number replaced by None, its place added to *where*."""
    if isinstance(data, float) and not math.isfinite(data):
        where.append(at or "the value")
        return None
    if isinstance(data, dict):
        return {key: _finite(value, f"{at}.{key}" if at else str(key), where)
                for key, value in data.items()}  # fmt: skip
    if isinstance(data, list | tuple):
        return [_finite(value, f"{at}[{number}]", where) for number, value in enumerate(data)]
    return data


def report_busy(
    not_doing: str, lock_path: Path | None, holder: dict[str, Any] | None, why: str, as_json: bool
) -> None:
    """A run refused because another build holds the builder lock: one unwrapped line
    (cron mails and logs get greppable text), exit 0, and the holder in JSON."""
    from wheelkiln.builder_lock import describe

    ui.console.print(
        f"{not_doing}: another build holds the builder lock {lock_path}: {describe(holder)}. "
        f"Nothing was run or recorded; exiting 0 ({why}; try again later).",
        soft_wrap=True, markup=False, highlight=False,
    )
    if as_json:
        emit_json({"status": "busy", "holder": holder, "lock": str(lock_path)})


def summary_table(title: str, rows: list[tuple[str, str]]) -> Table:
    table = Table(title=title, show_header=False, title_justify="left")
    table.add_column("what", style="bold")
    table.add_column("value")
    for key, value in rows:
        table.add_row(key, Text(value, overflow="fold"))  # a long path folds, never cut
    return table


# --- checks ----------------------------------------------------------------------------

_NAMESPACE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")


def check_namespace(value: str | None) -> str | None:
    """A cache namespace names a directory (sccache) and a key prefix: one plain name,
    never a path (``/etc`` or ``../..`` would put the cache anywhere)."""
    if value is not None and not _NAMESPACE.fullmatch(value):
        raise click.BadParameter(
            f"{value!r} is not a namespace: use 1-100 letters, digits, '.', '_' or '-', "
            "starting with a letter or digit.",
            param_hint="'--namespace'",
        )
    return value


def check_finite(value: float | None, option: str) -> float | None:
    if value is not None and math.isnan(value):
        raise click.BadParameter("nan is not a number of seconds.", param_hint=f"'{option}'")
    return value


def _size(ctx: click.Context, param: click.Parameter, value: str | None) -> int | None:
    """A byte size: ``64MiB``, ``3GB``, ``20GiB`` or a plain number of bytes."""
    from wheelkiln.cache.archive import parse_size

    if value is None:
        return None
    try:
        return parse_size(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc), ctx=ctx, param=param) from None


@dataclass(frozen=True)
class JobLocations:
    """Where a job writes, as checked: resolved, ``~`` expanded. The job is given these,
    never the spelling on the command line, so what was checked is what is written."""

    out_dir: Path
    workdir: Path | None
    """``--workdir``; None for the default, ``$KILN_HOME/work``."""
    cache_dir: Path | None
    """``--cache-dir``; None for the backend's default."""

    @property
    def job_root(self) -> Path:
        """The work directory the job's trees are built in (given or default)."""
        from wheelkiln.paths import resolve_workdir

        return resolve_workdir(self.workdir)


def check_job_locations(
    out_dir: Path, workdir: Path | None, cache_dir: Path | None = None
) -> JobLocations:
    """Refuse unusable output locations before any work starts: a build that fails to
    write its wheel after an hour has lost the hour. Returns them as checked, for the
    job to use (:func:`check_cell_locations` then checks them against each other)."""
    from wheelkiln.output_paths import check_output_dir
    from wheelkiln.paths import kiln_home

    checked_out = check_output_dir(out_dir, "--out")
    check_output_dir(kiln_home(), "$KILN_HOME")
    return JobLocations(
        out_dir=checked_out,
        workdir=check_output_dir(workdir, "--workdir") if workdir is not None else None,
        cache_dir=check_output_dir(cache_dir, "--cache-dir") if cache_dir is not None else None,
    )


def _inside(path: Path, directory: Path) -> bool:
    """Whether *path* is *directory* or lies in it (both resolved)."""
    return path == directory or directory in path.parents


def _is_or_lies_in(path: Path, directory: Path) -> str:
    return "is" if path == directory else "lies in"


def _emptied_job_directory(path: Path, workdir: Path, cell_id: str) -> Path | None:
    """The directory in *workdir* holding *path* that a job of cell *cell_id* empties or
    replaces, if any: the cell's job directories (``<cell>``, ``<cell>-shard-i-of-N``,
    ``<cell>-link``...) with their companions (``<cell>-shard-i-of-N.cache``,
    ``<cell>-link.shards``...), and the views every job makes again (``.envs``,
    ``.cuda``)."""
    from wheelkiln.paths import CUDA_VIEWS, ENVS_VIEW

    if not _inside(path, workdir) or path == workdir:
        return None
    first = path.relative_to(workdir).parts[0]
    if first in (cell_id, ENVS_VIEW, CUDA_VIEWS) or first.startswith(cell_id + "-"):
        return workdir / first
    return None


def _stores() -> dict[Path, str]:
    """The directories under ``$KILN_HOME`` whose entries kiln makes again, replaces or
    prunes by itself (``kiln envs|sources|wheels|answers prune``), with what they hold."""
    from wheelkiln.builder.answer_store import STORES
    from wheelkiln.paths import envs_dir, kiln_home, smoke_envs_dir, sources_dir, wheel_cache_dir

    stores = {
        envs_dir(): "the build environments",
        smoke_envs_dir(): "the smoke-test environments",
        sources_dir(): "the fetched sources",
        wheel_cache_dir(): "the wheel cache",
        **{kiln_home() / name: f"the {kind} store" for name, kind in STORES.items()},
    }
    return {path.resolve(): what for path, what in stores.items()}


def _glob_literal(name: str) -> str:
    """*name* as a glob segment that matches only itself."""
    return "".join(f"[{c}]" if c in "*?[" else c for c in name)


def check_cell_locations(
    locations: JobLocations,
    loaded: LoadedRecipe,
    cell: Cell,
    reads: Mapping[str, Path] | None = None,
) -> LoadedRecipe:
    """Refuse, before any work, locations that a job of *cell* would destroy or that
    would destroy its work; return *loaded* with the locations that lie in its local
    source tree left out of the source's copy and digest.

    Refused: ``--out``, ``--cache-dir``, the source or what the job *reads* (option →
    resolved directory, e.g. ``--archives``) inside what a job empties (the
    cell's job directories and the views, :func:`_emptied_job_directory`) or inside a
    store of ``$KILN_HOME`` (:func:`_stores`; ``--out`` also inside a backend's default
    cache directory); the work directory in ``--out``, in a store, in a cache directory
    or in the source (a copy of the source into itself never ends); ``--out`` and
    ``--cache-dir`` one in the other (a cache evicts files it did not write, and a wheel
    directory is no place for cache entries); an output location that is the source
    tree itself.

    ``--out`` (``kiln build . --out wheels``), the cache directory and kiln's homes may
    lie in the source tree: a wheel, a record or a cache entry written there would
    otherwise change the next build's source digest, and the wheel cache would never
    serve it. They are added to the copy's exclusions (``source.exclude``) for this run,
    as literal paths, unless an exclusion covers them already.
    """
    from wheelkiln.paths import kiln_home, state_home

    workdir = locations.job_root
    out, cache_dir = locations.out_dir, locations.cache_dir
    source = _local_source(loaded)
    where = f"the work directory {workdir}" + (
        " (--workdir)" if locations.workdir is not None else " ($KILN_HOME/work)"
    )
    named: list[tuple[str, Path]] = [("--out", out)]
    if cache_dir is not None:
        named.append(("--cache-dir", cache_dir))
    if source is not None:
        named.append((f"{loaded.path}: source.path", source))
    named.extend((reads or {}).items())
    for what, path in named:
        _refuse_in_kilns_own(what, path, workdir, where, cell.id, with_caches=what == "--out")
    _refuse_in_kilns_own(where, workdir, workdir, where, cell.id, with_caches=True)
    if _inside(workdir, out):
        raise UsageError(
            f"{where} {_is_or_lies_in(workdir, out)} --out {out}: the job trees would be "
            "mixed with the wheels.",
            hint="Give --out and --workdir apart, neither inside the other.",
        )
    if cache_dir is not None:
        if _inside(out, cache_dir) or _inside(cache_dir, out):
            overlap = (
                f"--out {out} is also --cache-dir"
                if out == cache_dir
                else f"--out {out} and --cache-dir {cache_dir} lie one in the other"
            )
            raise UsageError(
                f"{overlap}: a cache evicts files it did not write, and cache entries do not "
                "belong beside wheels.",
                hint="Give --out and --cache-dir apart, neither inside the other.",
            )
        if _inside(workdir, cache_dir):
            raise UsageError(
                f"{where} {_is_or_lies_in(workdir, cache_dir)} --cache-dir {cache_dir}: a "
                "cache evicts files it did not write, the job trees' among them.",
                hint="Give --workdir outside --cache-dir.",
            )
    if source is None:
        return loaded
    _refuse_workdir_in_source(workdir, where, source, loaded, given=locations.workdir is not None)
    # The default cache directories lie in $KILN_HOME.
    inside = {"--out": out, "--cache-dir": cache_dir, "$KILN_HOME": kiln_home(),
              "$KILN_STATE_HOME": state_home()}  # fmt: skip
    return _kept_out_of_source(
        loaded, source, {what: path for what, path in inside.items() if path is not None}
    )


def _refuse_workdir_in_source(
    workdir: Path, where: str, source: Path, loaded: LoadedRecipe, *, given: bool
) -> None:
    if _inside(workdir, source):
        raise UsageError(
            f"{where} {_is_or_lies_in(workdir, source)} the source tree {source} "
            f"({loaded.path}: source.path): each job copies the source into the work "
            "directory, so the copy would copy itself without end.",
            hint=f"Choose a --workdir outside {source}"
            + ("." if given else " (or set $KILN_HOME elsewhere)."),
        )


def check_workdir_outside_sources(workdir: Path | None, recipes: Iterable[LoadedRecipe]) -> None:
    """Refuse, before any work, a work directory (``--workdir``, else
    ``$KILN_HOME/work``) that lies in the local source tree of one of *recipes*: the
    check of :func:`check_cell_locations` for the commands that build many cells or
    write no wheel (``kiln bench``, ``kiln fleet run``)."""
    from wheelkiln.paths import resolve_workdir

    root = resolve_workdir(workdir).resolve()
    where = f"the work directory {root}" + (" (--workdir)" if workdir else " ($KILN_HOME/work)")
    for loaded in recipes:
        source = _local_source(loaded)
        if source is not None:
            _refuse_workdir_in_source(root, where, source, loaded, given=workdir is not None)


def _refuse_in_kilns_own(
    what: str, path: Path, workdir: Path, where: str, cell_id: str, *, with_caches: bool
) -> None:
    """Refuse *path* (named *what*) where it lies in a directory kiln empties or prunes
    by itself: a job directory of the cell, a view, a store under ``$KILN_HOME`` and,
    *with_caches*, a backend's default cache directory."""
    from wheelkiln.paths import default_cache_dir

    job_dir = _emptied_job_directory(path, workdir, cell_id)
    if job_dir is not None:
        raise UsageError(
            f"{what} {path} {_is_or_lies_in(path, job_dir)} {job_dir}, named as a job "
            f"directory of {cell_id}: kiln empties those when it builds the cell in {where}, "
            "and what is there would be deleted.",
            hint=f"Choose a location outside {job_dir}.",
        )
    stores = _stores()
    if with_caches:
        for backend in ("ccache", "sccache"):
            stores[default_cache_dir(backend).resolve()] = f"the default {backend} cache"
    for store, holds in stores.items():
        if _inside(path, store):
            shown = where if path == workdir else f"{what} {path}"
            raise UsageError(
                f"{shown} {_is_or_lies_in(path, store)} {store}, {holds}, whose entries "
                "kiln replaces and prunes by itself.",
                hint=f"Choose a location outside {store}.",
            )


def _local_source(loaded: LoadedRecipe) -> Path | None:
    """The package directory a job copies from a local ``source.path`` (resolved);
    None for a source kiln fetches into its own store."""
    if loaded.recipe.source.path is None:
        return None
    from wheelkiln.builder.source import fetch_source
    from wheelkiln.paths import sources_dir

    return fetch_source(loaded, sources_dir()).resolve()


def _kept_out_of_source(
    loaded: LoadedRecipe, source: Path, locations: dict[str, Path]
) -> LoadedRecipe:
    """*loaded* with each of *locations* that lies in *source* added to its
    ``source.exclude`` (see :func:`check_cell_locations`); one that is *source* itself
    is refused, as nothing could then be left out."""
    from wheelkiln.builder.source import is_ignored

    exclude = tuple(loaded.recipe.source.exclude)
    added: list[str] = []
    for what, location in locations.items():
        path = location.expanduser().resolve()
        if not _inside(path, source):
            continue
        if path == source:
            raise UsageError(
                f"{what} {path} is the source tree ({loaded.path}: source.path): what kiln "
                "writes there would become part of the next build's source.",
                hint=f"Choose a directory inside {source} (e.g. {source / 'dist'}) or outside it.",
            )
        parts = path.relative_to(source).parts
        if not is_ignored(parts, exclude):
            added.append("/".join(_glob_literal(part) for part in parts))
    if not added:
        return loaded
    source_model = loaded.recipe.source.model_copy(update={"exclude": (*exclude, *added)})
    return replace(loaded, recipe=loaded.recipe.model_copy(update={"source": source_model}))


@contextmanager
def builder_lock(timeout: float | None) -> Iterator[None]:
    """One build per builder: wait for (or inherit) the builder lock."""
    from wheelkiln.builder_lock import BuilderLock, describe

    lock = BuilderLock()
    if not lock.inherited():
        lock.acquire(
            timeout=timeout,
            on_wait=lambda holder: ui.info(
                f"Waiting for the builder lock ({describe(holder)}); --lock-timeout limits the wait."
            ),
        )
    try:
        yield
    finally:
        lock.release()


# --- option decorators -----------------------------------------------------------------


def stack(*decorators: Callable[[Any], Any]) -> Callable[[F], F]:
    """Apply *decorators* as if written one above the other, first on top."""

    def apply(command: F) -> F:
        for decorator in reversed(decorators):
            command = decorator(command)
        return command

    return apply


def recipe_argument() -> Decorator[Any]:
    return click.argument("recipe_ref", metavar="RECIPE")


def cell_option() -> Decorator[Any]:
    return click.option("--cell", help="Cell id or 'axis=value,...' (default: this host's cell).")


_AGE = re.compile(r"(\d+(?:\.\d+)?)\s*([dhms]?)")
_UNIT_SECONDS = {"d": 86400.0, "h": 3600.0, "m": 60.0, "s": 1.0, "": 86400.0}


def _age(ctx: click.Context, param: click.Parameter, value: str) -> float:
    """Seconds from ``30d``, ``12h``, ``90m``, ``45s`` or a plain number of days."""
    found = _AGE.fullmatch(value.strip())
    seconds = float(found[1]) * _UNIT_SECONDS[found[2]] if found else math.nan
    if not math.isfinite(seconds):
        raise click.BadParameter(
            f"{value!r} is not an age: write it as 30d, 12h, 90m, 45s or a number of days",
            ctx=ctx, param=param,
        )  # fmt: skip
    return seconds


def unused_for_option(what: str) -> Decorator[Any]:
    """``--unused-for AGE`` (required): remove *what* no kiln process has used for AGE."""
    return click.option(
        "--unused-for", "unused_for", required=True, callback=_age, metavar="AGE",
        help=f"Remove {what} no kiln process has used for AGE: 30d, 12h, 90m, 45s, or a "
             "number of days.",
    )  # fmt: skip


def dry_run_option() -> Decorator[Any]:
    """``--dry-run``: a prune says what it would remove and removes nothing."""
    return click.option("--dry-run", is_flag=True, help="Say what would be removed; remove nothing.")


REMOVING = ("removed", "would remove")
"""A prune's outcomes for an entry it removes, or would remove in a dry run."""


def emit_prune_json(dry_run: bool, unused_for: float, freed: int, **lists: list[Any]) -> None:
    """A prune's ``--json``: the age asked for, the bytes freed (none in a dry run) and,
    under each keyword's name, what became of each entry."""
    emit_json(
        {
            "dry_run": dry_run,
            "unused_for_seconds": unused_for,
            "freed_bytes": 0 if dry_run else freed,
            **lists,
        }
    )


def print_listing(
    title: str, columns: Sequence[str], rows: Sequence[Sequence[str]], summary: str
) -> None:
    """A store's list: a table of its entries (none when empty), then *summary*."""
    table = Table(title=title, title_justify="left")
    for column in columns:
        table.add_column(column, overflow="fold")
    for row in rows:
        table.add_row(*row)
    if rows:
        ui.console.print(table)
    ui.info(summary)


class _Listed(Protocol):
    @property
    def name(self) -> str: ...
    @property
    def kind(self) -> str: ...
    @property
    def size(self) -> int: ...
    @property
    def last_used(self) -> float: ...


class _Pruned(Protocol):
    @property
    def entry(self) -> _Listed: ...
    @property
    def outcome(self) -> str: ...
    def as_json(self) -> dict[str, object]: ...


def report_prune(
    results: Sequence[_Pruned], *, dry_run: bool, unused_for: float, as_json: bool
) -> None:
    """A store's prune: ``--json`` (see :func:`emit_prune_json`), else a line for each
    entry removed or held by a running build, then what was freed and kept."""
    now = time.time()
    gone = [r for r in results if r.outcome in REMOVING]
    held = [r for r in results if r.outcome == "in use"]
    freed = sum(r.entry.size for r in gone)
    if as_json:
        emit_prune_json(dry_run, unused_for, freed, entries=[r.as_json() for r in results])
        return
    for result in [*gone, *held]:
        entry = result.entry
        ui.info(
            f"{result.outcome}: {escape(entry.name)} ({entry.kind}), {human_size(entry.size)}, "
            f"last used {ago(entry.last_used, now)}"
        )
    verb, frees = ("would remove", "would free") if dry_run else ("removed", "freed")
    recent = sum(r.outcome == "recent" for r in results)
    ui.info(
        f"{verb} {len(gone)} of {len(results)} entries ({frees} {human_size(freed)}); kept "
        f"{recent} used in the last {span(unused_for)}"
        + (f" and {len(held)} a running build holds" if held else "")
        + "."
    )


def human_size(value: int) -> str:
    """Bytes as GiB from 1 GiB up, else MiB."""
    return f"{value / 2**30:.2f} GiB" if value >= 2**30 else f"{value / 2**20:.1f} MiB"


def ago(seconds_since_epoch: float, now: float) -> str:
    """How long before *now* a time was: ``3.5 d ago``, ``2.0 h ago``, ``12 min ago``."""
    seconds = max(0.0, now - seconds_since_epoch)
    if seconds >= 86400:
        return f"{seconds / 86400:.1f} d ago"
    if seconds >= 3600:
        return f"{seconds / 3600:.1f} h ago"
    return f"{seconds / 60:.0f} min ago"


def span(seconds: float) -> str:
    """A length of time in its largest whole unit: ``30 d``, ``12 h``, ``90 min``, ``45 s``."""
    for unit, size in (("d", 86400.0), ("h", 3600.0), ("min", 60.0)):
        if seconds >= size:
            return f"{seconds / size:g} {unit}"
    return f"{seconds:g} s"


def json_option(what: str) -> Decorator[Any]:
    """``--json``: *what* is printed as JSON on stdout (e.g. "the build record")."""
    return click.option("--json", "as_json", is_flag=True, help=f"Print {what} as JSON on stdout.")


def cache_option(*, allow_none: bool = False, default: str = "the recipe's") -> Decorator[Any]:
    choices = ["ccache", "sccache", *(["none"] if allow_none else [])]
    return click.option(
        "--cache",
        "cache_name",
        type=click.Choice(choices),
        help=f"Compiler cache (default: {default}).",
    )


class LocationPath(click.Path):
    """A directory kiln writes in (or, *file*, a file it writes), as a
    :class:`~pathlib.Path` with a leading ``~`` expanded: a quoted ``--out '~/wheels'``
    reaches kiln unexpanded, and the check, the job and its messages must all mean the
    same place. An empty value is refused: ``Path("")`` is the current directory, which
    ``--out "$DIST"`` with DIST unset did not mean."""

    def __init__(self, *, file: bool = False, **path_options: bool) -> None:
        super().__init__(path_type=Path, **path_options)  # kiln's checks name the rest
        self._wanted = "a file name" if file else "a directory (. for the current one)"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, str) and not value:
            self.fail(f"an empty path names no location; give {self._wanted}.", param, ctx)
        converted = super().convert(value, param, ctx)
        return converted.expanduser() if isinstance(converted, Path) else converted


def cache_dir_option(
    help_text: str = "The local cache directory (default: $KILN_HOME/<cache>).",
) -> Decorator[Any]:
    return click.option("--cache-dir", type=LocationPath(), help=help_text)


def workdir_option() -> Decorator[Any]:
    return click.option(
        "--workdir",
        type=LocationPath(),
        help="Where job trees are built (default: $KILN_HOME/work).",
    )


def jobs_option(help_text: str = "Parallel compile jobs.") -> Decorator[Any]:
    return click.option("--jobs", "-j", type=click.IntRange(1), help=help_text)


def namespace_option() -> Decorator[Any]:
    return click.option(
        "--namespace",
        callback=lambda ctx, param, value: check_namespace(value),
        help="Cache namespace / key prefix isolating this build's entries.",
    )


def remote_option() -> Decorator[Any]:
    return click.option(
        "--remote",
        metavar="URL",
        envvar="KILN_REMOTE",
        callback=lambda ctx, param, value: check_remote(value),
        help="Remote cache storage the builders share, e.g. redis://HOST:6379 (default: "
        "$KILN_REMOTE, else the recipe's cache.remote). Probed before the build; an "
        "unreachable one is left out with a warning.",
    )


def check_remote(value: str | None) -> str | None:
    """A remote storage setting: one or more URLs, each with a scheme."""
    if value is None:
        return None
    urls = value.split()
    bad = [url for url in urls if ":" not in url.split("|", 1)[0]]
    if not urls or bad:
        raise click.BadParameter(
            f"{(bad or [value])[0]!r} is not a storage URL: give SCHEME:..., e.g. "
            "redis://HOST:6379, http://HOST:8080|layout=flat or file:/mnt/cache.",
            param_hint="'--remote'",
        )
    return value


def out_dir_option(default: str, what: str) -> Decorator[Any]:
    return click.option(
        "--out",
        "out_dir",
        type=LocationPath(),
        default=Path(default),
        show_default=True,
        help=f"Where {what} go.",
    )


def count_option(help_text: str, *, required: bool = False) -> Decorator[Any]:
    return click.option(
        "--count", "count", type=click.IntRange(1, 256), required=required, help=help_text
    )


def smoke_option(help_text: str) -> Decorator[Any]:
    return click.option("--smoke", is_flag=True, help=help_text)


def former_name(old: str, new: str, dest: str, **attrs: Any) -> Decorator[Any]:
    """*old*, the former name of option *new*: hidden from --help, parsed into *dest*,
    and one warning naming *new* when it is given. The command reconciles the two
    values with :func:`renamed`."""

    def warn(ctx: click.Context, param: click.Parameter, value: Any) -> Any:
        if value is not None:
            ui.warn(f"{old} is deprecated; use {new} (it takes the same values).")
        return value

    return click.option(old, dest, hidden=True, callback=warn, **attrs)


def renamed(new_value: T | None, old_value: T | None, new: str, old: str) -> tuple[T | None, str]:
    """The value of option *new* given under either name, and the name it was given
    under (so messages name what the user typed)."""
    if old_value is None:
        return new_value, new
    if new_value is not None and new_value != old_value:
        raise UsageError(
            f"{new} {new_value} and {old} {old_value} disagree ({old} is the former name of {new}).",
            hint=f"Give {new} only.",
        )
    return old_value, old


def partition_option(help_text: str) -> Decorator[Any]:
    """``--partition seat|source``, and its former name ``--filter``."""
    choice = click.Choice(["seat", "source"])
    return stack(
        click.option("--partition", "partition", type=choice, help=help_text),
        former_name("--filter", "--partition", "former_filter", type=choice),
    )


def job_options(command: F) -> F:
    """The options shard and link jobs share: cache, work tree, parallelism, namespace,
    remote storage."""
    return stack(
        cache_option(), workdir_option(), jobs_option(), namespace_option(), remote_option()
    )(command)


def archive_limit_options(command: F) -> F:
    """The caps on what one shard archive may unpack to (see cache/archive.py)."""
    from wheelkiln.cache.archive import (
        DEFAULT_MAX_MEMBERS,
        DEFAULT_MAX_UNPACKED_SIZE,
        MAX_MEMBERS_ENV,
        MAX_UNPACKED_SIZE_ENV,
        format_size,
    )

    return stack(
        click.option(
            "--max-unpacked-size",
            metavar="SIZE",
            callback=_size,
            help=f"Most bytes one shard archive may unpack to, e.g. 64MiB, 3GB (default: "
            f"${MAX_UNPACKED_SIZE_ENV}, else {format_size(DEFAULT_MAX_UNPACKED_SIZE)}).",
        ),
        click.option(
            "--max-members",
            type=click.IntRange(1),
            help=f"Most members one shard archive may hold (default: ${MAX_MEMBERS_ENV}, "
            f"else {DEFAULT_MAX_MEMBERS:,}).",
        ),
    )(command)
