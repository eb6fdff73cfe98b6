"""``kiln answers list`` and ``kiln answers prune``: what builds kept of their tools'
answers about this machine."""

from __future__ import annotations

import time

import click
from rich.markup import escape

from wheelkiln.builder.answer_store import STORES, AnswerStore
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
def answers_group() -> None:
    """List the answers builds kept about this machine, and remove the unused ones.

    A build keeps what its tools said, so that the next build with the same key does not
    ask again: CMake's compiler identification, its interpreter answers and the
    project's check results (about 1 MB a key), meson's compiler questions and sanity
    checks, `meson --version` and `dpkg-architecture`, under $KILN_HOME. A new release
    of a package, a compiler or a build environment adds entries; nothing removes one but
    `kiln answers prune`. A build whose entry was removed asks its tools again.
    """


@answers_group.command("list", context_settings=CONTEXT)
@json_option("the entries")
def answers_list(as_json: bool) -> None:
    """Each kept answer and leftover of a killed build or prune: its store, size and last
    use (when a build last read it), oldest use first."""
    store = AnswerStore()
    entries = store.kept()
    if as_json:
        emit_json([entry.as_json() for entry in entries])
        return
    now = time.time()
    print_listing(
        "kept answers",
        ("store", "key", "kind", "size", "last used"),
        [
            (e.store, escape(e.name), e.kind, human_size(e.size), ago(e.last_used, now))
            for e in entries
        ],
        f"{len(entries)} entries, {human_size(sum(e.size for e in entries))}, under "
        f"{escape(str(store.home))} ({', '.join(STORES)}). `kiln answers prune --unused-for "
        "30d` removes those unused for 30 days.",
    )


@answers_group.command("prune", context_settings=CONTEXT)
@unused_for_option("the answers")
@dry_run_option()
@json_option("what became of each entry")
def answers_prune(unused_for: float, dry_run: bool, as_json: bool) -> None:
    """Remove the kept answers no build has read for AGE, and what killed builds and
    prunes left.

    An answer a running build holds is kept, whatever its age ("in use"); a build that
    needs a removed one asks its tools again (its configure takes longer once).
    """
    report_prune(
        AnswerStore().prune(unused_for, dry_run=dry_run),
        dry_run=dry_run, unused_for=unused_for, as_json=as_json,
    )  # fmt: skip
