"""``kiln sources list`` and ``kiln sources prune``: the fetched sources' store."""

from __future__ import annotations

import time

import click
from rich.markup import escape

from wheelkiln.builder.source_store import SourceStore
from wheelkiln.cli.options import (
    CONTEXT,
    ago,
    dry_run_option,
    emit_json,
    human_size,
    json_option,
    print_listing,
    report_prune,
    unused_for_option,
)


@click.group(context_settings=CONTEXT)
def sources_group() -> None:
    """List the fetched sources, and remove the unused ones.

    A recipe's pinned sdist (source.pypi) is downloaded and extracted, and its git
    revision (source.git) cloned, once per builder, under $KILN_HOME/sources; every build
    of it copies that tree. Nothing removes one but `kiln sources prune`; a build that
    needs a removed source fetches it again.
    """


@sources_group.command("list", context_settings=CONTEXT)
@json_option("the entries")
def sources_list(as_json: bool) -> None:
    """Each fetched source tree, downloaded sdist and leftover of a killed fetch: its
    size and last use (when a kiln process last read it), oldest use first."""
    store = SourceStore()
    entries = store.kept()
    if as_json:
        emit_json([entry.as_json() for entry in entries])
        return
    now = time.time()
    print_listing(
        "fetched sources",
        ("name", "kind", "fetched for", "size", "last used"),
        [
            (escape(e.name), e.kind, escape(e.origin), human_size(e.size), ago(e.last_used, now))
            for e in entries
        ],
        f"{len(entries)} entries, {human_size(sum(e.size for e in entries))}, under "
        f"{escape(str(store.root))}. `kiln sources prune --unused-for 30d` removes those "
        "unused for 30 days.",
    )


@sources_group.command("prune", context_settings=CONTEXT)
@unused_for_option("the sources")
@dry_run_option()
@json_option("what became of each entry")
def sources_prune(unused_for: float, dry_run: bool, as_json: bool) -> None:
    """Remove the fetched sources no kiln process has read for AGE, and what killed
    fetches and prunes left.

    A source a running build holds is kept, whatever its age ("in use"); a build that
    needs a removed one fetches it again.
    """
    report_prune(
        SourceStore().prune(unused_for, dry_run=dry_run),
        dry_run=dry_run, unused_for=unused_for, as_json=as_json,
    )  # fmt: skip
