"""``kiln envs list`` and ``kiln envs prune``: the kept build and smoke-test environments."""

from __future__ import annotations

import time
from pathlib import Path

import click
from rich.markup import escape

from wheelkiln import ui
from wheelkiln.builder import env_store
from wheelkiln.builder.bytecode_store import store_for
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
    unused_for_option,
)
from wheelkiln.paths import envs_dir, smoke_envs_dir


def _stored() -> list[env_store.Stored]:
    return [*env_store.stored(envs_dir(), "build"), *env_store.stored(smoke_envs_dir(), "smoke")]


def _requires(environment: env_store.Stored) -> str:
    shown = ", ".join(environment.requires[:4])
    more = len(environment.requires) - 4
    return shown + (f" and {more} more" if more > 0 else "")


@click.group(context_settings=CONTEXT)
def envs_group() -> None:
    """List the kept build and smoke-test environments, and remove the unused ones.

    kiln keeps one build environment per resolved lock under $KILN_HOME/envs and one
    smoke-test environment per interpreter and requirement set under
    $KILN_HOME/smoke-envs, and reuses them; a new release of any build requirement makes
    a new one beside the old. An environment a running kiln process has used is never
    removed.
    """


@envs_group.command("list", context_settings=CONTEXT)
@json_option("the environments")
def envs_list(as_json: bool) -> None:
    """Each kept environment: its size, its last use by a kiln process, whether one
    holds it now, and what it was asked to hold."""
    environments = _stored()
    if as_json:
        emit_json([environment.as_json() for environment in environments])
        return
    now = time.time()
    busy = sum(environment.in_use for environment in environments)
    print_listing(
        "kept environments",
        ("kind", "key", "size", "its own", "last used", "in use", "requires"),
        [
            (
                e.kind, e.key, human_size(e.size), human_size(e.own), ago(e.last_used, now),
                "yes" if e.in_use else "no", escape(_requires(e)),
            )
            for e in environments
        ],
        f"{len(environments)} environments, {human_size(sum(e.size for e in environments))} "
        f"({human_size(sum(e.own for e in environments))} their own: the rest is linked from "
        "uv's package cache or from kept bytecode), "
        f"under {escape(str(envs_dir()))} and {escape(str(smoke_envs_dir()))}; {busy} in use. "
        "`kiln envs prune --unused-for 30d` removes those unused for 30 days.",
    )


@envs_group.command("prune", context_settings=CONTEXT)
@unused_for_option("the environments")
@dry_run_option()
@json_option("what became of each environment")
def envs_prune(unused_for: float, dry_run: bool, as_json: bool) -> None:
    """Remove the kept environments unused for AGE that no kiln process holds, what
    killed kiln runs left beside them, and kept bytecode no environment links any more.

    A build that asks for a removed build environment again makes it from the lock it
    was resolved to before (nothing is resolved again); one that starts while its
    environment is being removed waits for that, then makes it.
    """
    now = time.time()
    results: list[env_store.Pruned] = []
    roots: tuple[tuple[Path, env_store.Kind], ...] = (
        (envs_dir(), "build"), (smoke_envs_dir(), "smoke")
    )  # fmt: skip
    for root, kind in roots:
        for result in env_store.prune(env_store.stored(root, kind), unused_for, dry_run=dry_run):
            results.append(result)
            environment = result.environment
            if result.outcome in ("removed", "would remove") and not as_json:
                ui.info(
                    f"{result.outcome} {environment.kind} environment {environment.key} "
                    f"({human_size(environment.own)} its own of {human_size(environment.size)}, last "
                    f"used {ago(environment.last_used, now)})"
                )
    left: list[env_store.Leftover] = []
    for root, kind in roots:
        left.extend(env_store.leftovers(root, kind, dry_run=dry_run))
    # A dry run leaves the environments it would remove in place, still linking their
    # bytecode: it tells the store which links a real run would have removed.
    leaving = [r.environment.path for r in results if r.outcome == "would remove"]
    left.extend(
        env_store.unused_bytecode(
            store_for(envs_dir()), unused_for, dry_run=dry_run, leaving=leaving
        )
    )
    gone = [r for r in results if r.outcome in REMOVING]
    # An environment's files linked from uv's cache stay there; those linked from kept
    # bytecode are freed with the store's directory, counted once, as a leftover.
    freed = sum(r.environment.own for r in gone) + sum(leftover.size for leftover in left)
    if as_json:
        emit_prune_json(
            dry_run, unused_for, freed,
            environments=[result.as_json() for result in results],
            leftovers=[leftover.as_json() for leftover in left],
        )  # fmt: skip
    kept = {
        outcome: sum(r.outcome == outcome for r in results)
        for outcome in ("recent", "in use", "being made")
    }
    verb = "would remove" if dry_run else "removed"
    if left:
        ui.info(
            f"{verb} {len(left)} {'directory' if len(left) == 1 else 'directories'} "
            "that killed kiln runs left, or of bytecode no environment uses "
            f"({human_size(sum(leftover.size for leftover in left))}): "
            + ", ".join(escape(f"{leftover.path.name} ({leftover.what})") for leftover in left)
        )
    frees = "would free" if dry_run else "freed"
    ui.info(
        f"{verb} {len(gone)} of {len(results)} environments ({frees} {human_size(freed)} in all); kept "
        f"{kept['recent']} used recently, {kept['in use']} in use by a running kiln process, "
        f"{kept['being made']} being made."
    )
