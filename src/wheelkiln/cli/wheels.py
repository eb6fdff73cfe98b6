"""``kiln wheels list`` and ``kiln wheels prune``: the wheel cache's entries."""

from __future__ import annotations

import time

import click
from rich.markup import escape

from wheelkiln import ui
from wheelkiln.builder.wheel_cache import WheelCache
from wheelkiln.cli.options import (
    CONTEXT,
    REMOVING,
    ago,
    dry_run_option,
    emit_json,
    emit_prune_json,
    human_size,
    json_option,
    print_listing,
    span,
    unused_for_option,
)


@click.group(context_settings=CONTEXT)
def wheels_group() -> None:
    """List the wheel cache's entries, and remove the unused ones.

    A build whose inputs (source, recipe, cell, build environment, tools, the
    environment variables that change the output) match an earlier build's is served that
    build's wheel from $KILN_HOME/wheels instead of building. Every entry is one wheel and
    its build record; nothing removes one but `kiln wheels prune`.
    """


@wheels_group.command("list", context_settings=CONTEXT)
@json_option("the entries")
def wheels_list(as_json: bool) -> None:
    """Each entry of the wheel cache: its wheel, cell, size and last use (when it was
    stored or last served), oldest use first."""
    cache = WheelCache()
    entries = cache.kept()
    if as_json:
        emit_json([entry.as_json() for entry in entries])
        return
    now = time.time()
    print_listing(
        "wheel cache",
        ("input digest", "wheel", "cell", "size", "last used"),
        [
            (
                e.digest[:16], escape(e.wheel or "(damaged: no readable record)"),
                escape(e.cell), human_size(e.size), ago(e.last_used, now),
            )
            for e in entries
        ],
        f"{len(entries)} wheels, {human_size(sum(e.size for e in entries))}, under "
        f"{escape(str(cache.root))}. `kiln wheels prune --unused-for 30d` removes those "
        "unused for 30 days.",
    )


@wheels_group.command("prune", context_settings=CONTEXT)
@unused_for_option("the wheels")
@dry_run_option()
@json_option("what became of each entry")
def wheels_prune(unused_for: float, dry_run: bool, as_json: bool) -> None:
    """Remove the wheel cache's entries no build has stored or been served for AGE, and
    what killed stores and prunes left.

    A build whose wheel was removed builds it again (and keeps it again); one being
    served an entry while it is removed is served all the same or builds.
    """
    cache = WheelCache()
    now = time.time()
    results = cache.prune(unused_for, dry_run=dry_run)
    gone = [r for r in results if r.outcome in REMOVING]
    freed = sum(r.entry.size for r in gone)
    if as_json:
        emit_prune_json(dry_run, unused_for, freed, entries=[r.as_json() for r in results])
    for result in [] if as_json else gone:  # JSON says it; the lines are for a person
        entry = result.entry
        what = (
            f"directory a killed kiln run left, {escape(entry.path.name)}"
            if result.leftover
            else f"{escape(entry.wheel or entry.digest)} ({escape(entry.cell)})"
        )
        ui.info(
            f"{result.outcome} {what}: {human_size(entry.size)}, last used "
            f"{ago(entry.last_used, now)}"
        )
    entries = [r for r in results if not r.leftover]
    recent = sum(r.outcome == "recent" for r in entries)
    verb, frees = ("would remove", "would free") if dry_run else ("removed", "freed")
    removed = sum(r.outcome in REMOVING for r in entries)
    ui.info(
        f"{verb} {removed} of {len(entries)} wheels ({frees} {human_size(freed)} in all, "
        f"leftovers included); kept {recent} used in the last {span(unused_for)}."
    )

