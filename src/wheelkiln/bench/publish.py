"""``kiln bench publish``: the results store's medians onto the docs branch.

``data/bench/bench.json`` holds what ``kiln bench report --format json`` says (medians
with n and min-max per key, ratios within a key, ``frozen*`` out of every ratio) plus
every successful run's wall time per key (the points of the plot), and
``data/bench/index.html`` is the bench page. Nothing in the working branch carries
benchmark data. The same store published twice commits nothing the second time: the
files hold no publishing time, only what the store says.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from wheelkiln.bench import store
from wheelkiln.bench.report import json_safe, render_html, summary_json
from wheelkiln.bench.stats import summarize
from wheelkiln.docs_branch import docs_worktree, require_remote
from wheelkiln.errors import UsageError

BENCH_DIR = "data/bench"
BENCH_JSON = "bench.json"
PUBLISHED_SCHEMA = 1


@dataclass(frozen=True)
class BenchPublishResult:
    branch: str
    path: str
    commit: str | None
    pushed: bool
    records: int
    created_branch: bool

    def as_json(self) -> dict[str, Any]:
        return {"branch": self.branch, "path": self.path, "commit": self.commit,
                "no_op": self.commit is None, "pushed": self.pushed, "records": self.records,
                "created_branch": self.created_branch}


def bench_data(records: list[dict[str, Any]], source: str) -> dict[str, Any]:
    summary = summarize(records)
    data = summary_json(summary, source=source)
    for group, entry in zip(summary.groups, data["groups"], strict=True):
        entry["walls"] = list(group.walls)
    data["schema"] = PUBLISHED_SCHEMA
    data["note"] = ("Medians of kiln bench runs, n beside each. Fleet runs (throughput under "
                    "contention) are never in here.")
    safe: dict[str, Any] = json_safe(data)
    return safe


def publish_bench(store_path: Path, *, repo: Path, branch: str, push: bool) -> BenchPublishResult:
    if push:
        require_remote(repo)
    # A missing store would publish an empty page over the real one (a typo in --store).
    if not store_path.exists():
        raise UsageError(
            f"No results store at {store_path}: nothing to publish.",
            hint="Give --store the results store kiln bench appends to (default: "
            "$KILN_STATE_HOME/results.jsonl).",
        )
    records, warnings = store.read(store_path)
    data = bench_data(records, store_path.name)
    # Only the store's name, as in "store": the branch is public, the home directory not.
    data["warnings"] = [w.replace(f"{store_path}: ", f"{store_path.name}: ", 1)
                        for w in warnings]
    summary = summarize(records)
    with docs_worktree(repo, branch) as worktree:
        worktree.write_text(f"{BENCH_DIR}/{BENCH_JSON}",
                            json.dumps(data, indent=2, sort_keys=True, allow_nan=False) + "\n")
        worktree.write_text(f"{BENCH_DIR}/index.html",
                            render_html(summary, source=store_path.name))
        commit = worktree.commit(f"Publish bench results ({len(records)} records)")
        if push:
            worktree.push()
        return BenchPublishResult(branch, f"{BENCH_DIR}/", commit, push, len(records),
                                  worktree.created_branch)
