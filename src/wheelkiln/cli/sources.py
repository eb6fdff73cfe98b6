"""``kiln sources list`` and ``kiln sources prune``: the fetched sources' store."""

from __future__ import annotations

import time

import click
from rich.markup import escape
from rich.table import Table

from wheelkiln import ui
from wheelkiln.builder.source_store import SourceStore
from wheelkiln.cli.options import (
    CONTEXT,
    ago,
    dry_run_option,
    emit_json,
    human_size,
    json_option,
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
    table = Table(title="fetched sources", title_justify="left")
    for column in ("name", "kind", "fetched for", "size", "last used"):
        table.add_column(column, overflow="fold")
    for entry in entries:
        table.add_row(
            escape(entry.name), entry.kind, escape(entry.origin), human_size(entry.size),
            ago(entry.last_used, now),
        )  # fmt: skip
    if entries:
        ui.console.print(table)
    ui.info(
        f"{len(entries)} entries, {human_size(sum(e.size for e in entries))}, under "
        f"{escape(str(store.root))}. `kiln sources prune --unused-for 30d` removes those "
        "unused for 30 days."
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
